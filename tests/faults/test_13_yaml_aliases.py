"""Issue 10 item 13: alerts.yml with YAML anchors/aliases (a recursive alias, a "billion
laughs" expansion) or absurd nesting is refused at once with a message naming the file and
the line, through `outbox-monitor alerts validate` and the scheduler's load path."""

import os
import resource
import subprocess
import sys
import time
from pathlib import Path

import pytest

from outbox_monitor.alerts.rules_file import (
    MAX_LISTED_PROBLEMS,
    MAX_RULES_FILE_BYTES,
    RulesError,
    load_rules,
)
from outbox_monitor.service.scheduler import load_alerting

REPO = Path(__file__).resolve().parents[2]

RECURSIVE = "a: &a [*a]\n"
"""An alias inside its own anchor: PyYAML builds a self-containing list."""

LAUGHS = "version: 1\n" + "\n".join(
    ['l0: &l0 ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]']
    + [f"l{i}: &l{i} [{', '.join([f'*l{i - 1}'] * 9)}]" for i in range(1, 10)]
)
"""Ten lines that expand to 9**10 (≈ 3.5 billion) strings when walked."""

MERGE_KEY = """\
version: 1
routes:
  oncall: {webhook_url_env: SLACK_WEBHOOK_URL}
rules:
  - &backlog {name: backlog, metric: queue_depth, op: ">", threshold: 2, route: oncall}
  - <<: *backlog
    name: backlog-high
    threshold: 20
"""
"""An innocent-looking reuse (a merge key): refused too, with the anchor's line."""

DEEP = "rules: " + "[" * 3000 + "]" * 3000 + "\n"
"""No alias at all, but nested deeper than Python's recursion limit."""

CASES = {
    "recursive": (RECURSIVE, "line 1, column 4", "anchor &a"),
    "billion-laughs": (LAUGHS, "line 2, column 5", "anchor &l0"),
    "merge-key": (MERGE_KEY, "line 5, column 5", "anchor &backlog"),
    "deep": (DEEP, "line 1, column ", "nested deeper than"),
}


def children_cpu_seconds() -> float:
    """User + system CPU seconds of this process's finished children so far."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def validate(path: Path) -> tuple[subprocess.CompletedProcess, float]:
    """Run ``outbox-monitor alerts validate`` on ``path``; return its result and the CPU
    seconds the child spent (user + system): work done, not wall-clock time, so a busy
    machine does not stretch it."""
    environment = {**os.environ, "PYTHONPATH": str(REPO)}
    environment.pop("OUTBOX_MONITOR_RULES", None)
    before = children_cpu_seconds()
    result = subprocess.run(
        [sys.executable, "-m", "outbox_monitor", "alerts", "validate", "--rules", str(path)],
        env=environment,
        capture_output=True,
        text=True,
        timeout=120,
    )
    return result, children_cpu_seconds() - before


@pytest.mark.parametrize("case", list(CASES))
def test_alerts_validate_refuses_aliases_quickly_naming_file_and_line(tmp_path, case):
    text, where, what = CASES[case]
    path = tmp_path / "alerts.yml"
    path.write_text(text)

    result, seconds = validate(path)

    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr
    assert f"{path}: {where}" in result.stderr
    assert what in result.stderr
    # ≈ 0.5 CPU s (the interpreter start, with or without load); walking the billion laughs
    # took > 60 s before the fix
    assert seconds < 10


@pytest.mark.parametrize("case", list(CASES))
def test_scheduler_load_path_refuses_aliases(tmp_path, case):
    text, where, what = CASES[case]
    path = tmp_path / "alerts.yml"
    path.write_text(text)

    started = time.thread_time()  # CPU time of this thread: the work, not the machine's load
    with pytest.raises(RulesError) as raised:
        load_alerting(str(path))
    seconds = time.thread_time() - started

    assert len(raised.value.problems) == 1
    problem = raised.value.problems[0]
    assert problem.startswith(f"{path}: {where}")
    assert what in problem
    assert seconds < 2


def unknown_keys(count: int) -> str:
    """A valid rules file followed by ``count`` unknown top-level keys (one problem each)."""
    return "version: 1\nrules: []\n" + "".join(f"unknown_key_{n:06d}: 1\n" for n in range(count))


def test_a_rules_file_over_the_size_limit_is_refused_at_once(tmp_path):
    """300,000 unknown keys (6.6 MB; loading took more than 60 s): refused before parsing,
    naming the file and the limit, in well under 5 s of CPU (the interpreter start)."""
    path = tmp_path / "alerts.yml"
    path.write_text(unknown_keys(300_000))

    result, seconds = validate(path)

    print(f"\n{path.stat().st_size:,} bytes: exit {result.returncode} after {seconds:.2f} CPU s")
    assert result.returncode == 2, result.stderr[-2000:]
    assert "Traceback" not in result.stderr
    assert (
        f"{path}: the rules file is {path.stat().st_size:,} bytes, over the limit of "
        f"{MAX_RULES_FILE_BYTES:,} bytes" in result.stderr
    )
    assert seconds < 5


def test_many_problems_under_the_size_limit_are_reported_quickly(tmp_path):
    """10,000 unknown keys in 240 KB (under the limit): every problem counted, the first
    ``MAX_LISTED_PROBLEMS`` listed (all 10,000 were, one line each), in under 5 s of this
    thread's CPU (the de-duplication was quadratic: 20,000 keys took 2.5 s)."""
    path = tmp_path / "alerts.yml"
    path.write_text(unknown_keys(10_000))
    assert path.stat().st_size < MAX_RULES_FILE_BYTES

    started = time.thread_time()
    with pytest.raises(RulesError) as raised:
        load_rules(path)
    seconds = time.thread_time() - started

    print(f"\n10,000 unknown keys: {len(raised.value.problems)} lines after {seconds:.2f} CPU s")
    problems = raised.value.problems
    assert len(problems) == MAX_LISTED_PROBLEMS + 1
    assert problems[0] == (
        f"{path}: unknown_key_000000: unknown key "
        "(allowed: version, defaults, routes, rules, inhibit)"
    )
    assert problems[-1] == (
        f"{path}: … and {10_000 - MAX_LISTED_PROBLEMS:,} more problems "
        f"(fix the first {MAX_LISTED_PROBLEMS} and validate again)"
    )
    assert seconds < 5
