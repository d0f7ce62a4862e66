"""Benchmark of the Overview's retry error groups (issue 30 item 1): the live statement that
normalises every retrying row against the cache of migration 025 and the counts of
migration 026.

Starts its own throwaway PostgreSQL cluster, creates the outbox table with the users' and the
recommended indexes (``init_db``), seeds ``--rows`` rows as ``figures.py`` does (30 days, a
backlog in the newest 6 h), then for each level of ``--storm`` (ascending, cumulative) turns
that many of the newest done rows into retrying rows (1–3 attempts, due from 60 s ago to
4 min ahead, the errors of 4 failing downstreams), VACUUMs, and times, wall ms through the
package's pool, median of ``--repeat`` after one warm-up:

- **live**: the named query ``retry_error_groups`` (every retrying row normalised now: what
  ``status --json`` ran before the cache, and what a login without the cache's grant gets);
- **cold**: the first count after the storm and its read (it fills the cache);
- **count**: ``refresh_retry_error_groups`` (``max_age=0``: what the sampler does once per
  interval and ``status --json`` per call), nothing changed; **read**: the
  ``retry_error_groups_cached`` read alone;
- **Overview**: ``retry_groups(limit=10)`` with the default maximum age and counts younger
  than it (what a page does while a scheduler samples): the function's age check and the
  read of the counts, never the backlog;
- **filtered**: the same for ``order.%``;
- **churn**: 1 % of the retrying rows fail once more before each timed count and read
  (normalised by the count);
- **count**: ``metrics.retrying`` (the sampler's new column).

Usage (from the repository root, with the package installed)::

    .venv/bin/python benchmarks/retrying.py [--rows 1000000] [--storm 1000,10000,50000]
        [--repeat 9]

``--rows 20000 --storm 200,2000 --repeat 3`` is a smoke run.
"""

import argparse
import os
import statistics
import sys
import time
from collections.abc import Callable
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))

from figures import RecordingDatabase, log, ms, seed  # figures.py: the script next to this one

from outbox_monitor.config.settings import load_settings
from outbox_monitor.demo.pgcluster import TemporaryCluster
from outbox_monitor.figures import error_grouping, metrics
from outbox_monitor.store.schema import init_db

STATEMENT_TIMEOUT_SECONDS = 600.0
DAYS = 30.0
FILTER = "order.%"
OVERVIEW_GROUPS = 10


@dataclass
class Level:
    """What one storm measured (milliseconds, medians)."""

    storm: int
    pending: int = 0
    retrying: int = 0
    groups: int = 0
    times: dict[str, Any] = field(default_factory=dict)
    normalised: int = 0
    churn_normalised: list[int] = field(default_factory=list)
    exact: bool = False


def median_of(
    run: Callable[[], object], repeat: int, *, before: Callable[[], object] | None = None
) -> float:
    """Median wall ms of ``repeat`` calls after one untimed call; ``before`` runs untimed
    before each call."""
    run()
    samples = []
    for _ in range(repeat):
        if before:
            before()
        start = time.perf_counter()
        run()
        samples.append((time.perf_counter() - start) * 1000)
    return statistics.median(samples)


def execute(db: RecordingDatabase, name: str, params: dict[str, Any] | None = None) -> None:
    with db.direct_connection(statement_timeout=None) as conn:
        conn.execute(db.compose(name), params or {})


def db_ms(db: RecordingDatabase, name: str, params: dict[str, Any]) -> tuple[float, int]:
    """The database's execution time of the named product query (EXPLAIN ANALYZE: it runs,
    writes included), ms, and the shared buffers it touched (hit or read)."""
    with db.connection() as conn:
        plan = conn.execute(
            db.compose("benchmark_explain", query=db.compose(name)), params
        ).fetchone()["QUERY PLAN"]
    top = plan[0]["Plan"]
    return plan[0]["Execution Time"], top["Shared Hit Blocks"] + top["Shared Read Blocks"]


def median_db(
    db: RecordingDatabase, names: list[tuple[str, dict[str, Any]]], repeat: int
) -> tuple[float, float, int]:
    """Over ``repeat`` rounds (after one) of ``names`` run in turn: the median and the minimum
    of their summed execution times (ms), and the buffers of the last round."""
    rounds = []
    for _ in range(repeat + 1):
        measured = [db_ms(db, name, params) for name, params in names]
        rounds.append((sum(m[0] for m in measured), sum(m[1] for m in measured)))
    times = [r[0] for r in rounds[1:]]
    return statistics.median(times), min(times), rounds[-1][1]


def live(db: RecordingDatabase, limit: int = OVERVIEW_GROUPS) -> list[dict[str, Any]]:
    rows = db.fetch_all("retry_error_groups", {"limit": limit})
    return [{key: row[key] for key in error_grouping.RETRY_GROUP_KEYS} for row in rows]


def measure(db: RecordingDatabase, args: argparse.Namespace, storm: int, added: int) -> Level:
    level = Level(storm)
    log(f"storm of {storm:,} retrying rows (+{added:,})")
    execute(db, "benchmark_retrying_storm", {"rows": added})
    execute(db, "benchmark_vacuum_analyze")
    counted = db.fetch_one("benchmark_retrying_rows")
    level.pending, level.retrying = counted["pending"], counted["retrying"]
    t = level.times
    t["live"] = median_of(lambda: live(db), args.live_repeat)
    start = time.perf_counter()
    level.normalised = error_grouping.refresh_retry_error_groups(db)
    loaded = error_grouping.retry_groups(db, limit=OVERVIEW_GROUPS)
    t["cold"] = (time.perf_counter() - start) * 1000
    level.groups = loaded.groups_total
    # due_now moves with the clock between two statements: the groups and their rows
    level.exact = [(g["group_id"], g["retrying"]) for g in loaded.groups] == [
        (g["group_id"], g["retrying"]) for g in live(db)
    ]
    t["refresh"] = median_of(lambda: error_grouping.refresh_retry_error_groups(db), args.repeat)
    error_grouping.refresh_retry_error_groups(db)  # the Overview's reads find young counts
    read = {"limit": OVERVIEW_GROUPS, "table_regclass": db.table_name}
    t["read"] = median_of(lambda: db.fetch_all("retry_error_groups_cached", read), args.repeat)
    t["overview"] = median_of(
        lambda: error_grouping.retry_groups(db, limit=OVERVIEW_GROUPS), args.repeat
    )
    t["filtered"] = median_of(
        lambda: error_grouping.retry_groups(db, event_type=FILTER, limit=OVERVIEW_GROUPS),
        args.repeat,
    )
    t["count"] = median_of(lambda: metrics.retrying(db), args.repeat)
    counting = {"table_regclass": db.table_name, "batch": 10_000}
    refresh = ("retry_error_groups_refresh", {**counting, "max_age_seconds": 0})
    aged = ("retry_error_groups_refresh", {**counting, "max_age_seconds": 3600})
    t["db_live"] = median_db(db, [("retry_error_groups", {"limit": OVERVIEW_GROUPS})], 3)
    t["db_refresh"] = median_db(db, [refresh], args.repeat)
    t["db_read"] = median_db(db, [("retry_error_groups_cached", read)], args.repeat)
    t["db_overview"] = median_db(db, [aged, ("retry_error_groups_cached", read)], args.repeat)
    t["db_count"] = median_db(db, [("retrying", {})], args.repeat)
    churn = max(level.retrying // 100, 1)

    def fail_again() -> None:
        execute(db, "benchmark_retrying_churn", {"rows": churn})

    def overview_after_churn() -> None:
        level.churn_normalised.append(error_grouping.refresh_retry_error_groups(db))
        error_grouping.retry_groups(db, limit=OVERVIEW_GROUPS)

    t["churn"] = median_of(overview_after_churn, args.repeat, before=fail_again)
    execute(db, "benchmark_vacuum_analyze")
    return level


def print_report(
    args: argparse.Namespace, levels: list[Level], server: dict[str, Any], load: list
) -> None:
    print("## The Overview's retry error groups: live against the cache (issue 30 item 1)\n")
    print(f"- command: `.venv/bin/python benchmarks/retrying.py {' '.join(sys.argv[1:])}`")
    print(
        f"- server: {server['version'].split(' on ')[0]}; shared_buffers "
        f"{server['shared_buffers']}, work_mem {server['work_mem']}; fsync off"
    )
    print(
        f"- table: {args.rows:,} rows over {DAYS:g} days as figures.py seeds them, the users' "
        "and the recommended indexes; each storm turns the newest done rows into retrying rows "
        "(cumulative)"
    )
    print(f"- load average (1, 5, 15 min) at start and end: {load[0]} → {load[1]}")
    print(
        f"- ms = wall time through the package's pool, median of {args.repeat} after a warm-up "
        f"(live: of {args.live_repeat}); Overview = `retry_groups(limit={OVERVIEW_GROUPS})` "
        "with counts younger than its maximum age (age check + read); count = "
        "`refresh_retry_error_groups` (max_age 0), nothing changed; churn = count + read after "
        f"1 % of the retrying rows failed once more; filtered = `{FILTER}`\n"
    )
    print(
        "| retrying rows (pending) | groups | live ms | cold ms (normalised) | count ms "
        "| read ms | **Overview ms** | filtered ms | churn ms (normalised each) "
        "| retrying count ms | equal to live |"
    )
    print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|:-:|")
    for level in levels:
        t = level.times
        churned = statistics.median(level.churn_normalised) if level.churn_normalised else 0
        print(
            f"| {level.retrying:,} ({level.pending:,}) | {level.groups} | {ms(t['live'])} "
            f"| {ms(t['cold'])} ({level.normalised:,}) | {ms(t['refresh'])} | {ms(t['read'])} "
            f"| **{ms(t['overview'])}** | {ms(t['filtered'])} | {ms(t['churn'])} ({churned:,.0f}) "
            f"| {ms(t['count'])} | {'yes' if level.exact else '**NO**'} |"
        )
    print(
        "\nDatabase time (EXPLAIN ANALYZE's execution time, summed per call: median, and the "
        f"minimum, of {args.repeat}; live of 3) and the shared buffers touched: what the "
        "Overview costs the database, without the round trips and the client's share of the "
        "busy CPUs; on a loaded machine the minimum is the better estimate of the work.\n"
    )
    print(
        "| retrying rows | live DB ms | count DB ms | read DB ms | **Overview DB ms** "
        "| retrying count DB ms |"
    )
    print("|---:|---:|---:|---:|---:|---:|")

    def cell(value: tuple[float, float, int]) -> str:
        return f"{ms(value[0])} (min {ms(value[1])}, {value[2]:,} buffers)"

    for level in levels:
        t = level.times
        print(
            f"| {level.retrying:,} | {cell(t['db_live'])} | {cell(t['db_refresh'])} "
            f"| {cell(t['db_read'])} | **{cell(t['db_overview'])}** | {cell(t['db_count'])} |"
        )


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=1_000_000, help="outbox rows to seed")
    parser.add_argument(
        "--storm", default="1000,10000,50000", help="retrying rows of each level, ascending"
    )
    parser.add_argument("--repeat", type=int, default=9, help="timed calls per figure")
    parser.add_argument("--live-repeat", type=int, default=3, help="timed calls of live")
    args = parser.parse_args(argv)
    args.levels = [int(n) for n in args.storm.split(",")]
    if args.rows < 1000 or args.repeat < 1 or args.live_repeat < 1:
        parser.error("need --rows >= 1000, --repeat and --live-repeat >= 1")
    if args.levels != sorted(args.levels) or args.levels[-1] > args.rows // 2:
        parser.error("--storm: ascending, at most half of --rows")
    return args


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark and print the report; returns the exit status."""
    args = parse_args(argv)
    start_load = tuple(round(x, 2) for x in os.getloadavg())
    log("starting a throwaway PostgreSQL cluster")
    with TemporaryCluster() as cluster, ExitStack() as stack:
        settings = load_settings(dsn=cluster.dsn, statement_timeout=STATEMENT_TIMEOUT_SECONDS)
        db = stack.enter_context(RecordingDatabase(settings))
        init_db(db, create_table=True)
        log(f"seeding {args.rows:,} rows")
        seed(db, args.rows, DAYS)
        levels, previous = [], 0
        for storm in args.levels:
            levels.append(measure(db, args, storm, storm - previous))
            previous = storm
        server = db.fetch_one("benchmark_server")
        log("stopping the cluster")
    end_load = tuple(round(x, 2) for x in os.getloadavg())
    print_report(args, levels, server, [start_load, end_load])
    return 0 if all(level.exact for level in levels) else 1


if __name__ == "__main__":
    sys.exit(main())
