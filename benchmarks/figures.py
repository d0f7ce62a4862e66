"""Benchmark of every SPEC §2 figure without and with the recommended indexes of SPEC §1.

Starts its own throwaway PostgreSQL cluster, creates the outbox table with only the indexes
users already have, seeds a realistic table in one ``INSERT … SELECT generate_series``, then
times every figure function of ``outbox_monitor.figures.metrics`` (and the previews of
``outbox_monitor.actions``) — median of ``--repeat`` calls after one warm-up call — first
without, then with the recommended indexes (created by ``schema.init_db``, CONCURRENTLY).
For every figure it also prints the scans Postgres plans and the pages they touch
(``EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON)`` of the statements the function really ran),
the index sizes and the write cost of the indexes (insert, claim and ack of a batch).

Usage (from the repository root, with the package installed)::

    .venv/bin/python benchmarks/figures.py [--rows 1000000] [--repeat 7]

The report goes to stdout as Markdown; progress goes to stderr. ``--rows 20000 --repeat 2``
is a smoke run of well under 30 s. The benchmark's own SQL is in ``benchmarks/queries.sql``
(named blocks); the timed figures run the product's blocks of ``sql/queries.sql``.
"""

import argparse
import json
import platform
import statistics
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from itertools import zip_longest
from pathlib import Path
from typing import Any

from psycopg import sql

from outbox_monitor.actions.prune import preview_prune
from outbox_monitor.actions.reap import preview_reap
from outbox_monitor.actions.replay import ReplaySelection, preview_replay
from outbox_monitor.config.settings import Settings, load_settings
from outbox_monitor.demo.pgcluster import TemporaryCluster
from outbox_monitor.figures import error_grouping, metrics
from outbox_monitor.store.db import Database
from outbox_monitor.store.queries import parse_queries
from outbox_monitor.store.schema import init_db

HOUR = 3600.0
DAY = 86400.0
SEED = 0.42
# Shape of the seeded table (SPEC §1 realistic traffic): the share of dead letters, and the
# pending / processing rows, which all sit in the newest RECENT seconds (a backlog with
# scheduled retries after a downstream outage), per million rows.
FAILED_SHARE = 0.01
PENDING_PER_MILLION = 3000
PROCESSING_PER_MILLION = 500
RECENT_SECONDS = 6 * HOUR
STATEMENT_TIMEOUT_SECONDS = 600.0
WRITE_REPEAT = 3
# The stack trace after a third of the dead letters' errors (≈ 900 characters, as n8n's
# Code and HTTP Request nodes log them); its numbers are line and column numbers, which
# SPEC §2's normalisation keeps (fewer than 4 digits).
STACK_TRACE = (
    "TypeError: Cannot read properties of undefined (reading 'email')\n"
    "    at CrmClient.upsertContact (/home/node/.n8n/custom/nodes/crm/client.js:142:17)\n"
    "    at ExecuteContext.execute (/usr/local/lib/node_modules/n8n/node_modules/"
    "n8n-nodes-base/dist/nodes/HttpRequest/V3/HttpRequestV3.node.js:652:33)\n"
    "    at WorkflowExecute.runNode (/usr/local/lib/node_modules/n8n/node_modules/n8n-core/"
    "dist/execution-engine/workflow-execute.js:696:27)\n"
    "    at /usr/local/lib/node_modules/n8n/node_modules/n8n-core/dist/execution-engine/"
    "workflow-execute.js:930:51\n"
    "    at processTicksAndRejections (node:internal/process/task_queues:95:5)\n"
    "    at WorkflowExecute.processRunExecutionData (/usr/local/lib/node_modules/n8n/"
    "node_modules/n8n-core/dist/execution-engine/workflow-execute.js:232:8)\n"
    "    at Job.run (/usr/local/lib/node_modules/n8n/dist/scaling/job-processor.js:151:20)\n"
    "    at Queue.process (/usr/local/lib/node_modules/n8n/node_modules/bull/lib/queue.js:"
    "512:16)\n"
    "    at Socket.emit (node:events:517:28)"
)
# The benchmark's own named blocks (seed, EXPLAIN, sizes, write batches).
BENCHMARK_QUERIES = parse_queries((Path(__file__).parent / "queries.sql").read_text("utf-8"))


def log(message: str) -> None:
    """Progress on stderr, so that stdout holds only the report."""
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


class RecordingDatabase(Database):
    """A ``Database`` that also knows the blocks of ``benchmarks/queries.sql`` and can record
    the named queries it runs, to EXPLAIN them afterwards."""

    def __init__(self, settings: Settings) -> None:
        super().__init__(settings)
        self.calls: list[tuple[str, dict[str, Any], dict[str, sql.Composable]]] | None = None

    def compose(self, name: str, **fragments: sql.Composable) -> sql.Composed:
        """A block of ``benchmarks/queries.sql``, else the product's block of that name; both
        with ``{table}`` and ``{ledger}`` bound and ``{and_filters}`` empty by default."""
        query = BENCHMARK_QUERIES.get(name)
        if query is None:
            return super().compose(name, **fragments)
        fragments.setdefault("and_filters", sql.SQL(""))
        return sql.SQL(query.text).format(table=self.table, ledger=self.ledger, **fragments)

    @contextmanager
    def recording(self) -> Iterator[list[tuple[str, dict[str, Any], dict[str, sql.Composable]]]]:
        """Record each ``fetch_all``/``fetch_one`` in the block as (name, params, fragments)."""
        self.calls = []
        try:
            yield self.calls
        finally:
            self.calls = None

    def fetch_all(
        self, name: str, params: dict[str, Any] | None = None, **fragments: sql.Composable
    ) -> list[dict[str, Any]]:
        if self.calls is not None:
            self.calls.append((name, dict(params or {}), fragments))
        return super().fetch_all(name, params, **fragments)

    def fetch_one(
        self, name: str, params: dict[str, Any] | None = None, **fragments: sql.Composable
    ) -> dict[str, Any] | None:
        if self.calls is not None:
            self.calls.append((name, dict(params or {}), fragments))
        return super().fetch_one(name, params, **fragments)


@dataclass(frozen=True)
class Figure:
    """One timed call: a label, its kind and the call itself.

    Kinds: ``refresh`` (dashboard, ``status --json``, sampler), ``action`` (an operator's
    preview).
    """

    name: str
    kind: str
    run: Callable[[], object]


def build_figures(db: Database, error_group: str | None) -> list[Figure]:
    """Every figure function of ``metrics`` and the previews of ``actions``, with the windows,
    filters and buckets the dashboard, ``status --json``, the sampler and SPEC §3 rules use."""
    m = metrics
    figures = [
        Figure("queue_depth", "refresh", lambda: m.queue_depth(db)),
        Figure("pending_total", "refresh", lambda: m.pending_total(db)),
        Figure("scheduled_retries", "refresh", lambda: m.scheduled_retries(db)),
        Figure("oldest_pending_age", "refresh", lambda: m.oldest_pending_age(db)),
        Figure(
            "oldest_pending_age [notification.%]",
            "refresh",
            lambda: m.oldest_pending_age(db, event_type="notification.%"),
        ),
        Figure("processing", "refresh", lambda: m.processing(db)),
        Figure("stuck_locks", "refresh", lambda: m.stuck_locks(db)),
        Figure("latency_percentiles 1h", "refresh", lambda: m.latency_percentiles(db, window=HOUR)),
        Figure("latency_percentiles 24h", "refresh", lambda: m.latency_percentiles(db, window=DAY)),
        Figure("throughput 1h", "refresh", lambda: m.throughput(db, window=HOUR)),
        Figure("throughput 24h", "refresh", lambda: m.throughput(db, window=DAY)),
        Figure(
            "failed_by_event_type 1h", "refresh", lambda: m.failed_by_event_type(db, window=HOUR)
        ),
        Figure(
            "failed_by_event_type 24h", "refresh", lambda: m.failed_by_event_type(db, window=DAY)
        ),
        Figure(
            "failed_by_event_type 15m [payment.%]",
            "refresh",
            lambda: m.failed_by_event_type(db, window=900, event_type="payment.%"),
        ),
        Figure("attempts_histogram", "refresh", lambda: m.attempts_histogram(db)),
        Figure("attempts_at_least 5", "refresh", lambda: m.attempts_at_least(db, 5)),
        Figure("error_groups", "refresh", lambda: error_grouping.error_groups(db)),
        Figure(
            "throughput_series 1h/1m",
            "refresh",
            lambda: m.throughput_series(db, window=HOUR, bucket=60),
        ),
        Figure(
            "throughput_series 24h/15m",
            "refresh",
            lambda: m.throughput_series(db, window=DAY, bucket=900),
        ),
        Figure(
            "latency_series 1h/1m", "refresh", lambda: m.latency_series(db, window=HOUR, bucket=60)
        ),
        Figure(
            "latency_series 24h/15m",
            "refresh",
            lambda: m.latency_series(db, window=DAY, bucket=900),
        ),
        Figure("samples_series 1h", "refresh", lambda: m.samples_series(db, window=HOUR)),
        Figure("status (all of status --json)", "refresh", lambda: m.status(db, window=HOUR)),
        Figure("preview_reap", "action", lambda: preview_reap(db)),
        Figure(
            "preview_replay [event_type %]",
            "action",
            lambda: preview_replay(db, ReplaySelection(event_type="%")),
        ),
        Figure(
            "preview_replay [since 24h]",
            "action",
            lambda: preview_replay(
                db, ReplaySelection(since=datetime.now(UTC) - timedelta(days=1))
            ),
        ),
    ]
    if error_group:
        figures.append(
            Figure(
                "preview_replay [error_group]",
                "action",
                lambda: preview_replay(db, ReplaySelection(error_group=error_group)),
            )
        )
    figures.append(
        Figure(
            "preview_prune [done 7d, failed 30d]",
            "action",
            lambda: preview_prune(db, done_older_than=7 * DAY, failed_older_than=30 * DAY),
        )
    )
    return figures


@dataclass(frozen=True)
class Plan:
    """One statement a figure ran, as ``EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON)`` saw it."""

    query: str
    scans: str  # e.g. "IndexOnly(status_processed_at_idx), Seq Scan"
    seq_scan: bool  # a Seq Scan on the outbox table
    pages: int  # shared buffers hit + read, every relation


NOT_RUN = Plan("–", "not run", seq_scan=False, pages=0)


@dataclass
class Phase:
    """What one index set measured."""

    label: str
    build_seconds: float | None = None
    index: str | None = None  # the done_at index, by name
    timings: dict[str, float] = field(default_factory=dict)
    plans: dict[str, list[Plan]] = field(default_factory=dict)
    sizes: list[dict[str, Any]] = field(default_factory=list)
    writes: dict[str, float] = field(default_factory=dict)

    def seq_scan(self, figure: str) -> bool:
        """Whether any statement of ``figure`` plans a Seq Scan on the outbox table."""
        return any(plan.seq_scan for plan in self.plans[figure])

    def pages(self, figure: str) -> int:
        """Buffers (8 kB pages) all statements of ``figure`` touched."""
        return sum(plan.pages for plan in self.plans[figure])


def median_ms(run: Callable[[], object], repeat: int) -> float:
    """Median wall time in milliseconds of ``repeat`` calls, after one warm-up call."""
    run()
    samples = []
    for _ in range(repeat):
        start = time.perf_counter()
        run()
        samples.append((time.perf_counter() - start) * 1000)
    return statistics.median(samples)


def scans(node: dict[str, Any], table: str, prefix: str) -> list[str]:
    """The scans of one plan tree: Seq Scans of ``table`` and every index scan, in order."""
    found = []
    kind = node.get("Node Type", "")
    if node.get("Relation Name") == table and kind == "Seq Scan":
        found.append("Parallel Seq Scan" if node.get("Parallel Aware") else "Seq Scan")
    elif "Index Name" in node:
        short = {"Index Scan": "Index", "Index Only Scan": "IndexOnly"}.get(kind, "Bitmap")
        found.append(f"{short}({node['Index Name'].removeprefix(prefix)})")
    for child in node.get("Plans", []):
        found += scans(child, table, prefix)
    return found


def explain(db: RecordingDatabase, figure: Figure) -> list[Plan]:
    """Run ``figure`` once recording its statements, then EXPLAIN ANALYZE each of them."""
    with db.recording() as calls:
        figure.run()
    table = db.settings.table_parts[1]
    plans = []
    for name, params, fragments in calls:
        row = db.fetch_one("benchmark_explain", params, query=db.compose(name, **fragments))
        document = row["QUERY PLAN"]
        top = (json.loads(document) if isinstance(document, str) else document)[0]["Plan"]
        found = scans(top, table, f"{table}_")
        plans.append(
            Plan(
                query=name,
                scans=", ".join(dict.fromkeys(found)) or "no table scan",
                seq_scan=any("Seq Scan" in scan for scan in found),
                pages=top.get("Shared Hit Blocks", 0) + top.get("Shared Read Blocks", 0),
            )
        )
    return plans


def time_figures(db: RecordingDatabase, figures: list[Figure], phase: Phase, repeat: int) -> None:
    """Time and EXPLAIN every figure, and record the relation sizes, into ``phase``."""
    log(f"{phase.label}: timing {len(figures)} figures, {repeat} runs each")
    for figure in figures:
        phase.timings[figure.name] = median_ms(figure.run, repeat)
        phase.plans[figure.name] = explain(db, figure)
    phase.sizes = db.fetch_all("benchmark_relation_sizes", {"table_regclass": db.table_name})


def time_writes(db: RecordingDatabase, phase: Phase, rows: int, repeat: int = WRITE_REPEAT) -> None:
    """Median ms (of ``repeat``) to insert ``rows`` rows, claim them and ack them, each one
    statement inside a rolled-back transaction.

    One untimed round comes first (a freshly built index pays its first page splits there);
    every round starts after a CHECKPOINT and is followed by a VACUUM of its dead rows.
    """
    log(f"{phase.label}: writes of {rows:,} rows, median of {repeat} after one untimed")
    runs: dict[str, list[float]] = {"insert": [], "claim": [], "ack": []}
    for index in range(repeat + 1):
        with db.connection() as conn:
            conn.execute(db.compose("benchmark_checkpoint"))
        with db.connection() as conn, conn.transaction(force_rollback=True):
            after = conn.execute(db.compose("benchmark_max_id")).fetchone()["max_id"]
            tag = f"{phase.label.replace(' ', '-')}-{index}"
            steps = (
                ("insert", "benchmark_insert_batch", {"rows": rows, "tag": tag}),
                ("claim", "benchmark_claim_batch", {"after_id": after}),
                ("ack", "benchmark_ack_batch", {"after_id": after}),
            )
            for key, query, params in steps:
                start = time.perf_counter()
                conn.execute(db.compose(query), params)
                if index:
                    runs[key].append((time.perf_counter() - start) * 1000)
        with db.connection() as conn:
            conn.execute(db.compose("benchmark_vacuum"))
    phase.writes = {key: statistics.median(values) for key, values in runs.items()}


def seed(
    db: RecordingDatabase, rows: int, days: float, failed_share: float = FAILED_SHARE
) -> dict[str, Any]:
    """Fill the outbox table and the samples table; returns the seed's shape and durations.

    ``failed_share`` of the rows older than the newest ``RECENT_SECONDS`` are dead letters.
    """
    span = days * DAY
    recent_rows = max(rows * min(RECENT_SECONDS / span, 1.0), 1.0)
    pending = max(round(rows * PENDING_PER_MILLION / 1e6), 30)
    processing = max(round(rows * PROCESSING_PER_MILLION / 1e6), 5)
    params = {
        "rows": rows,
        "span": span,
        "recent": RECENT_SECONDS,
        "processing_share": min(processing / recent_rows, 0.5),
        "pending_share": min(pending / recent_rows, 0.5),
        "failed_share": failed_share,
        "max_attempts": db.settings.max_attempts,
        "stack_trace": STACK_TRACE,
    }
    start = time.perf_counter()
    with db.direct_connection(statement_timeout=None) as conn:
        conn.execute(db.compose("benchmark_autovacuum_off"))
        conn.execute(db.compose("benchmark_synchronous_commit"))
        conn.execute(db.compose("benchmark_setseed"), {"seed": SEED})
        conn.execute(db.compose("benchmark_seed"), params)
        conn.execute(
            db.compose("benchmark_seed_samples"),
            {
                "table_name": db.table_name,
                "interval": db.settings.sample_interval,
                "retention": db.settings.sample_retention,
            },
        )
    seeded = time.perf_counter() - start
    start = time.perf_counter()
    with db.connection() as conn:
        conn.execute(db.compose("benchmark_vacuum_analyze"))
    vacuumed = time.perf_counter() - start
    visibility = db.fetch_one("benchmark_visibility", {"table_regclass": db.table_name})
    return {"seed_seconds": seeded, "vacuum_seconds": vacuumed, **visibility}


def drop_index(db: RecordingDatabase, name: str) -> None:
    """DROP INDEX CONCURRENTLY one index of the outbox table's schema."""
    schema = db.settings.table_parts[0]
    with db.direct_connection(statement_timeout=None) as conn:
        conn.execute(db.compose("benchmark_drop_index", index=sql.Identifier(schema, name)))


# ------------------------------------------------------------------------------ report


def mb(size: float) -> str:
    return f"{size / 2**20:,.1f}"


def ms(value: float) -> str:
    return f"{value:,.2f}" if value < 100 else f"{value:,.0f}"


def ratio(before: float, after: float) -> str:
    return f"{before / after:,.1f}×" if after else "–"


@dataclass
class Run:
    """Everything the report needs."""

    args: argparse.Namespace
    server: dict[str, Any]
    shape: dict[str, Any]
    figures: list[Figure]
    without: Phase
    recommended: Phase
    wall_seconds: float = 0.0


def print_report(run: Run) -> None:
    """The whole report as Markdown on stdout."""
    args, shape, server = run.args, run.shape, run.server
    without, with_ = run.without, run.recommended
    counts, status = shape["counts"], shape["status"]
    total = sum(counts.values())
    table_pages = next(r["bytes"] for r in with_.sizes if not r["is_index"]) // 8192
    print("## Setup\n")
    print(f"- command: `.venv/bin/python benchmarks/figures.py {' '.join(sys.argv[1:])}`")
    print(
        f"- machine: {platform.machine()}, {platform.system()} {platform.release()}, "
        f"Python {platform.python_version()}"
    )
    print(
        f"- server: {server['version'].split(' on ')[0]}; "
        f"shared_buffers {server['shared_buffers']}, work_mem {server['work_mem']}, "
        f"max_parallel_workers_per_gather {server['parallel_workers']}; "
        "fsync off (throwaway cluster)"
    )
    print(
        f"- table: {total:,} rows over {args.days:g} days ({table_pages:,} pages of 8 kB, "
        f"{100 * shape['all_visible'] / max(shape['pages'], 1):.0f} % all-visible after VACUUM; "
        "autovacuum off during the run): "
        + ", ".join(f"{key} {n:,} ({100 * n / total:.2f} %)" for key, n in counts.items())
    )
    p95 = status["latency_seconds"]["p95"]
    print(
        f"- figures on the seeded table: queue depth {status['queue_depth']:,}, scheduled "
        f"retries {status['scheduled_retries']:,}, processing {status['processing']:,}, "
        f"stuck locks {status['stuck_locks']}, oldest pending age "
        f"{status['oldest_pending_age_seconds'] or 0:,.0f} s, P95 latency "
        f"{p95 if p95 is None else round(p95, 1)} s, processed/min "
        f"{status['processed_per_minute']:.1f}, failed in 1 h {status['failed_in_window']}"
    )
    print(
        f"- seed {shape['seed_seconds']:.1f} s, VACUUM ANALYZE {shape['vacuum_seconds']:.1f} s, "
        f"recommended indexes by init-db (CONCURRENTLY) {with_.build_seconds:.1f} s; "
        f"whole run {run.wall_seconds:.0f} s"
    )
    print(
        f"- timings: median of {args.repeat} calls after one warm-up call (warm cache), through "
        "the package's pool, so each includes its round trips (≈ 0.1–0.3 ms per statement)\n"
    )

    print("## Figures: median ms without / with the recommended indexes\n")
    print(
        "pages = 8 kB buffers all statements of the figure touched (EXPLAIN ANALYZE BUFFERS); "
        "seq = a Seq Scan on the outbox table in a plan. refresh = dashboard, status --json, "
        "sampler; action = an operator's preview.\n"
    )
    print(
        "| figure | kind | without ms | with ms | ratio | pages without | pages with "
        "| seq without | seq with |"
    )
    print("|---|---|---:|---:|---:|---:|---:|:-:|:-:|")
    for figure in run.figures:
        name = figure.name
        print(
            f"| {name} | {figure.kind} "
            f"| {ms(without.timings[name])} | {ms(with_.timings[name])} "
            f"| {ratio(without.timings[name], with_.timings[name])} "
            f"| {without.pages(name):,} | {with_.pages(name):,} "
            f"| {'seq' if without.seq_scan(name) else '–'} "
            f"| {'**seq**' if with_.seq_scan(name) else '–'} |"
        )
    refresh = [figure.name for figure in run.figures if figure.kind == "refresh"]
    heavy = [
        name for name in refresh if with_.seq_scan(name) or with_.pages(name) > table_pages / 10
    ]
    print(
        "\nWith the recommended indexes, refresh figures that Seq Scan the outbox table or "
        f"touch more than 10 % of its {table_pages:,} pages: "
        f"{', '.join(heavy) if heavy else 'none'}.\n"
    )

    print("## Plans, statement by statement\n")
    print(
        "Index names without the table prefix; `Bitmap(x)` = bitmap scan of index x; "
        "pages = buffers touched.\n"
    )
    print("| figure | statement | without: scans | pages | with: scans | pages |")
    print("|---|---|---|---:|---|---:|")
    for figure in run.figures:
        pairs = zip_longest(without.plans[figure.name], with_.plans[figure.name], fillvalue=NOT_RUN)
        for before, after in pairs:
            print(
                f"| {figure.name} | {before.query if before is not NOT_RUN else after.query} "
                f"| {before.scans} | {before.pages:,} | {after.scans} | {after.pages:,} |"
            )

    print("\n## Sizes (pg_relation_size, freshly seeded table)\n")
    print("| relation | MB | definition |")
    print("|---|---:|---|")
    for row in with_.sizes:
        definition = (row["definition"] or "table").split(" USING ", 1)[-1]
        print(f"| {row['name']} | {mb(row['bytes'])} | {definition} |")

    print(
        f"\n## Write cost: one statement of {args.insert_rows:,} rows, median of "
        f"{WRITE_REPEAT} after one untimed round, rolled back\n"
    )
    print("| statement | without ms | with ms | with / without | µs more per row |")
    print("|---|---:|---:|---:|---:|")
    for key in ("insert", "claim", "ack"):
        before, after = without.writes[key], with_.writes[key]
        extra = (after - before) * 1000 / args.insert_rows
        print(f"| {key} | {ms(before)} | {ms(after)} | {after / before:.2f} | {extra:+.1f} |")


# -------------------------------------------------------------------------------- main


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=1_000_000, help="outbox rows to seed")
    parser.add_argument("--repeat", type=int, default=7, help="timed calls per figure")
    parser.add_argument("--days", type=float, default=30, help="days the rows span")
    parser.add_argument(
        "--insert-rows",
        type=int,
        help="rows per write batch (default 50,000, at most --rows)",
    )
    args = parser.parse_args(argv)
    if args.insert_rows is None:
        args.insert_rows = min(50_000, args.rows)
    if args.rows < 1000 or args.repeat < 1 or args.days <= 0 or args.insert_rows < 1:
        parser.error("need --rows >= 1000, --repeat >= 1, --days > 0, --insert-rows >= 1")
    return args


def time_phase(settings: Settings, phase: Phase, error_group: str | None, repeat: int) -> None:
    """Time every figure on a fresh pool, so no session state of an earlier phase carries over
    (the product prepares no statements, so no cached plan can carry over either)."""
    with RecordingDatabase(settings) as db:
        time_figures(db, build_figures(db, error_group), phase, repeat)


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark and print the report; returns the exit status.

    Order: figures without the recommended indexes; init-db; figures with them; then every
    write-cost measurement last, so that no figure runs on a table bloated by write batches.
    """
    args = parse_args(argv)
    started = time.perf_counter()
    log("starting a throwaway PostgreSQL cluster")
    with TemporaryCluster() as cluster, ExitStack() as stack:
        settings = load_settings(dsn=cluster.dsn, statement_timeout=STATEMENT_TIMEOUT_SECONDS)
        db = stack.enter_context(RecordingDatabase(settings))
        init_db(db, create_table=True, create_indexes=False)
        log(f"seeding {args.rows:,} rows over {args.days:g} days (users' indexes only)")
        shape = seed(db, args.rows, args.days)
        shape["counts"] = {
            row["status"]: row["rows"] for row in db.fetch_all("benchmark_status_counts")
        }
        shape["status"] = metrics.status(db, window=HOUR)
        groups = error_grouping.error_groups(db, limit=1)
        group = groups[0]["group_id"] if groups else None
        run = Run(
            args,
            db.fetch_one("benchmark_server"),
            shape,
            build_figures(db, group),
            Phase("without"),
            Phase("recommended"),
        )
        time_phase(settings, run.without, group, args.repeat)

        log("init-db: the recommended indexes, CONCURRENTLY")
        start = time.perf_counter()
        created = init_db(db).created_indexes
        run.recommended.build_seconds = time.perf_counter() - start
        run.recommended.index = next(n for n in created if n.endswith("_done_at_idx"))
        time_phase(settings, run.recommended, group, args.repeat)

        time_writes(db, run.recommended, args.insert_rows)
        drop_index(db, run.recommended.index)
        for name in created:
            drop_index(db, name)
        time_writes(db, run.without, args.insert_rows)
        log("stopping the cluster")
    run.wall_seconds = time.perf_counter() - started
    print_report(run)
    return 0


if __name__ == "__main__":
    sys.exit(main())
