"""Issue 10 item 14: a `by: [event_type]` instance is measured, and its message detailed,
for its own event type by equality, even when the type holds the LIKE characters `%` and
`_` (real Postgres, the local Slack sink)."""

from outbox_monitor.alerts.evaluate import Evaluator
from outbox_monitor.alerts.measure import measure, offenders
from outbox_monitor.alerts.receivers import transports_for
from outbox_monitor.alerts.sender import deliver_due
from tests.alerting import notifications

RULES = """
version: 1
defaults: {interval: 30s, for: 0s, keep_firing_for: 0s}
routes:
  oncall: {webhook_url_env: SLACK_WEBHOOK_URL}
rules:
  - name: failed-by-type
    metric: failed_in_window
    window: 15m
    by: [event_type]
    op: ">"
    threshold: 0
    route: oncall
    summary: "{{ value }} {{ event_type }} dead-lettered"
  - name: retried-by-type
    metric: attempts_at_least
    attempts: 3
    by: [event_type]
    op: ">"
    threshold: 0
    route: oncall
"""

ODD = "a%b_c"
"""As a LIKE pattern (SPEC §2: `%` a wildcard, `_` literal) it also matches "axb_c"."""
LOOKALIKE = "axb_c"


def add_failures(rows) -> None:
    rows.add(event_type=ODD, status="failed", attempts=10, processed_ago=60, last_error="boom A")
    rows.add(
        event_type=LOOKALIKE, status="failed", attempts=10, processed_ago=60, last_error="boom B"
    )


def test_a_by_instance_counts_only_its_own_event_type(db, rows, write_rules):
    ruleset = write_rules(RULES)
    add_failures(rows)

    failed = {m.instance: m.value for m in measure(db, ruleset.rule("failed-by-type"))}
    retried = {m.instance: m.value for m in measure(db, ruleset.rule("retried-by-type"))}

    assert failed == {f"event_type={ODD}": 1, f"event_type={LOOKALIKE}": 1}
    assert retried == {f"event_type={ODD}": 1, f"event_type={LOOKALIKE}": 1}
    details = offenders(db, ruleset.rule("failed-by-type"), event_type=ODD)
    assert [(d["event_type"], d.get("value"), d.get("failed")) for d in details] == [
        (ODD, 1, None),
        (ODD, None, 1),
    ]


def test_the_slack_message_of_the_odd_type_says_1_failed(
    db, conn, rows, fake_clock, write_rules, slack_sink
):
    ruleset = write_rules(RULES)
    add_failures(rows)

    report = Evaluator(db, ruleset, clock=fake_clock).run_once()
    assert report.instance("failed-by-type", f"event_type={ODD}").value == 1
    [firing] = [
        n
        for n in notifications(conn, "failed-by-type")
        if n["dedupe_key"] == f"failed-by-type|event_type={ODD}|1|firing"
    ]
    assert firing["payload"]["value"] == 1
    assert {o["event_type"] for o in firing["payload"]["offenders"]} == {ODD}

    transports = transports_for(ruleset, {"SLACK_WEBHOOK_URL": slack_sink.webhook_url})
    assert deliver_due(db, ruleset, clock=fake_clock, transports=transports)["sent"] == 4
    [message] = slack_sink.messages()  # the four firing instances, grouped (one route)
    sections = {  # by the instance's line (after the "what is wrong" line that opens it)
        line: block["text"]["text"]
        for block in message["blocks"]
        if block["type"] == "section"
        for line in block["text"]["text"].split("\n")
        if line.startswith("🔥 ")
    }
    failed = sections[f"🔥 *failed-by-type* · `event_type={ODD}` · warning"]
    assert f"1 {ODD} dead-lettered\n*Value* 1 vs threshold 0" in failed
    assert f"*Top offenders:* {ODD} — 1\n" in failed
    assert f'*Error groups:* {ODD} — 1 failed: "boom A"' in failed
    assert "boom B" not in failed
    retried = sections[f"🔥 *retried-by-type* · `event_type={ODD}` · warning"]
    assert "*Value* 1 vs threshold 0" in retried
    assert f"*Top offenders:* {ODD} — 1\n" in retried
