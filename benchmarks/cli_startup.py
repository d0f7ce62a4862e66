"""Benchmark of the CLI's start-up: ``outbox-monitor --help`` and ``status --json`` per venv.

Starts its own throwaway PostgreSQL cluster and runs ``init-db`` on it, then runs each
command of each ``--venv`` as a whole process (``VENV/bin/outbox-monitor``), the venvs in
turn (A B A B …), one warm-up run and ``--repeat`` counted runs per case, first with
``PYTHONDONTWRITEBYTECODE=1`` (as on these machines and in the image: nothing compiled at
run time is ever kept), then without it. Prints per case the median (min–max) wall and CPU
(user + sys) milliseconds and, for every venv after the first, the median of the run-by-run
wall ratios against the first venv; and for each venv how many of its ``.py`` files have a
``.pyc``, before and after the runs.

Usage (from the repository root)::

    .venv/bin/python benchmarks/cli_startup.py --venv /tmp/before/.venv --venv .venv

Runs without the variable write ``.pyc`` files for the modules a command imports, so run a
venv installed with ``--no-compile`` only once to see its uncompiled figures (the
"with" rows come first for that reason). The child processes get this process's
environment without ``PYTHONPATH``, so each venv runs its own installed package.
The report goes to stdout as Markdown; progress goes to stderr.
"""

import argparse
import os
import platform
import resource
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass
from importlib.util import cache_from_source
from pathlib import Path

import psycopg
from psycopg import sql

from outbox_monitor.demo.pgcluster import TemporaryCluster

COMMANDS = (("--help",), ("status", "--json"))


@dataclass
class Run:
    wall_ms: float
    cpu_ms: float


def run_once(argv: list[str], env: dict[str, str]) -> Run:
    """One whole process: wall time, and user + sys CPU time of the child."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    result = subprocess.run(argv, env=env, capture_output=True)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if result.returncode != 0:
        output = (result.stdout + result.stderr)[-2000:].decode(errors="replace")
        raise SystemExit(f"{' '.join(argv)} exited {result.returncode}: {output}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return Run(wall * 1000, cpu * 1000)


def compiled_share(venv: Path) -> str:
    """``compiled/total`` .py files of the venv's site-packages and of the package it runs
    (an editable install's package lives in its checkout)."""
    package = subprocess.run(
        [
            str(venv / "bin" / "python"),
            "-c",
            "import outbox_monitor; print(outbox_monitor.__path__[0])",
        ],
        env=child_environment(),
        cwd="/",
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    roots = [*venv.glob("lib/python*/site-packages"), Path(package)]
    sources = {path for root in roots for path in root.rglob("*.py")}
    compiled = sum(1 for path in sources if Path(cache_from_source(str(path))).exists())
    return f"{compiled:,}/{len(sources):,}"


def child_environment() -> dict[str, str]:
    """This process's environment without PYTHONPATH: each venv runs its own package."""
    return {key: value for key, value in os.environ.items() if key != "PYTHONPATH"}


def spread(values: list[float]) -> str:
    return f"{statistics.median(values):,.0f} ({min(values):,.0f}–{max(values):,.0f})"


def measure(venvs: list[Path], dsns: list[str], repeat: int) -> list[str]:
    """Every command of every venv, each venv against its own database (``dsns``)."""
    base = child_environment()
    lines = [
        "| command | PYTHONDONTWRITEBYTECODE | venv | wall ms median (min–max) "
        "| CPU ms median (min–max) | wall ratio vs first venv |",
        "|---|---|---|---:|---:|---:|",
    ]
    for dont_write in (True, False):
        env = dict(base)
        env.pop("PYTHONDONTWRITEBYTECODE", None)
        if dont_write:
            env["PYTHONDONTWRITEBYTECODE"] = "1"
        for command in COMMANDS:
            argvs = [[str(venv / "bin" / "outbox-monitor"), *command] for venv in venvs]
            runs: list[list[Run]] = [[] for _ in venvs]
            for round_number in range(repeat + 1):
                for index, argv in enumerate(argvs):
                    run = run_once(argv, {**env, "OUTBOX_MONITOR_DSN": dsns[index]})
                    if round_number:  # round 0 is the warm-up
                        runs[index].append(run)
            label = "1" if dont_write else "unset"
            print(f"measured {' '.join(command)}, PYTHONDONTWRITEBYTECODE {label}", file=sys.stderr)
            for index, venv in enumerate(venvs):
                walls = [run.wall_ms for run in runs[index]]
                ratio = "–"
                if index:
                    pairs = zip(runs[index], runs[0], strict=True)
                    ratio = f"{statistics.median(a.wall_ms / b.wall_ms for a, b in pairs):.2f}"
                lines.append(
                    f"| `{' '.join(command)}` | {label} | `{venv}` | {spread(walls)} "
                    f"| {spread([run.cpu_ms for run in runs[index]])} | {ratio} |"
                )
    return lines


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--venv",
        action="append",
        type=Path,
        required=True,
        help="A virtualenv with outbox-monitor installed (repeatable; the first is the base).",
    )
    parser.add_argument("--repeat", type=int, default=9, help="Counted runs per case (9).")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    venvs = [venv.absolute() for venv in args.venv]
    for venv in venvs:
        if not (venv / "bin" / "outbox-monitor").exists():
            raise SystemExit(f"{venv}/bin/outbox-monitor is missing: `make install VENV={venv}`")
    shares_before = [compiled_share(venv) for venv in venvs]
    load_before = os.getloadavg()
    with TemporaryCluster() as cluster:
        dsns = []
        for index, venv in enumerate(venvs):  # each release's own schema, in its own database
            with psycopg.connect(cluster.dsn, autocommit=True) as conn:
                conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(f"venv{index}")))
            dsns.append(cluster.dsn_for(f"venv{index}"))
            command = [str(venv / "bin" / "outbox-monitor"), "init-db", "--dsn", dsns[-1]]
            usage = subprocess.run([*command[:2], "--help"], capture_output=True, text=True)
            if "--create-table" in usage.stdout:  # releases since issue 29 create only if asked
                command.append("--create-table")
            subprocess.run(command, check=True, capture_output=True)
        table = measure(venvs, dsns, args.repeat)
    load_after = os.getloadavg()
    print(f"- command: `{' '.join([Path(sys.argv[0]).name, *(argv or sys.argv[1:])])}`")
    print(
        f"- machine: {platform.machine()}, {platform.system()} {platform.release()}, "
        f"{os.cpu_count()} CPUs, Python {platform.python_version()}; load average "
        f"before {' '.join(f'{x:.2f}' for x in load_before)}, "
        f"after {' '.join(f'{x:.2f}' for x in load_after)}"
    )
    print(
        f"- each case: 1 warm-up + {args.repeat} runs per venv, venvs in turn; "
        "`status --json` against an empty outbox table after that release's `init-db` "
        "(one database per venv)"
    )
    for venv, before in zip(venvs, shares_before, strict=True):
        print(f"- `{venv}`: .py files with a .pyc {before} before, {compiled_share(venv)} after")
    print()
    print("\n".join(table))
    return 0


if __name__ == "__main__":
    sys.exit(main())
