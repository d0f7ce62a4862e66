"""SPEC §5 in the shared claim: each control's effect on ``outbox_monitor.claim``, with
expectations computed by hand from the rows each test inserts.

Controls are written here as the rows the operator's API writes (``tests/flow.py``), so these
tests pin the SQL functions alone: pause, concurrency limit, token bucket, circuit breaker.
"""

import threading
import time

import psycopg
import pytest
from psycopg.rows import dict_row

from outbox_monitor import outbox
from outbox_monitor.store import schema
from tests.flow import (
    BREAKER,
    ack_n,
    breaker_state,
    control,
    fail_n,
    race_claims,
    transitions,
    worker_login,
    worst_excess,
)

TABLE = "public.integration_outbox"


def claimed_types(rows: list[dict]) -> list[str]:
    return sorted(row["event_type"] for row in rows)


def test_a_pause_holds_exactly_the_matching_due_rows(conn, rows):
    for i in range(3):
        rows.add(event_type="crm.contact", created_ago=100 + i)
    rows.add(event_type="crm_contact", created_ago=90)  # _ is literal: not matched by crm.%
    rows.add(event_type="order.paid", created_ago=80)
    rows.add(event_type="order.paid", created_ago=70)
    control(conn, "crm.%", paused=True, pause_reason="CRM down")

    got = outbox.claim(conn, "w1", limit=50)

    assert claimed_types(got) == ["crm_contact", "order.paid", "order.paid"]
    held = conn.execute(
        "SELECT status, attempts, count(*) AS n FROM integration_outbox"
        " WHERE event_type = 'crm.contact' GROUP BY 1, 2"
    ).fetchall()
    assert held == [{"status": "pending", "attempts": 0, "n": 3}]


def test_a_pause_past_its_until_holds_nothing(conn, rows):
    rows.add(event_type="crm.contact")
    control(conn, "crm.contact", paused=True, paused_until_in=-1)
    assert claimed_types(outbox.claim(conn, "w1")) == ["crm.contact"]


def test_a_pause_until_later_holds_until_then(conn, rows):
    rows.add(event_type="crm.contact")
    control(conn, "crm.contact", paused=True, paused_until_in=1.5)
    assert outbox.claim(conn, "w1") == []
    time.sleep(1.6)
    assert claimed_types(outbox.claim(conn, "w1")) == ["crm.contact"]


HELD = 3000


def _claim_reading(conn: psycopg.Connection, limit: int) -> tuple[list[dict], int]:
    """One claim in a rolled-back transaction: the rows it handed out and how many heap rows
    of the outbox it read (fetched by an index or bitmap scan, or read by a sequential one)."""
    read = (
        "SELECT pg_stat_get_xact_tuples_fetched('integration_outbox'::regclass)"
        " + pg_stat_get_xact_tuples_returned('integration_outbox'::regclass) AS n"
    )
    with conn.transaction(force_rollback=True):
        before = conn.execute(read).fetchone()["n"]
        got = outbox.claim(conn, "w1", limit=limit)
        return got, conn.execute(read).fetchone()["n"] - before


def _hold_3000_behind_3_due(conn: psycopg.Connection, rows) -> list[int]:
    """3,000 due crm.contact rows held by a pause of crm.%, older than 3 due order.paid rows
    (returned)."""
    conn.execute(
        "INSERT INTO integration_outbox (event_type, aggregate_type, aggregate_id, event_key,"
        " payload, created_at, available_at)"
        " SELECT 'crm.contact', 'contact', g::text, 'held:' || g, '{}',"
        " now() - interval '1 hour', now() - interval '1 hour'"
        " FROM generate_series(1, %s) AS g",
        (HELD,),
    )
    due = [rows.add(event_type="order.paid", created_ago=30 - i) for i in range(3)]
    control(conn, "crm.%", paused=True)
    conn.execute("ANALYZE integration_outbox")
    return due


def test_a_claim_reads_no_row_a_pause_holds(db, conn, rows):
    schema.init_db(db, flow_control=True)
    due = _hold_3000_behind_3_due(conn, rows)

    got, read = _claim_reading(conn, 50)
    assert sorted(row["id"] for row in got) == due
    # the 3 handed out, and one row per pending type from the type scan at most
    assert read <= 3 + 2

    # the same claim without the flow-control index reads every held row (migration 008)
    conn.execute("DROP INDEX integration_outbox_pending_types_idx")
    got, read = _claim_reading(conn, 50)
    assert sorted(row["id"] for row in got) == due
    assert read >= HELD


def test_init_dbs_index_lets_the_claim_skip_held_rows_on_a_varchar_status_column(db, conn, rows):
    """SPEC §1 columns may be varchar: Postgres prints the index predicate with a cast then,
    and the claim read every held row while the product told the operator to run the
    init-db --flow-control that had built the index."""
    conn.execute("ALTER TABLE integration_outbox ALTER COLUMN status TYPE varchar(20)")
    schema.init_db(db, flow_control=True)
    due = _hold_3000_behind_3_due(conn, rows)
    index = "SELECT outbox_monitor.pending_types_index('integration_outbox') AS found"
    assert conn.execute(index).fetchone()["found"] is True
    got, read = _claim_reading(conn, 50)
    assert sorted(row["id"] for row in got) == due
    assert read <= 3 + 2


@pytest.mark.parametrize(
    "users_index",
    [
        "USING hash (event_type)",
        "(event_type text_pattern_ops, available_at, created_at)",
    ],
)
def test_an_index_led_by_event_type_that_cannot_serve_the_type_scan_is_not_taken_for_one(
    conn, rows, users_index
):
    """A hash index or one of another operator class cannot give event_type in order: each
    probe of the type scan then read every pending row (50,000 held: 25 times as long as
    008's claim), and the product said nothing. Such an index is not the flow-control one."""
    conn.execute(f"CREATE INDEX users_type_idx ON integration_outbox {users_index}")
    due = _hold_3000_behind_3_due(conn, rows)
    index = "SELECT outbox_monitor.pending_types_index('integration_outbox') AS found"
    assert conn.execute(index).fetchone()["found"] is False
    got, _ = _claim_reading(conn, 50)
    assert sorted(row["id"] for row in got) == due


def test_over_1000_pending_types_the_claim_reads_held_rows_and_still_skips_them(db, conn, rows):
    schema.init_db(db, flow_control=True)
    # 1,001 pending types besides the held one: probing each type is no longer cheaper
    conn.execute(
        "INSERT INTO integration_outbox (event_type, aggregate_type, aggregate_id, event_key,"
        " payload, available_at)"
        " SELECT 'type.' || g, 'a', g::text, 'many:' || g, '{}', now() + interval '1 hour'"
        " FROM generate_series(1, 1001) AS g"
    )
    for i in range(3):
        rows.add(event_type="crm.contact", created_ago=100 + i)
    due = rows.add(event_type="order.paid", created_ago=10)
    control(conn, "crm.%", paused=True)

    scans = (
        "SELECT pg_stat_get_xact_numscans('integration_outbox_pending_types_idx'::regclass) AS n"
    )
    with conn.transaction(force_rollback=True):
        got = outbox.claim(conn, "w1", limit=50)
        probes = conn.execute(scans).fetchone()["n"]
    assert [row["id"] for row in got] == [due]
    # the type scan stopped at its cap (1,001 of the 1,003 pending types), then 008's scan
    assert probes in (1001, 1002)


def test_with_no_control_the_claim_takes_the_oldest_rows_first(conn, rows):
    ids = [rows.add(created_ago=100 - i) for i in range(5)]
    got = outbox.claim(conn, "w1", limit=3)
    assert sorted(row["id"] for row in got) == ids[:3]


def test_a_limited_claim_hands_out_the_oldest_matching_rows_first(conn, rows):
    crm = [rows.add(event_type="crm.contact", created_ago=100 - i) for i in range(4)]
    other = rows.add(event_type="order.paid", created_ago=50)
    control(conn, "crm.%", concurrency_limit=2)
    got = outbox.claim(conn, "w1", limit=50)
    assert sorted(row["id"] for row in got) == sorted([crm[0], crm[1], other])


def test_a_concurrency_limit_counts_processing_rows_stuck_ones_included(conn, rows):
    rows.add(event_type="crm.contact", status="processing", locked_ago=3600)  # stuck
    for _ in range(4):
        rows.add(event_type="crm.contact")
    control(conn, "crm.contact", concurrency_limit=3)
    assert len(outbox.claim(conn, "w1")) == 2  # 3 - 1 processing
    assert outbox.claim(conn, "w2") == []


def test_a_limit_of_3_never_sees_a_4th_processing_row_under_4_racing_workers(dsn, conn, rows):
    for i in range(40):
        rows.add(event_type="crm.contact", created_ago=1000 - i)
    control(conn, "crm.contact", concurrency_limit=3)
    peak = {"processing": 0}
    stop = threading.Event()

    def watch() -> None:
        with psycopg.connect(dsn, autocommit=True) as watcher:
            while not stop.is_set():
                (n,) = watcher.execute(
                    "SELECT count(*) FROM integration_outbox WHERE status = 'processing'"
                ).fetchone()
                peak["processing"] = max(peak["processing"], n)

    def work(name: str) -> None:
        with psycopg.connect(dsn, autocommit=True, row_factory=dict_row) as worker:
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline:
                batch = outbox.claim(worker, name, limit=5)
                for row in batch:
                    time.sleep(0.005)
                    outbox.ack(worker, row["id"], name)
                left = worker.execute(
                    "SELECT count(*) AS n FROM integration_outbox WHERE status <> 'done'"
                ).fetchone()["n"]
                if not left:
                    return

    watcher = threading.Thread(target=watch)
    watcher.start()
    workers = [threading.Thread(target=work, args=(f"w{i}",)) for i in range(4)]
    for thread in workers:
        thread.start()
    for thread in workers:
        thread.join()
    stop.set()
    watcher.join()
    done = conn.execute(
        "SELECT count(*) AS n FROM integration_outbox WHERE status = 'done'"
    ).fetchone()["n"]
    assert done == 40
    assert 1 <= peak["processing"] <= 3


def test_a_rate_of_5_per_s_with_burst_3_never_exceeds_b_plus_r_t_with_4_racing_workers(
    dsn, conn, rows
):
    for i in range(200):
        rows.add(event_type="crm.contact", created_ago=1000 - i)
    control(conn, "crm.%", rate_per_second=5, burst=3)
    handed = race_claims(dsn, 10)
    worst = worst_excess(handed, burst=3, rate=5)
    assert worst <= 0, f"handed out {worst:.2f} rows over B + R·T"
    # ≈ B + R·10 s = 53 were handed out over 10 s: the limit throttled, it did not stall
    assert 40 <= len(handed) <= 3 + 5 * 10.5


def test_a_row_matching_two_controls_needs_headroom_in_both(conn, rows):
    for i in range(5):
        rows.add(event_type="crm.contact", created_ago=100 - i)
    control(conn, "crm.%", concurrency_limit=4)
    control(conn, "crm.contact", rate_per_second=0.001, burst=2)
    assert len(outbox.claim(conn, "w1")) == 2
    assert outbox.claim(conn, "w1") == []  # the bucket is empty, the limit had 2 left


def test_a_state_row_held_by_another_claim_grants_zero_at_once(dsn, conn, rows):
    rows.add(event_type="crm.contact")
    rows.add(event_type="order.paid")
    control(conn, "crm.contact", concurrency_limit=5)
    with psycopg.connect(dsn) as holder:  # a claim in flight holds the state row
        holder.execute(
            "SELECT 1 FROM outbox_monitor.control_state WHERE event_type_filter = 'crm.contact'"
            " FOR UPDATE"
        )
        started = time.monotonic()
        got = outbox.claim(conn, "w1")
        assert time.monotonic() - started < 1
        assert claimed_types(got) == ["order.paid"]
        holder.rollback()
    assert claimed_types(outbox.claim(conn, "w1")) == ["crm.contact"]


# ------------------------------------------------------------------ the circuit breaker


def test_the_breaker_opens_after_the_configured_failures_and_not_before(conn, rows):
    control(conn, "crm.%", **BREAKER)
    ack_n(conn, rows, 1)
    fail_n(conn, rows, 2)
    assert breaker_state(conn, "crm.%") == "closed"  # 3 outcomes < min_attempts 4
    fail_n(conn, rows, 1)  # 4 outcomes, 3 failures: 0.75 >= 0.75
    assert breaker_state(conn, "crm.%") == "open"
    assert [t["transition"] for t in transitions(conn)] == ["opened"]
    assert (transitions(conn)[0]["outcomes"], transitions(conn)[0]["failures"]) == (4, 3)
    rows.add(event_type="crm.contact", created_ago=0)
    rows.add(event_type="order.paid", created_ago=0)
    assert claimed_types(outbox.claim(conn, "w1")) == ["order.paid"]  # open = paused


def test_permanent_dead_letters_never_open_the_breaker(conn, rows):
    control(conn, "crm.%", **BREAKER)
    fail_n(conn, rows, 10, permanent=True)
    assert breaker_state(conn, "crm.%") == "closed"
    assert transitions(conn) == []


def test_the_breaker_probes_once_after_the_cooldown_and_closes_on_the_probes_ack(conn, rows):
    control(conn, "crm.%", **BREAKER)
    fail_n(conn, rows, 4)
    for _ in range(3):
        rows.add(event_type="crm.contact", created_ago=0)
    assert outbox.claim(conn, "w1") == []
    time.sleep(1.1)
    probe = outbox.claim(conn, "w1")
    assert len(probe) == 1  # exactly one row: the probe
    assert breaker_state(conn, "crm.%") == "half_open"
    assert outbox.claim(conn, "w2") == []  # the probe is out
    assert outbox.ack(conn, probe[0]["id"], "w1")
    assert breaker_state(conn, "crm.%") == "closed"
    assert [t["transition"] for t in transitions(conn)] == ["opened", "closed"]
    assert len(outbox.claim(conn, "w1")) == 2  # the remaining rows flow again


def test_a_failed_probe_reopens_with_a_doubled_cooldown(conn, rows):
    control(conn, "crm.%", **BREAKER)
    fail_n(conn, rows, 4)
    rows.add(event_type="crm.contact", created_ago=0)
    time.sleep(1.1)
    (probe,) = outbox.claim(conn, "w1")
    outbox.fail(conn, probe["id"], "w1", "503 again")
    state = conn.execute(
        "SELECT breaker_state, cooldown_seconds FROM outbox_monitor.control_state"
    ).fetchone()
    assert state == {"breaker_state": "open", "cooldown_seconds": 2}
    conn.execute("UPDATE integration_outbox SET available_at = now() WHERE status = 'pending'")
    time.sleep(1.1)
    assert outbox.claim(conn, "w1") == []  # 1.1 s < the doubled 2 s
    time.sleep(1.0)
    assert len(outbox.claim(conn, "w1")) == 1
    # one episode: still one "opened", no "closed" yet
    assert [t["transition"] for t in transitions(conn)] == ["opened"]


def test_a_probes_permanent_failure_hands_out_a_new_probe_with_the_same_cooldown(conn, rows):
    control(conn, "crm.%", **BREAKER)
    fail_n(conn, rows, 4)
    rows.add(event_type="crm.contact", created_ago=0)
    rows.add(event_type="crm.contact", created_ago=0)
    time.sleep(1.1)
    (probe,) = outbox.claim(conn, "w1")
    outbox.fail(conn, probe["id"], "w1", "400 invalid", permanent=True)
    assert breaker_state(conn, "crm.%") == "half_open"
    assert len(outbox.claim(conn, "w1")) == 1  # the new probe, at once
    cooldown = conn.execute("SELECT cooldown_seconds FROM outbox_monitor.control_state")
    assert cooldown.fetchone()["cooldown_seconds"] == 1


def test_an_unresolved_probe_reopens_the_breaker_after_the_probe_timeout(conn, rows):
    control(conn, "crm.%", **BREAKER, probe_timeout_seconds=0.5)
    fail_n(conn, rows, 4)
    rows.add(event_type="crm.contact", created_ago=0)
    time.sleep(1.1)
    assert len(outbox.claim(conn, "w1")) == 1  # the probe, never resolved
    time.sleep(0.6)
    assert outbox.claim(conn, "w1") == []
    assert breaker_state(conn, "crm.%") == "open"


def test_nobody_can_open_a_breaker_with_outcomes_of_rows_it_did_not_change(conn, rows):
    control(conn, "crm.%", **BREAKER)
    row_id = rows.add(event_type="crm.contact")
    for _ in range(10):
        conn.execute(
            "SELECT outbox_monitor.record_outcome('integration_outbox', %s, 'crm.contact',"
            " 'transient')",
            (row_id,),
        )
    assert breaker_state(conn, "crm.%") == "closed"
    assert (
        conn.execute("SELECT count(*) AS n FROM outbox_monitor.control_outcomes").fetchone()["n"]
        == 0
    )


def test_nobody_can_drain_a_bucket_with_rows_it_did_not_claim(conn, rows):
    ids = [rows.add(event_type="crm.contact") for _ in range(3)]
    control(conn, "crm.%", rate_per_second=0.001, burst=3)
    conn.execute("SELECT outbox_monitor.claim_consume('integration_outbox', %s)", (ids,))
    assert len(outbox.claim(conn, "w1")) == 3


def test_ack_and_fail_without_breakers_log_no_outcome(conn, rows):
    control(conn, "crm.%", concurrency_limit=5)
    ack_n(conn, rows, 2)
    fail_n(conn, rows, 2)
    assert (
        conn.execute("SELECT count(*) AS n FROM outbox_monitor.control_outcomes").fetchone()["n"]
        == 0
    )


# ------------------------------------------------------------------ who may call what


def test_a_read_only_login_cannot_hold_the_state_rows_or_drain_a_bucket(dsn, conn, rows, logins):
    rows.add(event_type="crm.contact")
    control(conn, "crm.contact", concurrency_limit=5)
    viewer = logins.dsn(dsn, logins.read)
    with psycopg.connect(viewer) as reader:  # a transaction kept open, as an attacker would
        with pytest.raises(psycopg.errors.InsufficientPrivilege, match="needs UPDATE"):
            reader.execute("SELECT * FROM outbox_monitor.claim_grants('integration_outbox')")
        reader.rollback()
        with pytest.raises(psycopg.errors.InsufficientPrivilege, match="needs UPDATE"):
            reader.execute(
                "SELECT outbox_monitor.claim_consume('integration_outbox', ARRAY[1]::bigint[])"
            )
        reader.rollback()
        reader.execute("SELECT 1")  # an open transaction while a worker claims
        assert claimed_types(outbox.claim(conn, "w1")) == ["crm.contact"]


def test_a_worker_login_with_only_the_tables_grants_claims_through_controls(
    dsn, conn, rows, logins
):
    """A worker's login that owns nothing, with UPDATE on the outbox and the schema's
    USAGE, obeys the controls: the state lives behind the owner's functions."""
    worker = worker_login(dsn)
    for _ in range(3):
        rows.add(event_type="crm.contact")
    control(conn, "crm.contact", rate_per_second=0.001, burst=2)
    with psycopg.connect(worker, autocommit=True, row_factory=dict_row) as w:
        first = outbox.claim(w, "w1")
        assert len(first) == 2 and outbox.claim(w, "w1") == []  # the bucket held
        assert outbox.ack(w, first[0]["id"], "w1")


# ------------------------------------------------------------------ the hostile tester's findings


def test_outcomes_written_inside_savepoints_count_and_a_probe_acked_there_closes(dsn, conn, rows):
    """A worker's ack or fail inside a savepoint (``process_batch`` in a caller's
    transaction) is this transaction's own: it opens and closes the breaker like any other."""
    control(conn, "crm.%", **BREAKER)
    for _ in range(4):
        rows.add(event_type="crm.contact")
    with psycopg.connect(dsn, row_factory=dict_row) as worker, worker.transaction():
        for row in outbox.claim(worker, "w1", limit=4):
            with worker.transaction():  # a savepoint per row
                outbox.fail(worker, row["id"], "w1", "503 upstream")
    assert breaker_state(conn, "crm.%") == "open"
    conn.execute("UPDATE integration_outbox SET available_at = now() WHERE status = 'pending'")
    time.sleep(1.1)
    with psycopg.connect(dsn, row_factory=dict_row) as worker, worker.transaction():
        (probe,) = outbox.claim(worker, "w1")
        with worker.transaction():
            assert outbox.ack(worker, probe["id"], "w1")
    assert breaker_state(conn, "crm.%") == "closed"


def test_a_state_that_would_stop_every_claim_cannot_be_written(conn):
    control(conn, "crm.%", rate_per_second=5, burst=3)
    for value in ("'-Infinity'", "-1e15"):
        with pytest.raises(psycopg.errors.CheckViolation):
            conn.execute(f"UPDATE outbox_monitor.control_state SET tokens = {value}")
    with pytest.raises(psycopg.errors.CheckViolation):
        conn.execute("UPDATE outbox_monitor.control_state SET refilled_at = 'infinity'")
    with pytest.raises(psycopg.errors.CheckViolation):
        conn.execute(
            "UPDATE outbox_monitor.control_state"
            " SET breaker_state = 'open', cooldown_seconds = NULL"
        )


def test_a_worker_with_column_grants_claims_through_controls(dsn, conn, rows):
    with psycopg.connect(dsn, autocommit=True) as su:
        su.execute(
            "DO $$ BEGIN CREATE ROLE flow_col_worker LOGIN;"
            " EXCEPTION WHEN duplicate_object THEN NULL; END $$"
        )
        su.execute(
            "GRANT USAGE ON SCHEMA outbox_monitor TO flow_col_worker;"
            " GRANT SELECT ON integration_outbox TO flow_col_worker;"
            " GRANT UPDATE (status, locked_at, locked_by, attempts, available_at, processed_at,"
            " last_error) ON integration_outbox TO flow_col_worker"
        )
    rows.add(event_type="crm.contact")
    rows.add(event_type="order.paid")
    control(conn, "crm.%", concurrency_limit=5)
    worker = psycopg.conninfo.make_conninfo(dsn, user="flow_col_worker")
    with psycopg.connect(worker, autocommit=True, row_factory=dict_row) as w:
        assert claimed_types(outbox.claim(w, "w1")) == ["crm.contact", "order.paid"]


def test_controls_on_a_table_of_another_owner_are_refused_and_never_stop_the_claim(
    db, dsn, conn, rows
):
    from outbox_monitor.access import Identity, Role
    from outbox_monitor.errors import ActionRefused
    from outbox_monitor.flow import controls as flow

    with psycopg.connect(dsn, autocommit=True) as su:
        su.execute(
            "DO $$ BEGIN CREATE ROLE flow_app_owner;"
            " EXCEPTION WHEN duplicate_object THEN NULL; END $$"
        )
        su.execute("ALTER TABLE integration_outbox OWNER TO flow_app_owner")
    operator = Identity("oncall@example.com", Role.operator, "cli")
    with pytest.raises(ActionRefused, match="not owned by the owner of the outbox_monitor"):
        flow.change(db, "crm.%", actor=operator, action="limit", changes={"concurrency_limit": 1})
    rows.add(event_type="crm.contact")
    rows.add(event_type="billing.x")
    control(conn, "crm.%", concurrency_limit=1)  # written by hand, past the product's check
    # the claim ignores controls it cannot apply (a WARNING) rather than stop every type
    assert claimed_types(outbox.claim(conn, "w1")) == ["billing.x", "crm.contact"]
