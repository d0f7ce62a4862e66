"""Benchmark of the users' claim without and with the recommended indexes (issue 11, item 1).

Starts its own throwaway PostgreSQL cluster, creates the outbox table with only the indexes
users already have and seeds ``--rows`` rows of history exactly as ``figures.py`` does (one
``INSERT … SELECT generate_series``, mostly ``done``). The seed's due pending rows are acked, so
that each backlog is exact; then, for each ``--backlogs`` value, due pending rows are added up
to that backlog and two claims of ``--batch`` rows are timed: the SPEC §1 claim as users write
it (``status='pending' and available_at <= now() order by created_at limit N for update skip
locked``, then the UPDATE to ``processing``) and the shared function ``outbox_monitor.claim``.
Each call runs in a transaction that is rolled back, so every repetition sees the same data;
median and min of ``--repeat`` calls after one warm-up call; first with the users' indexes only,
then with the product's recommended indexes (``schema.init_db``, CONCURRENTLY), which are
dropped again before the next backlog. The users' claim is EXPLAINed (ANALYZE, BUFFERS) once
per phase; the function runs the same statement through ``EXECUTE … USING`` (planned afresh
on every call, with the values), so it gets the same plan.

Usage (from the repository root, with the package installed)::

    .venv/bin/python benchmarks/claim.py [--rows 1000000] [--backlogs 1000,3000,50000,200000]
                                         [--batch 50] [--repeat 7]

The report goes to stdout as Markdown; progress goes to stderr. ``--rows 20000 --backlogs
1000 --repeat 2`` is a smoke run of well under 30 s. A ratio with/without above 1.05 is
flagged HARM. The benchmark's SQL is in ``benchmarks/queries.sql`` (named blocks).
"""

import argparse
import json
import platform
import statistics
import sys
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))

from figures import (  # figures.py: the script next to this one, on sys.path above
    STATEMENT_TIMEOUT_SECONDS,
    RecordingDatabase,
    drop_index,
    log,
    scans,
    seed,
)

from outbox_monitor.config import load_settings
from outbox_monitor.pgcluster import TemporaryCluster
from outbox_monitor.schema import init_db

HARM = 1.05
WORKER = "benchmark-claim"
QUERIES = {
    "users' claim (SPEC §1 SQL)": "benchmark_claim_users",
    "outbox_monitor.claim()": "benchmark_claim_function",
}


@dataclass
class Measure:
    """One query in one phase at one backlog."""

    median: float
    minimum: float
    claimed: int
    plan: str = "same statement via EXECUTE"
    removed: int | None = None
    pages: int | None = None


@dataclass
class Backlog:
    size: int
    without: dict[str, Measure] = field(default_factory=dict)
    with_: dict[str, Measure] = field(default_factory=dict)
    build_seconds: float = 0.0


def run_claim(db: RecordingDatabase, name: str, params: dict[str, Any]) -> int:
    """One claim in a rolled-back transaction; returns the rows it claimed."""
    with db.connection() as conn, conn.transaction(force_rollback=True):
        return len(conn.execute(db.compose(name), params).fetchall())


def removed_by_filter(node: dict[str, Any]) -> int:
    total = node.get("Rows Removed by Filter", 0) * node.get("Actual Loops", 1)
    return total + sum(removed_by_filter(child) for child in node.get("Plans", []))


def explain(db: RecordingDatabase, name: str, params: dict[str, Any]) -> tuple[str, int, int]:
    """EXPLAIN (ANALYZE, BUFFERS) the claim once, rolled back: scans, rows removed, pages."""
    with db.connection() as conn, conn.transaction(force_rollback=True):
        row = conn.execute(
            db.compose("benchmark_explain", query=db.compose(name)), params
        ).fetchone()
    document = row["QUERY PLAN"]
    top = (json.loads(document) if isinstance(document, str) else document)[0]["Plan"]
    table = db.settings.table_parts[1]
    found = ", ".join(dict.fromkeys(scans(top, table, f"{table}_"))) or "no table scan"
    pages = top.get("Shared Hit Blocks", 0) + top.get("Shared Read Blocks", 0)
    return found, removed_by_filter(top), pages


def measure(db: RecordingDatabase, args: argparse.Namespace, label: str) -> dict[str, Measure]:
    """Time both claims (warm-up + ``--repeat``), EXPLAIN the users' claim, then VACUUM the
    dead row versions the rolled-back UPDATEs left."""
    params = {"batch": args.batch, "worker": WORKER, "table_regclass": db.table_name}
    results = {}
    for label_query, name in QUERIES.items():
        claimed = run_claim(db, name, params)
        samples = []
        for _ in range(args.repeat):
            start = time.perf_counter()
            run_claim(db, name, params)
            samples.append((time.perf_counter() - start) * 1000)
        result = Measure(statistics.median(samples), min(samples), claimed)
        if name == "benchmark_claim_users":
            result.plan, result.removed, result.pages = explain(db, name, params)
        results[label_query] = result
        with db.connection() as conn:
            conn.execute(db.compose("benchmark_vacuum"))
        log(f"  {label}: {label_query} median {result.median:,.2f} ms ({result.plan})")
    return results


def vacuum_analyze(db: RecordingDatabase) -> None:
    with db.connection() as conn:
        conn.execute(db.compose("benchmark_vacuum_analyze"))


def ms(value: float) -> str:
    return f"{value:,.2f}" if value < 100 else f"{value:,.0f}"


def print_report(
    args: argparse.Namespace, server: dict[str, Any], shape: dict[str, Any], runs: list[Backlog]
) -> None:
    print("## Setup\n")
    command = " ".join(["benchmarks/claim.py", *sys.argv[1:]])
    print(f"- command: `.venv/bin/python {command}`")
    print(
        f"- machine: {platform.machine()}, {platform.system()} {platform.release()}, "
        f"Python {platform.python_version()}, load average before the run {shape['load']}"
    )
    print(
        f"- server: {server['version'].split(' on ')[0]}; shared_buffers "
        f"{server['shared_buffers']}, work_mem {server['work_mem']}, "
        f"max_parallel_workers_per_gather {server['parallel_workers']}; fsync off"
    )
    print(
        f"- history: {shape['total']:,} rows seeded as figures.py does ("
        + ", ".join(f"{k} {n:,}" for k, n in shape["counts"].items())
        + f"), its {shape['acked']:,} due pending rows acked; seed {shape['seed_seconds']:.1f} s"
    )
    print(
        f"- claim of {args.batch} rows; median / min of {args.repeat} calls after one warm-up, "
        "each in a rolled-back transaction through the package's pool (includes the round "
        "trip); VACUUM after each series; the recommended indexes built by init-db "
        "CONCURRENTLY and dropped again per backlog\n"
    )
    print(
        "| backlog | query | without median (min) ms | with median (min) ms | ratio with/without "
        "| plan without | plan with | removed by filter without / with | pages without / with |"
    )
    print("|---:|---|---:|---:|---:|---|---|---:|---:|")
    for run in runs:
        for label in QUERIES:
            before, after = run.without[label], run.with_[label]
            ratio = after.median / before.median
            flag = " **HARM**" if ratio > HARM else ""
            removed = (
                f"{before.removed:,} / {after.removed:,}" if before.removed is not None else "–"
            )
            pages = f"{before.pages:,} / {after.pages:,}" if before.pages is not None else "–"
            print(
                f"| {run.size:,} | {label} | {ms(before.median)} ({ms(before.minimum)}) "
                f"| {ms(after.median)} ({ms(after.minimum)}) | {ratio:.2f}{flag} "
                f"| {before.plan} | {after.plan} | {removed} | {pages} |"
            )
    builds = ", ".join(f"{run.size:,}: {run.build_seconds:.1f} s" for run in runs)
    print(f"\nBuild of the recommended indexes per backlog: {builds}.\n")


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=1_000_000, help="history rows to seed")
    parser.add_argument(
        "--backlogs", default="1000,3000,50000,200000", help="due pending rows, comma-separated"
    )
    parser.add_argument("--batch", type=int, default=50, help="rows per claim")
    parser.add_argument("--repeat", type=int, default=7, help="timed calls per claim")
    args = parser.parse_args(argv)
    try:
        args.backlogs = sorted({int(value.replace("_", "")) for value in args.backlogs.split(",")})
    except ValueError:
        parser.error("--backlogs takes comma-separated integers")
    if args.rows < 1000 or args.repeat < 1 or args.batch < 1 or min(args.backlogs) < 1:
        parser.error("need --rows >= 1000, --repeat >= 1, --batch >= 1, backlogs >= 1")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    load = " ".join(Path("/proc/loadavg").read_text().split()[:3])
    log("starting a throwaway PostgreSQL cluster")
    runs: list[Backlog] = []
    with TemporaryCluster() as cluster:
        settings = load_settings(dsn=cluster.dsn, statement_timeout=STATEMENT_TIMEOUT_SECONDS)
        with RecordingDatabase(settings) as db:
            init_db(db, create_indexes=False)
            log(f"seeding {args.rows:,} rows of history (users' indexes only)")
            shape = seed(db, args.rows, 30)
            with db.connection() as conn:
                acked = conn.execute(db.compose("benchmark_claim_ack_due")).rowcount
            shape["load"] = load
            shape["acked"] = acked
            shape["counts"] = {
                row["status"]: row["rows"] for row in db.fetch_all("benchmark_status_counts")
            }
            shape["total"] = sum(shape["counts"].values())
            server = db.fetch_one("benchmark_server")
            anchor = datetime.now(UTC)
            added = 0
            for size in args.backlogs:
                run = Backlog(size)
                log(f"backlog {size:,}: adding {size - added:,} due pending rows")
                with db.connection() as conn:
                    conn.execute(
                        db.compose("benchmark_claim_backlog"),
                        {"first": added + 1, "last": size, "anchor": anchor},
                    )
                added = size
                vacuum_analyze(db)
                run.without = measure(db, args, f"{size:,} without")
                start = time.perf_counter()
                created = init_db(db, create_indexes=True).created_indexes
                run.build_seconds = time.perf_counter() - start
                log(f"  init-db created {', '.join(created)} in {run.build_seconds:.1f} s")
                run.with_ = measure(db, args, f"{size:,} with")
                for name in created:
                    drop_index(db, name)
                runs.append(run)
        log("stopping the cluster")
    print_report(args, server, shape, runs)
    return 0


if __name__ == "__main__":
    sys.exit(main())
