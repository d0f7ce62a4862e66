"""Issue 10 item 13: alerts.yml with YAML anchors/aliases (a recursive alias, a "billion
laughs" expansion) or absurd nesting is refused at once with a message naming the file and
the line, through `outbox-monitor alerts validate` and the scheduler's load path."""

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from outbox_monitor.alerts.rules import RulesError
from outbox_monitor.scheduler import load_alerting

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


def validate(path: Path) -> tuple[subprocess.CompletedProcess, float]:
    environment = {**os.environ, "PYTHONPATH": str(REPO)}
    environment.pop("OUTBOX_MONITOR_RULES", None)
    started = time.monotonic()
    result = subprocess.run(
        [sys.executable, "-m", "outbox_monitor", "alerts", "validate", "--rules", str(path)],
        env=environment,
        capture_output=True,
        text=True,
        timeout=120,
    )
    return result, time.monotonic() - started


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
    # ≈ 0.5 s here (the interpreter start); the billion laughs took > 60 s before the fix
    assert seconds < 10


@pytest.mark.parametrize("case", list(CASES))
def test_scheduler_load_path_refuses_aliases(tmp_path, case):
    text, where, what = CASES[case]
    path = tmp_path / "alerts.yml"
    path.write_text(text)

    started = time.monotonic()
    with pytest.raises(RulesError) as raised:
        load_alerting(str(path))
    seconds = time.monotonic() - started

    assert len(raised.value.problems) == 1
    problem = raised.value.problems[0]
    assert problem.startswith(f"{path}: {where}")
    assert what in problem
    assert seconds < 2
