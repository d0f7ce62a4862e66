"""Sign-in in a real headless Chromium (docs/security.md): OIDC through a real provider
(npm ``oidc-provider`` on 127.0.0.1, its real login and consent pages) and the trusted
proxy header, each against ``outbox-monitor dashboard`` in that mode.

One provider and one dashboard per mode serve every test of that mode (a Streamlit start
and its cold first page cost seconds); the tests share its database and keep apart by
event type.
"""

import hashlib
import re
import shutil
from collections.abc import Iterator
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path

import psycopg
import pytest
from playwright.sync_api import Browser, Page, expect
from psycopg.rows import dict_row

from outbox_monitor.demo.pgcluster import TemporaryCluster
from outbox_monitor.ui.deep_link import NEXT_COOKIE
from tests.browser_support import ELEMENT_TIMEOUT_MS
from tests.conftest import Rows
from tests.oidc_support import (
    Dashboard,
    module_database,
    node,
    offline,
    oidc_settings,
    run_provider,
    serve,
    sign_in,
)
from tests.proxy_support import header_proxy

pytestmark = pytest.mark.browser

VIEWER = "viewer@example.com"
OPERATOR = "ops@example.com"
STRANGER = "stranger@elsewhere.org"
GROUPS = {OPERATOR: ["oncall", "payments"], VIEWER: ["staff"]}
"""The provider's ``groups`` claim per login; only ``oncall`` maps to a role."""
MAPPING = {"viewers": "@example.com", "operators": "groups=oncall"}
"""OUTBOX_MONITOR_VIEWERS / _OPERATORS: the whole domain views, the on-call group acts."""
TIMEOUT = "timeout after 5000 ms"
VIEWER_PAGES = [
    "Overview",
    "Events",
    "Dead letters",
    "Alerts",
    "Controls",
    "Health",
    "Workers",
    "Timeline",
]
"""The sidebar's pages for a viewer; an operator's add Actions."""


def group_id(event_type: str) -> str:
    """The error group of ``TIMEOUT`` rows of ``event_type`` (numbers normalised)."""
    return hashlib.md5(f"{event_type}:timeout after <n> ms".encode()).hexdigest()[:12]


def metric_value(page: Page, label: str) -> str:
    tile = page.locator('[data-testid="stMetric"]').filter(has_text=label)
    return tile.locator('[data-testid="stMetricValue"]').inner_text()


def show_event_type(page: Page, kind: str) -> None:
    """Filter by ``kind`` in the sidebar (a rerun, not a reload: quicker than a new URL;
    the filter stays in the URL when the sidebar's page links are clicked)."""
    event_type = page.get_by_role("textbox", name="Event type")
    event_type.fill(kind)
    event_type.press("Enter")
    expect(page).to_have_url(re.compile(f"event_type={re.escape(kind)}"))


def open_page(page: Page, title: str) -> None:
    """Click ``title`` in the sidebar's navigation and wait for its heading."""
    page.locator('[data-testid="stSidebarNav"]').get_by_role("link", name=title).click()
    expect(page.get_by_role("heading", name=title)).to_be_visible()


def signed_in(page: Page, url: str, login: str, role: str) -> None:
    """Sign in at ``url`` as ``login`` through the provider (``sign_in``) and wait for the
    sidebar's "Signed in as … · role"."""
    sign_in(page, url, login)
    expect(page.get_by_text(f"Signed in as {login} · {role}")).to_be_visible()


def navigation(page: Page) -> list[str]:
    """The page titles listed in the sidebar navigation (each link's text is its icon's
    name, then its title)."""
    links = page.locator('[data-testid="stSidebarNav"] [data-testid="stSidebarNavLink"]')
    expect(links.first).to_be_visible()
    return [text.strip().splitlines()[-1] for text in links.all_inner_texts()]


@pytest.fixture(scope="module")
def shared_dsn(pg_cluster: TemporaryCluster) -> str:
    """One database for the tests of this module (they keep apart by event type), cloned
    from the suite's template under a name of its own."""
    return module_database(pg_cluster, "signin")


@pytest.fixture(scope="module")
def shared_conn(shared_dsn: str) -> Iterator[psycopg.Connection]:
    with psycopg.connect(shared_dsn, autocommit=True, row_factory=dict_row) as connection:
        yield connection


@pytest.fixture
def outbox(shared_conn: psycopg.Connection) -> Rows:
    return Rows(shared_conn)


@dataclass(frozen=True)
class Served:
    """The module's dashboards: base URLs by mode (``oidc`` is absent without node),
    the folder of their logs, and the secrets they were given."""

    urls: dict[str, str]
    logs: Path
    secrets: tuple[str, ...]


@pytest.fixture(scope="module")
def dashboards(shared_dsn: str, tmp_path_factory) -> Iterator[Served]:
    """``oidc`` (sign-in through the real provider) and ``proxy`` (trusted proxy header),
    started side by side once for the module."""
    directory = tmp_path_factory.mktemp("signin")
    oidc = Dashboard("oidc", {"dsn": shared_dsn, **MAPPING})
    proxy = Dashboard(
        "proxy",
        # the groups header is read only when named (its proxy sets it and strips the client's)
        {
            "dsn": shared_dsn,
            "auth": "proxy",
            "proxy_groups_header": "X-Forwarded-Groups",
            **MAPPING,
        },
    )
    with ExitStack() as stack:
        served = [proxy]
        if shutil.which("node"):
            provider = stack.enter_context(
                run_provider(
                    redirect_uris=[oidc.redirect_url],
                    groups=GROUPS,
                    log_path=directory / "provider.log",
                )
            )
            oidc.settings.update(oidc_settings(provider, oidc))
            served.append(oidc)
        stack.enter_context(serve(served, directory))
        yield Served(
            {dashboard.name: dashboard.url for dashboard in served},
            directory,
            tuple(
                oidc.settings[name]
                for name in ("oidc_client_secret", "oidc_cookie_secret")
                if name in oidc.settings
            ),
        )


@pytest.fixture
def signin(dashboards: Served) -> str:
    """The dashboard with OUTBOX_MONITOR_AUTH=oidc; its URL."""
    if "oidc" not in dashboards.urls:
        node()  # skips: no node to run the provider
    return dashboards.urls["oidc"]


@pytest.fixture
def proxied(dashboards: Served) -> str:
    """The dashboard with OUTBOX_MONITOR_AUTH=proxy; its URL."""
    return dashboards.urls["proxy"]


@pytest.fixture
def oidc_page(page: Page) -> Page:
    offline(page.context)
    return page


# ------------------------------------------------------------------------------ OIDC


def test_viewer_sees_figures_but_no_action(
    signin, oidc_page, outbox, shared_conn, choose, screenshot
):
    page = oidc_page
    kind = "viewer.figures"
    pending = [outbox.add(event_type=kind, created_ago=ago) for ago in (60, 600, 2.5 * 3600)]
    failed = outbox.add(
        event_type=kind,
        status="failed",
        attempts=10,
        created_ago=900,
        processed_ago=300,
        last_error=TIMEOUT,
    )
    stuck = outbox.add(event_type=kind, status="processing", created_ago=1800, locked_ago=1200)

    signed_in(page, signin, VIEWER, "viewer")
    expect(page.get_by_role("heading", name="Overview")).to_be_visible()
    show_event_type(page, kind)
    expect(page.get_by_text(f"event type {kind} · window")).to_be_visible()
    assert metric_value(page, "Queue depth") == "3"
    assert metric_value(page, "Oldest pending age") == "2h 30m"
    assert metric_value(page, "Failed (24 h)") == "1"
    assert metric_value(page, "Stuck locks") == "1"
    assert navigation(page) == VIEWER_PAGES
    expect(page.get_by_text("Each page under the least role")).to_have_count(0)

    open_page(page, "Dead letters")
    expect(page.get_by_text("1 failed row in 1 error group")).to_be_visible()
    choose("Error group", re.compile(group_id(kind)))
    expect(
        page.get_by_text(f"{VIEWER} is a viewer: replaying needs the operator role.")
    ).to_be_visible()
    expect(page.get_by_role("button", name="Preview replay")).to_have_count(0)
    expect(page.get_by_text("Rows to replay")).to_have_count(0)
    screenshot("signin-viewer-dead-letters")

    # The Actions page by its URL: it is not among the viewer's pages, so the page that
    # answers says which role it needs and links the viewer's pages; no reap preview or
    # button appears.
    page.goto(f"{signin}/actions?event_type={kind}")
    expect(page.get_by_text("The Actions page needs the operator role.")).to_be_visible()
    expect(page.get_by_role("link", name="Overview — /overview")).to_be_visible()
    expect(page.get_by_text("Page not found")).to_have_count(0)
    expect(page.get_by_role("button", name=re.compile("reap|Confirm|Preview"))).to_have_count(0)
    expect(page.get_by_text("would be reaped")).to_have_count(0)

    statuses = shared_conn.execute(
        "SELECT id, status FROM integration_outbox WHERE event_type = %s", (kind,)
    ).fetchall()
    assert {r["id"]: r["status"] for r in statuses} == {
        **dict.fromkeys(pending, "pending"),
        failed: "failed",
        stuck: "processing",
    }
    audited = "SELECT count(*) AS n FROM outbox_monitor.audit_log WHERE actor = %s"
    assert shared_conn.execute(audited, (VIEWER,)).fetchone() == {"n": 0}


def test_operator_from_group_claim_replays_and_is_audited(
    signin, oidc_page, outbox, shared_conn, choose
):
    page = oidc_page
    kind = "operator.replay"
    chosen, left = (
        outbox.add(
            event_type=kind,
            status="failed",
            attempts=10,
            created_ago=900,
            processed_ago=ago,
            last_error=TIMEOUT,
        )
        for ago in (200, 100)
    )

    # ops@example.com matches the viewers' domain too: the higher role (groups=oncall) wins
    signed_in(page, signin, OPERATOR, "operator")
    assert navigation(page) == [*VIEWER_PAGES, "Actions"]

    show_event_type(page, kind)
    open_page(page, "Dead letters")
    expect(page.get_by_text("2 failed rows in 1 error group")).to_be_visible()
    choose("Error group", re.compile(group_id(kind)))
    page.locator('[data-testid="stMultiSelect"]').filter(has_text="Rows to replay").click()
    page.get_by_role("option", name=str(chosen), exact=True).click()
    page.keyboard.press("Escape")
    page.get_by_role("button", name="Preview replay").click()
    expect(page.get_by_text("1 row would be replayed")).to_be_visible()
    page.get_by_role("button", name="Confirm replay of 1 row").click()
    expect(page.get_by_text("Replayed 1 row; 0 were no longer failed.")).to_be_visible()
    expect(page.get_by_text(f"audited as {OPERATOR}")).to_be_visible()

    assert outbox.get(chosen)["status"] == "pending"
    assert outbox.get(chosen)["attempts"] == 0
    assert outbox.get(left)["status"] == "failed"
    audit = shared_conn.execute(
        "SELECT actor, action, affected_count, affected_ids FROM outbox_monitor.audit_log"
    ).fetchall()
    assert audit == [
        {"actor": OPERATOR, "action": "replay", "affected_count": 1, "affected_ids": [chosen]}
    ]


def test_unknown_user_is_asked_to_request_access(signin, oidc_page, screenshot):
    url = signin
    page = oidc_page
    sign_in(page, url, STRANGER)
    expect(page.get_by_role("heading", name="Ask for access")).to_be_visible()
    expect(
        page.get_by_text(f"You are signed in as {STRANGER}, but no role of outbox-monitor")
    ).to_be_visible()
    expect(page.get_by_role("button", name="Sign out")).to_be_visible()
    expect(page.locator('[data-testid="stMetric"]')).to_have_count(0)
    expect(page.locator('[data-testid="stSidebarNav"]')).to_have_count(0)
    screenshot("signin-ask-for-access")


def test_proxy_header_is_ignored_under_oidc(signin, browser: Browser):
    url = signin
    context = browser.new_context(extra_http_headers={"X-Forwarded-Email": OPERATOR})
    context.set_default_timeout(ELEMENT_TIMEOUT_MS)
    try:
        page = context.new_page()
        page.goto(url)
        expect(page.get_by_role("heading", name="Sign in")).to_be_visible()
        expect(page.get_by_role("button", name="Sign in")).to_be_visible()
        expect(page.locator('[data-testid="stMetric"]')).to_have_count(0)
    finally:
        context.close()


def test_a_deep_link_survives_the_sign_in(signin, oidc_page, outbox):
    # a link from Slack, opened signed out: after the provider's pages, that view opens
    kind = "deep.link"
    outbox.add(event_type=kind, status="failed", attempts=10, processed_ago=60, last_error=TIMEOUT)
    query = f"event_type={kind}&error_group={group_id(kind)}"
    page = oidc_page
    page.goto(f"{signin}/dead_letters?{query}")
    expect(page.get_by_role("button", name="Sign in")).to_be_visible()
    expect(page.get_by_text("Page not found")).to_have_count(0)
    assert page.url == f"{signin}/dead_letters?{query}"

    signed_in(page, f"{signin}/dead_letters?{query}", OPERATOR, "operator")
    expect(page.get_by_role("heading", name="Dead letters")).to_be_visible()
    expect(page).to_have_url(re.compile(rf"/dead_letters\?.*error_group={group_id(kind)}"))
    assert f"event_type={kind}" in page.url
    expect(page.locator('[data-testid="stMain"] h3').first).to_have_text(
        f"{kind} · timeout after <n> ms"
    )
    # followed, the link is dropped from the browser: a restart or another dashboard process
    # (whose followed nonces are not this one's) cannot send the root back to it
    page.wait_for_function(f"!document.cookie.includes('{NEXT_COOKIE}=')")
    assert NEXT_COOKIE not in {c["name"] for c in page.context.cookies()}
    # followed once: the root opens the Overview again
    page.goto(signin)
    expect(page.get_by_role("heading", name="Overview")).to_be_visible()


# --------------------------------------------------------------------- trusted proxy


def test_proxy_header_names_the_identity_and_role(proxied, page: Page, outbox):
    kind = "proxy.figures"
    for ago in (30, 90):
        outbox.add(event_type=kind, created_ago=ago)
    operator = {"X-Forwarded-Email": OPERATOR, "X-Forwarded-Groups": "payments, oncall"}
    with header_proxy(proxied, operator) as url:
        page.goto(f"{url}/?event_type={kind}")
        expect(page.get_by_text(f"Signed in as {OPERATOR} · operator")).to_be_visible()
        assert metric_value(page, "Queue depth") == "2"
        assert navigation(page)[-1] == "Actions"


def test_without_the_proxy_header_no_identity_and_no_figures(proxied, page: Page):
    page.goto(proxied)
    expect(page.get_by_role("heading", name="No identity")).to_be_visible()
    expect(
        page.get_by_text("expects the authenticating proxy in front of it to send the")
    ).to_be_visible()
    expect(page.locator('[data-testid="stMetric"]')).to_have_count(0)
    expect(page.locator('[data-testid="stSidebarNav"]')).to_have_count(0)


# ----------------------------------------------------------------------------- after


def test_the_logs_hold_no_secret(signin, dashboards: Served):
    """Last in the module: the dashboards' output after every sign-in above holds neither
    the OIDC client secret nor the cookie secret (docs/security.md, What is logged)."""
    logs = {path.name: path.read_text() for path in dashboards.logs.glob("*.log")}
    assert set(logs) == {"oidc.log", "proxy.log", "provider.log"}
    assert len(dashboards.secrets) == 2
    for name, text in logs.items():
        for secret in dashboards.secrets:
            assert secret not in text, f"{name} holds a secret"
