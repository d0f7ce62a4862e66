"""Benchmark of the Overview's database time per refresh, and of ``status --json`` (issue 32
item 3): the real page, run by Streamlit's ``AppTest`` with every cache expired, against a
seeded table at several backlogs; this checkout and, with ``--before DIR``, another one in the
same interleaved rounds.

Starts its own throwaway PostgreSQL cluster with ``pg_stat_statements`` preloaded, seeds
``--rows`` rows as ``figures.py`` does (30 days), runs init-db (the recommended indexes), then
for each backlog of ``--backlogs`` sets that many pending and processing rows among the newest
(``scale.set_backlog``: VACUUM ANALYZE after) and, for ``--repeat`` rounds (one warm-up
dropped), in each round and for each checkout:

1. records one sample as the scheduler's sampler does (``sampler.record_sample`` of this
   checkout: the headline and per-type samples, the workers, the retry error groups' counts),
   so that the page finds a scheduler's fresh samples, unless ``--no-scheduler``;
2. runs the Overview once in a child process of that checkout (``PYTHONPATH=DIR``, the
   checkout's ``dashboard.py`` switched to ``pages/overview.py``; ``st.cache_data`` cleared
   first: every loader reads, as at a refresh once their TTL is over), and sums what
   ``pg_stat_statements`` recorded: execution ms, 8 kB buffers (hit + read) and statements;
3. runs ``status --json``'s reads (``schema.check_outbox_table`` and ``metrics.status``) the
   same way.

The page run includes what only a full run reads (the index check, the sidebar's filter
check; catalog reads of a few buffers) besides the live fragment. The report lists medians
with min–max, the statements that cost most in the last round, the load average and the
command. Usage (from the repository root, with the package installed)::

    .venv/bin/python benchmarks/overview.py [--rows 1000000] [--backlogs 10000,100000]
        [--repeat 7] [--before /tmp/main-before] [--after DIR] [--no-scheduler]
"""

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).parent))

WINDOW = 3600.0
TOP_STATEMENTS = 6


# ------------------------------------------------------------------------- child


def child(args: argparse.Namespace) -> None:
    """Serve measurements on stdin/stdout: each line ``page`` or ``status`` answers one JSON
    line of ``{"exec_ms", "pages", "statements", "wall_ms", "top": [...]}``."""
    import psycopg
    import streamlit as st
    import streamlit.logger
    from psycopg.rows import dict_row
    from streamlit.testing.v1 import AppTest

    streamlit.logger.set_log_level("error")
    from outbox_monitor.config.settings import load_settings
    from outbox_monitor.figures import metrics
    from outbox_monitor.store import schema
    from outbox_monitor.store.db import Database

    admin = psycopg.connect(args.dsn, autocommit=True, row_factory=dict_row)
    queries = _benchmark_queries()
    db = Database(load_settings(dsn=args.dsn))
    dashboard = Path(args.checkout) / "dashboard.py"
    at = None
    for line in sys.stdin:
        what = line.strip()
        st.cache_data.clear()
        admin.execute(queries["reset"])
        start = time.perf_counter()
        if what == "page":
            if at is None:
                at = AppTest.from_file(str(dashboard), default_timeout=600)
                at.switch_page("pages/overview.py")
            at.run()
            if at.exception:
                raise RuntimeError(f"the Overview failed: {at.exception}")
        else:
            schema.check_outbox_table(db)
            metrics.status(db, window=WINDOW)
        wall = (time.perf_counter() - start) * 1000
        total = admin.execute(queries["sum"]).fetchone()
        top = admin.execute(queries["top"], {"limit": TOP_STATEMENTS}).fetchall()
        print(json.dumps({**total, "wall_ms": wall, "top": top}, default=str), flush=True)


def _benchmark_queries() -> dict[str, str]:
    """The blocks of ``benchmarks/queries.sql`` this script reads ``pg_stat_statements`` with
    (plain SQL: no table name in them)."""
    from figures import BENCHMARK_QUERIES

    return {
        "reset": BENCHMARK_QUERIES["benchmark_scale_statements_reset"].text,
        "sum": BENCHMARK_QUERIES["benchmark_scale_statements_read"].text,
        "top": BENCHMARK_QUERIES["benchmark_overview_top_statements"].text,
    }


class Child:
    """One checkout's measuring process (``child``), kept for the whole run."""

    def __init__(self, checkout: Path, dsn: str, home: str) -> None:
        env = {k: v for k, v in os.environ.items() if not k.startswith("OUTBOX_MONITOR_")}
        env |= {
            "PYTHONPATH": str(checkout),
            "OUTBOX_MONITOR_DSN": dsn,
            "OUTBOX_MONITOR_ACTOR": "benchmark",
            "HOME": home,
        }
        command = [sys.executable, __file__, "--child", "--dsn", dsn, "--checkout", str(checkout)]
        self.process = subprocess.Popen(
            command, cwd=checkout, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
        )

    def measure(self, what: str) -> dict[str, Any]:
        self.process.stdin.write(what + "\n")
        self.process.stdin.flush()
        line = self.process.stdout.readline()
        if not line:
            raise RuntimeError(f"the child of {self.process.args} ended")
        return json.loads(line)

    def close(self) -> None:
        self.process.stdin.close()
        self.process.wait(timeout=60)


def record_sample_of(checkout: Path, dsn: str) -> None:
    """One sampler pass with that checkout's code (``sampler.record_sample``)."""
    code = (
        "from outbox_monitor.config.settings import load_settings\n"
        "from outbox_monitor.service.sampler import record_sample\n"
        "from outbox_monitor.store.db import Database\n"
        f"db = Database(load_settings(dsn={dsn!r}))\n"
        "record_sample(db)\n"
        "db.close()\n"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("OUTBOX_MONITOR_")}
    env["PYTHONPATH"] = str(checkout)
    subprocess.run([sys.executable, "-c", code], cwd=checkout, env=env, check=True)


# ------------------------------------------------------------------------- parent


def median_cell(samples: list[dict[str, Any]], key: str) -> str:
    values = [s[key] for s in samples]
    return (
        f"{statistics.median(values):,.2f} ({min(values):,.2f}–{max(values):,.2f})"
        if key in ("exec_ms", "wall_ms")
        else f"{statistics.median(values):,.0f}"
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--backlogs", default="10000,100000")
    parser.add_argument("--repeat", type=int, default=7)
    parser.add_argument("--before", type=Path, help="another checkout, measured alike")
    parser.add_argument(
        "--after", type=Path, default=ROOT, help="the checkout measured as after (default: this)"
    )
    parser.add_argument("--no-scheduler", action="store_true", help="no sample before a run")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--dsn", help=argparse.SUPPRESS)
    parser.add_argument("--checkout", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args)
        return 0

    from figures import RecordingDatabase, log, seed
    from scale import DAYS, Size, preload_stat_statements, set_backlog

    from outbox_monitor.config.settings import load_settings
    from outbox_monitor.demo.pgcluster import TemporaryCluster
    from outbox_monitor.figures import error_grouping
    from outbox_monitor.store import schema

    checkouts = {"after": args.after.resolve()}
    if args.before:
        checkouts["before"] = args.before.resolve()
    backlogs = [int(b) for b in args.backlogs.split(",")]
    load_before = os.getloadavg()
    began = time.time()
    results: dict[tuple[int, str, str], list[dict[str, Any]]] = {}
    tops: dict[tuple[int, str, str], list] = {}
    with TemporaryCluster() as cluster, tempfile.TemporaryDirectory() as home:
        if not preload_stat_statements(cluster, "1GB", True):
            raise SystemExit("pg_stat_statements is needed (the server has no such library)")
        dsn = cluster.dsn
        db = RecordingDatabase(load_settings(dsn=dsn, statement_timeout=600.0))
        schema.init_db(db, create_table=True, create_indexes=False)
        with db.connection() as conn:
            conn.execute(db.compose("benchmark_scale_create_extension"))
        log(f"seed {args.rows:,} rows")
        seed(db, args.rows, DAYS)
        size = Size(args.rows, backlog_growing=max(backlogs), backlog_constant=min(backlogs))
        log("init-db (recommended indexes)")
        schema.init_db(db)
        error_grouping.refresh_error_groups(db)
        children = {name: Child(path, dsn, home) for name, path in checkouts.items()}
        try:
            for backlog in backlogs:
                log(f"backlog {backlog:,}")
                set_backlog(db, size, backlog)
                for round_ in range(args.repeat + 1):
                    for name, path in checkouts.items():
                        for what in ("page", "status"):
                            if not args.no_scheduler:
                                record_sample_of(path, dsn)
                            sample = children[name].measure(what)
                            if round_:
                                results.setdefault((backlog, name, what), []).append(sample)
                                tops[(backlog, name, what)] = sample["top"]
                    log(f"round {round_} done, load {os.getloadavg()[0]:.2f}")
        finally:
            for c in children.values():
                c.close()
        db.close()
    load_after = os.getloadavg()
    print_report(args, results, tops, load_before, load_after, time.time() - began)
    return 0


def print_report(args, results, tops, load_before, load_after, seconds) -> None:
    print(f"- command: `.venv/bin/python benchmarks/overview.py {' '.join(sys.argv[1:])}`")
    print(
        f"- machine: {platform.machine()}, {os.cpu_count()} cores, Linux {platform.release()}, "
        f"Python {platform.python_version()}; load average (1, 5, 15 min) before "
        f"{' '.join(f'{x:.2f}' for x in load_before)}, after "
        f"{' '.join(f'{x:.2f}' for x in load_after)}; whole run {seconds:.0f} s"
    )
    print(
        f"- table: {args.rows:,} rows seeded as figures.py does, the recommended indexes; "
        f"{'no sample before a run' if args.no_scheduler else 'a sampler pass before each run'}"
    )
    print(
        "- DB ms = pg_stat_statements' execution ms summed over the run's statements; "
        "buffers = shared hit + read; median (min–max) of the rounds after one warm-up\n"
    )
    print("| backlog | checkout | what | DB ms | buffers | statements | wall ms |")
    print("|---:|---|---|---:|---:|---:|---:|")
    for (backlog, name, what), samples in results.items():
        print(
            f"| {backlog:,} | {name} | {'Overview page' if what == 'page' else 'status --json'} "
            f"| {median_cell(samples, 'exec_ms')} | {median_cell(samples, 'pages')} "
            f"| {median_cell(samples, 'statements')} | {median_cell(samples, 'wall_ms')} |"
        )
    print("\nCostliest statements of the last round (ms, buffers, first 90 characters):\n")
    for (backlog, name, what), top in tops.items():
        print(f"- {backlog:,}, {name}, {what}:")
        for row in top:
            text = " ".join(row["query"].split())[:90]
            print(f"  - {row['ms']:.2f} ms, {row['pages']:,} buffers: `{text}`")


if __name__ == "__main__":
    sys.exit(main())
