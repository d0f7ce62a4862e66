"""Links into the dashboard open a page Streamlit serves: the Overview (the default page)
is served at ``/`` only, its ``url_path`` ``/overview`` shows a "Page not found" dialog.
Alert messages' ``dashboard_path`` of every shipped rule and the README, package, pages,
n8n and deploy files never link to ``/overview``."""

import re
from pathlib import Path
from urllib.parse import urlsplit

import pytest

from outbox_monitor.alerts.links import dashboard_path
from outbox_monitor.alerts.message import DEFAULT_DASHBOARD_URL, dashboard_link
from outbox_monitor.alerts.rules_file import load_rules

ROOT = Path(__file__).resolve().parents[2]
# each st.Page of dashboard.py: its url_path and whether it is the default page
_PAGE = re.compile(r"st\.Page\((?P<args>[^()]*)\)", re.S)
_LINK = re.compile(r"(?<![\w./-])/overview\b(?![.\w])|:\d+/overview\b|\]\(/?overview\b")
SCANNED = ("README.md", "alerts.yml", "dashboard.py", "outbox_monitor", "pages", "n8n", "deploy")
TEXT_SUFFIXES = {".py", ".md", ".yml", ".yaml", ".json", ".sql", ".toml", ".sh", ".conf", ""}


def served_paths() -> set[str]:
    """The paths Streamlit serves a page at: ``/`` for the default page, ``/<url_path>``
    for the others."""
    paths = set()
    for page in _PAGE.finditer((ROOT / "dashboard.py").read_text()):
        args = page["args"]
        if "default=True" in args:
            paths.add("/")
        else:
            paths.add("/" + re.search(r'url_path="([^"]+)"', args)[1])
    return paths


def test_the_overview_is_the_default_page_served_at_the_root():
    paths = served_paths()
    assert "/" in paths and "/overview" not in paths
    assert {"/events", "/dead_letters", "/alerts", "/actions"} <= paths


@pytest.mark.parametrize("event_type", [None, "payment.%"])
def test_every_shipped_rule_links_to_a_served_page(event_type):
    paths = served_paths()
    for rule in load_rules(ROOT / "alerts.yml").rules:
        path = dashboard_path(rule, event_type, "ab12cd34ef56")
        assert urlsplit(path).path in paths, (rule.name, path)
        assert urlsplit(dashboard_link(DEFAULT_DASHBOARD_URL, path)).path in paths


@pytest.mark.parametrize(
    ("text", "links"),
    [
        ("open http://127.0.0.1:8501/overview?window=1h", True),
        ("[Overview](/overview)", True),
        ("`/overview?event_type=x`", True),
        ('"dashboard_path": "/overview"', True),
        ("![Overview page](docs/overview.png) pages/overview.py", False),
        ('url_path="overview"', False),
    ],
)
def test_the_scan_knows_a_link(text, links):
    assert bool(_LINK.search(text)) is links


def test_nothing_shipped_links_to_overview():
    found = []
    for name in SCANNED:
        top = ROOT / name
        files = [top] if top.is_file() else [p for p in top.rglob("*") if p.is_file()]
        for file in files:
            if file.suffix not in TEXT_SUFFIXES or "__pycache__" in file.parts:
                continue
            text = file.read_text(errors="replace")
            found += [
                f"{file.relative_to(ROOT)}: {m.group()}"
                for m in _LINK.finditer(text)
                if file.name != "message.py"  # DEFAULT_PAGE_PATHS names it to rewrite it
            ]
    assert found == []
