"""Issue 29 items 7 and 8: delivery and health say the truth.

- Item 8: delivery is AT LEAST ONCE. A ``kill -9`` of the leading scheduler while its POST
  is in flight (the local Slack sink posts the message and holds its answer) makes the next
  leader post the same FIRING again: two deliveries carrying the same key, which a
  receiver drops; a resolve and the next episode carry keys of their own.
- Item 7: when the leader's writes fail while reads work (a test-owned trigger raising
  SQLSTATE 53100 "disk full" on every table the scheduler writes: samples, alert state and
  transitions, notifications, the lease), one message goes straight to Slack after 3
  intervals and one resolve when the writes succeed again; the dashboard shows a banner,
  ``/metrics`` and ``/healthz`` say it; no stalled-alerting message doubles it.

Real PostgreSQL, real scheduler processes (``python -m outbox_monitor scheduler``) with the
scheduler role's login, the real local Slack sink on 127.0.0.1.
"""

import os
import signal
import time
from pathlib import Path

import psycopg
import pytest
import streamlit as st
from streamlit.testing.v1 import AppTest

from outbox_monitor.alerts.evaluate import Evaluator
from outbox_monitor.alerts.message_key import (
    MAX_KEY_CHARS,
    METADATA_EVENT_TYPE,
    alert_key,
    message_key,
    row_message_key,
)
from outbox_monitor.alerts.outage import DatabaseHealth
from outbox_monitor.alerts.receivers import transports_for
from outbox_monitor.alerts.sender import deliver_due
from outbox_monitor.alerts.write_health import (
    FAILED_INTERVALS,
    WriteHealth,
    is_write_failure,
    read_writes_failing,
)
from outbox_monitor.config.settings import load_settings
from outbox_monitor.demo.slack_sink import SlackSink
from outbox_monitor.errors import DatabaseUnavailable
from outbox_monitor.store.db import Database
from tests.alerting import (
    Scheduler,
    drain,
    fail_writes,
    notifications,
    rules_file,
    stuck_lock_rules,
    subprocess_env,
    wait_for,
    writes_work_again,
)

REPO = Path(__file__).resolve().parents[2]
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


BANNER = "The scheduler cannot write"


def banners(dsn: str, rules: Path, monkeypatch) -> dict[str, list[str]]:
    """The "cannot write" banners of the Overview and the Alerts page (AppTest)."""
    st.cache_data.clear()
    st.cache_resource.clear()
    for name in [n for n in os.environ if n.startswith("OUTBOX_MONITOR_")]:
        monkeypatch.delenv(name)
    monkeypatch.setenv("OUTBOX_MONITOR_DSN", dsn)
    monkeypatch.setenv("OUTBOX_MONITOR_ACTOR", "fault-test")
    monkeypatch.setenv("OUTBOX_MONITOR_RULES", str(rules))
    found = {}
    for page in ("overview", "alerts"):
        at = AppTest.from_file(str(REPO / "dashboard.py"), default_timeout=30)
        at.switch_page(f"pages/{page}.py").run()
        found[page] = [e.value.replace("\\", "") for e in at.error if BANNER in e.value]
    st.cache_data.clear()
    st.cache_resource.clear()
    return found


def writes_messages(sink: SlackSink) -> list[dict]:
    return [m for m in sink.messages() if "writes-failing" in m["text"]]


def test_writes_failing_for_3_intervals_post_one_message_and_one_resolve(
    dsn, conn, logins, slack_sink: SlackSink, scheduler_env, tmp_path, monkeypatch
):
    rules = rules_file(tmp_path, RULES)
    scheduler = Scheduler(scheduler_env, rules, tmp_path / "scheduler.log")
    viewer = Database(load_settings(dsn=logins.dsn(dsn, logins.read)))
    try:
        evaluated = wait_for(
            lambda: conn.execute(
                "SELECT count(*) AS n FROM outbox_monitor.leader_leases"
                " WHERE evaluated_at IS NOT NULL"
            ).fetchone()["n"],
            timeout=60,
        )
        assert evaluated, scheduler.output
        fail_writes(conn)
        started = time.monotonic()
        alerted = wait_for(lambda: writes_messages(slack_sink), timeout=60)
        assert alerted, "no writes-failing message: " + scheduler.output
        took = time.monotonic() - started
        assert took >= FAILED_INTERVALS * INTERVAL
        assert wait_for(lambda: scheduler.metric("outbox_monitor_writes_failing") == 1, 10)
        assert "writes fail since" in scheduler.get("/healthz")[1]
        assert wait_for(lambda: read_writes_failing(viewer).processes == 1, 10)
        shown = banners(dsn, rules, monkeypatch)
        assert [len(found) for found in shown.values()] == [1, 1], shown
        time.sleep(4 * INTERVAL)  # more failing passes: still one message
        assert len(writes_messages(slack_sink)) == 1
        writes_work_again(conn)
        resumed = time.monotonic()
        resolved = wait_for(lambda: len(writes_messages(slack_sink)) >= 2, timeout=60)
        assert resolved, "no resolve: " + scheduler.output
        resolve_took = time.monotonic() - resumed
        time.sleep(6 * INTERVAL)  # a stalled-alerting message would come by now
        messages = slack_sink.messages()
        assert wait_for(lambda: scheduler.metric("outbox_monitor_writes_failing") == 0, 10)
        assert wait_for(lambda: read_writes_failing(viewer).processes == 0, 10)
        assert banners(dsn, rules, monkeypatch) == {"overview": [], "alerts": []}
    finally:
        scheduler.stop()
        viewer.close()
    headers = [m["blocks"][0]["text"]["text"] for m in messages]
    print(
        f"\n[writes failing] message {took:.1f} s after the writes began to fail "
        f"(3 intervals = {FAILED_INTERVALS * INTERVAL:g} s), resolve {resolve_took:.1f} s "
        f"after they work again; messages: {headers}"
    )
    assert len(messages) == 2, headers
    firing, resolve = messages
    assert "writes-failing" in headers[0] and "RESOLVED" not in headers[0]
    assert "RESOLVED" in headers[1] and "writes-failing" in headers[1]
    assert "53100" not in firing["text"] and "No space left on device" in firing["text"]
    firing_key = keys_of(firing)["message_key"]
    assert firing_key != keys_of(resolve)["message_key"]
    assert firing_key.rsplit(":", 1)[0] == keys_of(resolve)["message_key"].rsplit(":", 1)[0]


def test_writes_failing_is_quiet_while_the_database_is_unreachable(
    db, conn, write_rules, slack_sink: SlackSink
):
    ruleset = write_rules(RULES)
    transports = transports_for(ruleset, {"SLACK_WEBHOOK_URL": slack_sink.webhook_url})
    database = DatabaseHealth(
        db, identity="host-a:1", ruleset=ruleset, transports=transports, alert_after=0.0
    )
    marks: list[bool] = []
    writes = WriteHealth(
        db,
        identity="host-a:1",
        ruleset=ruleset,
        transports=transports,
        database=database,
        alert_after=0.0,
        mark=marks.append,
    )
    with pytest.raises(psycopg.Error) as raised:  # a real 53100 from the server
        conn.execute(
            "DO $$ BEGIN RAISE EXCEPTION 'could not extend file: No space left on device'"
            " USING ERRCODE = '53100'; END $$"
        )
    lost = DatabaseUnavailable("lost the database at host/db: server closed the connection")
    assert is_write_failure(raised.value) and not is_write_failure(lost)
    database.failed(lost, was_leader=True)
    writes.failed("evaluate", raised.value, was_leader=True)
    writes.tick()
    assert writes_messages(slack_sink) == [] and marks == []  # database-unreachable says more
    database.succeeded()
    writes.tick()
    assert len(writes_messages(slack_sink)) == 1 and marks == [True]
    writes.tick()
    assert len(writes_messages(slack_sink)) == 1  # once per route
    writes.succeeded("sender")  # a job that wrote nothing proves nothing
    assert writes.failing_since is not None
    writes.succeeded("evaluate", proves_writes=True)
    writes.failed("evaluate", raised.value, was_leader=True)  # again, before the resolve went
    writes.tick()
    assert len(writes_messages(slack_sink)) == 1 and writes.failing_since is not None
    writes.succeeded("evaluate", proves_writes=True)
    writes.tick()
    messages = writes_messages(slack_sink)
    assert len(messages) == 2 and "RESOLVED" in messages[1]["blocks"][0]["text"]["text"]
    assert marks == [True, False] and not writes.in_episode
