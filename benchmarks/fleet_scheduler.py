"""Benchmark of one scheduler watching a fleet (issue 16 item 5): ``--outboxes`` outboxes across
``--databases`` databases of one throwaway cluster (with ``pg_stat_statements``), each table
seeded with ``--rows`` rows of the last day, evaluated with the shipped alerts.yml.

Prints, as Markdown: per outbox the median wall time and server time (``pg_stat_statements``,
every statement of the pass) of one evaluation pass run alone; then the whole fleet's
evaluation cycle — every outbox's pass at once: the worst case, as the scheduler staggers
the outboxes' passes over the interval (``fleet_scheduler.OutboxJobs``' phase) — and one
``/metrics`` refresh of every outbox (``FleetCollector``, cache off), each as medians of
``--repeat`` runs after a warm-up. Last, a real ``outbox-monitor scheduler`` with a fleet
file of those outboxes runs ``--process`` seconds: its RSS, threads and connections by
purpose.

Usage (from the repository root, with the package installed)::

    .venv/bin/python benchmarks/fleet_scheduler.py [--outboxes 50] [--databases 10]
        [--rows 5000] [--repeat 5] [--process 60]

Progress goes to stderr. ``--outboxes 4 --databases 2 --rows 500 --repeat 1 --process 10`` is
a smoke run.
"""

import argparse
import os
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack
from pathlib import Path

from psycopg import sql

sys.path.insert(0, str(Path(__file__).parent))

from estimates import start_cluster  # the scripts next to this one, on sys.path above
from figures import RecordingDatabase, log

from outbox_monitor.alerts.evaluate import Evaluator
from outbox_monitor.alerts.rules_file import load_rules
from outbox_monitor.config.fleet import Outbox
from outbox_monitor.config.settings import Settings
from outbox_monitor.export.fleet import FleetCollector
from outbox_monitor.export.scheduler_status import SchedulerStatus
from outbox_monitor.service.fleet_scheduler import FleetMember
from outbox_monitor.service.replica_registry import LeaseShare
from outbox_monitor.store.schema import init_db

REPO = Path(__file__).resolve().parents[1]


def build_fleet(
    base: Settings, stack: ExitStack, outboxes: int, databases: int, rows: int
) -> list[FleetMember]:
    """Create the databases and tables, seed and analyse them; one member per outbox."""
    admin = stack.enter_context(RecordingDatabase(base))
    members = []
    for index in range(outboxes):
        database = f"fleet_{index % databases}"
        table = "integration_outbox" if index < databases else f"outbox_{index}"
        dsn = base.dsn.rsplit("/", 1)[0] + "/" + database  # type: ignore[union-attr]
        settings = base.model_copy(update={"dsn": dsn, "table": f"public.{table}"})
        if index < databases:
            with admin.direct_connection(statement_timeout=None) as conn:
                conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(database)))
            with RecordingDatabase(settings) as db:
                init_db(db)
        with RecordingDatabase(settings) as db, db.transaction() as conn:
            if index >= databases:  # the settings' table: RecordingDatabase.compose's {table}
                conn.execute(db.compose("benchmark_fleet_table"))
            conn.execute(db.compose("benchmark_fleet_seed"), {"rows": rows})
        db = stack.enter_context(RecordingDatabase(settings))
        with db.direct_connection(statement_timeout=None) as conn:
            conn.execute(sql.SQL("VACUUM ANALYZE {}").format(sql.Identifier("public", table)))
        members.append(FleetMember(Outbox(f"o{index:02d}", settings), db, db, SchedulerStatus()))
        log(f"outbox o{index:02d}: {database}.{table}, {rows:,} rows")
    return members


def timed(admin: RecordingDatabase, run: Callable[[], object], repeat: int) -> tuple[float, float]:
    """Median ``(wall ms, server ms)`` of ``repeat`` calls of ``run`` after one warm-up."""
    run()
    wall, server = [], []
    for _ in range(repeat):
        admin.fetch_one("benchmark_statements_reset")
        started = time.perf_counter()
        run()
        wall.append((time.perf_counter() - started) * 1000)
        server.append(admin.fetch_one("benchmark_statements_ms")["ms"])
    return statistics.median(wall), statistics.median(server)


def process_figures(base: Settings, members: list[FleetMember], seconds: float) -> None:
    """Run ``outbox-monitor scheduler`` with a fleet file of ``members`` for ``seconds`` and
    print its RSS, threads and connections."""
    with tempfile.TemporaryDirectory() as folder:
        lines = ["version: 1", "outboxes:"]
        env = {k: v for k, v in os.environ.items() if not k.startswith("OUTBOX_MONITOR_")}
        for member in members:
            variable = f"DSN_{member.outbox.name.upper()}"
            env[variable] = member.db.settings.dsn or ""
            lines += [
                f"  - name: {member.outbox.name}",
                f"    dsn_env: {variable}",
                f"    table: {member.db.table_name}",
            ]
        Path(folder, "outboxes.yml").write_text("\n".join(lines) + "\n")
        env.update(
            OUTBOX_MONITOR_OUTBOXES=str(Path(folder, "outboxes.yml")),
            OUTBOX_MONITOR_RULES=str(REPO / "alerts.yml"),
            OUTBOX_MONITOR_METRICS_PORT="0",
        )
        command = [sys.executable, "-m", "outbox_monitor", "scheduler"]
        process = subprocess.Popen(command, env=env, stderr=subprocess.DEVNULL)
        try:
            time.sleep(seconds)
            status = Path(f"/proc/{process.pid}/status").read_text()
            rss = int(re.search(r"VmRSS:\s+(\d+)", status).group(1)) / 1024  # type: ignore[union-attr]
            threads = int(re.search(r"Threads:\s+(\d+)", status).group(1))  # type: ignore[union-attr]
            with RecordingDatabase(base) as admin:
                rows = admin.fetch_all("benchmark_fleet_connections")
        finally:
            process.send_signal(signal.SIGTERM)
            process.wait(timeout=60)
    connections = ", ".join(f"{row['connections']} {row['application_name']}" for row in rows)
    print(
        f"\nOne `outbox-monitor scheduler` process for the {len(members)} outboxes (the shipped "
        f"alerts.yml), after {seconds:g} s: RSS {rss:.0f} MiB, {threads} threads; "
        f"connections: {connections}."
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--outboxes", type=int, default=50)
    parser.add_argument("--databases", type=int, default=10)
    parser.add_argument("--rows", type=int, default=5000)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument(
        "--process", type=float, default=60.0, help="seconds to run a real scheduler (0: none)"
    )
    args = parser.parse_args()
    cluster, base = start_cluster()
    base = base.model_copy(update={"metrics_cache": 0.0})
    try:
        with ExitStack() as stack:
            admin = stack.enter_context(RecordingDatabase(base))
            members = build_fleet(base, stack, args.outboxes, args.databases, args.rows)
            ruleset = load_rules(REPO / "alerts.yml")
            evaluators = [Evaluator(m.primary, ruleset, figures_db=m.db) for m in members]
            print(f"# Fleet scheduler: {args.outboxes} outboxes in {args.databases} databases\n")
            print(
                f"{args.rows:,} rows per outbox; {len(ruleset.rules)} rules (the shipped "
                f"alerts.yml); medians of {args.repeat} runs after a warm-up.\n"
            )
            print("| outbox | database.table | evaluation wall ms | DB ms |")
            print("|---|---|---:|---:|")
            walls, servers = [], []
            for member, evaluator in zip(members, evaluators, strict=True):
                wall, server = timed(admin, evaluator.run_once, args.repeat)
                walls.append(wall)
                servers.append(server)
                where = f"{member.db.settings.dsn.rsplit('/', 1)[1]}.{member.db.table_name}"  # type: ignore[union-attr]
                print(f"| {member.outbox.name} | {where} | {wall:.1f} | {server:.1f} |")
            print(
                f"| **median** | | **{statistics.median(walls):.1f}** | "
                f"**{statistics.median(servers):.1f}** |\n"
            )
            workers = len(members)  # all at once: the worst case (the scheduler staggers)
            with ThreadPoolExecutor(workers) as pool:

                def cycle() -> None:
                    list(pool.map(lambda evaluator: evaluator.run_once(), evaluators))

                wall, server = timed(admin, cycle, args.repeat)
            print(
                f"One evaluation cycle of the fleet ({workers} threads): {wall:.0f} ms wall, "
                f"{server:.0f} ms DB ({server / len(members):.1f} ms per outbox).\n"
            )
            collector = FleetCollector(members, LeaseShare(len(members), lambda: 0), ruleset)
            wall, server = timed(admin, lambda: list(collector.collect()), args.repeat)
            print(f"One /metrics refresh of every outbox: {wall:.0f} ms wall, {server:.0f} ms DB.")
            if args.process:
                stack.close()  # the benchmark's own pools: only the process's connections
                process_figures(base, members, args.process)
    finally:
        cluster.stop()


if __name__ == "__main__":
    main()
