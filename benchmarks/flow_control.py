"""Benchmark of flow control (SPEC §5, issue 13): what controls cost the workers.

Starts its own throwaway PostgreSQL cluster and seeds ``--rows`` rows of history exactly as
``figures.py`` does (with the indexes ``init-db --flow-control`` creates). The seed's
due pending rows are acked and its rows in backoff wait a day more, so that the only due rows
are a backlog of ``--backlog`` ``order.paid`` rows (default 0.5 % of the table), the newest.

1. **Throughput**: ``--workers`` threads, each on its own autocommit connection, claim batches
   of ``--batch`` and ack every row with its own statement until the backlog is drained;
   rows/s from the start of the workers to the last ack. Variants: "main" (migration 001's
   claim and ack, installed verbatim from ``001_core.sql`` as ``bench_baseline.claim``/
   ``ack``, on the same table and server), the current functions (migrations 008–010) with no
   control, with 10 controls on other event types (pauses, limits, rate limits, breakers),
   with 10 controls of which one matches the backlog (a concurrency limit of 1,000 that
   never binds), and the users' own SPEC §1 claim SQL and ack without and with the 10
   controls (they never read them). Before every run the backlog is pending again and the
   table VACUUMed; the variants take turns in alternating order on every round. With both
   ``main`` and ``flow`` among ``--variants``, their claim of ``--batch`` and the acks of its
   rows are also timed statement by statement, rolled back, without threads.
   With ``--previous-claim``, the current claim of ``--batch`` with no control is also
   timed against the claim of the migration before the newest one that defines it,
   installed verbatim as ``bench_previous.claim`` (the cost of the newest migration's change
   to the claim: migration 022's try of the change lock against 009).
2. **Claim latency behind held rows**: three copies of the table get ``--held`` older
   ``crm.contact_updated`` rows in front of the backlog, due and held by a pause on
   ``crm.%`` in two copies (one without the recommended ``pending_types`` index, as after
   ``init-db --no-indexes``), in backoff in the third (which claims the same due rows). One
   claim of ``--batch`` in a rolled-back transaction, only the statement timed, per round:
   the third copy without a control, the third copy with the same pause (holding nothing:
   the control path), each copy whose pause holds the rows. Each claim's nested statements
   are EXPLAINed (ANALYZE, BUFFERS) once through ``auto_explain``: scans, rows the scan
   read, rows removed by filter, pages.

3. **The worker API** (``--api``, issue 32 item 2; instead of 1 and 2): per-row ack, the
   shared ``outbox_monitor.ack`` against the users' UPDATE with the same WHERE, one call each
   in turn on rows claimed by one worker, ``--ack-calls`` of each (per-call ms, medians and
   their ratio, and the median of the adjacent pairs' ratios); then claim → ack throughput
   as in 1 for: the product API (claim + ``ack_many`` of the batch), the product claim with
   an ack per row, the users' SPEC §1 SQL (claim + an UPDATE per row), a baseline claim
   (``bench_barrier.claim``: the table's own static claim function of migration 030 without
   its look at the controls — the change lock's try and the static statement only) + ack_many,
   and the product API with the 10 controls on other types and with 1 matching. Use
   ``--batch 100 --backlog 30000``.

Usage (from the repository root, with the package installed; the machine is shared)::

    nice -n 10 .venv/bin/python benchmarks/flow_control.py [--rows 1000000] [--backlog N]
        [--held 200000] [--workers 4] [--batch 50] [--repeat 9] [--latency-repeat 21]
        [--variants main,flow,...] [--no-latency] [--previous-claim]
        [--api [--ack-calls 1500]]

The report goes to stdout as Markdown; progress goes to stderr. ``--rows 20000 --held 5000
--repeat 2 --latency-repeat 3`` is a smoke run of under a minute. Every ratio is the median of
the round-by-round ratios with its 95 % bootstrap interval (``paired.py``); a throughput ratio
harms below 0.95, a latency ratio above 1.05. The benchmark's SQL is in
``benchmarks/queries.sql`` (the ``benchmark_flow_*`` blocks).
"""

import argparse
import json
import os
import platform
import re
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import psycopg
from psycopg import sql
from psycopg.types.json import Jsonb

sys.path.insert(0, str(Path(__file__).parent))

from claim import removed_by_filter  # claim.py, next to this one
from figures import STATEMENT_TIMEOUT_SECONDS, RecordingDatabase, log, seed
from paired import paired_ratio, verdict  # paired.py, next to this one
from scale import preload_stat_statements  # scale.py, next to this one: sets shared_buffers

import outbox_monitor
from outbox_monitor.config.settings import load_settings
from outbox_monitor.demo.pgcluster import TemporaryCluster
from outbox_monitor.store.schema import init_db

MIGRATIONS = Path(outbox_monitor.__file__).parent / "store" / "sql" / "migrations"
MIGRATION_001 = MIGRATIONS / "001_core.sql"
CLAIM_PATTERN = r"^CREATE (?:OR REPLACE )?FUNCTION outbox_monitor\.claim\(.*?^\$\$;"
BASELINE = "bench_baseline"
BARRIER = "bench_barrier"
# the table's claim function's look at the controls (migration 030), cut for the baseline
CONTROLS_LOOK = re.compile(
    r"\n\s*IF EXISTS \(SELECT FROM outbox_monitor\.controls c WHERE c\.outbox = p_table\) THEN"
    r".*?END IF;",
    re.S,
)
ACK_WARMUP_CALLS = 20
PREVIOUS = "bench_previous"
PRODUCT = "outbox_monitor"
WORKER = "benchmark-flow"
SOURCE = "integration_outbox"
HELD_TABLE = "outbox_held"
PLAIN_TABLE = "outbox_unheld"
HOLD_FILTER = "crm.%"
THROUGHPUT_BOUND = 0.95
LATENCY_BOUND = 1.05
HELD_NO_INDEX_TABLE = "outbox_held_no_index"


def control(event_type_filter: str, **settings: Any) -> dict[str, Any]:
    """One control row's settings, every column named (``benchmark_flow_controls_define``)."""
    row = {
        "event_type_filter": event_type_filter,
        "paused": False,
        "pause_reason": None,
        "concurrency_limit": None,
        "rate_per_second": None,
        "burst": None,
        "breaker": False,
    }
    return {**row, **settings}


# Ten controls on event types other than the backlog's order.paid: every kind, as an operator
# would set them (breakers make every ack log its outcome's check).
OTHER_CONTROLS = [
    control("crm.%", paused=True, pause_reason="CRM maintenance"),
    control("notification.slack", concurrency_limit=5),
    control("notification.email", rate_per_second=10.0, burst=20),
    control("payment.captured", breaker=True),
    control("invoice.sent", breaker=True, concurrency_limit=20),
    control("notification.%", rate_per_second=100.0, burst=100),
    control("legacy.%", paused=True, pause_reason="retired consumer"),
    control("webhook.%", breaker=True, rate_per_second=50.0, burst=50),
    control("invoice.%", concurrency_limit=10),
    control("crm.contact_updated", breaker=True),
]
MATCHING_CONTROL = control("order.%", concurrency_limit=1000)
# The same filters with no breaker (a breaker-only control becomes a limit of 50): separates
# what the claim pays for controls from what the ack pays for breakers (any breaker on the
# table makes every ack call record_outcome).
NO_BREAKER_CONTROLS = [
    {**row, "breaker": False, "concurrency_limit": row["concurrency_limit"] or 50}
    for row in OTHER_CONTROLS
]


@dataclass(frozen=True)
class Variant:
    key: str
    label: str
    schema: str | None  # the claim and ack functions' schema; None: the users' SPEC §1 SQL
    controls: list[dict[str, Any]]
    ack_many: bool = False  # the batch acked by one outbox_monitor.ack_many


VARIANTS = (
    Variant("main", "main before flow control (001), no control", BASELINE, []),
    Variant("flow", "flow control (008–010), no control", PRODUCT, []),
    Variant("flow+10", "008–010, 10 controls on other types", PRODUCT, OTHER_CONTROLS),
    Variant(
        "flow+1",
        "008–010, 10 controls, 1 matching (limit 1,000 on order.%)",
        PRODUCT,
        [*OTHER_CONTROLS[:9], MATCHING_CONTROL],
    ),
    Variant("flow+10nb", "008–010, the 10 controls without breakers", PRODUCT, NO_BREAKER_CONTROLS),
    Variant("users", "users' SPEC §1 SQL, no control", None, []),
    Variant("users+10", "users' SPEC §1 SQL, 10 controls", None, OTHER_CONTROLS),
)
# (variant, against, what the ratio checks)
THROUGHPUT_RATIOS = (
    ("flow", "main", "no control: 008–010 vs main (gate: ≥ 0.95)"),
    ("flow+10", "flow", "10 controls on other types vs none"),
    ("flow+1", "flow", "10 controls, 1 matching vs none"),
    ("flow+10nb", "flow", "the 10 without breakers vs none"),
    ("flow+10", "main", "10 controls on other types vs main"),
    ("users+10", "users", "users' SQL: 10 controls vs none"),
)
API_VARIANTS = (
    Variant("api", "product API (030): claim + ack_many, no control", PRODUCT, [], True),
    Variant("api-ack", "product claim + ack per row (030), no control", PRODUCT, []),
    Variant("seed", "users' SPEC §1 SQL: claim + UPDATE per row", None, []),
    Variant(
        "barrier",
        "baseline: the table's static claim, change lock's try only, + ack_many",
        BARRIER,
        [],
        True,
    ),
    Variant("api+10", "product API, 10 controls on other types", PRODUCT, OTHER_CONTROLS, True),
    Variant(
        "api+1",
        "product API, 10 controls, 1 matching (limit 1,000 on order.%)",
        PRODUCT,
        [*OTHER_CONTROLS[:9], MATCHING_CONTROL],
        True,
    ),
)
# (variant, against, what the ratio checks, its goal: a throughput ratio at least this)
API_RATIOS = (
    ("api", "seed", "product API vs the users' SQL", 0.90),
    ("api-ack", "seed", "product claim + ack per row vs the users' SQL", None),
    ("api", "barrier", "flow control unused: no control vs the barrier-only baseline", 0.95),
    ("api+10", "api", "flow control used: 10 controls on other types vs none", 0.90),
    ("api+1", "api", "flow control used: 10 controls, 1 matching vs none", 0.90),
)
LATENCY_CELLS = (
    ("unheld", f"{PLAIN_TABLE}: no control (the same due rows; held rows in backoff)"),
    ("unheld+pause", f"{PLAIN_TABLE}: pause {HOLD_FILTER} defined, holding no row"),
    ("held", f"{HELD_TABLE}: pause {HOLD_FILTER} holding the older rows"),
    (
        "held, no index",
        f"{HELD_NO_INDEX_TABLE}: the same, without the flow-control index pending_types",
    ),
)


@dataclass
class Run:
    seconds: float
    rows: int
    claims: int
    empty: int

    @property
    def rate(self) -> float:
        return self.rows / self.seconds


@dataclass
class Report:
    shape: dict[str, Any] = field(default_factory=dict)
    runs: dict[str, list[Run]] = field(default_factory=dict)
    latency: dict[str, list[float]] = field(default_factory=dict)
    plans: dict[str, list[str]] = field(default_factory=dict)
    statements: dict[str, dict[str, list[float]]] = field(default_factory=dict)
    previous: dict[str, list[float]] = field(default_factory=dict)
    previous_names: tuple[str, str] = ("", "")
    single_acks: dict[str, list[float]] = field(default_factory=dict)


def load_average() -> str:
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])


def install_baseline(db: RecordingDatabase) -> list[str]:
    """Migration 001's claim, ack and fail, verbatim but for their schema, as
    ``bench_baseline.*``: the workers' functions of main before flow control."""
    text = MIGRATION_001.read_text("utf-8")
    pattern = r"^CREATE FUNCTION outbox_monitor\.(claim|ack|fail)\(.*?^\$\$;"
    matches = list(re.finditer(pattern, text, re.S | re.M))
    found = [match.group(1) for match in matches]
    if sorted(found) != ["ack", "claim", "fail"]:
        raise SystemExit(f"{MIGRATION_001}: expected claim, ack and fail, found {found}")
    with db.direct_connection(statement_timeout=None) as conn:
        conn.execute(db.compose("benchmark_flow_baseline_schema"))
        for match in matches:
            conn.execute(match.group(0).replace("outbox_monitor.", f"{BASELINE}.", 1))
    return found


def install_previous(db: RecordingDatabase) -> tuple[str, str]:
    """The claim of the migration before the newest one that defines it, verbatim but for
    its schema, as ``bench_previous.claim`` (its controls path calls the current
    ``outbox_monitor`` functions; with no control it is that migration's statement).

    Returns:
        ``(previous, newest)``: the two migrations' file names.
    """
    defining = []
    for path in sorted(MIGRATIONS.glob("*.sql")):
        match = re.search(CLAIM_PATTERN, path.read_text("utf-8"), re.S | re.M)
        if match:
            defining.append((path.name, match.group(0)))
    if len(defining) < 2:
        raise SystemExit(f"{MIGRATIONS}: fewer than two migrations define claim")
    (previous, text), (newest, _) = defining[-2], defining[-1]
    with db.direct_connection(statement_timeout=None) as conn:
        conn.execute(db.compose("benchmark_flow_previous_schema"))
        conn.execute(re.sub(r"outbox_monitor\.claim\(", f"{PREVIOUS}.claim(", text, count=1))
    return previous, newest


def measure_previous(
    db: RecordingDatabase, backlog: dict[str, int], args: argparse.Namespace, report: Report
) -> None:
    """The current claim of ``args.batch`` and the previous one (``install_previous``), no
    control, one rolled-back transaction per claim and round (alternating order): only the
    statement timed, ``args.latency_repeat`` rounds after one warm-up."""
    with db.connection() as conn:
        conn.execute(db.compose("benchmark_flow_reset_backlog"), backlog)
        conn.execute(db.compose("benchmark_vacuum"))
    schemas = (PREVIOUS, PRODUCT)
    report.previous = {schema: [] for schema in schemas}
    params = {"table_regclass": db.table_name, "worker": WORKER, "batch": args.batch}
    for round_ in range(args.latency_repeat + 1):
        for schema in schemas if round_ % 2 else reversed(schemas):
            query = db.compose("benchmark_flow_claim", schema=sql.Identifier(schema))
            with db.connection() as conn, conn.transaction(force_rollback=True):
                began = time.perf_counter()
                rows = conn.execute(query, params).fetchall()
                elapsed = (time.perf_counter() - began) * 1000
            if len(rows) != min(args.batch, backlog["rows"]):
                raise SystemExit(f"{schema}.claim returned {len(rows)} rows")
            if round_:
                report.previous[schema].append(elapsed)


def set_controls(db: RecordingDatabase, controls: list[dict[str, Any]]) -> None:
    """Exactly ``controls`` on the table, their state rows created by one claim of 0 rows."""
    params = {"table_regclass": db.table_name}
    with db.connection() as conn:
        conn.execute(db.compose("benchmark_flow_controls_clear"), params)
        if controls:
            define = db.compose("benchmark_flow_controls_define")
            conn.execute(define, {**params, "controls": Jsonb(controls)})
            conn.execute(
                db.compose("benchmark_flow_claim", schema=sql.Identifier(PRODUCT)),
                {**params, "worker": WORKER, "batch": 0},
            )


def drain(db: RecordingDatabase, variant: Variant, backlog: int, args: argparse.Namespace) -> Run:
    """``args.workers`` threads claim and ack until the backlog is drained; the elapsed time
    from their common start to the last ack."""
    if variant.schema is None:
        claim_query = db.compose("benchmark_claim_users")
        ack_query = db.compose("benchmark_flow_users_ack")
    else:
        schema = sql.Identifier(variant.schema)
        claim_query = db.compose("benchmark_flow_claim", schema=schema)
        ack_query = db.compose("benchmark_flow_ack", schema=schema)
    if variant.ack_many:
        ack_query = db.compose("benchmark_flow_ack_many")
    lock = threading.Lock()
    counts = {"claimed": 0, "claims": 0, "empty": 0}
    start = threading.Barrier(args.workers + 1)
    errors: list[BaseException] = []

    def work(number: int) -> None:
        params = {"table_regclass": db.table_name, "worker": f"{WORKER}-{number}"}
        params["batch"] = args.batch
        try:
            with psycopg.connect(args.dsn, autocommit=True) as conn:
                start.wait()
                while True:
                    rows = conn.execute(claim_query, params).fetchall()
                    with lock:
                        counts["claims"] += 1
                        counts["claimed"] += len(rows)
                        drained = counts["claimed"] >= backlog
                        if not rows and not drained:
                            counts["empty"] += 1
                    if not rows:
                        if drained:
                            return
                        time.sleep(0.001)  # a control's state row held by another claim
                        continue
                    if variant.ack_many:
                        ids = [row[0] for row in rows]
                        acked = conn.execute(ack_query, {**params, "ids": ids}).fetchone()[0]
                        if len(acked) != len(ids):
                            raise SystemExit(f"{variant.key}: acked {len(acked)} of {len(ids)}")
                        continue
                    for row in rows:
                        conn.execute(ack_query, {**params, "id": row[0]})
        except BaseException as error:
            errors.append(error)
            start.abort()

    threads = [threading.Thread(target=work, args=(n,)) for n in range(args.workers)]
    for thread in threads:
        thread.start()
    start.wait()
    began = time.perf_counter()
    for thread in threads:
        thread.join()
    elapsed = time.perf_counter() - began
    if errors:
        raise errors[0]
    if counts["claimed"] != backlog:
        raise SystemExit(f"{variant.key}: claimed {counts['claimed']:,} rows of {backlog:,}")
    return Run(elapsed, counts["claimed"], counts["claims"], counts["empty"])


def measure_throughput(
    db: RecordingDatabase,
    backlog: dict[str, int],
    args: argparse.Namespace,
    report: Report,
    variants: list[Variant],
) -> None:
    """One warm-up round, then ``args.repeat`` rounds of ``variants`` in alternating order."""
    report.runs = {variant.key: [] for variant in variants}
    current: list[dict[str, Any]] | None = None
    last: dict[str, Run] = {}
    for round_ in range(args.repeat + 1):
        for variant in variants if round_ % 2 else reversed(variants):
            if variant.controls != current:
                set_controls(db, variant.controls)
                current = variant.controls
            with db.connection() as conn:
                conn.execute(db.compose("benchmark_flow_reset_backlog"), backlog)
                conn.execute(db.compose("benchmark_vacuum"))
            run = last[variant.key] = drain(db, variant, backlog["rows"], args)
            if round_:
                report.runs[variant.key].append(run)
        rates = ", ".join(f"{key} {run.rate:,.0f}" for key, run in last.items())
        log(f"  round {round_}{' (warm-up)' if not round_ else ''}: rows/s {rates}")
    set_controls(db, [])


def measure_statements(
    db: RecordingDatabase, backlog: dict[str, int], args: argparse.Namespace, report: Report
) -> None:
    """Main's and the current claim of ``args.batch`` and the ack of each row it returned,
    with no control, in one rolled-back transaction per schema and round (alternating order): the
    statements' own ms, without the threads' contention and scheduling noise."""
    with db.connection() as conn:
        conn.execute(db.compose("benchmark_flow_reset_backlog"), backlog)
        conn.execute(db.compose("benchmark_vacuum"))
    schemas = (BASELINE, PRODUCT)
    report.statements = {schema: {"claim": [], "acks": []} for schema in schemas}
    params = {"table_regclass": db.table_name, "worker": WORKER, "batch": args.batch}
    for round_ in range(args.latency_repeat + 1):
        for schema in schemas if round_ % 2 else reversed(schemas):
            claim_query = db.compose("benchmark_flow_claim", schema=sql.Identifier(schema))
            ack_query = db.compose("benchmark_flow_ack", schema=sql.Identifier(schema))
            with db.connection() as conn, conn.transaction(force_rollback=True):
                began = time.perf_counter()
                rows = conn.execute(claim_query, params).fetchall()
                claimed = time.perf_counter()
                for row in rows:
                    conn.execute(ack_query, {**params, "id": row["id"]}).fetchall()
                acked = time.perf_counter()
            if len(rows) != min(args.batch, backlog["rows"]):
                raise SystemExit(f"{schema}.claim returned {len(rows)} rows")
            if round_:
                report.statements[schema]["claim"].append((claimed - began) * 1000)
                report.statements[schema]["acks"].append((acked - claimed) * 1000)


def timed_claim(db: RecordingDatabase, batch: int) -> float:
    """One ``outbox_monitor.claim`` in a rolled-back transaction; the statement's ms."""
    params = {"table_regclass": db.table_name, "worker": WORKER, "batch": batch}
    query = db.compose("benchmark_flow_claim", schema=sql.Identifier(PRODUCT))
    with db.connection() as conn, conn.transaction(force_rollback=True):
        began = time.perf_counter()
        conn.execute(query, params).fetchall()
        return (time.perf_counter() - began) * 1000


def nested_plans(db: RecordingDatabase, batch: int) -> list[str]:
    """The claim once, rolled back, with ``auto_explain`` logging every nested statement's
    plan to this session: one line per statement that reads the outbox table."""
    messages: list[str] = []
    table = db.settings.table_parts[1]
    params = {"table_regclass": db.table_name, "worker": WORKER, "batch": batch}
    with db.direct_connection(statement_timeout=None) as conn:
        conn.execute(db.compose("benchmark_flow_auto_explain"))
        conn.add_notice_handler(lambda diag: messages.append(diag.message_primary or ""))
        with conn.transaction(force_rollback=True):
            conn.execute(
                db.compose("benchmark_flow_claim", schema=sql.Identifier(PRODUCT)), params
            ).fetchall()
    lines = []
    for message in messages:
        _, found, document = message.partition("plan:\n")
        if not found:
            continue
        plan = json.loads(document)
        text = " ".join(plan.get("Query Text", "").split())
        top = plan["Plan"]
        nodes = list(scan_nodes(top, table))
        if not nodes or text.startswith("SELECT * FROM outbox_monitor.claim"):
            continue
        scans = "; ".join(nodes)
        pages = top.get("Shared Hit Blocks", 0) + top.get("Shared Read Blocks", 0)
        jit = plan.get("JIT", {}).get("Timing", {}).get("Total")
        lines.append(
            f"`{text[:90]}…`: {scans}; {removed_by_filter(top):,} removed by filter; "
            f"{pages:,} pages; {top.get('Actual Total Time', 0):,.1f} ms"
            + (f" (+ JIT {jit:,.1f} ms)" if jit else "")
        )
    return lines


def scan_nodes(node: dict[str, Any], table: str) -> Iterator[str]:
    """Each scan of ``table`` (or of one of its indexes) with the rows it returned."""
    index = node.get("Index Name")
    if node.get("Relation Name") == table or (index and index.startswith(f"{table}")):
        rows = node.get("Actual Rows", 0) * node.get("Actual Loops", 1)
        name = f"{node['Node Type']}({index})" if index else node["Node Type"]
        yield f"{name} {rows:,} rows"
    for child in node.get("Plans", []):
        yield from scan_nodes(child, table)


def prepare_held_tables(
    source: RecordingDatabase, args: argparse.Namespace, anchor: datetime
) -> dict[str, RecordingDatabase]:
    """Three copies of the table with ``args.held`` older crm rows: due and held by a pause in
    two, one of them without the recommended ``pending_types`` index (as after ``init-db
    --no-indexes``); in backoff (not due) in the third."""
    dbs = {}
    for name, due in ((HELD_TABLE, True), (HELD_NO_INDEX_TABLE, True), (PLAIN_TABLE, False)):
        settings = load_settings(
            dsn=args.dsn, table=f"public.{name}", statement_timeout=STATEMENT_TIMEOUT_SECONDS
        )
        db = RecordingDatabase(settings).__enter__()
        log(f"copying the table into {name} and adding {args.held:,} crm rows (due: {due})")
        with source.direct_connection(statement_timeout=None) as conn:
            conn.execute(source.compose("benchmark_copy_table", target=db.table))
        with db.direct_connection(statement_timeout=None) as conn:
            conn.execute(db.compose("install_worker_functions"), {"table_regclass": db.table_name})
            conn.execute(db.compose("benchmark_autovacuum_off"))
            conn.execute(
                db.compose("benchmark_flow_held_rows"),
                {"rows": args.held, "due": due, "anchor": anchor},
            )
            if name == HELD_NO_INDEX_TABLE:
                found = db.fetch_one(
                    "benchmark_flow_pending_types_index", {"table_regclass": db.table_name}
                )
                conn.execute(
                    sql.SQL("DROP INDEX {}").format(sql.Identifier("public", found["name"]))
                )
            conn.execute(db.compose("benchmark_vacuum_analyze"))
        dbs[name] = db
    for name in (HELD_TABLE, HELD_NO_INDEX_TABLE):
        set_controls(dbs[name], [control(HOLD_FILTER, paused=True, pause_reason="benchmark")])
    return dbs


def measure_latency(
    dbs: dict[str, RecordingDatabase], args: argparse.Namespace, report: Report
) -> None:
    """One warm-up round, then ``args.latency_repeat`` rounds of the cells in alternating
    order; then each cell's plans."""
    held, held_no_index, plain = dbs[HELD_TABLE], dbs[HELD_NO_INDEX_TABLE], dbs[PLAIN_TABLE]
    pause = [control(HOLD_FILTER, paused=True, pause_reason="benchmark")]

    def cell(key: str) -> float:
        if key == "held":
            return timed_claim(held, args.batch)
        if key == "held, no index":
            return timed_claim(held_no_index, args.batch)
        if key == "unheld":
            return timed_claim(plain, args.batch)
        set_controls(plain, pause)
        try:
            return timed_claim(plain, args.batch)
        finally:
            set_controls(plain, [])

    keys = [key for key, _ in LATENCY_CELLS]
    report.latency = {key: [] for key in keys}
    for round_ in range(args.latency_repeat + 1):
        for key in keys if round_ % 2 else reversed(keys):
            elapsed = cell(key)
            if round_:
                report.latency[key].append(elapsed)
    report.plans["unheld"] = nested_plans(plain, args.batch)
    set_controls(plain, pause)
    report.plans["unheld+pause"] = nested_plans(plain, args.batch)
    set_controls(plain, [])
    report.plans["held"] = nested_plans(held, args.batch)
    report.plans["held, no index"] = nested_plans(held_no_index, args.batch)


def install_barrier(db: RecordingDatabase) -> None:
    """``bench_barrier.claim``: the table's own claim function (migration 030) without its
    look at the controls: the change lock's try, then the static statement."""
    schema, name = db.settings.table_parts
    source = db.fetch_one("benchmark_api_claim_source", {"schema": schema, "name": name})
    body, cuts = CONTROLS_LOOK.subn("", source["source"])
    if cuts != 1:
        raise SystemExit(f"the claim function of {schema}.{name} has no look at the controls")
    with db.direct_connection(statement_timeout=None) as conn:
        conn.execute(db.compose("benchmark_api_barrier_schema"))
        conn.execute(
            sql.SQL(
                "CREATE FUNCTION {}.claim(p_table regclass, p_worker text, p_limit integer)"
                " RETURNS TABLE (id bigint, event_type text, aggregate_type text,"
                " aggregate_id text, event_key text, payload jsonb, attempts integer,"
                " created_at timestamptz) LANGUAGE plpgsql VOLATILE AS {}"
            ).format(sql.Identifier(BARRIER), sql.Literal(body))
        )


def measure_single_acks(
    db: RecordingDatabase, backlog: dict[str, int], args: argparse.Namespace, report: Report
) -> None:
    """``args.ack_calls`` acks of one row each through ``outbox_monitor.ack`` and as the
    users' UPDATE, one of each in turn (alternating which goes first) on successive rows of
    the backlog claimed by one worker, on one autocommit connection; each call's ms."""
    with db.connection() as conn:
        conn.execute(db.compose("benchmark_flow_reset_backlog"), backlog)
        conn.execute(db.compose("benchmark_api_claimed_by"), {**backlog, "worker": WORKER})
        conn.execute(db.compose("benchmark_vacuum"))
    queries = {
        "function": db.compose("benchmark_flow_ack", schema=sql.Identifier(PRODUCT)),
        "update": db.compose("benchmark_flow_users_ack"),
    }
    report.single_acks = {key: [] for key in queries}
    ids = iter(range(backlog["first_id"], backlog["last_id"] + 1))
    with psycopg.connect(args.dsn, autocommit=True) as conn:
        for call in range(args.ack_calls + ACK_WARMUP_CALLS):
            for key in list(queries) if call % 2 else reversed(list(queries)):
                params = {"table_regclass": db.table_name, "id": next(ids), "worker": WORKER}
                began = time.perf_counter()
                cursor = conn.execute(queries[key], params)
                elapsed = (time.perf_counter() - began) * 1000
                acked = cursor.fetchone()[0] if key == "function" else cursor.rowcount == 1
                if not acked:
                    raise SystemExit(f"{key}: row {params['id']} was not acked")
                if call >= ACK_WARMUP_CALLS:
                    report.single_acks[key].append(elapsed)


def run_api(db: RecordingDatabase, backlog: dict[str, int], args, report: Report) -> None:
    """``--api``: the per-row acks, then the throughput of ``API_VARIANTS``."""
    install_barrier(db)
    log(f"single acks: {args.ack_calls} of each, in turn")
    measure_single_acks(db, backlog, args, report)
    report.shape["load_acks"] = load_average()
    log(f"throughput: {args.repeat} rounds of {', '.join(v.key for v in API_VARIANTS)}")
    measure_throughput(db, backlog, args, report, list(API_VARIANTS))
    report.shape["load_throughput"] = load_average()


def print_api_report(args: argparse.Namespace, server: dict[str, Any], report: Report) -> None:
    shape = report.shape
    command = " ".join(["benchmarks/flow_control.py", *sys.argv[1:]])
    print("## Setup\n")
    print(f"- command: `nice -n {os.nice(0)} .venv/bin/python {command}`")
    print(f"- commit: {shape['commit']}")
    print(
        f"- machine: {platform.machine()}, {os.cpu_count()} CPUs; load average before / after "
        f"the acks / after the throughput rounds: {shape['load']} / {shape['load_acks']} / "
        f"{shape['load_throughput']}"
    )
    print(f"- server: {server['version'].split(' on ')[0]}; fsync off")
    print(
        f"- table: {shape['total']:,} rows; due: the backlog of {shape['backlog']:,} order.paid"
        f" rows; {args.workers} workers, batches of {args.batch}\n"
    )
    acks = report.single_acks
    function, update = (statistics.median(acks[key]) for key in ("function", "update"))
    ratio, low, high = paired_ratio(acks["function"], acks["update"])
    print("## Per-row ack: outbox_monitor.ack vs the users' UPDATE\n")
    print("| calls of each | ack() median ms | UPDATE median ms | ratio of medians |")
    print("|---|---|---|---|")
    calls = len(acks["function"])
    print(f"| {calls:,} | {function:.3f} | {update:.3f} | {function / update:.3f} |")
    print(f"\nAdjacent pairs: median ratio {ratio:.3f} [{low:.3f}, {high:.3f}] (goal ≤ 1.10)\n")
    print("## Claim → ack throughput (rows/s, median of the rounds, min–max)\n")
    print("| variant | rows/s |")
    print("|---|---|")
    for variant in API_VARIANTS:
        rates = [run.rate for run in report.runs[variant.key]]
        print(f"| {variant.label} | {spread(rates, ',.0f')} |")
    print("\n| ratio (paired rounds) | median [95 % interval] | goal |")
    print("|---|---|---|")
    for key, base, what, goal in API_RATIOS:
        rates = [run.rate for run in report.runs[key]]
        bases = [run.rate for run in report.runs[base]]
        ratio, low, high = paired_ratio(rates, bases)
        aim = ""
        if goal is not None:
            aim = f"≥ {goal:.2f}:{verdict(low, high, goal, higher_is_better=True)}"
        print(f"| {what} | {ratio:.3f} [{low:.3f}, {high:.3f}] | {aim} |")


def commit() -> str:
    """The checkout's commit, marked when the work tree differs from it."""

    def git(*args: str) -> str:
        root = str(Path(__file__).parent.parent)
        done = subprocess.run(
            ["git", "-C", root, *args], capture_output=True, text=True, check=True
        )
        return done.stdout.strip()

    try:
        head = git("rev-parse", "--short", "HEAD")
        dirty = git("status", "--porcelain", "--untracked-files=no")
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
    return f"{head} + uncommitted changes" if dirty else head


def spread(values: list[float], fmt: str) -> str:
    low, high = format(min(values), fmt), format(max(values), fmt)
    return f"{format(statistics.median(values), fmt)} ({low}–{high})"


def print_report(args: argparse.Namespace, server: dict[str, Any], report: Report) -> None:
    shape = report.shape
    by_key = {variant.key: variant for variant in VARIANTS}
    print("## Setup\n")
    command = " ".join(["benchmarks/flow_control.py", *sys.argv[1:]])
    print(f"- command: `nice -n {os.nice(0)} .venv/bin/python {command}` (niceness {os.nice(0)})")
    print(f"- commit: {shape['commit']}")
    print(
        f"- machine: {platform.machine()}, {os.cpu_count()} CPUs, {platform.system()} "
        f"{platform.release()}, Python {platform.python_version()}; load average before / "
        f"after the throughput rounds / after the latency rounds: {shape['load']} / "
        f"{shape['load_throughput']} / {shape['load_after']}"
    )
    print(
        f"- server: {server['version'].split(' on ')[0]}; shared_buffers "
        f"{server['shared_buffers']}, work_mem {server['work_mem']}; fsync off"
    )
    print(
        f"- table: {shape['total']:,} rows seeded as figures.py does ("
        + ", ".join(f"{k} {n:,}" for k, n in shape["counts"].items())
        + ") with the indexes of init-db --flow-control; seed "
        f"{shape['seed_seconds']:.0f} s. Due rows: only the backlog of {shape['backlog']:,} "
        "order.paid rows (the seed's due rows acked, its rows in backoff a day later)"
    )
    print(
        f"- throughput: {args.workers} worker threads, one autocommit connection each, claim "
        f"{args.batch} then ack each row by itself, until the backlog is drained; before each "
        f"run the backlog is pending again and the table VACUUMed; {args.repeat} rounds after "
        "one warm-up, the variants in alternating order"
    )
    print(
        f"- latency: {args.held:,} crm.contact_updated rows created before the backlog; one "
        f"claim of {args.batch} rolled back, only the statement timed; "
        f"{args.latency_repeat} rounds after one warm-up, alternating order\n"
    )
    print("### Claim → ack throughput\n")
    print("| variant | rows/s median (min–max) | s per run | claims per run | empty claims |")
    print("|---|---:|---:|---:|---:|")
    for variant in VARIANTS:
        runs = report.runs.get(variant.key)
        if not runs:
            continue
        print(
            f"| {variant.label} | {spread([r.rate for r in runs], ',.0f')} | "
            f"{statistics.median(r.seconds for r in runs):.2f} | "
            f"{statistics.median(r.claims for r in runs):,.0f} | "
            f"{statistics.median(r.empty for r in runs):,.0f} |"
        )
    print("\n| ratio of throughputs | median of medians | by round [95 %] |")
    print("|---|---:|---:|")
    for key, base, label in THROUGHPUT_RATIOS:
        if key not in report.runs or base not in report.runs:
            continue
        values = [r.rate for r in report.runs[key]]
        bases = [r.rate for r in report.runs[base]]
        paired, low, high = paired_ratio(values, bases)
        mark = verdict(low, high, THROUGHPUT_BOUND, higher_is_better=True)
        print(
            f"| {label} ({by_key[key].key}/{base}) | "
            f"{statistics.median(values) / statistics.median(bases):.3f} | "
            f"{paired:.3f} [{low:.3f}, {high:.3f}]{mark} |"
        )
    if report.statements:
        print(
            f"\nThe same functions statement by statement, no control: a claim of {args.batch} "
            f"and the {args.batch} acks of its rows, one rolled-back transaction per round "
            f"({args.latency_repeat} rounds after one warm-up, alternating order)\n"
        )
        print(
            "| statement | main ms, median (min–max) | 008–010 ms | 008–010/main by round [95 %] |"
        )
        print("|---|---:|---:|---:|")
        for part, label in (("claim", "claim"), ("acks", f"{args.batch} acks")):
            main_ms = report.statements[BASELINE][part]
            flow_ms = report.statements[PRODUCT][part]
            paired, low, high = paired_ratio(flow_ms, main_ms)
            print(
                f"| {label} | {spread(main_ms, ',.2f')} | {spread(flow_ms, ',.2f')} | "
                f"{paired:.3f} [{low:.3f}, {high:.3f}]{verdict(low, high, LATENCY_BOUND)} |"
            )
    if report.previous:
        previous, newest = report.previous_names
        print(
            f"\nThe newest claim ({newest}) against the one before it ({previous}), no "
            f"control: a claim of {args.batch}, one rolled-back transaction per claim and "
            f"round ({args.latency_repeat} rounds after one warm-up, alternating order)\n"
        )
        print("| claim | ms, median (min–max) | newest/previous by round [95 %] |")
        print("|---|---:|---:|")
        before, after = report.previous[PREVIOUS], report.previous[PRODUCT]
        paired, low, high = paired_ratio(after, before)
        print(f"| {previous} | {spread(before, ',.2f')} | 1 |")
        print(
            f"| {newest} | {spread(after, ',.2f')} | "
            f"{paired:.3f} [{low:.3f}, {high:.3f}]{verdict(low, high, LATENCY_BOUND)} |"
        )
    if not report.latency:
        print()
        return
    print(f"\n### Claim latency behind {args.held:,} held rows\n")
    print("| cell | ms per claim of 50, median (min–max) | ratio to no control, by round [95 %] |")
    print("|---|---:|---:|")
    base = report.latency["unheld"]
    for key, label in LATENCY_CELLS:
        values = report.latency[key]
        if key == "unheld":
            ratio = "1"
        else:
            paired, low, high = paired_ratio(values, base)
            ratio = f"{paired:.2f} [{low:.2f}, {high:.2f}]{verdict(low, high, LATENCY_BOUND)}"
        print(f"| {label} | {spread(values, ',.2f')} | {ratio} |")
    print(
        "\nPlans of the statements each claim ran on the outbox table (auto_explain: ANALYZE, "
        "BUFFERS): scans with the rows they returned; rows removed by filter; pages; time.\n"
    )
    for key, label in LATENCY_CELLS:
        print(f"- {label}:")
        for line in report.plans.get(key, []) or ["no statement read the table"]:
            print(f"  - {line}")
    print()


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=1_000_000, help="history rows to seed")
    parser.add_argument(
        "--backlog", type=int, default=None, help="due order.paid rows (default: 0.5 %% of rows)"
    )
    parser.add_argument("--held", type=int, default=200_000, help="older rows held by a pause")
    parser.add_argument("--workers", type=int, default=4, help="worker threads")
    parser.add_argument("--batch", type=int, default=50, help="rows per claim")
    parser.add_argument("--repeat", type=int, default=9, help="throughput rounds")
    parser.add_argument("--latency-repeat", type=int, default=21, help="latency rounds")
    parser.add_argument("--shared-buffers", default="2GB", help="the cluster's shared_buffers")
    parser.add_argument(
        "--variants",
        default=",".join(variant.key for variant in VARIANTS),
        help="throughput variants, comma-separated (default: all): "
        + ", ".join(variant.key for variant in VARIANTS),
    )
    parser.add_argument(
        "--no-latency", action="store_true", help="throughput only (no held copies)"
    )
    parser.add_argument(
        "--previous-claim",
        action="store_true",
        help="also time the claim, no control, against the one of the migration before the "
        "newest that defines it",
    )
    parser.add_argument(
        "--api",
        action="store_true",
        help="the worker API (issue 32 item 2): per-row acks and claim → ack throughput",
    )
    parser.add_argument(
        "--ack-calls", type=int, default=1500, help="--api: single acks of each kind"
    )
    args = parser.parse_args(argv)
    if args.backlog is None:
        args.backlog = max(args.rows // 200, 1000)
    if min(args.rows, args.backlog, args.held, args.workers, args.batch, args.repeat) < 1:
        parser.error("every size and count must be at least 1")
    args.variants = [key.strip() for key in args.variants.split(",") if key.strip()]
    unknown = set(args.variants) - {variant.key for variant in VARIANTS}
    if unknown or not args.variants:
        parser.error(f"--variants: unknown {', '.join(sorted(unknown)) or 'empty'}")
    if args.latency_repeat < 1:
        parser.error("--latency-repeat must be at least 1")
    if args.api and 2 * (args.ack_calls + ACK_WARMUP_CALLS) > args.backlog:
        parser.error("--api: the backlog must hold 2 × (--ack-calls + 20) rows")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    report = Report()
    report.shape["load"] = load_average()
    report.shape["commit"] = commit()
    log("starting a throwaway PostgreSQL cluster")
    with TemporaryCluster() as cluster:
        preload_stat_statements(cluster, args.shared_buffers, want=False)
        args.dsn = cluster.dsn
        settings = load_settings(dsn=cluster.dsn, statement_timeout=STATEMENT_TIMEOUT_SECONDS)
        with RecordingDatabase(settings) as db:
            init_db(db, create_table=True, create_indexes=False)
            log(f"seeding {args.rows:,} rows of history")
            shape = seed(db, args.rows, 30)
            init_db(db, create_indexes=True, flow_control=True)
            anchor = datetime.now(UTC)
            with db.connection() as conn:
                # in this order, so that no row becomes due between the two statements
                conn.execute(db.compose("benchmark_flow_due_later"))
                conn.execute(db.compose("benchmark_claim_ack_due"))
                conn.execute(
                    db.compose("benchmark_claim_backlog"),
                    {"first": 1, "last": args.backlog, "anchor": anchor},
                )
                conn.execute(db.compose("benchmark_vacuum_analyze"))
            backlog = db.fetch_one("benchmark_flow_due_range")
            if (
                backlog["rows"] != args.backlog
                or backlog["last_id"] - backlog["first_id"] >= args.backlog
            ):
                raise SystemExit(f"the due rows are not the backlog's {args.backlog:,}: {backlog}")
            report.shape.update(shape)
            report.shape["backlog"] = backlog["rows"]
            report.shape["counts"] = {
                row["status"]: row["rows"] for row in db.fetch_all("benchmark_status_counts")
            }
            report.shape["total"] = sum(report.shape["counts"].values())
            server = db.fetch_one("benchmark_server")
            if args.api:
                run_api(db, backlog, args, report)
                report.shape["load_after"] = load_average()
                print_api_report(args, server, report)
                return 0
            log(f"installing migration 001's {', '.join(install_baseline(db))} as {BASELINE}.*")
            held = {} if args.no_latency else prepare_held_tables(db, args, anchor)
            try:
                log(f"throughput: {args.repeat} rounds of {', '.join(args.variants)}")
                chosen = [variant for variant in VARIANTS if variant.key in args.variants]
                measure_throughput(db, backlog, args, report, chosen)
                if {"main", "flow"} <= set(args.variants):
                    log(f"statements: {args.latency_repeat} rounds of main's and the current ones")
                    measure_statements(db, backlog, args, report)
                if args.previous_claim:
                    report.previous_names = install_previous(db)
                    log(
                        f"previous claim: {args.latency_repeat} rounds of "
                        + " vs ".join(report.previous_names)
                    )
                    measure_previous(db, backlog, args, report)
                report.shape["load_throughput"] = load_average()
                if held:
                    log(f"latency: {args.latency_repeat} rounds")
                    measure_latency(held, args, report)
            finally:
                for other in held.values():
                    other.__exit__(None, None, None)
        report.shape["load_after"] = load_average()
        log("stopping the cluster")
    print_report(args, server, report)
    return 0


if __name__ == "__main__":
    sys.exit(main())
