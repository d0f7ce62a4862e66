"""Issue 10 item 2: no login can stop alerting silently.

Real scheduler processes (``python -m outbox_monitor scheduler``) logging in with the
scheduler role of ``init-db --print-grants``, the local Slack sink, and:

- a viewer-role login holding the advisory lock that used to elect the leader: the
  schedulers still evaluate and alert;
- a stranger process with the scheduler login that takes the leadership and keeps it
  without evaluating: exactly one "alerting is stalled" message however many followers
  notice, logged once by each, on /metrics, then exactly one resolve when it lets go;
- a leader frozen with SIGSTOP: the same, and a follower takes its lease over when it
  expires; woken up, the old leader writes nothing more (fencing).
"""

import os
import signal
import subprocess
import sys
import threading
import time
import urllib.error
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path

import psycopg
import pytest
import streamlit as st
from streamlit.testing.v1 import AppTest

from outbox_monitor.alerts import own_runbooks
from outbox_monitor.alerts.evaluate import Evaluator
from outbox_monitor.alerts.leader import Leadership, LeadershipLost, lease_ttl
from outbox_monitor.alerts.receivers import transports_for
from outbox_monitor.alerts.sender import deliver_due
from outbox_monitor.alerts.stall import LeaseStatus, describe_stall
from tests.alerting import (
    LOADED_DEADLINE,
    Scheduler,
    notifications,
    rules_file,
    stuck_lock_rules,
    subprocess_env,
    wait_for,
)

REPO = Path(__file__).resolve().parents[2]
INTERVAL = 0.3
"""Evaluation interval of these tests: alerting is stalled after 3 × 0.3 s."""
RULES = stuck_lock_rules(f"{INTERVAL}s")
OLD_LOCK = "outbox_monitor.evaluator:public.integration_outbox"
"""The advisory-lock name by which earlier versions elected the leader."""
STALLED = "alerting is stalled"
LEASE = (
    "SELECT now() AS now, term, acquired_at, expires_at FROM outbox_monitor.leader_leases"
    " WHERE table_name = 'public.integration_outbox'"
)
EVALUATED = (
    "SELECT evaluated_at FROM outbox_monitor.leader_leases"
    " WHERE table_name = 'public.integration_outbox'"
)
TAKEOVER_SLACK_SECONDS = 1.0
"""How much later than one tick past the lease's expiry a follower may take it over: its
evaluation thread's scheduling on a loaded two-core machine."""


@pytest.fixture
def start(logins, dsn, tmp_path, slack_sink):
    """``start(n)``: n scheduler processes logging in with the scheduler role."""
    rules = rules_file(tmp_path, RULES)
    env = subprocess_env(
        logins.dsn(dsn, logins.scheduler), SLACK_WEBHOOK_URL=slack_sink.webhook_url
    )
    started: list[Scheduler] = []

    def run(count: int) -> list[Scheduler]:
        new = [
            Scheduler(env, rules, tmp_path / f"scheduler-{len(started) + n}.log")
            for n in range(count)
        ]
        started.extend(new)
        return new

    yield run
    for scheduler in started:
        scheduler.stop()


def stall_messages(sink) -> list[dict]:
    return [m for m in sink.messages() if "alerting-stalled" in m["text"]]


def stalled_gauge(scheduler: Scheduler) -> float | None:
    """The scheduler's ``outbox_monitor_alerting_stalled``; ``None`` while its /metrics does
    not listen yet (a loaded run)."""
    try:
        return scheduler.metric("outbox_monitor_alerting_stalled")
    except urllib.error.URLError:
        return None


def evaluations_go_on(conn: psycopg.Connection, seconds: float) -> None:
    """Wait until the leader's evaluations have gone on ``seconds`` more: the lease's
    ``evaluated_at`` that far past its value now (the database's clock). On a loaded machine
    that may take longer than ``seconds``; a duplicate message or a stall would show by then.

    Raises:
        AssertionError: not within ``LOADED_DEADLINE``.
    """
    start = conn.execute(EVALUATED).fetchone()["evaluated_at"]

    def gone_on() -> bool:
        nonlocal start
        latest = conn.execute(EVALUATED).fetchone()["evaluated_at"]
        if start is None:  # no evaluation yet: count from the first
            start = latest
            return False
        return (latest - start).total_seconds() >= seconds

    assert wait_for(gone_on, timeout=LOADED_DEADLINE), f"no evaluation {seconds:g} s after {start}"


def test_a_viewer_holding_the_old_leader_lock_does_not_stop_evaluation(
    logins, dsn, conn, rows, slack_sink, start
):
    with psycopg.connect(logins.dsn(dsn, logins.read), autocommit=True) as viewer:
        viewer.execute("SELECT pg_advisory_lock(hashtextextended(%s, 0))", (OLD_LOCK,))
        rows.add(status="processing", created_ago=3600, locked_ago=3600)
        started = time.monotonic()
        schedulers = start(2)
        fired = wait_for(
            lambda: [m for m in slack_sink.messages() if "stuck-lock" in m["text"]], timeout=30
        )
        print(f"\nfirst alert {time.monotonic() - started:.1f} s after start, lock held")
        assert fired, "no scheduler evaluated while a viewer held the old lock: " + "".join(
            s.output for s in schedulers
        )
        evaluations_go_on(conn, 5 * INTERVAL)  # many evaluations: still one message, no stall
    assert len(slack_sink.messages()) == 1
    assert sum(s.leads for s in schedulers) == 1
    assert all(STALLED not in s.output for s in schedulers)


def test_a_stranger_holding_the_lease_alerts_stalled_once_then_resolved(
    logins, dsn, conn, slack_sink, start
):
    first = start(2)  # evaluations happen, then both stop and release the lease
    assert wait_for(lambda: sum(s.leads for s in first) == 1, timeout=30)
    evaluated = "SELECT count(*) AS n FROM outbox_monitor.alert_instances"
    assert wait_for(lambda: conn.execute(evaluated).fetchone()["n"], timeout=30)
    for scheduler in first:
        scheduler.stop()
    stranger_code = (
        "import time\n"
        "from outbox_monitor.config.settings import load_settings\n"
        "from outbox_monitor.alerts.leader import Leadership\n"
        "lead = Leadership(load_settings())\n"
        "while not lead.try_acquire(): time.sleep(0.05)\n"
        "print('leading', flush=True)\n"
        "while True:\n    lead.try_acquire(); time.sleep(0.5)\n"
    )
    stranger = subprocess.Popen(
        [sys.executable, "-c", stranger_code],
        cwd=REPO,
        env=subprocess_env(logins.dsn(dsn, logins.scheduler)),
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert stranger.stdout.readline().strip() == "leading"
        held = time.monotonic()
        followers = start(2)
        assert wait_for(lambda: stall_messages(slack_sink), timeout=30), "".join(
            s.output for s in followers
        )
        stalled_after = time.monotonic() - held
        # every follower noticed it (a loaded run read one follower's gauge before it had)
        assert wait_for(lambda: all(stalled_gauge(s) == 1 for s in followers), LOADED_DEADLINE)
        [alert] = stall_messages(slack_sink)  # and still one message
        assert STALLED in alert["text"]
        # its runbook steps, as a rule's (alerts/own_runbooks.py), numbered after the title
        sections = [b["text"]["text"] for b in alert["blocks"] if b.get("type") == "section"]
        [runbook] = [t for t in sections if t.startswith("📋 *Runbook · alerting-stalled*")]
        assert runbook.splitlines()[1] == f"1. {own_runbooks.steps('alerting-stalled')[0]}"
        for scheduler in followers:
            assert scheduler.metric("outbox_monitor_alerting_stalled") == 1
            assert scheduler.metric("outbox_monitor_last_evaluation_age_seconds") > 3 * INTERVAL
            assert scheduler.get("/healthz") == (200, "ok")  # /healthz reports the process
            assert scheduler.output.count(STALLED) == 1, scheduler.output
            assert not scheduler.leads
        stranger.kill()  # it lets go: its connection closes, a follower takes over
        stranger.wait(10)
        resumed = time.monotonic()
        assert wait_for(lambda: len(stall_messages(slack_sink)) == 2, timeout=30)
        resolved_after = time.monotonic() - resumed
        evaluations_go_on(conn, 5 * INTERVAL)  # a second resolve would show by then
        alert, resolve = stall_messages(slack_sink)
        assert "RESOLVED" in resolve["text"].upper()
        assert wait_for(
            lambda: all(s.metric("outbox_monitor_alerting_stalled") == 0 for s in followers), 10
        )
        assert sum(s.leads for s in followers) == 1
    finally:
        stranger.kill()
        stranger.wait()
        stranger.stdout.close()
    rows = notifications(conn, "alerting-stalled")
    assert [(n["kind"], n["status"]) for n in rows] == [("error", "sent"), ("resolved", "sent")]
    print(
        f"\nstalled message {stalled_after:.1f} s after the stranger took the lease "
        f"(threshold {3 * INTERVAL:g} s); resolved {resolved_after:.1f} s after it let go"
    )


def test_a_frozen_leader_is_alerted_once_replaced_at_lease_expiry_and_fenced(
    dsn, conn, rows, slack_sink, start
):
    schedulers = start(3)
    assert wait_for(lambda: sum(s.leads for s in schedulers) == 1, timeout=30)
    [leader] = [s for s in schedulers if s.leads]
    followers = [s for s in schedulers if s is not leader]
    # the followers watch, and the leader evaluates past the stall threshold: no message
    assert wait_for(lambda: all(stalled_gauge(s) == 0 for s in followers), LOADED_DEADLINE)
    evaluations_go_on(conn, 4 * INTERVAL)
    assert slack_sink.messages() == []

    leader.process.send_signal(signal.SIGSTOP)
    frozen = time.monotonic()
    # the frozen lease as it stands now: a renewal in flight at the SIGSTOP may still push
    # its expiry later, never past the database's now() here + TTL
    before = conn.execute(LEASE).fetchone()
    assert wait_for(lambda: stall_messages(slack_sink), timeout=30)
    stalled_after = time.monotonic() - frozen
    assert wait_for(lambda: any(s.leads for s in followers), timeout=30), "".join(
        s.output for s in schedulers
    )
    takeover_after = time.monotonic() - frozen
    after = conn.execute(LEASE).fetchone()
    ttl = lease_ttl(INTERVAL)
    assert after["term"] == before["term"] + 1
    # taken over not before the frozen lease expired, and within one tick (+ slack for a
    # loaded machine) of the latest it can have expired
    assert after["acquired_at"] >= before["expires_at"]
    late = (after["acquired_at"] - before["now"]).total_seconds() - ttl
    assert late <= INTERVAL + TAKEOVER_SLACK_SECONDS, late
    assert wait_for(lambda: len(stall_messages(slack_sink)) == 2, timeout=30)
    resolved_after = time.monotonic() - frozen

    rows.add(status="processing", created_ago=3600, locked_ago=3600)
    assert wait_for(lambda: len(slack_sink.messages()) == 3, timeout=30)
    leader.process.send_signal(signal.SIGCONT)  # wakes up: its lease is gone, it writes nothing
    assert wait_for(lambda: "lost the evaluator lease" in leader.output, timeout=30)
    time.sleep(2.0)  # let time pass: a write of the woken leader's next ticks would show now
    texts = [m["text"] for m in slack_sink.messages()]
    assert len(texts) == 3, texts
    assert "alerting-stalled" in texts[0] and STALLED in texts[0]
    assert "RESOLVED" in texts[1].upper() and "stuck-lock" in texts[2]
    assert [s.output.count(STALLED) for s in followers] == [1, 1]
    assert [n["kind"] for n in notifications(conn, "stuck-lock")] == ["firing"]
    print(
        f"\nleader frozen: stalled message after {stalled_after:.1f} s, lease taken over "
        f"after {takeover_after:.1f} s (TTL {ttl:g} s; {late:+.2f} s past the latest expiry), "
        f"resolved after {resolved_after:.1f} s"
    )


def test_a_leader_whose_lease_was_taken_over_writes_nothing(
    settings, db, rows, conn, write_rules, slack_sink
):
    ruleset = write_rules(RULES)
    rows.add(status="processing", created_ago=3600, locked_ago=3600)
    with Leadership(settings, ttl=0.2) as old, Leadership(settings) as new:
        assert old.try_acquire() and not new.try_acquire()
        time.sleep(0.3)  # let time pass: the old leader stops renewing, its TTL (0.2 s) ends
        assert new.try_acquire() and new.term == 2
        with pytest.raises(LeadershipLost):
            Evaluator(db, ruleset, fence=old.fence).run_once()
        assert not old.held
        assert (
            conn.execute("SELECT count(*) AS n FROM outbox_monitor.alert_instances").fetchone()["n"]
            == 0
        )
        report = Evaluator(db, ruleset, fence=new.fence).run_once()
        assert new.record_evaluation()
        transports = transports_for(ruleset, {"SLACK_WEBHOOK_URL": slack_sink.webhook_url})
        with pytest.raises(LeadershipLost):
            deliver_due(db, ruleset, transports=transports, fence=old.fence)
        assert slack_sink.messages() == []
        assert deliver_due(db, ruleset, transports=transports, fence=new.fence)["sent"] == 1
    assert report.transitions == [("stuck-lock", "", "inactive→firing")]
    assert [(n["kind"], n["status"]) for n in notifications(conn)] == [("firing", "sent")]


def test_the_dashboard_shows_a_stalled_evaluation(dsn, conn, tmp_path, monkeypatch):
    st.cache_data.clear()
    st.cache_resource.clear()
    # the lease stays held however slow the two pages are (a loaded run rendered them
    # after a lease of 10 s had expired); the last evaluation was 95 s ago
    conn.execute(
        "INSERT INTO outbox_monitor.leader_leases "
        "(table_name, holder, holder_pid, term, acquired_at, expires_at, evaluated_at) "
        "VALUES ('public.integration_outbox', 'host-a:4242', pg_backend_pid(), 7, "
        "now() - interval '1 h', now() + interval '10 min', now() - interval '95 s')"
    )
    rules = rules_file(tmp_path, RULES.replace(f"{INTERVAL}s", "30s"))
    for name in [n for n in os.environ if n.startswith("OUTBOX_MONITOR_")]:
        monkeypatch.delenv(name)
    monkeypatch.setenv("OUTBOX_MONITOR_DSN", dsn)
    monkeypatch.setenv("OUTBOX_MONITOR_ACTOR", "fault-test")
    monkeypatch.setenv("OUTBOX_MONITOR_RULES", str(rules))
    for page in ("overview", "alerts"):
        at = AppTest.from_file(str(REPO / "dashboard.py"), default_timeout=30)
        at.switch_page(f"pages/{page}.py").run()
        banners = [e.value.replace("\\", "") for e in at.error if "Alerting is stalled" in e.value]
        assert len(banners) == 1, (page, [e.value for e in at.error])
        assert "3 intervals (1m 30s)" in banners[0]
        assert "host-a:4242 holds the evaluator lease (term 7" in banners[0]
    conn.execute(
        "UPDATE outbox_monitor.leader_leases SET evaluated_at = now() - %s",
        (timedelta(seconds=20),),
    )
    st.cache_data.clear()
    at = AppTest.from_file(str(REPO / "dashboard.py"), default_timeout=30)
    at.switch_page("pages/alerts.py").run()
    assert not [e.value for e in at.error if "Alerting is stalled" in e.value]
    st.cache_data.clear()
    st.cache_resource.clear()


def test_a_takeover_does_not_restart_the_stall_count():
    """A leader that has just taken over is shown as such, but gets no fresh allowance:
    leaders that keep taking the lease over without evaluating (a crash loop, a stranger)
    would otherwise hide a stall for ever. The dashboard and the schedulers share one
    ``stall_age``; a scheduler's own (re)connection grace comes in through ``not_before``."""
    now = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)
    lease = LeaseStatus(
        now=now,
        holder="vm:1",
        holder_pid=7,
        term=9,
        holder_connected=True,
        acquired_at=now - timedelta(seconds=14),
        renewed_at=now - timedelta(seconds=1),
        expires_at=now + timedelta(seconds=14),
        evaluated_at=now - timedelta(seconds=139),
    )
    assert lease.stall_age() == 139.0
    banner = describe_stall(lease, interval=15)  # threshold 45 s
    assert "the last one ended 2m 19s ago" in banner
    assert "vm:1 took the evaluator lease over 14s ago (term 9)" in banner
    # a scheduler that reconnected 10 s ago (plus its grace) counts from then
    assert lease.stall_age(not_before=now - timedelta(seconds=10)) == 10.0
    # before any evaluation, the count starts at the acquisition
    first = replace(lease, evaluated_at=None)
    assert first.stall_age() == 14.0
    assert describe_stall(first, interval=15) is None


def test_a_stranger_taking_the_lease_over_and_over_is_alerted_as_stalled(
    logins, dsn, conn, slack_sink, start
):
    """As the attacker did: with the scheduler login, take the lease (a new term) every
    0.4 s and never evaluate. Each takeover used to restart the stall count: no alert."""
    conn.execute(
        "INSERT INTO outbox_monitor.leader_leases "
        "(table_name, holder, holder_pid, term, acquired_at, expires_at, evaluated_at) "
        "VALUES ('public.integration_outbox', 'stranger', 0, 1, now(), now(), now())"
    )
    stop = threading.Event()

    def flap() -> None:
        with psycopg.connect(logins.dsn(dsn, logins.scheduler), autocommit=True) as stranger:
            while not stop.is_set():
                stranger.execute(
                    "UPDATE outbox_monitor.leader_leases SET term = term + 1, "
                    "holder = 'stranger', holder_pid = pg_backend_pid(), acquired_at = now(), "
                    "renewed_at = now(), expires_at = now() + interval '10 s'"
                )
                stop.wait(0.4)

    flapper = threading.Thread(target=flap, daemon=True)
    flapper.start()
    try:
        started = time.monotonic()
        followers = start(2)
        assert wait_for(lambda: stall_messages(slack_sink), timeout=60), "".join(
            s.output for s in followers
        )
        print(f"\nstalled message {time.monotonic() - started:.1f} s after start, lease flapping")
        terms = conn.execute("SELECT term FROM outbox_monitor.leader_leases").fetchone()["term"]
        assert terms > 3  # it was taken over again and again meanwhile
        assert not any(s.leads for s in followers)
    finally:
        stop.set()
        flapper.join(10)
