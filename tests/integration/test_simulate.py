"""The traffic simulator: live workers and the backfill, checked through SPEC §2 figures."""

import logging
import re
import threading

import psycopg
import pytest
from psycopg import sql

from outbox_monitor.config.settings import load_settings
from outbox_monitor.demo.simulate import (
    EVENT_MIX,
    PERMANENT_EVENT_TYPE,
    TrafficGenerator,
    attempt_fault,
    backfill_history,
    recorded_error,
    run_simulation,
)
from outbox_monitor.figures import error_grouping, metrics
from outbox_monitor.outbox import PermanentError
from outbox_monitor.store.db import Database
from outbox_monitor.store.schema import init_db
from tests.alerting import LOADED_DEADLINE, wait_for

FAILING_TYPES = {PERMANENT_EVENT_TYPE, "notification.email"}  # 401 and bounces
WORKER_ID = re.compile(r"^sim-worker-\d+@\S+$")


def test_the_same_seed_gives_the_same_traffic_and_faults():
    first, second = TrafficGenerator(11), TrafficGenerator(11)
    events = [first.next_event() for _ in range(300)]
    assert events == [second.next_event() for _ in range(300)]
    assert len({event.event_key for event in events}) == 300
    assert {event.event_type for event in events} == {kind.event_type for kind in EVENT_MIX}
    paid = next(event for event in events if event.event_type == "order.paid")
    assert re.fullmatch(rf"order\.paid:{paid.aggregate_id}:pay_\d+", paid.event_key)
    assert paid.aggregate_type == "order" and paid.payload["order_id"] == int(paid.aggregate_id)

    crm = next(event for event in events if event.event_type == PERMANENT_EVENT_TYPE)
    fault = attempt_fault(11, crm.event_type, crm.event_key, 0)
    assert isinstance(fault, PermanentError) and str(fault).startswith("HTTP 401")
    faults = [attempt_fault(11, "order.paid", f"order.paid:{n}:pay_{n}", 0) for n in range(4000)]
    assert list(map(repr, faults)) == [
        repr(attempt_fault(11, "order.paid", f"order.paid:{n}:pay_{n}", 0)) for n in range(4000)
    ]
    transient = [fault for fault in faults if fault is not None]
    assert 0.03 < len(transient) / len(faults) < 0.05  # ~4 % of attempts
    assert recorded_error(transient[0]).startswith("HTTPError: HTTP 503 from api.erp.example")


def test_a_notifications_transient_faults_clear_by_its_third_attempt():
    # notifications-late (oldest pending age of notification.% > 5 min) must stay quiet in
    # the demo: two failures wait 30 s + 2 min (+ ≤ 10 % jitter), a third would wait 5 min more
    for event_type in ("notification.email", "notification.slack"):
        keys = [f"{event_type}:{n}" for n in range(3000)]
        by_attempts = {
            attempts: [attempt_fault(5, event_type, key, attempts) for key in keys]
            for attempts in (0, 1, 2, 3)
        }
        transient = {
            attempts: sum(f is not None and not isinstance(f, PermanentError) for f in faults)
            for attempts, faults in by_attempts.items()
        }
        assert 0.03 * 3000 < transient[0] < 0.05 * 3000, event_type
        assert 0.03 * 3000 < transient[1] < 0.05 * 3000, event_type
        assert transient[2] == transient[3] == 0, event_type
        # a bounced address still bounces on every attempt
        bounced = [isinstance(f, PermanentError) for f in by_attempts[0]]
        assert bounced == [isinstance(f, PermanentError) for f in by_attempts[3]]
    assert sum(attempt_fault(5, "order.paid", f"o:{n}", 2) is not None for n in range(3000)) > 90


def test_a_generator_of_some_event_types_publishes_those_in_their_relative_weights():
    billing = TrafficGenerator(11, ("invoice.sent", PERMANENT_EVENT_TYPE))
    events = [billing.next_event() for _ in range(2000)]
    invoices = sum(event.event_type == "invoice.sent" for event in events)
    assert invoices + sum(e.event_type == PERMANENT_EVENT_TYPE for e in events) == 2000
    assert 0.50 < invoices / 2000 < 0.60  # weights 0.06 and 0.05: 6/11 ≈ 0.545
    with pytest.raises(ValueError, match="no event type of the mix"):
        TrafficGenerator(11, ("payment.refunded",))


def enough_traffic(db, caplog) -> bool:
    """Live traffic has shown every case the test checks: more than 200 rows published, more
    than 50 acked, a retry scheduled, a dead letter of the permanently failing type, and a
    worker crashed holding rows (its log line)."""
    with db.connection() as conn:
        found = conn.execute(
            "SELECT count(*) > 200 AND count(*) FILTER (WHERE status = 'done') > 50"
            " AND bool_or(status = 'pending' AND attempts > 0)"
            " AND bool_or(status = 'failed' AND event_type = %s) AS enough"
            " FROM integration_outbox",
            (PERMANENT_EVENT_TYPE,),
        ).fetchone()
    crashed = any("crashed holding" in record.getMessage() for record in caplog.records)
    return bool(found["enough"]) and crashed


def test_live_traffic_acks_retries_dead_letters_and_crashes(settings, db, caplog):
    # traffic runs until it has shown every case (≈ 4 s at 60 events/s on a quiet machine),
    # not for a fixed duration: a loaded machine publishes fewer events per second
    caplog.set_level(logging.INFO, logger="outbox_monitor.demo.simulate")
    stop, results = threading.Event(), []
    thread = threading.Thread(
        target=lambda: results.append(
            run_simulation(
                settings, rate=60, workers=4, backfill=0, seed=7, crash_every=2, stop_event=stop
            )
        )
    )
    thread.start()
    try:
        assert wait_for(lambda: enough_traffic(db, caplog), timeout=LOADED_DEADLINE, step=0.2)
    finally:
        stop.set()
        thread.join(LOADED_DEADLINE)
    assert not thread.is_alive()
    (result,) = results

    window = 3600
    status = metrics.status(db, window=window)
    # every published row is in the table, counted once
    assert status["created_per_minute"] * window / 60 == pytest.approx(result["published"])
    assert result["published"] > 200
    # done rows: exactly what the workers acked
    assert status["processed_per_minute"] * window / 60 == pytest.approx(result["acked"])
    assert result["acked"] > 50
    # retried rows wait 30–33 s in backoff: all still scheduled, attempts = 1
    assert status["scheduled_retries"] == result["retried"] > 0
    assert result["retried"] < 0.15 * result["claimed"]
    # dead letters: the permanently failing type (and bounced e-mails), counted by failure
    failed = status["failed_by_event_type"]
    assert failed[PERMANENT_EVENT_TYPE] > 0 and set(failed) <= FAILING_TYPES
    assert status["failed_in_window"] == result["dead_lettered"]
    groups = error_grouping.error_groups(db, event_type=PERMANENT_EVENT_TYPE)
    assert len(groups) == 1
    assert groups[0]["fingerprint"] == (
        "HTTP 401 from api.crm.example: invalid API key (request req_<hex>)"
    )
    # crashed workers left their claimed batches locked; everything else was finished
    assert result["crashes"] >= 1
    assert status["processing"] == result["abandoned"] >= 1
    with db.connection() as conn:
        holders = {
            row["locked_by"]
            for row in conn.execute(
                "SELECT DISTINCT locked_by FROM integration_outbox WHERE status = 'processing'"
            )
        }
    assert holders and all(WORKER_ID.match(holder) for holder in holders)


def test_backfill_looks_like_live_traffic(dsn):
    settings = load_settings(dsn=dsn, lock_timeout="5m", sample_interval=15)
    seconds, rate = 1200.0, 20.0  # one full period of the rate wave

    backfilled = backfill_history(
        settings, seconds=seconds, rate=rate, workers=4, seed=3, crash_every=120
    )

    with Database(settings) as db:
        status = metrics.status(db, window=seconds + 60)
        created = status["created_per_minute"] * (seconds + 60) / 60
        assert created == pytest.approx(backfilled["rows"])
        assert created == pytest.approx(rate * seconds, rel=0.05)
        assert backfilled["rows"] == sum(
            backfilled[key] for key in ("done", "failed", "pending", "processing")
        )
        # latency of done rows: the poll interval and handlers, a few retries
        assert 0.2 < status["latency_seconds"]["p50"] < 1.5
        assert status["latency_seconds"]["p50"] < status["latency_seconds"]["p95"] < 10
        assert status["latency_seconds"]["p99"] > 30  # the retried rows (30 s backoff)
        # dead letters: ≈ 5 % of the traffic is crm.upsert, all failing with HTTP 401
        failed = status["failed_by_event_type"]
        assert set(failed) <= FAILING_TYPES
        assert failed[PERMANENT_EVENT_TYPE] == pytest.approx(0.05 * backfilled["rows"], rel=0.2)
        assert status["failed_in_window"] == backfilled["failed"]
        # retries still waiting in backoff, and crashes older than the lock timeout
        assert status["scheduled_retries"] > 0
        assert status["attempts_histogram"]["1"] > failed[PERMANENT_EVENT_TYPE]
        assert status["processing"] == backfilled["processing"]
        assert 0 < status["stuck_locks"] <= status["processing"]
        # no notification waits longer than notifications-late's 5 min (created → next due
        # time of a pending row, → processed_at of a finished one): at most two failures
        with db.connection() as conn:
            late = conn.execute(
                "SELECT count(*) FILTER (WHERE status = 'pending'"
                "   AND available_at - created_at > interval '300 seconds') AS pending_late,"
                " count(*) FILTER (WHERE status IN ('done', 'failed')"
                "   AND processed_at - created_at > interval '300 seconds') AS finished_late,"
                " max(attempts) AS attempts"
                " FROM integration_outbox WHERE event_type LIKE 'notification.%'"
            ).fetchone()
        assert late == {"pending_late": 0, "finished_late": 0, "attempts": 2}

        samples = metrics.samples_series(db, window=seconds + 60)
        assert len(samples) == backfilled["samples"] == int((seconds - 3) // 15)
        last = samples[-1]
        assert last["failed_in_window"] <= status["failed_in_window"]
        assert last["failed_in_window"] >= status["failed_in_window"] - 3 * 15 * rate * 0.1
        assert last["stuck_locks"] <= status["stuck_locks"]
        assert max(sample["queue_depth"] for sample in samples) < 3 * rate
        assert samples[0]["failed_in_window"] < last["failed_in_window"]  # window fills up


def test_stop_event_ends_a_run_without_duration(settings, db):
    stop, ready = threading.Event(), threading.Event()
    results = []
    thread = threading.Thread(
        target=lambda: results.append(
            run_simulation(
                settings,
                rate=40,
                workers=2,
                backfill=120,
                seed=5,
                stop_event=stop,
                on_ready=lambda counts: ready.set(),
                crash_every=None,
            )
        )
    )
    thread.start()
    assert ready.wait(20), "backfill did not finish"
    stop.wait(1.5)
    stop.set()
    thread.join(10)
    assert not thread.is_alive()
    (result,) = results
    assert result["backfill"]["rows"] > 0 and result["published"] > 0
    assert metrics.processing(db) == 0  # no crash: every claimed batch was finished


def test_two_outboxes_in_one_database_each_get_their_own_traffic(settings, dsn):
    """Two simulations at once on two tables of one database, as the demo's fleet would put
    orders and billing side by side (issue 16): each table holds its own event types, every
    row of its history and of what its app published, and its own workers finished them."""
    billing = load_settings(dsn=dsn, table="public.billing_outbox")
    with Database(billing) as db:
        init_db(db, create_table=True)
    mixes = {
        settings.table: (settings, ("order.paid", "payment.captured")),
        billing.table: (billing, ("invoice.sent", PERMANENT_EVENT_TYPE)),
    }
    results: dict[str, dict] = {}

    def simulate(table: str, seed: int) -> None:
        outbox, types = mixes[table]
        results[table] = run_simulation(
            outbox,
            rate=20,
            workers=2,
            duration=3,
            backfill=60,
            seed=seed,
            crash_every=None,
            event_types=types,
        )

    threads = [threading.Thread(target=simulate, args=(t, n)) for n, t in enumerate(mixes)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    for table, (outbox, types) in mixes.items():
        result = results[table]
        with psycopg.connect(dsn) as conn:
            found = dict(
                conn.execute(
                    sql.SQL("SELECT event_type, count(*) FROM {} GROUP BY 1").format(
                        sql.Identifier(*outbox.table_parts)
                    )
                ).fetchall()
            )
        assert set(found) == set(types), table
        assert sum(found.values()) == result["backfill"]["rows"] + result["published"], table
        assert result["published"] > 0 and result["acked"] > 0, table
        with Database(outbox) as db:
            assert metrics.processing(db) == 0, table
