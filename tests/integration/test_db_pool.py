"""``Database(settings, pool=...)``: a caller's pool, used with the monitor's session and
given back with the caller's own (statement timeout, autocommit, row and cursor factory)."""

from collections.abc import Iterator

import psycopg
import pytest
from psycopg.conninfo import conninfo_to_dict
from psycopg.pq import TransactionStatus
from psycopg_pool import ConnectionPool, PoolClosed

from outbox_monitor.config.settings import load_settings
from outbox_monitor.errors import DatabaseUnavailable, QueryTimeout, TableMissing
from outbox_monitor.figures import metrics
from outbox_monitor.store.db import Database


def caller_pool(dsn: str, timeout: str = "0", **options) -> ConnectionPool:
    """One connection (so that the caller gets back the very one we used), not autocommit,
    tuple rows, the caller's own statement_timeout set by ``configure``."""

    def configure(conn: psycopg.Connection) -> None:
        conn.execute("SELECT set_config('statement_timeout', %s, false)", (timeout,))
        conn.commit()

    pool = ConnectionPool(dsn, min_size=1, max_size=1, configure=configure, open=False, **options)
    return pool


@pytest.fixture
def pool(dsn: str) -> Iterator[ConnectionPool]:
    with caller_pool(dsn, "12345ms") as opened:
        opened.wait()
        yield opened


def caller_state(pool: ConnectionPool) -> dict:
    """What the caller sees on its (only) connection."""
    with pool.connection() as conn:
        row = conn.execute("SHOW statement_timeout").fetchone()
        state = {
            "pid": conn.info.backend_pid,
            "row": row,
            "autocommit": conn.autocommit,
            "cursor_factory": conn.cursor_factory,
            "prepare_threshold": conn.prepare_threshold,
            "last_statement": hasattr(conn, "last_statement"),
        }
        conn.rollback()
    return state


CALLERS = {
    "row": ("12345ms",),
    "autocommit": False,
    "cursor_factory": psycopg.Cursor,
    "prepare_threshold": 5,
    "last_statement": False,
}


def test_queries_on_a_callers_pool_run_with_our_session(dsn, pool):
    before = caller_state(pool)
    assert {key: value for key, value in before.items() if key != "pid"} == CALLERS
    with Database(load_settings(dsn=dsn, statement_timeout=0.3), pool=pool) as db:
        with db.connection() as conn:
            assert conn.info.backend_pid == before["pid"]
            row = conn.execute(
                "SELECT current_setting('statement_timeout') AS timeout, "
                "current_setting('client_encoding') AS encoding"
            ).fetchone()
            assert row == {"timeout": "300ms", "encoding": "UTF8"}
            assert conn.autocommit is True
            assert conn.prepare_threshold is None
            assert conn.last_statement.startswith("SELECT current_setting")
        assert metrics.queue_depth(db) == 0
    after = caller_state(pool)
    assert after == before  # the same connection, the caller's settings back


def test_a_timeout_inside_our_use_raises_query_timeout_and_gives_the_connection_back(dsn, pool):
    pid = caller_state(pool)["pid"]
    db = Database(load_settings(dsn=dsn, statement_timeout=0.2), pool=pool)
    with pytest.raises(QueryTimeout, match=r"0\.2 s"), db.connection() as conn:
        conn.execute("SELECT pg_sleep(1)")
    assert caller_state(pool) == {"pid": pid, **CALLERS}
    with pool.connection() as conn:  # the caller's 12345 ms: a 0.5 s sleep completes
        assert conn.execute("SELECT 1 FROM pg_sleep(0.5)").fetchone() == (1,)


def test_a_callers_set_survives_our_use_and_its_reset_still_means_its_start_value(dsn):
    with caller_pool(dsn, "0") as pool:
        with pool.connection() as conn:
            conn.execute("SET statement_timeout = '12345ms'")
        db = Database(load_settings(dsn=dsn, statement_timeout=1.0001), pool=pool)
        with db.connection() as conn:
            assert conn.execute("SHOW statement_timeout").fetchone() == {
                "statement_timeout": "1001ms"  # rounded up to whole milliseconds
            }
        with pool.connection() as conn:
            assert conn.execute("SHOW statement_timeout").fetchone() == ("12345ms",)
            conn.execute("RESET statement_timeout")
            assert conn.execute("SHOW statement_timeout").fetchone() == ("0",)


def test_rows_are_dicts_through_database_and_tuples_for_the_caller(dsn, pool):
    db = Database(load_settings(dsn=dsn), pool=pool)
    with db.connection() as conn:
        assert conn.execute("SELECT 1 AS one").fetchone() == {"one": 1}
    with pool.connection() as conn:
        assert conn.execute("SELECT 1 AS one").fetchone() == (1,)


def test_session_and_transaction_work_on_a_callers_pool(dsn, pool):
    pid = caller_state(pool)["pid"]
    db = Database(load_settings(dsn=dsn, statement_timeout=0.5), pool=pool)
    with db.session():
        assert metrics.queue_depth(db) == 0
        with db.connection() as conn:
            assert conn.info.backend_pid == pid
            assert conn.execute("SHOW statement_timeout").fetchone()["statement_timeout"] == (
                "500ms"
            )
    with db.transaction() as conn:
        assert conn.info.transaction_status == TransactionStatus.INTRANS
        conn.execute("CREATE TABLE made_in_a_transaction (n int)")
    with pytest.raises(TableMissing), db.transaction() as conn:
        conn.execute("INSERT INTO made_in_a_transaction VALUES (1)")
        conn.execute("SELECT 1 FROM no_such_table")  # rolls the insert back
    with pool.connection() as conn:
        assert conn.execute("SELECT count(*) FROM made_in_a_transaction").fetchone() == (0,)
    assert caller_state(pool) == {"pid": pid, **CALLERS}


def test_close_leaves_the_callers_pool_open_and_usable(dsn, pool):
    with Database(load_settings(dsn=dsn), pool=pool) as db:
        assert metrics.queue_depth(db) == 0
    db.close()
    assert not pool.closed
    with pool.connection() as conn:
        assert conn.execute("SELECT 1").fetchone() == (1,)


def test_a_connection_lost_inside_our_use_is_discarded_not_returned(dsn, pool):
    pid = caller_state(pool)["pid"]
    db = Database(load_settings(dsn=dsn), pool=pool)
    with pytest.raises(DatabaseUnavailable, match="lost the database"), db.connection() as conn:
        with psycopg.connect(dsn, autocommit=True) as killer:
            killer.execute("SELECT pg_terminate_backend(%s)", (pid,))
        conn.execute("SELECT 1")
    assert conn.closed
    assert pool.get_stats().get("returns_bad") == 1
    state = caller_state(pool)  # a new connection from the caller's pool, the caller's own
    assert state["pid"] != pid
    assert {key: value for key, value in state.items() if key != "pid"} == CALLERS


def test_a_callers_pool_is_never_opened_by_database(dsn):
    pool = caller_pool(dsn)
    db = Database(load_settings(dsn=dsn), pool=pool)
    with pytest.raises(PoolClosed), db.connection():
        pass
    assert pool.closed


def test_without_a_dsn_diagnosis_uses_the_pools_conninfo_and_kwargs(dsn, pool, monkeypatch):
    for name in ("OUTBOX_MONITOR_DSN", "DATABASE_URL"):
        monkeypatch.delenv(name, raising=False)
    parts = conninfo_to_dict(dsn)
    dbname = parts.pop("dbname")
    lent = ConnectionPool(
        psycopg.conninfo.make_conninfo(**parts),
        kwargs={"dbname": dbname, "autocommit": False},
        open=False,
    )
    db = Database(load_settings(), pool=lent)
    assert conninfo_to_dict(db.settings.dsn) == conninfo_to_dict(dsn)
    with db.direct_connection(statement_timeout=None) as conn:
        assert conn.execute("SELECT current_database() AS db").fetchone() == {"db": dbname}
    with_dsn = Database(load_settings(dsn="postgresql://elsewhere/x"), pool=lent)
    assert with_dsn.settings.dsn == "postgresql://elsewhere/x"  # settings.dsn wins
    dynamic = ConnectionPool(lambda: dsn, open=False)
    assert Database(load_settings(), pool=dynamic).settings.dsn is None  # never called


def test_a_connection_we_leave_mid_statement_is_closed_and_replaced(dsn, pool):
    pid = caller_state(pool)["pid"]
    db = Database(load_settings(dsn=dsn), pool=pool)
    with db.connection() as conn:
        conn.pgconn.send_query(b"SELECT pg_sleep(0.1)")  # its result never read: ACTIVE
    assert conn.closed  # our settings could not be taken back: closed, not returned
    state = caller_state(pool)
    assert state["pid"] != pid
    assert {key: value for key, value in state.items() if key != "pid"} == CALLERS
