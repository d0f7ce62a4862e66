"""Links into the dashboard open a page Streamlit serves: the Overview at ``/overview``
(its own URL, issue 15 item 8; ``/``, Streamlit's default page, sends there), and the
``dashboard_path`` of every shipped rule."""

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


def served_paths() -> set[str]:
    """The paths Streamlit serves a page at: ``/`` (the default page, whichever it is) and
    ``/<url_path>`` of each named page."""
    pages = _PAGE.finditer((ROOT / "dashboard.py").read_text())
    return {"/"} | {"/" + m[1] for p in pages if (m := re.search(r'url_path="([^"]+)"', p[1]))}


def test_the_overview_has_its_own_url_and_the_root_sends_there():
    assert {"/", "/overview", "/events", "/dead_letters", "/alerts", "/actions"} <= served_paths()
    # the Fleet page instead for a fleet of several outboxes and no ?outbox= (test_fleet_browser)
    assert "state.open_overview(OVERVIEW, allowed, fleet=" in (ROOT / "dashboard.py").read_text()


@pytest.mark.parametrize("event_type", [None, "payment.%"])
def test_every_shipped_rule_links_to_a_served_page(event_type):
    paths = served_paths()
    for rule in load_rules(ROOT / "alerts.yml").rules:
        path = dashboard_path(rule, event_type, "ab12cd34ef56")
        assert urlsplit(path).path in paths, (rule.name, path)
        assert urlsplit(dashboard_link(DEFAULT_DASHBOARD_URL, path)).path in paths
