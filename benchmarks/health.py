"""Benchmark of the table-health reads (issue 14 item 1) on a seeded outbox.

Starts its own throwaway PostgreSQL cluster, seeds the outbox as ``figures.py`` does (30 days
of traffic, the recommended indexes), adds what a troubled database holds — ``--sessions``
idle connections, one session idle in a transaction, one prepared transaction, one logical
and one physical replication slot, a table's worth of dead tuples — and then, for every named
query of the health package, prints its planner cost, its execution time (``EXPLAIN (ANALYZE,
BUFFERS)``), the pages it touched and whether its plan reads the outbox table; and for every
function (``table_health``, ``index_sizes``, ``vacuums_running``, ``horizon``,
``health_status``) the median wall time of ``--repeat`` calls after one warm-up call.

Usage (from the repository root, with the package installed)::

    .venv/bin/python benchmarks/health.py [--rows 1000000] [--repeat 15] [--sessions 50]

The report goes to stdout as Markdown; progress goes to stderr. ``--rows 20000 --repeat 3``
is a smoke run.
"""

import argparse
import json
import sys
import time
from collections.abc import Callable
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import psycopg

sys.path.insert(0, str(Path(__file__).parent))

from figures import (  # figures.py: the script next to this one, on sys.path above
    RecordingDatabase,
    log,
    median_ms,
    scans,
    seed,
)

from outbox_monitor.config.settings import load_settings
from outbox_monitor.demo.pgcluster import TemporaryCluster
from outbox_monitor.health.horizon import horizon
from outbox_monitor.health.status import health_status
from outbox_monitor.health.table import index_sizes, table_health
from outbox_monitor.health.vacuum import vacuums_running
from outbox_monitor.store.schema import init_db

STATEMENT_TIMEOUT_SECONDS = 600.0
FUNCTIONS: dict[str, Callable[[Any], object]] = {
    "table_health": table_health,
    "index_sizes": index_sizes,
    "vacuums_running": vacuums_running,
    "horizon": horizon,
    "health_status": health_status,
}


def troubles(dsn: str, sessions: int, stack: ExitStack) -> None:
    """What the health reads must list: idle sessions, a session idle in a transaction (with
    a transaction id), a prepared transaction, a logical and a physical slot."""
    with psycopg.connect(dsn, autocommit=True) as su:
        su.execute("SELECT pg_create_logical_replication_slot('bench_logical', 'test_decoding')")
        su.execute("SELECT pg_create_physical_replication_slot('bench_physical', true)")
        su.execute("BEGIN")
        su.execute("SELECT txid_current()")
        su.execute("PREPARE TRANSACTION 'bench-2pc'")
    for _ in range(sessions):
        stack.enter_context(psycopg.connect(dsn, application_name="bench-idle"))
    holder = stack.enter_context(psycopg.connect(dsn, application_name="bench-forgotten"))
    holder.execute("SELECT txid_current()")


def cleanup(dsn: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as su:
        su.execute("ROLLBACK PREPARED 'bench-2pc'")
        su.execute("SELECT pg_drop_replication_slot('bench_logical')")
        su.execute("SELECT pg_drop_replication_slot('bench_physical')")


def explain_queries(db: RecordingDatabase) -> list[dict[str, Any]]:
    """EXPLAIN ANALYZE every named query ``health_status`` runs (recorded from one call)."""
    with db.recording() as calls:
        health_status(db)
    table = db.settings.table_parts[1]
    found = []
    for name, params, fragments in calls:
        row = db.fetch_one("benchmark_explain", params, query=db.compose(name, **fragments))
        document = row["QUERY PLAN"]
        plan = (json.loads(document) if isinstance(document, str) else document)[0]
        top = plan["Plan"]
        outbox_scans = [s for s in scans(top, table, f"{table}_") if "Seq Scan" in s]
        found.append(
            {
                "query": name,
                "cost": top["Total Cost"],
                "ms": plan["Execution Time"],
                "pages": top.get("Shared Hit Blocks", 0) + top.get("Shared Read Blocks", 0),
                "outbox": ", ".join(outbox_scans) or "not read",
            }
        )
    return found


def report(args: argparse.Namespace, shape: dict[str, Any], plans: list, timings: dict) -> None:
    print(f"## Table health reads at {args.rows:,} rows\n")
    print(
        f"Seeded {args.rows:,} rows over 30 days (figures.py's seed) with the recommended "
        f"indexes; {args.sessions} idle sessions, one idle in a transaction, one prepared "
        f"transaction, a logical and a physical slot; {shape['dead_tuples']:,} dead tuples, "
        f"table {shape['table_bytes'] / 2**20:,.0f} MiB, indexes "
        f"{shape['indexes_bytes'] / 2**20:,.0f} MiB.\n"
    )
    print("### Each statement: EXPLAIN (ANALYZE, BUFFERS)\n")
    print("| query | planner cost | execution ms | pages | outbox table |")
    print("|---|---:|---:|---:|---|")
    for plan in plans:
        print(
            f"| `{plan['query']}` | {plan['cost']:,.2f} | {plan['ms']:.3f} | {plan['pages']:,} "
            f"| {plan['outbox']} |"
        )
    print(f"\n### Each function: median wall ms of {args.repeat} (one warm-up)\n")
    print("| function | ms |")
    print("|---|---:|")
    for name, ms in timings.items():
        print(f"| `{name}` | {ms:.2f} |")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=1_000_000, help="outbox rows to seed")
    parser.add_argument("--repeat", type=int, default=15, help="timed calls per function")
    parser.add_argument("--sessions", type=int, default=50, help="idle sessions to open")
    args = parser.parse_args(argv)
    log("starting a throwaway PostgreSQL cluster")
    with TemporaryCluster() as cluster, ExitStack() as stack:
        settings = load_settings(dsn=cluster.dsn, statement_timeout=STATEMENT_TIMEOUT_SECONDS)
        db = stack.enter_context(RecordingDatabase(settings))
        init_db(db)
        log(f"seeding {args.rows:,} rows")
        seed(db, args.rows, 30)
        with db.connection() as conn:  # a day of acks after the seed's VACUUM: dead tuples
            conn.execute(
                "UPDATE integration_outbox SET attempts = attempts "
                "WHERE created_at > now() - interval '1 day'"
            )
            conn.execute("SELECT pg_stat_force_next_flush()")
        troubles(cluster.dsn, args.sessions, stack)
        time.sleep(1)
        shape = health_status(db)
        log("EXPLAIN of every statement")
        plans = explain_queries(db)
        log(f"timing {len(FUNCTIONS)} functions, {args.repeat} runs each")
        timings = {name: median_ms(lambda f=f: f(db), args.repeat) for name, f in FUNCTIONS.items()}
        stack.close()
        cleanup(cluster.dsn)
    report(args, shape, plans, timings)
    return 0


if __name__ == "__main__":
    sys.exit(main())
