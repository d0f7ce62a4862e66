"""The fleet's rows (issue 16 item 2): each outbox's figures against hand-computed values,
three outboxes in two databases; one on a closed port is only its own row, at once; the
pools stay small."""

import time

import psycopg
import pytest

from outbox_monitor.config.fleet import load_fleet
from outbox_monitor.config.settings import load_settings
from outbox_monitor.figures.fleet_figures import POOL_MAX_SIZE, FleetConnections, measure_fleet
from tests.fleet_rows import EXPECTED, seed_fleet, write_fleet


@pytest.fixture
def connections():
    found = FleetConnections()
    yield found
    found.close()


def assert_expected(found, seeded: float) -> None:
    """Each row's figures are ``EXPECTED``'s; the oldest pending age, read some time after the
    seed, is its hours plus at most the seconds since (a loaded machine took over 1 s)."""
    since = time.monotonic() - seeded
    for row in found:
        status, depth, age, p95, failed, firing = EXPECTED[row.name]
        assert (row.status, row.queue_depth, row.latency_p95) == (status, depth, p95), row
        assert (row.failed_in_window, row.firing_alerts) == (failed, firing), row
        assert age <= row.oldest_pending_age <= age + since + 1, (row.name, since)


def test_each_outbox_measured_in_its_own_table_and_database(
    dsn, make_dsn, rows, tmp_path, monkeypatch, connections
):
    billing = make_dsn()
    seeded = time.monotonic()
    seed_fleet(dsn, billing, rows)
    fleet = load_fleet(load_settings(), write_fleet(tmp_path, monkeypatch, dsn, billing))

    found = measure_fleet(fleet, connections, window=3600)

    assert [row.name for row in found] == ["orders", "shipping", "billing"]
    assert_expected(found, seeded)
    assert found[0].labels == {"team": "payments"} and all(row.reachable for row in found)


def test_an_unreachable_database_is_only_its_own_row_and_said_at_once(
    dsn, make_dsn, rows, tmp_path, monkeypatch, connections
):
    billing = make_dsn()
    seeded = time.monotonic()
    seed_fleet(dsn, billing, rows)
    path = write_fleet(tmp_path, monkeypatch, dsn, billing, down=True)
    fleet = load_fleet(load_settings(), path)

    started = time.monotonic()
    found = measure_fleet(fleet, connections, window=3600)
    elapsed = time.monotonic() - started

    # a refused connection is said at once, not after a pool's wait (6 s) nor the deadline
    assert elapsed < 3.0
    lost = found[-1]
    assert (lost.name, lost.status, lost.reachable) == ("lost", "unreachable", False)
    assert "127.0.0.1" in lost.problem and "refused" in lost.problem.lower()
    assert lost.queue_depth is None
    assert [row.name for row in found[:-1]] == list(EXPECTED)
    assert_expected(found[:-1], seeded)
    started = time.monotonic()
    again = measure_fleet(fleet, connections, window=3600)  # still said at once
    assert again[-1].status == "unreachable" and time.monotonic() - started < 3.0


def test_a_missing_table_is_an_error_of_its_row(dsn, make_dsn, tmp_path, monkeypatch, connections):
    billing = make_dsn()
    path = write_fleet(tmp_path, monkeypatch, dsn, billing)  # shipping.outbox never created
    found = measure_fleet(load_fleet(load_settings(), path), connections, window=3600)

    shipping = found[1]
    assert (shipping.status, shipping.reachable) == ("error", True)
    assert "shipping.outbox" in shipping.problem
    assert [row.status for row in found] == ["ok", "error", "ok"]


def test_pools_hold_a_few_connections_per_database(dsn, make_dsn, tmp_path, monkeypatch):
    billing = make_dsn()
    path = write_fleet(tmp_path, monkeypatch, dsn, billing)
    fleet = load_fleet(load_settings(), path)
    connections = FleetConnections()
    try:
        for _ in range(3):
            measure_fleet(fleet, connections, window=3600)
        # this fleet's two databases only: the cluster is the session's, shared by other tests
        databases = [dsn.rsplit("/", 1)[1], billing.rsplit("/", 1)[1]]
        with psycopg.connect(dsn) as conn:
            held = conn.execute(
                "SELECT datname, count(*) FROM pg_stat_activity"
                " WHERE application_name = 'outbox-monitor' AND datname = ANY(%s)"
                " GROUP BY datname",
                (databases,),
            ).fetchall()
    finally:
        connections.close()
    assert held and all(count <= POOL_MAX_SIZE for _, count in held)
    assert len(held) == 2  # one pool per database: orders and shipping share theirs
