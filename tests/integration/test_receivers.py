"""PagerDuty and the signed webhook as receivers, against local servers on 127.0.0.1 that
speak their documented shapes (tests/receiver_fakes.py), the real Postgres, the real
evaluator and sender (a fake clock moves the backoffs on).

Routes: the rule ``backlog`` (critical) goes to ``oncall``, whose branches send it to
``pd``, ``hook`` and ``slack`` (``continue``): one notification row per receiver.
"""

import statistics
import subprocess
import sys
import time
import uuid
from datetime import timedelta

import psycopg
import pytest
from psycopg.types.json import Jsonb

from outbox_monitor.alerts import own_runbooks
from outbox_monitor.alerts.evaluate import Evaluator
from outbox_monitor.alerts.message_key import alert_key, message_key
from outbox_monitor.alerts.receiver_health import FAILING_ATTEMPTS, read_health, watch_receivers
from outbox_monitor.alerts.receivers import transports_for
from outbox_monitor.alerts.route_check import send_test
from outbox_monitor.alerts.sender import deliver_due
from outbox_monitor.alerts.slack import TransportConfigError
from outbox_monitor.export.families import receiver_families
from outbox_monitor.service.scheduler import build_scheduler
from tests.alerting import LOADED_DEADLINE, REPO, Scheduler, drain, subprocess_env, wait_for
from tests.receiver_fakes import ROUTING_KEY, SECRET, receiver_env

TIMEOUT = 1.0

RULES = """
version: 1
defaults: {interval: 30s, for: 0s, keep_firing_for: 0s}
routes:
  oncall:
    webhook_url_env: TEST_SLACK_URL
    routes:
      - {matchers: {severity: critical}, route: pd, continue: true}
      - {matchers: {severity: critical}, route: hook, continue: true}
      - {matchers: {severity: critical}, route: slack}
  pd: {type: pagerduty, routing_key_env: PD_ROUTING_KEY, url_env: PD_EVENTS_URL}
  hook: {type: webhook, url_env: HOOK_URL, secret_env: HOOK_SECRET}
  slack: {webhook_url_env: TEST_SLACK_URL}
rules:
  - {name: backlog, metric: queue_depth, op: ">", threshold: 2, severity: critical,
     route: oncall, summary: "Backlog: {{ value }} rows due"}
"""


@pytest.fixture
def env(pagerduty, webhook, slack_sink):
    return receiver_env(pagerduty, webhook, slack_sink)


@pytest.fixture
def ruleset(write_rules):
    return write_rules(RULES)


@pytest.fixture
def deliver(db, ruleset, env, fake_clock):
    transports = transports_for(ruleset, env, timeout=TIMEOUT, quick_retry_seconds=0.05)

    def run() -> dict:
        return deliver_due(db, ruleset, clock=fake_clock, transports=transports, env=env)

    return run


def firing_transitions(conn: psycopg.Connection) -> list[int]:
    """The ids of backlog's transitions into firing (each starts an episode), in order."""
    found = conn.execute(
        "SELECT id FROM outbox_monitor.alert_transitions WHERE rule = 'backlog'"
        " AND to_state = 'firing' ORDER BY id"
    ).fetchall()
    return [row["id"] for row in found]


def test_one_episode_triggers_and_resolves_one_dedup_key_and_the_next_gets_a_new_one(
    db, conn, rows, ruleset, fake_clock, deliver, pagerduty, webhook, slack_sink
):
    evaluator = Evaluator(db, ruleset, clock=fake_clock)
    backlog = [rows.add(status="pending", created_ago=30) for _ in range(3)]
    evaluator.run_once()
    queued = conn.execute(
        "SELECT route, dedupe_key FROM outbox_monitor.notifications ORDER BY id"
    ).fetchall()
    assert [(n["route"], n["dedupe_key"]) for n in queued] == [  # one per receiver
        ("pd", "backlog||1|firing"),
        ("hook", "hook@backlog||1|firing"),
        ("slack", "slack@backlog||1|firing"),
    ]
    assert deliver()["sent"] == 3
    [first] = firing_transitions(conn)
    key = alert_key("", "backlog", "", first)
    assert len(key) == 68
    [trigger] = pagerduty.requests
    assert trigger.body["event_action"] == "trigger" and trigger.body["dedup_key"] == key
    assert trigger.body["payload"] == {
        "summary": "Backlog: 3 rows due",
        "source": "outbox-monitor",
        "severity": "critical",
        "component": "outbox",
        "group": "default",
        "class": "queue_depth",
        "custom_details": trigger.body["payload"]["custom_details"],
    }
    assert trigger.body["payload"]["custom_details"]["value"] == 3
    assert trigger.body["links"][0]["text"] == "Dashboard"
    assert pagerduty.incidents[key]["status"] == "triggered"
    [taken] = webhook.taken
    assert taken["message_id"] == message_key("", "backlog", "", first, "firing")
    assert taken["alert_key"] == key and taken["status"] == "firing" and taken["value"] == 3
    assert len(slack_sink.messages()) == 1

    drain(conn, backlog)
    fake_clock.advance(30)
    evaluator.run_once()
    assert deliver()["sent"] == 3
    resolve = pagerduty.requests[-1].body
    assert resolve == {"routing_key": ROUTING_KEY, "event_action": "resolve", "dedup_key": key}
    assert pagerduty.incidents[key]["status"] == "resolved"
    assert webhook.taken[-1]["message_id"] == message_key("", "backlog", "", first, "resolved")

    fake_clock.advance(30)
    [rows.add(status="pending", created_ago=30) for _ in range(3)]
    evaluator.run_once()
    assert deliver()["sent"] == 3
    first_again, second = firing_transitions(conn)
    assert first_again == first and second > first
    new_key = alert_key("", "backlog", "", second)
    assert new_key != key and pagerduty.requests[-1].body["dedup_key"] == new_key
    assert pagerduty.incidents[new_key] == {
        "status": "triggered",
        "triggers": 1,
        "summary": "Backlog: 3 rows due",
    }
    assert [t["kind"] for t in webhook.taken] == ["firing", "resolved", "firing"]


def test_a_resend_after_a_crash_is_dropped_but_never_a_resolve_nor_the_next_episode(
    db, conn, rows, ruleset, fake_clock, deliver, pagerduty, webhook
):
    """A leader that died between the receiver's answer and its commit: the row is pending
    again and is sent again with the same key; PagerDuty merges it into the open incident,
    the webhook's receiver (the docs' snippet) drops it."""
    evaluator = Evaluator(db, ruleset, clock=fake_clock)
    backlog = [rows.add(status="pending", created_ago=30) for _ in range(3)]
    evaluator.run_once()
    deliver()
    conn.execute(
        "UPDATE outbox_monitor.notifications SET status = 'pending', sent_at = NULL"
        " WHERE route IN ('pd', 'hook')"
    )
    assert deliver()["sent"] == 2
    [key] = pagerduty.incidents
    assert pagerduty.incidents[key]["triggers"] == 2  # one incident, the repeat merged
    assert [r.outcome for r in pagerduty.requests] == ["triggered", "deduplicated"]
    assert [r.outcome for r in webhook.requests] == ["taken", "repeat dropped"]
    drain(conn, backlog)
    fake_clock.advance(30)
    evaluator.run_once()
    [rows.add(status="pending", created_ago=30) for _ in range(3)]
    fake_clock.advance(30)
    evaluator.run_once()
    deliver()
    assert [r.outcome for r in webhook.requests][2:] == ["taken", "taken"]
    assert [t["kind"] for t in webhook.taken] == ["firing", "resolved", "firing"]
    assert [r.outcome for r in pagerduty.requests][2:] == ["resolved", "triggered"]
    assert len(pagerduty.incidents) == 2


class Rows:
    """Notification rows of one receiver inserted by hand (the evaluator's shape)."""

    def __init__(self, conn: psycopg.Connection, clock) -> None:
        self.conn = conn
        self.clock = clock

    def add(self, route: str, seq: int, kind: str = "firing") -> int:
        payload = {
            "rule": "backlog",
            "instance": "",
            "severity": "critical",
            "summary": f"backlog {seq}",
            "metric": "queue_depth",
            "value": 3,
            "labels": {"rule": "backlog", "severity": "critical"},
            "dashboard_path": "/overview",
            "episode": 1000 + seq,
            "kind": kind,
        }
        return self.conn.execute(
            "INSERT INTO outbox_monitor.notifications (dedupe_key, rule, instance, kind, route,"
            " evaluation_id, payload, available_at, created_at)"
            " VALUES (%s, 'backlog', '', %s, %s, %s, %s, %s, %s) RETURNING id",
            (
                f"{route}@backlog||{seq}|{kind}",
                kind,
                route,
                str(uuid.uuid4()),
                Jsonb(payload),
                self.clock(),
                self.clock(),
            ),
        ).fetchone()["id"]

    def get(self, row_id: int) -> dict:
        return self.conn.execute(
            "SELECT * FROM outbox_monitor.notifications WHERE id = %s", (row_id,)
        ).fetchone()


FAULTS = ["down", "429", "503", "hang", "200-error-body"]


@pytest.mark.parametrize("fault", FAULTS)
@pytest.mark.parametrize("receiver", ["pd", "hook"])
def test_a_receiver_fault_is_retried_in_order_and_never_holds_up_the_other(
    conn, fake_clock, deliver, pagerduty, webhook, receiver, fault
):
    fake = pagerduty if receiver == "pd" else webhook
    other, other_fake = ("hook", webhook) if receiver == "pd" else ("pd", pagerduty)
    notes = Rows(conn, fake_clock)
    first, second = notes.add(receiver, 1), notes.add(receiver, 2)
    beside = notes.add(other, 3)
    if fault == "down":
        fake.stop()
    elif fault == "429":
        fake.fail_next(1, 429, '{"status": "throttle event"}', **{"Retry-After": "7"})
    elif fault == "503":
        fake.fail_next(1, 503, "upstream down")
    elif fault == "hang":
        fake.hang_next(1)
    else:
        error = '{"status": "invalid event"}' if receiver == "pd" else '{"ok": false}'
        fake.fail_next(1, 200, error)
    started = fake_clock()
    counts = deliver()
    assert notes.get(beside)["status"] == "sent"  # the other receiver went on
    assert len(other_fake.requests) == 1
    head, behind = notes.get(first), notes.get(second)
    assert head["status"] == "pending" and head["attempts"] == 1
    assert behind["status"] == "pending" and behind["attempts"] == 0  # order kept
    assert counts["waiting"] == 1  # the row behind the head
    if fault == "429":
        assert counts["rate_limited"] == 1 and head["last_status"] == 429
        assert head["available_at"] == started + timedelta(seconds=7)
    else:
        assert counts["retrying"] == 1
        assert head["available_at"] <= started + timedelta(seconds=2)
        expected = {
            "down": "cannot reach the receiver",
            "503": "HTTP 503",
            "hang": "timed out",
            "200-error-body": "not taken, retrying",
        }[fault]
        assert expected in head["last_error"], head["last_error"]
    assert ROUTING_KEY not in head["last_error"] and SECRET not in head["last_error"]
    if fault == "down":
        fake.start()
    fake_clock.now = head["available_at"]
    assert deliver()["sent"] == 2
    assert [notes.get(i)["status"] for i in (first, second)] == ["sent", "sent"]
    delivered = [r for r in fake.requests if r.status in (200, 202) and "injected" not in r.outcome]
    summaries = [
        r.body["payload"]["summary"] if receiver == "pd" else r.body["summary"] for r in delivered
    ]
    assert summaries == ["backlog 1", "backlog 2"]  # each once, in order


@pytest.mark.parametrize("receiver", ["pd", "hook"])
def test_a_400_fails_for_good_and_the_route_goes_on(
    conn, fake_clock, deliver, pagerduty, webhook, receiver
):
    fake = pagerduty if receiver == "pd" else webhook
    notes = Rows(conn, fake_clock)
    first, second = notes.add(receiver, 1), notes.add(receiver, 2)
    fake.fail_next(1, 400, '{"status": "invalid event", "errors": ["dedup_key too long"]}')
    counts = deliver()
    assert counts["failed"] == 1 and counts["sent"] == 1
    row = notes.get(first)
    assert row["status"] == "failed" and row["last_status"] == 400
    assert "never retried" in row["last_error"] and "dedup_key too long" in row["last_error"]
    assert notes.get(second)["status"] == "sent"
    fake_clock.advance(60)
    assert deliver()["attempts"] == 0  # never tried again


def test_a_forged_or_stale_webhook_request_is_refused_by_the_docs_snippet(webhook):
    verify = webhook.verifier["verify"]
    body = b'{"message_id": "om1-x:firing"}'
    now = time.time()
    from outbox_monitor.alerts.signed_webhook import signature

    headers = {
        "X-Outbox-Monitor-Timestamp": str(int(now)),
        "X-Outbox-Monitor-Message-Id": "om1-x:firing",
        "X-Outbox-Monitor-Signature": signature(SECRET, str(int(now)), "om1-x:firing", body),
    }
    assert verify(SECRET, headers, body, now=now) is True
    assert verify(SECRET, headers, body, now=now + 1) is False  # a replay within the window
    with pytest.raises(PermissionError, match="signature"):
        verify(SECRET, headers, body + b" ", now=now)
    with pytest.raises(PermissionError, match="signature"):
        verify(SECRET, {**headers, "X-Outbox-Monitor-Message-Id": "om1-y:firing"}, body, now=now)
    with pytest.raises(PermissionError, match="5 minutes"):
        verify(SECRET, headers, body, now=now + 301)


def test_a_missing_receiver_variable_is_a_configuration_error_naming_route_and_variable(
    ruleset, env
):
    with pytest.raises(TransportConfigError) as caught:
        transports_for(ruleset, {k: v for k, v in env.items() if k != "PD_ROUTING_KEY"})
    assert str(caught.value.args[0]) == (
        'alerts.yml route "pd" (pagerduty): routing_key_env names PD_ROUTING_KEY, which is not set'
    )
    with pytest.raises(TransportConfigError, match=r'route "hook" .*HOOK_SECRET'):
        transports_for(ruleset, {k: v for k, v in env.items() if k != "HOOK_SECRET"})


def test_the_scheduler_exits_2_naming_route_and_variable_when_a_receiver_variable_is_missing(
    dsn, tmp_path, env
):
    rules = tmp_path / "alerts.yml"
    rules.write_text(RULES)
    extra = {k: v for k, v in env.items() if k != "HOOK_SECRET"}
    result = subprocess.run(
        [sys.executable, "-m", "outbox_monitor", "scheduler", "--rules", str(rules)],
        cwd=REPO,
        env=subprocess_env(dsn, **extra),
        capture_output=True,
        text=True,
        timeout=LOADED_DEADLINE,
    )
    assert result.returncode == 2, result.stderr
    assert (
        'alerts.yml route "hook" (webhook): secret_env names HOOK_SECRET, which is not set'
        in result.stderr
    )


def test_delivery_timings_per_receiver(conn, fake_clock, deliver, pagerduty, webhook, slack_sink):
    """Wall time of a sender pass delivering one message to each receiver (20 passes)."""
    notes = Rows(conn, fake_clock)
    seconds: dict[str, list[float]] = {"pd": [], "hook": []}
    for seq in range(20):
        for route in seconds:
            notes.add(route, seq)
            started = time.perf_counter()
            assert deliver()["sent"] == 1
            seconds[route].append(time.perf_counter() - started)
    for route, values in seconds.items():
        print(
            f"\n[{route}] sender pass with one delivery: median "
            f"{statistics.median(values) * 1000:.1f} ms, max {max(values) * 1000:.1f} ms"
        )
    assert len(pagerduty.incidents) == 20 and len(webhook.taken) == 20


def test_a_receiver_that_keeps_failing_is_told_through_the_others_and_on_metrics(
    db, conn, ruleset, fake_clock, deliver, pagerduty, webhook, slack_sink
):
    notes = Rows(conn, fake_clock)
    head = notes.add("pd", 1)
    pagerduty.stop()
    for attempt in range(1, FAILING_ATTEMPTS + 1):
        deliver()
        told = watch_receivers(db, ruleset, clock=fake_clock)
        assert told["raised"] == ([] if attempt < FAILING_ATTEMPTS else ["pd"])
        fake_clock.now = notes.get(head)["available_at"]
    assert notes.get(head)["attempts"] == FAILING_ATTEMPTS
    health = {h.route: h for h in read_health(db, ruleset, fake_clock())}
    assert health["pd"].failing and health["pd"].undelivered == 1
    assert [r for r, h in health.items() if h.failing] == ["pd"]
    samples = {
        (family.name, s.labels["route"]): s.value
        for family in receiver_families(db, ruleset)
        for s in family.samples
    }
    assert samples[("outbox_monitor_receiver_failing", "pd")] == 1.0
    assert samples[("outbox_monitor_receiver_failing", "hook")] == 0.0
    assert samples[("outbox_monitor_receiver_undelivered", "pd")] == 1.0
    assert watch_receivers(db, ruleset, clock=fake_clock)["raised"] == []  # once an episode
    deliver()  # the alert goes out through every receiver that works
    [alert] = [t for t in webhook.taken if t["rule"] == "receiver-failing"]
    assert alert["kind"] == "error" and alert["instance"] == "route=pd"
    assert alert["runbook"] == own_runbooks.steps("receiver-failing")  # its own steps
    assert (
        "Receiver pd (pagerduty) keeps failing: 1 message(s) undelivered after 3 attempts"
        in (alert["summary"])
    )
    assert "cannot reach the receiver" in alert["summary"]
    assert any("Receiver pd (pagerduty)" in str(m) for m in slack_sink.messages())
    pagerduty.start()
    fake_clock.now = notes.get(head)["available_at"]
    deliver()
    assert notes.get(head)["status"] == "sent"
    assert watch_receivers(db, ruleset, clock=fake_clock) == {"raised": [], "resolved": ["pd"]}
    deliver()
    resolve = webhook.taken[-1]
    assert resolve["rule"] == "receiver-failing" and resolve["kind"] == "resolved"
    assert resolve["alert_key"] == alert["alert_key"]


def test_a_refusal_for_good_marks_the_receiver_failing_until_it_delivers(
    db, conn, ruleset, fake_clock, deliver, webhook
):
    notes = Rows(conn, fake_clock)
    notes.add("hook", 1)
    webhook.fail_next(1, 403, '{"error": "revoked"}')
    deliver()
    [hook] = [h for h in read_health(db, ruleset, fake_clock()) if h.route == "hook"]
    assert hook.failing and hook.last_outcome == "failed" and "HTTP 403" in hook.last_error
    assert watch_receivers(db, ruleset, clock=fake_clock)["raised"] == ["hook"]
    notes.add("hook", 2)
    deliver()
    assert watch_receivers(db, ruleset, clock=fake_clock)["resolved"] == ["hook"]


def test_alerts_test_reaches_pagerduty_and_the_webhook_each_with_a_key_of_its_own(
    db, ruleset, env, pagerduty, webhook
):
    for _ in range(2):
        results = send_test(db, ruleset, "pd", requested_by="t", env=env)
        assert results["pd"]["ok"], results
        assert send_test(db, ruleset, "hook", requested_by="t", env=env)["hook"]["ok"]
    actions = [(r.body["event_action"], r.body["dedup_key"]) for r in pagerduty.requests]
    assert [a for a, _ in actions] == ["trigger", "resolve", "trigger", "resolve"]
    assert actions[0][1] == actions[1][1] != actions[2][1] == actions[3][1]
    assert [incident["status"] for incident in pagerduty.incidents.values()] == ["resolved"] * 2
    assert [t["status"] for t in webhook.taken] == ["test", "test"]  # neither dropped
    assert webhook.taken[0]["message_id"] != webhook.taken[1]["message_id"]


def test_a_running_scheduler_delivers_to_every_receiver_and_tells_of_one_that_is_down(
    db, conn, rows, write_rules, env, pagerduty, webhook, slack_sink
):
    """The real jobs on the real clock (evaluation every second, sender every 0.2 s): the
    seconds from the notification's row to each receiver's receipt, and from the PagerDuty
    server's stop to the receiver-failing alert at the webhook."""
    ruleset = write_rules(RULES.replace("interval: 30s", "interval: 1s"))
    [rows.add(status="pending", created_ago=30) for _ in range(3)]
    transports = transports_for(ruleset, env, timeout=TIMEOUT)
    scheduler = build_scheduler(
        db, blocking=False, ruleset=ruleset, transports=transports, sender_interval=0.2
    )
    scheduler.start()
    try:
        wait_for(lambda: pagerduty.requests and webhook.taken and slack_sink.messages(), 60)
        [created] = {
            r["created_at"].timestamp()
            for r in conn.execute("SELECT created_at FROM outbox_monitor.notifications")
        }
        seconds = {
            "pd": pagerduty.requests[0].at - created,
            "hook": webhook.requests[0].at - created,
        }
        print("\nqueued → received: " + ", ".join(f"{k} {v:.2f} s" for k, v in seconds.items()))
        assert all(0 <= value < LOADED_DEADLINE for value in seconds.values())

        pagerduty.stop()
        stopped = time.time()
        conn.execute(
            "UPDATE outbox_monitor.notifications SET status = 'pending', attempts = 0"
            " WHERE route = 'pd'"
        )  # a message for the stopped server (as a re-send would be)

        def told() -> list:
            return [t for t in webhook.taken if t["rule"] == "receiver-failing"]

        [alert] = wait_for(told, LOADED_DEADLINE)
        arrived = next(r.at for r in webhook.requests if r.body.get("rule") == "receiver-failing")
        print(f"PagerDuty stopped → receiver-failing at the webhook: {arrived - stopped:.2f} s")
        assert alert["instance"] == "route=pd" and alert["kind"] == "error"
    finally:
        scheduler.shutdown(wait=True)


CRASH_RULES = """
version: 1
defaults: {interval: 1s, for: 0s, keep_firing_for: 0s}
routes:
  fan:
    webhook_url_env: TEST_SLACK_URL
    routes:
      - {matchers: {rule: backlog}, route: pd, continue: true}
      - {matchers: {rule: backlog}, route: hook}
  pd: {type: pagerduty, routing_key_env: PD_ROUTING_KEY, url_env: PD_EVENTS_URL}
  hook: {type: webhook, url_env: HOOK_URL, secret_env: HOOK_SECRET}
rules:
  - {name: backlog, metric: queue_depth, op: ">", threshold: 2, severity: critical, route: fan}
"""


@pytest.mark.parametrize("receiver", ["pd", "hook"])
def test_kill_9_while_a_receiver_holds_its_answer_the_next_leader_resends_and_it_is_dropped(
    conn, rows, dsn, tmp_path, env, pagerduty, webhook, receiver
):
    """Item 2 with a real crash: the leader is killed (SIGKILL) after the receiver took the
    message and before it answered; the next leader sends it again with the same key, and
    PagerDuty merges it into the open incident / the webhook's verifier drops it."""
    fake = pagerduty if receiver == "pd" else webhook
    rules = tmp_path / "alerts.yml"
    rules.write_text(CRASH_RULES)
    fake.hold_next(30)
    [rows.add(status="pending", created_ago=30) for _ in range(3)]
    scheduler_env = subprocess_env(dsn, **env)
    first = Scheduler(scheduler_env, rules, tmp_path / "first.log")
    second = None
    try:
        assert wait_for(lambda: fake.requests, LOADED_DEADLINE), first.output
        first.process.kill()  # the answer is held: the row stays pending
        first.process.wait(10)
        killed = time.monotonic()
        second = Scheduler(scheduler_env, rules, tmp_path / "second.log")
        assert wait_for(lambda: len(fake.requests) >= 2, LOADED_DEADLINE), second.output
        resent = time.monotonic() - killed
        assert wait_for(
            lambda: (
                {
                    n["status"]
                    for n in conn.execute("SELECT status FROM outbox_monitor.notifications")
                }
                == {"sent"}
            ),
            LOADED_DEADLINE,
        )
    finally:
        first.stop()
        if second is not None:
            second.stop()
    print(f"\n[{receiver}] kill -9 with the answer held: re-sent {resent:.1f} s after the kill")
    held, again = fake.requests[:2]
    if receiver == "pd":
        assert held.body["dedup_key"] == again.body["dedup_key"]
        assert [held.outcome, again.outcome] == ["triggered", "deduplicated"]
        assert len(pagerduty.incidents) == 1
    else:
        message_id = "X-Outbox-Monitor-Message-Id"
        assert held.headers[message_id] == again.headers[message_id]
        assert [held.outcome, again.outcome] == ["taken", "repeat dropped"]
        assert len(webhook.taken) == 1
