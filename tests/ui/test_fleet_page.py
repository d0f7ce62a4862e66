"""The Fleet page (issue 16 item 2): one row per outbox with its figures, computed by hand
from the rows inserted (two tables in one database, one in another); an unreachable database
is only its own row; each row links into its outbox's Overview, and the outbox stays in the
URL from page to page."""

import html
import re

import pytest
from rendered import plain

from tests.fleet_rows import seed_fleet, write_fleet
from tests.integration.test_diagnosis import when

# Outbox, status, queue depth, oldest pending, P95 latency (1h), failed (1h), firing alerts
# (orders and shipping share a database, each its own alert state), database. A status says
# what it is: orders has a dead letter in the hour and no alert firing, never a green "ok"
# (issue 30 item 4)
ROWS = [
    ["orders", "no alert firing", "2", "2h 0m", "29s", "1", "0", "reachable"],
    ["shipping", "alert firing", "3", "3h 0m", "–", "0", "1", "reachable"],
    ["billing", "alert firing", "1", "5h 0m", "5.0s", "2", "1", "reachable"],
]


def cells(at) -> dict[str, list[str]]:
    """The fleet table's cells by outbox, as drawn (markdown with inline HTML)."""
    (source,) = [m.value for m in at.markdown if m.value.startswith("| Outbox |")]
    found = {}
    for line in source.splitlines()[2:]:
        row = [c.strip() for c in line.strip("|").split(" | ")]
        name = re.fullmatch(r'<a href=".*" target="_self">(.*)</a>', row[0]).group(1)
        found[name] = row
    return found


def table(at) -> dict[str, list[str]]:
    """The fleet table's rows by outbox: each cell as read (markup of links and colours
    removed) but "What is wrong" (``what_is_wrong``), the outbox's link apart under
    ``"link"``."""
    found = {}
    for name, row in cells(at).items():
        link = re.fullmatch(r'<a href="(.*)" target="_self">.*</a>', row[0]).group(1)
        status = re.sub(r":\w+\[(.*)\]", r"\1", row[1])  # a colour's markup removed
        found[name] = [name, status, *(plain(c) for c in row[3:9]), html.unescape(link)]
    return found


def what_is_wrong(at) -> dict[str, tuple[str, dict[str, str]]]:
    """Each outbox's "What is wrong" cell as read, and its links by their text."""
    found = {}
    for name, row in cells(at).items():
        links = {
            plain(label): html.unescape(href)
            for href, label in re.findall(r'<a href="([^"]*)" target="_self">(.*?)</a>', row[2])
        }
        found[name] = (plain(html.unescape(re.sub(r"<[^>]+>", "", row[2]))), links)
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


def test_each_row_says_what_is_wrong_with_links_into_its_outbox(open_page, fleet_env, rows):
    fleet_env()
    at = open_page("fleet")

    assert not at.exception and not at.error
    found = what_is_wrong(at)
    # orders: its oldest pending row past the SLO; one dead letter in the hour is under
    # diagnosis.DEAD_LETTERS_MIN_ROWS, no poison event
    text, links = found["orders"]
    assert text == (
        f"order.paid — 2 waiting, 1 dead-lettered in 1h since {when(rows, 7200)} (2h 0m), "
        "oldest pending 2h 0m; cause unknown → Controls · Events"
    )
    assert links["Controls"] == "controls?event_type=order.paid&outbox=orders"
    # shipping: due rows of 1 to 3 hours and no claim, no outcome ever: the workers are down
    text, links = found["shipping"]
    assert text.startswith("parcel.sent — 3 waiting, oldest pending 3h 0m since ")
    assert text.endswith(
        "; likely cause: workers down (3 due rows, no claim for 3h 0m) → Controls · Events"
    )
    assert links["likely cause: workers down (3 due rows, no claim for 3h 0m)"] == (
        "workers?outbox=shipping"
    )


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


ACCESS = """
version: 1
outboxes:  # ops@example.com may view billing only, boss@example.com every outbox
  - {name: orders, dsn_env: ORDERS_DSN, access: {viewers: [boss@example.com]}}
  - {name: shipping, dsn_env: ORDERS_DSN, table: shipping.outbox,
     access: {viewers: [boss@example.com]}}
  - {name: billing, dsn_env: BILLING_DSN, access: {viewers: [boss@example.com],
     operators: [ops@example.com]}}
"""


def signed_in(email: str) -> dict:
    return {"is_logged_in": True, "email": email}


@pytest.fixture
def access_fleet(environment, fleet_env, tmp_path):
    """``fleet_env``'s three outboxes, each mapping roles of its own (``ACCESS``), behind an
    OIDC sign-in (the run's ``st.user``)."""
    fleet_env()
    (tmp_path / "outboxes.yml").write_text(ACCESS)
    environment.setenv("OUTBOX_MONITOR_AUTH", "oidc")


def test_without_a_chosen_outbox_the_first_the_person_may_view_is_shown(open_page, access_fleet):
    # the root / of a fleet switches to the Fleet page with its query: no outbox named
    # (AppTest cannot open / itself: its cookies, which the root reads, are mocks)
    landing = open_page("fleet", user=signed_in("ops@example.com"))

    assert not landing.exception and not landing.error
    assert [t.value for t in landing.title] == ["Fleet"]  # not "Ask for access" for orders
    assert landing.selectbox(key="outbox").value == "billing"
    assert landing.selectbox(key="outbox").options == ["billing"]  # no other outbox's name
    assert list(table(landing)) == ["billing"]  # only the outbox they may view

    overview = open_page("overview", user=signed_in("ops@example.com"))
    assert not overview.exception and not overview.error
    assert [m.value for m in overview.metric if m.label == "Queue depth"] == ["1"]  # billing's
    assert any("Signed in as `ops@example.com` · operator" in c.value for c in overview.caption)

    boss = open_page("fleet", user=signed_in("boss@example.com"))
    assert boss.selectbox(key="outbox").value == "orders"  # the file's first, as before
    assert boss.selectbox(key="outbox").options == ["orders", "shipping", "billing"]
    assert list(table(boss)) == ["orders", "shipping", "billing"]


def test_a_link_to_an_outbox_without_a_role_asks_to_choose_another(open_page, access_fleet):
    at = open_page("overview", outbox="orders", user=signed_in("ops@example.com"))

    assert not at.exception and not at.metric
    assert [plain(e.value) for e in at.error] == [
        "ops@example.com has no role on the outbox orders: choose another outbox in the "
        "sidebar, or ask an admin to add you to its access in the fleet file."
    ]
    assert at.selectbox(key="outbox").options == ["orders", "billing"]  # the linked one kept
    assert at.selectbox(key="outbox").select("billing").run().metric


def test_a_person_who_may_view_no_outbox_gets_one_message(open_page, access_fleet):
    at = open_page("fleet", user=signed_in("eve@example.com"))

    assert not at.exception
    assert [t.value for t in at.title] == ["Ask for access"]
    assert [plain(e.value) for e in at.error] == [
        "You are signed in as eve@example.com, but none of this dashboard's outboxes "
        "(orders, shipping, billing) gives you a role. Ask an admin to add your e-mail, "
        "domain or group to an outbox's access in the fleet file (OUTBOX_MONITOR_OUTBOXES), "
        "or to OUTBOX_MONITOR_VIEWERS (or _OPERATORS, _ADMINS)."
    ]
