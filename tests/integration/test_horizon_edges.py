"""Attack: horizon holders."""

import threading
import time

import psycopg
from psycopg import IsolationLevel, sql

from outbox_monitor.alerts.evaluate import Evaluator
from outbox_monitor.config.settings import load_settings
from outbox_monitor.health.horizon import PREPARED, horizon
from outbox_monitor.health.horizon_memory import FROM_BEGIN, FROM_STATEMENT
from outbox_monitor.store.db import Database
from tests.alerting import oncall_rules

READER = "long-batch-reader"
RULES = oncall_rules(
    """\
  - name: xmin-horizon-held
    metric: xmin_horizon_age
    op: ">"
    threshold: 3s
    route: oncall
"""
)


def readings_over_two_statements(dsn, db, isolation, evaluator):
    """A read-only transaction (``isolation``): BEGIN and ``SELECT 1`` at t0, statement A
    (``pg_sleep(2)``) at t0+1 s, statement B at t0+3 s; another session commits a transaction
    id between them. ``db`` reads the horizon 1 s into A and 1 s into B (t0+2 s, t0+4 s), then
    the evaluator passes once through ``db``; a fresh ``Database`` (one reading, as a one-shot
    CLI command) reads at t0+4 s too.

    Returns:
        ``(first, second, fresh)`` holders of the reader, and the evaluator's instance."""
    in_a, in_b = threading.Event(), threading.Event()
    with (
        psycopg.connect(dsn, application_name=READER) as reader,
        psycopg.connect(dsn, autocommit=True) as other,
    ):
        reader.isolation_level = isolation
        reader.execute("SELECT 1")  # BEGIN; REPEATABLE READ takes its one snapshot here

        def statements() -> None:
            in_a.set()
            reader.execute("SELECT pg_sleep(2)")
            in_b.set()
            reader.execute("SELECT pg_sleep(2)")

        time.sleep(1)
        worker = threading.Thread(target=statements)
        worker.start()
        try:
            in_a.wait(5)
            time.sleep(1)
            first = reader_of(horizon(db))
            other.execute("SELECT txid_current()")  # a transaction id committed meanwhile
            in_b.wait(5)
            time.sleep(1)
            second = reader_of(horizon(db))
            instance = evaluator.run_once().instance("xmin-horizon-held")
            with Database(load_settings(dsn=dsn)) as one_shot:
                fresh = reader_of(horizon(one_shot))
        finally:
            worker.join(10)
    return first, second, fresh, instance


def reader_of(found):
    [holder] = [h for h in found.holders if h.application == READER]
    assert holder.holds_horizon and holder.state == "active", holder
    return holder


def test_a_read_committed_transaction_of_short_statements_holds_only_its_statement(
    db, dsn, fake_clock, write_rules
):
    """Its second statement's snapshot has another xmin than the first's: its snapshots are
    per statement, so the second reading counts from that statement (1 s), not from BEGIN
    (4 s) — and the xmin-horizon-held rule (3 s) does not fire. A single reading cannot tell
    and counts from BEGIN, saying so."""
    evaluator = Evaluator(db, write_rules(RULES), clock=fake_clock)
    first, second, fresh, instance = readings_over_two_statements(
        dsn, db, IsolationLevel.READ_COMMITTED, evaluator
    )
    assert 1.8 <= first.held_seconds < 3.0, first  # since BEGIN (t0), read at t0+2 s
    assert first.held_from == FROM_BEGIN and "isolation unknown" in first.summary
    assert 0.8 <= second.held_seconds < 1.8, second  # its statement began 1 s ago
    assert second.held_from == FROM_STATEMENT and "per statement" in second.summary
    assert instance.value < 3 and instance.state == "inactive", instance
    assert fresh.held_seconds >= 3.8 and fresh.held_from == FROM_BEGIN  # never under-reported


def test_a_repeatable_read_transaction_holds_since_its_first_statement(
    db, dsn, fake_clock, write_rules
):
    """Its one snapshot keeps the same xmin in both readings: counted from BEGIN (4 s), and
    the rule (3 s) fires."""
    evaluator = Evaluator(db, write_rules(RULES), clock=fake_clock)
    first, second, fresh, instance = readings_over_two_statements(
        dsn, db, IsolationLevel.REPEATABLE_READ, evaluator
    )
    assert 1.8 <= first.held_seconds < 3.0, first
    assert 3.8 <= second.held_seconds < 5.5, second
    assert second.held_from == FROM_BEGIN
    assert instance.value >= 3.8 and instance.state == "firing", instance
    assert fresh.held_seconds >= 3.8


def test_prepared_gid_with_unicode_quotes_and_semicolon_rolls_back_only_it(dsn):
    gid = 'o\'neil "x" ✓; DROP TABLE integration_outbox; --\\n'
    with psycopg.connect(dsn, autocommit=True) as other:
        other.execute("BEGIN")
        other.execute("SELECT txid_current()")
        other.execute(sql.SQL("PREPARE TRANSACTION {}").format(sql.Literal(gid)))
    with Database(load_settings(dsn=dsn)) as db:
        [holder] = [h for h in horizon(db).holders if h.kind == PREPARED]
    print(holder.command)
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(holder.command)
        assert conn.execute("SELECT count(*) FROM pg_prepared_xacts").fetchone()[0] == 0
        assert conn.execute("SELECT to_regclass('integration_outbox')").fetchone()[0]
