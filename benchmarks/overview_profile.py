"""Profile of the Overview's script, warm (issue 32 item 4): where a run's time goes outside the
database.

Starts its own throwaway PostgreSQL cluster, seeds ``--rows`` rows as ``figures.py`` does,
runs init-db and one sampler pass (a scheduler's samples), then runs the Overview through
Streamlit's ``AppTest`` once to fill its caches and ``--runs`` more times under ``cProfile``
(every thread: AppTest runs the script in a thread of its own). Each profiled run is warm: the
cached loaders answer from their cache when younger than their TTL (``--expire`` clears
``st.cache_data`` before each run, as a live refresh finds them once their TTL is over).

The report (stdout, Markdown): the wall ms of each run, then the functions with the most
cumulative time among the product's code (``outbox_monitor/``, ``pages/``, ``dashboard.py``)
and among Streamlit's and altair's, per run.

Usage (from the repository root)::

    .venv/bin/python benchmarks/overview_profile.py [--rows 200000] [--runs 10] [--expire]
"""

import argparse
import cProfile
import io
import os
import pstats
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).parent))

TOP = 25
UNPROFILED_RUN = threading.Thread.run


def profiled_threads() -> list[cProfile.Profile]:
    """From now on every thread runs under a profile of its own, listed here."""
    profiles: list[cProfile.Profile] = []
    original = UNPROFILED_RUN

    def run(self: threading.Thread) -> None:
        profile = cProfile.Profile()
        profiles.append(profile)
        profile.enable()
        try:
            original(self)
        finally:
            profile.disable()

    threading.Thread.run = run  # type: ignore[method-assign]
    return profiles


def table(stats: pstats.Stats, runs: int, where: tuple[str, ...], limit: int) -> list[str]:
    """The functions whose file is under one of ``where``, most cumulative time first."""
    rows = []
    for (path, line, name), (_, calls, _, cumulative, _) in stats.stats.items():  # type: ignore[attr-defined]
        if any(part in path for part in where):
            short = path.split("site-packages/")[-1].replace(str(ROOT) + "/", "")
            rows.append((cumulative, calls, f"{short}:{line} {name}"))
    rows.sort(reverse=True)
    return [
        f"| {label} | {cumulative * 1000 / runs:,.1f} | {calls / runs:,.0f} |"
        for cumulative, calls, label in rows[:limit]
    ]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=200_000)
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--expire", action="store_true", help="clear st.cache_data each run")
    args = parser.parse_args()

    import streamlit as st
    import streamlit.logger
    from figures import RecordingDatabase, log, seed
    from streamlit.testing.v1 import AppTest

    from outbox_monitor.config.settings import load_settings
    from outbox_monitor.demo.pgcluster import TemporaryCluster
    from outbox_monitor.service.sampler import record_sample
    from outbox_monitor.store import schema

    streamlit.logger.set_log_level("error")
    load_before = os.getloadavg()
    with TemporaryCluster() as cluster, tempfile.TemporaryDirectory() as home:
        db = RecordingDatabase(load_settings(dsn=cluster.dsn, statement_timeout=600.0))
        schema.init_db(db, create_table=True, create_indexes=False)
        log(f"seed {args.rows:,} rows")
        seed(db, args.rows, 30.0)
        schema.init_db(db)
        record_sample(db)
        for name in list(os.environ):
            if name.startswith("OUTBOX_MONITOR_"):
                del os.environ[name]
        os.environ |= {"OUTBOX_MONITOR_DSN": cluster.dsn, "HOME": home}
        at = AppTest.from_file(str(ROOT / "dashboard.py"), default_timeout=600)
        at.switch_page("pages/overview.py").run()
        if at.exception:
            raise SystemExit(f"the Overview failed: {at.exception}")
        profiles = profiled_threads()
        walls = []
        for _ in range(args.runs):
            if args.expire:
                st.cache_data.clear()
            start = time.perf_counter()
            at.run()
            walls.append((time.perf_counter() - start) * 1000)
        threading.Thread.run = UNPROFILED_RUN  # type: ignore[method-assign]
        db.close()
    stats = pstats.Stats(*profiles, stream=io.StringIO())
    print(f"- command: `.venv/bin/python benchmarks/overview_profile.py {' '.join(sys.argv[1:])}`")
    print(
        f"- load average before {' '.join(f'{x:.2f}' for x in load_before)}, after "
        f"{' '.join(f'{x:.2f}' for x in os.getloadavg())}; {args.rows:,} rows; "
        f"{'caches cleared before each run' if args.expire else 'warm: caches kept'}"
    )
    print(
        f"- wall ms per run (AppTest, cProfile on): median {statistics.median(walls):,.0f}, "
        f"min {min(walls):,.0f}, max {max(walls):,.0f}\n"
    )
    print("| product code | cumulative ms per run | calls per run |\n|---|---:|---:|")
    print("\n".join(table(stats, args.runs, (str(ROOT / "outbox_monitor"), "pages/"), TOP)))
    print(
        "\n| Streamlit, altair, pandas | cumulative ms per run | calls per run |\n|---|---:|---:|"
    )
    print("\n".join(table(stats, args.runs, ("streamlit/", "altair/", "pandas/"), TOP)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
