"""The xmin horizon to a login without pg_monitor (PostgreSQL 15 shows it another role's pid,
role, application, backend_xid and backend_xmin, not its backend_type, start, state or
query): autovacuum's workers are not another role's hidden sessions, and a hidden holder
still grows the ``xmin_horizon_age`` figure, so its rule fires."""

import time

import psycopg
from psycopg import sql
from psycopg.conninfo import make_conninfo

from outbox_monitor.alerts.evaluate import Evaluator
from outbox_monitor.config.settings import load_settings
from outbox_monitor.demo.pgcluster import TemporaryCluster
from outbox_monitor.figures.registry import FIGURES
from outbox_monitor.health.horizon import horizon
from outbox_monitor.health.horizon_memory import FROM_FIRST_SEEN, UNKNOWN_HIDDEN
from outbox_monitor.health.status import health_status
from outbox_monitor.store.db import Database
from tests.alerting import oncall_rules
from tests.health import idle_in_transaction, plain_login, wait_until

RULES = oncall_rules(
    """\
  - name: xmin-horizon-held
    metric: xmin_horizon_age
    op: ">"
    threshold: 1s
    route: oncall
"""
)


class EagerAutovacuumCluster(TemporaryCluster):
    """A cluster whose autovacuum looks for work every second."""

    def _options(self) -> str:
        return f"{super()._options()} -c autovacuum_naptime=1"


def test_an_autovacuum_worker_is_no_hidden_session_of_another_role():
    """An autovacuum ANALYZE slowed to a crawl has a backend_xmin, no role and, to a login
    without pg_monitor, no backend_type: it was listed as a hidden holder and counted as a
    hidden session of another role. It is the server's own process, left out as it is for a
    login that sees it in full."""
    with EagerAutovacuumCluster() as cluster:
        with psycopg.connect(cluster.dsn, autocommit=True) as su:
            su.execute("CREATE DATABASE app")
            su.execute("CREATE ROLE watcher LOGIN")
        app = cluster.dsn_for("app")
        with psycopg.connect(app, autocommit=True) as su:
            su.execute(
                "CREATE TABLE big (id int, pad text) WITH (autovacuum_analyze_threshold = 0, "
                "autovacuum_analyze_scale_factor = 0, autovacuum_vacuum_threshold = 2000000000, "
                "autovacuum_vacuum_insert_threshold = -1, autovacuum_vacuum_cost_delay = 100, "
                "autovacuum_vacuum_cost_limit = 1)"
            )
            su.execute(
                "INSERT INTO big SELECT g, repeat('x', 200) FROM generate_series(1, 50000) g"
            )
        with psycopg.connect(cluster.dsn, autocommit=True) as su:  # watches from another db
            [[worker]] = wait_until(
                lambda: su.execute(
                    "SELECT p.pid FROM pg_stat_progress_analyze AS p "
                    "JOIN pg_stat_activity AS a USING (pid) "
                    "WHERE p.datname = 'app' AND a.backend_xmin IS NOT NULL"
                ).fetchall(),
                30,
                "autovacuum to analyze the table",
            )
            with Database(load_settings(dsn=make_conninfo(app, user="watcher"))) as plain:
                seen = plain.fetch_one("horizon_visibility")
                found = horizon(plain)
                [row] = su.execute(
                    "SELECT usesysid, backend_type FROM pg_stat_activity WHERE pid = %s",
                    (worker,),
                ).fetchall()
                assert row == (None, "autovacuum worker")  # still analyzing, no role
                assert worker not in [int(h.name.split()[1]) for h in found.holders]
                assert not seen["sees_all"] and seen["hidden_sessions"] == 0
                assert found.hidden_note is None
                su.execute(sql.SQL("GRANT pg_monitor TO watcher"))
                assert worker not in [int(h.name.split()[1]) for h in horizon(plain).holders]
            su.execute("SELECT pg_cancel_backend(%s)", (worker,))


def test_a_hidden_holder_counts_from_when_first_seen_and_its_rule_fires(
    db, dsn, pg_cluster, fake_clock, write_rules
):
    """A superuser's session idle in a transaction, to a login without pg_monitor: its start
    is hidden, so its first reading has no age; from the second on it has held the horizon
    at least since the first, which the figure counts and the rule (1 s) fires on, naming it.
    A one-shot reading still has no age, and says the figure counts hidden holders so."""
    plain_dsn = plain_login(pg_cluster, dsn)
    with (
        Database(load_settings(dsn=plain_dsn)) as plain,
        idle_in_transaction(dsn, "superuser-report") as pid,
    ):
        opened = time.monotonic()
        [first] = [h for h in horizon(plain).holders if h.name == f"pid {pid}"]
        assert first.hidden and first.holds_horizon and first.held_seconds is None
        assert first.held_from == UNKNOWN_HIDDEN
        time.sleep(1.5)
        found = horizon(plain)
        between = time.monotonic() - opened  # both readings inside: at most this far apart
        [second] = [h for h in found.holders if h.name == f"pid {pid}"]
        assert second.hidden and second.held_from == FROM_FIRST_SEEN
        assert 1.4 <= second.held_seconds <= between, second  # a lower bound of its age
        assert "held since first seen" in second.summary
        assert found.age_seconds == second.held_seconds
        assert "first saw it (a lower bound)" in found.hidden_note

        # the scheduler measuring through the read login, writing through its own
        evaluator = Evaluator(db, write_rules(RULES), clock=fake_clock, figures_db=plain)
        instance = evaluator.run_once().instance("xmin-horizon-held")
        assert instance.value >= 1.4 and instance.state == "firing", instance
        assert FIGURES["xmin_horizon_age"].measure(plain, None, None, 1) >= 1.4

        with Database(load_settings(dsn=plain_dsn)) as one_shot:
            health = health_status(one_shot)
            [shown] = [h for h in health["xmin_horizon_holders"] if h["name"] == f"pid {pid}"]
            assert shown["held_seconds"] is None and shown["held_from"] == UNKNOWN_HIDDEN
            assert any("first saw it" in note for note in health["hidden"])
