"""Table health (issue 14 item 1) on a real PostgreSQL: dead tuples of a bulk ack counted by
hand, a vacuum at work and its phase, and every kind of xmin horizon holder — a session idle
in a transaction, a prepared transaction, replication slots (logical, reserved physical, and a
standby's gone away) — named with its age and the command that ends it, which the tests run
as an operator would. A login without pg_monitor is told what it cannot see."""

import json
import re
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

import psycopg
import pytest
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict
from psycopg.rows import dict_row

from outbox_monitor.alerts.evaluate import Evaluator
from outbox_monitor.alerts.rules_file import SHIPPED_RULES_PATH, load_rules
from outbox_monitor.config.settings import load_settings
from outbox_monitor.demo.pgcluster import TemporaryCluster
from outbox_monitor.demo.pgstandby import TemporaryStandby
from outbox_monitor.figures import metrics
from outbox_monitor.health.horizon import PREPARED, SESSION, SLOT, horizon, xmin_horizon_age
from outbox_monitor.health.status import health_status
from outbox_monitor.health.table import index_sizes, table_health
from outbox_monitor.health.vacuum import vacuums_running
from outbox_monitor.service.sampler import record_sample
from outbox_monitor.store.db import Database
from outbox_monitor.store.schema import init_db
from tests.alerting import notifications
from tests.health import (
    ack_all,
    autovacuum_off,
    flush_statistics,
    idle_in_transaction,
    plain_login,
    wait_until,
)

WAIT_SECONDS = 1.5
REPO = Path(__file__).resolve().parents[2]


def status_command(*args: str, home: Path) -> subprocess.CompletedProcess:
    """``outbox-monitor status ARGS`` of this checkout, in a process of its own."""
    return subprocess.run(
        [sys.executable, "-m", "outbox_monitor", "status", *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
        env={"PATH": "/usr/bin:/bin", "HOME": str(home)},
    )


def holder_of(found, application: str):
    [holder] = [h for h in found.holders if h.application == application]
    return holder


def test_dead_tuples_of_a_bulk_ack_are_counted_and_a_vacuum_removes_them(db, conn, rows):
    autovacuum_off(conn)
    ids = [rows.add(status="processing", locked_ago=5) for _ in range(40)]
    ack_all(conn, ids[:30])  # 30 rows updated: 30 dead row versions
    flush_statistics(conn)

    found = table_health(db)
    assert (found.live_tuples, found.dead_tuples) == (40, 30)
    assert found.dead_tuple_fraction == pytest.approx(30 / 70)
    assert not found.autovacuum_enabled  # the table's storage parameter
    assert found.last_vacuum is None and found.last_autovacuum is None
    assert found.time_since_autovacuum is None
    assert found.vacuum_overdue == 0  # 30 dead < 40 live
    assert found.partitions == 1 and found.table_bytes >= 8192
    assert found.indexes_bytes == sum(index["bytes"] for index in index_sizes(db))
    assert {index["index"] for index in index_sizes(db)} >= {
        "integration_outbox_pkey",
        "integration_outbox_claim_idx",
    }

    conn.execute("DELETE FROM integration_outbox WHERE id = ANY(%s)", (ids[30:],))  # 10 more
    flush_statistics(conn)
    found = table_health(db)
    assert (found.live_tuples, found.dead_tuples) == (30, 40)
    # dead outnumber live, never vacuumed: overdue since statistics began (at least)
    assert found.vacuum_overdue == pytest.approx(
        (found.now - found.statistics_since).total_seconds()
    )

    conn.execute("VACUUM integration_outbox")
    found = table_health(db)
    assert found.dead_tuples == 0 and found.last_vacuum is not None
    assert found.vacuum_overdue == 0


def test_the_autovacuum_threshold_counts_no_tuple_before_the_first_analyze(db, conn, rows):
    autovacuum_off(conn)  # no autoanalyze while the test reads
    [settings] = conn.execute(
        "SELECT current_setting('autovacuum_vacuum_threshold') AS base,"
        " current_setting('autovacuum_vacuum_scale_factor') AS scale"
    )
    assert settings == {"base": "50", "scale": "0.2"}  # the defaults
    for _ in range(40):
        rows.add()
    flush_statistics(conn)
    found = table_health(db)
    # reltuples is -1 before the first vacuum or analyze: 0 tuples, as autovacuum counts them
    assert found.live_tuples == 40 and found.tuples_counted is False
    assert found.autovacuum_threshold == 50
    conn.execute("ANALYZE integration_outbox")
    found = table_health(db)
    assert found.tuples_counted is True
    assert found.autovacuum_threshold == 58  # 50 + 0.2 × 40


def test_a_session_idle_in_transaction_holds_the_horizon_and_keeps_dead_tuples(db, dsn, conn, rows):
    autovacuum_off(conn)
    ids = [rows.add() for _ in range(20)]
    with idle_in_transaction(dsn, "forgotten-report") as pid:
        started = time.monotonic()
        time.sleep(WAIT_SECONDS)
        waited = time.monotonic() - started
        found = horizon(db)
        holder = holder_of(found, "forgotten-report")
        assert (holder.kind, holder.name, holder.state) == (
            SESSION,
            f"pid {pid}",
            "idle in transaction",
        )
        assert holder.holds_horizon and not holder.hidden
        assert holder.held_seconds >= waited
        assert holder.xid_age >= 1 and holder.client == "127.0.0.1"
        assert holder.query == "SELECT txid_current()"
        assert holder.command == f"SELECT pg_terminate_backend({pid});"
        assert "idle_in_transaction_session_timeout" in holder.advice
        assert found.oldest == holder and found.age_seconds == holder.held_seconds
        assert xmin_horizon_age(db) >= waited

        ack_all(conn, ids)  # the rows die after the holder began: no vacuum may remove them
        flush_statistics(conn)  # counted before the vacuum sets the count, not added after it
        conn.execute("VACUUM integration_outbox")
        assert table_health(db).dead_tuples == 20

        # the command shown, run by hand as an operator would
        assert conn.execute(holder.command).fetchone() == {"pg_terminate_backend": True}
        wait_until(
            lambda: all(h.application != "forgotten-report" for h in horizon(db).holders),
            5,
            "the session to end",
        )
    conn.execute("VACUUM integration_outbox")
    assert table_health(db).dead_tuples == 0
    assert xmin_horizon_age(db) < WAIT_SECONDS  # only this test's own short statements


def test_a_session_idle_in_transaction_without_xid_is_listed_as_holding_nothing(db, dsn):
    with psycopg.connect(dsn, application_name="just-begun") as other:
        other.execute("SELECT 1")  # read committed: no snapshot kept, no transaction id
        holder = holder_of(horizon(db), "just-begun")
        assert holder.state == "idle in transaction" and not holder.holds_horizon
        assert holder.held_seconds is not None  # how long it has been open
        assert "holds no horizon" in holder.advice
        assert xmin_horizon_age(db) < holder.held_seconds + 1  # it does not count


def test_a_prepared_transaction_holds_the_horizon_until_rolled_back(db, dsn, conn):
    gid = "o'brien-2pc-" + uuid.uuid4().hex[:8]  # a quote: the command must quote it
    with psycopg.connect(dsn, autocommit=True) as other:
        other.execute("BEGIN")
        other.execute("SELECT txid_current()")
        other.execute(sql.SQL("PREPARE TRANSACTION {}").format(sql.Literal(gid)))
    try:
        time.sleep(WAIT_SECONDS)
        found = horizon(db)
        [holder] = [h for h in found.holders if h.kind == PREPARED]
        assert holder.name == gid and holder.holds_horizon and holder.role == "postgres"
        assert holder.held_seconds >= WAIT_SECONDS and holder.xid_age >= 1
        assert holder.command == "ROLLBACK PREPARED 'o''brien-2pc-" + gid[-8:] + "';"
        assert found.age_seconds >= WAIT_SECONDS
        conn.execute(holder.command)  # run by hand, as the page says
        assert [h for h in horizon(db).holders if h.kind == PREPARED] == []
    finally:
        leftover = conn.execute("SELECT 1 FROM pg_prepared_xacts WHERE gid = %s", (gid,))
        if leftover.fetchone():
            conn.execute(sql.SQL("ROLLBACK PREPARED {}").format(sql.Literal(gid)))


def test_replication_slots_say_what_they_hold_and_are_dropped_by_their_command(db, conn):
    suffix = uuid.uuid4().hex[:8]
    logical, physical = f"hs_logical_{suffix}", f"hs_physical_{suffix}"
    conn.execute("SELECT pg_create_logical_replication_slot(%s, 'test_decoding')", (logical,))
    conn.execute("SELECT pg_create_physical_replication_slot(%s, true)", (physical,))
    try:
        found = horizon(db)
        slots = {h.name: h for h in found.holders if h.kind == SLOT}
        # a logical slot keeps catalog_xmin: vacuum of the system catalogs only, not the outbox
        assert not slots[logical].holds_horizon and slots[logical].xid_age >= 0
        assert "system catalogs only" in slots[logical].advice
        assert slots[logical].state == "inactive" and slots[logical].held_seconds is None
        # a reserved physical slot without a standby: no xmin at all, only WAL
        assert not slots[physical].holds_horizon and slots[physical].xid_age is None
        assert slots[physical].retained_wal_bytes > 0
        assert "holds no horizon" in slots[physical].advice
        assert logical not in {h.name for h in found.holding}
        for name in (logical, physical):
            assert slots[name].command == f"SELECT pg_drop_replication_slot('{name}');"
            conn.execute(slots[name].command)
        assert not {logical, physical} & {h.name for h in horizon(db).holders}
    finally:
        conn.execute(
            "SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots "
            "WHERE slot_name = ANY(%s)",
            ([logical, physical],),
        )


class FeedbackStandby(TemporaryStandby):
    """A hot standby streaming through the primary's slot ``standby_1`` with
    hot_standby_feedback: the slot takes the standby's xmin."""

    def _options(self) -> str:
        return (
            f"{super()._options()} -c primary_slot_name=standby_1 -c hot_standby_feedback=on "
            "-c wal_receiver_status_interval=1"
        )


def test_a_gone_standbys_slot_holds_the_horizon_of_every_database(fake_clock, write_rules):
    """A physical slot gets an xmin from a standby with hot_standby_feedback; when the standby
    goes away for good the slot keeps it: every database's dead tuples stay."""
    with TemporaryCluster() as primary:
        settings = load_settings(dsn=primary.dsn)
        with (
            Database(settings) as db,
            psycopg.connect(primary.dsn, autocommit=True) as su,
            psycopg.connect(primary.dsn, autocommit=True, row_factory=dict_row) as su_rows,
        ):
            init_db(db, create_table=True, create_indexes=False)
            su.execute("SELECT pg_create_physical_replication_slot('standby_1', true)")
            standby = FeedbackStandby(primary).start()
            try:
                wait_until(
                    lambda: su.execute(
                        "SELECT xmin FROM pg_replication_slots WHERE slot_name = 'standby_1'"
                    ).fetchone()[0],
                    30,
                    "the standby's feedback to give the slot an xmin",
                )
            finally:
                standby.stop()  # gone for good: its slot stays
            su.execute(
                "INSERT INTO integration_outbox (event_type, aggregate_type, aggregate_id, "
                "event_key, payload) SELECT 'order.paid', 'order', g::text, 'k' || g, '{}' "
                "FROM generate_series(1, 10) AS g"
            )
            su.execute("UPDATE integration_outbox SET status = 'done', processed_at = now()")
            # the update's 10 dead tuples counted before the vacuum sets the count: flushed after
            # it (PostgreSQL 15 flushes at most once a second), they would be added to it: 20
            flush_statistics(su)
            su.execute("VACUUM integration_outbox")

            found = horizon(db)
            [slot] = [h for h in found.holders if h.kind == SLOT]
            assert (slot.name, slot.state, slot.holds_horizon) == ("standby_1", "inactive", True)
            assert slot.held_seconds is None and slot.xid_age >= 1  # no time kept for a slot
            assert "every database" in slot.advice
            assert found.oldest == slot and found.age_seconds == 0  # of known age: none
            assert found.inactive_slots_holding == 1
            assert table_health(db).dead_tuples == 10  # the vacuum could remove none

            # the shipped rule: the slot seen holding it for `for` (10 min on the fake clock)
            rule = load_rules(SHIPPED_RULES_PATH).rule("slot-holds-horizon")
            ruleset = write_rules(
                {"version": 1, "routes": {"oncall": {}}, "rules": [rule.model_dump(by_alias=True)]}
            )
            evaluator = Evaluator(db, ruleset, clock=fake_clock)
            assert evaluator.run_once().instance(rule.name).state == "pending"
            fake_clock.advance(rule.for_)
            assert evaluator.run_once().instance(rule.name).state == "firing"
            [firing] = notifications(su_rows, rule.name)
            [named] = firing["payload"]["offenders"]
            assert named["label"].startswith("replication slot 'standby_1' (physical slot")
            assert named["command"] == "SELECT pg_drop_replication_slot('standby_1');"

            su.execute(slot.command)
            su.execute("VACUUM integration_outbox")
            assert table_health(db).dead_tuples == 0


def test_a_running_vacuum_shows_its_phase_and_hides_from_a_login_without_pg_monitor(
    db, dsn, conn, rows, pg_cluster
):
    autovacuum_off(conn)
    conn.execute(
        "INSERT INTO integration_outbox (event_type, aggregate_type, aggregate_id, event_key, "
        "payload) SELECT 'order.paid', 'order', g::text, 'slow:' || g, "
        "jsonb_build_object('pad', repeat('x', 500)) FROM generate_series(1, 3000) AS g"
    )
    conn.execute("UPDATE integration_outbox SET attempts = 1")
    outcome: dict = {}

    def slow_vacuum() -> None:
        with psycopg.connect(dsn, autocommit=True, application_name="slow-vacuum") as vac:
            outcome["pid"] = vac.info.backend_pid
            vac.execute("SET vacuum_cost_delay = '100ms'")
            vac.execute("SET vacuum_cost_limit = 1")  # a nap after every page
            try:
                vac.execute("VACUUM integration_outbox")
            except psycopg.errors.QueryCanceled:
                outcome["cancelled"] = True

    thread = threading.Thread(target=slow_vacuum)
    thread.start()
    try:
        [run] = wait_until(lambda: [r for r in vacuums_running(db) if r.on_outbox], 10, "vacuum")
        assert run.relation == "integration_outbox" and not run.hidden
        assert run.phase in ("scanning heap", "vacuuming indexes", "vacuuming heap")
        assert run.automatic is False and run.heap_blks_total > 50
        assert run.running_seconds >= 0
        assert run.pid not in {
            int(h.name.split()[1]) for h in horizon(db).holders if h.kind == SESSION
        }, "a vacuum holds no horizon for other vacuums"

        with Database(load_settings(dsn=plain_login(pg_cluster, dsn))) as plain:
            [unseen] = [r for r in vacuums_running(plain) if r.pid == run.pid]
            assert unseen.hidden and unseen.relation is None and unseen.on_outbox is None
            health = health_status(plain)
            assert health["vacuums"] == [] and health["hidden_vacuums"] >= 1
            assert any("vacuum(s) run in this database" in note for note in health["hidden"])
    finally:
        conn.execute("SELECT pg_cancel_backend(%s)", (outcome.get("pid"),))
        thread.join(30)
    assert outcome.get("cancelled")


def test_a_login_without_pg_monitor_is_told_what_is_hidden(db, dsn, pg_cluster):
    plain_dsn = plain_login(pg_cluster, dsn)
    login = conninfo_to_dict(plain_dsn)["user"]
    with (
        idle_in_transaction(dsn, "superuser-report"),
        Database(load_settings(dsn=plain_dsn)) as plain,
    ):
        time.sleep(WAIT_SECONDS)
        found = horizon(plain)
        holder = holder_of(found, "superuser-report")
        # pid, role, application and xids are public; start, state and query are not
        assert holder.hidden and holder.holds_horizon and holder.xid_age >= 1
        assert holder.held_seconds is None and holder.state is None and holder.query is None
        assert "hidden" in holder.summary and "grant pg_monitor" in holder.advice
        assert not found.sees_all and found.hidden_sessions >= 1
        assert f"grant pg_monitor to {login}" in found.hidden_note
        assert found.age_seconds == 0  # hidden: not counted, and said so
        assert health_status(plain)["hidden"] == [found.hidden_note]

        with psycopg.connect(pg_cluster.dsn, autocommit=True) as su:
            su.execute(sql.SQL("GRANT pg_monitor TO {}").format(sql.Identifier(login)))
        found = horizon(plain)
        holder = holder_of(found, "superuser-report")
        assert found.sees_all and found.hidden_note is None and not holder.hidden
        assert holder.held_seconds >= WAIT_SECONDS and holder.state == "idle in transaction"


def test_status_json_holds_the_health_and_the_sampler_records_it(db, dsn, conn, rows, tmp_path):
    autovacuum_off(conn)
    ids = [rows.add(status="processing", locked_ago=5) for _ in range(12)]
    ack_all(conn, ids[:5])
    flush_statistics(conn)
    with idle_in_transaction(dsn, "status-report") as pid:
        time.sleep(WAIT_SECONDS)
        result = status_command("--json", "--dsn", dsn, home=tmp_path)
        assert result.returncode == 0, result.stderr
        health = json.loads(result.stdout)["health"]
        assert (health["live_tuples"], health["dead_tuples"]) == (12, 5)
        assert health["autovacuum_enabled"] is False and health["hidden"] == []
        [holder] = [
            h for h in health["xmin_horizon_holders"] if h["application"] == "status-report"
        ]
        assert holder["command"] == f"SELECT pg_terminate_backend({pid});"
        assert holder["held_seconds"] >= WAIT_SECONDS
        assert health["xmin_horizon_age_seconds"] >= WAIT_SECONDS

        text = status_command("--dsn", dsn, home=tmp_path).stdout
        assert re.search(r"\n  dead / live tuples +5 / 12\n", text), text
        assert f"SELECT pg_terminate_backend({pid});" in text and "status-report" in text

        sample = record_sample(db)
        assert (sample["dead_tuples"], sample["live_tuples"]) == (5, 12)
        assert sample["table_bytes"] > 0 and sample["indexes_bytes"] > 0
        assert sample["xmin_horizon_age_seconds"] >= WAIT_SECONDS
    [stored] = metrics.samples_series(db)
    assert stored["dead_tuples"] == 5 and stored["xmin_horizon_age_seconds"] >= WAIT_SECONDS
