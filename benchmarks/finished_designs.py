"""Designs of the source of the windowed figures: their cost on the users' writes and reads.

Starts its own throwaway PostgreSQL cluster, seeds ``--rows`` rows of history as
``figures.py`` does (its due pending rows acked, as ``claim.py`` does), adds a due backlog of
``--backlog`` rows and copies the table once per design of ``--designs``:

- ``none``: the users' indexes only;
- ``btree``: the finished index of the releases up to issue 31, ``(status, processed_at)
  INCLUDE (created_at) WHERE status IN ('done', 'failed')``;
- ``narrow``: ``(processed_at) WHERE status IN ('done', 'failed')`` (a narrower btree, whose
  new keys all land on its rightmost leaf);
- ``tail``: ``(processed_at) INCLUDE (created_at, status) WHERE status IN ('done', 'failed')``;
- ``tail_done``: ``(processed_at) INCLUDE (created_at) WHERE status = 'done'``;
- ``split``: the recommended ``done_at`` and ``failed_at`` (``(processed_at) INCLUDE
  (created_at)`` of done rows, and of failed rows);
- ``brinN``: ``USING brin (processed_at) WITH (pages_per_range = N) WHERE status IN ('done',
  'failed')``;

each but ``none`` with the other recommended indexes (``failed_by_type``, ``clock_skew``).

1. **Writes, independent of the machine's load**: every round runs, on every design in
   alternating order, each in a rolled-back transaction, ``EXPLAIN (ANALYZE, BUFFERS, WAL)`` of
   the users' ack of ``--batch`` rows just claimed (SPEC §1), of a dead-letter of them and of a
   publish of ``--batch`` rows: the statement's buffers (hit + read, and dirtied), its WAL
   records and bytes, and its execution ms (EXPLAIN's own instrumentation included). Medians
   of ``--repeat`` rounds; the ms also as the median of round-by-round ratios to ``none`` with
   its 95 % interval (``paired.py``).
2. **Reads after traffic**: a sorted seed is the best case of a BRIN (processed_at follows the
   heap's order), so every design's table then lives ``--cycles`` cycles of traffic, each
   committed as workers do it: a publish of ``--per-cycle`` rows in batches, claims and acks of
   every due row in batches, the retention job's delete of as many of the oldest done rows, and
   a VACUUM (which makes the freed space reusable: new row versions land in old pages). Then
   ``metrics.status`` (every figure of ``status --json``) with a 1 h and a 24 h window, and an
   Overview refresh (``scale.overview_refresh``), are EXPLAINed statement by statement: DB ms
   and pages, and those of the statements reading ``processed_at``; and the writes again, as
   in 1 (a new due backlog of ``--backlog`` rows): a BRIN's ranges are summarized by then, and
   a new row version landing in one of them rewrites its summary.

3. With ``--cpu-blocks``, **the server's CPU time** of each design's session (``/proc``, user +
   system): blocks of ``--cpu-per-block`` rolled-back transactions (a claim and the ack of its
   rows; a claim alone; a publish), the designs in alternating order per block. A process
   waiting for a core does not accrue CPU time, but a crowded machine still changes what a
   microsecond of it buys (benchmarks/RESULTS.md: two runs under load disagreed).

Usage (from the repository root, with the package installed)::

    .venv/bin/python benchmarks/finished_designs.py [--rows 1000000]
        [--designs none,btree,split,brin16] [--repeat 31] [--cycles 20]

The report is Markdown on stdout; progress on stderr. ``--rows 20000 --repeat 3 --cycles 2
--per-cycle 500`` is a smoke run. The benchmark's SQL is in ``benchmarks/queries.sql``.
"""

import argparse
import json
import os
import platform
import statistics
import sys
import time
from contextlib import ExitStack
from pathlib import Path
from typing import Any

from psycopg import sql

sys.path.insert(0, str(Path(__file__).parent))

from claim import seeded_history  # claim.py, next to this one
from figures import RecordingDatabase, log  # figures.py, next to this one
from paired import paired_ratio, verdict  # paired.py, next to this one
from scale import explain_call, overview_refresh  # scale.py, next to this one

from outbox_monitor.config.settings import load_settings
from outbox_monitor.figures import metrics
from outbox_monitor.store.indexes import RECOMMENDED_INDEXES, build_index

WORKER = "benchmark-designs"
STATEMENT_TIMEOUT_SECONDS = 600.0
WRITES = ("users' ack", "users' dead-letter", "publish")
CLAIMED_THEN = {
    "users' ack": "benchmark_ack_claimed",
    "users' dead-letter": "benchmark_dead_letter_claimed",
}
# The recommended indexes of done and failed rows by processed_at (the "split" design); every
# design but "none" keeps the others (failed_by_type, clock_skew).
BY_TIME = tuple(i for i in RECOMMENDED_INDEXES if i.purpose in ("done_at", "failed_at"))
OTHERS = tuple(i for i in RECOMMENDED_INDEXES if i not in BY_TIME)
PROCESSED_AT_QUERIES = (
    "latency_percentiles",
    "processed_in_window",
    "created_finished_in_window",
    "failed_by_event_type",
    "throughput_series",
    "latency_series",
)


def design_block(design: str) -> tuple[str, dict[str, sql.Composable]] | None:
    """The benchmark block building ``design``'s finished source, with its fragments."""
    if design in ("none", "split"):
        return None
    if design in ("btree", "narrow", "tail", "tail_done"):
        return f"benchmark_design_{design}", {}
    if design.startswith("brin") and design[4:].isdigit():
        return "benchmark_design_brin", {"pages_per_range": sql.Literal(int(design[4:]))}
    raise ValueError(design)


def prepare(source: RecordingDatabase, dsn: str, design: str) -> RecordingDatabase:
    """Copy the seeded table for ``design`` and build its indexes."""
    settings = load_settings(
        dsn=dsn, table=f"public.outbox_{design}", statement_timeout=STATEMENT_TIMEOUT_SECONDS
    )
    db = RecordingDatabase(settings).__enter__()
    log(f"copying the history into outbox_{design}")
    with source.direct_connection(statement_timeout=None) as conn:
        conn.execute(source.compose("benchmark_copy_table", target=db.table))
        conn.execute(db.compose("benchmark_autovacuum_off"))
    built = design_block(design)
    table = db.settings.table_parts[1]
    with db.direct_connection(statement_timeout=None) as conn:
        if built is not None:
            block, fragments = built
            name = sql.Identifier(f"{table}_{design}_idx")
            conn.execute(db.compose(block, index=name, **fragments))
        for index in (
            (*BY_TIME, *OTHERS) if design == "split" else () if design == "none" else OTHERS
        ):
            conn.execute(build_index(index, index.name(table), db.table, leaf=True))
    with db.connection() as conn:
        conn.execute(db.compose("benchmark_vacuum_analyze"))
    return db


def explain_write(db: RecordingDatabase, statement: str, tag: str, batch: int) -> dict[str, float]:
    """One write, rolled back: its execution ms, buffers touched and dirtied, WAL records and
    bytes (EXPLAIN ANALYZE, BUFFERS, WAL of the statement; a claim first where it needs one)."""
    params: dict[str, Any] = {"batch": batch, "worker": WORKER, "tag": tag}
    with db.connection() as conn, conn.transaction(force_rollback=True):
        if statement in CLAIMED_THEN:
            claimed = conn.execute(db.compose("benchmark_claim_users"), params).fetchall()
            name, params = CLAIMED_THEN[statement], {**params, "ids": [r["id"] for r in claimed]}
        else:
            name = "benchmark_publish"
        query = db.compose("benchmark_explain_write", query=db.compose(name))
        document = conn.execute(query, params).fetchone()["QUERY PLAN"]
    top = (json.loads(document) if isinstance(document, str) else document)[0]
    plan = top["Plan"]
    return {
        "ms": top["Execution Time"],
        "pages": plan.get("Shared Hit Blocks", 0) + plan.get("Shared Read Blocks", 0),
        "dirtied": plan.get("Shared Dirtied Blocks", 0),
        "wal_records": plan.get("WAL Records", 0),
        "wal_bytes": plan.get("WAL Bytes", 0),
        "wal_fpi": plan.get("WAL FPI", 0),
    }


def measure_writes(dbs: dict[str, RecordingDatabase], args: argparse.Namespace) -> dict:
    """``--repeat`` rounds after one warm-up; returns ``{design: {statement: [sample, ...]}}``."""
    order = list(dbs)
    samples: dict[str, dict[str, list[dict[str, float]]]] = {
        d: {s: [] for s in WRITES} for d in order
    }
    for round_ in range(args.repeat + 1):
        for statement in WRITES:
            for design in order if round_ % 2 else reversed(order):
                found = explain_write(dbs[design], statement, f"r{round_}", args.batch)
                if round_:
                    samples[design][statement].append(found)
        if round_ % 10 == 0:
            log(f"  writes: round {round_} of {args.repeat}")
    return samples


def backend_cpu_ms(pid: int) -> float:
    """User + system CPU ms the server process ``pid`` has used (``/proc``, clock ticks)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) * 1000 / os.sysconf("SC_CLK_TCK")


def measure_cpu(dbs: dict[str, RecordingDatabase], args: argparse.Namespace) -> dict:
    """The server's CPU time of each write, which waiting for a core does not inflate as it
    does the wall time: per design one session runs ``--cpu-blocks`` blocks of
    ``--cpu-per-block`` transactions (a claim then the ack of its rows; a publish), each rolled
    back, the designs in alternating order per block. Returns ``{design: {"claim + ack" |
    "claim" | "publish": [µs per transaction of each block]}}``."""
    kinds = {
        "claim + ack": ("benchmark_claim_users", "benchmark_ack_claimed"),
        "claim": ("benchmark_claim_users", None),
        "publish": ("benchmark_publish", None),
    }
    found: dict[str, dict[str, list[float]]] = {d: {k: [] for k in kinds} for d in dbs}
    with ExitStack() as stack:
        sessions = {
            design: stack.enter_context(db.direct_connection(statement_timeout=None))
            for design, db in dbs.items()
        }
        pids = {
            d: c.execute(dbs[d].compose("benchmark_backend_pid")).fetchone()["pid"]
            for d, c in sessions.items()
        }
        for block in range(args.cpu_blocks + 1):
            order = list(dbs) if block % 2 else list(reversed(dbs))
            for kind, (first, then) in kinds.items():
                for design in order:
                    db, conn = dbs[design], sessions[design]
                    params: dict[str, Any] = {"batch": args.batch, "worker": WORKER}
                    start = backend_cpu_ms(pids[design])
                    for n in range(args.cpu_per_block):
                        with conn.transaction(force_rollback=True):
                            rows = conn.execute(db.compose(first), {**params, "tag": f"cpu{n}"})
                            if then:
                                ids = [row["id"] for row in rows.fetchall()]
                                conn.execute(db.compose(then), {**params, "ids": ids})
                    used = backend_cpu_ms(pids[design]) - start
                    if block:
                        found[design][kind].append(used * 1000 / args.cpu_per_block)
            for db in dbs.values():
                with db.connection() as conn:
                    conn.execute(db.compose("benchmark_vacuum"))
            log(f"  CPU: block {block} of {args.cpu_blocks}")
    return found


def traffic(db: RecordingDatabase, args: argparse.Namespace, first: int = 0) -> None:
    """``--cycles`` cycles of committed traffic (numbered from ``first``: the publish's keys):
    publish, claim and ack every due row, delete the oldest done rows (retention), VACUUM."""
    params: dict[str, Any] = {"batch": args.batch, "worker": WORKER}
    for cycle in range(first, first + args.cycles):
        with db.connection() as conn:
            for part in range(args.per_cycle // args.batch):
                conn.execute(db.compose("benchmark_publish"), {**params, "tag": f"c{cycle}p{part}"})
        while True:
            with db.connection() as conn, conn.transaction():
                claimed = conn.execute(db.compose("benchmark_claim_users"), params).fetchall()
                if not claimed:
                    break
                ids = [row["id"] for row in claimed]
                conn.execute(db.compose("benchmark_ack_claimed"), {**params, "ids": ids})
        with db.connection() as conn:
            conn.execute(db.compose("benchmark_prune_oldest"), {"rows": args.per_cycle})
            conn.execute(db.compose("benchmark_vacuum"))
    with db.connection() as conn:
        conn.execute(db.compose("benchmark_vacuum_analyze"))


def read_costs(db: RecordingDatabase) -> dict[str, dict[str, float]]:
    """DB ms and pages of ``metrics.status`` at 1 h and 24 h and of an Overview refresh, in
    all and for the statements reading processed_at (median of 3 EXPLAINs after a warm-up)."""
    calls = {
        "status --json, 1 h": lambda: metrics.status(db, window=3600.0),
        "status --json, 24 h": lambda: metrics.status(db, window=86400.0),
        "Overview refresh, 1 h": lambda: overview_refresh(db),
    }
    found: dict[str, dict[str, float]] = {
        "window": db.fetch_one("benchmark_window_pages", {"window": 3600.0})
    }
    for label, call in calls.items():
        call()
        runs = [explain_call(db, call) for _ in range(3)]
        windowed = [[s for s in run if s.query in PROCESSED_AT_QUERIES] for run in runs]
        found[label] = {
            "ms": statistics.median(sum(s.exec_ms for s in run) for run in runs),
            "pages": statistics.median(sum(s.pages for s in run) for run in runs),
            "windowed_ms": statistics.median(sum(s.exec_ms for s in run) for run in windowed),
            "windowed_pages": statistics.median(sum(s.pages for s in run) for run in windowed),
            "scans": "; ".join(
                dict.fromkeys(
                    f"{s.query}: {s.scans}" for s in runs[0] if s.query in PROCESSED_AT_QUERIES
                )
            ),
        }
    return found


def after_traffic(
    db: RecordingDatabase, design: str, args: argparse.Namespace
) -> tuple[dict[str, dict[str, float]], int]:
    """The traffic on ``design``'s table, then its reads and the bytes of its index; leaves a
    new due backlog of ``--backlog`` rows for the writes after the traffic."""
    log(f"traffic on {design}")
    start = time.perf_counter()
    traffic(db, args)
    log(f"  {time.perf_counter() - start:.1f} s; reads")
    reads = read_costs(db)
    with db.connection() as conn:
        conn.execute(
            db.compose("benchmark_claim_backlog"),
            {"first": args.backlog + 1, "last": 2 * args.backlog, "anchor": "now"},
        )
        conn.execute(db.compose("benchmark_vacuum_analyze"))
    table = db.settings.table_parts[1]
    names = [i.name(table) for i in BY_TIME] if design == "split" else [f"{table}_{design}_idx"]
    size = sum(
        db.fetch_one("benchmark_index_bytes", {"name": f"public.{name}"})["bytes"] for name in names
    )
    return reads, size


def print_writes(args: argparse.Namespace, writes: dict, title: str) -> None:
    """The table of the writes: per statement and design, the medians and the ratios."""
    base = "none" if "none" in writes else next(iter(writes))
    print(
        f"### {title}: one statement of {args.batch} rows, median of {args.repeat} rounds "
        "(EXPLAIN ANALYZE, BUFFERS, WAL; rolled back)\n"
    )
    print(
        "| statement | design | buffers | dirtied | WAL records | WAL bytes | ms (min) | "
        f"µs per row more than {base}, median (min) | ms / {base} by round [95 %] |"
    )
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|")
    for statement in WRITES:
        base_rows = writes[base][statement]
        for design, by_statement in writes.items():
            rows = by_statement[statement]

            def med(key: str, rows=rows) -> float:
                return statistics.median(r[key] for r in rows)

            ratio = more = "–"
            if design != base:
                median_more = med("ms") - statistics.median(r["ms"] for r in base_rows)
                min_more = min(r["ms"] for r in rows) - min(r["ms"] for r in base_rows)
                per_row = 1000 / args.batch
                more = f"{median_more * per_row:.2f} ({min_more * per_row:.2f})"
                paired, low, high = paired_ratio(
                    [r["ms"] for r in rows], [r["ms"] for r in base_rows]
                )
                ratio = f"{paired:.2f} [{low:.2f}, {high:.2f}]{verdict(low, high)}"
            print(
                f"| {statement} | {design} | {med('pages'):,.0f} | {med('dirtied'):,.0f} | "
                f"{med('wal_records'):,.0f} | {med('wal_bytes'):,.0f} | {med('ms'):.3f} "
                f"({min(r['ms'] for r in rows):.3f}) | {more} | {ratio} |"
            )
    print()


def print_cpu(args: argparse.Namespace, cpu: dict) -> None:
    """The server's CPU µs per transaction, per design, and the ratio to the first design."""
    base = next(iter(cpu))
    print(
        f"### The server's CPU time: µs per transaction of {args.batch} rows, median of "
        f"{args.cpu_blocks} blocks of {args.cpu_per_block} (rolled back)\n"
    )
    print(f"| transaction | design | CPU µs | / {base} by block [95 %] |")
    print("|---|---|---:|---:|")
    for kind in next(iter(cpu.values())):
        for design, by_kind in cpu.items():
            ratio = "–"
            if design != base:
                paired, low, high = paired_ratio(by_kind[kind], cpu[base][kind])
                ratio = f"{paired:.3f} [{low:.3f}, {high:.3f}]{verdict(low, high)}"
            print(f"| {kind} | {design} | {statistics.median(by_kind[kind]):,.0f} | {ratio} |")
    print()


def print_report(args, server, shape, writes, reads, sizes, writes_after, cpu) -> None:
    print("### Setup\n")
    print(f"- command: `.venv/bin/python benchmarks/finished_designs.py {' '.join(sys.argv[1:])}`")
    print(
        f"- machine: {platform.machine()}, {platform.system()} {platform.release()}, Python "
        f"{platform.python_version()}, load average before / after the writes / after the run "
        f"{shape['load']} / {shape['load_writes']} / {shape['load_after']}"
    )
    print(
        f"- server: {server['version'].split(' on ')[0]}; shared_buffers "
        f"{server['shared_buffers']}; fsync off"
    )
    print(
        f"- history: {shape['total']:,} rows seeded as figures.py does, its due pending rows "
        f"acked, then {args.backlog:,} due rows; seed {shape['seed_seconds']:.1f} s; traffic: "
        f"{args.cycles} cycles of {args.per_cycle:,} rows published, claimed and acked in "
        f"batches of {args.batch}, the {args.per_cycle:,} oldest done rows deleted, VACUUM\n"
    )
    print_writes(args, writes, "Writes on the copies")
    if cpu:
        print_cpu(args, cpu)
    if not reads:
        return
    print("### Reads after the traffic: DB ms and pages (median of 3 EXPLAINs)\n")
    print("| call | design | all: ms | all: pages | reading processed_at: ms | pages |")
    print("|---|---|---:|---:|---:|---:|")
    for label in (key for key in next(iter(reads.values())) if key != "window"):
        for design, found in reads.items():
            cell = found[label]
            print(
                f"| {label} | {design} | {cell['ms']:.2f} | {cell['pages']:,.0f} | "
                f"{cell['windowed_ms']:.2f} | {cell['windowed_pages']:,.0f} |"
            )
    print("\nPlans of the statements reading processed_at, status --json 1 h:\n")
    for design, found in reads.items():
        print(f"- {design}: {found['status --json, 1 h']['scans']}")
    print("\nThe done rows of the last hour and the heap pages holding them:\n")
    for design, found in reads.items():
        print(f"- {design}: {found['window']['rows']:,} rows on {found['window']['pages']:,} pages")
    print("\n### Sizes after the traffic (pg_relation_size of the design's index)\n")
    print("| design | MB |")
    print("|---|---:|")
    for design, size in sizes.items():
        print(f"| {design} | {size / 2**20:,.2f} |")
    print()
    print_writes(args, writes_after, "Writes after the traffic")


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=1_000_000, help="history rows to seed")
    parser.add_argument("--designs", default="none,btree,split,brin16")
    parser.add_argument("--backlog", type=int, default=5000, help="due rows the writes claim")
    parser.add_argument("--batch", type=int, default=50, help="rows per write statement")
    parser.add_argument("--repeat", type=int, default=31, help="rounds of the writes")
    parser.add_argument("--cycles", type=int, default=20, help="cycles of traffic")
    parser.add_argument("--per-cycle", type=int, default=2000, help="rows per traffic cycle")
    parser.add_argument("--shared-buffers", default="2GB")
    parser.add_argument(
        "--cpu-blocks", type=int, default=0, help="blocks of the CPU measure (0: none)"
    )
    parser.add_argument("--cpu-per-block", type=int, default=300, help="transactions a block")
    args = parser.parse_args(argv)
    args.designs = [d.strip() for d in args.designs.split(",") if d.strip()]
    for design in args.designs:
        try:
            design_block(design)
        except ValueError:
            parser.error(f"unknown design {design!r}: none, btree, narrow or brinN")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    shape: dict[str, Any] = {"load": " ".join(Path("/proc/loadavg").read_text().split()[:3])}
    with seeded_history(args.rows, args.shared_buffers) as (cluster, source, seeded):
        shape.update(seeded)
        with source.connection() as conn:
            conn.execute(
                source.compose("benchmark_claim_backlog"),
                {"first": 1, "last": args.backlog, "anchor": "now"},
            )
        shape["total"] = sum(r["rows"] for r in source.fetch_all("benchmark_status_counts"))
        server = source.fetch_one("benchmark_server")
        dbs = {design: prepare(source, cluster.dsn, design) for design in args.designs}
        try:
            log("writes")
            writes = measure_writes(dbs, args)
            shape["load_writes"] = " ".join(Path("/proc/loadavg").read_text().split()[:3])
            cpu = measure_cpu(dbs, args) if args.cpu_blocks else {}
            reads, sizes, writes_after = {}, {}, {}
            for design, db in dbs.items():
                if design == "none" or not args.cycles:
                    continue
                reads[design], sizes[design] = after_traffic(db, design, args)
            if reads:
                log("writes after the traffic")
                writes_after = measure_writes({d: dbs[d] for d in reads}, args)
        finally:
            for db in dbs.values():
                db.__exit__(None, None, None)
        shape["load_after"] = " ".join(Path("/proc/loadavg").read_text().split()[:3])
    print_report(args, server, shape, writes, reads, sizes, writes_after, cpu)
    return 0


if __name__ == "__main__":
    sys.exit(main())
