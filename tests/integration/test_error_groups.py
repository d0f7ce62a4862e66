"""SPEC §2 error groups from the cache of migration 006 (issue 11 item 3): after every kind
of change the groups equal hand-computed ones and those of the exact query, which
normalises every failed row."""

import hashlib
import logging

import psycopg
import pytest
from psycopg import sql

from outbox_monitor.access import Identity, Role
from outbox_monitor.actions.prune import preview_prune
from outbox_monitor.actions.replay import ReplaySelection, preview_replay
from outbox_monitor.actions.run import apply
from outbox_monitor.config.settings import load_settings
from outbox_monitor.figures import error_grouping
from outbox_monitor.store.db import Database
from outbox_monitor.store.filters import Where
from tests.at_once import run_at_once

OPERATOR = Identity("ops@example.com", Role.operator, "cli")
AUTH = "HTTP 401 invalid API key for account <n>"
TIMEOUT = "timeout after <n> ms calling <str>"


def group_id(event_type: str, fingerprint: str) -> str:
    """SPEC §2: the first 12 hex digits of md5(event_type || ':' || normalised)."""
    return hashlib.md5(f"{event_type}:{fingerprint}".encode()).hexdigest()[:12]


def counts(db: Database, **filters) -> dict[str, int]:
    """{group_id: failed} of error_grouping.error_groups, after checking that every field equals
    the exact query's (every failed row normalised now) and that a replay of each group
    would preview exactly its rows."""
    cached = error_grouping.error_groups(db, **filters)
    where = Where().event_type(filters.get("event_type"))
    exact = db.fetch_all(
        "error_groups_exact",
        {"limit": 200, "table_regclass": db.table_name, **where.params},
        and_filters=where.fragment,
    )
    assert sorted(cached, key=lambda g: g["group_id"]) == sorted(exact, key=lambda g: g["group_id"])
    for group in cached:
        selection = ReplaySelection(
            error_group=group["group_id"], event_type=filters.get("event_type")
        )
        assert preview_replay(db, selection).matched == group["failed"]
    return {g["group_id"]: g["failed"] for g in cached}


def auth(rows, account: int, *, ago: float = 60, event_type: str = "crm.upsert") -> int:
    """A dead letter of the AUTH group (accounts below 1000 get 4 digits: a number)."""
    return rows.add(
        event_type=event_type,
        status="failed",
        attempts=10,
        processed_ago=ago,
        last_error=f"HTTP 401 invalid API key for account {account:04d}",
    )


def timeout(rows, ms: int, *, ago: float = 60, event_type: str = "crm.upsert") -> int:
    return rows.add(
        event_type=event_type,
        status="failed",
        attempts=10,
        processed_ago=ago,
        last_error=f"timeout after {ms} ms calling 'hooks.slack.com'",
    )


def generation(conn) -> int:
    """How many times the groups of the outbox table were recounted from scratch."""
    return conn.execute(
        "SELECT generation FROM outbox_monitor.error_groups_state "
        "WHERE table_oid = 'integration_outbox'::regclass"
    ).fetchone()["generation"]


def cached_ids(conn) -> list[int]:
    return [
        r["id"]
        for r in conn.execute("SELECT id FROM outbox_monitor.error_fingerprints ORDER BY id")
    ]


def test_new_dead_letters_are_added_without_recounting(db, rows, conn):
    auth(rows, 12345, ago=300)
    timeout(rows, 30000, ago=200)
    assert counts(db) == {group_id("crm.upsert", AUTH): 1, group_id("crm.upsert", TIMEOUT): 1}
    first = generation(conn)

    auth(rows, 67890, ago=100)
    newest = auth(rows, 11111, ago=50)
    timeout(rows, 5000, ago=40, event_type="order.paid")
    groups = {g["group_id"]: g for g in error_grouping.error_groups(db)}
    assert {key: g["failed"] for key, g in groups.items()} == {
        group_id("crm.upsert", AUTH): 3,
        group_id("crm.upsert", TIMEOUT): 1,
        group_id("order.paid", TIMEOUT): 1,
    }
    auth_group = groups[group_id("crm.upsert", AUTH)]
    assert auth_group["fingerprint"] == AUTH
    assert auth_group["first_seen"] == rows.at(300)
    assert auth_group["last_seen"] == rows.at(50)
    assert auth_group["sample_error"] == rows.get(newest)["last_error"]  # largest id's error
    assert generation(conn) == first  # counted incrementally: only the 3 new rows normalised
    assert counts(db) == {key: g["failed"] for key, g in groups.items()}


def test_a_replayed_row_leaves_its_group_and_an_empty_group_goes(db, rows, conn):
    one = auth(rows, 1)
    auth(rows, 2)
    lone = timeout(rows, 30000)
    assert counts(db) == {group_id("crm.upsert", AUTH): 2, group_id("crm.upsert", TIMEOUT): 1}

    preview = preview_replay(db, ReplaySelection(ids=(one, lone)))
    assert apply(db, preview, actor=OPERATOR).changed == 2

    assert counts(db) == {group_id("crm.upsert", AUTH): 1}
    assert one not in cached_ids(conn) and lone not in cached_ids(conn)  # forgotten


def test_a_row_failing_again_with_another_error_moves_group(db, rows, conn):
    row = auth(rows, 1)
    auth(rows, 2)
    assert counts(db) == {group_id("crm.upsert", AUTH): 2}

    preview = preview_replay(db, ReplaySelection(ids=(row,)))
    apply(db, preview, actor=OPERATOR)
    claimed = conn.execute(
        "SELECT id FROM outbox_monitor.claim('integration_outbox', 'worker-9', 10)"
    ).fetchall()
    assert [r["id"] for r in claimed] == [row]
    status = conn.execute(
        "SELECT outbox_monitor.fail('integration_outbox', %s, 'worker-9', "
        "'timeout after 9000 ms calling \"api.crm.example\"', true) AS status",
        (row,),
    ).fetchone()["status"]
    assert status == "failed"

    assert counts(db) == {group_id("crm.upsert", AUTH): 1, group_id("crm.upsert", TIMEOUT): 1}


def test_users_own_delete_and_a_prune_are_counted(db, rows, conn):
    auth(rows, 1, ago=60)
    deleted = auth(rows, 2, ago=60)
    auth(rows, 3, ago=40 * 86400)
    timeout(rows, 1000, ago=50 * 86400)
    assert counts(db) == {group_id("crm.upsert", AUTH): 3, group_id("crm.upsert", TIMEOUT): 1}

    conn.execute("DELETE FROM integration_outbox WHERE id = %s", (deleted,))
    assert counts(db) == {group_id("crm.upsert", AUTH): 2, group_id("crm.upsert", TIMEOUT): 1}

    preview = preview_prune(db, done_older_than=None, failed_older_than=30 * 86400)
    assert apply(db, preview, actor=OPERATOR).changed == 2
    assert counts(db) == {group_id("crm.upsert", AUTH): 1}


def test_a_dead_letter_with_an_old_time_of_failure_is_counted(db, rows):
    """A row written as failed long ago by the users' own SQL (no new processed_at): the
    failed rows' count and processed_at sum no longer match, so the groups are recounted."""
    auth(rows, 1, ago=60)
    assert counts(db) == {group_id("crm.upsert", AUTH): 1}
    auth(rows, 2, ago=30 * 86400)
    rows.add(status="failed", last_error="HTTP 500", processed_ago=None)  # no time at all
    assert counts(db) == {group_id("crm.upsert", AUTH): 2, group_id("order.paid", "HTTP 500"): 1}


def test_event_type_filter_exact_and_like(db, rows):
    auth(rows, 1, event_type="order.paid")
    auth(rows, 2, event_type="order_paid")
    auth(rows, 3, event_type="orderXpaid")
    timeout(rows, 1000, event_type="invoice.sent")
    assert counts(db, event_type="order.paid") == {group_id("order.paid", AUTH): 1}
    assert counts(db, event_type="order_%") == {group_id("order_paid", AUTH): 1}
    assert counts(db, event_type="order%") == {
        group_id("order.paid", AUTH): 1,
        group_id("order_paid", AUTH): 1,
        group_id("orderXpaid", AUTH): 1,
    }
    assert counts(db, event_type="nothing%") == {}


def test_a_first_fill_takes_several_bounded_calls(db, rows):
    for account in range(5):
        auth(rows, 1000 + account)
    # forget (nothing cached yet), fill 2 + 2 + 1 rows, count
    assert error_grouping.refresh_error_groups(db, batch=2) == 5
    for account in range(3):
        timeout(rows, 2000 + account)
    assert error_grouping.refresh_error_groups(db, batch=2) == 2  # new rows: 2 + 1
    assert error_grouping.refresh_error_groups(db, batch=2) == 1  # nothing new
    assert counts(db) == {group_id("crm.upsert", AUTH): 5, group_id("crm.upsert", TIMEOUT): 3}


def test_two_refreshes_at_once_neither_fail_nor_double_count(make_dsn):
    dsn = make_dsn()
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(
            "INSERT INTO integration_outbox (event_type, aggregate_type, aggregate_id, "
            "event_key, payload, status, attempts, last_error, processed_at) "
            "SELECT 'crm.upsert', 'c', g::text, 'k' || g, '{}', 'failed', 10, "
            "'HTTP 401 invalid API key for account ' || (10000 + g), now() "
            "FROM generate_series(1, 3000) AS g"
        )

    def refresh() -> dict:
        with Database(load_settings(dsn=dsn)) as db:
            return {g["group_id"]: g["failed"] for g in error_grouping.error_groups(db)}

    results = run_at_once(refresh, times=3)
    assert results == [{group_id("crm.upsert", AUTH): 3000}] * 3
    with psycopg.connect(dsn) as conn:
        cached = conn.execute("SELECT count(*) FROM outbox_monitor.error_fingerprints")
        assert cached.fetchone()[0] == 3000


def test_the_viewer_login_fills_the_cache_through_the_function_only(dsn, logins, rows):
    auth(rows, 1)
    timeout(rows, 30000)
    expected = {group_id("crm.upsert", AUTH): 1, group_id("crm.upsert", TIMEOUT): 1}
    with Database(load_settings(dsn=logins.dsn(dsn, logins.read))) as viewer:
        assert {g["group_id"]: g["failed"] for g in error_grouping.error_groups(viewer)} == expected
        with viewer.connection() as conn, pytest.raises(psycopg.errors.InsufficientPrivilege):
            conn.execute(
                "INSERT INTO outbox_monitor.error_fingerprints VALUES "
                "('integration_outbox'::regclass, 1, now(), gen_random_uuid())"
            )
    with psycopg.connect(dsn) as su:
        assert (
            su.execute("SELECT count(*) FROM outbox_monitor.error_fingerprints").fetchone()[0] == 2
        )
    with psycopg.connect(dsn, autocommit=True) as su:  # a login without SELECT on the table
        su.execute(
            sql.SQL(
                "GRANT EXECUTE ON FUNCTION outbox_monitor.refresh_error_groups("
                "regclass, integer) TO {}"
            ).format(sql.Identifier(logins.nothing))
        )
        su.execute(
            sql.SQL("GRANT USAGE ON SCHEMA outbox_monitor TO {}").format(
                sql.Identifier(logins.nothing)
            )
        )
    with (
        psycopg.connect(logins.dsn(dsn, logins.nothing)) as nothing,
        pytest.raises(psycopg.errors.InsufficientPrivilege, match="permission denied for table"),
    ):
        nothing.execute("SELECT outbox_monitor.refresh_error_groups('integration_outbox', 10)")


def test_a_login_without_the_function_gets_the_exact_groups_and_a_warning(
    dsn, logins, rows, caplog
):
    """Grants of an older --print-grants (no EXECUTE on refresh_error_groups): the same
    groups, computed from every failed row, and one WARNING per process and table."""
    auth(rows, 1)
    auth(rows, 2)
    timeout(rows, 30000, event_type="order.paid")
    with psycopg.connect(dsn, autocommit=True) as su:
        su.execute(
            sql.SQL(
                "REVOKE EXECUTE ON FUNCTION outbox_monitor.refresh_error_groups("
                "regclass, integer) FROM {}"
            ).format(sql.Identifier(logins.roles.viewer))
        )
    error_grouping._warned_exact_error_groups.clear()
    with (
        Database(load_settings(dsn=logins.dsn(dsn, logins.read))) as viewer,
        caplog.at_level(logging.WARNING, logger="outbox_monitor.metrics"),
    ):
        first = error_grouping.error_groups(viewer)
        again = error_grouping.error_groups(viewer, event_type="order.%")
    assert {g["group_id"]: g["failed"] for g in first} == {
        group_id("crm.upsert", AUTH): 2,
        group_id("order.paid", TIMEOUT): 1,
    }
    assert [g["group_id"] for g in again] == [group_id("order.paid", TIMEOUT)]
    warnings = [r for r in caplog.records if "computed from every failed row" in r.message]
    assert len(warnings) == 1
    assert "--print-grants" in warnings[0].message


def test_changes_between_the_steps_of_a_recount_are_counted(db, rows, conn):
    """A recount takes several calls (one bounded step each); rows that fail, are replayed
    or deleted between two of them are counted exactly at the end."""
    first = auth(rows, 1)
    auth(rows, 2)
    timeout(rows, 1000)
    params = {"table_regclass": db.table_name, "batch": 1}

    def step() -> bool:
        return db.fetch_one("error_groups_refresh", params)["done"]

    assert step() is False  # forget
    auth(rows, 3)
    assert step() is False  # fill one row
    conn.execute("DELETE FROM integration_outbox WHERE id = %s", (first,))
    assert step() is False  # fill one row
    gone = timeout(rows, 2000)
    assert step() is False  # fill one row
    conn.execute(
        "UPDATE integration_outbox SET status = 'pending', processed_at = NULL WHERE id = %s",
        (gone,),
    )
    while not step():
        pass
    assert counts(db) == {group_id("crm.upsert", AUTH): 2, group_id("crm.upsert", TIMEOUT): 1}


def test_an_error_edited_in_place_moves_group_at_the_next_recount(db, rows, conn):
    """The users' own UPDATE of last_error or event_type of a row that stays failed with
    the same processed_at changes neither the count nor the processed_at sum: the groups
    show it at the next recount (here: after a delete), which checks md5(last_error)."""
    edited = auth(rows, 1)
    auth(rows, 2)
    other = timeout(rows, 1000)
    assert counts(db) == {group_id("crm.upsert", AUTH): 2, group_id("crm.upsert", TIMEOUT): 1}
    conn.execute(
        "UPDATE integration_outbox SET last_error = 'timeout after 5000 ms calling ''x''', "
        "event_type = 'order.paid' WHERE id = %s",
        (edited,),
    )
    conn.execute("DELETE FROM integration_outbox WHERE id = %s", (other,))
    assert counts(db) == {group_id("crm.upsert", AUTH): 1, group_id("order.paid", TIMEOUT): 1}


def test_read_only_transactions_get_the_exact_groups(dsn, rows, conn, caplog):
    """A login whose transactions are read-only (default_transaction_read_only, as on a
    standby) cannot fill the cache: it gets the groups computed from every failed row."""
    auth(rows, 1)
    timeout(rows, 1000)
    conn.execute(
        sql.SQL("ALTER DATABASE {} SET default_transaction_read_only = on").format(
            sql.Identifier(conn.info.dbname)
        )
    )
    error_grouping._warned_exact_error_groups.clear()
    with (
        Database(load_settings(dsn=dsn)) as read_only,
        caplog.at_level(logging.WARNING, logger="outbox_monitor.metrics"),
    ):
        groups = error_grouping.error_groups(read_only)
    assert {g["group_id"]: g["failed"] for g in groups} == {
        group_id("crm.upsert", AUTH): 1,
        group_id("crm.upsert", TIMEOUT): 1,
    }
    assert "read-only transaction" in caplog.text


def test_the_viewer_cannot_run_its_own_code_as_the_functions_owner(dsn, logins, rows):
    """refresh_error_groups runs as its owner (SECURITY DEFINER) and reads the relation it is
    given: a relation of the caller's (here a temporary view whose last_error calls a
    temporary function) would run the caller's code with the owner's rights. It is refused,
    and the caller's function never runs."""
    auth(rows, 1)
    with psycopg.connect(logins.dsn(dsn, logins.read), autocommit=True) as viewer:
        viewer.execute(
            """CREATE FUNCTION pg_temp.escalate() RETURNS text LANGUAGE plpgsql AS $$
               BEGIN
                   DELETE FROM public.integration_outbox;  -- the viewer may not
                   RETURN current_user;
               END $$"""
        )
        viewer.execute(
            """CREATE TEMP VIEW planted AS
               SELECT 1::bigint AS id, 'x'::text AS event_type, 'failed'::text AS status,
                      now() AS processed_at, pg_temp.escalate() AS last_error"""
        )
        for _ in range(4):  # every step of a first fill
            with pytest.raises(psycopg.errors.InsufficientPrivilege):
                viewer.execute("SELECT outbox_monitor.refresh_error_groups('pg_temp.planted', 10)")
        # the outbox table itself still works for the viewer
        assert viewer.execute(
            "SELECT outbox_monitor.refresh_error_groups('integration_outbox', 10)"
        ).fetchone()[0] in (True, False)
    with psycopg.connect(dsn) as su:
        assert su.execute("SELECT count(*) FROM integration_outbox").fetchone()[0] == 1
        assert (
            su.execute(
                "SELECT count(*) FROM outbox_monitor.error_groups WHERE event_type = 'x'"
            ).fetchone()[0]
            == 0
        )


def test_a_reader_with_a_max_age_brings_the_groups_current_once_per_max_age(db, rows, monkeypatch):
    """The Overview's reads (issue 32 item 3): within ``max_age`` of this process's last
    refresh the groups are read as they were then; the Dead letters page's read (no max age)
    brings them current at each call."""
    monkeypatch.setattr(error_grouping, "_refreshed_at", {})
    rows.add(status="failed", processed_ago=60, last_error="HTTP 500 from crm id 123456")
    statements = []
    original = db.fetch_one

    def recording(name, *args, **kwargs):
        statements.append(name)
        return original(name, *args, **kwargs)

    monkeypatch.setattr(db, "fetch_one", recording)
    first = error_grouping.error_groups(db, max_age=60)
    refreshes = statements.count("error_groups_refresh")
    rows.add(status="failed", processed_ago=30, last_error="HTTP 500 from crm id 654321")
    second = error_grouping.error_groups(db, max_age=60)
    assert statements.count("error_groups_refresh") == refreshes  # not brought current
    current = error_grouping.error_groups(db)
    assert statements.count("error_groups_refresh") > refreshes

    assert [g["failed"] for g in first] == [1]
    assert [g["failed"] for g in second] == [1]  # read as refreshed a moment ago
    assert [g["failed"] for g in current] == [2]  # the same group, brought current
