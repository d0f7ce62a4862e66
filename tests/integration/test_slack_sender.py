"""The notification sender against the real local SlackSink and the real Postgres.

Notification rows are inserted by hand (the evaluator's shape: dedupe key
``rule|instance|seq|kind``, one ``evaluation_id`` per pass); slack-sdk talks HTTP to
the sink on 127.0.0.1; the sender's clock is a fake that tests move forward, so
backoffs and a one-hour outage take seconds. Failure tests print how many messages
Slack received (run with ``-s``).
"""

import json
import logging
import re
import threading
import uuid
from datetime import UTC, datetime, timedelta

import psycopg
import pytest
from psycopg.types.json import Jsonb

from outbox_monitor.alerts.receivers import transports_for
from outbox_monitor.alerts.route_check import send_test
from outbox_monitor.alerts.rules import RuleSet
from outbox_monitor.alerts.sender import SEND_INTERVAL_SECONDS, deliver_due
from outbox_monitor.alerts.slack import TransportConfigError
from outbox_monitor.demo.slack_sink import SlackSink
from outbox_monitor.export.families import process_families
from outbox_monitor.export.scheduler_status import SchedulerStatus
from tests.alerting import FakeClock, notifications

TIMEOUT = 1.0
QUICK_RETRY = 0.05  # slack-sdk's one retry on a connection error (0.2 s in production)
MENTION = "<!subteam^S0123>"
HOOK_SECRET = "SeCrEtHoOkPaTh0123456789"
BOT_TOKEN = "xoxb-1111-2222-SeCrEtToKeN"
HOSTILE = "<!channel> <@U123> <https://evil.example|click>"

RULES = f"""
version: 1
defaults: {{interval: 30s, for: 0s, keep_firing_for: 2m}}
routes:
  hook:
    webhook_url_env: TEST_HOOK_URL
  bot:
    channel: "#alerts"
    mention: "{MENTION}"
  quiet:
    webhook_url_env: TEST_HOOK_URL
    send_resolved: false
rules:
  - {{name: backlog, metric: queue_depth, op: ">", threshold: 1000, route: hook}}
"""


class Notifications:
    """Inserts notification rows as the evaluator would, and reads them back."""

    def __init__(self, conn: psycopg.Connection, clock: FakeClock) -> None:
        self.conn = conn
        self.clock = clock

    def add(
        self,
        rule: str = "payment-failed",
        instance: str = "event_type=payment.captured",
        kind: str = "firing",
        *,
        route: str = "hook",
        seq: int = 1,
        evaluation: str | None = None,
        available_at: datetime | None = None,
        **payload: object,
    ) -> int:
        body = {
            "rule": rule,
            "instance": instance,
            "severity": "critical",
            "summary": f"{rule} breached",
            "metric": "failed_in_window",
            "op": ">",
            "threshold": 0,
            "value": 3,
            "unit": "rows",
            "since": self.clock().isoformat(),
            "labels": {},
            "offenders": [],
            "runbook_url": None,
            "dashboard_path": "/dead_letters?event_type=payment.captured",
            "kind": kind,
        }
        body.update(payload)
        return self.conn.execute(
            "INSERT INTO outbox_monitor.notifications (dedupe_key, rule, instance, kind, route,"
            " evaluation_id, payload, available_at, created_at)"
            " VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s) RETURNING id",
            (
                f"{rule}|{instance}|{seq}|{kind}",
                rule,
                instance,
                kind,
                route,
                evaluation or str(uuid.uuid4()),
                Jsonb(body),
                available_at or self.clock(),
                self.clock(),
            ),
        ).fetchone()["id"]

    def get(self, row_id: int) -> dict:
        return self.conn.execute(
            "SELECT * FROM outbox_monitor.notifications WHERE id = %s", (row_id,)
        ).fetchone()

    def statuses(self) -> list[tuple[int, str]]:
        return [(n["id"], n["status"]) for n in notifications(self.conn)]


@pytest.fixture
def slack_sink_options() -> dict[str, str]:
    """The shared ``slack_sink`` accepts this module's bot token."""
    return {"token": BOT_TOKEN}


@pytest.fixture
def ruleset(write_rules) -> RuleSet:
    return write_rules(RULES)


@pytest.fixture
def env(slack_sink: SlackSink) -> dict[str, str]:
    return {
        "TEST_HOOK_URL": f"{slack_sink.url}/services/T000/B000/{HOOK_SECRET}",
        "SLACK_BOT_TOKEN": BOT_TOKEN,
        "SLACK_API_URL": slack_sink.api_url,
        "OUTBOX_MONITOR_DASHBOARD_URL": "https://monitor.example.com/ops",
    }


@pytest.fixture
def notes(conn: psycopg.Connection, fake_clock: FakeClock) -> Notifications:
    return Notifications(conn, fake_clock)


@pytest.fixture
def deliver(db, ruleset, env, fake_clock):
    transports = transports_for(ruleset, env, timeout=TIMEOUT, quick_retry_seconds=QUICK_RETRY)

    def run() -> dict:
        return deliver_due(db, ruleset, clock=fake_clock, transports=transports, env=env)

    return run


def posted(sink: SlackSink, via: str | None = None) -> list[dict]:
    return [m for m in sink.messages() if via is None or m["via"] == via]


def sections(message: dict) -> list[str]:
    return [b["text"]["text"] for b in message["blocks"] if b["type"] == "section"]


def message_requests(sink: SlackSink) -> list:
    return [r for r in sink.requests if r.path != "/api/auth.test"]


def print_traffic(label: str, sink: SlackSink) -> None:
    """For ``-s`` runs: message requests Slack received and messages it kept."""
    print(
        f"\n[{label}] requests: {len(message_requests(sink))}, messages posted: {len(posted(sink))}"
    )


# ---------------------------------------------------------------------------- transports


def test_webhook_delivery_packs_one_evaluation_into_one_message(
    deliver, notes, slack_sink, fake_clock
):
    evaluation = str(uuid.uuid4())
    first = notes.add("payment-failed", "event_type=payment.captured", evaluation=evaluation)
    second = notes.add("payment-failed", "event_type=payment.refunded", evaluation=evaluation)
    third = notes.add("backlog", "", evaluation=evaluation, unit="rows", value=1500)
    other = notes.add("stuck-lock", "")  # another evaluation: its own message
    counts = deliver()
    assert counts["sent"] == 4 and counts["messages"] == 2 and counts["attempts"] == 2
    messages = posted(slack_sink)
    assert [m["via"] for m in messages] == ["webhook", "webhook"]
    assert len(sections(messages[0])) == 3
    assert messages[0]["blocks"][0]["text"]["text"] == (
        "🔥 FIRING · 3 alerts · critical · payment-failed, backlog"
    )
    assert "stuck-lock" in messages[1]["text"]
    for row_id in (first, second, third, other):
        row = notes.get(row_id)
        assert row["status"] == "sent"
        assert row["attempts"] == 1 and row["last_status"] == 200
        assert row["last_error"] is None and row["slack_ts"] is None
        assert row["sent_at"] == fake_clock()
    assert deliver()["attempts"] == 0  # nothing due twice
    assert len(posted(slack_sink)) == 2


def test_a_firing_line_sent_while_held_open_says_so(deliver, notes, conn, slack_sink, fake_clock):
    # the firing of episode 1 is delivered late: the instance is back within its threshold
    # since 40 s ago and keep_firing_for (120 s) holds it open
    notes.add(
        "backlog", "", unit="rows", value=1500, threshold=1000, firing_seq=1, keep_firing_for=120
    )
    cleared = fake_clock() - timedelta(seconds=40)
    conn.execute(
        "INSERT INTO outbox_monitor.alert_instances (rule, instance, state, firing_seq,"
        " cleared_since) VALUES ('backlog', '', 'firing', 1, %s)",
        (cleared,),
    )
    assert deliver()["sent"] == 1
    [text] = sections(posted(slack_sink)[0])
    # Slack's date formatting: each reader's own time zone, the UTC text as its fallback
    utc = cleared.astimezone(UTC)
    when = (
        f"<!date^{int(utc.timestamp())}^{{date_short_pretty}} {{time}}|{utc:%Y-%m-%d %H:%M:%S} UTC>"
    )
    assert (
        f"Back within the threshold, held by keep_firing_for 2m: clear since {when} (40s ago)"
        in text
    )


def test_bot_resolve_updates_the_original_and_replies_in_its_thread(deliver, notes, slack_sink):
    evaluation = str(uuid.uuid4())
    captured = notes.add(instance="event_type=payment.captured", route="bot", evaluation=evaluation)
    refunded = notes.add(instance="event_type=payment.refunded", route="bot", evaluation=evaluation)
    assert deliver()["messages"] == 1
    (original,) = posted(slack_sink)
    assert original["via"] == "api" and original["channel"].startswith("C")
    assert sections(original)[0].startswith(MENTION + " 🔥 *payment-failed*")
    for row_id in (captured, refunded):
        row = notes.get(row_id)
        assert (row["slack_channel"], row["slack_ts"]) == (original["channel"], original["ts"])

    resolve = notes.add(instance="event_type=payment.captured", kind="resolved", route="bot")
    counts = deliver()
    assert (counts["sent"], counts["messages"], counts["updates"]) == (1, 1, 1)
    original, reply = posted(slack_sink)
    assert original["edits"] == 1
    assert original["blocks"][0]["text"]["text"] == "🔥 FIRING · 1 of 2 resolved · payment-failed"
    assert sections(original)[0].startswith("✅ *payment-failed* · `event_type=payment.captured`")
    assert reply["thread_ts"] == original["ts"] and reply["channel"] == original["channel"]
    assert reply["blocks"][0]["text"]["text"] == "✅ RESOLVED · payment-failed"
    assert MENTION not in json.dumps(reply)  # a resolve pings nobody
    row = notes.get(resolve)
    assert row["status"] == "sent" and row["slack_ts"] == original["ts"]

    notes.add(instance="event_type=payment.refunded", kind="resolved", route="bot")
    deliver()
    original, _, second_reply = posted(slack_sink)
    assert original["edits"] == 2
    assert original["blocks"][0]["text"]["text"] == "✅ RESOLVED · payment-failed"
    assert second_reply["thread_ts"] == original["ts"]
    updates = [r for r in slack_sink.requests if r.path == "/api/chat.update"]
    print(
        f"\n[bot resolve] messages posted: {len(posted(slack_sink))}, "
        f"chat.update calls: {len(updates)}"
    )
    assert len(updates) == 2


def test_an_evaluation_error_and_the_resolve_thread_under_the_firing_message(
    deliver, notes, slack_sink
):
    notes.add("backlog", "", route="bot", seq=4)
    deliver()
    notes.add("backlog", "", kind="error", route="bot", seq=4, error="statement timeout")
    assert deliver()["updates"] == 1
    original, error_reply = posted(slack_sink)
    assert error_reply["thread_ts"] == original["ts"]
    assert "*Error:* statement timeout" in sections(original)[0]
    assert MENTION in error_reply["text"]  # an evaluation error pages like a firing
    notes.add("backlog", "", kind="resolved", route="bot", seq=4, value=10)
    deliver()
    original, _, resolve_reply = posted(slack_sink)
    assert resolve_reply["thread_ts"] == original["ts"]
    assert original["blocks"][0]["text"]["text"] == "✅ RESOLVED · backlog"
    assert original["edits"] == 2


def test_webhook_resolve_is_posted_as_a_new_message(deliver, notes, slack_sink):
    notes.add()
    deliver()
    notes.add(kind="resolved", value=0)
    deliver()
    firing, resolved = posted(slack_sink)
    assert firing["edits"] == 0
    assert resolved["blocks"][0]["text"]["text"] == "✅ RESOLVED · payment-failed"
    assert "*Value now* 0 vs threshold 0 (&gt;)" in sections(resolved)[0]


def test_send_resolved_false_suppresses_resolves(deliver, notes, slack_sink):
    firing = notes.add(route="quiet")
    deliver()
    resolve = notes.add(route="quiet", kind="resolved")
    counts = deliver()
    assert counts["suppressed"] == 1 and counts["messages"] == 0
    assert notes.get(firing)["status"] == "sent"
    row = notes.get(resolve)
    assert row["status"] == "suppressed" and "send_resolved: false" in row["last_error"]
    assert len(posted(slack_sink)) == 1


def test_due_ness_follows_the_injected_clock_not_the_database(db, ruleset, env, slack_sink, conn):
    clock = FakeClock(datetime.now(UTC) - timedelta(hours=1))
    notes = Notifications(conn, clock)
    row_id = notes.add(available_at=datetime.now(UTC))  # due for the database, not the clock
    transports = transports_for(ruleset, env, timeout=TIMEOUT)
    counts = deliver_due(db, ruleset, clock=clock, transports=transports, env=env)
    assert counts["attempts"] == 0 and counts["waiting"] == 1
    clock.advance(3601)
    assert deliver_due(db, ruleset, clock=clock, transports=transports, env=env)["sent"] == 1
    assert notes.get(row_id)["status"] == "sent"


# ---------------------------------------------------------------------------- failures


def test_429_waits_for_retry_after_then_sends_once(deliver, notes, slack_sink, fake_clock):
    start = fake_clock()
    row_id = notes.add()
    slack_sink.fail_next(1, status=429, retry_after=120)
    counts = deliver()
    assert counts["rate_limited"] == 1 and counts["sent"] == 0
    row = notes.get(row_id)
    assert row["status"] == "pending" and row["attempts"] == 1 and row["last_status"] == 429
    assert row["available_at"] == start + timedelta(seconds=120)
    assert "Retry-After 120 s" in row["last_error"]
    fake_clock.advance(119)
    assert deliver()["attempts"] == 0  # not sent before Retry-After
    assert len(message_requests(slack_sink)) == 1
    fake_clock.advance(1)
    assert deliver()["sent"] == 1
    assert deliver()["attempts"] == 0
    row = notes.get(row_id)
    assert row["status"] == "sent" and row["attempts"] == 2 and row["last_status"] == 200
    print_traffic("429", slack_sink)
    assert len(posted(slack_sink)) == 1 and len(message_requests(slack_sink)) == 2


def test_5xx_is_retried_at_the_next_pass_then_delivered_once(
    deliver, notes, slack_sink, fake_clock
):
    start = fake_clock()
    row_id = notes.add(route="bot")
    slack_sink.fail_next(2, status=500)
    assert deliver()["retrying"] == 1
    first_retry = notes.get(row_id)["available_at"]
    retry_delay = first_retry - start
    assert timedelta(0) < retry_delay <= timedelta(seconds=SEND_INTERVAL_SECONDS)
    fake_clock.now = first_retry - timedelta(seconds=0.1)
    assert deliver()["attempts"] == 0
    fake_clock.now = first_retry
    assert deliver()["retrying"] == 1
    row = notes.get(row_id)
    assert row["attempts"] == 2 and row["last_status"] == 500
    assert row["available_at"] == first_retry + retry_delay  # no growing backoff
    fake_clock.now = row["available_at"]
    assert deliver()["sent"] == 1
    row = notes.get(row_id)
    assert row["status"] == "sent" and row["attempts"] == 3 and row["slack_ts"]
    print_traffic("5xx", slack_sink)
    assert len(posted(slack_sink)) == 1 and len(message_requests(slack_sink)) == 3


def test_a_hang_times_out_backs_off_then_delivers_once(deliver, notes, slack_sink, fake_clock):
    row_id = notes.add()
    slack_sink.hang_next(1, seconds=3 * TIMEOUT)
    counts = deliver()
    assert counts["retrying"] == 1
    row = notes.get(row_id)
    assert row["status"] == "pending" and row["last_status"] is None
    assert "timed out" in row["last_error"]
    fake_clock.now = row["available_at"]
    assert deliver()["sent"] == 1
    print_traffic("timeout", slack_sink)
    assert len(posted(slack_sink)) == 1 and len(message_requests(slack_sink)) == 2
    assert [r.outcome for r in message_requests(slack_sink)] == ["hung", "posted"]


def test_one_hour_outage_delivers_everything_once_in_order(deliver, notes, slack_sink, fake_clock):
    slack_sink.down()
    expected: list[str] = []
    attempts_during_outage = 0
    for step in range(120):  # one hour in 30 s steps; a new alert every 10 minutes
        if step % 20 == 0:
            name = f"rule-{step // 20:02d}"
            evaluation = str(uuid.uuid4())
            notes.add(name, "event_type=a", evaluation=evaluation)
            notes.add(name, "event_type=b", evaluation=evaluation)
            notes.add(name, "", route="bot", evaluation=evaluation)
            expected.append(name)
        attempts_during_outage += deliver()["attempts"]
        fake_clock.advance(30)
    assert posted(slack_sink) == []
    assert all(status == "pending" for _, status in notes.statuses())
    slack_sink.up()
    passes = 0
    while any(status == "pending" for _, status in notes.statuses()):
        deliver()
        fake_clock.advance(30)
        passes += 1
        assert passes <= 1  # a failed head is due again one send interval later
    webhook = [m["text"] for m in posted(slack_sink, "webhook")]
    bot = [m["text"] for m in posted(slack_sink, "api")]
    assert [re.search(r"rule-\d\d", t).group(0) for t in webhook] == expected
    assert [re.search(r"rule-\d\d", t).group(0) for t in bot] == expected
    assert all("event_type=a" in t and "event_type=b" in t for t in webhook)
    assert all(status == "sent" for _, status in notes.statuses())
    print(
        f"\n[1 h outage] {len(expected) * 3} notifications, {attempts_during_outage} delivery "
        f"attempts during the outage (2 routes), {len(posted(slack_sink))} messages posted "
        f"after it (expected {2 * len(expected)}), {passes} passes to drain"
    )
    assert len(posted(slack_sink)) == 2 * len(expected)
    # head-of-line: only each route's head was tried, once per pass
    assert attempts_during_outage == 2 * 120


def test_a_blocked_route_holds_its_rows_and_others_go_on(deliver, notes, slack_sink):
    head = notes.add(route="hook")
    behind = notes.add("backlog", "", route="hook")
    bot = notes.add("stuck-lock", "", route="bot")
    slack_sink.fail_next(1, status=503)
    counts = deliver()
    assert counts["retrying"] == 1 and counts["waiting"] == 1 and counts["sent"] == 1
    assert [notes.get(i)["status"] for i in (head, behind, bot)] == ["pending", "pending", "sent"]
    assert notes.get(behind)["attempts"] == 0
    webhook_requests = [r for r in slack_sink.requests if r.path.startswith("/services/")]
    print(
        f"\n[blocked route] webhook requests: {len(webhook_requests)}, "
        f"posted: {len(posted(slack_sink))}"
    )
    assert len(webhook_requests) == 1


def test_permanent_errors_fail_the_row_and_the_route_goes_on(deliver, notes, slack_sink):
    bad = notes.add()
    good = notes.add("backlog", "")
    slack_sink.fail_next(1, status=400)
    counts = deliver()
    assert counts["failed"] == 1 and counts["sent"] == 1
    row = notes.get(bad)
    assert row["status"] == "failed" and row["last_status"] == 400
    assert "invalid_payload" in row["last_error"]
    assert notes.get(good)["status"] == "sent"
    assert deliver()["attempts"] == 0  # a failed row is not retried
    print_traffic("400", slack_sink)
    assert len(posted(slack_sink)) == 1


def test_a_webhook_200_without_ok_is_retried_like_a_5xx_not_counted_sent(
    deliver, notes, slack_sink, fake_clock
):
    """Issue 29 item 6: a proxy's page answered with HTTP 200 is no delivery."""
    row_id = notes.add()
    slack_sink.fail_next(1, status=200, error="<html><title>Sign in to the proxy</title></html>")
    counts = deliver()
    assert counts["sent"] == 0 and counts["retrying"] == 1
    row = notes.get(row_id)
    assert row["status"] == "pending" and row["last_status"] == 200
    assert "without the body 'ok'" in row["last_error"]
    fake_clock.now = row["available_at"]
    assert deliver()["sent"] == 1
    assert notes.get(row_id)["attempts"] == 2
    assert len(posted(slack_sink)) == 1 and len(message_requests(slack_sink)) == 2


def test_a_workflow_webhooks_json_ok_counts_sent_and_is_not_posted_again(
    deliver, notes, slack_sink
):
    """A Slack workflow's webhook answers HTTP 200 ``{"ok": true}``: the message was taken, and
    a retry would post it a second time (the hostile pass of issue 29 saw it retried for ever)."""
    row_id = notes.add()
    slack_sink.fail_next(1, status=200, error='{"ok": true}')
    counts = deliver()
    assert counts["sent"] == 1 and counts["retrying"] == 0
    row = notes.get(row_id)
    assert row["status"] == "sent" and row["attempts"] == 1
    assert deliver()["attempts"] == 0
    assert len(message_requests(slack_sink)) == 1


@pytest.mark.parametrize(
    ("status", "answer"),
    [
        (200, "no_service"),
        (404, "no_service"),
        (410, "channel_is_archived"),
        (403, "invalid_token"),
        (200, "posting_to_general_channel_denied"),
        (403, "action_prohibited"),
    ],
)
def test_a_permanent_webhook_answer_fails_at_once_and_the_route_goes_on(
    db, ruleset, env, notes, slack_sink, fake_clock, caplog, status, answer
):
    """Issue 29 item 6: Slack's permanent answers fail the message in one attempt, the
    route's next message goes in the same pass; an ERROR names the route and the answer;
    ``/metrics`` counts it by route and answer."""
    transports = transports_for(ruleset, env, timeout=TIMEOUT, quick_retry_seconds=QUICK_RETRY)
    status_of = SchedulerStatus()
    dead = notes.add()
    behind = notes.add("backlog", "")
    slack_sink.fail_next(1, status=status, error=answer)
    with caplog.at_level(logging.ERROR, logger="outbox_monitor.alerts.sender"):
        counts = deliver_due(
            db,
            ruleset,
            clock=fake_clock,
            transports=transports,
            env=env,
            on_refused=status_of.refused,
        )
    assert counts["failed"] == 1 and counts["sent"] == 1 and counts["attempts"] == 2
    row = notes.get(dead)
    assert row["status"] == "failed" and row["attempts"] == 1 and row["last_status"] == status
    assert answer in row["last_error"]
    assert notes.get(behind)["status"] == "sent"
    errors = [r.getMessage() for r in caplog.records if r.levelno == logging.ERROR]
    assert len(errors) == 1 and "route hook" in errors[0] and f"answered {answer}" in errors[0]
    assert status_of.refusal_counts() == {("hook", answer): 1}
    family = next(
        f for f in process_families(status_of) if f.name == "outbox_monitor_slack_refused"
    )
    assert [(s.labels, s.value) for s in family.samples if s.name.endswith("_total")] == [
        ({"route": "hook", "answer": answer}, 1.0)
    ]
    fake_clock.advance(3600)
    assert (
        deliver_due(db, ruleset, clock=fake_clock, transports=transports, env=env)["attempts"] == 0
    )  # never retried
    assert len(posted(slack_sink)) == 1


def test_no_secret_in_last_error_or_logs(db, ruleset, slack_sink, notes, fake_clock, caplog):
    caplog.set_level(logging.DEBUG)
    env = {
        "TEST_HOOK_URL": f"{slack_sink.url}/services/T000/B000/{HOOK_SECRET}",
        "SLACK_BOT_TOKEN": BOT_TOKEN + "-wrong",
        "SLACK_API_URL": slack_sink.api_url,
    }
    transports = transports_for(ruleset, env, timeout=TIMEOUT, quick_retry_seconds=QUICK_RETRY)
    hook = notes.add("backlog", "", route="hook")
    refused = [notes.add(route="bot"), notes.add("stuck-lock", "", route="bot")]
    # Slack echoing the webhook's secret path in an error body: redacted.
    slack_sink.fail_next(1, status=500, error=f"boom {HOOK_SECRET}")
    deliver_due(db, ruleset, clock=fake_clock, transports=transports, env=env)
    assert notes.get(hook)["last_error"].endswith("HTTP 500 boom <redacted>")
    for row_id in refused:  # the wrong token: invalid_auth, failed for good
        row = notes.get(row_id)
        assert row["status"] == "failed" and "invalid_auth" in row["last_error"]

    env["SLACK_BOT_TOKEN"] = BOT_TOKEN
    transports = transports_for(ruleset, env, timeout=TIMEOUT, quick_retry_seconds=QUICK_RETRY)
    bot = notes.add("latency-slo", "", route="bot")
    slack_sink.fail_next(2, status=500, error=f"boom {HOOK_SECRET} {BOT_TOKEN}")
    fake_clock.advance(600)
    deliver_due(db, ruleset, clock=fake_clock, transports=transports, env=env)
    assert notes.get(bot)["last_error"].endswith("HTTP 500 boom <redacted> <redacted>")
    slack_sink.down()
    fake_clock.advance(600)
    deliver_due(db, ruleset, clock=fake_clock, transports=transports, env=env)
    slack_sink.up()
    errors = [notes.get(i)["last_error"] for i in (hook, *refused, bot)]
    assert "ConnectionRefusedError" in errors[0] and "ConnectionRefusedError" in errors[-1]

    env["SLACK_BOT_TOKEN"] = BOT_TOKEN + "-wrong"
    transports = transports_for(ruleset, env, timeout=TIMEOUT)
    outcomes = send_test(db, ruleset, "bot", requested_by="t", transports=transports, env=env)
    assert outcomes["bot"]["ok"] is False and "invalid_auth" in outcomes["bot"]["error"]
    assert "not delivered" in caplog.text
    text = caplog.text + json.dumps(errors) + json.dumps(outcomes)
    for secret in (HOOK_SECRET, "SeCrEtToKeN", BOT_TOKEN):
        assert secret not in text
    assert transports["hook"].describe() == f"incoming webhook {slack_sink.url}/<redacted>"


def test_a_row_locked_by_another_sender_is_skipped(deliver, notes, slack_sink, dsn):
    row_id = notes.add()
    with psycopg.connect(dsn) as other, other.transaction():
        other.execute(
            "SELECT id FROM outbox_monitor.notifications WHERE id = %s FOR UPDATE", (row_id,)
        )
        assert deliver()["sent"] == 0
    assert posted(slack_sink) == []
    assert deliver()["sent"] == 1
    assert len(posted(slack_sink)) == 1


def test_two_senders_at_once_send_each_row_once(db, ruleset, env, notes, slack_sink, fake_clock):
    for i in range(6):
        notes.add(f"rule-{i}", "", route="hook" if i % 2 else "bot")
    transports = transports_for(ruleset, env, timeout=TIMEOUT)
    barrier = threading.Barrier(2)
    results: list[dict] = []

    def sender() -> None:
        barrier.wait()
        results.append(deliver_due(db, ruleset, clock=fake_clock, transports=transports, env=env))

    threads = [threading.Thread(target=sender) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    while any(status == "pending" for _, status in notes.statuses()):
        deliver_due(db, ruleset, clock=fake_clock, transports=transports, env=env)
    print(f"\n[two senders] messages posted: {len(posted(slack_sink))} for 6 notifications")
    assert sorted(re.search(r"rule-\d", m["text"]).group(0) for m in posted(slack_sink)) == [
        f"rule-{i}" for i in range(6)
    ]


# ---------------------------------------------------------------------------- content


def test_mention_injection_arrives_escaped(deliver, notes, slack_sink):
    evaluation = str(uuid.uuid4())
    notes.add(
        "payment-failed",
        f"event_type={HOSTILE}",
        route="bot",
        evaluation=evaluation,
        summary=f"dead letters in {HOSTILE}",
        offenders=[{"event_type": HOSTILE, "count": 4, "last_error": HOSTILE}],
    )
    notes.add(
        "latency-slo",
        "",
        kind="error",
        route="bot",
        evaluation=evaluation,
        error=f"column {HOSTILE} missing",
    )
    assert deliver()["messages"] == 1
    # as posted: the sink's own history of each version (``versions``) repeats the text
    body = json.dumps([{k: v for k, v in m.items() if k != "versions"} for m in posted(slack_sink)])
    for raw in ("<!channel>", "<@U123>", "<https://evil"):
        assert raw not in body
    assert "&lt;!channel&gt;" in body and "&lt;@U123&gt;" in body
    assert "&lt;https://evil.example|click&gt;" in body
    assert body.count(MENTION) == 2  # the first section and the fallback text


def test_an_over_long_error_text_is_delivered_within_limits(deliver, notes, slack_sink):
    huge = "psycopg.errors.QueryCanceled: <canceling statement> & " * 2000
    row_id = notes.add("latency-slo", "", kind="error", route="bot", error=huge, summary=huge)
    deliver()
    assert notes.get(row_id)["status"] == "sent"  # the slack_sink refuses what Slack refuses
    (message,) = posted(slack_sink)
    assert all(len(s) <= 3000 for s in sections(message))
    assert len(message["text"]) <= 40_000
    assert "…" in sections(message)[0]


def test_the_dashboard_link_carries_the_pre_filter(deliver, notes, slack_sink):
    notes.add(dashboard_path="/dead_letters?event_type=payment.captured&group=7f3a")
    deliver()
    (message,) = posted(slack_sink)
    button = message["blocks"][1]["accessory"]
    assert button["url"] == (
        "https://monitor.example.com/ops/dead_letters?event_type=payment.captured&group=7f3a"
    )


def test_send_test_posts_to_every_route(db, ruleset, env, slack_sink):
    transports = transports_for(ruleset, env, timeout=TIMEOUT)
    outcomes = send_test(db, ruleset, requested_by="t", transports=transports, env=env)
    assert set(outcomes) == {"hook", "bot", "quiet"}
    assert all(outcome["ok"] for outcome in outcomes.values())
    assert outcomes["bot"]["ts"] == posted(slack_sink, "api")[0]["ts"]
    assert posted(slack_sink, "api")[0]["text"].startswith(MENTION)
    with pytest.raises(TransportConfigError, match='no route "nope"'):
        send_test(db, ruleset, "nope", requested_by="t", transports=transports, env=env)


def test_a_route_without_its_variable_waits_and_the_others_deliver(
    db, ruleset, slack_sink, notes, fake_clock, caplog
):
    env = {
        "TEST_HOOK_URL": slack_sink.webhook_url,
        "OUTBOX_MONITOR_SLACK_TIMEOUT": "1",
    }
    bot = notes.add(route="bot")
    hook = notes.add("backlog", "", route="hook")
    counts = deliver_due(db, ruleset, clock=fake_clock, env=env)
    assert counts["sent"] == 1 and counts["waiting"] == 1
    assert notes.get(hook)["status"] == "sent"
    row = notes.get(bot)
    assert row["status"] == "pending" and row["attempts"] == 0
    assert "channel #alerts needs SLACK_BOT_TOKEN, which is not set" in caplog.text


def test_missing_slack_variables_are_named(ruleset):
    with pytest.raises(TransportConfigError) as caught:
        transports_for(ruleset, {})
    message = str(caught.value)
    assert 'route "hook": webhook_url_env names TEST_HOOK_URL, which is not set' in message
    assert 'route "bot": channel #alerts needs SLACK_BOT_TOKEN, which is not set' in message
