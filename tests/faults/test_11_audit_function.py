"""Item 11: the actions role cannot forge an audit row. Audit rows are written only
through ``outbox_monitor.record_audit(...)`` (SECURITY DEFINER, owned by the schema's
owner), which only its owner may EXECUTE since issue 29 (the outbox's audited writers call
it: tests/integration/test_audited_writers.py); it stamps the row with the database's time
and checks its fields. No role of ``init-db --print-grants`` may INSERT, UPDATE or DELETE
the audit table, nor call the function."""

import uuid
from datetime import UTC, datetime

import psycopg
import pytest
from psycopg.rows import dict_row
from psycopg.types.json import Jsonb

from outbox_monitor.access import local_identity
from outbox_monitor.actions.replay import ReplaySelection, preview_replay
from outbox_monitor.actions.run import apply
from outbox_monitor.config.settings import load_settings
from outbox_monitor.errors import PermissionDenied
from outbox_monitor.store.db import Database
from outbox_monitor.store.schema import init_db
from tests.least_privilege import grant_in
from tests.upgrades import UNDO_SINCE_008, since

FORGED = datetime(2020, 1, 1, tzinfo=UTC)
RECORD = (
    "SELECT outbox_monitor.record_audit("
    "p_run_id => %(run_id)s, p_actor => %(actor)s, p_action => %(action)s, "
    "p_table_name => %(table_name)s, p_filter => %(filter)s, "
    "p_affected_count => %(affected_count)s, p_affected_ids => %(affected_ids)s) AS id"
)


def audit_fields(**changes):
    fields = {
        "run_id": uuid.uuid4(),
        "actor": "ops@example.com",
        "action": "replay",
        "table_name": "public.integration_outbox",
        "filter": Jsonb({"event_type": "order.paid"}),
        "affected_count": 2,
        "affected_ids": [7, 9],
    }
    return {**fields, **changes}


def connect(logins, dsn, login):
    return psycopg.connect(logins.dsn(dsn, login), row_factory=dict_row)


def owner(dsn):
    """The schema's owner (the superuser that ran init-db): record_audit's only caller."""
    return psycopg.connect(dsn, row_factory=dict_row)


def test_the_operator_login_cannot_insert_a_back_dated_audit_row(dsn, logins, conn):
    with (
        connect(logins, dsn, logins.actions) as ops,
        pytest.raises(
            psycopg.errors.InsufficientPrivilege, match="permission denied for table audit_log"
        ),
    ):
        ops.execute(
            "INSERT INTO outbox_monitor.audit_log (run_id, at, actor, action, table_name, "
            "filter, affected_count, affected_ids) VALUES (gen_random_uuid(), %s, 'ceo', "
            "'replay', 'public.integration_outbox', '{}', 0, '{}')",
            (FORGED,),
        )
    for statement in (
        "UPDATE outbox_monitor.audit_log SET at = now() - interval '1 year'",
        "DELETE FROM outbox_monitor.audit_log",
    ):
        with (
            connect(logins, dsn, logins.actions) as ops,
            pytest.raises(psycopg.errors.InsufficientPrivilege),
        ):
            ops.execute(statement)
    assert conn.execute("SELECT count(*) AS n FROM outbox_monitor.audit_log").fetchone()["n"] == 0


def test_the_function_stamps_the_database_time_and_there_is_no_time_to_pass(dsn, logins, conn):
    with owner(dsn) as ops:
        before = ops.execute("SELECT clock_timestamp() AS t").fetchone()["t"]
        audit_id = ops.execute(RECORD, audit_fields()).fetchone()["id"]
        after = ops.execute("SELECT clock_timestamp() AS t").fetchone()["t"]
        ops.commit()
        with pytest.raises(psycopg.errors.UndefinedFunction):
            ops.execute(
                RECORD.replace(") AS id", ", p_at => %(at)s) AS id"), audit_fields(at=FORGED)
            )

    rows = conn.execute("SELECT * FROM outbox_monitor.audit_log").fetchall()
    assert len(rows) == 1
    row = rows[0]
    assert row["id"] == audit_id
    assert before <= row["at"] <= after  # the database's clock at the call
    assert (row["actor"], row["action"], row["affected_count"], row["affected_ids"]) == (
        "ops@example.com",
        "replay",
        2,
        [7, 9],
    )


def test_a_transaction_held_open_does_not_back_date_the_row(dsn, logins, conn):
    """An operator login that opens a transaction, waits 2 s, then records: the row
    carries the time of the call, not the transaction's start (now())."""
    with owner(dsn) as ops:
        started = ops.execute("SELECT now() AS t").fetchone()["t"]
        ops.execute("SELECT pg_sleep(2)")
        before = ops.execute("SELECT clock_timestamp() AS t").fetchone()["t"]
        ops.execute(RECORD, audit_fields())
        after = ops.execute("SELECT clock_timestamp() AS t").fetchone()["t"]
        ops.commit()

    [row] = conn.execute("SELECT at FROM outbox_monitor.audit_log").fetchall()
    assert before <= row["at"] <= after
    assert (row["at"] - started).total_seconds() >= 2.0


def test_a_run_keeps_one_actor_and_one_action(dsn, logins, conn):
    """The batches of one run share actor and action; a row of another actor or another
    action under an existing run_id is refused, the run keeps its own rows."""
    run_id = uuid.uuid4()
    with owner(dsn) as ops:
        ops.execute(RECORD, audit_fields(run_id=run_id, actor="bob@example.com"))
        ops.execute(RECORD, audit_fields(run_id=run_id, actor="bob@example.com"))  # batch 2
        ops.commit()
    for changes in ({"actor": "alice@example.com"}, {"action": "prune"}):
        with (
            owner(dsn) as ops,
            pytest.raises(
                psycopg.errors.InvalidParameterValue,
                match=f"audit row: run_id {run_id} belongs to another run "
                '\\("replay" by "bob@example.com"\\)',
            ),
        ):
            ops.execute(
                RECORD, audit_fields(**{"run_id": run_id, "actor": "bob@example.com", **changes})
            )

    rows = conn.execute(
        "SELECT actor, action FROM outbox_monitor.audit_log WHERE run_id = %s", (run_id,)
    ).fetchall()
    assert rows == [{"actor": "bob@example.com", "action": "replay"}] * 2


def test_no_login_of_the_grants_may_write_audit_rows(dsn, logins, conn):
    for login in (logins.read, logins.scheduler, logins.actions):
        with (
            connect(logins, dsn, login) as reader,
            pytest.raises(
                psycopg.errors.InsufficientPrivilege,
                match="permission denied for function record_audit",
            ),
        ):
            reader.execute(RECORD, audit_fields())
    assert conn.execute("SELECT count(*) AS n FROM outbox_monitor.audit_log").fetchone()["n"] == 0


@pytest.mark.parametrize(
    ("changes", "complaint"),
    [
        ({"actor": "ops\nERROR fake line"}, "actor"),
        ({"actor": "  "}, "actor"),
        ({"actor": "x" * 201}, "actor"),
        ({"action": "Replay; DROP"}, "action"),
        ({"table_name": ""}, "table_name"),
        ({"filter": Jsonb(["not", "an", "object"])}, "filter"),
        ({"affected_count": 1}, "affected_count"),
        ({"affected_ids": None}, "affected_ids"),
        ({"run_id": None}, "run_id"),
    ],
)
def test_the_function_refuses_malformed_fields(dsn, logins, conn, changes, complaint):
    with (
        owner(dsn) as ops,
        pytest.raises(psycopg.errors.InvalidParameterValue, match=f"audit row: {complaint}"),
    ):
        ops.execute(RECORD, audit_fields(**changes))
    assert conn.execute("SELECT count(*) AS n FROM outbox_monitor.audit_log").fetchone()["n"] == 0


def test_a_login_without_execute_on_the_function_is_told_which_grant_is_missing(
    dsn, logins, rows, pg_cluster
):
    """A hand-made login that may change the outbox (UPDATE) but holds no audited writer:
    the batch fails and the error names the writer and the operator role."""
    login = f"{logins.nothing}_noaudit"
    with psycopg.connect(dsn, autocommit=True) as su:
        if not su.execute("SELECT 1 FROM pg_roles WHERE rolname = %s", (login,)).fetchone():
            su.execute(
                psycopg.sql.SQL("CREATE ROLE {} LOGIN").format(psycopg.sql.Identifier(login))
            )
        su.execute(
            psycopg.sql.SQL(
                "GRANT USAGE ON SCHEMA outbox_monitor TO {0}; "
                "GRANT SELECT ON ALL TABLES IN SCHEMA outbox_monitor TO {0}; "
                "GRANT SELECT, UPDATE ON integration_outbox TO {0}"
            ).format(psycopg.sql.Identifier(login))
        )
    dead = rows.add(status="failed", attempts=10, processed_ago=60, last_error="e")
    settings = load_settings(dsn=dsn, actions_dsn=logins.dsn(dsn, login))

    with Database(settings, purpose="actions") as db, pytest.raises(PermissionDenied) as caught:
        preview = preview_replay(db, ReplaySelection(ids=(dead,)))
        apply(db, preview, actor=local_identity(settings))

    assert str(caught.value).startswith(
        f'the database role "{login}" lacks EXECUTE on function '
        "outbox_monitor.replay__public__integration_outbox"
    )
    assert "member of outbox_operator" in caught.value.hint
    assert rows.get(dead)["status"] == "failed"


def test_upgrading_takes_back_the_insert_grant_of_the_old_grants(dsn, logins, conn):
    """A database of the previous version, granted with the previous `--print-grants`
    (INSERT on the audit log for the operator, EXECUTE on every new function for the
    viewer by default privileges): init-db's migrations leave no one but the owner able
    to write audit rows, and the new grants keep it so (the operator writes them through
    the outbox's audited writers only)."""
    ops, viewer = logins.roles.operator, logins.roles.viewer
    with psycopg.connect(dsn, autocommit=True) as su:  # back to the previous version
        su.execute(
            "DROP FUNCTION outbox_monitor.record_audit(uuid, text, text, text, jsonb, integer, "
            "bigint[]); DROP TABLE outbox_monitor.leader_leases; "
            "DROP INDEX outbox_monitor.notifications_stalled_idx; "
            "DROP FUNCTION outbox_monitor.record_test_notification(text, jsonb, text, "
            "integer, text, text, text); "
            "DROP FUNCTION outbox_monitor.refresh_error_groups(regclass, integer); "
            "DROP TABLE outbox_monitor.error_fingerprints, outbox_monitor.error_groups, "
            "outbox_monitor.error_groups_state; "
            + UNDO_SINCE_008
            + "DELETE FROM outbox_monitor.schema_migrations WHERE version >= 3"
        )
        su.execute(
            psycopg.sql.SQL(
                "GRANT INSERT ON outbox_monitor.audit_log TO {0}; "
                "GRANT USAGE ON SEQUENCE outbox_monitor.audit_log_id_seq TO {0}; "
                "ALTER DEFAULT PRIVILEGES IN SCHEMA outbox_monitor "
                "GRANT EXECUTE ON FUNCTIONS TO {1}"
            ).format(psycopg.sql.Identifier(ops), psycopg.sql.Identifier(viewer))
        )
    with Database(load_settings(dsn=dsn)) as db:
        assert init_db(db, create_indexes=False).applied_migrations == since(3)

    privileges = (
        "SELECT has_table_privilege(%(role)s, 'outbox_monitor.audit_log', 'INSERT') AS insert, "
        "has_function_privilege(%(role)s, 'outbox_monitor.record_audit(uuid, text, text, text, "
        "jsonb, integer, bigint[])', 'EXECUTE') AS execute"
    )
    upgraded = {r: conn.execute(privileges, {"role": r}).fetchone() for r in (ops, viewer)}
    grant_in(dsn, logins)  # the new version's --print-grants
    granted = {r: conn.execute(privileges, {"role": r}).fetchone() for r in (ops, viewer)}

    assert upgraded == {
        ops: {"insert": False, "execute": False},
        viewer: {"insert": False, "execute": False},
    }
    assert granted == {
        ops: {"insert": False, "execute": False},
        viewer: {"insert": False, "execute": False},
    }
