"""Migration 030 (issue 32 item 2): each outbox's worker functions with static statements,
the shared entry points dispatching to them, and ``ack_many``.

Every expected value is computed by hand from the rows each test inserts.
"""

import psycopg
import pytest
from psycopg.rows import dict_row

from outbox_monitor import outbox
from outbox_monitor.config.settings import load_settings
from outbox_monitor.store import schema
from outbox_monitor.store.db import Database
from outbox_monitor.store.queries import migration_files
from tests.flow import BREAKER, control

TABLE = "integration_outbox"
SECOND = "second_outbox"


def claimed(conn: psycopg.Connection, rows, n: int, worker: str = "w1", **fields) -> list[int]:
    """``n`` new rows (``fields`` for ``rows.add``), claimed by ``worker``; their ids."""
    for _ in range(n):
        rows.add(**fields)
    return [row["id"] for row in outbox.claim(conn, worker, limit=n)]


def refuse_ack_of(conn: psycopg.Connection, row_id: int) -> None:
    """A user's trigger that refuses to mark row ``row_id`` done."""
    conn.execute(
        "CREATE FUNCTION refuse() RETURNS trigger LANGUAGE plpgsql AS "
        "$$ BEGIN RAISE EXCEPTION 'refused by trigger'; END $$"
    )
    conn.execute(
        f"CREATE TRIGGER refuse BEFORE UPDATE ON {TABLE} FOR EACH ROW "
        f"WHEN (NEW.status = 'done' AND NEW.id = {row_id}) EXECUTE FUNCTION refuse()"
    )


def second_outbox(dsn: str) -> Database:
    """A second outbox table in the same database (``public.second_outbox``), prepared by
    init-db; the caller closes the Database."""
    with psycopg.connect(dsn, autocommit=True) as su:
        su.execute(f"CREATE TABLE {SECOND} (LIKE {TABLE} INCLUDING ALL)")
    db = Database(load_settings(dsn=dsn, table=f"public.{SECOND}"))
    schema.init_db(db, create_indexes=False)
    return db


# ------------------------------------------------------------------ ack_many


def test_ack_many_acks_exactly_the_rows_this_worker_holds(conn, rows):
    a, b, c = claimed(conn, rows, 3)
    (other,) = claimed(conn, rows, 1, worker="w2")
    pending = rows.add()
    done = rows.add(status="done", processed_ago=30)
    before = rows.get(done)

    acked = outbox.ack_many(conn, [c, other, a, pending, done, b, a, 999_999], "w1")

    assert acked == sorted([a, b, c])
    for row_id in (a, b, c):
        row = rows.get(row_id)
        assert (row["status"], row["locked_by"], row["locked_at"]) == ("done", None, None)
        assert row["processed_at"] is not None
    assert (rows.get(other)["status"], rows.get(other)["locked_by"]) == ("processing", "w2")
    assert rows.get(pending)["status"] == "pending"
    assert rows.get(done) == before
    assert outbox.ack_many(conn, [a, b], "w1") == []  # acked already: nothing held
    assert outbox.ack_many(conn, [], "w1") == []


def test_a_row_whose_ack_fails_stays_processing_and_the_others_are_acked(conn, rows):
    a, b, c = claimed(conn, rows, 3)
    refuse_ack_of(conn, b)
    warnings: list[str] = []
    conn.add_notice_handler(lambda notice: warnings.append(notice.message_primary))

    assert outbox.ack_many(conn, [a, b, c], "w1") == [a, c]

    assert [rows.get(i)["status"] for i in (a, b, c)] == ["done", "processing", "done"]
    assert rows.get(b)["locked_by"] == "w1"
    assert warnings == [
        f"row {b} of {TABLE}: recording its ack failed, it stays processing until a reap"
        " (refused by trigger)"
    ]


def outcomes(conn: psycopg.Connection) -> list[tuple[str, bool]]:
    return [
        (row["event_type_filter"], row["failed"])
        for row in conn.execute(
            "SELECT event_type_filter, failed FROM outbox_monitor.control_outcomes ORDER BY at"
        )
    ]


def test_ack_many_logs_each_acked_rows_breaker_outcome_as_ack_does(conn, rows):
    control(conn, "crm.%", **BREAKER)
    crm = claimed(conn, rows, 3, event_type="crm.contact")
    orders = claimed(conn, rows, 2, event_type="order.paid")
    (lost,) = claimed(conn, rows, 1, worker="w2", event_type="crm.contact")

    assert outbox.ack_many(conn, [*crm, *orders, lost], "w1") == sorted([*crm, *orders])
    # one ack outcome per acked crm row; none for order.paid (no breaker) nor the row not held
    assert outcomes(conn) == [("crm.%", False)] * 3

    (single,) = claimed(conn, rows, 1, event_type="crm.contact")
    assert outbox.ack(conn, single, "w1")
    assert outcomes(conn) == [("crm.%", False)] * 4


def test_ack_many_closes_a_half_open_breaker_with_its_probe_as_ack_does(conn, rows):
    control(conn, "crm.%", **BREAKER)
    conn.execute(
        "UPDATE outbox_monitor.control_state SET breaker_state = 'open', cooldown_seconds = 0,"
        " since = now() - interval '1 minute'"
    )
    rows.add(event_type="crm.contact")
    (probe,) = [row["id"] for row in outbox.claim(conn, "w1", limit=5)]  # the one probe
    assert outbox.ack_many(conn, [probe], "w1") == [probe]
    state = conn.execute("SELECT breaker_state FROM outbox_monitor.control_state").fetchone()
    assert state["breaker_state"] == "closed"
    assert [
        row["transition"]
        for row in conn.execute("SELECT transition FROM outbox_monitor.breaker_transitions")
    ] == ["closed"]


# ------------------------------------------------------------------ the Python worker


def test_process_batch_acks_the_handled_rows_with_one_statement(conn, rows):
    """A statement-level trigger counts the UPDATE statements on the outbox: the claim, the
    one failure, and one ack_many for the two handled rows (acks row by row would be 4)."""
    conn.execute("CREATE TABLE updates (n integer)")
    conn.execute(
        "CREATE FUNCTION count_update() RETURNS trigger LANGUAGE plpgsql AS "
        "$$ BEGIN INSERT INTO updates VALUES (1); RETURN NULL; END $$"
    )
    conn.execute(
        f"CREATE TRIGGER count_update AFTER UPDATE ON {TABLE}"
        " FOR EACH STATEMENT EXECUTE FUNCTION count_update()"
    )
    first, broken, last = (rows.add(created_ago=30 - i) for i in range(3))

    def handle(row):
        if row["id"] == broken:
            raise RuntimeError("HTTP 503")

    counts = outbox.process_batch(conn, "w1", handle)

    assert counts == {
        "claimed": 3,
        "acked": 2,
        "retried": 1,
        "dead_lettered": 0,
        "lost": 0,
        "unrecorded": 0,
    }
    assert [rows.get(i)["status"] for i in (first, broken, last)] == ["done", "pending", "done"]
    assert conn.execute("SELECT count(*) AS n FROM updates").fetchone()["n"] == 3


def test_process_batch_counts_a_row_reaped_meanwhile_as_lost(conn, rows):
    first, reaped = rows.add(created_ago=20), rows.add(created_ago=10)

    def handle(row):
        if row["id"] == first:  # the reaper takes the other row back meanwhile
            conn.execute(
                f"UPDATE {TABLE} SET status = 'pending', locked_by = NULL WHERE id = %s",
                (reaped,),
            )

    counts = outbox.process_batch(conn, "w1", handle)
    assert (counts["acked"], counts["lost"], counts["unrecorded"]) == (1, 1, 0)
    assert [rows.get(i)["status"] for i in (first, reaped)] == ["done", "pending"]


def test_an_interrupted_batch_acks_the_rows_handled_before_the_interrupt(conn, rows):
    first, stopped, never = (rows.add(created_ago=30 - i) for i in range(3))

    def handle(row):
        if row["id"] == stopped:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        outbox.process_batch(conn, "w1", handle)
    assert [rows.get(i)["status"] for i in (first, stopped, never)] == [
        "done",
        "processing",
        "processing",
    ]


# ------------------------------------------------------------------ the dispatch


def test_two_outboxes_in_one_database_each_reach_their_own_functions(dsn, conn, rows):
    with second_outbox(dsn) as second_db, psycopg.connect(dsn, autocommit=True) as worker:
        worker.row_factory = dict_row
        mine = rows.add(created_ago=20)
        theirs = [
            worker.execute(
                f"INSERT INTO {SECOND} (event_type, aggregate_type, aggregate_id, event_key,"
                " payload, created_at) VALUES ('order.paid', 'order', '1', %s, '{}',"
                " now() - make_interval(secs => %s)) RETURNING id",
                (f"second:{n}", 30 - n),
            ).fetchone()["id"]
            for n in range(3)
        ]
        table = f"public.{SECOND}"
        assert [r["id"] for r in outbox.claim(worker, "w1", limit=10)] == [mine]
        assert [r["id"] for r in outbox.claim(worker, "w1", limit=10, table=table)] == theirs
        # the same id in each table: each call changes only its own table's row
        assert outbox.ack_many(worker, theirs[:2], "w1", table=table) == theirs[:2]
        assert outbox.fail(worker, theirs[2], "w1", "HTTP 503", table=table) == "pending"
        assert outbox.ack(worker, mine, "w1")
        statuses = worker.execute(f"SELECT id, status FROM {SECOND} ORDER BY id").fetchall()
        assert [row["status"] for row in statuses] == ["done", "done", "pending"]
        assert rows.get(mine)["status"] == "done"
        prepared = worker.execute(
            "SELECT outbox::text AS t FROM outbox_monitor.worker_outboxes ORDER BY 1"
        ).fetchall()
        assert [row["t"] for row in prepared] == [TABLE, SECOND]
        assert second_db.settings.table == table


def test_a_table_init_db_has_not_prepared_is_refused_with_the_fix(conn):
    conn.execute(f"CREATE TABLE unprepared (LIKE {TABLE} INCLUDING ALL)")
    for call in (
        "SELECT * FROM outbox_monitor.claim('unprepared', 'w1', 5)",
        "SELECT outbox_monitor.ack('unprepared', 1, 'w1')",
        "SELECT outbox_monitor.ack_many('unprepared', '{1}', 'w1')",
        "SELECT outbox_monitor.fail('unprepared', 1, 'w1', 'x')",
    ):
        with pytest.raises(psycopg.errors.ObjectNotInPrerequisiteState) as refused:
            conn.execute(call)
        assert refused.value.diag.message_primary == (
            "outbox table unprepared has no worker functions: init-db has not prepared it"
        )
        assert "outbox-monitor init-db with OUTBOX_MONITOR_TABLE=unprepared" in (
            refused.value.diag.message_hint
        )


def test_a_renamed_table_is_refused_until_init_db_prepares_it_again(dsn, conn, rows):
    row_id = rows.add()
    conn.execute(f"ALTER TABLE {TABLE} RENAME TO renamed_outbox")
    with pytest.raises(psycopg.errors.ObjectNotInPrerequisiteState) as refused:
        conn.execute("SELECT * FROM outbox_monitor.claim('renamed_outbox', 'w1', 5)")
    assert refused.value.diag.message_primary == (
        "outbox table renamed_outbox was renamed since init-db prepared its worker functions"
        f" (as public.{TABLE})"
    )
    # ack skips that look (an ack's cost): its statement names the old table
    with pytest.raises(psycopg.errors.UndefinedTable, match=f'"public.{TABLE}" does not exist'):
        conn.execute("SELECT outbox_monitor.ack('renamed_outbox', %s, 'w1')", (row_id,))
    with Database(load_settings(dsn=dsn, table="public.renamed_outbox")) as db:
        schema.init_db(db, create_indexes=False)
    claimed_rows = outbox.claim(conn, "w1", table="public.renamed_outbox")
    assert [row["id"] for row in claimed_rows] == [row_id]
    assert outbox.ack_many(conn, [row_id], "w1", table="public.renamed_outbox") == [row_id]
    left = conn.execute(
        "SELECT count(*) AS n FROM pg_proc WHERE pronamespace = 'outbox_monitor'::regnamespace"
        f" AND proname LIKE '%%\\_\\_public\\_\\_{TABLE}'"
        " AND proname ~ '^(claim|ack|ack_logging|fail|fail_logging|ack_many|ack_many_logging)__'"
    ).fetchone()["n"]
    assert left == 0  # the functions of its old name are dropped


def test_a_table_dropped_and_created_again_is_refused_until_prepared(dsn, conn):
    conn.execute(f"CREATE TABLE keep (LIKE {TABLE} INCLUDING ALL EXCLUDING DEFAULTS)")
    conn.execute(f"DROP TABLE {TABLE}")
    conn.execute(f"ALTER TABLE keep RENAME TO {TABLE}")  # a new oid under the old name
    with pytest.raises(psycopg.errors.ObjectNotInPrerequisiteState, match="has no worker"):
        conn.execute(f"SELECT outbox_monitor.ack('{TABLE}', 1, 'w1')")
    with Database(load_settings(dsn=dsn)) as db:
        schema.init_db(db, create_indexes=False)
    assert conn.execute(f"SELECT outbox_monitor.ack('{TABLE}', 1, 'w1') AS a").fetchone() == {
        "a": False
    }
    prepared = conn.execute("SELECT count(*) AS n FROM outbox_monitor.worker_outboxes")
    assert prepared.fetchone()["n"] == 1  # the dropped table's row is gone


def test_an_upgrade_prepares_the_outboxes_the_database_already_knows(empty_dsn, monkeypatch):
    """Before migration 030 the shared functions served any table: an upgrade's init-db
    prepares, besides its own table, the tables the flow controls and the sampler name, so
    that their workers go on."""
    up_to_028 = [m for m in migration_files() if m[0] <= 28]
    monkeypatch.setattr(schema, "migration_files", lambda: up_to_028)
    with Database(load_settings(dsn=empty_dsn)) as db:
        schema.init_db(db, create_table=True, create_indexes=False)
    with psycopg.connect(empty_dsn, autocommit=True, row_factory=dict_row) as conn:
        for name in (SECOND, "third_outbox", "not_an_outbox"):
            columns = f"LIKE {TABLE} INCLUDING ALL" if name != "not_an_outbox" else "x int"
            conn.execute(f"CREATE TABLE {name} ({columns})")
        conn.execute(
            "INSERT INTO outbox_monitor.controls (outbox, event_type_filter, layer, paused,"
            f" updated_by) VALUES ('{SECOND}', 'crm.%', 'ui', true, 'oncall')"
        )
        for name in ("public.third_outbox", "public.not_an_outbox", "public.gone"):
            conn.execute(
                "INSERT INTO outbox_monitor.samples (table_name, queue_depth, pending_total,"
                " scheduled_retries, processing, stuck_locks, failed_in_window)"
                " VALUES (%s, 0, 0, 0, 0, 0, 0)",
                (name,),
            )
        for name in (SECOND, "third_outbox"):
            conn.execute(
                f"INSERT INTO {name} (event_type, aggregate_type, aggregate_id, event_key,"
                " payload) VALUES ('order.paid', 'order', '1', 'k', '{}')"
            )
        monkeypatch.undo()
        with Database(load_settings(dsn=empty_dsn)) as db:
            assert (
                "030_static_worker_functions"
                in schema.init_db(db, create_indexes=False).applied_migrations
            )
        prepared = conn.execute(
            "SELECT outbox::text AS t FROM outbox_monitor.worker_outboxes ORDER BY 1"
        ).fetchall()
        assert [row["t"] for row in prepared] == [TABLE, SECOND, "third_outbox"]
        for name in (SECOND, "third_outbox"):  # the first through the controls' path
            claimed_rows = outbox.claim(conn, "w1", table=f"public.{name}")
            assert [row["event_key"] for row in claimed_rows] == ["k"]


# ------------------------------------------------------------------ hostile table names


def prepared_twin(dsn: str, schema_name: str, table_name: str) -> str:
    """A copy of the integration outbox as ``schema_name.table_name`` (created as needed),
    prepared by init-db, holding one pending row; its name (for ``table=``)."""
    ident = psycopg.sql.Identifier
    with psycopg.connect(dsn, autocommit=True) as su:
        su.execute(psycopg.sql.SQL("CREATE SCHEMA IF NOT EXISTS {}").format(ident(schema_name)))
        su.execute(
            psycopg.sql.SQL("CREATE TABLE {} (LIKE {} INCLUDING ALL)").format(
                ident(schema_name, table_name), ident(TABLE)
            )
        )
        su.execute(
            psycopg.sql.SQL(
                "INSERT INTO {} (event_type, aggregate_type, aggregate_id, event_key, payload)"
                " VALUES ('order.paid', 'order', '1', %s, '{{}}')"
            ).format(ident(schema_name, table_name)),
            (f"{schema_name}.{table_name}",),
        )
    name = f"{schema_name}.{table_name}"
    with Database(load_settings(dsn=dsn, table=name)) as db:
        schema.init_db(db, create_indexes=False)
    return name


def test_two_tables_whose_names_meet_at_the_seam_keep_their_own_functions(dsn, conn):
    """``public._x`` and ``public_.x`` would both be ``<kind>__public___x``: each table's
    claim and ack_many still reach that table's rows only."""
    first, second = ("public", "_x"), ("public_", "x")
    a = prepared_twin(dsn, *first)
    b = prepared_twin(dsn, *second)
    (upgrade,) = [text for v, _, text in migration_files() if v == 32]
    for again in (False, True):  # migration 032 (drop, rename, prepare again) run once more
        if again:
            conn.execute(upgrade)
            conn.execute(
                "UPDATE public._x SET status = 'pending'; UPDATE public_.x SET status = 'pending'"
            )
        for table, (schema_name, table_name) in ((a, first), (b, second)):
            got = outbox.claim(conn, "w1", limit=5, table=table)
            assert [row["event_key"] for row in got] == [f"{schema_name}.{table_name}"]
            assert outbox.ack_many(conn, [got[0]["id"]], "w1", table=table) == [got[0]["id"]]
    names = conn.execute(
        "SELECT count(DISTINCT outbox_monitor.worker_function_name('claim', schema_name,"
        " table_name)) AS n FROM outbox_monitor.worker_outboxes"
        " WHERE outbox IN (%s::regclass, %s::regclass)",
        (a, b),
    ).fetchone()["n"]
    assert names == 2


# ------------------------------------------------------------------ privilege


def test_ack_many_of_a_login_without_update_is_refused_not_answered_empty(dsn, conn, rows, logins):
    """A login that may not update the outbox (the viewer's) gets ack's permission error
    from ack_many, not an empty answer with one WARNING per row (its worker would count
    every row as unrecorded and the reaper would hand them out again)."""
    ids = claimed(conn, rows, 2)
    with psycopg.connect(logins.dsn(dsn, logins.read), autocommit=True) as viewer:
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            viewer.execute(f"SELECT outbox_monitor.ack('{TABLE}', %s, 'w1')", (ids[0],))
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            viewer.execute(
                f"SELECT outbox_monitor.ack_many('{TABLE}', %s, 'w1')", (ids,)
            ).fetchone()
    assert [rows.get(i)["status"] for i in ids] == ["processing", "processing"]


def test_a_table_named_as_another_tables_hash_keeps_its_own_functions(dsn, conn):
    """``claim__<first 42 bytes of a long schema>__<12 hex of md5>`` is the hashed name of the
    long table's claim and the plain name of the table ``<those 42 bytes>.<those 12 hex>``."""
    long_schema = "tenant" + "a" * 44
    for n in range(100):
        name = conn.execute(
            "SELECT outbox_monitor.worker_function_name('claim', %s, %s) AS n",
            (long_schema, f"outbox{n}"),
        ).fetchone()["n"]
        head, digest = name.rsplit("__", 1)
        if digest[0].isalpha():
            break
    first = (long_schema, f"outbox{n}")
    second = (head.removeprefix("claim__"), digest)
    a = prepared_twin(dsn, *first)
    b = prepared_twin(dsn, *second)
    for table, (schema_name, table_name) in ((a, first), (b, second)):
        got = outbox.claim(conn, "w1", limit=5, table=table)
        assert [row["event_key"] for row in got] == [f"{schema_name}.{table_name}"]
