"""Benchmark of the SPEC §2 figures at 1 M and 10 M rows and 10 k–1 M dead letters (issue 11).

Starts its own throwaway PostgreSQL cluster (with ``pg_stat_statements`` preloaded when the
server has it, else every statement is timed by ``EXPLAIN (ANALYZE, BUFFERS)``) and, for each
size in ``--sizes``, in a database of its own:

1. seeds the table once as ``figures.py`` does (30 days, realistic errors, a third of the dead
   letters' with a stack trace of ≈ 900 characters), with as many dead letters as the largest
   level of ``--dead-letters`` (at most half the table);
2. sets the backlog (pending and processing rows, stuck locks included) to 1 % of the table,
   by changing rows' status in place, and runs init-db (the recommended indexes);
3. for each dead-letter level, largest first, keeps that many dead letters (the others become
   done rows, in place), VACUUMs, and times the error groups (warm), ``status --json`` and a
   whole Overview refresh;
4. at the smallest level, times every figure the Overview and ``status --json`` read, with the
   backlog at 1 % of the table ("growing") and at 1 % of the smallest size ("constant");
5. drops the recommended indexes and times the pattern's own queries (the figures written the
   naive way) on the users' indexes at both backlogs.

Every time is the database's: the sum of the execution times of the statements a call ran
(``pg_stat_statements``), median of ``--repeat`` calls after one warm-up. The report is Markdown
on stdout: the targets of issue 11 with PASS/MISS (and the plans behind each MISS), the growth
from the smallest to the largest size, the ratio against the pattern, the dead-letter levels,
``status --json`` as a whole process of the installed CLI, and how long each step took.

Usage (from the repository root, with the package installed)::

    .venv/bin/python benchmarks/scale.py [--sizes 1000000,10000000]
        [--dead-letters 10000,100000,1000000] [--repeat 7] [--pattern-repeat 3]

``--sizes 20000,50000 --dead-letters 200,2000 --repeat 3`` is a smoke run of well under a
minute. The benchmark's SQL is in ``benchmarks/queries.sql`` (``benchmark_scale_*`` blocks).
"""

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psycopg
import streamlit.logger
from psycopg import sql
from psycopg.rows import dict_row

sys.path.insert(0, str(Path(__file__).parent))

from figures import (  # figures.py: the script next to this one, on sys.path above
    RecordingDatabase,
    drop_index,
    log,
    ms,
    scans,
    seed,
)

from outbox_monitor.alerts import stall
from outbox_monitor.config.settings import load_settings
from outbox_monitor.demo.pgcluster import TemporaryCluster
from outbox_monitor.errors import OutboxMonitorError
from outbox_monitor.figures import error_grouping, estimates, metrics
from outbox_monitor.store import indexes, schema

# The Overview's bucket and tile window come from its own modules; importing them outside a
# Streamlit server logs "No runtime found" once per cached loader, which is expected here.
streamlit.logger.set_log_level("error")

from outbox_monitor.ui.loaders import bucket_for  # noqa: E402
from outbox_monitor.ui.slo import FAILED_TILE_WINDOW_SECONDS  # noqa: E402

DAYS = 30.0
WINDOW = 3600.0  # the Overview's default window and status --json's
BACKLOG_SHARE = 0.01  # the pattern's ≈ 1 % backlog
MAX_DEAD_LETTER_SHARE = 0.5  # a level above half the table is capped there
STATEMENT_TIMEOUT_SECONDS = 600.0
ERROR_GROUPS_PATTERN_LIMIT = 200
# Targets of issue 11 (DB ms at 10 M rows, ≈ 1 % backlog); see target_* below.
OVERVIEW_TARGET_MS = 30.0
STATUS_TARGET_MS = 30.0
STATUS_MANY_DEAD_LETTERS_TARGET_MS = 150.0
ERROR_GROUPS_TARGET_MS = 100.0
ERROR_GROUPS_MANY_TARGET_MS = 300.0


# ------------------------------------------------------------------------- DB time


@dataclass(frozen=True)
class Sample:
    """One measured call (or the medians of several, ``Sample.median_of``): DB execution ms,
    8 kB pages, statements (``None`` where the DB time is unknown), wall ms."""

    db_ms: float | None
    pages: int | None
    statements: int | None
    wall_ms: float

    def __add__(self, other: "Sample") -> "Sample":
        def plus(a: Any, b: Any) -> Any:
            return None if a is None or b is None else a + b

        return Sample(
            plus(self.db_ms, other.db_ms),
            plus(self.pages, other.pages),
            plus(self.statements, other.statements),
            self.wall_ms + other.wall_ms,
        )

    @classmethod
    def median_of(cls, samples: list["Sample"]) -> "Sample":
        def median(values: list[Any]) -> Any:
            return None if any(v is None for v in values) else statistics.median(values)

        return cls(
            median([s.db_ms for s in samples]),
            median([s.pages for s in samples]),
            median([s.statements for s in samples]),
            statistics.median(s.wall_ms for s in samples),
        )


@dataclass(frozen=True)
class Statement:
    """One statement of a call, as ``EXPLAIN (ANALYZE, BUFFERS)`` saw it."""

    query: str
    exec_ms: float
    pages: int
    heap_fetches: int
    scans: str


def heap_fetches(node: dict[str, Any]) -> int:
    """Heap fetches of the index-only scans of one plan tree."""
    return node.get("Heap Fetches", 0) + sum(heap_fetches(c) for c in node.get("Plans", []))


def explain_call(db: RecordingDatabase, call: Callable[[], object]) -> list[Statement]:
    """Run ``call`` once recording its statements, then ``EXPLAIN (ANALYZE, BUFFERS)`` each
    (which runs it again)."""
    with db.recording() as calls:
        call()
    table = db.settings.table_parts[1]
    found = []
    for name, params, fragments in calls:
        row = db.fetch_one("benchmark_explain", params, query=db.compose(name, **fragments))
        document = row["QUERY PLAN"]
        top = json.loads(document) if isinstance(document, str) else document
        plan = top[0]["Plan"]
        found.append(
            Statement(
                query=name,
                exec_ms=top[0]["Execution Time"],
                pages=plan.get("Shared Hit Blocks", 0) + plan.get("Shared Read Blocks", 0),
                heap_fetches=heap_fetches(plan),
                scans=", ".join(dict.fromkeys(scans(plan, table, f"{table}_"))) or "no table scan",
            )
        )
    return found


class Meter:
    """DB time of one call: from ``pg_stat_statements`` (reset before the call, summed after)
    when the server loaded it, else from ``EXPLAIN (ANALYZE, BUFFERS)`` of each statement the
    call ran (``explain_call``; instrumentation adds its own overhead)."""

    def __init__(self, db: RecordingDatabase, statements: bool) -> None:
        self.db = db
        self.statements = statements
        self._admin = (
            psycopg.connect(db.settings.dsn or "", autocommit=True, row_factory=dict_row)
            if statements
            else None
        )

    def close(self) -> None:
        if self._admin is not None:
            self._admin.close()

    def _reset(self) -> None:
        self._admin.execute(self.db.compose("benchmark_scale_statements_reset"))

    def _read(self, wall_ms: float) -> Sample:
        row = self._admin.execute(self.db.compose("benchmark_scale_statements_read")).fetchone()
        return Sample(row["exec_ms"], row["pages"], row["statements"], wall_ms)

    def measure(self, call: Callable[[], object]) -> Sample:
        """One call of ``call`` and its DB time."""
        if self._admin is None:
            start = time.perf_counter()
            call()
            wall = (time.perf_counter() - start) * 1000
            found = explain_call(self.db, call)
            return Sample(
                sum(s.exec_ms for s in found),
                sum(s.pages for s in found),
                len(found),
                wall,
            )
        self._reset()
        start = time.perf_counter()
        call()
        return self._read((time.perf_counter() - start) * 1000)

    def measure_process(self, command: list[str], env: dict[str, str]) -> Sample:
        """One run of ``command`` as a process: its wall ms and (pg_stat_statements only) the
        DB time of every statement it ran."""
        if self._admin is not None:
            self._reset()
        start = time.perf_counter()
        result = subprocess.run(command, env=env, capture_output=True, text=True)
        wall = (time.perf_counter() - start) * 1000
        if result.returncode != 0:
            raise RuntimeError(f"{' '.join(command)} failed: {result.stderr.strip()}")
        json.loads(result.stdout)
        if self._admin is None:
            return Sample(None, None, None, wall)
        return self._read(wall)


def rounds(meter: Meter, calls: dict[str, Callable[[], object]], repeat: int) -> dict:
    """``repeat + 1`` rounds of every call in turn (the first round warms up and is dropped);
    returns ``{name: [Sample, ...]}``. Interleaving the calls spreads load drift over all."""
    samples: dict[str, list[Sample]] = {name: [] for name in calls}
    for round_ in range(repeat + 1):
        for name, call in calls.items():
            sample = meter.measure(call)
            if round_:
                samples[name].append(sample)
    return samples


# ------------------------------------------------------------------------- figures


@dataclass(frozen=True)
class Figure:
    """One call the Overview or ``status --json`` makes, the pattern's equivalent, and the
    wholes (``status``, ``cli``, ``overview``) it is part of."""

    name: str
    product: Callable[[], object]
    pattern: Callable[[], object]
    pattern_sql: str
    parts: frozenset[str]


STATUS_PARTS = frozenset({"status", "cli", "overview"})
WHOLES = {
    "status": "metrics.status (every figure of status --json)",
    "cli": "status --json (table check + metrics.status)",
    "overview": "Overview refresh (every loader of its live fragment)",
}


def run_blocks(db: RecordingDatabase, *blocks: tuple[str, dict[str, Any]]) -> Callable[[], None]:
    """A call running the named blocks one after another."""

    def call() -> None:
        for name, params in blocks:
            db.fetch_all(name, params)

    return call


def overview_refresh(db: RecordingDatabase) -> None:
    """What the Overview's live fragment loads at each refresh (pages/overview.py
    ``live_figures``, no event-type filter, the default 1 h window)."""
    stall.read_lease(db)
    metrics.status(db, window=WINDOW, count_cap=estimates.DASHBOARD_COUNT_CAP)
    metrics.failed_in_window(db, window=FAILED_TILE_WINDOW_SECONDS)
    metrics.samples_series(db, window=WINDOW)
    metrics.throughput_series(db, window=WINDOW, bucket=bucket_for(WINDOW))
    metrics.latency_series(db, window=WINDOW, bucket=bucket_for(WINDOW))


def status_json(db: RecordingDatabase) -> None:
    """What ``outbox-monitor status --json`` runs once connected (cli/figures.py ``status``)."""
    schema.check_outbox_table(db)
    metrics.status(db, window=WINDOW)


def build_figures(db: RecordingDatabase) -> list[Figure]:
    """Every call of ``metrics.status``, of ``status --json`` and of an Overview refresh, in
    their order, each with the pattern's query on the users' indexes."""
    lock_timeout = {"lock_timeout": db.settings.lock_timeout}
    window = {"window": WINDOW}
    bucket = {"window": WINDOW, "bucket": bucket_for(WINDOW)}
    own, same, naive = "product's (own tables)", "product's SQL", "naive: "

    def fig(name, product, parts, pattern=None, pattern_sql=own):
        return Figure(name, product, pattern or product, pattern_sql, frozenset(parts))

    def blocks(*names_params):
        return run_blocks(db, *names_params)

    return [
        fig(
            "table check (schema.check_outbox_table)",
            lambda: schema.check_outbox_table(db),
            {"cli"},
        ),
        fig("alert lease (alerts.stall.read_lease)", lambda: stall.read_lease(db), {"overview"}),
        fig("now()", lambda: db.fetch_one("db_now"), STATUS_PARTS),
        fig(
            "backlog (metrics.backlog: the six above and the backlog by attempts)",
            lambda: metrics.backlog(db),
            STATUS_PARTS,
            blocks(
                ("queue_depth", {}),
                ("pending_total", {}),
                ("scheduled_retries", {}),
                ("benchmark_scale_pattern_oldest_pending_age", {}),
                ("processing", {}),
                ("stuck_locks", lock_timeout),
                ("benchmark_scale_pattern_attempts_histogram", {}),
            ),
            "the six counts apart and the naive histogram of rows not done",
        ),
        fig(
            "queue_depth",
            lambda: metrics.queue_depth(db),
            (),
            blocks(("queue_depth", {})),
            same,
        ),
        fig(
            "pending_total",
            lambda: metrics.pending_total(db),
            (),
            blocks(("pending_total", {})),
            same,
        ),
        fig(
            "scheduled_retries",
            lambda: metrics.scheduled_retries(db),
            (),
            blocks(("scheduled_retries", {})),
            same,
        ),
        fig(
            "oldest_pending_age",
            lambda: metrics.oldest_pending_age(db),
            (),
            blocks(("benchmark_scale_pattern_oldest_pending_age", {})),
            naive + "min(created_at) of pending rows",
        ),
        fig(
            "processing",
            lambda: metrics.processing(db),
            (),
            blocks(("processing", {})),
            same,
        ),
        fig(
            "stuck_locks",
            lambda: metrics.stuck_locks(db),
            (),
            blocks(("stuck_locks", lock_timeout)),
            same,
        ),
        fig(
            "latency_percentiles 1h",
            lambda: metrics.latency_percentiles(db, window=WINDOW),
            STATUS_PARTS,
            blocks(("benchmark_scale_pattern_latency_percentiles", window)),
            naive + "percentile_cont over done rows of the window",
        ),
        fig(
            "throughput 1h",
            lambda: metrics.throughput(db, window=WINDOW),
            STATUS_PARTS,
            blocks(
                ("benchmark_scale_pattern_processed_in_window", window),
                ("benchmark_scale_pattern_created_in_window", window),
            ),
            naive + "count(*) done / created in the window",
        ),
        fig(
            "failed_by_event_type 1h",
            lambda: metrics.failed_by_event_type(db, window=WINDOW),
            STATUS_PARTS,
            blocks(("benchmark_scale_pattern_failed_by_event_type", window)),
            naive + "failed rows of the window by event_type",
        ),
        fig(
            "attempts_histogram",
            lambda: metrics.attempts_histogram(db),
            (),
            blocks(("benchmark_scale_pattern_attempts_histogram", {})),
            naive + "rows not done by attempts",
        ),
        fig(
            "failed_in_window 24h (tile)",
            lambda: metrics.failed_in_window(db, window=FAILED_TILE_WINDOW_SECONDS),
            {"overview"},
            blocks(
                (
                    "benchmark_scale_pattern_failed_by_event_type",
                    {"window": FAILED_TILE_WINDOW_SECONDS},
                )
            ),
            naive + "failed rows of 24 h by event_type",
        ),
        fig("samples_series 1h", lambda: metrics.samples_series(db, window=WINDOW), {"overview"}),
        fig(
            "throughput_series 1h/1m",
            lambda: metrics.throughput_series(db, window=WINDOW, bucket=bucket_for(WINDOW)),
            {"overview"},
            blocks(("benchmark_scale_pattern_throughput_series", bucket)),
            naive + "date_bin of created_at / processed_at",
        ),
        fig(
            "latency_series 1h/1m",
            lambda: metrics.latency_series(db, window=WINDOW, bucket=bucket_for(WINDOW)),
            {"overview"},
            blocks(("latency_series", bucket)),
            same,
        ),
        fig(
            "error_groups (Dead letters page)",
            lambda: error_grouping.error_groups(db),
            (),
            blocks(("benchmark_error_groups_before", {"limit": ERROR_GROUPS_PATTERN_LIMIT})),
            naive + "every failed row normalised (the query before the cache)",
        ),
    ]


@dataclass
class Table:
    """Median stats of every figure and whole, for one side (product or pattern)."""

    figures: dict[str, Sample] = field(default_factory=dict)
    wholes: dict[str, Sample] = field(default_factory=dict)
    load: float = 0.0  # 1-minute load average when it was measured


def measure_product(meter: Meter, figures: list[Figure], repeat: int) -> Table:
    """Every figure and every whole called as the product calls it."""
    db = meter.db
    calls = {f.name: f.product for f in figures}
    calls |= {
        WHOLES["status"]: lambda: metrics.status(db, window=WINDOW),
        WHOLES["cli"]: lambda: status_json(db),
        WHOLES["overview"]: lambda: overview_refresh(db),
    }
    load = os.getloadavg()[0]
    samples = rounds(meter, calls, repeat)
    table = Table(load=load)
    for name, values in samples.items():
        target = table.wholes if name in WHOLES.values() else table.figures
        target[name] = Sample.median_of(values)
    return table


def measure_pattern(meter: Meter, figures: list[Figure], repeat: int) -> Table:
    """Every figure's pattern query; a whole is the sum of its parts' pattern queries, round
    by round (they run one after another, as a refresh would)."""
    load = os.getloadavg()[0]
    samples = rounds(meter, {f.name: f.pattern for f in figures}, repeat)
    table = Table(load=load)
    for name, values in samples.items():
        table.figures[name] = Sample.median_of(values)
    for key, label in WHOLES.items():
        parts = [samples[f.name] for f in figures if key in f.parts]
        table.wholes[label] = Sample.median_of([sum(r[1:], r[0]) for r in zip(*parts, strict=True)])
    return table


# ------------------------------------------------------------------------- one size


@dataclass
class Level:
    """One dead-letter level: its measurements (median stats) and the steps to reach it."""

    nominal: int
    applied: int
    failed: int = 0
    groups: int = 0
    error_groups: Sample | None = None
    status: Sample | None = None
    overview: Sample | None = None
    set_seconds: float | None = None
    recount_seconds: float = 0.0
    recount_calls: int = 0
    load: float = 0.0


@dataclass
class Target:
    """One target of issue 11 checked at one size."""

    rows: int
    name: str
    condition: str
    limit_ms: float
    measured: Sample
    plans: list[Statement] = field(default_factory=list)

    @property
    def passed(self) -> bool:
        return self.measured.db_ms is not None and self.measured.db_ms <= self.limit_ms


@dataclass
class Size:
    """Everything measured at one table size."""

    rows: int
    backlog_growing: int
    backlog_constant: int
    steps: list[tuple[str, float]] = field(default_factory=list)
    counts: dict[str, int] = field(default_factory=dict)
    status: dict[str, Any] = field(default_factory=dict)
    sizes: list[dict[str, Any]] = field(default_factory=list)
    levels: list[Level] = field(default_factory=list)
    product: dict[str, Table] = field(default_factory=dict)  # by backlog kind
    pattern: dict[str, Table] = field(default_factory=dict)
    cli: list[Sample] = field(default_factory=list)
    targets: list[Target] = field(default_factory=list)

    @contextmanager
    def step(self, label: str) -> Iterator[None]:
        """Time one step (logged, and listed in the report)."""
        log(f"{self.rows:,} rows: {label}")
        start = time.perf_counter()
        yield
        self.steps.append((label, time.perf_counter() - start))


def status_target_ms(dead_letters: int) -> float:
    """status --json: ≤ 30 ms up to 10 k dead letters, ≤ 150 ms up to 1 M."""
    return STATUS_TARGET_MS if dead_letters <= 10_000 else STATUS_MANY_DEAD_LETTERS_TARGET_MS


def error_groups_target_ms(dead_letters: int) -> float:
    """Error groups: ≤ 100 ms up to 100 k dead letters, ≤ 300 ms above."""
    return ERROR_GROUPS_TARGET_MS if dead_letters <= 100_000 else ERROR_GROUPS_MANY_TARGET_MS


@contextmanager
def in_place(db: RecordingDatabase) -> Iterator[psycopg.Connection]:
    """A connection to change rows' status in place, then VACUUM ANALYZE (an autovacuum that
    caught up). Its commits are flushed at once (the cluster runs synchronous_commit=off), so
    that VACUUM can set hint bits and mark every page all-visible, as after the seed."""
    with db.direct_connection(statement_timeout=None) as conn:
        conn.execute(db.compose("benchmark_synchronous_commit"))
        yield conn
        conn.execute(db.compose("benchmark_scale_vacuum"))


def set_backlog(db: RecordingDatabase, size: Size, backlog: int) -> None:
    """Exactly ``backlog`` pending and processing rows, among the newest (at least a day's
    rows and three times the backlog), then VACUUM ANALYZE."""
    candidates = max(3 * backlog, round(size.rows / DAYS))
    with in_place(db) as conn:
        conn.execute(db.compose("benchmark_scale_backlog_clear"))
        first = conn.execute(
            db.compose("benchmark_scale_backlog_first_id"), {"candidates": candidates}
        ).fetchone()["first_id"]
        conn.execute(
            db.compose("benchmark_scale_backlog_set"), {"first_id": first, "rows": backlog}
        )


def drop_recommended_indexes(db: RecordingDatabase) -> None:
    table = db.settings.table_parts[1]
    for index in indexes.RECOMMENDED_INDEXES:
        drop_index(db, index.name(table))


def explain_if_missed(db: RecordingDatabase, target: Target, call: Callable[[], object]) -> Target:
    """Attach the plans of ``call``'s statements to a missed target."""
    if not target.passed:
        target.plans = explain_call(db, call)
    return target


def measure_level(meter: Meter, size: Size, level: Level, repeat: int) -> None:
    """Error groups (warm), status --json and an Overview refresh at one dead-letter level."""
    db = meter.db
    start = time.perf_counter()
    level.recount_calls = error_grouping.refresh_error_groups(db)
    level.recount_seconds = time.perf_counter() - start
    level.failed = db.fetch_one("benchmark_scale_count_failed")["rows"]
    level.groups = len(error_grouping.error_groups(db))
    level.load = os.getloadavg()[0]
    samples = rounds(
        meter,
        {
            "error_groups": lambda: error_grouping.error_groups(db),
            "status": lambda: status_json(db),
            "overview": lambda: overview_refresh(db),
        },
        repeat,
    )
    level.error_groups = Sample.median_of(samples["error_groups"])
    level.status = Sample.median_of(samples["status"])
    level.overview = Sample.median_of(samples["overview"])
    condition = f"{size.backlog_growing:,} not done (1 %), {level.failed:,} dead letters"
    size.targets.append(
        explain_if_missed(
            db,
            Target(
                size.rows,
                "status --json",
                condition,
                status_target_ms(level.nominal),
                level.status,
            ),
            lambda: status_json(db),
        )
    )
    if level.nominal >= 100_000:
        size.targets.append(
            explain_if_missed(
                db,
                Target(
                    size.rows,
                    "error groups (warm)",
                    condition,
                    error_groups_target_ms(level.nominal),
                    level.error_groups,
                ),
                lambda: error_grouping.error_groups(db),
            )
        )


def time_cli(meter: Meter, cli: Path, repeat: int) -> list[Sample]:
    """``cli status --json`` as whole processes (first run dropped), on the size's database."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("OUTBOX_MONITOR_")}
    env["OUTBOX_MONITOR_DSN"] = meter.db.settings.dsn or ""
    env["OUTBOX_MONITOR_TABLE"] = meter.db.table_name
    runs = [meter.measure_process([str(cli), "status", "--json"], env) for _ in range(repeat + 1)]
    return runs[1:]


def measure_size(
    cluster: TemporaryCluster, args: argparse.Namespace, rows: int, statements: bool
) -> Size:
    """Seed one size in a database of its own and measure it (see the module docstring)."""
    size = Size(
        rows,
        backlog_growing=round(rows * BACKLOG_SHARE),
        backlog_constant=round(min(args.sizes) * BACKLOG_SHARE),
    )
    database = f"scale_{rows}"
    admin = RecordingDatabase(load_settings(dsn=cluster.dsn))
    with admin.direct_connection(statement_timeout=None) as conn:
        conn.execute(
            admin.compose("benchmark_scale_drop_database", database=sql.Identifier(database))
        )
        conn.execute(
            admin.compose("benchmark_scale_create_database", database=sql.Identifier(database))
        )
    settings = load_settings(
        dsn=cluster.dsn_for(database), statement_timeout=STATEMENT_TIMEOUT_SECONDS
    )
    levels = []
    for nominal in sorted(set(args.dead_letters), reverse=True):
        applied = min(nominal, int(rows * MAX_DEAD_LETTER_SHARE))
        if all(level.applied != applied for level in levels):
            levels.append(Level(nominal, applied))
    with ExitStack() as stack:
        db = stack.enter_context(RecordingDatabase(settings))
        schema.init_db(db, create_table=True, create_indexes=False)
        if statements:
            with db.connection() as conn:
                conn.execute(db.compose("benchmark_scale_create_extension"))
        meter = Meter(db, statements)
        stack.callback(meter.close)
        figures = build_figures(db)

        with size.step(f"seed ({levels[0].applied:,} dead letters) and VACUUM ANALYZE"):
            seed(db, rows, DAYS, failed_share=levels[0].applied / rows)
        with size.step(f"backlog set to {size.backlog_growing:,} rows (1 %)"):
            set_backlog(db, size, size.backlog_growing)
        with size.step("init-db: recommended indexes (CONCURRENTLY)"):
            schema.init_db(db)
        with size.step(f"error groups: first refresh (fills the cache, {levels[0].applied:,})"):
            error_grouping.refresh_error_groups(db)

        for index, level in enumerate(levels):
            if index:
                start = time.perf_counter()
                with (
                    size.step(f"dead letters cut to {level.applied:,}, VACUUM ANALYZE"),
                    in_place(db) as conn,
                ):
                    conn.execute(
                        db.compose("benchmark_scale_dead_letters_keep"), {"keep": level.applied}
                    )
                level.set_seconds = time.perf_counter() - start
            with size.step(f"measure {level.applied:,} dead letters (recount first)"):
                measure_level(meter, size, level, args.repeat)
            size.levels.append(level)

        size.counts = {r["status"]: r["rows"] for r in db.fetch_all("benchmark_status_counts")}
        size.status = metrics.status(db, window=WINDOW)
        size.sizes = db.fetch_all("benchmark_relation_sizes", {"table_regclass": db.table_name})
        with size.step("measure every figure, backlog 1 %"):
            size.product["growing"] = measure_product(meter, figures, args.repeat)
        overview = size.product["growing"].wholes[WHOLES["overview"]]
        condition = (
            f"{size.backlog_growing:,} not done (1 %), {size.levels[-1].failed:,} dead letters"
        )
        size.targets.insert(
            0,
            explain_if_missed(
                db,
                Target(rows, "Overview refresh", condition, OVERVIEW_TARGET_MS, overview),
                lambda: overview_refresh(db),
            ),
        )
        if args.cli.exists():
            with size.step(f"status --json as {args.repeat + 1} processes of the installed CLI"):
                size.cli = time_cli(meter, args.cli, args.repeat)
        constant = size.backlog_constant != size.backlog_growing
        if constant:
            with size.step(f"backlog set to {size.backlog_constant:,} rows (constant)"):
                set_backlog(db, size, size.backlog_constant)
            with size.step("measure every figure, constant backlog"):
                size.product["constant"] = measure_product(meter, figures, args.repeat)
        else:
            size.product["constant"] = size.product["growing"]

        with size.step("drop the recommended indexes (the users' indexes only)"):
            drop_recommended_indexes(db)
        first, second = ("constant", "growing") if constant else ("growing", "constant")
        with size.step(f"measure the pattern's queries, {first} backlog"):
            size.pattern[first] = measure_pattern(meter, figures, args.pattern_repeat)
        if constant:
            with size.step(f"backlog set to {size.backlog_growing:,} rows (1 %), again"):
                set_backlog(db, size, size.backlog_growing)
            with size.step("measure the pattern's queries, backlog 1 %"):
                size.pattern[second] = measure_pattern(meter, figures, args.pattern_repeat)
        else:
            size.pattern[second] = size.pattern[first]
    with admin.direct_connection(statement_timeout=None) as conn:
        conn.execute(
            admin.compose("benchmark_scale_drop_database", database=sql.Identifier(database))
        )
    admin.close()
    return size


# ------------------------------------------------------------------------- cluster


def preload_stat_statements(cluster: TemporaryCluster, shared_buffers: str, want: bool) -> bool:
    """Set ``shared_buffers`` and, when ``want`` and the server has it, preload
    ``pg_stat_statements``; restart. Returns whether it is loaded."""
    admin = RecordingDatabase(load_settings(dsn=cluster.dsn))
    settings = {"shared_buffers": shared_buffers}
    with admin.direct_connection(statement_timeout=None) as conn:
        found = conn.execute(admin.compose("benchmark_scale_stat_statements_available")).fetchone()
        library = any(Path(found["pkglibdir"]).glob("pg_stat_statements.*"))
        if want and found["available"] and library:
            settings["shared_preload_libraries"] = "pg_stat_statements"
        for name, value in settings.items():
            conn.execute(
                admin.compose(
                    "benchmark_scale_alter_system",
                    setting=sql.Identifier(name),
                    value=sql.Literal(value),
                )
            )
    admin.close()
    cluster.pause()
    try:
        cluster.resume()
    except OutboxMonitorError:
        if "shared_preload_libraries" not in settings:
            raise
        # The library would not load after all: forget the preload and start without it.
        auto = cluster.data / "postgresql.auto.conf"
        lines = auto.read_text().splitlines(keepends=True)
        auto.write_text("".join(line for line in lines if "pg_stat_statements" not in line))
        cluster.resume()
        return False
    return "shared_preload_libraries" in settings


# ------------------------------------------------------------------------- report


def cell(stats: Sample | None) -> str:
    """DB ms of a median, or "–"."""
    return "–" if stats is None or stats.db_ms is None else ms(stats.db_ms)


def pages(stats: Sample | None) -> str:
    return "–" if stats is None or stats.pages is None else f"{stats.pages:,.0f}"


def times(numerator: Sample | None, denominator: Sample | None) -> str:
    """``numerator / denominator`` of two DB times, as "12.3×"."""
    if numerator is None or denominator is None or not denominator.db_ms:
        return "–"
    if numerator.db_ms is None:
        return "–"
    return f"{numerator.db_ms / denominator.db_ms:,.1f}×"


def verdict(target: Target) -> str:
    return "PASS" if target.passed else "**MISS**"


@dataclass
class Run:
    """Everything the report needs."""

    args: argparse.Namespace
    statements: bool
    server: dict[str, Any]
    sizes: list[Size]
    load_before: tuple[float, float, float]
    load_after: tuple[float, float, float] = (0.0, 0.0, 0.0)
    wall_seconds: float = 0.0


def print_setup(run: Run) -> None:
    args, server = run.args, run.server
    print(f"- command: `.venv/bin/python benchmarks/scale.py {' '.join(sys.argv[1:])}`")
    print(
        f"- machine: {platform.machine()}, {os.cpu_count()} cores, {platform.system()} "
        f"{platform.release()}, Python {platform.python_version()}; load average (1, 5, 15 min) "
        f"before {' '.join(f'{x:.2f}' for x in run.load_before)}, after "
        f"{' '.join(f'{x:.2f}' for x in run.load_after)}; whole run {run.wall_seconds:,.0f} s"
    )
    print(
        f"- server: {server['version'].split(' on ')[0]}; shared_buffers "
        f"{server['shared_buffers']}, work_mem {server['work_mem']}, "
        f"max_parallel_workers_per_gather {server['parallel_workers']}; fsync off"
    )
    source = (
        "pg_stat_statements (sum of total_exec_time of the call's statements; no planning)"
        if run.statements
        else "EXPLAIN (ANALYZE, BUFFERS) of each statement the call ran (sum of Execution Time)"
    )
    print(
        f"- DB ms = {source}; median of {args.repeat} calls after one warm-up "
        f"(pattern: {args.pattern_repeat}); pages = 8 kB buffers hit or read"
    )
    print(
        f"- table: {DAYS:g} days of rows seeded as figures.py does; backlog = pending and "
        "processing rows (13.6 % processing, 0.4 % of the backlog stuck locks, 34 % pending in "
        "backoff) among the newest rows; growing = 1 % of the table, constant = 1 % of the "
        "smallest size; window 1 h; no event-type filter\n"
    )


def print_data(run: Run) -> None:
    print("### Data\n")
    print(
        "| rows | done / failed / pending / processing | table MB | indexes MB "
        "| queue depth | scheduled retries | processing | stuck locks | oldest pending age s "
        "| P95 s | processed/min | failed 1 h |"
    )
    print("|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for size in run.sizes:
        c, s = size.counts, size.status
        table_bytes = sum(r["bytes"] for r in size.sizes if not r["is_index"])
        index_bytes = sum(r["bytes"] for r in size.sizes if r["is_index"])
        p95 = s["latency_seconds"]["p95"]
        print(
            f"| {size.rows:,} | {c.get('done', 0):,} / {c.get('failed', 0):,} / "
            f"{c.get('pending', 0):,} / {c.get('processing', 0):,} "
            f"| {table_bytes / 2**20:,.0f} | {index_bytes / 2**20:,.0f} "
            f"| {s['queue_depth']:,} | {s['scheduled_retries']:,} | {s['processing']:,} "
            f"| {s['stuck_locks']:,} | {s['oldest_pending_age_seconds'] or 0:,.0f} "
            f"| {'–' if p95 is None else f'{p95:.1f}'} | {s['processed_per_minute']:.1f} "
            f"| {s['failed_in_window']:,} |"
        )
    print(
        "\n(at the last dead-letter level and the 1 % backlog; sizes with the recommended "
        "indexes)\n"
    )


def print_targets(run: Run) -> None:
    print("### Targets (issue 11: stated at 10 M rows)\n")
    print("| rows | what | condition | DB ms | target ms | |")
    print("|---:|---|---|---:|---:|:-:|")
    for size in run.sizes:
        for t in size.targets:
            print(
                f"| {t.rows:,} | {t.name} | {t.condition} | {cell(t.measured)} "
                f"| ≤ {t.limit_ms:g} | {verdict(t)} |"
            )
    print()


def two_backlogs(run: Run) -> bool:
    """Whether any size was measured at a constant backlog other than its 1 % one."""
    return any(s.backlog_constant != s.backlog_growing for s in run.sizes)


def print_figures(run: Run) -> None:
    sizes = run.sizes
    header = " | ".join(f"{s.rows:,}: DB ms (pages)" for s in sizes)
    growth = len(sizes) > 1
    kinds = (
        ("constant", "backlog held constant"),
        ("growing", "backlog growing (1 % of the table)"),
    )
    for kind, title in kinds if two_backlogs(run) else kinds[1:]:
        backlogs = ", ".join(
            f"{s.backlog_constant if kind == 'constant' else s.backlog_growing:,}" for s in sizes
        )
        print(f"### (a) Every figure, {title}: {backlogs} rows not done\n")
        print(
            f"| figure | {header} |"
            + (f" growth {sizes[-1].rows:,} / {sizes[0].rows:,} |" if growth else "")
        )
        print("|---|" + "---:|" * (len(sizes) + growth))
        names = list(sizes[0].product[kind].figures) + list(WHOLES.values())
        for name in names:
            found = [
                s.product[kind].figures.get(name) or s.product[kind].wholes.get(name) for s in sizes
            ]
            bold = "**" if name in WHOLES.values() else ""
            cells = " | ".join(f"{bold}{cell(f)}{bold} ({pages(f)})" for f in found)
            extra = f" {times(found[-1], found[0])} |" if growth else ""
            print(f"| {bold}{name}{bold} | {cells} |{extra}")
        loads = ", ".join(f"{s.rows:,}: {s.product[kind].load:.2f}" for s in sizes)
        print(f"\nLoad average (1 min) when measured: {loads}.\n")
    print("Wholes, wall ms (in process, through the package's pool, round trips included):\n")
    print("| whole | " + " | ".join(f"{s.rows:,} (1 %)" for s in sizes) + " |")
    print("|---|" + "---:|" * len(sizes))
    for label in WHOLES.values():
        cells = " | ".join(ms(s.product["growing"].wholes[label].wall_ms) for s in sizes)
        print(f"| {label} | {cells} |")
    print()


def print_pattern(run: Run, figures: list[Figure]) -> None:
    sql_of = {f.name: f.pattern_sql for f in figures}
    kinds = (("growing", "backlog 1 % of the table"), ("constant", "constant backlog"))
    for kind, title in kinds if two_backlogs(run) else kinds[:1]:
        print(f"### (b) Against the pattern's queries on the users' indexes, {title}\n")
        print(
            "pattern = the figure as the pattern computes it, run with the users' indexes only "
            "(the recommended ones dropped); a whole = the sum of its parts, round by round. "
            "× = pattern / product.\n"
        )
        head = " | ".join(f"{s.rows:,} product | pattern | ×" for s in run.sizes)
        print(f"| figure | pattern SQL | {head} |")
        print("|---|---|" + "---:|---:|---:|" * len(run.sizes))
        for name in list(run.sizes[0].pattern[kind].figures) + list(WHOLES.values()):
            cells = []
            for s in run.sizes:
                mine = s.product[kind].figures.get(name) or s.product[kind].wholes.get(name)
                theirs = s.pattern[kind].figures.get(name) or s.pattern[kind].wholes.get(name)
                cells.append(f"{cell(mine)} | {cell(theirs)} | {times(theirs, mine)}")
            bold = "**" if name in WHOLES.values() else ""
            print(f"| {bold}{name}{bold} | {sql_of.get(name, 'its parts')} | {' | '.join(cells)} |")
        print()


def print_levels(run: Run) -> None:
    print("### (c) Dead-letter levels (backlog 1 % of the table)\n")
    print(
        "Levels are reached largest first: the seed makes the largest, then every other failed "
        "row but a hashed sample becomes done, in place (then VACUUM ANALYZE). recount = the "
        "first error-groups refresh after that change (the cache recounts; calls of "
        "refresh_error_groups).\n"
    )
    print(
        "| rows | dead letters (level) | groups shown | error groups warm DB ms | target | "
        "| status --json DB ms | target | | Overview refresh DB ms | set level s | recount s "
        "(calls) | load |"
    )
    print("|---:|---|---:|---:|---:|:-:|---:|---:|:-:|---:|---:|---:|---:|")
    for size in run.sizes:
        for level in size.levels:
            label = f"{level.failed:,} ({level.nominal:,}"
            label += ", capped at half the table)" if level.applied < level.nominal else ")"
            eg_target = error_groups_target_ms(level.nominal)
            st_target = status_target_ms(level.nominal)
            eg_ok = level.error_groups.db_ms is not None and level.error_groups.db_ms <= eg_target
            st_ok = level.status.db_ms is not None and level.status.db_ms <= st_target
            print(
                f"| {size.rows:,} | {label} | {level.groups} | {cell(level.error_groups)} "
                f"| ≤ {eg_target:g} | {'PASS' if eg_ok else '**MISS**'} "
                f"| {cell(level.status)} | ≤ {st_target:g} | {'PASS' if st_ok else '**MISS**'} "
                f"| {cell(level.overview)} "
                f"| {'seeded' if level.set_seconds is None else f'{level.set_seconds:.1f}'} "
                f"| {level.recount_seconds:.1f} ({level.recount_calls}) | {level.load:.2f} |"
            )
    print()


def print_cli(run: Run) -> None:
    print(f"### `status --json` as a whole process (`{run.args.cli}`)\n")
    if not any(size.cli for size in run.sizes):
        print(f"Not run: {run.args.cli} does not exist.\n")
        return
    print(
        "Each run a new process (Python start-up, imports, connect, table check, figures); "
        "backlog 1 %, last dead-letter level; DB ms = every statement the process ran.\n"
    )
    print("| rows | wall ms median (min–max) | DB ms median | statements |")
    print("|---:|---:|---:|---:|")
    for size in run.sizes:
        walls = [s.wall_ms for s in size.cli]
        stats = Sample.median_of(size.cli)
        print(
            f"| {size.rows:,} | {ms(stats.wall_ms)} ({ms(min(walls))}–{ms(max(walls))}) "
            f"| {cell(stats)} | {'–' if stats.statements is None else f'{stats.statements:g}'} |"
        )
    print()


def print_steps(run: Run) -> None:
    print("### Steps\n")
    print("| rows | step | s |")
    print("|---:|---|---:|")
    for size in run.sizes:
        for label, seconds in size.steps:
            print(f"| {size.rows:,} | {label} | {seconds:,.1f} |")
        print(f"| {size.rows:,} | **all steps** | **{sum(s for _, s in size.steps):,.1f}** |")
    print()


def print_misses(run: Run) -> None:
    missed = [t for size in run.sizes for t in size.targets if not t.passed]
    if not missed:
        return
    print("### Plans behind each MISS\n")
    print(
        "EXPLAIN (ANALYZE, BUFFERS) of every statement of the missed call, run right after it "
        "was measured; index names without the table prefix.\n"
    )
    for t in missed:
        print(f"**{t.rows:,} rows, {t.name}** ({t.condition}): {cell(t.measured)} ms\n")
        print("| statement | exec ms | pages | heap fetches | scans |")
        print("|---|---:|---:|---:|---|")
        for s in t.plans:
            print(f"| {s.query} | {ms(s.exec_ms)} | {s.pages:,} | {s.heap_fetches:,} | {s.scans} |")
        print()


def print_report(run: Run, figures: list[Figure]) -> None:
    print("## Scale: figures at 1 M and 10 M rows (issue 11)\n")
    print_setup(run)
    print_data(run)
    print_targets(run)
    print_figures(run)
    print_pattern(run, figures)
    print_levels(run)
    print_cli(run)
    print_misses(run)
    print_steps(run)


# ------------------------------------------------------------------------- main


def numbers(text: str) -> list[int]:
    return [int(part.replace("_", "")) for part in text.split(",") if part.strip()]


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--sizes", type=numbers, default=[1_000_000, 10_000_000], help="rows per table size"
    )
    parser.add_argument(
        "--dead-letters",
        type=numbers,
        default=[10_000, 100_000, 1_000_000],
        help="dead-letter levels (each at most half a size's rows; capped there)",
    )
    parser.add_argument("--repeat", type=int, default=7, help="timed calls per product figure")
    parser.add_argument(
        "--pattern-repeat", type=int, default=3, help="timed calls per pattern query"
    )
    parser.add_argument(
        "--shared-buffers", default="1GB", help="the cluster's shared_buffers (issue 11: 1GB)"
    )
    parser.add_argument(
        "--explain",
        action="store_true",
        help="time by EXPLAIN (ANALYZE) even when pg_stat_statements could be loaded",
    )
    parser.add_argument(
        "--cli",
        type=Path,
        default=Path(sys.executable).parent / "outbox-monitor",
        help="the installed CLI to time as a process (default: next to this Python)",
    )
    args = parser.parse_args(argv)
    args.sizes = sorted(set(args.sizes))
    if not args.sizes or min(args.sizes) < 10_000 or args.repeat < 1 or args.pattern_repeat < 1:
        parser.error("need --sizes >= 10000 each, --repeat and --pattern-repeat >= 1")
    if not args.dead_letters or min(args.dead_letters) < 100:
        parser.error("each --dead-letters level must be >= 100")
    return args


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark and print the report; returns the exit status (1 when a target
    is missed)."""
    args = parse_args(argv)
    started = time.perf_counter()
    load_before = os.getloadavg()
    log("starting a throwaway PostgreSQL cluster")
    with TemporaryCluster() as cluster:
        statements = preload_stat_statements(cluster, args.shared_buffers, not args.explain)
        log(f"DB time from {'pg_stat_statements' if statements else 'EXPLAIN ANALYZE'}")
        sizes = [measure_size(cluster, args, rows, statements) for rows in args.sizes]
        with RecordingDatabase(load_settings(dsn=cluster.dsn)) as db:
            server = db.fetch_one("benchmark_server")
            figures = build_figures(db)
        log("stopping the cluster")
    run = Run(args, statements, server, sizes, load_before, os.getloadavg())
    run.wall_seconds = time.perf_counter() - started
    print_report(run, figures)
    return 0 if all(t.passed for size in sizes for t in size.targets) else 1


if __name__ == "__main__":
    sys.exit(main())
