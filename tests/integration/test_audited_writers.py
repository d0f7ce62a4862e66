"""Issue 29 item 2: the audit log tells who really did what. On real logins granted by
``init-db --print-grants``: the operator login writes the outbox, controls, silences and the
audit log only through the outbox's audited writers (``store.audited_writers``), each
audit row naming the database login and the client address beside the person claimed; the
viewer and the scheduler may execute no function that writes; what the owner can still do
(docs/security.md) is what it is."""

import uuid
from datetime import timedelta

import psycopg
import pytest
from psycopg.rows import dict_row
from psycopg.types.json import Jsonb

from outbox_monitor.access import local_identity
from outbox_monitor.actions.prune import preview_prune
from outbox_monitor.actions.reap import preview_reap
from outbox_monitor.actions.replay import ReplaySelection, preview_replay
from outbox_monitor.actions.run import apply
from outbox_monitor.alerts.silences import create_silence, expire_silence
from outbox_monitor.browse.events import reveal_payload
from outbox_monitor.config.settings import load_settings
from outbox_monitor.errors import PermissionDenied
from outbox_monitor.flow.controls import change, pause, resume
from outbox_monitor.service.maintenance import prune_retention, reap_stuck_locks
from outbox_monitor.store.audited_writers import (
    KINDS,
    SIGNATURES,
    earlier_writer_name,
    writer_name,
)
from outbox_monitor.store.db import Database
from outbox_monitor.store.schema import init_db

RECORD = (
    "SELECT outbox_monitor.record_audit(%s, 'alice@example.com', 'replay', "
    "'public.integration_outbox', '{}'::jsonb, 5000, ARRAY[1, 2]::bigint[])"
)
WORKERS_GUARDED = {"claim_grants", "claim_consume", "record_outcome"}
"""SECURITY DEFINER functions of the workers' claim, ack and fail: each refuses, or does
nothing for, a login without UPDATE on the outbox (``may_claim`` of ``session_user``)."""
CACHE = {"refresh_error_groups", "refresh_retry_error_groups"}
"""Write only the error groups' caches, computed from the outbox (migrations 006/007, 025)."""


def as_login(logins, dsn, login):
    return psycopg.connect(logins.dsn(dsn, login), row_factory=dict_row, autocommit=True)


def test_the_operator_login_cannot_call_the_audit_writer(dsn, logins, conn):
    """The forgery of the issue: a replay of 5,000 rows that never happened, in alice's
    name, written by the operator login calling record_audit itself."""
    with (
        as_login(logins, dsn, logins.actions) as ops,
        pytest.raises(
            psycopg.errors.InsufficientPrivilege,
            match="permission denied for function record_audit",
        ),
    ):
        ops.execute(RECORD, (uuid.uuid4(),))
    assert conn.execute("SELECT count(*) AS n FROM outbox_monitor.audit_log").fetchone()["n"] == 0


@pytest.mark.parametrize(
    "statement",
    [
        "UPDATE integration_outbox SET status = 'done'",
        "DELETE FROM integration_outbox",
        "INSERT INTO integration_outbox (event_type, aggregate_type, aggregate_id, event_key, "
        "payload) VALUES ('x', 'a', '1', 'forged', '{}')",
        "INSERT INTO outbox_monitor.controls (outbox, event_type_filter, layer, paused) "
        "VALUES ('integration_outbox'::regclass, 'order.%', 'ui', true)",
        "UPDATE outbox_monitor.controls SET paused = false",
        "DELETE FROM outbox_monitor.controls",
        "UPDATE outbox_monitor.control_state SET tokens = 0",
        "INSERT INTO outbox_monitor.silences (matchers, starts_at, ends_at, comment, "
        "created_by) VALUES ('{}', now(), now() + interval '1 day', 'x', 'alice')",
        "UPDATE outbox_monitor.silences SET expired_at = now()",
        "DELETE FROM outbox_monitor.silences",
        "INSERT INTO outbox_monitor.audit_log (run_id, actor, action, table_name, filter, "
        "affected_count, affected_ids) VALUES (gen_random_uuid(), 'alice', 'replay', 't', "
        "'{}', 0, '{}')",
        "UPDATE outbox_monitor.audit_log SET actor = 'alice'",
        "DELETE FROM outbox_monitor.audit_log",
        # the rows a reap writer reports to the breakers (migration 020): the owner's alone
        "INSERT INTO outbox_monitor.writer_outcomes VALUES (pg_current_xact_id(), 1, 1)",
    ],
)
def test_the_operator_login_cannot_write_the_outbox_controls_silences_or_audit_directly(
    dsn, logins, rows, statement
):
    done = rows.add(status="pending", created_ago=10)
    with (
        as_login(logins, dsn, logins.actions) as ops,
        pytest.raises(psycopg.errors.InsufficientPrivilege, match="permission denied"),
    ):
        ops.execute(statement)
    assert rows.get(done)["status"] == "pending"


def test_every_action_of_the_operator_login_is_audited_with_its_login_and_address(
    dsn, logins, rows, conn
):
    stuck = rows.add(status="processing", created_ago=3600, locked_ago=30 * 60)
    dead = rows.add(status="failed", attempts=10, processed_ago=60, last_error="e")
    old = rows.add(status="done", created_ago=40 * 86400, processed_ago=40 * 86400)
    settings = load_settings(dsn=dsn, actions_dsn=logins.dsn(dsn, logins.actions))
    person = local_identity(settings, name="oncall@example.com")

    with Database(settings, purpose="actions") as db:
        apply(db, preview_reap(db), actor=person)
        apply(db, preview_replay(db, ReplaySelection(ids=(dead,))), actor=person)
        apply(
            db,
            preview_prune(db, done_older_than=30 * 86400, failed_older_than=None),
            actor=person,
        )
        apply(db, preview_replay(db, ReplaySelection(ids=(dead,))), actor=person)  # 0 rows
        until = db.fetch_one("db_now")["now"] + timedelta(hours=1)
        silence = create_silence(db, {"rule": "backlog"}, until, "deploy", person)
        assert expire_silence(db, silence, person)
        pause(db, "order.%", actor=person, reason="downstream down")
        resume(db, "order.%", actor=person)
        assert reveal_payload(db, stuck, person) is not None

    audit = conn.execute(
        "SELECT action, actor, db_login, host(client_addr) AS addr, affected_count, "
        "affected_ids FROM outbox_monitor.audit_log ORDER BY id"
    ).fetchall()
    assert [(a["action"], a["affected_count"], a["affected_ids"]) for a in audit] == [
        ("reap", 1, [stuck]),
        ("replay", 1, [dead]),
        ("prune", 1, [old]),
        ("replay", 0, []),
        ("silence", 1, [silence]),
        ("expire silence", 1, [silence]),
        ("pause", 0, []),
        ("resume", 0, []),
        ("reveal", 1, [stuck]),
    ]
    assert {(a["actor"], a["db_login"], a["addr"]) for a in audit} == {
        ("oncall@example.com", logins.actions, "127.0.0.1")
    }


def writing_functions(conn) -> dict[str, str]:
    """Every SECURITY DEFINER function of the schema (it lends its owner's rights) but the
    workers' guarded ones and the cache's: ``{signature: name}``."""
    found = conn.execute(
        "SELECT p.oid::regprocedure::text AS signature, p.proname AS name "
        "FROM pg_proc p WHERE p.pronamespace = 'outbox_monitor'::regnamespace AND p.prosecdef"
    ).fetchall()
    return {f["signature"]: f["name"] for f in found if f["name"] not in WORKERS_GUARDED | CACHE}


def test_the_viewer_and_the_scheduler_cannot_execute_any_function_that_writes(dsn, logins, conn):
    writers = writing_functions(conn)
    expected_writers = {writer_name(kind, "public", "integration_outbox") for kind in KINDS}
    assert expected_writers <= set(writers.values())
    assert {"record_audit", "record_test_notification", "sync_outcome_logging"} <= set(
        writers.values()
    )
    allowed = {
        # the retention of the audit log: rows of one table older than at least a day
        logins.roles.scheduler: {"prune_audit_log"},
        logins.scheduler: {"prune_audit_log"},
        logins.roles.viewer: set(),
        logins.read: set(),
        "public": set(),
    }
    executable = {
        role: {
            name
            for signature, name in writers.items()
            if conn.execute(
                "SELECT has_function_privilege(%s, %s, 'EXECUTE') AS ok", (role, signature)
            ).fetchone()["ok"]
        }
        for role in allowed
    }
    assert executable == allowed
    operator = {
        name
        for signature, name in writers.items()
        if conn.execute(
            "SELECT has_function_privilege(%s, %s, 'EXECUTE') AS ok", (logins.actions, signature)
        ).fetchone()["ok"]
    }
    assert operator == expected_writers | {"record_test_notification"}
    # the workers' guarded functions refuse a login that may not claim
    with (
        as_login(logins, dsn, logins.read) as viewer,
        pytest.raises(psycopg.errors.InsufficientPrivilege, match="claiming needs UPDATE"),
    ):
        viewer.execute("SELECT * FROM outbox_monitor.claim_grants('integration_outbox')")


def test_the_writers_take_no_table_and_refuse_what_they_are_not_for(dsn, logins, rows, conn):
    """No writer has a table parameter (it would lend the owner's rights on any table it
    owns); the note writer refuses a change; a reap of rows that are not stuck writes no row
    but an empty run's, which says 0 rows under the real login."""
    arguments = conn.execute(
        "SELECT p.proname, pg_get_function_identity_arguments(p.oid) AS args FROM pg_proc p "
        "WHERE p.pronamespace = 'outbox_monitor'::regnamespace AND p.proname = ANY(%s)",
        ([writer_name(k, "public", "integration_outbox") for k in KINDS],),
    ).fetchall()
    assert len(arguments) == len(KINDS)
    assert not [a for a in arguments if "regclass" in a["args"] or "p_table" in a["args"]]
    pending = rows.add(status="pending", created_ago=10)
    run = uuid.uuid4()
    with as_login(logins, dsn, logins.actions) as ops:
        reap = f'outbox_monitor."{writer_name("reap", "public", "integration_outbox")}"'
        changed = ops.execute(
            f"SELECT * FROM {reap}(%s, 'alice@example.com', '{{}}', ARRAY[%s]::bigint[], 0, 5, "
            "false)",
            (run, pending),
        ).fetchone()
        assert changed["ids"] == []
        note = f'outbox_monitor."{writer_name("note", "public", "integration_outbox")}"'
        with pytest.raises(psycopg.errors.InsufficientPrivilege, match="only a read"):
            ops.execute(
                f"SELECT {note}(%s, 'alice@example.com', 'replay', '{{}}', ARRAY[1]::bigint[])",
                (run,),
            )
        ops.execute(
            f"SELECT * FROM {reap}(%s, 'alice@example.com', %s, ARRAY[]::bigint[], 0, 5, true)",
            (run, Jsonb({"event_type": None})),
        )
    assert rows.get(pending)["status"] == "pending"
    [row] = conn.execute(
        "SELECT actor, action, affected_count, db_login FROM outbox_monitor.audit_log"
    ).fetchall()
    assert row == {
        "actor": "alice@example.com",  # the person is a claim…
        "action": "reap",
        "affected_count": 0,
        "db_login": logins.actions,  # …the login is what the database knows
    }


def test_the_owner_can_still_change_rows_without_an_audit_row(dsn, rows, conn):
    """docs/security.md: the table's owner (and a superuser) keeps every right on its table
    — a change in psql leaves no audit row; what it does through the writers is audited
    under its own login."""
    dead = rows.add(status="failed", attempts=10, processed_ago=60, last_error="e")
    conn.execute("UPDATE integration_outbox SET status = 'pending' WHERE id = %s", (dead,))
    assert rows.get(dead)["status"] == "pending"
    assert conn.execute("SELECT count(*) AS n FROM outbox_monitor.audit_log").fetchone()["n"] == 0
    conn.execute("UPDATE integration_outbox SET status = 'failed' WHERE id = %s", (dead,))
    with Database(load_settings(dsn=dsn)) as db:
        apply(
            db,
            preview_replay(db, ReplaySelection(ids=(dead,))),
            actor=local_identity(db.settings, name="ops"),
        )
    [row] = conn.execute("SELECT actor, db_login FROM outbox_monitor.audit_log").fetchall()
    assert row == {"actor": "ops", "db_login": "postgres"}


def test_a_table_with_a_long_name_gets_hashed_writer_names_that_work(empty_dsn, logins):
    table = "s__x." + "t" * 60
    settings = load_settings(dsn=empty_dsn, table=table)
    with Database(settings) as db:
        init_db(db, create_table=True, create_indexes=False)
    names = {writer_name(kind, "s__x", "t" * 60) for kind in KINDS}
    assert all(len(name.encode()) <= 63 for name in names)
    with psycopg.connect(empty_dsn, row_factory=dict_row) as su:
        present = su.execute(
            "SELECT proname FROM pg_proc WHERE pronamespace = 'outbox_monitor'::regnamespace "
            "AND proname = ANY(%s)",
            (list(names),),
        ).fetchall()
        dead = su.execute(
            f'INSERT INTO s__x."{"t" * 60}" (event_type, aggregate_type, aggregate_id, '
            "event_key, payload, status, attempts, processed_at) VALUES ('x', 'a', '1', 'k', "
            "'{}', 'failed', 3, now()) RETURNING id"
        ).fetchone()["id"]
        su.commit()
    assert len(present) == len(KINDS)
    with Database(settings) as db:
        result = apply(
            db,
            preview_replay(db, ReplaySelection(ids=(dead,))),
            actor=local_identity(settings, name="ops"),
        )
    assert result.changed == 1


def test_the_schedulers_reaper_and_pruner_go_through_the_writers_under_its_login(
    dsn, logins, rows, conn
):
    """The scheduler's automatic reap and prune go through the same writers, audited as
    `scheduler` under the scheduler's login: with the scheduler role alone the database
    refuses them (no writer is its); its login granted the operator role too (docs/deploy.md),
    they run."""
    stuck = rows.add(status="processing", created_ago=3600, locked_ago=30 * 60)
    old = rows.add(status="done", created_ago=40 * 86400, processed_ago=40 * 86400)
    settings = load_settings(dsn=logins.dsn(dsn, logins.scheduler), auto_prune_done=30 * 86400)
    with Database(settings) as db, pytest.raises(PermissionDenied, match="lacks EXECUTE"):
        reap_stuck_locks(db)
    conn.execute(
        psycopg.sql.SQL("GRANT {} TO {}").format(
            psycopg.sql.Identifier(logins.roles.operator), psycopg.sql.Identifier(logins.scheduler)
        )
    )
    conn.commit()
    try:
        with Database(settings) as db:
            assert reap_stuck_locks(db).changed == 1
            assert prune_retention(db).changed == 1
    finally:
        conn.execute(
            psycopg.sql.SQL("REVOKE {} FROM {}").format(
                psycopg.sql.Identifier(logins.roles.operator),
                psycopg.sql.Identifier(logins.scheduler),
            )
        )
        conn.commit()
    audit = conn.execute(
        "SELECT action, actor, db_login, affected_ids FROM outbox_monitor.audit_log ORDER BY id"
    ).fetchall()
    assert [(a["action"], a["actor"], a["db_login"], a["affected_ids"]) for a in audit] == [
        ("reap", "scheduler", logins.scheduler, [stuck]),
        ("prune", "scheduler", logins.scheduler, [old]),
    ]


def test_a_reap_by_the_operator_login_feeds_the_circuit_breaker(dsn, logins, rows, conn):
    """SPEC §5: each reaped row is a transient failure for its type's breaker, also when the
    reap runs as the operator login, which may not claim (migration 020)."""
    settings = load_settings(dsn=dsn, actions_dsn=logins.dsn(dsn, logins.actions))
    person = local_identity(settings, name="oncall@example.com")
    with Database(settings, purpose="actions") as db:
        change(
            db,
            "crm.%",
            actor=person,
            action="breaker",
            changes={"breaker": True, "breaker_min_attempts": 3, "breaker_ratio": 1},
        )
        for _ in range(3):
            rows.add(event_type="crm.contact", status="processing", locked_ago=3600)
        assert apply(db, preview_reap(db), actor=person).changed == 3
    state = conn.execute("SELECT breaker_state FROM outbox_monitor.control_state").fetchone()
    assert state == {"breaker_state": "open"}  # 3 reaps: 3 transient failures of 3 outcomes
    assert conn.execute("SELECT count(*) AS n FROM outbox_monitor.writer_outcomes").fetchone() == {
        "n": 0
    }


def _dead_row(dsn: str, table: str) -> int:
    """A dead letter inserted into ``table`` (``schema.table``): its id."""
    with psycopg.connect(dsn, row_factory=dict_row, autocommit=True) as su:
        return su.execute(
            psycopg.sql.SQL(
                "INSERT INTO {} (event_type, aggregate_type, aggregate_id, event_key,"
                " payload, status, attempts, processed_at) VALUES ('x', 'a', '1', %s,"
                " '{{}}', 'failed', 3, now()) RETURNING id"
            ).format(psycopg.sql.Identifier(*table.split("."))),
            (table,),
        ).fetchone()["id"]


def _statuses(dsn: str, rows: dict[str, int]) -> dict[str, str]:
    """The status of each table's row ``{schema.table: id}``."""
    with psycopg.connect(dsn, row_factory=dict_row) as su:
        return {
            table: su.execute(
                psycopg.sql.SQL("SELECT status FROM {} WHERE id = %s").format(
                    psycopg.sql.Identifier(*table.split("."))
                ),
                (row,),
            ).fetchone()["status"]
            for table, row in rows.items()
        }


def test_two_tables_whose_names_meet_at_the_seam_keep_their_own_writers(empty_dsn, logins):
    """``public._x`` and ``public_.x``: a replay of one table's dead row changes that row."""
    dead = {}
    for table in ("public._x", "public_.x"):
        with Database(load_settings(dsn=empty_dsn, table=table)) as db:
            init_db(db, create_table=True, create_indexes=False)
        dead[table] = _dead_row(empty_dsn, table)
    settings = load_settings(dsn=empty_dsn, table="public._x")
    with Database(settings) as db:
        result = apply(
            db,
            preview_replay(db, ReplaySelection(ids=(dead["public._x"],))),
            actor=local_identity(settings, name="ops"),
        )
    assert result.changed == 1
    assert _statuses(empty_dsn, dead) == {"public._x": "pending", "public_.x": "failed"}


def _writer_grantees(conn, name: str, kind: str) -> list[str] | None:
    """The roles other than its owner granted EXECUTE on ``outbox_monitor.name``; None when
    there is no such function."""
    found = conn.execute(
        """SELECT coalesce(array_agg(r.rolname ORDER BY r.rolname)
                             FILTER (WHERE r.rolname IS NOT NULL), '{}') AS roles
           FROM pg_proc AS p
           LEFT JOIN LATERAL aclexplode(p.proacl) AS a
                  ON a.privilege_type = 'EXECUTE' AND a.grantee <> p.proowner
           LEFT JOIN pg_roles AS r ON r.oid = a.grantee
           WHERE p.oid = to_regprocedure(%s) GROUP BY p.oid""",
        (psycopg.sql.Identifier("outbox_monitor", name).as_string(conn) + f"({SIGNATURES[kind]})",),
    ).fetchone()
    return None if found is None else found["roles"]


def test_init_db_moves_an_earlier_releases_writers_at_the_seam_keeping_their_grants(
    empty_dsn, logins
):
    """An earlier release named ``public._x``'s writers ``<kind>__public___x``, a name
    ``public_.x``'s could take over. init-db moves the ones whose comment names its table to
    the new names, their grants kept, and leaves another table's: here ``public._x``'s
    replay was taken over by ``public_.x`` (the collision), its reap is still its own."""
    operator = logins.roles.operator
    with psycopg.connect(empty_dsn, autocommit=True, row_factory=dict_row) as su:
        for table in ("public_.x", "public._x"):
            with Database(load_settings(dsn=empty_dsn, table=table)) as db:
                init_db(db, create_table=True, create_indexes=False)
        # as an earlier release left them: _x's reap under the earlier name, granted;
        # its replay's earlier name holding public_.x's replay (the collision)
        for kind, table in (("reap", "_x"), ("replay", "x")):
            schema = "public" if table == "_x" else "public_"
            new = writer_name(kind, schema, table)
            earlier = earlier_writer_name(kind, "public", "_x")
            su.execute(
                psycopg.sql.SQL("ALTER FUNCTION {}({}) RENAME TO {}").format(
                    psycopg.sql.Identifier("outbox_monitor", new),
                    psycopg.sql.SQL(SIGNATURES[kind]),
                    psycopg.sql.Identifier(earlier),
                )
            )
            su.execute(
                psycopg.sql.SQL("GRANT EXECUTE ON FUNCTION {}({}) TO {}").format(
                    psycopg.sql.Identifier("outbox_monitor", earlier),
                    psycopg.sql.SQL(SIGNATURES[kind]),
                    psycopg.sql.Identifier(operator),
                )
            )
        assert earlier_writer_name("reap", "public", "_x") == "reap__public___x"
        assert _writer_grantees(su, writer_name("reap", "public", "_x"), "reap") is None

        with Database(load_settings(dsn=empty_dsn, table="public._x")) as db:
            init_db(db, create_indexes=False)

        assert _writer_grantees(su, "reap__public___x", "reap") is None
        assert _writer_grantees(su, writer_name("reap", "public", "_x"), "reap") == [operator]
        assert _writer_grantees(su, writer_name("replay", "public", "_x"), "replay") == []
        assert _writer_grantees(su, "replay__public___x", "replay") == [operator]
        comment = su.execute(
            "SELECT obj_description(to_regprocedure(%s), 'pg_proc') AS c",
            (f"outbox_monitor.replay__public___x({SIGNATURES['replay']})",),
        ).fetchone()["c"]
        assert comment.startswith("Audited replay of public_.x ")


def _hex_collider(schema: str, kind: str) -> tuple[str, str]:
    """A table of ``schema`` whose writer of ``kind`` takes the hashed name (``schema`` is
    long), and the table whose plain name is that hashed name: the start of ``schema`` the
    hashed name keeps, and as table the 12 hex digits (a name starting with a letter)."""
    for n in range(100):
        table = f"outbox{n}"
        name = writer_name(kind, schema, table)
        head, digest = name.rsplit("__", 1)
        if digest[0].isalpha():
            return table, head.removeprefix(f"{kind}__") + "." + digest
    raise AssertionError("no table found")


def test_a_table_named_as_another_tables_hash_keeps_its_own_writers(empty_dsn, logins):
    """attack33: ``replay__<first 41 bytes of a long schema>__<12 hex of md5>`` is both the
    hashed name of a long table's replay and the plain name of the table ``<those 41
    bytes>.<those 12 hex>``: the second init-db replaced the first table's replay, and a
    replay of its dead row changed the other table's row of the same id."""
    schema = "tenant" + "a" * 44  # 50 characters: every writer's plain name is over 63 bytes
    table, collider = _hex_collider(schema, "replay")
    assert len(collider.split(".")[0]) == 41
    assert writer_name("replay", schema, table) == "replay__" + collider.replace(".", "__")
    dead = {}
    for name in (f"{schema}.{table}", collider):
        with Database(load_settings(dsn=empty_dsn, table=name)) as db:
            init_db(db, create_table=True, create_indexes=False)
        dead[name] = _dead_row(empty_dsn, name)
    settings = load_settings(dsn=empty_dsn, table=f"{schema}.{table}")
    with Database(settings) as db:
        apply(
            db,
            preview_replay(db, ReplaySelection(ids=(dead[f"{schema}.{table}"],))),
            actor=local_identity(settings, name="ops"),
        )
    assert _statuses(empty_dsn, dead) == {f"{schema}.{table}": "pending", collider: "failed"}


def test_init_db_moves_an_earlier_writer_of_a_table_named_by_12_hex_digits(empty_dsn, logins):
    """attack33: a table named by 12 hex digits had the plain names; init-db moves its
    writers (their comment names it) to the hashed names, the operator's grant kept."""
    operator = logins.roles.operator
    schema, table = "public", "abcdef012345"
    with Database(load_settings(dsn=empty_dsn, table=f"{schema}.{table}")) as db:
        init_db(db, create_table=True, create_indexes=False)
    plain = f"reap__{schema}__{table}"
    assert earlier_writer_name("reap", schema, table) == plain != writer_name("reap", schema, table)
    with psycopg.connect(empty_dsn, autocommit=True, row_factory=dict_row) as su:
        function = psycopg.sql.SQL("{}({})")
        su.execute(
            psycopg.sql.SQL("ALTER FUNCTION {} RENAME TO {}").format(
                function.format(
                    psycopg.sql.Identifier("outbox_monitor", writer_name("reap", schema, table)),
                    psycopg.sql.SQL(SIGNATURES["reap"]),
                ),
                psycopg.sql.Identifier(plain),
            )
        )
        su.execute(
            psycopg.sql.SQL("GRANT EXECUTE ON FUNCTION {} TO {}").format(
                function.format(
                    psycopg.sql.Identifier("outbox_monitor", plain),
                    psycopg.sql.SQL(SIGNATURES["reap"]),
                ),
                psycopg.sql.Identifier(operator),
            )
        )
        with Database(load_settings(dsn=empty_dsn, table=f"{schema}.{table}")) as db:
            init_db(db, create_indexes=False)
        assert _writer_grantees(su, plain, "reap") is None
        assert _writer_grantees(su, writer_name("reap", schema, table), "reap") == [operator]


def test_init_db_moves_an_earlier_writers_grant_option_and_odd_role_names(empty_dsn, logins):
    """attack33: ``public._x``'s earlier reap granted to the operator WITH GRANT OPTION and
    to a role named ``Ops "Team" <uuid>`` (quotes, capitals, spaces): the new writer has
    both grants, the operator's still with its grant option; PUBLIC's is not moved."""
    operator = logins.roles.operator
    odd = f'Ops "Team" {uuid.uuid4().hex[:8]}'
    earlier = earlier_writer_name("reap", "public", "_x")
    with psycopg.connect(empty_dsn, autocommit=True, row_factory=dict_row) as su:
        su.execute(psycopg.sql.SQL("CREATE ROLE {}").format(psycopg.sql.Identifier(odd)))
        try:
            with Database(load_settings(dsn=empty_dsn, table="public._x")) as db:
                init_db(db, create_table=True, create_indexes=False)
            function = psycopg.sql.SQL("{}({})")
            old = function.format(
                psycopg.sql.Identifier("outbox_monitor", earlier),
                psycopg.sql.SQL(SIGNATURES["reap"]),
            )
            su.execute(
                psycopg.sql.SQL("ALTER FUNCTION {} RENAME TO {}").format(
                    function.format(
                        psycopg.sql.Identifier(
                            "outbox_monitor", writer_name("reap", "public", "_x")
                        ),
                        psycopg.sql.SQL(SIGNATURES["reap"]),
                    ),
                    psycopg.sql.Identifier(earlier),
                )
            )
            su.execute(
                psycopg.sql.SQL(
                    "GRANT EXECUTE ON FUNCTION {f} TO {o} WITH GRANT OPTION;"
                    " GRANT EXECUTE ON FUNCTION {f} TO {r}, PUBLIC"
                ).format(f=old, o=psycopg.sql.Identifier(operator), r=psycopg.sql.Identifier(odd))
            )

            with Database(load_settings(dsn=empty_dsn, table="public._x")) as db:
                init_db(db, create_indexes=False)

            grants = su.execute(
                """SELECT coalesce(r.rolname, 'PUBLIC') AS role, a.is_grantable
                   FROM aclexplode((SELECT proacl FROM pg_proc WHERE oid = to_regprocedure(%s)))
                        AS a
                   LEFT JOIN pg_roles AS r ON r.oid = a.grantee
                   WHERE a.grantee <> (SELECT proowner FROM pg_proc
                                        WHERE oid = to_regprocedure(%s))
                   ORDER BY 1""",
                (
                    psycopg.sql.Identifier(
                        "outbox_monitor", writer_name("reap", "public", "_x")
                    ).as_string(su)
                    + f"({SIGNATURES['reap']})",
                )
                * 2,
            ).fetchall()
            assert {row["role"]: row["is_grantable"] for row in grants} == {
                odd: False,
                operator: True,
            }
        finally:
            su.execute(
                psycopg.sql.SQL("DROP OWNED BY {r}; DROP ROLE {r}").format(
                    r=psycopg.sql.Identifier(odd)
                )
            )
