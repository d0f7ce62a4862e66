"""The Events page's payload search in a real headless Chromium (issue 15 item 6): typed into
the form and submitted, it lists the matches, says why it is slow and shows the index that
would serve it; an input error names its field."""

import pytest
from playwright.sync_api import expect

from tests.browser_support import choose_row

pytestmark = pytest.mark.browser


def test_a_containment_search_lists_matches_and_advises_the_index(
    dashboard, page, rows, screenshot
):
    for ago in (300, 200):
        rows.add(payload={"customer": {"id": "42"}, "amount": ago}, created_ago=ago)
    rows.add(payload={"customer": {"id": "7"}}, created_ago=100)

    page.goto(f"{dashboard}/events")
    expect(page.get_by_role("heading", name="Payload search")).to_be_visible()
    document = page.get_by_role("textbox", name="JSON document")
    document.fill('{"customer": ')
    page.get_by_role("button", name="Search payloads").click()
    expect(page.get_by_text("Document: not valid JSON (Expecting value")).to_be_visible()

    document.fill('{"customer": {"id": "42"}}')
    page.get_by_role("button", name="Search payloads").click()
    expect(page.get_by_text("2 matches created from")).to_be_visible()
    expect(page.get_by_text("no GIN index on payload can serve this search")).to_be_visible()
    advice = page.locator('[data-testid="stCode"]').filter(has_text="CREATE INDEX CONCURRENTLY")
    expect(advice).to_contain_text("USING gin (payload jsonb_path_ops);")
    screenshot("events-payload-search")


def test_a_clicked_match_opens_its_detail(dashboard, page, rows, screenshot):
    older = rows.add(payload={"customer": {"id": "42"}, "amount": 300}, created_ago=300)
    newer = rows.add(payload={"customer": {"id": "42"}, "amount": 200}, created_ago=200)
    rows.add(payload={"customer": {"id": "7"}, "amount": 100}, created_ago=100)
    page.set_viewport_size({"width": 1440, "height": 900})

    page.goto(f"{dashboard}/events")
    main = page.locator('[data-testid="stMain"]')
    page.get_by_role("textbox", name="JSON document").fill('{"customer": {"id": "42"}}')
    page.get_by_role("button", name="Search payloads").click()
    expect(page.get_by_text("2 matches created from")).to_be_visible()
    expect(page.get_by_text("Select an event to see its payload")).to_be_visible()
    # the results: the grid after the Events list, newest first (its accessible table)
    results = main.locator('[data-testid="stDataFrame"]').nth(1)
    ids = results.locator('table[role="grid"] tr[role="row"] td:nth-child(1)')
    expect(ids).to_have_text([str(newer), str(older)])

    results.scroll_into_view_if_needed()
    choose_row(page, results, 1)  # the second match: the older one
    summary = main.locator("p").filter(has_text=f"{older} · order.paid · status pending")
    expect(summary).to_be_visible()
    payload = main.locator('[data-testid="stCode"]').filter(has_text='"amount": 300')
    expect(payload).to_be_visible()
    expect(main.locator('[data-testid="stCode"]').filter(has_text='"amount": 200')).to_have_count(0)
    screenshot("events-payload-search-detail")
