"""The Overview's headline (issue 30 item 2, AppTest): what is wrong comes first on the page —
before the firing alerts and the tiles — one line per troubled event type, each clause a
link; or one line saying nothing is."""

import html
import re

from rendered import plain

from tests.integration.test_diagnosis import (
    HOURS,
    add_retrying,
    claims_recently,
    open_breaker,
    when,
)

PAGE_FRAME = ("html", "title")
"""What comes before any page's content: the stylesheet's script and the page's title."""


def in_order(at) -> list:
    """The main area's elements in page order (containers opened)."""
    found = []

    def walk(node) -> None:
        children = getattr(node, "children", None)
        if children is None:
            found.append(node)
            return
        for child in children.values():
            walk(child)

    walk(at.main)
    return found


def text_of(source: str) -> str:
    """What a person reads of a headline line: tags and the icon removed, escapes read."""
    return plain(html.unescape(re.sub(r"<[^>]+>", "", source))).removeprefix(":material/error: ")


def test_the_overview_opens_with_what_is_wrong_each_clause_a_link(open_page, rows, conn):
    add_retrying(rows, HOURS, 1800)
    rows.add(event_type="order.paid", created_ago=60)
    claims_recently(rows)
    open_breaker(conn, rows, 600)

    at = open_page("overview")

    assert not at.exception
    elements = in_order(at)
    first = next(e for e in elements if e.type not in PAGE_FRAME)
    assert first.type == "markdown" and "order.paid" in first.value
    assert text_of(first.value) == (
        "order.paid — 1 waiting, 2 retrying with “HTTP 503 from erp” since "
        f"{when(rows, HOURS)} (2h 0m), oldest pending 2h 0m, breaker open; likely cause: "
        "downstream failing (one error for 2 of 2 retrying rows) → Controls · Events"
    )
    links = dict(
        (text_of(label), html.unescape(href))
        for href, label in re.findall(r'<a href="([^"]*)" target="_self">(.*?)</a>', first.value)
    )
    assert links == {
        "order.paid": "events?event_type=order.paid",
        "1 waiting": "events?event_type=order.paid&status=pending",
        "2 retrying": "events?event_type=order.paid&status=pending",
        "oldest pending 2h 0m": "events?event_type=order.paid&status=pending",
        "breaker open": "controls?event_type=order.paid",
        "likely cause: downstream failing (one error for 2 of 2 retrying rows)": (
            "events?event_type=order.paid&status=pending"
        ),
        "Controls": "controls?event_type=order.paid",
        "Events": "events?event_type=order.paid",
    }
    assert "<em>HTTP 503 from erp</em>" in first.value


def test_nothing_wrong_is_one_line_first(open_page, rows):
    rows.add(event_type="order.paid", created_ago=10)
    claims_recently(rows)

    at = open_page("overview")

    assert not at.exception
    first = next(e for e in in_order(at) if e.type not in PAGE_FRAME)
    assert first.value == (
        "Nothing wrong: no event type has a firing alert, a pending row older than 5m, 10+ "
        "retrying rows or 10+ dead letters in the last 1h (each at least 5% of its rows "
        "created then), held rows, an open breaker, or due rows with no claim for 10m."
    )
    assert at.success[0].value == first.value
