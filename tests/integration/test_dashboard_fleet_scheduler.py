"""``outbox-monitor dashboard --with-scheduler`` with a fleet file of several outboxes (issue 16):
one real process runs the fleet scheduler of ``outbox-monitor scheduler`` in the background
beside the dashboard. Two outboxes in the test database (orders, billing in its own table),
a stuck lock in billing only: /metrics labels both, with the hand-computed depths; billing's
stuck-lock fires once, orders' never; the process holds both leases; SIGTERM exits 0 and
releases them. A rule naming an outbox the file lacks stops the start with exit 2 (an outbox
unreachable at start: ``test_fleet_scheduler``, for both services)."""

import signal
import subprocess
import time

import psycopg
import pytest

from outbox_monitor.demo.pgcluster import free_port
from tests.alerting import REPO, stuck_lock_rules, wait_for
from tests.integration.test_exporter import by, get, scrape
from tests.integration.test_fleet_scheduler import FLEET as THREE
from tests.integration.test_fleet_scheduler import add_pending, leases
from tests.oidc_support import dashboard_command, dashboard_environment

FLEET = THREE.split("  - name: far")[0]
"""orders (integration_outbox) and billing (billing_outbox), both at ``ORDERS_DSN``."""


def firings(dsn: str, outbox: str) -> tuple[int, int]:
    """``(transitions to firing, firing notifications)`` of rule stuck-lock for ``outbox``."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        return conn.execute(
            "SELECT (SELECT count(*) FROM outbox_monitor.alert_transitions "
            "        WHERE rule = 'stuck-lock' AND to_state = 'firing' AND outbox = %(o)s), "
            "       (SELECT count(*) FROM outbox_monitor.notifications "
            "        WHERE rule = 'stuck-lock' AND kind = 'firing' AND outbox = %(o)s)",
            {"o": outbox},
        ).fetchone()


def fleet_environment(tmp_path, dsn: str, rules: str, **settings: str) -> dict[str, str]:
    """The dashboard's environment: ``FLEET`` as its fleet file (``ORDERS_DSN``: ``dsn``),
    ``rules`` as its alerts.yml, ``settings`` as ``OUTBOX_MONITOR_<NAME>`` variables."""
    (tmp_path / "outboxes.yml").write_text(FLEET)
    (tmp_path / "alerts.yml").write_text(rules)
    env = dashboard_environment(
        tmp_path,
        {
            "outboxes": str(tmp_path / "outboxes.yml"),
            "rules": str(tmp_path / "alerts.yml"),
            **settings,
        },
    )
    env["ORDERS_DSN"] = dsn
    return env


def test_the_dashboard_runs_the_fleet_scheduler_in_the_background(dsn, tmp_path) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE billing_outbox (LIKE integration_outbox INCLUDING ALL)")
        conn.execute(  # billing's one stuck lock: processing, locked two hours ago
            "INSERT INTO billing_outbox (event_type, aggregate_type, aggregate_id, event_key, "
            "payload, status, locked_at, locked_by) VALUES ('invoice.sent', 'a', 's', "
            "'stuck', '{}', 'processing', now() - interval '2 hours', 'w')"
        )
    add_pending(dsn, "integration_outbox", "order.paid", 3)
    add_pending(dsn, "billing_outbox", "invoice.sent", 2)
    port, metrics_port = free_port(), free_port()
    env = fleet_environment(
        tmp_path,
        dsn,
        stuck_lock_rules("1s"),
        sample_interval="1",
        metrics_cache="0",
        metrics_port=str(metrics_port),
    )
    log = tmp_path / "dashboard.log"
    command = dashboard_command("dashboard", "--with-scheduler", "--port", str(port))
    started = time.monotonic()
    with log.open("wb") as output:
        process = subprocess.Popen(
            command, cwd=REPO, env=env, stdout=output, stderr=subprocess.STDOUT
        )
    dashboard_url = f"http://127.0.0.1:{port}"
    metrics_url = f"http://127.0.0.1:{metrics_port}"

    def answers(url: str) -> bool:
        assert process.poll() is None, log.read_text()[-3000:]
        try:
            return get(url)[0] == 200
        except OSError:
            return False

    try:
        assert wait_for(lambda: answers(metrics_url + "/healthz"), timeout=60), log.read_text()
        scheduler_up = time.monotonic() - started
        assert wait_for(lambda: answers(dashboard_url + "/_stcore/health"), 90), log.read_text()
        dashboard_up = time.monotonic() - started
        print(f"start: /healthz {scheduler_up:.2f} s, the dashboard {dashboard_up:.2f} s")
        assert get(dashboard_url + "/_stcore/health") == (200, "ok")

        assert wait_for(lambda: firings(dsn, "billing") == (1, 1), timeout=20), firings(
            dsn, "billing"
        )
        held = leases({"orders": dsn, "billing": dsn})
        assert all(h and h.endswith(f":{process.pid}") for h in held.values()), held
        found = scrape(metrics_url)
        assert by(found, "outbox_monitor_up", "outbox") == {"orders": 1, "billing": 1}
        assert by(found, "outbox_queue_depth", "event_type", outbox="orders") == {
            "order.paid": 3,
            "other": 0,
        }
        assert by(found, "outbox_queue_depth", "event_type", outbox="billing") == {
            "invoice.sent": 2,
            "other": 0,
        }
        assert by(found, "outbox_stuck_locks", "event_type", outbox="billing") == {
            "invoice.sent": 1,
            "other": 0,
        }
        assert by(found, "outbox_monitor_leader", "outbox") == {"orders": 1, "billing": 1}
        time.sleep(3)  # three more evaluations: still firing, nothing new; orders never
        assert firings(dsn, "billing") == (1, 1)
        assert firings(dsn, "orders") == (0, 0)
    finally:
        process.send_signal(signal.SIGTERM)
        code = process.wait(timeout=30)
    text = log.read_text()
    assert code == 0, text[-3000:]
    assert "scheduler started for 2 outbox(es)" in text and "(orders, billing)" in text
    assert leases({"orders": dsn, "billing": dsn}) == {"orders": None, "billing": None}
    for stopped in (dashboard_url + "/_stcore/health", metrics_url + "/healthz"):
        with pytest.raises(OSError):
            get(stopped)


def test_a_rule_naming_an_outbox_the_file_lacks_stops_the_start(dsn, tmp_path) -> None:
    rules = stuck_lock_rules("1s") + "    outboxes: [shipping]\n"
    env = fleet_environment(tmp_path, dsn, rules, metrics_port="0")
    command = dashboard_command("dashboard", "--with-scheduler", "--port", str(free_port()))
    result = subprocess.run(command, cwd=REPO, env=env, capture_output=True, text=True, timeout=60)
    assert result.returncode == 2, result.stderr
    assert 'unknown outbox "shipping"' in result.stderr, result.stderr
    assert "stuck-lock" in result.stderr and "outboxes" in result.stderr
