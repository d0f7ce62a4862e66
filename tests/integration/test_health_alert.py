"""An xmin horizon held too long is alerted (issue 14 item 1): a session left idle in a
transaction breaks a rule on ``xmin_horizon_age``, which fires after its ``for`` (the fake
clock) with exactly one Slack message naming the session, its application and the command
that ends it, linking to the Health page; ending the session resolves it."""

import json
import re
import time

from outbox_monitor.alerts.evaluate import Evaluator
from outbox_monitor.alerts.receivers import transports_for
from outbox_monitor.alerts.sender import deliver_due
from tests.alerting import notifications
from tests.health import idle_in_transaction

WAIT_SECONDS = 1.5
RULES = """
version: 1
defaults: {interval: 30s, for: 0s, keep_firing_for: 0s}
routes:
  oncall: {webhook_url_env: SLACK_WEBHOOK_URL, repeat_interval: 1h, send_resolved: true}
rules:
  - name: xmin-horizon-held
    metric: xmin_horizon_age
    op: ">"
    threshold: 1s
    for: 5m
    severity: warning
    route: oncall
    summary: "The xmin horizon has been held for {{ value }}"
"""


def test_a_held_horizon_fires_after_for_names_its_holder_and_resolves_when_it_ends(
    db, dsn, conn, fake_clock, write_rules, slack_sink
):
    ruleset = write_rules(RULES)
    evaluator = Evaluator(db, ruleset, clock=fake_clock)
    transports = transports_for(ruleset, {"SLACK_WEBHOOK_URL": slack_sink.webhook_url})

    def deliver() -> dict:
        return deliver_due(db, ruleset, clock=fake_clock, transports=transports)

    assert evaluator.run_once().instance("xmin-horizon-held").state == "inactive"
    with idle_in_transaction(dsn, "forgotten-report") as pid:
        time.sleep(WAIT_SECONDS)
        report = evaluator.run_once()
        assert report.instance("xmin-horizon-held").transitions == ("inactive→pending",)
        assert report.instance("xmin-horizon-held").value >= WAIT_SECONDS
        fake_clock.advance(299)
        assert evaluator.run_once().instance("xmin-horizon-held").state == "pending"
        fake_clock.advance(1)  # breached for exactly `for`
        report = evaluator.run_once()
        assert report.instance("xmin-horizon-held").transitions == ("pending→firing",)
        [firing] = notifications(conn, "xmin-horizon-held")
        payload = firing["payload"]
        assert payload["dashboard_path"] == "/health" and payload["unit"] == "seconds"
        assert payload["value"] >= WAIT_SECONDS
        [holder] = [o for o in payload["offenders"] if "forgotten-report" in o["label"]]
        assert holder["kind"] == "holder"
        assert holder["label"].startswith(f"session pid {pid} (forgotten-report,")
        assert holder["command"] == f"SELECT pg_terminate_backend({pid});"
        assert holder["value"] >= WAIT_SECONDS

        assert deliver()["sent"] == 1
        [message] = slack_sink.messages()
        text = json.dumps(message["blocks"])
        assert "[FIRING] xmin-horizon-held" in message["text"]
        # the plain text (notifications, screen readers) names the holder and its command
        role = conn.execute("SELECT current_user AS role").fetchone()["role"]
        held_by = re.search(
            rf"^Held by session pid {pid} \(forgotten-report, idle in transaction, role "
            rf"{role}\) for (\d\.\d)s; end it with: SELECT pg_terminate_backend\({pid}\);$",
            message["text"],
            re.MULTILINE,
        )
        assert held_by, message["text"]
        assert float(held_by.group(1)) == round(holder["value"], 1)
        assert "*Held by:*" in text and "forgotten-report" in text
        assert f"SELECT pg_terminate_backend({pid});" in text
        assert "/health" in text  # the button opens the Health page

        fake_clock.advance(30)
        evaluator.run_once()  # still held: no second message
        assert deliver()["sent"] == 0
    fake_clock.advance(30)
    report = evaluator.run_once()
    assert report.instance("xmin-horizon-held").transitions == ("firing→inactive",)
    assert deliver()["sent"] == 1
    messages = slack_sink.messages()
    assert len(messages) == 2
    # the value now, what it was while firing; not the firing summary's "held for 0.0s"
    resolved = re.fullmatch(
        r"✅ RESOLVED · xmin-horizon-held\n\[RESOLVED\] xmin-horizon-held: 0\.0s now vs "
        r"threshold 1\.0s \(&gt;\) — xmin_horizon_age was (\d\.\d)s at the last check while "
        r"firing\nDashboard: http://\S+/health",
        messages[1]["text"],
    )
    assert resolved, messages[1]["text"]
    assert float(resolved.group(1)) >= WAIT_SECONDS
    assert "has been held for" not in json.dumps(messages[1]["blocks"])
    assert [n["kind"] for n in notifications(conn, "xmin-horizon-held")] == [
        "firing",
        "resolved",
    ]
