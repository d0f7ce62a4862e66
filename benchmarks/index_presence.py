"""What each recommended index costs the users' own writes by being there (issue 32 item 1).

The users' ack (SPEC §1) writes one entry in ``done_at``; the retry writes none of ours; the
publish none. What an index costs a statement that writes no entry in it — the planner
considering it, the executor opening it and testing each new row against its predicate — is
its *presence*. Each variant is a copy of one seeded table (the users' own indexes, see
``create_outbox_table``) with a set of indexes; each round times the users' ack, retry and
publish of 50 rows on every variant in a shuffled order, each statement in a rolled-back
transaction, and every 5th round also takes EXPLAIN ANALYZE's planning and execution times.
Ratios are against the copy without our indexes (``paired.paired_ratio``: the median of the
rounds' ratios and its 95 % interval).

Variants: ``none``; ``recommended`` (``RECOMMENDED_INDEXES``, as init-db creates them);
``no clock_skew`` (without it); ``done_at`` (alone); ``done_at+failed_at``; ``skew by one
comparison`` (``clock_skew``'s predicate cut to ``processed_at < created_at``,
``benchmark_presence_skew_compare``, beside the other three). The fold (RESULTS.md, "The
fold, built and measured") was a variant of an earlier version.

    .venv/bin/python benchmarks/index_presence.py --rows 1000000 --rounds 401
"""

import argparse
import platform
import random
import statistics
import sys
import time
from pathlib import Path

from psycopg import sql

sys.path.insert(0, str(Path(__file__).parent))
from figures import RecordingDatabase  # figures.py, next to this one
from paired import paired_ratio, verdict  # paired.py, next to this one

from outbox_monitor.config.settings import load_settings
from outbox_monitor.demo.pgcluster import TemporaryCluster
from outbox_monitor.store.indexes import RECOMMENDED_INDEXES, build_index
from outbox_monitor.store.schema import init_db

BATCH = 50
STATEMENTS = {"users' ack": "benchmark_ack_claimed", "users' retry": "benchmark_retry_claimed"}
BY_PURPOSE = {index.purpose: index for index in RECOMMENDED_INDEXES}
VARIANTS = {
    "none": (),
    "recommended": tuple(BY_PURPOSE),
    "no clock_skew": tuple(p for p in BY_PURPOSE if p != "clock_skew"),
    "done_at": ("done_at",),
    "done_at+failed_at": ("done_at", "failed_at"),
    "skew by one comparison": ("done_at", "failed_at", "failed_by_type", "skew:compare"),
}


def prepare(dsn: str, name: str, purposes: tuple[str, ...], args) -> RecordingDatabase:
    """The variant's table, seeded, with its indexes built, vacuumed and analysed."""
    table = "presence_" + "".join(c if c.isalnum() else "_" for c in name)
    db = RecordingDatabase(load_settings(dsn=dsn, table=f"public.{table}"))
    init_db(db, create_table=True, create_indexes=False)
    with db.direct_connection(statement_timeout=None) as conn:  # the seed and the builds
        conn.autocommit = True
        conn.execute(
            db.compose("benchmark_presence_seed"), {"rows": args.rows, "claimed": args.claimed}
        )
        for purpose in purposes:
            name = f"{table}_{purpose.replace(':', '_')}_idx"
            index = sql.Identifier(name)
            if purpose == "skew:compare":
                conn.execute(db.compose("benchmark_presence_skew_compare", index=index))
            else:
                conn.execute(build_index(BY_PURPOSE[purpose], name, db.table, leaf=True))
        conn.execute(db.compose("benchmark_vacuum_analyze"))
    return db


def run(conn, db: RecordingDatabase, statement: str, params: dict) -> float:
    """The statement's milliseconds, in a transaction rolled back."""
    with conn.transaction(force_rollback=True):
        started = time.perf_counter()
        conn.execute(db.compose(statement), params)
        return (time.perf_counter() - started) * 1000


def explained(conn, db: RecordingDatabase, statement: str, params: dict) -> tuple[float, float]:
    """EXPLAIN ANALYZE's (planning, execution) milliseconds, rolled back."""
    with conn.transaction(force_rollback=True):
        query = sql.SQL("EXPLAIN (ANALYZE, FORMAT JSON) ") + db.compose(statement)
        plan = conn.execute(query, params).fetchone()["QUERY PLAN"][0]
        return plan["Planning Time"], plan["Execution Time"]


def loadavg() -> str:
    """The load averages over 1, 5 and 15 minutes."""
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])


def report(args, seeded: float, load: str, after: str, times: dict, plans: dict) -> None:
    """The run's lines for benchmarks/RESULTS.md: the command, the machine, the table."""
    print(
        "- command: `.venv/bin/python benchmarks/index_presence.py "
        f"--rows {args.rows} --rounds {args.rounds}`"
    )
    print(
        f"- machine: {platform.machine()}, Python {platform.python_version()}; "
        f"load average before / after {load} / {after}"
    )
    print(
        f"- {args.rows:,} rows per variant ({args.claimed:,} processing), seeded and indexed "
        f"in {seeded:.0f} s; batch {BATCH}; {args.rounds} interleaved rounds"
    )
    print()
    print("| statement | variant | ms median (min) | / none by round [95 %] | plan ms | exec ms |")
    print("|---|---|---:|---:|---:|---:|")
    for label, variant in times:
        values = times[(label, variant)]
        med, low, high = paired_ratio(values, times[(label, "none")])
        ratio = "—" if variant == "none" else f"{med:.3f} [{low:.3f}, {high:.3f}]"
        ratio += "" if variant == "none" else verdict(low, high)
        plan = statistics.median(p for p, _ in plans[(label, variant)])
        execution = statistics.median(e for _, e in plans[(label, variant)])
        print(
            f"| {label} | {variant} | {statistics.median(values):.3f} ({min(values):.3f}) "
            f"| {ratio} | {plan:.3f} | {execution:.3f} |"
        )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--rounds", type=int, default=401)
    args = parser.parse_args(argv)
    args.claimed = BATCH * args.rounds // 4 + BATCH
    load = loadavg()
    cluster = TemporaryCluster()
    cluster.start()
    try:
        started = time.perf_counter()
        dbs = {
            name: prepare(cluster.dsn, name, purposes, args) for name, purposes in VARIANTS.items()
        }
        seeded = time.perf_counter() - started
        names = (*STATEMENTS, "publish")
        times = {(s, v): [] for s in names for v in dbs}
        plans = {(s, v): [] for s in names for v in dbs}
        conns = {v: db.connection().__enter__() for v, db in dbs.items()}
        rng = random.Random(0)
        for round_ in range(args.rounds):
            first = rng.randrange(1, args.claimed - BATCH)
            claimed = {"ids": list(range(first, first + BATCH)), "worker": "bench"}
            published = {"batch": BATCH, "tag": round_}
            order = list(dbs)
            rng.shuffle(order)
            for label in names:
                statement = STATEMENTS.get(label, "benchmark_publish")
                params = published if label == "publish" else claimed
                for v in order:
                    times[(label, v)].append(run(conns[v], dbs[v], statement, params))
                    if round_ % 5 == 0:
                        plans[(label, v)].append(explained(conns[v], dbs[v], statement, params))
        after = loadavg()
    finally:
        cluster.stop()
    report(args, seeded, load, after, times, plans)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
