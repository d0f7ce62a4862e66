"""The dashboard on real least-privilege logins (issue 4): every page with a login holding
only the viewer grants of ``init-db --print-grants``; a replay through a read-only actions
login says which grant is missing and changes nothing; through an operator login it works
and is audited."""

from pathlib import Path

import psycopg
import pytest
from rendered import plain

from outbox_monitor.alerts.evaluate import Evaluator
from outbox_monitor.alerts.rules_file import RULES_ENV, load_rules
from tests.least_privilege import Logins

ACTOR = "ui-test"  # tests/ui/conftest.py's OUTBOX_MONITOR_ACTOR
RULES = """
version: 1
defaults: {interval: 30s, for: 0s, keep_firing_for: 0s}
routes:
  oncall: {webhook_url_env: SLACK_WEBHOOK_URL}
rules:
  - {name: backlog, metric: queue_depth, op: ">", threshold: 1, route: oncall}
"""


@pytest.fixture
def seeded(rows, db, environment, tmp_path: Path) -> dict[str, int]:
    """Rows for every page (2 due pending, 1 stuck lock, 1 dead letter), and one rule
    evaluated as the table's owner so that the Alerts page has a firing instance."""
    ids = {
        "pending": rows.add(created_ago=120),
        "pending2": rows.add(created_ago=60),
        "stuck": rows.add(status="processing", created_ago=3600, locked_ago=30 * 60),
        "failed": rows.add(
            event_type="invoice.sent",
            status="failed",
            attempts=10,
            processed_ago=300,
            last_error="HTTP 500 upstream",
        ),
    }
    path = tmp_path / "alerts.yml"
    path.write_text(RULES)
    environment.setenv(RULES_ENV, str(path))
    Evaluator(db, load_rules(path)).run_once()
    return ids


def read_only(environment, dsn: str, logins: Logins, *, actions: str | None = None) -> None:
    environment.setenv("OUTBOX_MONITOR_DSN", logins.dsn(dsn, logins.read))
    if actions is not None:
        environment.setenv("OUTBOX_MONITOR_ACTIONS_DSN", logins.dsn(dsn, actions))


def texts(at) -> str:
    kinds = ("markdown", "caption", "success", "info", "warning", "error")
    return "\n".join(plain(e.value) for kind in kinds for e in getattr(at, kind))


def test_every_page_renders_its_figures_with_the_read_login(
    open_page, environment, dsn, logins, seeded
):
    read_only(environment, dsn, logins)

    overview = open_page("overview")
    events = open_page("events")
    dead_letters = open_page("dead_letters")
    alerts = open_page("alerts")
    actions = open_page("actions")
    controls = open_page("controls")

    for at in (overview, events, dead_letters, alerts, actions, controls):
        assert not at.exception
        assert not at.error, [e.value for e in at.error]
    tiles = {m.label: m.value for m in overview.metric}
    assert (tiles["Queue depth"], tiles["Stuck locks"], tiles["Failed (24 h)"]) == ("2", "1", "1")
    listed = {int(i) for i in events.dataframe(key="events.table").value["id"]}
    assert listed == set(seeded.values())
    groups = dead_letters.dataframe[0].value
    assert list(groups["failed"]) == [1]
    states = alerts.dataframe[0].value.to_dict("records")
    assert [(s["rule"], s["state"], s["value"]) for s in states] == [("backlog", "FIRING", "2")]
    stuck_sample = actions.dataframe[0].value
    assert [int(i) for i in stuck_sample["id"]] == [seeded["stuck"]]


def replay_failed_row(open_page):
    """The Actions page's replay of every failed row: preview, then confirm."""
    at = open_page("actions", event_type="%")
    at.button(key="actions.replay.preview_button").click().run()
    assert any("**1** row would be replayed" in m.value for m in at.markdown), texts(at)
    return at.button(key="actions.replay.confirm").click().run()


def test_a_replay_through_a_read_only_actions_login_names_the_missing_grant(
    open_page, environment, dsn, logins, seeded, rows
):
    read_only(environment, dsn, logins, actions=logins.read)

    at = replay_failed_row(open_page)

    assert not at.exception
    (banner,) = at.error
    assert plain(banner.value).startswith("**Permission denied** — ")
    assert "lacks EXECUTE on function outbox_monitor.replay__public__integration_outbox" in plain(
        banner.value
    )
    assert f'"{logins.read}"' in plain(banner.value)
    hint = " ".join(i.value for i in at.info)
    assert "OUTBOX_MONITOR_ACTIONS_DSN" in hint and "outbox_operator" in hint
    assert "outbox-monitor init-db --print-grants" in hint
    assert rows.get(seeded["failed"])["status"] == "failed"
    with psycopg.connect(dsn) as owner:
        assert owner.execute("SELECT count(*) FROM outbox_monitor.audit_log").fetchone()[0] == 0


def test_without_an_actions_dsn_the_hint_first_suggests_an_operator_login(
    open_page, environment, dsn, logins, seeded, rows
):
    read_only(environment, dsn, logins)

    at = replay_failed_row(open_page)

    assert not at.exception
    assert "lacks EXECUTE on function outbox_monitor.replay__public__integration_outbox" in plain(
        at.error[0].value
    )
    hint = " ".join(i.value for i in at.info)
    assert hint.startswith(
        "Point OUTBOX_MONITOR_ACTIONS_DSN at an operator login (a member of outbox_operator)"
    ), hint
    assert hint.index("OUTBOX_MONITOR_ACTIONS_DSN") < hint.index("Otherwise make the role")
    assert "outbox-monitor init-db --print-grants" in hint
    assert rows.get(seeded["failed"])["status"] == "failed"


def test_the_same_replay_through_the_operator_login_is_applied_and_audited(
    open_page, environment, dsn, logins, seeded, rows
):
    read_only(environment, dsn, logins, actions=logins.actions)

    at = replay_failed_row(open_page)

    assert not at.exception and not at.error
    assert any("Replayed 1 row" in s.value for s in at.success)
    row = rows.get(seeded["failed"])
    assert (row["status"], row["attempts"]) == ("pending", 0)
    with psycopg.connect(dsn) as owner:
        audit = owner.execute(
            "SELECT actor, action, affected_ids FROM outbox_monitor.audit_log"
        ).fetchall()
    assert audit == [(ACTOR, "replay", [seeded["failed"]])]


def test_a_refused_reap_is_shown_in_its_flow_and_the_next_run_renders_normally(
    open_page, environment, dsn, logins, seeded, rows
):
    read_only(environment, dsn, logins, actions=logins.read)
    at = open_page("actions")
    assert any("**1** row would be reaped" in m.value for m in at.markdown), texts(at)

    at.button(key="actions.reap.confirm").click().run()

    assert not at.exception
    reap, replay, prune, audit = at.tabs
    (banner,) = reap.error
    assert plain(banner.value).startswith("**Permission denied** — ")
    assert "OUTBOX_MONITOR_ACTIONS_DSN" in " ".join(i.value for i in reap.info)
    assert not at.get("progress")  # no "reap…" bar left behind
    assert replay.button(key="actions.replay.preview_button")
    assert prune.button(key="actions.prune.preview_button")
    assert audit.caption[0].value == "No action has been taken yet."
    assert rows.get(seeded["stuck"])["status"] == "processing"

    at.run()  # the next run: the preview was dropped, the stuck lock is listed afresh

    assert not at.exception and not at.error, texts(at)
    assert any("**1** row would be reaped" in m.value for m in at.markdown), texts(at)
    assert at.button(key="actions.prune.preview_button")
