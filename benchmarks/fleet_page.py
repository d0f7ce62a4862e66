"""Benchmark of the Fleet page (issue 16 item 2): 50 outboxes across 10 databases, the page's
time-to-content in headless Chromium, cold and warm (target: ≤ 1 s warm).

Starts its own throwaway PostgreSQL cluster with ``--databases`` databases (default 10); in
each, ``init-db`` and ``--per-database`` outbox tables (default 5: ``public.integration_outbox``
seeded with ``--rows`` rows exactly as ``figures.py`` does — 30 days, ≈ 1 % dead letters, a
backlog — and copies of it in schemas ``t1``…). A fleet file lists every table as an outbox,
each database's DSN in a variable of its own; ``--unreachable N`` adds N outboxes whose DSN
points at a closed port. The dashboard is served as ``outbox-monitor dashboard`` serves it
(``serve.start_dashboard``, local mode on 127.0.0.1) with ``OUTBOX_MONITOR_OUTBOXES`` set.

Timing as ``pages.py`` does: a ``MutationObserver`` notes ``performance.now()`` when the
fleet table has a row per outbox; cold = a fresh browser context with the server's caches
emptied (Streamlit's "Clear cache": every ``st.cache_data`` entry and the fleet's pools);
warm = a reload of the same tab right after. Also the SQL statements each load ran
(``pg_stat_statements``, all databases), the connections the dashboard held afterwards,
and ``fleet_figures.measure_fleet`` timed alone in this process (pools warm).

Usage (from the repository root)::

    .venv/bin/python benchmarks/fleet_page.py [--rows 20000] [--repeat 5]
    .venv/bin/python benchmarks/fleet_page.py --smoke     # 2 databases × 2 outboxes, 2 repeats
"""

import argparse
import os
import statistics
import sys
import tempfile
import time
from contextlib import ExitStack
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from figures import STATEMENT_TIMEOUT_SECONDS, RecordingDatabase, log, seed
from playwright.sync_api import sync_playwright
from psycopg import sql

from outbox_monitor.config.fleet import FLEET_ENV, load_fleet
from outbox_monitor.config.settings import load_settings
from outbox_monitor.demo.pgcluster import TemporaryCluster
from outbox_monitor.figures.fleet_figures import FleetConnections, measure_fleet
from outbox_monitor.store.schema import init_db
from pages import (
    TILES_FILLED,
    Samples,
    StatementCounter,
    Target,
    enable_statement_stats,
    load_1min,
    require_free,
    sample,
    serve_dashboard,
    spread,
    uptime,
)
from tests.browser_support import CHROMIUM, CHROMIUM_ARGS
from tests.fleet_rows import closed_port_dsn

DASHBOARD_PORT, CLUSTER_PORT = 8621, 8629
"""Ports of this benchmark (8621-8629 are reserved for it)."""
TABLE_ROWS = """(() => {
    const table = [...document.querySelectorAll('[data-testid="stMarkdown"] table')]
        .find((t) => t.innerText.includes('Queue depth'));
    return table !== undefined && table.querySelectorAll('tbody tr').length >= %d;
})()"""


def prepare(cluster: TemporaryCluster, args: argparse.Namespace, folder: Path) -> Path:
    """The databases, their seeded tables and the fleet file; returns the file's path (the
    DSN variables are set in ``os.environ``, which the dashboard inherits)."""
    entries = []
    for number in range(args.databases):
        name = f"fleet_{number}"
        with (
            RecordingDatabase(load_settings(dsn=cluster.dsn)) as admin,
            admin.direct_connection(statement_timeout=None) as conn,
        ):
            conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
        dsn = cluster.dsn_for(name)
        os.environ[f"FLEET_{number}_DSN"] = dsn
        with RecordingDatabase(load_settings(dsn=dsn)) as db:
            init_db(db)
            seed(db, args.rows, 30)
            with db.direct_connection(statement_timeout=None) as conn:
                for copy in range(1, args.per_database):
                    schema = sql.Identifier(f"t{copy}")
                    conn.execute(sql.SQL("CREATE SCHEMA {}").format(schema))
                    conn.execute(
                        sql.SQL(
                            "CREATE TABLE {}.outbox (LIKE public.integration_outbox INCLUDING ALL)"
                        ).format(schema)
                    )
                    conn.execute(
                        sql.SQL(
                            "INSERT INTO {}.outbox SELECT * FROM public.integration_outbox"
                        ).format(schema)
                    )
                conn.execute("VACUUM (ANALYZE)")
        for copy in range(args.per_database):
            table = "public.integration_outbox" if copy == 0 else f"t{copy}.outbox"
            entries.append(
                f"  - {{name: db{number}-t{copy}, dsn_env: FLEET_{number}_DSN, table: {table}}}"
            )
        log(f"database {number + 1}/{args.databases} seeded")
    for number in range(args.unreachable):
        os.environ[f"LOST_{number}_DSN"] = closed_port_dsn()
        entries.append(f"  - {{name: lost-{number}, dsn_env: LOST_{number}_DSN}}")
    path = folder / "outboxes.yml"
    path.write_text("version: 1\noutboxes:\n" + "\n".join(entries) + "\n")
    os.environ[FLEET_ENV] = str(path)
    return path


def time_measure_fleet(path: Path, repeat: int) -> list[float]:
    """ms of ``measure_fleet`` over the whole fleet, pools warm (one untimed call first)."""
    fleet = load_fleet(load_settings(), path)
    connections = FleetConnections()
    try:
        measure_fleet(fleet, connections, window=3600)
        times = []
        for _ in range(repeat):
            started = time.perf_counter()
            measure_fleet(fleet, connections, window=3600)
            times.append((time.perf_counter() - started) * 1000)
        return times
    finally:
        connections.close()


def held_connections(db: RecordingDatabase) -> int:
    """Connections of outbox-monitor open to the fleet's databases (the dashboard's)."""
    with db.direct_connection(statement_timeout=None) as conn:
        row = conn.execute(
            "SELECT count(*) AS n FROM pg_stat_activity"
            " WHERE application_name = 'outbox-monitor' AND datname LIKE 'fleet%'"
        ).fetchone()
    return int(row["n"])


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--databases", type=int, default=10)
    parser.add_argument("--per-database", type=int, default=5, help="outbox tables per database")
    parser.add_argument("--rows", type=int, default=20_000, help="rows per outbox table")
    parser.add_argument("--unreachable", type=int, default=0, help="outboxes on a closed port")
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--smoke", action="store_true")
    args = parser.parse_args(argv)
    if args.smoke:
        args.databases, args.per_database, args.rows, args.repeat = 2, 2, 2_000, 2
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    before = uptime()
    outboxes = args.databases * args.per_database + args.unreachable
    require_free(CLUSTER_PORT)
    require_free(DASHBOARD_PORT)
    with (
        TemporaryCluster(port=CLUSTER_PORT) as cluster,
        ExitStack() as stack,
        tempfile.TemporaryDirectory(prefix="outbox-monitor-fleet-") as folder,
    ):
        settings = load_settings(dsn=cluster.dsn, statement_timeout=STATEMENT_TIMEOUT_SECONDS)
        enable_statement_stats(cluster, settings)
        db = stack.enter_context(RecordingDatabase(settings))
        log(f"{args.databases} databases × {args.per_database} outboxes of {args.rows:,} rows")
        path = prepare(cluster, args, Path(folder))
        direct = time_measure_fleet(path, args.repeat)
        log(f"measure_fleet alone: {spread(direct)} ms")
        url = stack.enter_context(
            serve_dashboard(load_settings(), Path(folder) / "dashboard.log", DASHBOARD_PORT)
        )
        targets = (
            Target("Fleet", "dashboard", "/fleet", TABLE_ROWS % outboxes, "table drawn"),
            # the same server's Overview of one outbox, in the same rounds: what a page of
            # this dashboard costs under the same load
            Target("Overview", "dashboard", "/overview?outbox=db0-t0", TILES_FILLED, "tiles"),
        )
        counter = StatementCounter(db)
        results = {target.name: Samples() for target in targets}
        with sync_playwright() as playwright:
            browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
            try:
                for target in targets:  # untimed: imports, Chromium
                    sample(browser, url, target, counter, Samples())
                for number in range(1, args.repeat + 1):
                    for target in targets if number % 2 else targets[::-1]:
                        sample(browser, url, target, counter, results[target.name])
                    log(
                        f"round {number}: "
                        + ", ".join(
                            f"{name} {s.cold[-1]:.0f} / {s.warm[-1]:.0f} ms"
                            for name, s in results.items()
                        )
                    )
                sample(browser, url, targets[0], counter, Samples())  # the Fleet's pools last
                held = held_connections(db)
            finally:
                browser.close()
    print(f"## Fleet page: {outboxes} outboxes across {args.databases} databases\n")
    print(
        f"{args.per_database} outbox tables per database, {args.rows:,} rows each "
        f"({args.unreachable} more outboxes on a closed port); median (min–max) of "
        f"{args.repeat} loads in headless Chromium; load average {before} before, "
        f"{uptime()} after (1-min at the samples: "
        f"{statistics.median(results['Fleet'].load):.1f}).\n"
    )
    print("| page | load | time to content (ms) | script finished (ms) | SQL statements |")
    print("|---|---|--:|--:|--:|")
    for name, samples in results.items():
        for kind in ("cold", "warm"):
            print(
                f"| {name} | {kind} | {spread(getattr(samples, kind))} | "
                f"{spread(getattr(samples, kind + '_idle'))} | "
                f"{statistics.median(getattr(samples, kind + '_statements')):.0f} |"
            )
    print(
        f"\n`fleet_figures.measure_fleet` alone (pools warm): {spread(direct)} ms for "
        f"{outboxes} outboxes; connections the dashboard held after a Fleet load: {held} "
        f"(at most 2 per database). 1-min load now {load_1min():.1f}."
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
