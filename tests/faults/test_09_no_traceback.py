"""Issue 10, item 9: no page shows a traceback or a server path.

Inputs Postgres cannot hold (NUL, unpaired surrogates, absurd lengths) get an inline
message where they are read; any other unexpected error shows a short message with an
error id, and the log line with the traceback carries that id.
"""

import logging
import re
from urllib.parse import quote

import pytest
from playwright.sync_api import expect

from outbox_monitor.ui import inputs
from tests.browser_support import settled
from tests.ui.conftest import environment, fresh_caches, open_page  # noqa: F401 (fixtures)
from tests.ui.rendered import plain

PAGES = ["overview", "events", "dead_letters", "actions", "alerts", "health"]
NUL_MESSAGE = (
    "The event-type filter contains a NUL character (U+0000), which Postgres text cannot hold"
)
ERROR_ID = re.compile(r"error id `([0-9a-f]{8})`")
BROKEN_FUNCTION = """
    CREATE OR REPLACE FUNCTION outbox_monitor.normalize_error(p_error text)
    RETURNS text LANGUAGE plpgsql AS $$
    BEGIN
        RAISE EXCEPTION 'normalize_error broken on purpose';
    END
    $$
"""


def texts(at) -> list[str]:
    """What a person reads in the page's and the sidebar's error and warning boxes."""
    boxes = [*at.error, *at.warning, *at.sidebar.error, *at.sidebar.warning]
    return [plain(box.value) for box in boxes]


@pytest.mark.parametrize("name", PAGES)
def test_a_nul_in_the_event_type_link_is_an_inline_message(open_page, rows, name):  # noqa: F811
    rows.add(event_type="order.paid", status="failed", processed_ago=60, last_error="boom")

    at = open_page(name, event_type="\x00x")

    assert not at.exception
    shown = texts(at)
    assert f"{NUL_MESSAGE}: change it in the sidebar to see this page." in shown
    assert NUL_MESSAGE in shown  # under the input, in the sidebar


def test_an_absurdly_long_event_type_is_an_inline_message(open_page):  # noqa: F811
    at = open_page("events", event_type="x" * 1001)

    assert not at.exception
    assert "The event-type filter is 1,001 characters long; a filter takes at most 1,000" in texts(
        at
    )


def test_an_unpaired_surrogate_is_refused_before_any_query():
    # Streamlit's protocol cannot carry one to a page (UTF-8), the parser is the guard.
    with pytest.raises(
        ValueError, match=r"^the event type contains an unpaired surrogate \(U\+D800\)"
    ):
        inputs.parse_text("a\ud800b", what="the event type")


def test_search_fields_and_the_group_link_say_what_is_wrong(open_page, rows):  # noqa: F811
    rows.add(event_type="order.paid", status="failed", processed_ago=60, last_error="boom")

    events = open_page("events", event_key="a\x00b")
    dead_letters = open_page("dead_letters", error_group="\x00")

    assert not events.exception and not dead_letters.exception
    assert (
        "Event key: the event key contains a NUL character (U+0000), which Postgres text "
        "cannot hold" in texts(events)
    )
    assert (
        "Ignored error_group from the link: an error group id is 12 hex digits (see the "
        "Dead letters page)." in texts(dead_letters)
    )
    assert dead_letters.dataframe[0].value["failed"].tolist() == [1]  # the page goes on


def test_an_unexpected_error_shows_an_id_that_the_log_carries(open_page, rows, conn, caplog):  # noqa: F811
    rows.add(event_type="order.paid", status="failed", processed_ago=60, last_error="boom")
    conn.execute(BROKEN_FUNCTION)  # every error-group query now raises (SQLSTATE P0001)

    with caplog.at_level(logging.ERROR, logger="outbox_monitor"):
        at = open_page("dead_letters")

    assert not at.exception
    [message] = [text for text in texts(at) if "Unexpected error" in text]
    assert message.startswith("**Unexpected error** — this part of the page could not be shown")
    error_id = ERROR_ID.search(at.error[0].value).group(1)
    [record] = [r for r in caplog.records if error_id in r.getMessage()]
    assert record.levelno == logging.ERROR
    assert "normalize_error broken on purpose" in caplog.text  # the traceback, in the log only
    assert "normalize_error broken on purpose" not in str([*at.error, *at.info, *at.markdown])


@pytest.mark.browser
def test_the_browser_sees_no_traceback_nor_server_path(dashboard, page, rows, conn):
    rows.add(event_type="order.paid", status="failed", processed_ago=60, last_error="boom")

    page.goto(f"{dashboard}/overview?event_type={quote(chr(0))}x")
    expect(page.get_by_text(NUL_MESSAGE).first).to_be_visible()
    settled(page)  # the whole page: a traceback drawn after the message would count
    overview = page.locator("body").inner_text()

    conn.execute(BROKEN_FUNCTION)
    page.goto(f"{dashboard}/dead_letters")
    expect(page.get_by_text("Unexpected error")).to_be_visible()
    settled(page)
    dead_letters = page.locator("body").inner_text()

    for text in (overview, dead_letters):
        assert "Traceback" not in text
        assert "/work/" not in text and ".py" not in text
        assert "DataError" not in text and "RaiseException" not in text
    assert re.search(r"error id [0-9a-f]{8}", dead_letters)
