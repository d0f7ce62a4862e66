"""The shipped n8n workflows on a real n8n 1.123.81 against a real Postgres (issue 6).

One scenario, in the order an on-call engineer would live it:

1. n8n starts with only outbox-nudge active. 20 events are published; the downstream
   holds every call; one ``outbox_monitor.nudge`` after the commit makes the poller claim
   and call at once (a nudge to a webhook n8n does not know is refused, logged, and
   returns False); n8n is killed (SIGKILL) while that batch is in flight. The credentials
   are generated from the DSN.
2. 80 more events, with scripted faults: 401 (always, until fixed), 500 once or twice,
   "timeout" (the effect is applied, the answer never comes). The shipped credential
   files (reading PG* variables) replace the generated ones; n8n is started again with
   the poller active (1 s schedule), once ``outbox-monitor reap`` (5 s lock timeout) has
   recovered the stuck batch. Failures are retried with growing ``available_at``; the test moves
   the waiting retries to now() after checking their delay (30–33 s, then 2–2.2 min),
   instead of waiting for them.
3. Every event ends done, except the 401s; every effect was applied exactly once on both
   routes (the Idempotency-Key API and the ledger-guarded webhook); ``status --json``
   agrees with the rows; after the fix, ``replay`` of the dead letters gets them done,
   each effect still once.
"""

import json
import logging
import subprocess
import sys
import time
from typing import Any

import numpy as np
import psycopg
import pytest
from psycopg.rows import dict_row

import outbox_monitor
from outbox_monitor import outbox
from outbox_monitor.demo.downstream import IDEMPOTENT_PATH, LEDGER_PATH, Downstream, poller_settings
from outbox_monitor.demo.n8n import NUDGE_ID, POLLER_ID, N8n
from outbox_monitor.demo.n8n_credentials import pg_environment
from outbox_monitor.demo.n8n_install import SHIPPED_FOLDER
from tests.alerting import subprocess_env, wait_for
from tests.n8n.conftest import TOKEN

pytestmark = pytest.mark.n8n

GENERATED_TOKEN = "Bearer generated-credential"
LOCK_TIMEOUT = "5s"
CLIENT_TIMEOUT_MS = 3000  # a loaded machine answered a plain call after 1.5 s: a spurious timeout
BATCH = 20
PAYMENT, NOTIFICATION = "payment.captured", "notification.email"
ROUTE = {PAYMENT: IDEMPOTENT_PATH, NOTIFICATION: LEDGER_PATH}
FIRST_RETRY = (30.0, 33.0)  # SPEC §1: 30 s + 0-10 % jitter
SECOND_RETRY = (120.0, 132.0)  # 2 min + 0-10 %


def rows_by_key(conn: psycopg.Connection) -> dict[str, dict[str, Any]]:
    return {
        row["event_key"]: row
        for row in conn.execute(
            "SELECT *, extract(epoch FROM available_at) AS available_epoch, "
            # fail() set available_at = its now() + the backoff and committed just after: the
            # backoff's upper bound, however long n8n took between the answer and fail()
            "extract(epoch FROM available_at - pg_xact_commit_timestamp(xmin)) AS after_commit "
            "FROM integration_outbox ORDER BY id"
        )
    }


def rows_in(conn: psycopg.Connection, status: str) -> int:
    """How many rows of the outbox have ``status``."""
    return conn.execute(
        "SELECT count(*) AS n FROM integration_outbox WHERE status = %s", (status,)
    ).fetchone()["n"]


def settled(conn: psycopg.Connection) -> bool:
    """Nothing processing and nothing due: the worker has done all it can for now."""
    row = conn.execute(
        "SELECT count(*) FILTER (WHERE status = 'processing') AS processing, "
        "count(*) FILTER (WHERE status = 'pending' AND available_at <= now()) AS due "
        "FROM integration_outbox"
    ).fetchone()
    return row["processing"] == 0 and row["due"] == 0


def wait_settled(conn: psycopg.Connection, timeout: float = 60) -> None:
    # twice in a row, 0.5 s apart: a poll between claim and ack would show as processing
    assert wait_for(lambda: settled(conn) and (time.sleep(0.5) or settled(conn)), timeout), (
        "the poller did not work through the due rows in time"
    )


def fast_forward_retries(conn: psycopg.Connection) -> set[str]:
    """Make the waiting retries due now (after the test checked their delay)."""
    return {
        row["event_key"]
        for row in conn.execute(
            "UPDATE integration_outbox SET available_at = now() "
            "WHERE status = 'pending' AND available_at > now() RETURNING event_key"
        )
    }


def cli(dsn: str, *args: str) -> dict[str, Any]:
    done = subprocess.run(
        [sys.executable, "-m", "outbox_monitor", *args, "--json"],
        env=subprocess_env(dsn, OUTBOX_MONITOR_LOCK_TIMEOUT=LOCK_TIMEOUT),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return json.loads(done.stdout)


def publish(conn: psycopg.Connection, events: list[tuple[str, str]]) -> None:
    """One business transaction publishing ``events`` ((event_type, event_key) pairs)."""
    with conn.transaction():
        for event_type, key in events:
            outbox.publish(
                conn,
                event_type=event_type,
                aggregate_type="order",
                aggregate_id=key.rsplit(":", 1)[1],
                event_key=key,
                payload={"amount_cents": 1999, "key": key},
            )


def requests_for(downstream: Downstream, key: str) -> list:
    return [request for request in downstream.requests if request.event_key == key]


def retry_delay(row: dict[str, Any], downstream: Downstream) -> tuple[float, float]:
    """Seconds to the row's ``available_at`` from the downstream's last answer for it (fail()
    ran later: at least the backoff) and from fail()'s commit (its ``now()`` was earlier: at
    most the backoff), so the backoff lies between them whatever n8n's delay between the two
    (the cluster tracks commit timestamps)."""
    available = float(row["available_epoch"])
    return available - requests_for(downstream, row["event_key"])[-1].at, row["after_commit"]


def test_poller_and_nudge_apply_every_effect_once_through_faults_crash_and_replay(
    dsn: str, n8n_binary, downstream: Downstream, caplog: pytest.LogCaptureFixture
):
    started = time.monotonic()
    kinds = (PAYMENT, NOTIFICATION)
    first = [(kinds[i % 2], f"{kinds[i % 2]}:{i}") for i in range(BATCH)]
    rest = [(kinds[i % 2], f"{kinds[i % 2]}:{i}") for i in range(BATCH, 100)]
    event_type = {key: kind for kind, key in first + rest}
    first_keys = {key for _, key in first}
    pay = [key for kind, key in rest if kind == PAYMENT]
    note = [key for kind, key in rest if kind == NOTIFICATION]
    refused = set(pay[:4] + note[:4])  # 401 until the downstream is fixed
    twice_500, once_500 = set(pay[4:8]), set(note[4:8])
    timeouts = set(pay[8:12] + note[8:12])
    for key in refused:
        downstream.script(key, then="401")
    for key in twice_500:
        downstream.script(key, "500", "500")
    for key in once_500:
        downstream.script(key, "500")
    for key in timeouts:
        downstream.script(key, "timeout")
    settings = poller_settings(
        downstream,
        OUTBOX_POLL_SECONDS="1",
        OUTBOX_BATCH_SIZE=str(BATCH),
        OUTBOX_HTTP_TIMEOUT_MS=str(CLIENT_TIMEOUT_MS),
        OUTBOX_WORKER_NAME="n8n-e2e",
        # read by the shipped credential files, imported for the second half
        OUTBOX_DOWNSTREAM_AUTHORIZATION=TOKEN,
        **pg_environment(dsn),
    )
    with (
        psycopg.connect(dsn, autocommit=True, row_factory=dict_row) as conn,
        N8n(
            dsn,
            settings=settings,
            binary=n8n_binary,
            downstream_header=("Authorization", GENERATED_TOKEN),
        ) as n8n,
    ):
        # ---- 1. nudge only; a batch in flight when n8n crashes
        downstream.authorization = GENERATED_TOKEN
        n8n.setup(activate=(NUDGE_ID,))
        n8n.start()
        downstream.hold()
        publish(conn, first)  # committed: the nudge comes after
        with caplog.at_level(logging.WARNING, logger="outbox_monitor.outbox"):
            assert outbox_monitor.nudge(f"{n8n.url}/webhook/no-such-nudge") is False
        assert [r.getMessage() for r in caplog.records if r.name == "outbox_monitor.outbox"] == [
            f"nudge of {n8n.url} not delivered: HTTP 404 Not Found; "
            "the worker claims the row at its next poll"
        ]
        sent = time.monotonic()
        assert outbox_monitor.nudge(n8n.nudge_url, event_key=first[0][1])  # 202 on receipt
        answered = time.monotonic()

        assert wait_for(lambda: rows_in(conn, "processing") == BATCH, timeout=30)
        print(
            f"\nnudge answered in {answered - sent:.3f} s; "
            f"batch claimed {time.monotonic() - sent:.2f} s after the nudge"
        )

        def in_flight_and_every_slot_called() -> bool:
            slots = conn.execute("SELECT count(*) AS n FROM integration_idempotency").fetchone()
            calls = [r for r in downstream.requests if r.path == LEDGER_PATH]
            return downstream.in_flight > 0 and slots["n"] == len(calls)

        assert wait_for(in_flight_and_every_slot_called, timeout=30)
        claimed = conn.execute(
            "SELECT locked_by FROM integration_outbox WHERE status = 'processing'"
        ).fetchall()
        assert len(claimed) == BATCH  # the nudge ran the claim, the poller is not active
        assert len({row["locked_by"] for row in claimed}) == 1  # one execution
        assert claimed[0]["locked_by"].startswith(f"n8n-e2e:wf-{POLLER_ID}:exec-")
        assert claimed[0]["locked_by"].endswith(":nudge")
        in_flight = {request.event_key for request in downstream.requests}
        # the ledger-guarded branch runs first (it is the top one): its calls are in flight
        assert {event_type[key] for key in in_flight} == {NOTIFICATION}
        n8n.kill()
        downstream.release()
        assert (
            conn.execute(
                "SELECT count(*) AS n FROM integration_outbox WHERE status = 'processing'"
            ).fetchone()["n"]
            == BATCH
        )

        # ---- 2. reap recovers the crashed batch; the poller takes over
        publish(conn, rest)
        n8n.import_credentials(SHIPPED_FOLDER / "credentials")  # replaces the generated ones
        downstream.authorization = TOKEN  # the shipped credential reads it from the env
        n8n.set_active(POLLER_ID)

        def crashed_batch_stale() -> bool:
            return conn.execute(
                "SELECT bool_and(locked_at < now() - %s::interval) AS stale"
                " FROM integration_outbox WHERE status = 'processing'",
                (LOCK_TIMEOUT,),
            ).fetchone()["stale"]

        # the reap before the poller claims: a live batch held past the 5 s lock timeout (its
        # calls wait for 3 s timeouts; a loaded machine is slower still) would be reaped too
        assert wait_for(crashed_batch_stale, timeout=30)
        reaped = cli(dsn, "reap", "--yes")
        assert reaped["changed"] == BATCH and reaped["dead_lettered"] == 0
        n8n.start()
        wait_settled(conn)

        rows = rows_by_key(conn)
        failed = {key for key, row in rows.items() if row["status"] == "failed"}
        assert failed == refused
        for key in refused:
            assert rows[key]["attempts"] == 1
            assert rows[key]["last_error"].startswith(f"HTTP 401 from POST {downstream.url('')}")
        waiting = {key for key, row in rows.items() if row["status"] == "pending"}
        assert waiting == twice_500 | once_500 | timeouts
        for key in waiting:
            assert rows[key]["attempts"] == 1
            after_answer, after_commit = retry_delay(rows[key], downstream)
            assert FIRST_RETRY[0] <= after_answer and after_commit <= FIRST_RETRY[1], (
                key,
                after_answer,
                after_commit,
            )
        for key in timeouts:
            assert f"timeout of {CLIENT_TIMEOUT_MS}ms exceeded" in rows[key]["last_error"]
        for key in first_keys:
            assert rows[key]["status"] == "done" and rows[key]["attempts"] == 1  # reaped

        assert fast_forward_retries(conn) == waiting
        wait_settled(conn)
        rows = rows_by_key(conn)
        assert {key for key, row in rows.items() if row["status"] == "pending"} == twice_500
        for key in twice_500:
            assert rows[key]["attempts"] == 2
            after_answer, after_commit = retry_delay(rows[key], downstream)
            assert SECOND_RETRY[0] <= after_answer and after_commit <= SECOND_RETRY[1], (
                key,
                after_answer,
                after_commit,
            )
        assert fast_forward_retries(conn) == twice_500
        wait_settled(conn)

        # ---- 3. outcomes, effects, figures
        rows = rows_by_key(conn)
        assert {key for key, row in rows.items() if row["status"] != "done"} == refused
        expected_attempts = dict.fromkeys(event_type, 0)
        expected_attempts.update(dict.fromkeys(once_500 | timeouts | refused | first_keys, 1))
        expected_attempts.update(dict.fromkeys(twice_500, 2))
        assert {key: row["attempts"] for key, row in rows.items()} == expected_attempts
        applied = downstream.applied()
        for key, kind in event_type.items():
            effects = applied[(ROUTE[kind], key)]
            assert effects == (0 if key in refused else 1), (key, effects)
        # the ledger guard: a call whose outcome was unknown (timeout, crash) is not
        # repeated; a call the webhook refused (500) is
        for key in note:
            calls = len(requests_for(downstream, key))
            assert calls == (2 if key in once_500 else 1), (key, calls)
        for key in in_flight & first_keys:
            if event_type[key] == NOTIFICATION:
                assert len(requests_for(downstream, key)) == 1
        # the Idempotency-Key API was called again and deduplicated
        for key in timeouts & set(pay):
            assert [r.applied for r in requests_for(downstream, key)] == [True, False]
        ledger = {
            row["event_key"]
            for row in conn.execute("SELECT event_key FROM integration_idempotency")
        }
        assert ledger == {key for key, kind in event_type.items() if kind == NOTIFICATION} - (
            refused & set(note)
        )  # the 401s deleted their slot with the dead-letter

        status = cli(dsn, "status")
        done = [row for row in rows.values() if row["status"] == "done"]
        latencies = [(row["processed_at"] - row["created_at"]).total_seconds() for row in done]
        assert {
            name: status[name]
            for name in (
                "queue_depth",
                "pending_total",
                "scheduled_retries",
                "processing",
                "stuck_locks",
                "failed_in_window",
                "failed_by_event_type",
                "attempts_histogram",
                "oldest_pending_age_seconds",
            )
        } == {
            "queue_depth": 0,
            "pending_total": 0,
            "scheduled_retries": 0,
            "processing": 0,
            "stuck_locks": 0,
            "failed_in_window": 8,
            "failed_by_event_type": {PAYMENT: 4, NOTIFICATION: 4},
            "attempts_histogram": {"1": 8},
            "oldest_pending_age_seconds": None,
        }
        assert status["processed_per_minute"] == pytest.approx(len(done) / 60)
        assert status["created_per_minute"] == pytest.approx(100 / 60)
        for name, q in (("p50", 50), ("p95", 95), ("p99", 99)):
            assert status["latency_seconds"][name] == pytest.approx(
                np.percentile(latencies, q), abs=1e-3
            )

        # ---- 4. fixed downstream, replay of the dead letters
        downstream.fix()
        replayed = cli(dsn, "replay", "--yes", "--event-type", "%")
        assert replayed["changed"] == len(refused)
        wait_settled(conn)
        rows = rows_by_key(conn)
        assert {row["status"] for row in rows.values()} == {"done"}
        applied = downstream.applied()
        effects = {key: applied[(ROUTE[kind], key)] for key, kind in event_type.items()}
        assert effects == dict.fromkeys(event_type, 1)
    print(f"\nn8n end-to-end: {time.monotonic() - started:.1f} s")
