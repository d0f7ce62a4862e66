"""The Fleet page (issue 16 item 2): one row per outbox with its figures, computed by hand
from the rows inserted (two tables in one database, one in another); an unreachable database
is only its own row; each row links into its outbox's Overview, and the outbox stays in the
URL from page to page."""

import html
import re

import pytest
from rendered import plain

from tests.fleet_rows import seed_fleet, write_fleet

# Outbox, status, queue depth, oldest pending, P95 latency (1h), failed (1h), firing alerts
# (orders and shipping share a database, each its own alert state), database
ROWS = [
    ["orders", "ok", "2", "2h 0m", "29s", "1", "0", "reachable"],
    ["shipping", "firing", "3", "3h 0m", "–", "0", "1", "reachable"],
    ["billing", "firing", "1", "5h 0m", "5.0s", "2", "1", "reachable"],
]


def table(at) -> dict[str, list[str]]:
    """The fleet table's rows by outbox: each cell as read (markup of links and colours
    removed), the outbox's link apart under ``"link"``."""
    (source,) = [m.value for m in at.markdown if m.value.startswith("| Outbox |")]
    found = {}
    for line in source.splitlines()[2:]:
        cells = [c.strip() for c in line.strip("|").split(" | ")]
        link, name = re.fullmatch(r'<a href="(.*)" target="_self">(.*)</a>', cells[0]).groups()
        status = cells[1].split("[")[1].rstrip("]")
        found[name] = [name, status, *(plain(c) for c in cells[2:8]), html.unescape(link)]
    return found


@pytest.fixture
def fleet_env(environment, dsn, make_dsn, rows, tmp_path):
    billing = make_dsn()
    seed_fleet(dsn, billing, rows)

    def use(*, down: bool = False) -> None:
        path = write_fleet(tmp_path, environment, dsn, billing, down=down)
        environment.setenv("OUTBOX_MONITOR_OUTBOXES", str(path))

    return use


def test_one_row_per_outbox_with_its_figures_and_link(open_page, fleet_env):
    fleet_env()
    at = open_page("fleet")

    assert not at.exception and not at.error
    found = table(at)
    assert [row[:-1] for row in found.values()] == ROWS
    assert found["billing"][-1] == "overview?outbox=billing&window=1h"
    assert any("3 outboxes · window 1h" in c.value for c in at.caption)


def test_an_unreachable_database_degrades_only_its_row(open_page, fleet_env):
    fleet_env(down=True)
    at = open_page("fleet")

    assert not at.exception and not at.error
    found = table(at)
    assert [row[:-1] for name, row in found.items() if name != "lost"] == ROWS
    lost = found["lost"]
    assert lost[1:7] == ["unreachable", "–", "–", "–", "–", "–"]
    assert lost[7].startswith("unreachable: ") and "refused" in lost[7].lower()
    assert any("4 outboxes" in c.value and "1 unreachable" in c.value for c in at.caption)


def test_a_link_opens_its_outbox_which_stays_chosen_from_page_to_page(open_page, fleet_env):
    fleet_env()
    at = open_page("overview", outbox="billing")  # a row's link, or a Slack message's
    assert [m.value for m in at.metric if m.label == "Queue depth"] == ["1"]

    at.switch_page("pages/dead_letters.py").run()  # the sidebar's navigation: same session

    assert not at.exception and not at.warning
    assert at.selectbox(key="outbox").value == "billing"
    groups = at.dataframe[0].value
    assert set(groups["event_type"]) == {"invoice.sent"}  # billing's dead letters, not orders'


def test_a_fleet_of_one_has_no_fleet_page(open_page, rows):
    rows.add(created_ago=60)
    at = open_page("fleet")
    assert not [m for m in at.markdown if m.value.startswith("| Outbox |")]
