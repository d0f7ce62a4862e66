"""Benchmark of the Overview's table by event type (issue 15 item 1): the kept types' latency
P95 and throughput measured per type (before: three statements per kept type, each reading
the window's finished rows of that type) against one statement for every kept type
(``metrics.finished_by_event_type``, after), and the whole ``by_event_type.measure``.

Starts its own throwaway PostgreSQL cluster, seeds ``--rows`` rows as ``figures.py`` does
(30 days, ≈ 1 % dead letters, a backlog in the newest 6 h), splits each of its 6 event types
into ``--split`` types (6 × split types, each with a backlog and dead letters), creates the
recommended indexes (``schema.init_db``) and times each variant (median of ``--repeat``
calls after one warm-up) over a 1 h and a 24 h window, with ``--top`` kept types.

Usage (from the repository root)::

    .venv/bin/python benchmarks/by_event_type.py [--rows 1000000] [--top 20] [--repeat 7]

The report goes to stdout as Markdown; progress goes to stderr.
"""

import argparse
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from figures import STATEMENT_TIMEOUT_SECONDS, RecordingDatabase, log, median_ms, seed

from outbox_monitor.config.settings import load_settings
from outbox_monitor.demo.pgcluster import TemporaryCluster
from outbox_monitor.export.labels import OTHER
from outbox_monitor.figures import by_event_type, metrics
from outbox_monitor.store.filters import ExactEventType
from outbox_monitor.store.schema import init_db


def per_type(db: RecordingDatabase, kept: list[dict], window: float) -> None:
    """Before: each kept type's P95 and throughput through its own ``metrics`` calls."""
    for row in kept:
        exact = ExactEventType(row["event_type"])
        metrics.latency_percentiles(db, window=window, event_type=exact)
        metrics.throughput(
            db, window=window, event_type=exact, open_created=row["created_open_in_window"]
        )


def time_window(db: RecordingDatabase, window: float, top: int, repeat: int) -> None:
    """One table row per variant over ``window`` seconds: statements run, median ms, and the
    ratio to the per-type variant (before)."""
    rows = by_event_type.measure(db, top=top, window=window, rates=False)
    kept = [row for row in rows if row["event_type"] != OTHER]
    names = [row["event_type"] for row in kept]
    variants = {
        f"per type, 3 statements × {len(kept)} (before)": lambda: per_type(db, kept, window),
        "finished_by_event_type, 1 statement (after)": lambda: metrics.finished_by_event_type(
            db, event_types=names, window=window
        ),
        "by_event_type.measure, whole (after)": lambda: by_event_type.measure(
            db, top=top, window=window
        ),
    }
    before = None
    for name, run in variants.items():
        with db.recording() as calls:
            run()
        took = median_ms(run, repeat)
        before = took if before is None else before
        label = "1h" if window == 3600 else "24h"
        print(f"| {label} | {name} | {len(calls)} | {took:,.1f} | {took / before:.2f} |")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--split", type=int, default=8, help="types per seeded event type")
    parser.add_argument("--top", type=int, default=20, help="kept event types")
    parser.add_argument("--repeat", type=int, default=7)
    args = parser.parse_args(argv)
    load = os.getloadavg()
    with TemporaryCluster() as cluster:
        settings = load_settings(dsn=cluster.dsn, statement_timeout=STATEMENT_TIMEOUT_SECONDS)
        with RecordingDatabase(settings) as db:
            init_db(db, create_table=True, create_indexes=False)
            log(f"seeding {args.rows:,} rows")
            seed(db, args.rows, 30)
            with db.direct_connection(statement_timeout=None) as conn:
                conn.execute(db.compose("benchmark_spread_event_types"), {"split": args.split})
            with db.connection() as conn:
                conn.execute(db.compose("benchmark_vacuum_analyze"))
            init_db(db)
            print(f"## by_event_type: {args.rows:,} rows, {6 * args.split} event types\n")
            print(
                f"top {args.top} kept; median of {args.repeat} calls after a warm-up; load "
                f"average before {load[0]:.2f}\n"
            )
            print("| window | variant | statements | ms median | ratio to before |")
            print("|---|---|---:|---:|---:|")
            for window in (3600.0, 86400.0):
                time_window(db, window, args.top, args.repeat)
    print(f"\nload average after: {os.getloadavg()[0]:.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
