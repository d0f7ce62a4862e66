"""Benchmark of prune on a partitioned outbox: whole partitions detached and dropped against the
batched delete (issue 14 item 3).

Starts its own throwaway PostgreSQL cluster and builds two template databases whose outbox is
partitioned by range of ``created_at`` (``demo.partitioned``): ``--partitions`` old ranges of 7
days holding ``--rows`` rows past retention (created 96–124 days ago, 99 % done and 1 % failed,
each processed seconds after its creation) and a current range holding ``--live`` rows of the
last two days (10 % pending); one template also has a default partition (empty). ``init-db``
builds the recommended indexes first (partition by partition), the rows are inserted, then
``VACUUM (ANALYZE)`` and a checkpoint.

Each run clones a template (``CREATE DATABASE … TEMPLATE``, a file copy) and prunes it with the
product's own ``preview_prune`` and ``run.apply`` (done older than 30 days, failed older than
90 days, batches of 5,000), then runs a ``VACUUM`` of the outbox (what a delete leaves to do).
Three variants, taking turns in a new order every round:

- **batched delete**: ``prune --no-detach`` (the release before: 5,000 ids per statement);
- **detach (plain)**: the default partition makes Postgres refuse ``DETACH … CONCURRENTLY``, so
  each partition is detached under a short ACCESS EXCLUSIVE lock, then dropped;
- **detach concurrently**: the template without a default partition.

Per run: the prune's wall time (and the preview's), the WAL it wrote (``pg_wal_lsn_diff``; the
cluster runs with ``full_page_writes=off``, so without full-page images), the outbox's bytes on
disk after it, the ``VACUUM`` after it, and a probe of the workers: a thread that publishes one
row, claims one and acks it (``outbox.publish``, ``claim``, ``ack``) every ``--probe-ms``
throughout the prune, its iterations' p50 / p99 / max. Median (min–max) of ``--repeat``
rounds; the ratio to the batched delete is the median of the round-by-round ratios with its
95 % bootstrap interval (``paired.py``). Exits 1 when a run did not delete every row past
retention, or deleted another.

Usage (from the repository root, with the package installed)::

    nice -n 19 .venv/bin/python benchmarks/prune_partitions.py [--rows 1000000] [--repeat 5]

The report goes to stdout as Markdown; progress goes to stderr. ``--rows 20000 --live 2000
--repeat 2`` is a smoke run of well under a minute. The benchmark's own SQL is in
``benchmarks/queries.sql`` (the ``benchmark_prune_*`` blocks and a few shared ones).
"""

import argparse
import itertools
import os
import platform
import statistics
import sys
import threading
import time
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any

import psycopg
from psycopg import sql

sys.path.insert(0, str(Path(__file__).parent))

from figures import STATEMENT_TIMEOUT_SECONDS, RecordingDatabase, log  # figures.py, next to this
from flow_control import commit, spread  # flow_control.py, next to this one
from paired import paired_ratio  # paired.py, next to this one

from outbox_monitor import outbox
from outbox_monitor.access import Identity, Role
from outbox_monitor.actions.prune import preview_prune
from outbox_monitor.actions.run import apply
from outbox_monitor.config.settings import load_settings
from outbox_monitor.demo.partitioned import create_partitioned_outbox
from outbox_monitor.demo.pgcluster import TemporaryCluster
from outbox_monitor.store.schema import init_db

DAY = 86400.0
DONE_OLDER_THAN = 30 * DAY
FAILED_OLDER_THAN = 90 * DAY
OLDEST_DAYS = 124  # the old ranges start here, 7 days each, before the current range
ACTOR = Identity("benchmark", Role.operator, "local")
TABLE = "integration_outbox"


@dataclass(frozen=True)
class Variant:
    """One way to prune: its label, the template it clones, whether it detaches."""

    label: str
    template: str
    detach: bool


VARIANTS = (
    Variant("batched delete (prune --no-detach)", "prune_default", detach=False),
    Variant("detach (plain: a default partition), drop", "prune_default", detach=True),
    Variant("detach concurrently (no default partition), drop", "prune_no_default", detach=True),
)
BASE = VARIANTS[0]


@dataclass
class Sample:
    """One run: seconds, bytes, the probe's iteration times in ms."""

    preview: float
    prune: float
    vacuum: float
    wal: int
    size_before: int
    size_after: int
    changed: int
    detached: int
    probe: list[float] = field(default_factory=list)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=1_000_000, help="rows past retention")
    parser.add_argument("--partitions", type=int, default=4, help="old partitions holding them")
    parser.add_argument("--live", type=int, default=100_000, help="rows of the current range")
    parser.add_argument("--repeat", type=int, default=5, help="rounds (each variant once)")
    parser.add_argument("--probe-ms", type=float, default=20, help="pause between probes")
    args = parser.parse_args(argv)
    if args.rows < 1000 or args.partitions < 1 or args.live < 10 or args.repeat < 1:
        parser.error("need --rows >= 1000, --partitions >= 1, --live >= 10, --repeat >= 1")
    return args


def build_template(
    cluster: TemporaryCluster, name: str, args: argparse.Namespace, *, default: bool
) -> None:
    """A database ``name`` with the partitioned outbox, its recommended indexes and its rows."""
    with psycopg.connect(cluster.dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    settings = load_settings(dsn=cluster.dsn_for(name), statement_timeout=STATEMENT_TIMEOUT_SECONDS)
    with RecordingDatabase(settings) as db, db.connection() as conn:
        midnight = conn.execute("SELECT date_trunc('day', now()) + interval '1 day' AS b")
        b = midnight.fetchone()["b"]
        old = [b - timedelta(days=OLDEST_DAYS - 7 * n) for n in range(args.partitions + 1)]
        bounds = [*old, b + timedelta(days=30)]
        create_partitioned_outbox(conn, "public", TABLE, bounds, default=default)
        init_db(db)
        log(
            f"{name}: seeding {args.rows:,} old rows in {args.partitions} partitions, "
            f"{args.live:,} live"
        )
        conn.execute(
            db.compose("benchmark_prune_seed_old"),
            {"rows": args.rows, "lower": old[0], "upper": old[-1] - timedelta(seconds=1)},
        )
        conn.execute(db.compose("benchmark_prune_seed_live"), {"rows": args.live})
        conn.execute(db.compose("benchmark_vacuum_analyze"))
        conn.execute(db.compose("benchmark_checkpoint"))


def probe(dsn: str, stop: threading.Event, pause: float, times: list[float]) -> None:
    """The workers: publish one row, claim one, ack it, every ``pause`` seconds until ``stop``."""
    keys = itertools.count()
    with psycopg.connect(dsn, autocommit=True) as conn:
        while not stop.is_set():
            start = time.perf_counter()
            outbox.publish(
                conn,
                event_type="probe.sent",
                aggregate_type="probe",
                aggregate_id="1",
                event_key=f"probe:{next(keys)}",
                payload={},
            )
            for row in outbox.claim(conn, "probe", limit=1):
                outbox.ack(conn, row["id"], "probe")
            times.append((time.perf_counter() - start) * 1000)
            stop.wait(pause)


def run_once(cluster: TemporaryCluster, variant: Variant, number: int, probe_ms: float) -> Sample:
    """Clone the variant's template, prune it, VACUUM it; the clone is dropped after."""
    name = f"prune_run_{number}"
    with psycopg.connect(cluster.dsn, autocommit=True) as conn:
        conn.execute(
            sql.SQL("CREATE DATABASE {} TEMPLATE {} STRATEGY FILE_COPY").format(
                sql.Identifier(name), sql.Identifier(variant.template)
            )
        )
    dsn = cluster.dsn_for(name)
    settings = load_settings(dsn=dsn, statement_timeout=STATEMENT_TIMEOUT_SECONDS)
    regclass = {"table_regclass": TABLE}
    try:
        with RecordingDatabase(settings) as db:
            with db.connection() as conn:
                conn.execute(db.compose("benchmark_checkpoint"))
            size_before = db.fetch_one("benchmark_tree_size", regclass)["bytes"]
            start = time.perf_counter()
            preview = preview_prune(
                db,
                done_older_than=DONE_OLDER_THAN,
                failed_older_than=FAILED_OLDER_THAN,
                detach_partitions=variant.detach,
            )
            preview_seconds = time.perf_counter() - start
            lsn = db.fetch_one("benchmark_wal_lsn")["lsn"]
            stop, times = threading.Event(), []
            worker = threading.Thread(target=probe, args=(dsn, stop, probe_ms / 1000, times))
            worker.start()
            try:
                start = time.perf_counter()
                result = apply(db, preview, actor=ACTOR)
                prune_seconds = time.perf_counter() - start
            finally:
                stop.set()
                worker.join()
            wal = db.fetch_one("benchmark_wal_since", {"lsn": lsn})["bytes"]
            start = time.perf_counter()
            with db.connection() as conn:
                conn.execute(db.compose("benchmark_vacuum"))
            vacuum_seconds = time.perf_counter() - start
            size_after = db.fetch_one("benchmark_tree_size", regclass)["bytes"]
    finally:
        with psycopg.connect(cluster.dsn, autocommit=True) as conn:
            conn.execute(sql.SQL("DROP DATABASE {}").format(sql.Identifier(name)))
    return Sample(
        preview_seconds,
        prune_seconds,
        vacuum_seconds,
        wal,
        size_before,
        size_after,
        result.changed,
        len(result.detached),
        times,
    )


def probe_text(times: list[float]) -> str:
    """p50 / p99 / max of the probe's iterations, in ms, and how many there were."""
    ordered = sorted(times)
    if not ordered:
        return "–"
    p99 = ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))]
    return f"{statistics.median(ordered):.1f} / {p99:.1f} / {ordered[-1]:.0f} ({len(ordered)})"


def print_report(
    args: argparse.Namespace, shape: dict[str, Any], samples: dict[Variant, list[Sample]]
) -> None:
    command = " ".join(["benchmarks/prune_partitions.py", *sys.argv[1:]])
    print("## Setup\n")
    print(f"- command: `nice -n {os.nice(0)} .venv/bin/python {command}`")
    print(f"- commit: {shape['commit']}")
    print(
        f"- machine: {platform.machine()}, {os.cpu_count()} CPUs, Python "
        f"{platform.python_version()}; load average before / after: {shape['load_before']} / "
        f"{shape['load_after']}; {shape['minutes']:.1f} min in all"
    )
    print(
        f"- server: {shape['server']}; fsync off, full_page_writes off (WAL below has no "
        "full-page images)"
    )
    print(
        f"- outbox: {args.rows:,} rows past retention in {args.partitions} partitions of 7 days "
        f"(created 96–124 days ago, 1 % failed), {args.live:,} rows of the last two days in the "
        "current partition (10 % pending); the recommended indexes; prune of done older than "
        "30 days and failed older than 90 days"
    )
    print(
        f"- probe: one publish + claim + ack every {args.probe_ms:g} ms during the prune, "
        "on its own connection\n"
    )
    print(f"## Prune of {args.rows:,} rows: median (min–max) of {args.repeat} rounds\n")
    print(
        "| variant | prune s | × batched delete | preview s | WAL MB | VACUUM after s | "
        "on disk before → after VACUUM, MB | probe p50 / p99 / max ms (n) |"
    )
    print("|---|---|---|---|---|---|---|---|")
    base = [s.prune for s in samples[BASE]]
    for variant, runs in samples.items():
        prune = [s.prune for s in runs]
        if variant is BASE:
            ratio = "1"
        else:
            median, low, high = paired_ratio(prune, base)
            ratio = f"{median:.3f} [{low:.3f}, {high:.3f}]"
        mb = 1024 * 1024
        sizes = (
            f"{statistics.median(s.size_before for s in runs) / mb:,.0f} → "
            f"{statistics.median(s.size_after for s in runs) / mb:,.0f}"
        )
        print(
            f"| {variant.label} | {spread(prune, '.2f')} | {ratio} | "
            f"{spread([s.preview for s in runs], '.2f')} | "
            f"{spread([s.wal / mb for s in runs], '.1f')} | "
            f"{spread([s.vacuum for s in runs], '.2f')} | {sizes} | "
            f"{probe_text([t for s in runs for t in s.probe])} |"
        )
    print()
    detached = {
        variant.label: sorted({s.detached for s in runs}) for variant, runs in samples.items()
    }
    print(f"Partitions detached per run: {detached}; rows deleted per run: {args.rows:,} in each.")


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark and print the report; returns the exit status."""
    args = parse_args(argv)
    started = time.perf_counter()
    shape: dict[str, Any] = {
        "commit": commit(),
        "load_before": " ".join(f"{n:.2f}" for n in os.getloadavg()),
    }
    log("starting a throwaway PostgreSQL cluster")
    samples: dict[Variant, list[Sample]] = {variant: [] for variant in VARIANTS}
    with TemporaryCluster() as cluster:
        with psycopg.connect(cluster.dsn, autocommit=True) as conn:
            shape["server"] = conn.execute("SELECT version()").fetchone()[0].split(" on ")[0]
        build_template(cluster, "prune_default", args, default=True)
        build_template(cluster, "prune_no_default", args, default=False)
        numbers = itertools.count()
        for round_number in range(args.repeat):
            shift = round_number % len(VARIANTS)
            for variant in VARIANTS[shift:] + VARIANTS[:shift]:
                sample = run_once(cluster, variant, next(numbers), args.probe_ms)
                log(
                    f"round {round_number + 1}: {variant.label}: {sample.prune:.2f} s, "
                    f"{sample.changed:,} rows, {sample.detached} partitions"
                )
                samples[variant].append(sample)
    shape["load_after"] = " ".join(f"{n:.2f}" for n in os.getloadavg())
    shape["minutes"] = (time.perf_counter() - started) / 60
    print_report(args, shape, samples)
    wrong = [
        (variant.label, sample.changed, sample.detached)
        for variant, runs in samples.items()
        for sample in runs
        if sample.changed != args.rows
        or sample.detached != (args.partitions if variant.detach else 0)
    ]
    if wrong:
        print(f"\n**ERROR**: runs that did not prune exactly the old rows: {wrong}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
