"""`outbox-monitor check`, `alerts validate` and `alerts test` (real Postgres, local Slack
sink): exit codes 0/1/2, JSON."""

import json
from pathlib import Path

import psycopg
import pytest
from click.testing import CliRunner

from outbox_monitor.alerts.rules_file import RULES_ENV, SHIPPED_RULES_PATH
from outbox_monitor.cli import main
from outbox_monitor.demo.slack_sink import WEBHOOK_PATH, SlackSink
from tests.alerting import rules_file

ONE_RULE = """\
version: 1
routes:
  oncall: {webhook_url_env: SLACK_WEBHOOK_URL}
rules:
  - name: backlog
    metric: queue_depth
    op: ">"
    threshold: 2
    route: oncall
"""


@pytest.fixture
def cli(dsn, monkeypatch):
    monkeypatch.setenv("OUTBOX_MONITOR_DSN", dsn)
    monkeypatch.delenv(RULES_ENV, raising=False)
    runner = CliRunner()

    def run(*args: str):
        return runner.invoke(main, list(args), catch_exceptions=False)

    return run


def rules_arg(tmp_path: Path, text: str) -> str:
    """``--rules`` for ``text`` written to ``tmp_path/rules.yml``."""
    return str(rules_file(tmp_path, text, "rules.yml"))


def by_rule(payload: dict) -> dict[str, list[tuple]]:
    found: dict[str, list[tuple]] = {}
    for item in payload["rules"]:
        found.setdefault(item["rule"], []).append(
            (item["instance"], item["value"], item["breached"])
        )
    return found


def test_check_on_a_healthy_outbox_exits_0_with_every_rule_in_json(cli, rows):
    rows.add(status="done", created_ago=30, processed_ago=20)
    result = cli("check", "--json", "--rules", str(SHIPPED_RULES_PATH))
    assert result.exit_code == 0, result.output
    payload = json.loads(result.stdout)
    assert (payload["breached"], payload["errors"]) == (0, 0)
    assert by_rule(payload) == {
        "notifications-late": [("", None, False)],  # nothing pending
        "backlog": [("", 0, False)],
        "payment-failed": [(None, None, False)],  # `by` rule, no payment type failed
        "latency-slo": [("", 10, False)],  # one done row, 10 s
        "stuck-lock": [("", 0, False)],
        "breaker-open": [(None, None, False)],  # `by` rule, no breaker defined
        "xmin-horizon-held": [("", 0, False)],  # no other session of this database
        "slot-holds-horizon": [("", 0, False)],
        "vacuum-overdue": [("", 0, False)],  # dead tuples do not outnumber live ones
        "claim-plan-degraded": [("", 0, False)],  # a small table: never degraded
        "no-claim-while-due": [("", 0.0, False)],  # nothing due
    }
    backlog = payload["rules"][1]
    assert backlog == {
        "rule": "backlog",
        "instance": "",
        "metric": "queue_depth",
        "value": 0,
        "threshold": 1000,
        "op": ">",
        "breached": False,
    }


def test_check_exits_1_when_a_rule_is_breached_now_ignoring_for(cli, rows):
    rows.add(event_type="order.paid", status="processing", locked_ago=3600)  # stuck
    rows.add(event_type="payment.captured", status="failed", processed_ago=60)
    rows.add(event_type="payment.captured", status="failed", processed_ago=120)
    rows.add(event_type="payment.refunded", status="failed", processed_ago=60)
    rows.add(event_type="payment.voided", status="failed", processed_ago=3600)  # > 15 min
    rows.add(event_type="notification.email", status="pending", created_ago=200)
    result = cli("check", "--json", "--rules", str(SHIPPED_RULES_PATH))
    assert result.exit_code == 1, result.output
    payload = json.loads(result.stdout)
    found = by_rule(payload)
    assert found["stuck-lock"] == [("", 1, True)]
    assert found["payment-failed"] == [
        ("event_type=payment.captured", 2, True),
        ("event_type=payment.refunded", 1, True),
    ]
    ((instance, age, late),) = found["notifications-late"]
    assert (instance, late) == ("", False) and 200 <= age < 205  # 200 s is within 5 min
    assert (payload["breached"], payload["errors"]) == (3, 0)


def test_check_prints_a_table_and_a_summary(cli, rows, tmp_path):
    for _ in range(3):
        rows.add(status="pending", available_ago=5)
    result = cli("check", "--rules", rules_arg(tmp_path, ONE_RULE))
    assert result.exit_code == 1
    lines = result.stdout.splitlines()
    assert lines[0].split() == ["RULE", "INSTANCE", "VALUE", "CONDITION", "STATE"]
    assert lines[1].split() == ["backlog", "3", ">", "2", "BREACHED"]
    assert lines[2].startswith("1 breached, 0 error(s) — 1 rule(s) from ")


def test_check_uses_outbox_monitor_rules_from_the_environment(cli, rows, tmp_path, monkeypatch):
    rows.add(status="pending", available_ago=5)
    monkeypatch.setenv(RULES_ENV, rules_arg(tmp_path, ONE_RULE))
    payload = json.loads(cli("check", "--json").stdout)
    assert by_rule(payload) == {"backlog": [("", 1, False)]}
    assert payload["file"] == str(tmp_path / "rules.yml")


def test_check_exits_2_on_invalid_rules_before_touching_the_database(cli, tmp_path):
    path = rules_arg(tmp_path, ONE_RULE.replace("threshold: 2", "threshold: abc"))
    result = cli("check", "--rules", path, "--dsn", "postgresql://nobody@127.0.0.1:1/none")
    assert result.exit_code == 2
    assert result.stdout == ""
    assert f'error: {path}: rules[0] "backlog": threshold: expected a number, got "abc"' in (
        result.stderr
    )
    as_json = cli("check", "--json", "--rules", path)
    assert as_json.exit_code == 2
    error = json.loads(as_json.stdout)
    assert error["error"].endswith('threshold: expected a number, got "abc"')
    assert "alerts validate" in error["hint"]


def test_check_exits_2_when_the_database_is_unreachable(cli, tmp_path):
    result = cli(
        "check",
        "--json",
        "--rules",
        rules_arg(tmp_path, ONE_RULE),
        "--dsn",
        "postgresql://nobody@127.0.0.1:1/none?connect_timeout=2",
    )
    assert result.exit_code == 2
    assert "error" in json.loads(result.stdout)


def test_check_exits_2_when_the_outbox_table_is_missing(cli, tmp_path, empty_dsn):
    result = cli("check", "--rules", rules_arg(tmp_path, ONE_RULE), "--dsn", empty_dsn)
    assert result.exit_code == 2
    assert "does not exist" in result.stderr


def test_a_failing_rule_query_is_reported_and_exits_2(cli, dsn, tmp_path, monkeypatch):
    monkeypatch.setenv("OUTBOX_MONITOR_STATEMENT_TIMEOUT", "0.3s")
    with psycopg.connect(dsn) as locker:  # holds the lock until the block ends
        locker.execute("LOCK TABLE integration_outbox IN ACCESS EXCLUSIVE MODE")
        result = cli("check", "--json", "--rules", rules_arg(tmp_path, ONE_RULE))
    assert result.exit_code == 2, result.output
    payload = json.loads(result.stdout)
    assert (payload["breached"], payload["errors"]) == (0, 1)
    (item,) = payload["rules"]
    assert (item["rule"], item["value"], item["breached"]) == ("backlog", None, False)
    assert "statement timeout" in item["error"].lower() or "cancel" in item["error"].lower()


def test_validate_prints_a_summary_or_every_error(cli, tmp_path):
    result = cli("alerts", "validate", "--rules", str(SHIPPED_RULES_PATH))
    assert result.exit_code == 0
    assert result.stdout == (
        f"{SHIPPED_RULES_PATH}: valid — 11 rule(s), 1 route(s): oncall ($SLACK_WEBHOOK_URL); "
        "evaluated every 30s; 3 inhibit entr(ies)\n"
    )
    broken = ONE_RULE.replace('op: ">"', 'op: "=>"').replace("route: oncall", "route: pager")
    path = rules_arg(tmp_path, broken + "    treshold: 3\n")
    result = cli("alerts", "validate", "--rules", path)
    assert result.exit_code == 2
    assert result.stderr.splitlines()[:3] == [
        f'error: {path}: rules[0] "backlog": op: expected one of > >= < <= == !=, got "=>"',
        f'{path}: rules[0] "backlog": treshold: unknown key; did you mean "threshold"? '
        "(allowed: name, metric, window, attempts, event_type, by, op, threshold, predict, for, "
        "keep_firing_for, severity, labels, summary, runbook_url, runbook, route, outboxes)",
        f'{path}: rules[0] "backlog": route: unknown route "pager" (routes: oncall)',
    ]


def test_validate_of_a_missing_file_exits_2(cli, tmp_path):
    result = cli("alerts", "validate", "--rules", str(tmp_path / "nope.yml"))
    assert result.exit_code == 2
    assert "cannot read the rules file" in result.stderr


@pytest.fixture
def sink(slack_sink: SlackSink, monkeypatch: pytest.MonkeyPatch) -> SlackSink:
    """The shared ``slack_sink``, named by ``SLACK_WEBHOOK_URL`` for the CLI."""
    monkeypatch.setenv("SLACK_WEBHOOK_URL", slack_sink.webhook_url)
    return slack_sink


def test_alerts_test_posts_one_message_per_route(cli, sink):
    result = cli("alerts", "test", "--rules", str(SHIPPED_RULES_PATH))
    assert result.exit_code == 0, result.output
    assert result.stdout.startswith("route oncall: test message posted to incoming webhook ")
    assert sink.webhook_url not in result.stdout  # the secret URL is never printed
    assert [(r.path, r.status) for r in sink.requests] == [(WEBHOOK_PATH, 200)]


def test_alerts_test_exits_2_when_slack_refuses(cli, sink):
    sink.fail_next(1, status=500)
    result = cli("alerts", "test", "--json", "--rules", str(SHIPPED_RULES_PATH))
    assert result.exit_code == 2
    payload = json.loads(result.stdout)
    assert payload["failed"] == 1
    assert payload["routes"]["oncall"]["ok"] is False


def test_alerts_test_exits_2_without_the_webhook_variable_or_for_an_unknown_route(cli, monkeypatch):
    monkeypatch.delenv("SLACK_WEBHOOK_URL", raising=False)
    result = cli("alerts", "test", "--rules", str(SHIPPED_RULES_PATH))
    assert result.exit_code == 2
    assert "SLACK_WEBHOOK_URL, which is not set" in result.stderr
    result = cli("alerts", "test", "--rules", str(SHIPPED_RULES_PATH), "--route", "pager")
    assert result.exit_code == 2
    assert 'no route "pager" in the rules file (routes: oncall)' in result.stderr
