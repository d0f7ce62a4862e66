"""Benchmark of the workers' statements without and with the recommended indexes (issue 11).

Starts its own throwaway PostgreSQL cluster, creates the outbox table with only the indexes
users already have and seeds ``--rows`` rows of history exactly as ``figures.py`` does (one
``INSERT … SELECT generate_series``, mostly ``done``); the seed's due pending rows are acked,
so that each backlog is exact. The table is then copied once per variant, so that every
variant starts from the same compact heap: ``without`` keeps the users' indexes only, ``with``
also gets the product's recommended indexes (``schema.init_db``, CONCURRENTLY) and, with
``--retired``, ``retired`` gets the indexes init-db created before issue 11. With
``--marginal PURPOSE`` the two tables are ``before`` (every index ``init-db --flow-control``
creates but that one) and ``with`` (all of them), so that the ratios are that one index's
cost. With ``--advised`` they are ``with`` and ``advised`` (also the index the claim advisor
proposes, ``health.claim_proposals.CLAIM_ORDER``): its effect on the claim, its cost on the
writes.

For each scenario (``--backlogs``: due pending rows; ``--storms``: due rows plus rows waiting
in backoff, created before them, as in a retry storm of one event type) every table is brought
to the same rows and five statements of the workers are timed, the tables interleaved in
alternating order on every round so that they share the machine's state: the SPEC §1 claim as
users write it (``… order by created_at limit N for update skip locked``, then the UPDATE to
``processing``), the shared function ``outbox_monitor.claim``, the users' ack of the rows just
claimed, their retry (a transient failure: back to pending after the backoff), and a publish
of ``--batch`` events. Each runs in a transaction that is rolled back,
so every round sees the same data; only the statement is timed. Median and min of
``--repeat`` rounds after one warm-up; the users' claim is EXPLAINed (ANALYZE, BUFFERS) once
per table: scans, rows removed by filter, pages.

Usage (from the repository root, with the package installed)::

    .venv/bin/python benchmarks/claim.py [--rows 1000000] [--backlogs 1000,3000,50000,200000]
        [--storms 1000:200000,50000:200000] [--batch 50] [--repeat 15]
        [--retired | --marginal PURPOSE | --advised | --crossover]

The report goes to stdout as Markdown; progress goes to stderr. ``--rows 20000 --backlogs
1000 --storms 1000:5000 --repeat 3`` is a smoke run of well under 30 s. Besides the ratio of
the medians, every statement gets the median of its round-by-round ratios (the two tables timed
back to back in one round share the machine's state) with a 95 % bootstrap interval: HARM when
the whole interval is above 1.05, "≤ 1.05" when the whole interval is at or below it, otherwise
the rounds cannot tell (more ``--repeat``). The benchmark's SQL is in
``benchmarks/queries.sql``.

Two copies of one table are not equally fast even with the same indexes: their pages lie
elsewhere in memory and on disk, which alone moves a with/without ratio by 5–10 % at 10 M rows
(RESULTS.md, "The prefix-keyed indexes on a quiet machine"). ``--crossover`` (without and with
only) cancels that: the copies are ``outbox_copy_a`` (A) and ``outbox_copy_b`` (B); phase 1 runs
every scenario with the recommended indexes on A; then both copies go back to the seeded rows,
the indexes move (dropped on A, created on B by the same ``init_db`` call, then VACUUM ANALYZE of
both) and phase 2 runs the same scenarios and rounds with them on B. Round ``i`` of a scenario
in phase 1 pairs with round ``i`` in phase 2: ``sqrt((A_with / B_without) · (B_with /
A_without))`` is the indexes' effect with A's and B's own speeds cancelled
(``paired.crossover_ratio``; its median, 95 % bootstrap interval and verdict as above), and
``sqrt((A_with / B_without) / (B_with / A_without))`` is A's time over B's whatever the indexes
(``paired.copy_effect``: 1.08 means each phase's plain ratio was off by 8 %, up in phase 1,
down in phase 2). The report gives both, and each phase's plain paired ratio. A change of the
machine between the phases that slows both copies alike cancels in each phase's own ratio; the
estimate assumes each copy's speed relative to the other's stays the same in both phases (the
backlog rows are inserted anew in phase 2, in the same order as in phase 1). The indexes move
once, not per scenario (a build takes seconds at 1 M rows, a minute at 10 M).
"""

import argparse
import json
import platform
import statistics
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from psycopg import sql

sys.path.insert(0, str(Path(__file__).parent))

from figures import (  # figures.py: the script next to this one, on sys.path above
    STATEMENT_TIMEOUT_SECONDS,
    RecordingDatabase,
    log,
    scans,
    seed,
)
from paired import copy_effect, crossover_ratio, paired_ratio, verdict  # paired.py, next to this
from scale import preload_stat_statements  # scale.py, next to this one: sets shared_buffers

from outbox_monitor.config.settings import load_settings
from outbox_monitor.demo.pgcluster import TemporaryCluster
from outbox_monitor.health.claim_advice import build_statements
from outbox_monitor.health.claim_proposals import CLAIM_ORDER
from outbox_monitor.store.indexes import (
    FLOW_CONTROL_INDEX,
    RECOMMENDED_INDEXES,
    RETIRED_INDEXES,
    index_name,
)
from outbox_monitor.store.schema import init_db

WORKER = "benchmark-claim"
SOURCE = "integration_outbox"
TABLES = {
    "without": "outbox_plain",
    "before": "outbox_before",
    "with": "outbox_recommended",
    "retired": "outbox_retired",
    "advised": "outbox_advised",
}
# --crossover: the copies are named for themselves, not for a variant; A has the indexes first
COPIES = {"with": "outbox_copy_a", "without": "outbox_copy_b"}
STATEMENTS = (
    "users' claim (SPEC §1 SQL)",
    "outbox_monitor.claim()",
    "users' ack",
    "users' retry",
    "publish",
)
CLAIMED_THEN = {"users' ack": "benchmark_ack_claimed", "users' retry": "benchmark_retry_claimed"}


@dataclass
class Scenario:
    due: int
    scheduled: int

    @property
    def label(self) -> str:
        storm = f" + {self.scheduled:,} in backoff" if self.scheduled else ""
        return f"{self.due:,} due{storm}"


@dataclass
class Result:
    """One scenario: per table, per statement, the samples in ms; per table the claim plan."""

    scenario: Scenario
    base: str
    samples: dict[str, dict[str, list[float]]] = field(default_factory=dict)
    plans: dict[str, tuple[str, int, int]] = field(default_factory=dict)

    def median(self, table: str, statement: str) -> float:
        return statistics.median(self.samples[table][statement])

    def minimum(self, table: str, statement: str) -> float:
        return min(self.samples[table][statement])

    def paired_ratio(self, table: str, statement: str) -> tuple[float, float, float]:
        """The median of the round-by-round ratios table/base (both timed in the same round,
        back to back) and its 95 % bootstrap interval: ``(median, low, high)``."""
        return paired_ratio(self.samples[table][statement], self.samples[self.base][statement])


def timed(db: RecordingDatabase, statement: str, params: dict[str, Any], rounds: int) -> float:
    """Run one statement in a rolled-back transaction; the statement's own milliseconds."""
    with db.connection() as conn, conn.transaction(force_rollback=True):
        if statement in CLAIMED_THEN:
            claimed = conn.execute(db.compose("benchmark_claim_users"), params).fetchall()
            name, params = CLAIMED_THEN[statement], {**params, "ids": [r["id"] for r in claimed]}
        elif statement == "publish":
            name, params = "benchmark_publish", {**params, "tag": rounds}
        elif statement.startswith("users'"):
            name = "benchmark_claim_users"
        else:
            name = "benchmark_claim_function"
        query = db.compose(name)
        start = time.perf_counter()
        cursor = conn.execute(query, params)
        if cursor.description:
            cursor.fetchall()
        return (time.perf_counter() - start) * 1000


def removed_by_filter(node: dict[str, Any]) -> int:
    total = node.get("Rows Removed by Filter", 0) * node.get("Actual Loops", 1)
    return total + sum(removed_by_filter(child) for child in node.get("Plans", []))


def explain(db: RecordingDatabase, params: dict[str, Any]) -> tuple[str, int, int]:
    """EXPLAIN (ANALYZE, BUFFERS) the users' claim once, rolled back: scans, removed, pages."""
    with db.connection() as conn, conn.transaction(force_rollback=True):
        query = db.compose("benchmark_explain", query=db.compose("benchmark_claim_users"))
        document = conn.execute(query, params).fetchone()["QUERY PLAN"]
    top = (json.loads(document) if isinstance(document, str) else document)[0]["Plan"]
    table = db.settings.table_parts[1]
    found = ", ".join(dict.fromkeys(scans(top, table, f"{table}_"))) or "no table scan"
    pages = top.get("Shared Hit Blocks", 0) + top.get("Shared Read Blocks", 0)
    return found, removed_by_filter(top), pages


def measure(dbs: dict[str, RecordingDatabase], args: argparse.Namespace, result: Result) -> None:
    """Warm-up, then ``--repeat`` rounds; each round runs every statement on every table, the
    tables in alternating order. Then the plans, and a VACUUM of what the rollbacks left."""
    order = list(dbs)
    result.samples = {table: {s: [] for s in STATEMENTS} for table in order}
    for rounds in range(args.repeat + 1):
        for statement in STATEMENTS:
            for table in order if rounds % 2 else reversed(order):
                db = dbs[table]
                params = {"batch": args.batch, "worker": WORKER, "table_regclass": db.table_name}
                elapsed = timed(db, statement, params, rounds)
                if rounds:
                    result.samples[table][statement].append(elapsed)
    for table, db in dbs.items():
        params = {"batch": args.batch, "worker": WORKER, "table_regclass": db.table_name}
        result.plans[table] = explain(db, params)
        with db.connection() as conn:
            conn.execute(db.compose("benchmark_vacuum"))
    ratios = ", ".join(
        f"{s}: {result.median('with', s) / result.median(result.base, s):.2f}" for s in STATEMENTS
    )
    log(f"  {result.scenario.label}: with/{result.base} {ratios}")


def bring_to(
    db: RecordingDatabase, scenario: Scenario, current: Scenario, anchor: datetime
) -> None:
    """Add or delete backlog rows so that the table holds exactly the scenario's rows."""
    with db.connection() as conn:
        for prefix, block, have, want in (
            ("claim-backlog", "benchmark_claim_backlog", current.due, scenario.due),
            ("claim-scheduled", "benchmark_claim_scheduled", current.scheduled, scenario.scheduled),
        ):
            if want > have:
                conn.execute(db.compose(block), {"first": have + 1, "last": want, "anchor": anchor})
            elif want < have:
                conn.execute(db.compose("benchmark_claim_trim"), {"prefix": prefix, "last": want})
    with db.connection() as conn:
        conn.execute(db.compose("benchmark_vacuum_analyze"))


def variants(args: argparse.Namespace) -> tuple[str, ...]:
    """The tables timed, the base of the ratios first: ``before`` and ``with`` for
    ``--marginal``, else ``without``, ``with`` and, for ``--retired``, ``retired``."""
    if args.marginal:
        return ("before", "with")
    if args.advised:
        return ("with", "advised")
    return ("without", "with", "retired") if args.retired else ("without", "with")


def table_of(variant: str, args: argparse.Namespace) -> str:
    """The copy's table name: ``COPIES`` with ``--crossover`` (``outbox_copy_a`` has the
    indexes in phase 1), else ``TABLES``."""
    return COPIES[variant] if args.crossover else TABLES[variant]


def drop_index(db: RecordingDatabase, name: str) -> None:
    """``DROP INDEX public.<name>`` (a benchmark table nobody else uses: not CONCURRENTLY)."""
    with db.direct_connection(statement_timeout=None) as conn:
        conn.execute(sql.SQL("DROP INDEX {}").format(sql.Identifier("public", name)))


def prepare_tables(source: RecordingDatabase, cluster_dsn: str, args: argparse.Namespace) -> dict:
    """Copy the seeded table for every variant; returns the connectors (``dbs``), the index
    builds' seconds (``builds``) and the names of the indexes init-db created (``created``),
    each by variant."""
    dbs = {}
    builds = {}
    created_by_variant = {}
    for variant in variants(args):
        settings = load_settings(
            dsn=cluster_dsn,
            table=f"public.{table_of(variant, args)}",
            statement_timeout=STATEMENT_TIMEOUT_SECONDS,
        )
        db = RecordingDatabase(settings).__enter__()
        log(f"copying the history into {table_of(variant, args)}")
        with source.direct_connection(statement_timeout=None) as conn:
            conn.execute(source.compose("benchmark_copy_table", target=db.table))
            conn.execute(db.compose("benchmark_autovacuum_off"))
        # the table's worker functions (outbox_monitor.claim/ack dispatch to them), no index
        init_db(db, create_indexes=False)
        start = time.perf_counter()
        if variant in ("with", "before", "advised"):
            created = init_db(db, flow_control=bool(args.marginal)).created_indexes
            created = leave_out_indexes(db, created, args.leave_out, args.skew_by_comparison)
            created_by_variant[variant] = created
            log(f"  init-db created {', '.join(created)}")
        if variant == "advised":
            name = index_name(TABLES[variant], CLAIM_ORDER.purpose)
            [statement] = build_statements(db, CLAIM_ORDER, name, [])
            with db.direct_connection(statement_timeout=None) as conn:
                conn.execute(statement)
            log(f"  and the claim advisor's {statement}")
        if variant == "before":
            left_out = args.marginal.name(TABLES[variant])
            drop_index(db, left_out)
            log(f"  and {left_out} dropped")
        elif variant == "retired":
            names = {
                purpose: sql.Identifier(f"{TABLES[variant]}_{purpose}_idx")
                for purpose, retired in RETIRED_INDEXES.items()
                if not retired.predicates  # those of before issue 11
            }
            with db.direct_connection(statement_timeout=None) as conn:
                conn.execute(db.compose("benchmark_retired_indexes", **names))
        if variant in ("before", "with", "retired", "advised"):
            builds[variant] = time.perf_counter() - start
        dbs[variant] = db
    return {"dbs": dbs, "builds": builds, "created": created_by_variant}


def leave_out_indexes(
    db: RecordingDatabase, created: list[str], purposes: list[str], skew_compare: bool = False
) -> list[str]:
    """Drop the ``--leave-out`` indexes of ``created`` (init-db's names on ``db``); with
    ``skew_compare`` (``--skew-by-comparison``) rebuild ``clock_skew`` under the same name with
    its predicate cut to one comparison. Returns the names kept."""
    table = db.settings.table_parts[1]
    dropped = [index_name(table, purpose) for purpose in purposes]
    for name in dropped:
        drop_index(db, name)
    if dropped:
        log(f"  and {', '.join(dropped)} left out")
    if skew_compare:
        skew = index_name(table, "clock_skew")
        drop_index(db, skew)
        with db.direct_connection(statement_timeout=None) as conn:
            conn.execute(db.compose("benchmark_presence_skew_compare", index=sql.Identifier(skew)))
        log(f"  and {skew} rebuilt WHERE processed_at < created_at")
    return [name for name in created if name not in dropped]


def move_indexes(
    dbs: dict[str, RecordingDatabase], created: list[str], leave_out: tuple[list[str], bool]
) -> dict[str, Any]:
    """``--crossover`` between its phases: drop the ``created`` indexes on the copy that had
    them (``dbs["with"]``, copy A), create them on the other (``dbs["without"]``, copy B) with
    the same ``init_db`` call as before phase 1, then VACUUM ANALYZE both. Returns the seconds
    of the drop, the build and the vacuum, and the load average then.

    Raises RuntimeError when init-db on B created other indexes than A had (by purpose), so a
    phase 2 never runs on copies that differ in more than the move."""
    copy_a, copy_b = dbs["with"], dbs["without"]
    start = time.perf_counter()
    for name in created:
        drop_index(copy_a, name)
    dropped = time.perf_counter()
    moved = leave_out_indexes(copy_b, init_db(copy_b).created_indexes, *leave_out)
    built = time.perf_counter()
    purposes = [
        sorted(name.removeprefix(f"{db.settings.table_parts[1]}_") for name in names)
        for db, names in ((copy_a, created), (copy_b, moved))
    ]
    if purposes[0] != purposes[1]:
        raise RuntimeError(f"copy A had the indexes {created}, init-db created {moved} on B")
    for db in (copy_a, copy_b):
        with db.connection() as conn:
            conn.execute(db.compose("benchmark_vacuum_analyze"))
    log(f"  dropped {', '.join(created)}; init-db created {', '.join(moved)}")
    return {
        "drop": dropped - start,
        "build": built - dropped,
        "vacuum": time.perf_counter() - built,
        "load": " ".join(Path("/proc/loadavg").read_text().split()[:3]),
    }


def ms(value: float) -> str:
    return f"{value:,.2f}" if value < 100 else f"{value:,.0f}"


def print_report(
    args: argparse.Namespace,
    server: dict[str, Any],
    shape: dict[str, Any],
    phases: list[list[Result]],
) -> None:
    """The Markdown report: the setup, then the ratios (one phase: each variant against the
    base; two, ``--crossover``: each phase's and the crossover's), then the claim's plans."""
    print("## Setup\n")
    command = " ".join(["benchmarks/claim.py", *sys.argv[1:]])
    print(f"- command: `.venv/bin/python {command}`")
    print(
        f"- machine: {platform.machine()}, {platform.system()} {platform.release()}, "
        f"Python {platform.python_version()}, load average before / after the run "
        f"{shape['load']} / {shape['load_after']}"
    )
    print(
        f"- server: {server['version'].split(' on ')[0]}; shared_buffers "
        f"{server['shared_buffers']}, work_mem {server['work_mem']}, "
        f"max_parallel_workers_per_gather {server['parallel_workers']}; fsync off"
    )
    tables = shape["tables"]
    if args.crossover:
        copies = (
            f"copied twice: {tables['with']} (A: with in phase 1, without in phase 2), "
            f"{tables['without']} (B: without, then with)"
        )
    else:
        copies = "copied per variant: " + ", ".join(f"{tables[v]} ({v})" for v in tables)
    print(
        f"- history: {shape['total']:,} rows seeded as figures.py does ("
        + ", ".join(f"{k} {n:,}" for k, n in shape["counts"].items())
        + f"), its {shape['acked']:,} due pending rows acked; seed {shape['seed_seconds']:.1f} s; "
        + copies
        + "; index builds "
        + ", ".join(f"{v} {s:.1f} s" for v, s in shape["builds"].items())
    )
    if args.crossover:
        move = shape["move"]
        print(
            f"- crossover: phase 1 {shape['phase_seconds'][0]:.0f} s; then the indexes moved "
            f"from A to B (dropped {move['drop']:.1f} s, init-db on B {move['build']:.1f} s, "
            f"VACUUM ANALYZE of both {move['vacuum']:.1f} s; load average then "
            f"{move['load']}); phase 2 {shape['phase_seconds'][1]:.0f} s, the same scenarios "
            "and rounds, round i paired with phase 1's round i"
        )
    print(
        f"- batch of {args.batch} rows; median (min) of {args.repeat} interleaved rounds after "
        "one warm-up, each statement in a rolled-back transaction, only the statement timed; "
        "VACUUM after each scenario\n"
    )
    if args.crossover:
        print_crossover(phases)
    else:
        print_paired(shape["variants"], phases[0])
    print(
        "\nPlans of the users' claim (EXPLAIN ANALYZE, BUFFERS): scans; rows removed by filter; "
        "pages.\n"
    )
    columns = [(phase, variant) for phase in range(len(phases)) for variant in shape["variants"]]
    if args.crossover:
        names = ["phase 1 B without", "phase 1 A with", "phase 2 A without", "phase 2 B with"]
    else:
        names = list(shape["variants"])
    print("| scenario | " + " | ".join(names) + " |")
    print("|---|" + "---|" * len(names))
    for index, result in enumerate(phases[0]):
        cells = [
            f"{plan}; {removed:,}; {pages:,}"
            for plan, removed, pages in (phases[p][index].plans[v] for p, v in columns)
        ]
        print(f"| {result.scenario.label} | " + " | ".join(cells) + " |")
    print()


def print_paired(variants: list[str], results: list[Result]) -> None:
    """Each variant against the base (the first): medians (min), their ratio, and the
    round-by-round ratio with its 95 % interval and verdict."""
    base_variant, *others = variants
    head = " | ".join(f"{v} ms | {v}/{base_variant} | by round [95 %]" for v in others)
    print(f"| scenario | statement | {base_variant} ms | {head} |")
    print("|---|---|---:|" + "---:|---:|---:|" * len(others))
    for result in results:
        for statement in STATEMENTS:
            base = result.median(base_variant, statement)
            cells = [f"{ms(base)} ({ms(result.minimum(base_variant, statement))})"]
            for variant in others:
                value = result.median(variant, statement)
                paired, low, high = result.paired_ratio(variant, statement)
                cells.append(f"{ms(value)} ({ms(result.minimum(variant, statement))})")
                cells.append(f"{value / base:.2f}")
                cells.append(f"{paired:.2f} [{low:.2f}, {high:.2f}]{verdict(low, high)}")
            print(f"| {result.scenario.label} | {statement} | " + " | ".join(cells) + " |")


def print_crossover(phases: list[list[Result]]) -> None:
    """``--crossover``: per scenario and statement each phase's medians and paired
    with/without ratio [95 %], the crossover ratio [95 %] with its verdict, and copy A's
    time over copy B's (the placement factor the crossover cancelled)."""
    print(
        "| scenario | statement | phase 1 ms: B without / A with | phase 1 by round [95 %] "
        "| phase 2 ms: A without / B with | phase 2 by round [95 %] | crossover [95 %] "
        "| copy A/B [95 %] |"
    )
    print("|---|---|---:|---:|---:|---:|---:|---:|")
    for first, second in zip(*phases, strict=True):
        for statement in STATEMENTS:
            cells = []
            for result in (first, second):
                medians = (result.median(v, statement) for v in ("without", "with"))
                cells.append(" / ".join(ms(value) for value in medians))
                cells.append(
                    "{:.2f} [{:.2f}, {:.2f}]".format(*result.paired_ratio("with", statement))
                )
            samples = (
                first.samples["with"][statement],
                first.samples["without"][statement],
                second.samples["with"][statement],
                second.samples["without"][statement],
            )
            ratio, low, high = crossover_ratio(*samples)
            cells.append(f"{ratio:.2f} [{low:.2f}, {high:.2f}]{verdict(low, high)}")
            cells.append("{:.2f} [{:.2f}, {:.2f}]".format(*copy_effect(*samples)))
            print(f"| {first.scenario.label} | {statement} | " + " | ".join(cells) + " |")


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=1_000_000, help="history rows to seed")
    parser.add_argument(
        "--backlogs", default="1000,3000,50000,200000", help="due pending rows, comma-separated"
    )
    parser.add_argument(
        "--storms",
        default="1000:200000,50000:200000",
        help="retry storms as due:in-backoff pairs, comma-separated ('' for none)",
    )
    parser.add_argument("--batch", type=int, default=50, help="rows per claim and publish")
    parser.add_argument("--repeat", type=int, default=15, help="timed rounds")
    parser.add_argument(
        "--retired", action="store_true", help="also time the indexes of before issue 11"
    )
    parser.add_argument(
        "--marginal",
        metavar="PURPOSE",
        help="time one index alone: 'before' (every other index of init-db --flow-control) "
        "against 'with' (all of them), e.g. pending_types",
    )
    parser.add_argument(
        "--advised",
        action="store_true",
        help="time the claim advisor's proposal (issue 32 item 5): 'with' (init-db's indexes) "
        "against 'advised' (and the proposed index)",
    )
    parser.add_argument(
        "--crossover",
        action="store_true",
        help="cancel the copies' own speeds: every scenario with the indexes on copy A, then "
        "with them moved to copy B; reports the crossover ratio and the copy effect",
    )
    parser.add_argument(
        "--leave-out",
        metavar="PURPOSES",
        default="",
        help="with --crossover: the recommended indexes (comma-separated purposes) the 'with' "
        "copy goes without, e.g. clock_skew,failed_by_type: what the others cost",
    )
    parser.add_argument(
        "--skew-by-comparison",
        action="store_true",
        help="with --crossover: clock_skew's predicate cut to processed_at < created_at "
        "(benchmark_presence_skew_compare) on the 'with' copy",
    )
    parser.add_argument(
        "--shared-buffers",
        default="4GB",
        help="the cluster's shared_buffers: every copy's backlog pages must fit, or the copies"
        " evict each other's and the order of the rounds decides the timings",
    )
    args = parser.parse_args(argv)
    try:
        backlogs = sorted({int(value.replace("_", "")) for value in args.backlogs.split(",")})
        storms = [
            tuple(int(part.replace("_", "")) for part in pair.split(":"))
            for pair in args.storms.split(",")
            if pair.strip()
        ]
    except ValueError:
        parser.error("--backlogs takes integers, --storms due:in-backoff pairs")
    if any(len(pair) != 2 for pair in storms):
        parser.error("--storms takes due:in-backoff pairs")
    args.scenarios = [Scenario(due, 0) for due in backlogs] + [Scenario(*p) for p in storms]
    if args.marginal:
        by_purpose = {i.purpose: i for i in (*RECOMMENDED_INDEXES, FLOW_CONTROL_INDEX)}
        if args.marginal not in by_purpose or args.retired or args.advised:
            parser.error(f"--marginal takes one of {', '.join(by_purpose)}, without --retired")
        args.marginal = by_purpose[args.marginal]
    if args.advised and args.retired:
        parser.error("--advised and --retired: one at a time")
    if args.crossover and (args.marginal or args.advised or args.retired):
        parser.error(
            "--crossover moves the recommended indexes between the copies without and with;"
            " it does not combine with --marginal, --advised or --retired"
        )
    purposes = {index.purpose for index in RECOMMENDED_INDEXES}
    args.leave_out = [p for p in args.leave_out.split(",") if p.strip()]
    if args.skew_by_comparison and (not args.crossover or "clock_skew" in args.leave_out):
        parser.error("--skew-by-comparison: with --crossover, clock_skew not left out")
    if args.leave_out and (not args.crossover or not set(args.leave_out) < purposes):
        parser.error(f"--leave-out takes some of {', '.join(sorted(purposes))}, with --crossover")
    if args.rows < 1000 or args.repeat < 1 or args.batch < 1 or min(backlogs) < 1:
        parser.error("need --rows >= 1000, --repeat >= 1, --batch >= 1, backlogs >= 1")
    return args


@contextmanager
def seeded_history(
    rows: int, shared_buffers: str
) -> Iterator[tuple[TemporaryCluster, RecordingDatabase, dict[str, Any]]]:
    """A throwaway cluster with ``shared_buffers`` and its outbox table (the users' indexes
    only) holding ``rows`` rows of history seeded as figures.py does, the seed's due pending
    rows acked (``acked`` in the shape, with the seed's own figures)."""
    log("starting a throwaway PostgreSQL cluster")
    with TemporaryCluster() as cluster:
        preload_stat_statements(cluster, shared_buffers, want=False)
        settings = load_settings(dsn=cluster.dsn, statement_timeout=STATEMENT_TIMEOUT_SECONDS)
        with RecordingDatabase(settings) as source:
            init_db(source, create_table=True, create_indexes=False)
            log(f"seeding {rows:,} rows of history (users' indexes only)")
            shape = seed(source, rows, 30)
            with source.connection() as conn:
                shape["acked"] = conn.execute(source.compose("benchmark_claim_ack_due")).rowcount
            yield cluster, source, shape
        log("stopping the cluster")


def run_phase(
    dbs: dict[str, RecordingDatabase],
    args: argparse.Namespace,
    start: Scenario,
    anchor: datetime,
    phase: str = "",
) -> list[Result]:
    """Every scenario in turn, the tables brought from ``start``'s rows to the scenario's,
    then measured; one ``Result`` per scenario (``phase``: a prefix of the progress lines)."""
    results = []
    current = start
    for scenario in args.scenarios:
        log(f"{phase}scenario {scenario.label}")
        for db in dbs.values():
            bring_to(db, scenario, current, anchor)
        current = scenario
        result = Result(scenario, next(iter(dbs)))
        measure(dbs, args, result)
        results.append(result)
    return results


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    load = " ".join(Path("/proc/loadavg").read_text().split()[:3])
    phases: list[list[Result]] = []
    with seeded_history(args.rows, args.shared_buffers) as (cluster, source, shape):
        shape["load"] = load
        shape["counts"] = {
            row["status"]: row["rows"] for row in source.fetch_all("benchmark_status_counts")
        }
        shape["total"] = sum(shape["counts"].values())
        server = source.fetch_one("benchmark_server")
        prepared = prepare_tables(source, cluster.dsn, args)
        dbs = prepared["dbs"]
        shape["builds"] = prepared["builds"]
        shape["variants"] = list(dbs)
        shape["tables"] = {variant: db.settings.table_parts[1] for variant, db in dbs.items()}
        anchor = datetime.now(UTC)
        try:
            started = time.perf_counter()
            first = "phase 1: " if args.crossover else ""
            phases.append(run_phase(dbs, args, Scenario(0, 0), anchor, first))
            shape["phase_seconds"] = [time.perf_counter() - started]
            if args.crossover:
                log("back to the seeded rows; the recommended indexes move from copy A to B")
                for db in dbs.values():  # phase 2 starts where phase 1 did
                    bring_to(db, Scenario(0, 0), args.scenarios[-1], anchor)
                shape["move"] = move_indexes(
                    dbs, prepared["created"]["with"], (args.leave_out, args.skew_by_comparison)
                )
                swapped = {"without": dbs["with"], "with": dbs["without"]}
                started = time.perf_counter()
                phases.append(run_phase(swapped, args, Scenario(0, 0), anchor, "phase 2: "))
                shape["phase_seconds"].append(time.perf_counter() - started)
        finally:
            for db in dbs.values():
                db.__exit__(None, None, None)
        shape["load_after"] = " ".join(Path("/proc/loadavg").read_text().split()[:3])
    print_report(args, server, shape, phases)
    return 0


if __name__ == "__main__":
    sys.exit(main())
