"""The Events page's payload search in a real headless Chromium (issue 15 item 6): typed into
the form and submitted, it lists the matches, says why it is slow and shows the index that
would serve it; an input error names its field."""

import pytest
from playwright.sync_api import expect

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
