"""Issue 10 item 3: a Slack 429 waits exactly its Retry-After and never feeds the 5xx
backoff; after any outage (429s, 5xx, timeouts, Slack down) delivery resumes within one
send interval (plus the last Retry-After) of Slack recovering.

The sender runs as the scheduler runs it: one pass every ``SEND_INTERVAL_SECONDS`` on the
injected clock (a ``FakeClock`` the test moves), against the real local Slack sink and the
real notification table. The instant of each delivery is the fake clock's at that pass.
"""

import uuid
from datetime import datetime, timedelta

import pytest
from psycopg.types.json import Jsonb

from outbox_monitor.alerts.receivers import transports_for
from outbox_monitor.alerts.sender import SEND_INTERVAL_SECONDS, deliver_due
from outbox_monitor.alerts.slack_outcomes import (
    DEFAULT_RETRY_AFTER_SECONDS,
    MAX_RETRY_AFTER_SECONDS,
)
from outbox_monitor.demo.slack_sink import SlackSink
from tests.alerting import FakeClock

RULES = """
version: 1
defaults: {interval: 30s, for: 0s}
routes:
  hook: {webhook_url_env: TEST_HOOK_URL}
rules:
  - {name: backlog, metric: queue_depth, op: ">", threshold: 1000, route: hook}
"""
TRANSITIONS = 12
"""Queued transitions, one evaluation each (12 Slack messages), as in the issue."""
RETRY_AFTER = 10.0


def queue_transitions(conn, clock: FakeClock, count: int = TRANSITIONS) -> list[int]:
    """``count`` firing notifications of different evaluations (one message each)."""
    ids = []
    for n in range(count):
        payload = {"severity": "critical", "summary": f"rule-{n:02d} breached", "value": n}
        ids.append(
            conn.execute(
                "INSERT INTO outbox_monitor.notifications (dedupe_key, rule, instance, kind, "
                "route, evaluation_id, payload, available_at, created_at) "
                "VALUES (%s, %s, '', 'firing', 'hook', %s, %s, %s, %s) RETURNING id",
                (
                    f"rule-{n:02d}||1|firing",
                    f"rule-{n:02d}",
                    str(uuid.uuid4()),
                    Jsonb(payload),
                    clock(),
                    clock(),
                ),
            ).fetchone()["id"]
        )
    return ids


class Sender:
    """The scheduler's sender job on the fake clock: ``run_until`` makes one pass every
    send interval and notes the clock at each pass that posted something."""

    def __init__(self, db, ruleset, sink: SlackSink, clock: FakeClock) -> None:
        self.db, self.ruleset, self.sink, self.clock = db, ruleset, sink, clock
        env = {"TEST_HOOK_URL": f"{sink.url}/services/T000/B000/SeCrEtHoOk0123456789"}
        self.env = env
        self.transports = transports_for(ruleset, env, timeout=1.0, quick_retry_seconds=0.05)
        self.delivered_at: list[tuple[datetime, int]] = []

    def one_pass(self) -> dict[str, int]:
        counts = deliver_due(
            self.db, self.ruleset, clock=self.clock, transports=self.transports, env=self.env
        )
        if counts["messages"]:
            self.delivered_at.append((self.clock(), counts["messages"]))
        return counts

    def run_until(self, done, max_passes: int = 2000) -> int:
        for passes in range(1, max_passes + 1):
            self.one_pass()
            if done():
                return passes
            self.clock.advance(SEND_INTERVAL_SECONDS)
        pytest.fail(f"not done after {max_passes} passes")


def fault_answers(sink: SlackSink) -> list[tuple[datetime, int | None]]:
    return [(r.at, r.status) for r in sink.requests if r.outcome != "posted"]


def test_429s_then_a_500_delivery_resumes_within_one_send_interval(
    db, conn, write_rules, slack_sink, fake_clock
):
    ruleset = write_rules(RULES)
    ids = queue_transitions(conn, fake_clock)
    slack_sink.fail_next(8, status=429, retry_after=RETRY_AFTER)
    slack_sink.fail_next(1, status=500)
    sender = Sender(db, ruleset, slack_sink, fake_clock)
    retry_at: list[tuple[float, int]] = []  # (seconds after the failed pass, HTTP status)
    recovered_at = None
    for _ in range(200):
        failed_before = len(fault_answers(slack_sink))
        at = fake_clock()
        sender.one_pass()
        if len(fault_answers(slack_sink)) > failed_before:
            head = conn.execute(
                "SELECT available_at, attempts, last_status FROM outbox_monitor.notifications "
                "WHERE id = %s",
                (ids[0],),
            ).fetchone()
            retry_at.append(((head["available_at"] - at).total_seconds(), head["last_status"]))
            if len(fault_answers(slack_sink)) == 9:
                recovered_at = at  # Slack answers normally from the next request on
        if len(slack_sink.messages()) == TRANSITIONS:
            break
        fake_clock.advance(SEND_INTERVAL_SECONDS)
    # every 429 waited exactly its Retry-After; the 500 at most one send interval (the
    # next pass), however many 429s came before it (they grew no backoff)
    assert retry_at[:8] == [(RETRY_AFTER, 429)] * 8
    [(after_500, status)] = retry_at[8:]
    assert status == 500 and 0 < after_500 <= SEND_INTERVAL_SECONDS
    assert recovered_at is not None
    first_delivery, messages = sender.delivered_at[0]
    resumed_after = (first_delivery - recovered_at).total_seconds()
    print(
        f"\n[8 x 429 + 500] delivery resumed {resumed_after:g} s after Slack recovered; "
        f"{messages} of {TRANSITIONS} messages in that pass"
    )
    assert resumed_after <= SEND_INTERVAL_SECONDS
    assert messages == TRANSITIONS
    assert len(slack_sink.messages()) == TRANSITIONS  # each once


@pytest.mark.parametrize("fault", ["5xx", "down", "timeout"])
def test_after_a_long_outage_delivery_resumes_within_one_send_interval(
    db, conn, write_rules, slack_sink, fake_clock, fault
):
    """Ten minutes of 503s, of Slack unreachable, or of Slack not answering: the pass
    after Slack is back delivers everything (no backoff grown to minutes)."""
    ruleset = write_rules(RULES)
    queue_transitions(conn, fake_clock)
    sender = Sender(db, ruleset, slack_sink, fake_clock)
    outage_ends = fake_clock() + timedelta(minutes=10)
    if fault == "down":
        slack_sink.down()
    while fake_clock() < outage_ends:
        if fault == "5xx":
            slack_sink.fail_next(1, status=503)
        elif fault == "timeout":
            slack_sink.hang_next(1, seconds=1.5)
        counts = sender.one_pass()
        assert counts["sent"] == 0
        if fault != "down":
            slack_sink.reset()  # an unused fault must not outlive the outage
        fake_clock.advance(SEND_INTERVAL_SECONDS if fault != "timeout" else 60)
    recovered_at = fake_clock()
    if fault == "down":
        slack_sink.up()
    sender.run_until(lambda: len(slack_sink.messages()) == TRANSITIONS)
    first_delivery, messages = sender.delivered_at[0]
    resumed_after = (first_delivery - recovered_at).total_seconds()
    print(f"\n[10 min {fault}] delivery resumed {resumed_after:g} s after Slack recovered")
    assert resumed_after <= SEND_INTERVAL_SECONDS
    assert messages == TRANSITIONS


@pytest.mark.parametrize(
    ("header", "waited"),
    [
        ("10", 10.0),
        ("inf", DEFAULT_RETRY_AFTER_SECONDS),
        ("1e12", MAX_RETRY_AFTER_SECONDS),
        ("nan", DEFAULT_RETRY_AFTER_SECONDS),
        ("-5", DEFAULT_RETRY_AFTER_SECONDS),
        ("soon", DEFAULT_RETRY_AFTER_SECONDS),
        ("31536000", MAX_RETRY_AFTER_SECONDS),
    ],
)
def test_an_odd_retry_after_is_recorded_and_bounded(
    db, conn, write_rules, slack_sink, fake_clock, caplog, header, waited
):
    """A 429 whose Retry-After is infinite, huge, not a number or negative is recorded
    like any 429 (no exception out of the pass) with the default wait; one of a year waits
    at most MAX_RETRY_AFTER_SECONDS (a WARNING says so); the next pass does not post."""
    ruleset = write_rules(RULES)
    [notification] = queue_transitions(conn, fake_clock, count=1)
    slack_sink.fail_next(1, status=429, retry_after=header)
    sender = Sender(db, ruleset, slack_sink, fake_clock)
    at = fake_clock()

    counts = sender.one_pass()
    fake_clock.advance(SEND_INTERVAL_SECONDS)
    again = sender.one_pass()

    row = conn.execute(
        "SELECT status, attempts, last_status, available_at FROM outbox_monitor.notifications "
        "WHERE id = %s",
        (notification,),
    ).fetchone()
    assert counts["rate_limited"] == 1 and again["attempts"] == 0
    assert (row["status"], row["attempts"], row["last_status"]) == ("pending", 1, 429)
    assert (row["available_at"] - at).total_seconds() == waited
    assert [r.status for r in slack_sink.requests] == [429]
    warned = [
        r.getMessage()
        for r in caplog.records
        if r.levelname == "WARNING" and r.name == "outbox_monitor.alerts.slack"
    ]
    if waited == MAX_RETRY_AFTER_SECONDS:
        assert warned == [
            f"Slack answered 429 with Retry-After {float(header):g} s; waiting at most 3600 s "
            "(MAX_RETRY_AFTER_SECONDS)"
        ]
    elif header != "10":
        assert warned == [
            f"Slack answered 429 with an unusable Retry-After {header!r}; waiting the default 30 s"
        ]
