"""Attack: horizon holders."""

import threading
import time

import psycopg
import pytest
from psycopg import sql

from outbox_monitor.config import load_settings
from outbox_monitor.db import Database
from outbox_monitor.health.horizon import PREPARED, horizon


@pytest.mark.xfail(
    strict=True,
    reason="not fixed: held_seconds is now() - xact_start for every session; a READ COMMITTED "
    "session without an xid holds the horizon only since its statement's snapshot",
)
def test_a_read_committed_transaction_of_short_statements_holds_only_its_statement(dsn):
    """A read-only READ COMMITTED transaction open 4 s whose statement began 1 s ago holds
    the horizon since that statement's snapshot (1 s), not since BEGIN (4 s)."""
    with psycopg.connect(dsn, application_name="long-rc-reader") as reader:
        reader.execute("SELECT 1")  # BEGIN (psycopg), a snapshot taken and released
        time.sleep(3)
        worker = threading.Thread(target=lambda: reader.execute("SELECT pg_sleep(3)"))
        worker.start()
        time.sleep(1)
        with Database(load_settings(dsn=dsn)) as db:
            found = horizon(db)
        worker.join()
    [holder] = [h for h in found.holders if h.application == "long-rc-reader"]
    print(holder)
    assert holder.holds_horizon
    assert holder.held_seconds < 2.5, holder.held_seconds  # ~1 s: its snapshot is 1 s old


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
