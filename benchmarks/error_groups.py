"""Benchmark of the error groups (SPEC §2) before and after their cache (issue 11 item 3).

Starts its own throwaway PostgreSQL cluster, creates the outbox table with the users' indexes
and the recommended ones (``init_db``), and for each number of dead letters in
``--dead-letters`` seeds ``--rows`` rows exactly as ``figures.py`` does (30 days, a third of
the dead letters' errors carrying a stack trace of ≈ 1,000 characters), then times:

- **before**: the ``error_groups`` block of the release before the cache (every failed row
  normalised at every refresh), median of ``--before-repeat`` calls;
- **cold**: the first ``error_grouping.error_groups`` call, which fills the cache (several bounded
  calls of ``outbox_monitor.refresh_error_groups``: their number is shown);
- **warm**: ``error_grouping.error_groups`` with nothing changed, median of ``--repeat`` calls after
  one warm-up; the same with the event-type filter ``notification.%``;
- **+N new**: ``--new`` dead letters added (half with a stack trace), then one refresh; median
  of ``--repeat`` rounds;
- **recount**: 1 % of the dead letters replayed, then the refresh that recounts (its calls
  shown); median of 3 rounds.

Each time is wall time through the package's pool (round trips included, ≈ 0.1–0.3 ms per
statement). At the end of each level the cached groups are compared with the exact query.

Usage (from the repository root, with the package installed)::

    .venv/bin/python benchmarks/error_groups.py [--rows 1000000]
        [--dead-letters 10000,100000,1000000] [--repeat 7] [--before-repeat 3]

``--rows 20000 --dead-letters 200,2000 --repeat 2 --before-repeat 1`` is a smoke run.
"""

import argparse
import statistics
import sys
import time
from collections.abc import Callable
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))

from figures import (  # figures.py: the script next to this one, on sys.path above
    STACK_TRACE,
    RecordingDatabase,
    log,
    ms,
    seed,
)

from outbox_monitor.config.settings import load_settings
from outbox_monitor.demo.pgcluster import TemporaryCluster
from outbox_monitor.figures import error_grouping
from outbox_monitor.store.filters import Where
from outbox_monitor.store.schema import init_db

STATEMENT_TIMEOUT_SECONDS = 600.0
DAYS = 30.0
FILTER = "notification.%"
RECOUNT_ROUNDS = 3


@dataclass
class Level:
    """What one number of dead letters measured (milliseconds)."""

    dead_letters: int
    counts: dict[str, int] = field(default_factory=dict)
    groups: int = 0
    before: float = 0.0
    cold: float = 0.0
    cold_calls: int = 0
    cold_slowest: float = 0.0
    warm: float = 0.0
    warm_filtered: float = 0.0
    before_filtered: float = 0.0
    new: float = 0.0
    recount: float = 0.0
    recount_calls: int = 0
    recount_slowest: float = 0.0
    exact: bool = False


def median_of(run: Callable[[], object], repeat: int, *, warm_up: bool) -> float:
    """Median wall ms of ``repeat`` calls (after one untimed call when ``warm_up``)."""
    if warm_up:
        run()
    samples = []
    for _ in range(repeat):
        start = time.perf_counter()
        run()
        samples.append((time.perf_counter() - start) * 1000)
    return statistics.median(samples)


def refresh(db: RecordingDatabase) -> tuple[int, float]:
    """Run ``error_groups_refresh`` until done, as ``error_grouping.refresh_error_groups`` does;
    returns the number of calls and the slowest call's ms (each call is one statement under
    the statement timeout)."""
    params = {"table_regclass": db.table_name, "batch": error_grouping.ERROR_GROUPS_BATCH}
    calls, slowest, done = 0, 0.0, False
    while not done:
        start = time.perf_counter()
        done = db.fetch_one("error_groups_refresh", params)["done"]
        slowest = max(slowest, (time.perf_counter() - start) * 1000)
        calls += 1
    return calls, slowest


def before(db: RecordingDatabase, event_type: str | None = None) -> list[dict[str, Any]]:
    """The error groups as the release before the cache computed them."""
    where = Where().event_type(event_type)
    return db.fetch_all(
        "benchmark_error_groups_before", {"limit": 200, **where.params}, and_filters=where.fragment
    )


def same_groups(db: RecordingDatabase) -> bool:
    """Whether the cached groups equal those of the release before the cache."""

    def key(group: dict[str, Any]) -> tuple:
        return tuple(group[k] for k in sorted(group))

    return sorted(map(key, error_grouping.error_groups(db))) == sorted(map(key, before(db)))


def measure(db: RecordingDatabase, args: argparse.Namespace, dead_letters: int) -> Level:
    """Seed ``args.rows`` rows with about ``dead_letters`` of them failed and time it all."""
    level = Level(dead_letters)
    with db.connection() as conn:
        conn.execute(db.compose("benchmark_error_groups_reset"))
    share = min(dead_letters / args.rows, 1.0)
    log(f"{dead_letters:,} dead letters: seeding {args.rows:,} rows (failed share {share:.4f})")
    seed(db, args.rows, DAYS, failed_share=share)
    level.counts = {r["status"]: r["rows"] for r in db.fetch_all("benchmark_status_counts")}

    log("before: every failed row normalised")
    level.before = median_of(lambda: before(db), args.before_repeat, warm_up=False)
    level.before_filtered = median_of(lambda: before(db, FILTER), args.before_repeat, warm_up=False)

    log("after: cold (the first refresh fills the cache)")
    start = time.perf_counter()
    level.cold_calls, level.cold_slowest = refresh(db)
    level.groups = len(error_grouping.error_groups(db))
    level.cold = (time.perf_counter() - start) * 1000

    log("after: warm")
    level.warm = median_of(lambda: error_grouping.error_groups(db), args.repeat, warm_up=True)
    level.warm_filtered = median_of(
        lambda: error_grouping.error_groups(db, event_type=FILTER), args.repeat, warm_up=True
    )

    log(f"after: {args.new} new dead letters per refresh")
    samples = []
    for round_ in range(args.repeat):
        with db.connection() as conn:
            conn.execute(
                db.compose("benchmark_error_groups_new_dead_letters"),
                {"rows": args.new, "tag": f"{dead_letters}-{round_}", "stack_trace": STACK_TRACE},
            )
        start = time.perf_counter()
        error_grouping.error_groups(db)
        samples.append((time.perf_counter() - start) * 1000)
    level.new = statistics.median(samples)

    log("after: recount after a replay of 1 % of the dead letters")
    samples, calls, slowest = [], [], []
    for _ in range(RECOUNT_ROUNDS):
        with db.connection() as conn:
            conn.execute(
                db.compose("benchmark_error_groups_replay"), {"rows": max(dead_letters // 100, 1)}
            )
        start = time.perf_counter()
        made, slowest_ms = refresh(db)
        calls.append(made)
        slowest.append(slowest_ms)
        error_grouping.error_groups(db)
        samples.append((time.perf_counter() - start) * 1000)
    level.recount = statistics.median(samples)
    level.recount_calls = max(calls)
    level.recount_slowest = max(slowest)
    level.exact = same_groups(db)
    return level


def print_report(args: argparse.Namespace, levels: list[Level], server: dict[str, Any]) -> None:
    """The report as Markdown on stdout."""
    print("## Error groups before and after the cache (issue 11 item 3)\n")
    print(f"- command: `.venv/bin/python benchmarks/error_groups.py {' '.join(sys.argv[1:])}`")
    print(
        f"- server: {server['version'].split(' on ')[0]}; shared_buffers "
        f"{server['shared_buffers']}, work_mem {server['work_mem']}, "
        f"max_parallel_workers_per_gather {server['parallel_workers']}; fsync off"
    )
    print(
        f"- table: {args.rows:,} rows over {DAYS:g} days, users' and recommended indexes; "
        "a third of the dead letters' errors carry a stack trace of ≈ 1,000 characters"
    )
    print(
        "- ms = wall time through the package's pool (median); before = the error_groups "
        f"block of the release before the cache (median of {args.before_repeat}); cold = "
        "the first refresh, which fills the cache (calls of refresh_error_groups, the slowest "
        "one's ms: each is one statement under the statement timeout); warm = "
        f"nothing changed (median of {args.repeat}); +{args.new} new = that many dead "
        f"letters added before each refresh; recount = after a replay of 1 % of the dead "
        f"letters (median of {RECOUNT_ROUNDS}); filter = event type `{FILTER}`\n"
    )
    print(
        "| dead letters | groups | before ms | cold ms (calls, slowest) | warm ms | before/warm "
        f"| before filter ms | warm filter ms | +{args.new} new ms "
        "| recount ms (calls, slowest) | equal to before |"
    )
    print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|:-:|")
    for level in levels:
        failed = level.counts.get("failed", 0)
        print(
            f"| {failed:,} | {level.groups} | {ms(level.before)} "
            f"| {ms(level.cold)} ({level.cold_calls}, {ms(level.cold_slowest)}) "
            f"| {ms(level.warm)} "
            f"| {level.before / level.warm:,.0f}× | {ms(level.before_filtered)} "
            f"| {ms(level.warm_filtered)} | {ms(level.new)} "
            f"| {ms(level.recount)} ({level.recount_calls}, {ms(level.recount_slowest)}) "
            f"| {'yes' if level.exact else '**NO**'} |"
        )


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=1_000_000, help="outbox rows to seed")
    parser.add_argument(
        "--dead-letters",
        default="10000,100000,1000000",
        help="comma-separated numbers of dead letters, one seed each (at most --rows)",
    )
    parser.add_argument("--repeat", type=int, default=7, help="timed calls per warm figure")
    parser.add_argument("--before-repeat", type=int, default=3, help="timed calls before")
    parser.add_argument("--new", type=int, default=100, help="dead letters added per refresh")
    args = parser.parse_args(argv)
    args.levels = [int(n) for n in args.dead_letters.split(",")]
    if args.rows < 1000 or args.repeat < 1 or args.before_repeat < 1 or args.new < 1:
        parser.error("need --rows >= 1000, --repeat, --before-repeat and --new >= 1")
    if any(n < 100 or n > args.rows for n in args.levels):
        parser.error("each --dead-letters value must be between 100 and --rows")
    return args


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark and print the report; returns the exit status."""
    args = parse_args(argv)
    log("starting a throwaway PostgreSQL cluster")
    with TemporaryCluster() as cluster, ExitStack() as stack:
        settings = load_settings(dsn=cluster.dsn, statement_timeout=STATEMENT_TIMEOUT_SECONDS)
        db = stack.enter_context(RecordingDatabase(settings))
        init_db(db, create_table=True)
        levels = [measure(db, args, n) for n in args.levels]
        server = db.fetch_one("benchmark_server")
        log("stopping the cluster")
    print_report(args, levels, server)
    return 0 if all(level.exact for level in levels) else 1


if __name__ == "__main__":
    sys.exit(main())
