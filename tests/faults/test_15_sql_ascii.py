"""Issue 10 item 15: `init-db` on a SQL_ASCII database (a legacy cluster's default) works —
every SQL text the package sends is ASCII — and the monitor then reads non-ASCII rows
(real Postgres, the real command)."""

import json
import os
import subprocess
import sys
from pathlib import Path

import psycopg
import pytest

REPO = Path(__file__).resolve().parents[2]
SHIPPED_SQL = sorted((REPO / "outbox_monitor").rglob("*.sql"))


def test_the_package_ships_sql_files():
    names = {path.relative_to(REPO / "outbox_monitor").as_posix() for path in SHIPPED_SQL}
    assert {"store/sql/queries.sql", "store/sql/migrations/001_core.sql"} <= names


@pytest.mark.parametrize("path", SHIPPED_SQL, ids=lambda p: p.name)
def test_every_shipped_sql_file_is_ascii(path):
    text = path.read_text("utf-8")
    found = [
        f"line {number}: {line.strip()!r}"
        for number, line in enumerate(text.splitlines(), 1)
        if not line.isascii()
    ]
    assert found == [], f"{path.name} must be ASCII (a SQL_ASCII database refuses it)"


@pytest.fixture
def ascii_dsn(pg_cluster, request):
    name = f"ascii_{request.node.name[-20:].strip('[]').replace('-', '_')}"
    with psycopg.connect(pg_cluster.dsn, autocommit=True) as conn:
        conn.execute(
            f"CREATE DATABASE {name} ENCODING 'SQL_ASCII' LC_COLLATE 'C' LC_CTYPE 'C' "
            "TEMPLATE template0"
        )
    return pg_cluster.dsn_for(name)


def cli(*args: str, dsn: str) -> subprocess.CompletedProcess:
    environment = {**os.environ, "PYTHONPATH": str(REPO), "OUTBOX_MONITOR_DSN": dsn}
    environment.pop("OUTBOX_MONITOR_TABLE", None)
    return subprocess.run(
        [sys.executable, "-m", "outbox_monitor", *args],
        env=environment,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_init_db_and_status_on_a_sql_ascii_database(ascii_dsn):
    done = cli("init-db", "--create-table", "--json", dsn=ascii_dsn)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["applied_migrations"][:2] == ["001_core", "002_alerts"]

    with psycopg.connect(ascii_dsn, autocommit=True) as conn:
        conn.execute("SET client_encoding = 'UTF8'")  # what a UTF-8 application writes
        assert conn.execute("SHOW server_encoding").fetchone() == ("SQL_ASCII",)
        for event_type in ("commande.payée", "commande.payée", "order.paid"):
            conn.execute(
                "INSERT INTO integration_outbox (event_type, aggregate_type, aggregate_id, "
                "event_key, payload, status, last_error, processed_at) VALUES (%s, 'commande', "
                "'1', gen_random_uuid()::text, '{\"note\": \"déjà\"}', 'failed', 'échec', now())",
                (event_type,),
            )

    status = cli("status", "--json", "--event-type", "commande.payée", dsn=ascii_dsn)
    assert status.returncode == 0, status.stderr
    figures = json.loads(status.stdout)
    assert figures["failed_by_event_type"] == {"commande.payée": 2}
