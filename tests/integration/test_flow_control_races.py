"""Flow control keeps its word under races (SPEC §5, issue 29 items 9 and 10), on the real
PostgreSQL with racing workers, each thread on its own connection:

- a control change is a barrier: no row of a paused type is committed to ``processing``
  after ``pause()`` returned (20 rounds × 8 workers); a claim never waits for a change,
  a change waits for the claims in flight at most ``control_barrier_timeout`` and says so;
- the token bucket's clock is read under its lock: over 15 s of 8 workers at 10/s and at
  500/s, handed out ≤ B + R·T, T from the first grant to the last by the database clock,
  and ``refilled_at`` never moves back.
"""

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

import psycopg
import pytest
from click.testing import CliRunner
from psycopg.rows import dict_row

from outbox_monitor import outbox
from outbox_monitor.access import Identity, Role
from outbox_monitor.cli import main
from outbox_monitor.config.settings import load_settings
from outbox_monitor.flow import controls as flow
from outbox_monitor.flow.controls_file import apply_controls
from outbox_monitor.flow.model import ControlSettings
from outbox_monitor.store.db import Database
from tests.flow import control

OPERATOR = Identity("oncall@example.com", Role.operator, "cli")
ROUNDS = 20
WORKERS = 8
ROWS_PER_TYPE = 400
"""Rows of the round's type and as many of ``order.paid``, interleaved by ``created_at``: far
more than 8 workers claim in a round, so every worker is claiming when the pause lands."""


def insert_rows(conn: psycopg.Connection, event_type: str, count: int, *, tag: str) -> None:
    """``count`` due pending rows of ``event_type``, created one millisecond apart (the
    ``k``-th at ``now() - 1 h + k ms``), in one statement."""
    conn.execute(
        """INSERT INTO integration_outbox (event_type, aggregate_type, aggregate_id, event_key,
               payload, created_at, available_at)
           SELECT %(type)s, 'race', g::text, %(tag)s || ':' || g, '{}',
                  now() - interval '1 hour' + g * interval '1 millisecond',
                  now() - interval '1 hour'
             FROM generate_series(1, %(count)s) AS g""",
        {"type": event_type, "count": count, "tag": tag},
    )


def taken_ids(conn: psycopg.Connection, event_type: str) -> set[int]:
    """Ids of the type's rows that were handed out (no longer pending)."""
    found = conn.execute(
        "SELECT id FROM integration_outbox WHERE event_type = %s AND status <> 'pending'",
        (event_type,),
    ).fetchall()
    return {row["id"] for row in found}


def wait_for(condition, *, seconds: float, what: str) -> None:
    """Poll ``condition`` every 10 ms until it holds; fail naming ``what`` at the deadline."""
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, f"timed out after {seconds}s waiting for {what}"
        time.sleep(0.01)


@dataclass
class Workers:
    """``WORKERS`` threads, each claiming batches of 5 on its own autocommit connection and
    acking every row, until ``stop``; ``claims_after[i]`` counts worker ``i``'s claims that
    started after ``mark`` was set."""

    dsn: str
    stop: threading.Event = field(default_factory=threading.Event)
    mark: threading.Event = field(default_factory=threading.Event)
    claims_after: list[int] = field(default_factory=lambda: [0] * WORKERS)
    errors: list[BaseException] = field(default_factory=list)

    def work(self, index: int) -> None:
        name = f"w{index}"
        try:
            with psycopg.connect(self.dsn, autocommit=True, row_factory=dict_row) as conn:
                while not self.stop.is_set():
                    after = self.mark.is_set()
                    batch = outbox.claim(conn, name, limit=5)
                    if after:
                        self.claims_after[index] += 1
                    for row in batch:
                        outbox.ack(conn, row["id"], name)
        except BaseException as error:
            self.errors.append(error)


@contextmanager
def racing(dsn: str) -> Iterator[Workers]:
    """The workers, running; stopped and joined at the end (also when the test fails)."""
    workers = Workers(dsn)
    threads = [threading.Thread(target=workers.work, args=(i,)) for i in range(WORKERS)]
    for thread in threads:
        thread.start()
    try:
        yield workers
    finally:
        workers.stop.set()
        for thread in threads:
            thread.join(timeout=30)
    assert not workers.errors, workers.errors


# ---------------------------------------------------------------- item 9: the barrier


def test_no_row_of_a_paused_type_is_committed_after_pause_returned_20_rounds_of_8_workers(
    dsn, db, conn
):
    late_by_round: list[int] = []
    for round_no in range(ROUNDS):
        paused_type = f"crm.round{round_no}"
        insert_rows(conn, paused_type, ROWS_PER_TYPE, tag=f"p{round_no}")
        insert_rows(conn, "order.paid", ROWS_PER_TYPE, tag=f"o{round_no}")
        with racing(dsn) as workers:
            # the workers are handing out the type when the pause lands
            wait_for(
                lambda t=paused_type: len(taken_ids(conn, t)) >= 20,
                seconds=30,
                what="20 rows of the type handed out",
            )
            flow.pause(db, paused_type, actor=OPERATOR)
            before = taken_ids(conn, paused_type)
            workers.mark.set()
            # every worker claims twice more after the return (order.paid rows are left)
            wait_for(
                lambda w=workers: min(w.claims_after) >= 2,
                seconds=30,
                what="two claims by every worker after the pause returned",
            )
        late_by_round.append(len(taken_ids(conn, paused_type) - before))
        assert len(before) < ROWS_PER_TYPE  # the pause held rows: some were still pending
        flow.resume(db, paused_type, actor=OPERATOR)
        conn.execute("DELETE FROM integration_outbox")
    assert late_by_round == [0] * ROUNDS, (
        f"rows handed out after pause() returned, by round: {late_by_round}"
    )


def test_while_a_change_holds_the_change_lock_every_claim_returns_no_row_at_once(dsn, conn, rows):
    rows.add(event_type="order.paid")
    rows.add(event_type="crm.contact")
    with psycopg.connect(dsn) as change:  # a change between its barrier and its commit
        reached = change.execute(
            "SELECT outbox_monitor.control_barrier('integration_outbox'::regclass, 1)"
        ).fetchone()[0]
        assert reached is True
        started = time.monotonic()
        assert outbox.claim(conn, "w1") == []  # no control at all: the plain path
        control(conn, "crm.contact", concurrency_limit=5)
        assert outbox.claim(conn, "w1") == []  # the controlled path
        assert time.monotonic() - started < 1
        change.rollback()
    assert sorted(r["event_type"] for r in outbox.claim(conn, "w1")) == [
        "crm.contact",
        "order.paid",
    ]


def _advisory_waiters(conn: psycopg.Connection) -> int:
    return conn.execute(
        "SELECT count(*) AS n FROM pg_locks WHERE locktype = 'advisory' AND NOT granted"
        " AND objid = 'integration_outbox'::regclass::oid"
    ).fetchone()["n"]


def test_a_change_waits_for_the_claim_in_flight_and_new_claims_meanwhile_return_at_once(
    dsn, db, conn, rows
):
    rows.add(event_type="crm.contact", created_ago=100)
    rows.add(event_type="crm.contact", created_ago=90)
    rows.add(event_type="order.paid", created_ago=80)
    outcome: dict = {}
    with psycopg.connect(dsn, row_factory=dict_row) as in_flight:  # a claim not yet committed
        (first,) = outbox.claim(in_flight, "slow", limit=1)
        assert first["event_type"] == "crm.contact"

        def change() -> None:
            started = time.monotonic()
            outcome["change"] = flow.pause(db, "crm.%", actor=OPERATOR)
            outcome["seconds"] = time.monotonic() - started

        pausing = threading.Thread(target=change)
        pausing.start()
        wait_for(lambda: _advisory_waiters(conn) == 1, seconds=5, what="the pause to wait")
        started = time.monotonic()
        assert outbox.claim(conn, "w1") == []  # a change awaits the lock: no row, at once
        assert time.monotonic() - started < 1
        assert "change" not in outcome  # still waiting for the claim in flight
        in_flight.commit()
        pausing.join(timeout=10)
    assert outcome["change"].claims_in_flight is False
    assert outcome["change"].barrier_note is None
    assert outcome["seconds"] < db.settings.control_barrier_timeout
    assert [r["event_type"] for r in outbox.claim(conn, "w1")] == ["order.paid"]


@pytest.fixture
def short_barrier_db(dsn: str) -> Iterator[Database]:
    with Database(load_settings(dsn=dsn, control_barrier_timeout=0.5)) as database:
        yield database


def test_at_the_bound_the_change_is_made_and_says_claims_may_still_hand_out_rows(
    dsn, short_barrier_db, conn, rows
):
    rows.add(event_type="crm.contact", created_ago=100)
    rows.add(event_type="crm.contact", created_ago=90)
    with psycopg.connect(dsn, row_factory=dict_row) as in_flight:
        assert len(outbox.claim(in_flight, "slow", limit=1)) == 1
        started = time.monotonic()
        change = flow.pause(short_barrier_db, "crm.%", actor=OPERATOR)
        waited = time.monotonic() - started
        report = apply_controls(
            short_barrier_db, {"legacy.%": ControlSettings(paused=True)}, actor=OPERATOR
        )
        in_flight.commit()
    assert 0.5 <= waited < 5
    assert change.claims_in_flight is True
    assert change.barrier_note.startswith(
        "Claims that started before this change were still running after 0.5s"
    )
    assert "The change lock was held by pid " in change.barrier_note  # the claim in flight
    assert report.written == ["legacy.%"] and report.barrier_note == change.barrier_note
    # the change is in force all the same
    assert outbox.claim(conn, "w1") == []
    assert conn.execute("SELECT count(*) AS n FROM outbox_monitor.controls").fetchone()["n"] == 2


def test_a_session_holding_the_change_lock_exclusively_is_named_not_taken_for_claims(
    dsn, short_barrier_db, conn, rows
):
    """A session that took the change lock itself (any login may) stops every claim; a change
    it blocks said "Claims that started before this change were still running" (no claim
    was) and named no one. It names the session and says no claim hands out a row."""
    rows.add(event_type="crm.contact")
    with psycopg.connect(dsn, autocommit=True) as holder:
        holder.execute(
            "SELECT pg_advisory_lock(outbox_monitor.change_lock_key('integration_outbox'))"
        )
        pid = holder.execute("SELECT pg_backend_pid()").fetchone()[0]
        assert outbox.claim(conn, "w1") == []  # every claim stopped
        change = flow.pause(short_barrier_db, "legacy.%", actor=OPERATOR)
    assert change.barrier_note is not None
    assert change.barrier_note.startswith(
        f"The outbox's change lock was held exclusively by pid {pid} (postgres, "
    ), change.barrier_note
    assert "no claim of this outbox hands out any row" in change.barrier_note
    assert f"pg_terminate_backend({pid})" in change.barrier_note
    assert "Claims that started before this change" not in change.barrier_note
    # the holder gone (its backend ends after the client closed: a fresh-clone CI claimed
    # before it had), the claims hand out rows again (the pause is of another type)
    gone = "SELECT NOT EXISTS (SELECT FROM pg_stat_activity WHERE pid = %s) AS gone"
    wait_for(
        lambda: conn.execute(gone, (pid,)).fetchone()["gone"], seconds=60, what="the holder to end"
    )
    assert [r["event_type"] for r in outbox.claim(conn, "w1")] == ["crm.contact"]


def test_the_cli_shows_a_change_that_stopped_waiting_for_claims(
    dsn, conn, rows, monkeypatch, tmp_path
):
    monkeypatch.setenv("OUTBOX_MONITOR_DSN", dsn)
    monkeypatch.setenv("OUTBOX_MONITOR_ACTOR", "cli-tester")
    monkeypatch.setenv("OUTBOX_MONITOR_CONTROL_BARRIER_TIMEOUT", "0.3s")
    rows.add(event_type="crm.contact")
    controls_file = tmp_path / "controls.yml"
    controls_file.write_text("version: 1\ncontrols:\n  - event_type: legacy.sync\n    pause: {}\n")
    runner = CliRunner()
    with psycopg.connect(dsn, row_factory=dict_row) as in_flight:
        assert len(outbox.claim(in_flight, "slow", limit=1)) == 1
        paused = runner.invoke(main, ["pause", "crm.%"], prog_name="outbox-monitor")
        applied = runner.invoke(
            main, ["controls", "apply", str(controls_file)], prog_name="outbox-monitor"
        )
        in_flight.commit()
    warning = "WARNING: Claims that started before this change were still running after 0.3s"
    assert paused.exit_code == 0 and warning in paused.output, paused.output
    assert applied.exit_code == 0 and warning in applied.output, applied.output


# ------------------------------------------------------ item 10: the bucket's clock


BACKWARDS_LOG = """
CREATE TABLE test_refills_backwards (at timestamptz NOT NULL, by_seconds float8 NOT NULL);
CREATE FUNCTION test_log_backwards() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.refilled_at < OLD.refilled_at THEN
        INSERT INTO public.test_refills_backwards
        VALUES (clock_timestamp(), extract(epoch FROM OLD.refilled_at - NEW.refilled_at));
    END IF;
    RETURN NEW;
END $$;
CREATE TRIGGER test_log_backwards BEFORE UPDATE ON outbox_monitor.control_state
    FOR EACH ROW EXECUTE FUNCTION test_log_backwards();
"""
"""Counts every update that moves a bucket's ``refilled_at`` back (a test instrument)."""


def _race_the_bucket(dsn: str, *, seconds: float) -> list[tuple[int, float]]:
    """``WORKERS`` threads claiming up to 50 rows for ``seconds``, each claim in a
    transaction of its own that reads, under the state row's lock it still holds, the
    bucket's ``refilled_at``: the database clock of its grant. Returns ``(rows, grant
    instant in epoch seconds)`` of every claim that handed out rows."""
    handed: list[tuple[int, float]] = []
    lock = threading.Lock()
    errors: list[BaseException] = []
    end = time.monotonic() + seconds

    def work(name: str) -> None:
        try:
            with psycopg.connect(dsn, autocommit=True, row_factory=dict_row) as worker:
                while time.monotonic() < end:
                    with worker.transaction():
                        batch = outbox.claim(worker, name, limit=50)
                        if not batch:
                            continue
                        grant = worker.execute(
                            "SELECT extract(epoch FROM refilled_at)::float8 AS t"
                            " FROM outbox_monitor.control_state"
                            " WHERE event_type_filter = 'crm.%'"
                        ).fetchone()["t"]
                    with lock:
                        handed.append((len(batch), grant))
        except BaseException as error:
            errors.append(error)

    threads = [threading.Thread(target=work, args=(f"w{i}",)) for i in range(WORKERS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors, errors
    return handed


@pytest.mark.parametrize(("rate", "burst"), [(10, 10), (500, 50)])
def test_8_workers_for_15_s_never_get_more_than_b_plus_r_t_from_a_rate_limit(
    dsn, conn, rate, burst
):
    seconds = 15
    conn.execute(BACKWARDS_LOG)
    insert_rows(conn, "crm.contact", burst + rate * seconds + 1000, tag="bucket")
    control(conn, "crm.%", rate_per_second=rate, burst=burst)

    handed = _race_the_bucket(dsn, seconds=seconds)

    total = sum(n for n, _ in handed)
    span = max(t for _, t in handed) - min(t for _, t in handed)
    bound = burst + rate * span
    backwards = conn.execute("SELECT count(*) AS n FROM test_refills_backwards").fetchone()["n"]
    assert backwards == 0, f"refilled_at moved back {backwards} times"
    assert total <= bound + 1e-6, f"handed out {total} where B + R·T = {bound:.2f}"
    # the limit throttled, it did not stall: at least half of what it allowed was handed out
    assert total >= 0.5 * bound, f"handed out {total} of B + R·T = {bound:.2f}"
