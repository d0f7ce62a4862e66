"""Issue 29 items 7 and 8: delivery and health say the truth.

- Item 8: delivery is AT LEAST ONCE. A ``kill -9`` of the leading scheduler while its POST
  is in flight (the local Slack sink posts the message and holds its answer) makes the next
  leader post the same FIRING again: two deliveries carrying the same key, which a
  receiver drops; a resolve and the next episode carry keys of their own.
- Item 7: ``test_writes_failing_*`` below.

Real PostgreSQL, real scheduler processes (``python -m outbox_monitor scheduler``) with the
scheduler role's login, the real local Slack sink on 127.0.0.1.
"""

import os
import signal
import time

import pytest

from outbox_monitor.alerts.evaluate import Evaluator
from outbox_monitor.alerts.message_key import (
    MAX_KEY_CHARS,
    METADATA_EVENT_TYPE,
    alert_key,
    message_key,
    row_message_key,
)
from outbox_monitor.alerts.sender import deliver_due
from outbox_monitor.alerts.slack import transports_for
from outbox_monitor.demo.slack_sink import SlackSink
from tests.alerting import (
    Scheduler,
    drain,
    notifications,
    rules_file,
    stuck_lock_rules,
    subprocess_env,
    wait_for,
)

INTERVAL = 0.5
RULES = stuck_lock_rules(f"{INTERVAL}s")
HOLD_SECONDS = 60.0
"""How long the sink holds its answer to the first POST: far past the kill and takeover."""


def keys_of(message: dict) -> dict:
    """The keys a posted message carries in its Slack metadata."""
    metadata = message.get("metadata") or {}
    assert metadata.get("event_type") == METADATA_EVENT_TYPE
    return metadata["event_payload"]


def test_message_keys_tell_a_repeat_from_a_resolve_and_the_next_episode(
    db, conn, rows, write_rules, fake_clock, slack_sink
):
    ruleset = write_rules(stuck_lock_rules("30s"))
    evaluator = Evaluator(db, ruleset, clock=fake_clock)
    transports = transports_for(ruleset, {"SLACK_WEBHOOK_URL": slack_sink.webhook_url})

    def deliver() -> None:
        assert deliver_due(db, ruleset, clock=fake_clock, transports=transports)["sent"] == 1

    stuck = rows.add(status="processing", created_ago=3600, locked_ago=3600)
    evaluator.run_once()
    deliver()
    drain(conn, [stuck])
    fake_clock.advance(30)
    evaluator.run_once()
    deliver()
    rows.add(status="processing", created_ago=3600, locked_ago=3600)
    fake_clock.advance(30)
    evaluator.run_once()
    deliver()

    firing, resolved, next_firing = notifications(conn, "stuck-lock")
    starts = conn.execute(
        "SELECT id FROM outbox_monitor.alert_transitions WHERE rule = 'stuck-lock'"
        " AND to_state = 'firing' ORDER BY id"
    ).fetchall()
    # the episode is the id of the transition that started it, on every message of it
    assert firing["payload"]["episode"] == starts[0]["id"]
    assert resolved["payload"]["episode"] == starts[0]["id"]
    assert next_firing["payload"]["episode"] == starts[1]["id"]
    sent = [keys_of(m)["message_key"] for m in slack_sink.messages()]
    expected = [
        message_key("", "stuck-lock", "", starts[0]["id"], "firing"),
        message_key("", "stuck-lock", "", starts[0]["id"], "resolved"),
        message_key("", "stuck-lock", "", starts[1]["id"], "firing"),
    ]
    assert sent == expected and len(set(sent)) == 3
    # the firing and its resolve share the alert key (PagerDuty's dedup_key, issue 31)
    assert sent[0].rsplit(":", 1)[0] == sent[1].rsplit(":", 1)[0] != sent[2].rsplit(":", 1)[0]
    # the key is in the footer too, for a receiver that reads only the text
    footers = [m["blocks"][-1]["elements"][0]["text"] for m in slack_sink.messages()]
    assert all(f"key {key}" in footer for key, footer in zip(sent, footers, strict=True))


def test_a_key_fits_255_characters_whatever_the_instance_holds():
    event_type = "order." + "x" * 100_000
    row = {
        "outbox": "orders",
        "rule": "payment-failed",
        "instance": f"outbox=orders,event_type={event_type}",
        "kind": "repeat",
        "dedupe_key": f"payment-failed|outbox=orders,event_type={event_type}|7|repeat-12",
        "payload": {"episode": 9_000_000_001},
    }
    key = row_message_key(row)
    print(f"\n[key] {len(key)} characters for a {len(event_type):,}-character event type")
    assert len(key) <= MAX_KEY_CHARS
    assert key == message_key(
        "orders", "payment-failed", row["instance"], 9_000_000_001, "repeat-12"
    )
    assert key.endswith(":repeat-12")
    # one character of the event type more makes another key
    other = alert_key("orders", "payment-failed", row["instance"] + "y", 9_000_000_001)
    assert key.rsplit(":", 1)[0] != other
    # an episode begun before migration 021 keys on its dedupe key's firing_seq
    older = {**row, "payload": {}}
    assert row_message_key(older) == message_key(
        "orders", "payment-failed", row["instance"], "7", "repeat-12"
    )


@pytest.fixture
def scheduler_env(logins, dsn, slack_sink):
    return subprocess_env(
        logins.dsn(dsn, logins.scheduler), SLACK_WEBHOOK_URL=slack_sink.webhook_url
    )


def test_kill_9_during_the_post_delivers_the_firing_twice_with_one_key(
    conn, rows, slack_sink: SlackSink, scheduler_env, tmp_path
):
    rules = rules_file(tmp_path, RULES)
    slack_sink.hold_next(1, seconds=HOLD_SECONDS)
    rows.add(status="processing", created_ago=3600, locked_ago=3600)
    first = Scheduler(scheduler_env, rules, tmp_path / "first.log")
    second = None
    try:
        held = wait_for(lambda: len(slack_sink.messages()) == 1, timeout=60)
        assert held, "the first scheduler never posted: " + first.output
        os.kill(first.process.pid, signal.SIGKILL)  # its POST is in flight: no answer yet
        first.process.wait(10)
        killed = time.monotonic()
        second = Scheduler(scheduler_env, rules, tmp_path / "second.log")
        again = wait_for(lambda: len(slack_sink.messages()) >= 2, timeout=60)
        assert again, "the next leader did not post: " + second.output
        resent = time.monotonic() - killed
        wait_for(lambda: notifications(conn)[0]["status"] == "sent", timeout=30)
        time.sleep(3 * INTERVAL)  # passes of the new leader: no third post
        messages = slack_sink.messages()
    finally:
        first.stop()
        if second is not None:
            second.stop()
    keys = [keys_of(m)["message_key"] for m in messages]
    [row] = notifications(conn)
    print(
        f"\n[kill -9 in flight] deliveries: {len(messages)}, notification rows: 1, "
        f"re-sent {resent:.1f} s after the kill, keys equal: {len(set(keys)) == 1}"
    )
    assert len(messages) == 2 and len(set(keys)) == 1
    assert keys[0] == row_message_key({**row, "outbox": "", "rule": "stuck-lock", "instance": ""})
    assert row["status"] == "sent" and row["kind"] == "firing"
