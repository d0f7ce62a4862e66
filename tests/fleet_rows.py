"""A fleet of three outboxes for the fleet page's tests (issue 16 item 2): ``orders`` and
``shipping`` — two tables of one database — and ``billing`` in another, with rows whose
figures are computed by hand in ``EXPECTED``; ``closed_port_dsn`` for one that never answers."""

import socket
from pathlib import Path

import psycopg

from tests.conftest import Rows

FLEET = """
version: 1
outboxes:
  - {name: orders, dsn_env: ORDERS_DSN, labels: {team: payments}}
  - {name: shipping, dsn_env: ORDERS_DSN, table: shipping.outbox}  # same database
  - {name: billing, dsn_env: BILLING_DSN}
"""
DOWN = FLEET + "  - {name: lost, dsn_env: LOST_DSN}\n"

EXPECTED = {
    # status, queue depth, oldest pending age (s: hours, plus the time until read), P95 latency
    # over 1 h (s), failed in 1 h, firing alerts (orders and shipping share a database, each
    # its own alert state: migration 017's outbox column)
    "orders": ("ok", 2, 7200, 29.0, 1, 0),
    "shipping": ("firing", 3, 10800, None, 0, 1),
    "billing": ("firing", 1, 18000, 5.0, 2, 1),
}


def closed_port_dsn() -> str:
    """A DSN on 127.0.0.1 whose port nobody listens on (bound, then released)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    return f"postgresql://postgres@127.0.0.1:{port}/nowhere"


def seed_fleet(orders_dsn: str, billing_dsn: str, rows: Rows) -> None:
    """The rows of ``EXPECTED`` (``rows`` writes orders' table, ``t0`` its instant)."""
    rows.add(created_ago=7200)  # due
    rows.add(created_ago=60)  # due
    rows.add(created_ago=30, available_ago=-600)  # waiting in backoff: pending, not due
    rows.add(status="done", created_ago=100, processed_ago=90)  # 10 s
    rows.add(status="done", created_ago=200, processed_ago=170)  # 30 s: P95 = 10 + .95·20
    rows.add_failed(processed_ago=60)
    rows.add_failed(processed_ago=7200)  # outside the hour
    with psycopg.connect(orders_dsn, autocommit=True) as conn:
        conn.execute("CREATE SCHEMA shipping")
        conn.execute("CREATE TABLE shipping.outbox (LIKE public.integration_outbox INCLUDING ALL)")
        conn.execute(
            "INSERT INTO shipping.outbox (event_type, aggregate_type, aggregate_id, event_key,"
            " payload, created_at, available_at) SELECT 'parcel.sent', 'parcel', g::text,"
            " 'p' || g, '{}', %(t0)s - g * interval '1 h', %(t0)s - g * interval '1 h'"
            " FROM generate_series(1, 3) AS g",  # 1, 2 and 3 h old
            {"t0": rows.t0},
        )
        conn.execute(  # shipping's alert, in the database it shares with orders
            "INSERT INTO outbox_monitor.alert_instances (outbox, rule, instance, state) VALUES"
            " ('shipping', 'stuck-lock', 'outbox=shipping', 'firing'),"
            " ('orders', 'stuck-lock', 'outbox=orders', 'inactive')"
        )
    with psycopg.connect(billing_dsn, autocommit=True) as conn:
        t0 = conn.execute("SELECT now()").fetchone()[0]
        conn.execute(
            "INSERT INTO integration_outbox (event_type, aggregate_type, aggregate_id, event_key,"
            " payload, status, created_at, available_at, processed_at) VALUES"
            " ('invoice.sent', 'invoice', '1', 'i1', '{}', 'pending', %(t)s - interval '5 h',"
            "  %(t)s - interval '5 h', NULL),"
            " ('invoice.sent', 'invoice', '2', 'i2', '{}', 'done', %(t)s - interval '65 s',"
            "  %(t)s - interval '65 s', %(t)s - interval '60 s'),"
            " ('invoice.sent', 'invoice', '3', 'i3', '{}', 'failed', %(t)s - interval '9 min',"
            "  %(t)s - interval '9 min', %(t)s - interval '5 min'),"
            " ('invoice.sent', 'invoice', '4', 'i4', '{}', 'failed', %(t)s - interval '9 min',"
            "  %(t)s - interval '9 min', %(t)s - interval '4 min')",
            {"t": t0},
        )
        conn.execute(
            "INSERT INTO outbox_monitor.alert_instances (outbox, rule, instance, state) VALUES"
            " ('billing', 'backlog', 'outbox=billing', 'firing'),"
            " ('billing', 'stuck-lock', 'outbox=billing', 'inactive'),"
            " ('', 'backlog', '', 'firing')"  # a fleet of one's, not billing's"
        )


def write_fleet(tmp_path: Path, env, orders_dsn: str, billing_dsn: str, *, down: bool = False):
    """The fleet file (``DOWN``: with ``lost`` on a closed port) and its DSN variables in
    ``env`` (a monkeypatch); returns the file's path."""
    env.setenv("ORDERS_DSN", orders_dsn)
    env.setenv("BILLING_DSN", billing_dsn)
    env.setenv("LOST_DSN", closed_port_dsn())
    path = tmp_path / "outboxes.yml"
    path.write_text(DOWN if down else FLEET)
    return path
