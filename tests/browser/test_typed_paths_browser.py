"""The paths people type reach their page (issue 30 item 7), in a real headless Chromium:
Streamlit's router matches a page's path exactly, so each spelling below answered its bare
"Page not found" dialog before."""

import re

import pytest
from playwright.sync_api import expect

pytestmark = pytest.mark.browser

SPELLINGS = [
    ("dead-letters", "dead_letters", "Dead letters"),
    ("deadletters", "dead_letters", "Dead letters"),
    ("dead_letters/", "dead_letters", "Dead letters"),
    ("Dead_letters", "dead_letters", "Dead letters"),
    ("Overview", "overview", "Overview"),
    ("alerts/", "alerts", "Alerts"),
    ("Time-Line", "timeline", "Timeline"),
]


@pytest.mark.parametrize(("typed", "path", "heading"), SPELLINGS)
def test_a_typed_spelling_opens_its_page_with_its_query(dashboard, page, typed, path, heading):
    page.goto(f"{dashboard}/{typed}?window=6h")
    expect(page.get_by_role("heading", name=heading, exact=True)).to_be_visible()
    expect(page).to_have_url(re.compile(rf"/{path}\?(.*&)?window=6h"))
    expect(page.get_by_text("Page not found")).to_have_count(0)


def test_a_path_of_no_page_lists_the_pages(dashboard, page):
    page.goto(f"{dashboard}/no-such-thing")
    expect(page.get_by_role("heading", name="No such page")).to_be_visible()
    expect(page.get_by_text("No page has the path /no-such-thing")).to_be_visible()
    expect(page.get_by_text("Page not found")).to_have_count(0)
    page.get_by_role("link", name="Dead letters — /dead_letters").click()
    expect(page.get_by_role("heading", name="Dead letters", exact=True)).to_be_visible()
    expect(page).to_have_url(re.compile(r"/dead_letters$"))
