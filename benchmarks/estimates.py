"""Benchmark of the dashboard's counts over done and failed rows, before and after issue 11
item 4 (exact where it must be, estimated where it may be: SPEC §2).

For each level of ``--levels`` (``rows:dead_letters``) it starts a throwaway PostgreSQL
cluster with ``pg_stat_statements``, seeds the table as ``figures.py`` does (30 days, the
backlog of the newest 6 hours, the dead letters' share of the older rows), builds the
recommended indexes (``init_db``), then times every figure the dashboard computes over done
or failed rows:

- **before**: as the release before item 4 computed it: ``created_in_window`` and
  ``throughput_series`` with done and failed rows in one part (``benchmark_before_*``
  blocks), the "Failed (24 h)" tile as the sum of ``failed_by_event_type``, retry pressure
  and the previews of a replay or a prune counted exactly;
- **after**: as the dashboard computes it now: those two figures with done and failed apart,
  the tile by ``metrics.failed_in_window``, ``metrics.status(count_cap=…)`` and the previews
  with ``count_cap`` (``estimates.DASHBOARD_COUNT_CAP``), which count up to the cap and
  estimate above it.

Each figure: the median over ``--repeat`` calls (after one warm-up) of the server's execution
time (``pg_stat_statements``, every statement of the call, EXPLAIN included) and of the wall
time through the package's pool; with the exact value and what the dashboard shows after
(an estimate's error against the exact value). "Overview refresh" is the sum of the Overview's
database figures (``status``, the 24 h tile, throughput and latency series); ``status --json``
(exact) is timed after.

Usage (from the repository root, with the package installed)::

    .venv/bin/python benchmarks/estimates.py [--levels 1000000:10000,10000000:1000000]
        [--repeat 7] [--cap 10000]

``--levels 20000:200 --repeat 2`` is a smoke run of a few seconds.
"""

import argparse
import json
import os
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))

from figures import (  # figures.py: the script next to this one, on sys.path above
    BENCHMARK_QUERIES,
    RecordingDatabase,
    log,
    ms,
    seed,
)
from psycopg import sql

from outbox_monitor.actions.preview import Preview
from outbox_monitor.actions.prune import preview_prune
from outbox_monitor.actions.replay import ReplaySelection, preview_replay
from outbox_monitor.config.settings import Settings, load_settings
from outbox_monitor.demo.pgcluster import TemporaryCluster
from outbox_monitor.figures import estimates, metrics
from outbox_monitor.store.schema import init_db

STATEMENT_TIMEOUT_SECONDS = 600.0
DAYS = 30.0
HOUR = 3600.0
DAY = 86400.0


class BeforeDatabase(RecordingDatabase):
    """A database whose named queries are those of the release before item 4 where a
    ``benchmark_before_<name>`` block exists."""

    def compose(self, name: str, **fragments: sql.Composable) -> sql.Composed:
        before = f"benchmark_before_{name}"
        return super().compose(before if before in BENCHMARK_QUERIES else name, **fragments)


@dataclass
class Timing:
    """Medians of one call: server ms (pg_stat_statements) and wall ms; and its value."""

    db_ms: float
    wall_ms: float
    value: Any


@dataclass
class Figure:
    """One dashboard figure before and after, with how to read a number from its value."""

    name: str
    before: Callable[[RecordingDatabase], Any]
    after: Callable[[RecordingDatabase], Any]
    number: Callable[[Any], tuple[float, bool] | None] = lambda value: None
    overview: bool = False


@dataclass
class Level:
    """What one seeded table measured."""

    rows: int
    dead_letters: int
    counts: dict[str, int] = field(default_factory=dict)
    results: dict[str, tuple[Timing, Timing]] = field(default_factory=dict)
    status_json: Timing | None = None
    load: str = ""
    breakdown: list[tuple[str, float, int]] = field(default_factory=list)


def preview_number(preview: Preview) -> tuple[float, bool]:
    return preview.matched, preview.exact


def histogram_number(value: Any) -> tuple[float, bool]:
    """Rows of the retry-pressure histogram, and whether they are exact."""
    histogram, exact = value if isinstance(value, tuple) else (value, True)
    return sum(histogram.values()), exact


def build_figures(cap: int) -> list[Figure]:
    """The dashboard's figures over done and failed rows, before and after."""
    since = datetime.now(UTC) - timedelta(days=1)

    def replay(selection: ReplaySelection) -> tuple[Callable, Callable]:
        return (
            lambda db: preview_replay(db, selection),
            lambda db: preview_replay(db, selection, count_cap=cap),
        )

    def prune(done: float | None, failed: float | None, event_type: str | None = None):
        ages = {"done_older_than": done, "failed_older_than": failed, "event_type": event_type}
        return (
            lambda db: preview_prune(db, **ages),
            lambda db: preview_prune(db, **ages, count_cap=cap),
        )

    return [
        Figure(
            "status (Overview tiles, retry pressure)",
            lambda db: metrics.status(db, window=HOUR),
            lambda db: metrics.status(db, window=HOUR, count_cap=cap),
            overview=True,
        ),
        Figure(
            "  of which throughput 1h (created_in_window)",
            lambda db: metrics.throughput(db, window=HOUR),
            lambda db: metrics.throughput(db, window=HOUR),
        ),
        Figure(
            "  of which retry pressure",
            lambda db: metrics.attempts_histogram(db),
            lambda db: metrics.attempts_histogram_capped(db, cap=cap),
            histogram_number,
        ),
        Figure(
            "Failed (24 h) tile",
            lambda db: sum(metrics.failed_by_event_type(db, window=DAY).values()),
            lambda db: metrics.failed_in_window(db, window=DAY),
            lambda value: (value, True),
            overview=True,
        ),
        Figure(
            "throughput_series 1h/1m",
            lambda db: metrics.throughput_series(db, window=HOUR, bucket=60),
            lambda db: metrics.throughput_series(db, window=HOUR, bucket=60),
            overview=True,
        ),
        Figure(
            "latency_series 1h/1m",
            lambda db: metrics.latency_series(db, window=HOUR, bucket=60),
            lambda db: metrics.latency_series(db, window=HOUR, bucket=60),
            overview=True,
        ),
        Figure(
            "replay preview [event type %]",
            *replay(ReplaySelection(event_type="%")),
            preview_number,
        ),
        Figure(
            "replay preview [order.%]",
            *replay(ReplaySelection(event_type="order.%")),
            preview_number,
        ),
        Figure(
            "replay preview [failed since 24 h]",
            *replay(ReplaySelection(since=since)),
            preview_number,
        ),
        Figure("prune preview [done 30d, failed 90d]", *prune(30 * DAY, 90 * DAY), preview_number),
        Figure("prune preview [done 7d, failed 30d]", *prune(7 * DAY, 30 * DAY), preview_number),
        Figure(
            "prune preview [done 7d, order.%]", *prune(7 * DAY, None, "order.%"), preview_number
        ),
    ]


def breakdown(db: RecordingDatabase, run: Callable[[RecordingDatabase], Any]) -> list:
    """``(statement, ms, pages)`` of each statement of one call, from ``EXPLAIN (ANALYZE,
    BUFFERS)`` after the call (a planner estimate, itself an EXPLAIN, is left out)."""
    with db.recording() as calls:
        run(db)
    found = []
    for name, params, fragments in calls:
        if name == "count_estimate":
            continue
        row = db.fetch_one("benchmark_explain", params, query=db.compose(name, **fragments))
        document = row["QUERY PLAN"]
        top = (json.loads(document) if isinstance(document, str) else document)[0]
        plan = top["Plan"]
        pages = plan.get("Shared Hit Blocks", 0) + plan.get("Shared Read Blocks", 0)
        found.append((name, top["Execution Time"], pages))
    return found


def status_json(db: RecordingDatabase) -> dict[str, Any]:
    """What ``status --json`` reads: every figure, exact."""
    return metrics.status(db, window=HOUR)


def timed(db: RecordingDatabase, run: Callable[[RecordingDatabase], Any], repeat: int) -> Timing:
    """Medians of ``repeat`` calls after one warm-up: server ms and wall ms."""
    value = run(db)
    server, wall = [], []
    for _ in range(repeat):
        db.fetch_one("benchmark_statements_reset")
        start = time.perf_counter()
        run(db)
        wall.append((time.perf_counter() - start) * 1000)
        server.append(db.fetch_one("benchmark_statements_ms")["ms"])
    return Timing(statistics.median(server), statistics.median(wall), value)


def start_cluster() -> tuple[TemporaryCluster, Settings]:
    """A throwaway cluster with pg_stat_statements loaded."""
    cluster = TemporaryCluster().start()
    settings = load_settings(dsn=cluster.dsn, statement_timeout=STATEMENT_TIMEOUT_SECONDS)
    with RecordingDatabase(settings) as db, db.direct_connection(statement_timeout=None) as conn:
        conn.execute(db.compose("benchmark_preload_pg_stat_statements"))
    cluster.pause()
    cluster.resume()
    with RecordingDatabase(settings) as db, db.connection() as conn:
        conn.execute(db.compose("benchmark_pg_stat_statements"))
    return cluster, settings


def measure(args: argparse.Namespace, rows: int, dead_letters: int) -> Level:
    """Seed one level in its own cluster and time every figure before and after."""
    level = Level(rows, dead_letters)
    cluster, settings = start_cluster()
    try:
        with RecordingDatabase(settings) as db:
            init_db(db, create_table=True, create_indexes=False)
            share = min(dead_letters / rows, 1.0)
            log(f"{rows:,} rows, failed share {share:.4f}: seeding")
            seed(db, rows, DAYS, failed_share=share)
            log("init-db: the recommended indexes")
            init_db(db)
            level.counts = {r["status"]: r["rows"] for r in db.fetch_all("benchmark_status_counts")}
        level.load = " ".join(f"{n:.2f}" for n in os.getloadavg())
        figures = build_figures(args.cap)
        with BeforeDatabase(settings) as before, RecordingDatabase(settings) as after:
            for figure in figures:
                log(f"{figure.name.strip()}")
                level.results[figure.name] = (
                    timed(before, figure.before, args.repeat),
                    timed(after, figure.after, args.repeat),
                )
            level.status_json = timed(after, status_json, args.repeat)
            level.breakdown = breakdown(after, figures[0].after)
    finally:
        cluster.stop()
    return level


def shown(figure: Figure, before: Timing, after: Timing) -> tuple[str, str, str]:
    """The exact value, what the dashboard shows after, and the estimate's error."""
    exact, shown_after = figure.number(before.value), figure.number(after.value)
    if exact is None or shown_after is None:
        return "", "", ""
    value, _ = exact
    estimate, is_exact = shown_after
    if is_exact:
        return f"{value:,.0f}", f"{estimate:,.0f}", "exact" if estimate == value else "**DIFFERS**"
    error = (estimate - value) / value * 100 if value else 0.0
    return f"{value:,.0f}", f"≈ {estimate:,.0f}", f"{error:+.1f} %"


def print_report(args: argparse.Namespace, levels: list[Level], figures: list[Figure]) -> None:
    """The report as Markdown on stdout."""
    print("## Estimates (issue 11 item 4): the dashboard's counts over done and failed rows\n")
    print(f"- command: `.venv/bin/python benchmarks/estimates.py {' '.join(sys.argv[1:])}`")
    print(
        f"- cap: {args.cap:,} (the dashboard counts up to it, estimates above); medians of "
        f"{args.repeat} calls after one warm-up; DB ms = the server's execution time of every "
        "statement of the call (pg_stat_statements), wall ms = through the package's pool"
    )
    for level in levels:
        counts = ", ".join(f"{k} {n:,}" for k, n in level.counts.items())
        print(f"\n### {level.rows:,} rows, {level.counts.get('failed', 0):,} dead letters\n")
        print(f"- table: {counts}; load average before timing: {level.load}\n")
        print(
            "| figure | before DB ms | after DB ms | before/after | before wall ms "
            "| after wall ms | exact value | dashboard after | error |"
        )
        print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
        for figure in figures:
            before, after = level.results[figure.name]
            exact, after_value, error = shown(figure, before, after)
            ratio = before.db_ms / after.db_ms if after.db_ms else 0.0
            print(
                f"| {figure.name} | {ms(before.db_ms)} | {ms(after.db_ms)} | {ratio:,.1f}× "
                f"| {ms(before.wall_ms)} | {ms(after.wall_ms)} | {exact} | {after_value} "
                f"| {error} |"
            )
        parts = [level.results[f.name] for f in figures if f.overview]
        before_sum = sum(b.db_ms for b, _ in parts)
        after_sum = sum(a.db_ms for _, a in parts)
        print(
            f"| **Overview refresh** (status, tile, series) | {ms(before_sum)} "
            f"| {ms(after_sum)} | {before_sum / after_sum:,.1f}× "
            f"| {ms(sum(b.wall_ms for b, _ in parts))} | {ms(sum(a.wall_ms for _, a in parts))} "
            "| | | |"
        )
        status_json = level.status_json
        print(
            f"| status --json (exact, after) | | {ms(status_json.db_ms)} | "
            f"| | {ms(status_json.wall_ms)} | | | |"
        )
        print(
            "\nAfter: the statements of the Overview's `status` call, one EXPLAIN (ANALYZE, "
            "BUFFERS) each (ms, 8 kB pages touched):\n"
        )
        print("| statement | ms | pages |")
        print("|---|---:|---:|")
        for name, statement_ms, pages in level.breakdown:
            print(f"| {name} | {ms(statement_ms)} | {pages:,} |")


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--levels",
        default="1000000:10000,10000000:1000000",
        help="comma-separated rows:dead_letters, one seeded table each",
    )
    parser.add_argument("--repeat", type=int, default=7, help="timed calls per figure")
    parser.add_argument(
        "--cap", type=int, default=estimates.DASHBOARD_COUNT_CAP, help="the dashboard's cap"
    )
    args = parser.parse_args(argv)
    try:
        args.pairs = [tuple(int(n) for n in item.split(":")) for item in args.levels.split(",")]
    except ValueError:
        parser.error("--levels: rows:dead_letters pairs, e.g. 1000000:10000")
    if args.repeat < 1 or args.cap < 1:
        parser.error("need --repeat >= 1 and --cap >= 1")
    if any(len(p) != 2 or p[0] < 1000 or not 0 < p[1] <= p[0] for p in args.pairs):
        parser.error("each level needs rows >= 1000 and 0 < dead_letters <= rows")
    return args


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark and print the report; returns the exit status (1 when an exact
    figure differs between before and after)."""
    args = parse_args(argv)
    levels = [measure(args, rows, dead_letters) for rows, dead_letters in args.pairs]
    figures = build_figures(args.cap)
    print_report(args, levels, figures)
    differs = any(
        shown(figure, *level.results[figure.name])[2] == "**DIFFERS**"
        for level in levels
        for figure in figures
    )
    return 1 if differs else 0


if __name__ == "__main__":
    sys.exit(main())
