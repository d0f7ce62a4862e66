"""The README a newcomer reads first, and the docs site's pages that tests cannot otherwise keep
honest: README stays short with the two commands word for word; docs/SPEC.md is the shared
SPEC; every shipped alert has its drill on "When paged"; every test the Guarantees page names
exists and every row names one. (`make lint` builds the site with `mkdocs build --strict`:
links, anchors, nav.)"""

import ast
import re
from pathlib import Path

import pytest
import yaml

from outbox_monitor.alerts import outage, replica_lag, stall, write_health

REPO = Path(__file__).resolve().parents[2]
DOCS = REPO / "docs"
SHARED_SPEC = REPO.parent / "shared" / "SPEC.md"
"""The SPEC every project session shares; a clean clone may not have it beside it."""


def test_the_readme_is_short_and_holds_both_commands_word_for_word():
    text = (REPO / "README.md").read_text()
    lines = text.splitlines()
    assert len(lines) <= 300, len(lines)
    assert [n for n, line in enumerate(lines, 1) if len(line) > 200] == []
    for command in ("make demo", "make test"):
        assert f"```sh\n{command}\n```" in text, command
    assert "(docs/overview.png)" in text and (DOCS / "overview.png").is_file()


def test_every_relative_link_of_the_readme_names_a_file():
    readme = (REPO / "README.md").read_text()
    targets = re.findall(r"\]\((?!https?:|#)([^)#\s]+)", readme)
    assert "docs/index.md" in targets
    assert [t for t in targets if not (REPO / t).exists()] == []


def test_no_page_has_a_line_over_200_characters():
    # SPEC.md is the shared file, byte for byte; a row of the Guarantees table names its
    # tests whole (a table row cannot be wrapped)
    pages = sorted(path for path in DOCS.glob("*.md") if path.name != "SPEC.md")
    assert len(pages) >= 15
    long = [
        f"{page.name}:{n}"
        for page in pages
        for n, line in enumerate(page.read_text().splitlines(), 1)
        if len(line) > 200 and not (page.name == "guarantees.md" and line.startswith("| "))
    ]
    assert long == []


def test_docs_spec_is_the_shared_spec():
    if not SHARED_SPEC.exists():
        pytest.skip("no ../shared/SPEC.md beside this clone to compare with")
    assert (DOCS / "SPEC.md").read_bytes() == SHARED_SPEC.read_bytes(), (
        "docs/SPEC.md differs from ../shared/SPEC.md: copy it over"
    )


def test_every_shipped_alert_has_its_runbook_or_drill_when_paged():
    shipped = yaml.safe_load((REPO / "alerts.yml").read_text())
    rules = [rule["name"] for rule in shipped["rules"]]
    own = [stall.RULE_NAME, outage.RULE_NAME, replica_lag.RULE_NAME, write_health.RULE_NAME]
    assert own == ["alerting-stalled", "database-unreachable", "replica-lag", "writes-failing"]
    # the shipped rules: their runbook steps, generated (tests/unit/test_reference.py)
    page = (DOCS / "when-paged.md").read_text()
    assert re.findall(r"^## (.+)$", page, re.MULTILINE) == rules
    assert "[When the scheduler pages](scheduler-alerts.md)" in page
    # the scheduler's own alerts (no rule): a drill each with its steps, generated from
    # alerts/own_runbooks.py (tests/unit/test_reference.py holds it current)
    drills = (DOCS / "scheduler-alerts.md").read_text()
    titles = re.findall(r"^## (.+)$", drills, re.MULTILINE)
    assert set(own) <= {title.split()[0] for title in titles}
    for name in own:
        assert "**Steps** (its Slack message shows them):" in drills.split(f"## {name}\n")[1]
    # each drill says what it means, where to look, why, what to do and when it is over
    for title in titles:
        body = drills.split(f"## {title}\n", 1)[1].split("\n## ", 1)[0]
        for part in ("**Means.**", "**First look.**", "**Likely causes.**", "**Fix.**"):
            assert part in body, (title, part)
        assert "**Over when.**" in body, title


def defined_tests(path: Path) -> set[str]:
    """The names of the test functions defined at the top level of one test file (what pytest
    collects; a ``def test_…`` nested in another function is never run)."""
    tree = ast.parse(path.read_text())
    return {
        node.name
        for node in tree.body
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
        and node.name.startswith("test_")
    }


NAMED_TEST = re.compile(r"`(tests/[\w/]+\.py)::(test_\w+)`")
"""A test the Guarantees page names: ``file::function``, in backticks."""


def test_every_test_the_guarantees_page_names_exists():
    page = (DOCS / "guarantees.md").read_text()
    named = NAMED_TEST.findall(page)
    assert len(named) >= 50
    missing = [
        f"{path}::{name}"
        for path, name in named
        if not (REPO / path).is_file() or name not in defined_tests(REPO / path)
    ]
    assert missing == []
    assert "## What is not guaranteed" in page


def test_every_guarantee_row_names_a_test_function():
    """A row naming a test file only (or nothing) is no proof the test above can check: each
    row's "proved by" column names at least one ``file::function``."""
    page = (DOCS / "guarantees.md").read_text()
    rows = [
        line
        for line in page.splitlines()
        if line.startswith("| ") and not line.startswith("| promise |")
    ]
    assert len(rows) >= 100
    unproved = [row[:120] for row in rows if not NAMED_TEST.search(row.rsplit(" | ", 1)[-1])]
    assert unproved == []


def test_only_a_top_level_test_function_counts_as_named(tmp_path):
    source = tmp_path / "test_example.py"
    source.write_text(
        "def test_outer():\n"
        "    def test_nested():\n"
        "        pass\n"
        "\n"
        "async def test_async():\n"
        "    pass\n"
        "\n"
        "class Helper:\n"
        "    def test_method(self):\n"
        "        pass\n"
    )
    assert defined_tests(source) == {"test_outer", "test_async"}


def test_every_logger_the_package_logs_under_is_listed_on_the_security_page():
    """Moved modules log under their old flat names; the page lists what the code uses."""
    package = REPO / "outbox_monitor"
    named: set[str] = set()
    for path in package.rglob("*.py"):
        text = path.read_text()
        named.update(re.findall(r'getLogger\("(outbox_monitor[\w.]*)"\)', text))
        if "getLogger(__name__)" in text:
            named.add(".".join(path.relative_to(REPO).with_suffix("").parts))
    assert {"outbox_monitor.scheduler", "outbox_monitor.outbox"} <= named
    section = (DOCS / "security.md").read_text().split("## What is logged", 1)[1]
    page = section.split("The `logger` of a line", 1)[1].split("\n\n", 1)[0]
    listed = set(re.findall(r"`(outbox_monitor[\w.]*)`", page))
    demo = {name for name in named if name.startswith("outbox_monitor.demo.")}
    assert "`outbox_monitor.demo.*`" in page and demo
    assert named - demo == listed
