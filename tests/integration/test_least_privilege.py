"""Least-privilege database access (issue 4) on real logins: what `init-db --print-grants`
grants is exactly what each process does; an action through a login without the grant
fails naming the privilege, the object, the DSN setting and the role that has it; the CLI
acts through OUTBOX_MONITOR_ACTIONS_DSN."""

import json
import os
import re
import subprocess
import sys
from datetime import timedelta
from pathlib import Path

import psycopg
import pytest

from outbox_monitor.access import local_identity
from outbox_monitor.actions.prune import preview_prune
from outbox_monitor.actions.reap import preview_reap
from outbox_monitor.actions.replay import ReplaySelection, preview_replay
from outbox_monitor.actions.run import apply
from outbox_monitor.alerts.evaluate import Evaluator
from outbox_monitor.alerts.receivers import transports_for
from outbox_monitor.alerts.rules_file import load_rules
from outbox_monitor.alerts.sender import deliver_due
from outbox_monitor.alerts.silences import create_silence, expire_silence
from outbox_monitor.config.settings import load_settings
from outbox_monitor.errors import PermissionDenied
from outbox_monitor.service.sampler import record_sample
from outbox_monitor.store.db import Database
from outbox_monitor.store.db_errors import mapped_errors
from outbox_monitor.store.grants import Roles, grant_statements
from outbox_monitor.store.schema import check_outbox_table, init_db
from tests.alerting import notifications, rules_file

CLI = str(Path(sys.prefix) / "bin" / "outbox-monitor")
PRIVILEGES = ("SELECT", "INSERT", "UPDATE", "DELETE", "TRUNCATE")
RULES = """
version: 1
defaults: {interval: 30s, for: 0s, keep_firing_for: 0s}
routes:
  oncall: {webhook_url_env: SLACK_WEBHOOK_URL}
rules:
  - {name: backlog, metric: queue_depth, op: ">", threshold: 1, route: oncall}
"""


def cli(*args: str, home: Path, **env: str) -> subprocess.CompletedProcess:
    environment = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(home), **env}
    return subprocess.run(
        [CLI, *args], env=environment, capture_output=True, text=True, timeout=120
    )


def granted(conn: psycopg.Connection, role: str, table: str) -> set[str]:
    return {
        privilege
        for privilege in PRIVILEGES
        if conn.execute(
            "SELECT has_table_privilege(%s, %s, %s)", (role, table, privilege)
        ).fetchone()[0]
    }


def test_printed_grants_for_another_table_and_role_names_are_exactly_these(empty_dsn, tmp_path):
    roles = Roles(viewer="app_v_ro", scheduler="app_v_sched", operator="app_v_ops")
    settings = load_settings(dsn=empty_dsn, table="app.outbox")
    with Database(settings) as db:
        init_db(db, create_table=True, create_indexes=False)
    printed = cli(
        *("init-db", "--print-grants", "--table", "app.outbox"),
        *("--viewer-role", roles.viewer, "--scheduler-role", roles.scheduler),
        *("--operator-role", roles.operator),
        home=tmp_path,
        OUTBOX_MONITOR_DSN="postgresql://nobody@127.0.0.1:1/none",  # never connected to
    )
    assert printed.returncode == 0, printed.stderr
    assert 'GRANT SELECT ON "app"."outbox" TO "app_v_ro";' in printed.stdout

    with psycopg.connect(empty_dsn, autocommit=True) as su:
        su.execute(printed.stdout)
        su.execute(printed.stdout)  # idempotent: run again after an upgrade
        read, sched, ops = roles.viewer, roles.scheduler, roles.operator
        s, siu, sid = {"SELECT"}, {"SELECT", "INSERT", "UPDATE"}, {"SELECT", "INSERT", "DELETE"}
        expected = {
            # the outbox, silences and controls change only through the audited writers
            "app.outbox": {read: s, sched: s, ops: s},
            "app.integration_idempotency": {read: set(), sched: set(), ops: set()},
            "outbox_monitor.audit_log": {read: s, sched: s, ops: s},  # record_audit writes
            "outbox_monitor.silences": {read: s, sched: s, ops: s},
            "outbox_monitor.controls": {read: s, sched: s, ops: s},
            "outbox_monitor.samples": {read: s, sched: sid, ops: s},
            "outbox_monitor.alert_instances": {read: s, sched: siu, ops: s},
            # the operator records the "send test alert" message only through
            # record_test_notification (issue 10 item 4): no INSERT on notifications
            # the scheduler's retention deletes delivered notifications and old transitions
            "outbox_monitor.notifications": {read: s, sched: siu | {"DELETE"}, ops: s},
            "outbox_monitor.alert_transitions": {read: s, sched: sid, ops: s},
            "outbox_monitor.leader_leases": {read: s, sched: siu, ops: s},
            "outbox_monitor.schema_migrations": {read: s, sched: s, ops: s},
        }
        actual = {
            table: {role: granted(su, role, table) for role in (read, sched, ops)}
            for table in expected
        }
        assert actual == expected
        usage = (
            "SELECT has_schema_privilege(%s, 'app', 'USAGE'), "
            "has_sequence_privilege(%s, %s, 'USAGE')"
        )
        assert su.execute(usage, (read, read, "outbox_monitor.audit_log_id_seq")).fetchone() == (
            True,
            False,
        )
        for role, sequence in (
            (sched, "outbox_monitor.notifications_id_seq"),
            (sched, "outbox_monitor.alert_transitions_id_seq"),
        ):
            assert su.execute(usage, (role, role, sequence)).fetchone() == (True, True)
        for role in (read, sched, ops):
            assert not su.execute(
                "SELECT has_sequence_privilege(%s, 'outbox_monitor.audit_log_id_seq', 'USAGE')",
                (role,),
            ).fetchone()[0], "audit rows only through outbox_monitor.record_audit"
        assert su.execute(usage, (ops, ops, "outbox_monitor.notifications_id_seq")).fetchone() == (
            True,
            False,
        ), "test messages only through outbox_monitor.record_test_notification"
        executes = {
            function: {
                role: su.execute(
                    "SELECT has_function_privilege(%s, %s, 'EXECUTE')", (role, function)
                ).fetchone()[0]
                for role in (read, sched, ops)
            }
            for function in (
                "outbox_monitor.record_audit(uuid, text, text, text, jsonb, integer, bigint[])",
                "outbox_monitor.record_test_notification(text, jsonb, text, integer, text, "
                "text, text)",
            )
        }
        assert list(executes.values()) == [
            {read: False, sched: False, ops: False},  # internal: the audited writers call it
            {read: False, sched: False, ops: True},
        ]
        # issue 14: the Health page sees every session's horizon (pg_read_all_stats)
        monitors = "SELECT pg_has_role(%s, 'pg_monitor', 'USAGE')"
        assert [su.execute(monitors, (role,)).fetchone()[0] for role in (read, sched, ops)] == [
            True,
            True,
            True,
        ]


def test_the_scheduler_login_samples_evaluates_and_delivers_but_never_acts(
    dsn, logins, rows, slack_sink, fake_clock, tmp_path
):
    for ago in (120, 60):
        rows.add(created_ago=ago)
    stuck = rows.add(status="processing", created_ago=3600, locked_ago=30 * 60)
    ruleset = load_rules(rules_file(tmp_path, RULES))
    transports = transports_for(ruleset, {"SLACK_WEBHOOK_URL": slack_sink.webhook_url})
    settings = load_settings(dsn=logins.dsn(dsn, logins.scheduler))

    with Database(settings) as db:
        check_outbox_table(db)
        assert record_sample(db)["queue_depth"] == 2
        fired = Evaluator(db, ruleset, clock=fake_clock).run_once()
        sent = deliver_due(db, ruleset, clock=fake_clock, transports=transports)
        rows.conn.execute("UPDATE integration_outbox SET status = 'done' WHERE status = 'pending'")
        fake_clock.advance(60)
        resolved = Evaluator(db, ruleset, clock=fake_clock).run_once()
        sent_again = deliver_due(db, ruleset, clock=fake_clock, transports=transports)
        with pytest.raises(PermissionDenied) as refused:
            apply(db, preview_reap(db), actor=local_identity(settings))

    assert [t[:2] for t in fired.transitions] == [("backlog", "")]
    assert [t[:2] for t in resolved.transitions] == [("backlog", "")]
    assert fired.transitions != resolved.transitions
    assert (sent["sent"], sent_again["sent"]) == (1, 1)
    sent_rows = notifications(rows.conn)
    assert [(n["kind"], n["status"]) for n in sent_rows] == [
        ("firing", "sent"),
        ("resolved", "sent"),
    ]
    assert "lacks EXECUTE on function outbox_monitor.reap__public__integration_outbox" in str(
        refused.value
    )
    assert "member of outbox_operator" in refused.value.hint
    assert rows.get(stuck)["status"] == "processing"


def test_the_operator_login_reaps_replays_prunes_and_silences(dsn, logins, rows, conn):
    stuck = rows.add(status="processing", created_ago=3600, locked_ago=30 * 60)
    dead = rows.add(status="failed", attempts=10, processed_ago=60, last_error="e")
    old = rows.add(status="done", created_ago=40 * 86400, processed_ago=40 * 86400)
    settings = load_settings(dsn=dsn, actions_dsn=logins.dsn(dsn, logins.actions))
    operator = local_identity(settings, name="oncall@example.com")

    with Database(settings, purpose="actions") as db:
        assert db.dsn_setting == "OUTBOX_MONITOR_ACTIONS_DSN"
        changed = [
            apply(db, preview, actor=operator).changed
            for preview in (
                preview_reap(db),
                preview_replay(db, ReplaySelection(ids=(dead,))),
                preview_prune(db, done_older_than=30 * 86400, failed_older_than=90 * 86400),
            )
        ]
        silence = create_silence(
            db,
            {"rule": "backlog"},
            db.fetch_one("db_now")["now"] + timedelta(hours=1),
            "deploy",
            operator,
        )
        assert expire_silence(db, silence, operator)

    assert changed == [1, 1, 1]
    assert rows.get(stuck)["status"] == "pending" and rows.get(dead)["status"] == "pending"
    assert (
        conn.execute(
            "SELECT count(*) AS n FROM integration_outbox WHERE id = %s", (old,)
        ).fetchone()["n"]
        == 0
    )
    audit = conn.execute(
        "SELECT actor, action FROM outbox_monitor.audit_log ORDER BY id"
    ).fetchall()
    assert [a["actor"] for a in audit] == ["oncall@example.com"] * len(audit)
    assert [a["action"] for a in audit][:3] == ["reap", "replay", "prune"]


def test_a_login_without_any_grant_is_told_to_join_the_viewer_role(dsn, logins):
    settings = load_settings(dsn=logins.dsn(dsn, logins.nothing))

    with Database(settings) as db, pytest.raises(PermissionDenied) as caught:
        check_outbox_table(db)  # information_schema hides the table: not "missing"

    assert str(caught.value).startswith(
        f'the database role "{logins.nothing}" lacks SELECT on table public.integration_outbox'
    )
    assert caught.value.hint.startswith(
        "Make the role that OUTBOX_MONITOR_DSN logs in as a member of outbox_viewer"
    )
    assert "outbox-monitor init-db --print-grants" in caught.value.hint


def test_a_runner_who_may_not_grant_pg_monitor_is_warned_and_the_script_goes_on(dsn, logins):
    """From PostgreSQL 16 CREATEROLE no longer grants pg_monitor: the printed statement then
    warns (with the GRANT to run as a superuser) instead of failing the whole script."""
    script = grant_statements(load_settings(dsn=dsn), logins.roles)
    [statement] = re.findall(
        r"^DO \$\$ BEGIN GRANT pg_monitor TO .*?END \$\$;", script, re.M | re.S
    )
    warnings: list[str] = []
    with psycopg.connect(logins.dsn(dsn, logins.nothing), autocommit=True) as nobody:
        nobody.add_notice_handler(lambda notice: warnings.append(notice.message_primary))
        nobody.execute(statement)  # no error
    [warning] = warnings
    assert warning.startswith(
        'pg_monitor not granted (must have admin option on role "pg_monitor")'
    )
    assert warning.endswith(f'as a superuser, run GRANT pg_monitor TO "{logins.roles.viewer}";')


def test_without_a_connection_the_object_and_the_kind_privilege_are_still_named(dsn, logins):
    settings = load_settings(dsn=logins.dsn(dsn, logins.nothing))
    with (
        psycopg.connect(settings.dsn, autocommit=True) as conn,
        pytest.raises(PermissionDenied) as caught,
        mapped_errors(settings),  # no conn given, as the scheduler's leader connection
    ):
        conn.execute("SELECT count(*) FROM outbox_monitor.samples")

    assert "lacks USAGE on schema outbox_monitor" in str(caught.value)
    assert "member of outbox_viewer" in caught.value.hint


def test_cli_replay_through_a_read_only_actions_dsn_names_the_grant(dsn, logins, rows, tmp_path):
    dead = rows.add(status="failed", attempts=10, processed_ago=60, last_error="e")
    env = {
        "OUTBOX_MONITOR_DSN": dsn,
        "OUTBOX_MONITOR_ACTIONS_DSN": logins.dsn(dsn, logins.read),
        "OUTBOX_MONITOR_ACTOR": "cli-test",
    }

    text = cli("replay", "--id", str(dead), "--yes", home=tmp_path, **env)
    as_json = cli("replay", "--id", str(dead), "--yes", "--json", home=tmp_path, **env)

    assert text.returncode == 1, text.stdout + text.stderr
    assert (
        "lacks EXECUTE on function outbox_monitor.replay__public__integration_outbox" in text.stderr
    )
    assert "OUTBOX_MONITOR_ACTIONS_DSN" in text.stderr and "outbox_operator" in text.stderr
    assert as_json.returncode == 1
    error = json.loads(as_json.stdout)
    assert f'the database role "{logins.read}" lacks EXECUTE on function' in error["error"]
    assert "outbox-monitor init-db --print-grants" in error["hint"]
    assert rows.get(dead)["status"] == "failed"


def test_cli_actions_go_through_the_actions_dsn_and_dsn_wins_when_given(
    dsn, logins, rows, conn, tmp_path
):
    first = rows.add(status="failed", attempts=10, processed_ago=60, last_error="e")
    second = rows.add(status="failed", attempts=10, processed_ago=60, last_error="e")
    read, act = logins.dsn(dsn, logins.read), logins.dsn(dsn, logins.actions)

    applied = cli(
        *("replay", "--id", str(first), "--yes", "--json"),
        home=tmp_path,
        OUTBOX_MONITOR_DSN=read,
        OUTBOX_MONITOR_ACTIONS_DSN=act,
        OUTBOX_MONITOR_ACTOR="cli-test",
    )
    # --dsn names the database of the whole command; --actions-dsn the login that acts.
    refused = cli(
        *("replay", "--id", str(second), "--yes", "--dsn", read),
        home=tmp_path,
        OUTBOX_MONITOR_ACTIONS_DSN=act,
    )
    explicit = cli(
        *("replay", "--id", str(second), "--yes", "--dsn", read, "--actions-dsn", act),
        home=tmp_path,
        OUTBOX_MONITOR_ACTOR="cli-test",
    )

    assert applied.returncode == 0, applied.stdout + applied.stderr
    assert json.loads(applied.stdout)["changed"] == 1
    assert refused.returncode == 1 and "the role that --dsn logs in as" in refused.stderr
    assert explicit.returncode == 0, explicit.stdout + explicit.stderr
    audit = conn.execute("SELECT actor, affected_ids FROM outbox_monitor.audit_log ORDER BY id")
    assert [(a["actor"], a["affected_ids"]) for a in audit] == [
        ("cli-test", [first]),
        ("cli-test", [second]),
    ]
