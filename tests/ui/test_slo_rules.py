"""Overview thresholds come from alerts.yml; a missing or invalid file falls back and says so."""

from pathlib import Path

from streamlit.testing.v1 import AppTest

from outbox_monitor.alerts.rules_file import RULES_ENV, SHIPPED_RULES_PATH, load_rules
from outbox_monitor.ui import slo
from tests.alerting import evaluate_as_scheduler

RULES = """\
version: 1
routes:
  oncall: {webhook_url_env: SLACK_WEBHOOK_URL}
rules:
  - {name: backlog, metric: queue_depth, op: ">=", threshold: 2, route: oncall}
  - {name: my-latency, metric: latency_p95, window: 1h, op: ">", threshold: 90s, route: oncall}
  - {name: notifications-late, metric: oldest_pending_age, op: ">", threshold: 1h,
     event_type: "notification.%", route: oncall}
"""


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "alerts.yml"
    path.write_text(text)
    return path


def test_tiles_take_thresholds_from_the_rules_file(tmp_path, monkeypatch):
    monkeypatch.setenv(RULES_ENV, str(write(tmp_path, RULES)))
    current = slo.thresholds()
    assert current.error is None
    depth, latency, late, stuck = (
        slo.QUEUE_DEPTH,
        slo.LATENCY_P95,
        slo.OLDEST_PENDING_AGE,
        slo.STUCK_LOCKS,
    )
    assert depth == slo.Slo("queue_depth", 2, "count", ">=", "backlog")
    assert latency == slo.Slo("latency_p95", 90, "duration", ">", "my-latency")  # by metric
    assert (late.limit, late.rule) == (3600, "notifications-late")
    assert stuck == slo.DEFAULTS["stuck_locks"]  # no rule for it: SPEC §3
    assert slo.judge(slo.QUEUE_DEPTH, 2).text == "SLO < 2 breached"
    assert slo.judge(slo.QUEUE_DEPTH, 1).text == "within SLO < 2"
    assert slo.judge(slo.LATENCY_P95, 91).text == "SLO ≤ 90s breached"


def test_shipped_rules_give_the_spec_section_3_thresholds():
    current = slo.thresholds(SHIPPED_RULES_PATH)
    assert current.error is None
    assert {metric: (s.limit, s.op, s.rule) for metric, s in current.slos.items()} == {
        "queue_depth": (1000, ">", "backlog"),
        "oldest_pending_age": (300, ">", "notifications-late"),
        "latency_p95": (120, ">", "latency-slo"),
        "failed_in_window": (0, ">", "payment-failed"),
        "stuck_locks": (0, ">", "stuck-lock"),
        "xmin_horizon_age": (600, ">", "xmin-horizon-held"),  # the health tile (issue 14)
    }


def test_edits_to_the_rules_file_are_picked_up(tmp_path, monkeypatch):
    path = write(tmp_path, RULES)
    monkeypatch.setenv(RULES_ENV, str(path))
    assert slo.QUEUE_DEPTH.limit == 2
    path.write_text(RULES.replace("threshold: 2,", "threshold: 7,"))
    assert slo.QUEUE_DEPTH.limit == 7


def test_invalid_rules_fall_back_to_spec_defaults_with_the_error(tmp_path, monkeypatch):
    path = write(tmp_path, RULES.replace("threshold: 2,", "threshold: lots,"))
    monkeypatch.setenv(RULES_ENV, str(path))
    current = slo.thresholds()
    assert current.slos == slo.DEFAULTS
    assert slo.QUEUE_DEPTH.limit == 1000
    assert current.error == (
        f'{path}: rules[0] "backlog": threshold: expected a number, got "lots"'
    )


def test_missing_rules_file_falls_back_too(tmp_path, monkeypatch):
    monkeypatch.setenv(RULES_ENV, str(tmp_path / "gone.yml"))
    assert slo.thresholds().slos == slo.DEFAULTS
    assert "cannot read the rules file" in slo.thresholds().error


def _banner() -> None:
    from outbox_monitor.ui import slo

    slo.show_rules_problem()


def test_dashboard_banner_shows_the_rules_error(tmp_path, monkeypatch):
    path = write(tmp_path, RULES.replace('op: ">="', 'op: "=>"'))
    monkeypatch.setenv(RULES_ENV, str(path))
    at = AppTest.from_function(_banner).run()
    assert not at.exception
    assert "Alert rules file invalid" in at.warning[0].value
    assert str(path) in at.warning[0].value
    assert (
        at.code[0].value
        == f'{path}: rules[0] "backlog": op: expected one of > >= < <= == !=, got "=>"'
    )

    monkeypatch.setenv(RULES_ENV, str(write(tmp_path, RULES)))
    at = AppTest.from_function(_banner).run()
    assert not at.exception
    assert len(at.warning) == 0 and len(at.code) == 0


def test_overview_badges_follow_the_rules_of_the_file(
    open_page, environment, rows, settings, db, tmp_path
):
    path = write(tmp_path, RULES)
    environment.setenv(RULES_ENV, str(path))
    for _ in range(2):
        rows.add(status="pending", available_ago=5)
    evaluate_as_scheduler(settings, db, load_rules(path))
    at = open_page("overview")
    assert not at.exception
    shown = {m.label: (m.value, m.delta) for m in at.metric}
    assert shown["Queue depth"] == ("2", "FIRING for all types: 2")  # the file's rule
    assert shown["Stuck locks"] == ("0", "no rule watches this")  # none in the file
