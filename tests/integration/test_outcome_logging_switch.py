"""Migration 010: ``outbox_monitor.ack`` and ``fail`` have migration 001's bodies while no
control is a breaker, and 008's (which log outcomes, SPEC §5) while one is; the switch is a
statement trigger on ``outbox_monitor.controls``.

Controls are written here with plain SQL, as an operator may: the trigger, not the product's
API, must move the switch. Expected values are computed by hand from the rows each test inserts.
"""

import re
import threading
import time
from datetime import timedelta
from typing import Any

import psycopg
import pytest
from psycopg.rows import dict_row

from outbox_monitor import outbox
from outbox_monitor.access import Identity, Role
from outbox_monitor.config.settings import load_settings
from outbox_monitor.flow import controls as flow
from outbox_monitor.store import schema
from outbox_monitor.store.db import Database
from outbox_monitor.store.queries import migration_files
from tests.flow import BREAKER, ack_n, breaker_state, fail_n, transitions, worker_login

TABLE = "integration_outbox"


def bodies(conn: psycopg.Connection) -> str:
    """Which bodies ack, fail and ack_many have now: ``plain`` (dispatching to the table's
    functions of migration 001's statements), ``logging`` (to those of 008's), or what each
    has when they differ."""
    found = conn.execute(
        "SELECT f.proname AS name, t.proname AS template"
        "  FROM pg_proc f LEFT JOIN pg_proc t"
        "    ON t.pronamespace = f.pronamespace AND t.proargtypes = f.proargtypes"
        "       AND t.proname <> f.proname AND t.prosrc = f.prosrc"
        " WHERE f.pronamespace = 'outbox_monitor'::regnamespace"
        "       AND f.proname IN ('ack', 'fail', 'ack_many')"
    ).fetchall()
    kinds = {row["name"]: str(row["template"]).removeprefix(f"{row['name']}_") for row in found}
    named = {"plain": "plain", "logging_outcomes": "logging"}
    if kinds["ack"] == kinds["fail"] == kinds["ack_many"] and kinds["ack"] in named:
        return named[kinds["ack"]]
    return f"ack {kinds['ack']}, fail {kinds['fail']}"


def write_control(conn: psycopg.Connection, event_type_filter: str, **columns: Any) -> None:
    """One 'ui' control row of the outbox, inserted with plain SQL (no state row: the next
    claim creates it, as for any control written by hand)."""
    values = {"event_type_filter": event_type_filter, **columns}
    names = ", ".join(values)
    marks = ", ".join(f"%({name})s" for name in values)
    conn.execute(
        f"INSERT INTO outbox_monitor.controls (outbox, layer, updated_by, {names})"
        f" VALUES ('{TABLE}', 'ui', 'oncall', {marks})",
        values,
    )


def outcomes(conn: psycopg.Connection) -> dict[str, int]:
    return conn.execute(
        "SELECT count(*) AS outcomes, count(*) FILTER (WHERE failed) AS failures"
        " FROM outbox_monitor.control_outcomes"
    ).fetchone()


# ------------------------------------------------------------------ SPEC §1, either body


@pytest.mark.parametrize("wanted", ["plain", "logging"])
def test_ack_and_fail_do_what_spec_section_1_says_with_either_body(conn, rows, wanted):
    if wanted == "logging":  # a breaker of another event type: the rows log nothing
        write_control(conn, "crm.%", breaker=True)
    assert bodies(conn) == wanted
    sources = conn.execute(
        "SELECT string_agg(prosrc, '') AS text FROM pg_proc"
        " WHERE pronamespace = 'outbox_monitor'::regnamespace"
        "       AND proname IN ('ack', 'fail', 'ack_many')"
    ).fetchone()["text"]
    # the table's functions of migration 008's statements (which log outcomes), or 001's
    for kind in ("ack", "fail", "ack_many"):
        assert (f"{kind}_logging__public__{TABLE}" in sources) == (wanted == "logging")
        assert (f"{kind}__public__{TABLE}" in sources) == (wanted == "plain")

    acked = rows.add(status="processing", locked_ago=5, attempts=2, last_error="timeout")
    other = rows.add(status="processing", locked_ago=5, locked_by="worker-2")
    pending = rows.add()
    before = conn.execute("SELECT clock_timestamp() AS t").fetchone()["t"]
    assert outbox.ack(conn, acked, "worker-1") is True
    after = conn.execute("SELECT clock_timestamp() AS t").fetchone()["t"]
    row = rows.get(acked)
    assert (row["status"], row["attempts"], row["locked_at"], row["locked_by"]) == (
        "done",
        2,
        None,
        None,
    )
    assert row["last_error"] is None and before <= row["processed_at"] <= after
    assert outbox.ack(conn, acked, "worker-1") is False  # already done
    assert outbox.ack(conn, other, "worker-1") is False  # another worker's claim
    assert outbox.ack(conn, pending, "worker-1") is False  # never claimed
    assert rows.get(other)["status"] == "processing"

    first = rows.add(status="processing", locked_ago=5)
    third = rows.add(status="processing", locked_ago=5, attempts=2)
    last = rows.add(status="processing", locked_ago=5, attempts=9)
    hopeless = rows.add(status="processing", locked_ago=5)
    # the SQL function itself cuts the error (outbox.fail cuts it too, before)
    assert (
        conn.execute(
            "SELECT outbox_monitor.fail('integration_outbox', %s, 'worker-1', repeat('e', 2500))"
            " AS status",
            (first,),
        ).fetchone()["status"]
        == "pending"
    )
    assert outbox.fail(conn, third, "worker-1", "503") == "pending"
    assert outbox.fail(conn, last, "worker-1", "503") == "failed"  # 10 = max attempts
    assert outbox.fail(conn, hopeless, "worker-1", "401", permanent=True) == "failed"
    assert outbox.fail(conn, other, "worker-1", "503") is None  # another worker's claim
    now = conn.execute("SELECT now() AS t").fetchone()["t"]

    row = rows.get(first)
    assert (row["status"], row["attempts"], row["locked_at"], row["locked_by"]) == (
        "pending",
        1,
        None,
        None,
    )
    assert row["last_error"] == "e" * 2000 and row["processed_at"] is None
    # the failure that makes attempts = 1 waits 30 s plus 0-10 %, = 3 waits 5 min plus 0-10 %
    wait = row["available_at"] - now
    assert timedelta(seconds=29) <= wait <= timedelta(seconds=33)
    wait = rows.get(third)["available_at"] - now
    assert timedelta(seconds=299) <= wait <= timedelta(seconds=330)
    for dead, attempts in ((last, 10), (hopeless, 1)):
        row = rows.get(dead)
        assert (row["status"], row["attempts"], row["locked_by"]) == ("failed", attempts, None)
        assert row["processed_at"] is not None
        assert row["available_at"] == rows.at(60)  # not moved: no retry comes
    assert rows.get(other)["status"] == "processing"

    # a definite "no" deletes this effect's idempotency-ledger row in the same statement
    ledgered = rows.add(status="processing", locked_ago=5, event_key="order.paid:ledger")
    conn.execute(
        "INSERT INTO integration_idempotency (event_key, action)"
        " VALUES ('order.paid:ledger', 'charge'), ('order.paid:ledger', 'email')"
    )
    assert outbox.fail(conn, ledgered, "worker-1", "402", ledger_action="charge") == "pending"
    left = conn.execute("SELECT action FROM integration_idempotency").fetchall()
    assert left == [{"action": "email"}]
    assert outcomes(conn) == {"outcomes": 0, "failures": 0}


# ------------------------------------------------------------------ what moves the switch


@pytest.mark.parametrize(
    "removal",
    [
        "DELETE FROM outbox_monitor.controls WHERE breaker",
        "UPDATE outbox_monitor.controls SET breaker = false",
        "TRUNCATE outbox_monitor.controls",
    ],
)
def test_a_breaker_written_with_plain_sql_logs_outcomes_until_it_is_gone(conn, rows, removal):
    assert bodies(conn) == "plain"
    write_control(conn, "crm.%", **BREAKER)
    assert bodies(conn) == "logging"
    assert outbox.claim(conn, "w1") == []  # the first claim creates the breaker's state row

    ack_n(conn, rows, 1)
    fail_n(conn, rows, 2)
    assert breaker_state(conn, "crm.%") == "closed"  # 3 outcomes < min_attempts 4
    fail_n(conn, rows, 1)  # 4 outcomes, 3 failures: 0.75 >= 0.75
    assert outcomes(conn) == {"outcomes": 4, "failures": 3}
    assert breaker_state(conn, "crm.%") == "open"
    rows.add(event_type="crm.contact", created_ago=0)
    time.sleep(1.1)  # the cool-down
    (probe,) = outbox.claim(conn, "w1")
    assert outbox.ack(conn, probe["id"], "w1")
    assert breaker_state(conn, "crm.%") == "closed"
    assert [(t["transition"], t["outcomes"], t["failures"]) for t in transitions(conn)] == [
        ("opened", 4, 3),
        ("closed", None, None),
    ]

    conn.execute(removal)
    assert bodies(conn) == "plain"
    ack_n(conn, rows, 1)
    fail_n(conn, rows, 1)
    assert outcomes(conn) == {"outcomes": 4, "failures": 3}  # nothing logged any more


def test_only_breakers_count_expired_or_not(conn, rows):
    write_control(conn, "crm.%", paused=True, pause_reason="CRM down")
    write_control(conn, "billing.%", concurrency_limit=5)
    assert bodies(conn) == "plain"
    write_control(
        conn,
        "mail.%",
        breaker=True,
        expires_at=rows.at(60),  # expired: no breaker in force, still counted (blunt test)
    )
    assert bodies(conn) == "logging"
    conn.execute("UPDATE outbox_monitor.controls SET paused = false WHERE NOT breaker")
    assert bodies(conn) == "logging"  # an edit of another control keeps them
    conn.execute("DELETE FROM outbox_monitor.controls WHERE breaker")
    assert bodies(conn) == "plain"  # the pause and the limit are left
    ack_n(conn, rows, 1, event_type="billing.x")
    assert outcomes(conn) == {"outcomes": 0, "failures": 0}


def test_a_control_edit_that_changes_nothing_replaces_no_function(conn):
    def versions() -> list[tuple[Any, ...]]:
        return conn.execute(
            "SELECT proname, xmin::text FROM pg_proc"
            " WHERE pronamespace = 'outbox_monitor'::regnamespace"
            " AND proname IN ('ack', 'fail') ORDER BY proname"
        ).fetchall()

    plain = versions()
    write_control(conn, "crm.%", paused=True)
    conn.execute("DELETE FROM outbox_monitor.controls")
    assert versions() == plain
    write_control(conn, "crm.%", breaker=True)
    logging = versions()
    assert logging != plain
    write_control(conn, "billing.%", breaker=True)
    conn.execute("UPDATE outbox_monitor.controls SET breaker_ratio = 0.5")
    assert versions() == logging


def test_a_workers_session_uses_the_new_body_from_its_next_statement(conn, rows, dsn):
    """A worker's autocommit session that compiled the plain fail keeps no stale copy."""
    for _ in range(3):
        rows.add(event_type="crm.contact")
    with psycopg.connect(dsn, autocommit=True, row_factory=dict_row) as worker:
        first, second, third = outbox.claim(worker, "w1", limit=3)
        assert outbox.fail(worker, first["id"], "w1", "503") == "pending"  # compiled: plain
        write_control(conn, "crm.%", **BREAKER)
        conn.execute(
            "INSERT INTO outbox_monitor.control_state (outbox, event_type_filter)"
            f" VALUES ('{TABLE}', 'crm.%')"
        )
        assert outbox.fail(worker, second["id"], "w1", "503") == "pending"
        assert outcomes(conn) == {"outcomes": 1, "failures": 1}
        conn.execute("DELETE FROM outbox_monitor.controls")
        assert outbox.fail(worker, third["id"], "w1", "503") == "pending"
        assert outcomes(conn) == {"outcomes": 1, "failures": 1}


# ------------------------------------------------------------------ concurrent writers


def wait_for_the_switch_lock(conn: psycopg.Connection, pid: int) -> None:
    """Until the backend ``pid`` waits for a table lock (the switch's)."""
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        waiting = conn.execute(
            "SELECT wait_event_type = 'Lock' AND wait_event = 'relation' AS waits"
            " FROM pg_stat_activity WHERE pid = %s",
            (pid,),
        ).fetchone()["waits"]
        if waiting:
            return
        time.sleep(0.01)
    raise AssertionError(f"backend {pid} never waited for the switch's lock")


def race(dsn: str, conn: psycopg.Connection, first: str, second: str) -> None:
    """``first`` in an open transaction, then ``second`` in another, which waits for the
    switch's lock; ``first`` commits, then ``second``. Both must commit without error."""
    errors: list[BaseException] = []
    with psycopg.connect(dsn) as one, psycopg.connect(dsn) as two:
        one.execute(first)

        def run_second() -> None:
            try:
                two.execute(second)
                two.commit()
            except BaseException as error:  # reported by the test, not the thread
                errors.append(error)

        thread = threading.Thread(target=run_second)
        thread.start()
        try:
            wait_for_the_switch_lock(conn, two.info.backend_pid)
        finally:  # whatever ``second`` waits for, ``first`` ends before ``two`` is closed
            one.commit()
            thread.join(timeout=10)
    assert not thread.is_alive()
    assert errors == []


BREAKER_ROW = (
    "INSERT INTO outbox_monitor.controls (outbox, event_type_filter, layer, breaker,"
    " updated_by) VALUES ('integration_outbox', '{}', 'ui', true, 'oncall')"
)


def test_two_transactions_writing_breakers_at_once_both_commit_and_log(dsn, conn):
    race(dsn, conn, BREAKER_ROW.format("crm.%"), BREAKER_ROW.format("billing.%"))
    filters = conn.execute(
        "SELECT event_type_filter FROM outbox_monitor.controls ORDER BY 1"
    ).fetchall()
    assert [row["event_type_filter"] for row in filters] == ["billing.%", "crm.%"]
    assert bodies(conn) == "logging"


@pytest.mark.parametrize("deleting_first", [True, False])
def test_deleting_the_last_breaker_while_another_is_written_ends_logging(dsn, conn, deleting_first):
    write_control(conn, "crm.%", breaker=True)
    delete = "DELETE FROM outbox_monitor.controls WHERE event_type_filter = 'crm.%'"
    insert = BREAKER_ROW.format("billing.%")
    race(dsn, conn, *((delete, insert) if deleting_first else (insert, delete)))
    filters = conn.execute("SELECT event_type_filter FROM outbox_monitor.controls").fetchall()
    assert [row["event_type_filter"] for row in filters] == ["billing.%"]
    assert bodies(conn) == "logging"


def test_a_repeatable_read_transaction_installs_the_logging_bodies(dsn, conn):
    """Its snapshot may be older than a breaker committed since: it cannot tell, so it logs."""
    write_control(conn, "crm.%", breaker=True)
    with psycopg.connect(dsn) as old:
        old.isolation_level = psycopg.IsolationLevel.REPEATABLE_READ
        old.execute("SELECT 1")  # its snapshot, before the next breaker
        write_control(conn, "billing.%", breaker=True)
        # it sees no breaker left once it deleted crm.%, but billing.% exists
        old.execute("DELETE FROM outbox_monitor.controls WHERE event_type_filter = 'crm.%'")
        old.commit()
    assert bodies(conn) == "logging"

    conn.execute("DELETE FROM outbox_monitor.controls")
    assert bodies(conn) == "plain"
    with psycopg.connect(dsn) as careful:  # even with no breaker at all
        careful.isolation_level = psycopg.IsolationLevel.REPEATABLE_READ
        careful.execute(
            "INSERT INTO outbox_monitor.controls (outbox, event_type_filter, layer, paused,"
            " updated_by) VALUES ('integration_outbox', 'crm.%', 'ui', true, 'oncall')"
        )
        careful.commit()
    assert bodies(conn) == "logging"
    conn.execute("DELETE FROM outbox_monitor.controls")  # the next edit, READ COMMITTED
    assert bodies(conn) == "plain"


# ------------------------------------------------------------------ who may do what


def test_the_owner_and_grants_of_ack_and_fail_survive_a_swap_and_workers_still_call_them(
    dsn, conn, rows, logins
):
    worker = worker_login(dsn, "switch_worker")
    operator = logins.dsn(dsn, logins.actions)

    def owners_and_grants() -> list[dict[str, Any]]:
        return conn.execute(
            "SELECT proname, proowner::regrole::text AS owner, proacl::text AS acl"
            "  FROM pg_proc WHERE pronamespace = 'outbox_monitor'::regnamespace"
            "   AND proname IN ('ack', 'fail') ORDER BY proname"
        ).fetchall()

    plain = owners_and_grants()
    for _ in range(4):
        rows.add(event_type="crm.contact")
    settings = load_settings(dsn=dsn, actions_dsn=operator)
    oncall = Identity("oncall", Role.operator, "cli")
    with (
        Database(settings, purpose="actions") as actions,
        psycopg.connect(operator, autocommit=True) as ops,
        psycopg.connect(worker, autocommit=True, row_factory=dict_row) as w,
    ):
        # the operator owns neither ack nor fail; it changes controls through their writer
        flow.change(actions, "crm.%", actor=oncall, action="breaker", changes={"breaker": True})
        assert bodies(conn) == "logging" and owners_and_grants() == plain  # its state row made
        first, second, third, fourth = outbox.claim(w, "w1", limit=4)
        assert outbox.fail(w, first["id"], "w1", "503") == "pending"
        assert outbox.ack(w, second["id"], "w1")
        assert outcomes(conn) == {"outcomes": 2, "failures": 1}

        flow.change(actions, "crm.%", actor=oncall, action="clear control", clear=True)
        assert bodies(conn) == "plain" and owners_and_grants() == plain
        assert outbox.fail(w, third["id"], "w1", "503") == "pending"
        assert outbox.ack(w, fourth["id"], "w1")
        assert outcomes(conn) == {"outcomes": 2, "failures": 1}

        call = "SELECT outbox_monitor.sync_outcome_logging()"
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            w.execute(call)
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            w.execute(
                "SELECT outbox_monitor.ack_plain('integration_outbox', %s, 'w1')", (first["id"],)
            )
        # no role of the grants may execute the trigger's function (issue 29)
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            ops.execute(call)


# ------------------------------------------------------------------ upgrading from 008


@pytest.mark.parametrize(
    ("existing", "wanted"),
    [({"breaker": True}, "logging"), ({"paused": True}, "plain"), ({}, "plain")],
)
def test_the_migration_keeps_logging_where_breakers_exist(empty_dsn, monkeypatch, existing, wanted):
    up_to_008 = [m for m in migration_files() if m[0] <= 8]
    monkeypatch.setattr(schema, "migration_files", lambda: up_to_008)
    with Database(load_settings(dsn=empty_dsn)) as db:
        schema.init_db(db, create_table=True, create_indexes=False)
        with psycopg.connect(empty_dsn, autocommit=True, row_factory=dict_row) as conn:
            if existing:
                write_control(conn, "crm.%", **existing)
            monkeypatch.undo()
            applied = schema.init_db(db, create_indexes=False).applied_migrations
            assert "010_outcomes_only_with_breakers" in applied
            assert bodies(conn) == wanted


def test_the_templates_are_the_bodies_of_migrations_001_and_008_verbatim():
    texts = {version: text for version, _, text in migration_files()}

    def body(version: int, name: str) -> str:
        found = re.search(
            rf"FUNCTION outbox_monitor\.{name}\(.*?AS \$\$(.*?)\$\$;", texts[version], re.S
        )
        assert found, f"{name} in migration {version}"
        return found.group(1)

    for name in ("ack", "fail"):
        assert body(10, f"{name}_plain") == body(1, name)
        assert body(10, f"{name}_logging_outcomes") == body(8, name)


# ------------------------------------------------------------------ the switch's lock


def test_no_login_can_stop_control_changes_by_holding_the_switchs_lock(dsn, conn, logins):
    """Any login may take any advisory lock: a login without a single grant, holding the one
    the switch used, stopped every control change (a pause among them) for as long as it
    liked. The switch's lock is now one that only the owner can take."""
    nobody = logins.dsn(dsn, logins.nothing)
    viewer = logins.dsn(dsn, logins.read)
    with psycopg.connect(nobody, autocommit=True) as stranger, psycopg.connect(viewer) as reader:
        stranger.execute(
            "SELECT pg_advisory_lock(hashtextextended('outbox_monitor.outcome_logging', 0))"
        )
        for mode in ("ROW SHARE", "SHARE", "EXCLUSIVE", "ACCESS EXCLUSIVE"):
            with pytest.raises(psycopg.errors.InsufficientPrivilege):
                reader.execute(f"LOCK TABLE outbox_monitor.outcome_logging_lock IN {mode} MODE")
            reader.rollback()
        reader.execute("SELECT FROM outbox_monitor.outcome_logging_lock")  # ACCESS SHARE, held
        conn.execute("SET lock_timeout = '2s'")
        conn.execute(BREAKER_ROW.format("crm.%"))
        assert bodies(conn) == "logging"


def test_a_viewer_cannot_fire_the_switch_from_a_table_of_its_own(dsn, logins, conn):
    """The viewer may not attach the switch's function to a temporary table of its own (no
    EXECUTE since issue 29); a login that could (granted EXECUTE by hand) is refused when it
    fires it there (it would run as the owner and take the switch's lock)."""
    viewer = logins.dsn(dsn, logins.read)
    trigger = (
        "CREATE TRIGGER mine_switch BEFORE INSERT ON mine FOR EACH STATEMENT"
        " EXECUTE FUNCTION outbox_monitor.sync_outcome_logging()"
    )
    with psycopg.connect(viewer, autocommit=True) as reader:
        reader.execute("CREATE TEMP TABLE mine (x int)")
        with pytest.raises(psycopg.errors.InsufficientPrivilege, match="permission denied"):
            reader.execute(trigger)
        conn.execute(
            psycopg.sql.SQL(
                "GRANT EXECUTE ON FUNCTION outbox_monitor.sync_outcome_logging() TO {}"
            ).format(psycopg.sql.Identifier(logins.read))
        )
        conn.commit()
        reader.execute(trigger)
        with pytest.raises(psycopg.errors.InsufficientPrivilege, match="controls only"):
            reader.execute("INSERT INTO mine VALUES (1)")


def test_two_writers_updating_two_controls_in_opposite_orders_do_not_deadlock(dsn, conn):
    """T1 updates a, T2 updates b, T1 updates b: T1 waits for T2's row, T2 must not wait for
    anything T1 holds (the switch's lock is taken before the statement locks a row)."""
    for event_type_filter in ("a.x", "b.x"):
        write_control(conn, event_type_filter, paused=True)
    update = "UPDATE outbox_monitor.controls SET pause_reason = %s WHERE event_type_filter = %s"
    errors: list[BaseException] = []
    with psycopg.connect(dsn) as one, psycopg.connect(dsn) as two:
        for each in (one, two):  # nothing may wait for ever, whatever the outcome
            each.execute("SET lock_timeout = '5s'")
            each.commit()
        one.execute(update, ("one", "a.x"))

        def run_two() -> None:
            try:
                two.execute(update, ("two", "b.x"))
                two.commit()
            except BaseException as error:  # reported by the test, not the thread
                errors.append(error)
                two.rollback()

        thread = threading.Thread(target=run_two)
        thread.start()
        try:
            deadline = time.monotonic() + 10
            while not conn.execute(
                "SELECT wait_event_type = 'Lock' AS waits FROM pg_stat_activity WHERE pid = %s",
                (two.info.backend_pid,),
            ).fetchone()["waits"]:
                assert time.monotonic() < deadline, "the second writer never waited"
                time.sleep(0.01)
            one.execute(update, ("one", "b.x"))
            one.commit()
        except psycopg.Error as error:
            errors.append(error)
            one.rollback()
        finally:
            thread.join(timeout=10)
    assert not thread.is_alive()
    assert errors == []
    reasons = conn.execute(
        "SELECT event_type_filter, pause_reason FROM outbox_monitor.controls ORDER BY 1"
    ).fetchall()
    assert reasons == [
        {"event_type_filter": "a.x", "pause_reason": "one"},
        {"event_type_filter": "b.x", "pause_reason": "two"},
    ]
