"""Events page on seeded rows: search, keyset pages, the detail view and the timeline."""

import json

import streamlit as st
from rendered import plain, unprotected

PAGE = "events"
TEXT = ("caption", "markdown")


def listed_ids(at) -> list[int]:
    return [int(i) for i in at.dataframe(key="events.table").value["id"]]


def test_keyset_pages_older_and_newest(open_page, rows):
    added = [rows.add(created_ago=1000 - n) for n in range(55)]

    at = open_page(PAGE)
    assert listed_ids(at) == added[::-1][:50]
    assert at.button(key="events.newest").disabled

    at.button(key="events.older").click().run()
    assert listed_ids(at) == added[4::-1]
    assert at.button(key="events.older").disabled  # 5 < 50: no older page

    at.button(key="events.newest").click().run()
    assert listed_ids(at) == added[::-1][:50]
    assert not at.exception


def test_the_header_counts_every_matching_event_not_the_page(open_page, rows, monkeypatch):
    """Issue 30 item 8: 55 events and 3 of another type; 50 listed per page."""
    for _ in range(55):
        rows.add(event_type="order.paid")
    for _ in range(3):
        rows.add(event_type="mail.sent")

    at = open_page(PAGE, event_type="order.paid")
    header = "Events 1–50 of 55, newest id first · page 1 (newest)"
    assert any(c.value == header for c in at.caption)
    at.button(key="events.older").click().run()
    assert any(c.value == "Events 51–55 of 55, newest id first · page 2" for c in at.caption)

    # above the dashboard's cap the count stops: "more than" the cap
    monkeypatch.setattr("outbox_monitor.figures.estimates.DASHBOARD_COUNT_CAP", 40)
    st.cache_data.clear()
    at = open_page(PAGE)
    header = "Events 1–50 of more than 40, newest id first · page 1 (newest)"
    assert any(c.value == header for c in at.caption)


def test_search_filters_from_url_and_inputs(open_page, rows):
    old = rows.add(event_type="order.paid", created_ago=3 * 3600, aggregate=("order", "7"))
    failed = rows.add(event_type="order.paid", status="failed", processed_ago=60, last_error="e")
    invoice = rows.add(event_type="invoice.sent", created_ago=120, event_key="inv-1")

    at = open_page(PAGE, status="failed")
    assert listed_ids(at) == [failed]

    at = open_page(PAGE, event_type="order.%")
    assert listed_ids(at) == [failed, old]
    at.text_input(key="since").set_value("2h").run()
    assert listed_ids(at) == [failed]

    at = open_page(PAGE, aggregate_type="order", aggregate_id="7")
    assert listed_ids(at) == [old]
    at = open_page(PAGE, event_key="inv-1")
    assert listed_ids(at) == [invoice]
    at = open_page(PAGE, since="yesterday")
    assert any("Time range" in e.value for e in at.error)
    assert not at.exception


def test_detail_shows_payload_error_timestamps_and_timeline(open_page, rows):
    first = rows.add(aggregate=("order", "42"), created_ago=600, status="done", processed_ago=590)
    payload = {"order": 42, "amount": {"value": 1999, "currency": "EUR"}}
    shown = rows.add(
        aggregate=("order", "42"),
        created_ago=300,
        status="failed",
        processed_ago=200,
        attempts=4,
        last_error="HTTP 500 from stripe: upstream timeout",
        payload=payload,
        event_key="order.paid:42:pay_9",
    )
    later = rows.add(aggregate=("order", "42"), created_ago=100, event_type="order.refunded")
    rows.add(aggregate=("order", "43"), created_ago=100)

    at = open_page(PAGE, id=str(shown))

    assert not at.exception
    codes = [c.value for c in at.code]
    assert "HTTP 500 from stripe: upstream timeout" in codes
    assert any(json.loads(c) == payload for c in codes if c.startswith("{"))
    fields = dict(zip(at.dataframe[1].value["field"], at.dataframe[1].value["value"], strict=True))
    assert fields["event key"] == "order.paid:42:pay_9"
    assert fields["aggregate"] == "order 42"
    assert fields["processed at"] == rows.at(200).strftime("%Y-%m-%d %H:%M:%S UTC")
    assert fields["locked at"] == "–"
    assert any("attempts **4**" in m.value for m in at.markdown)
    timeline = at.dataframe[2].value
    assert [int(i) for i in timeline["id"]] == [first, shown, later]
    assert list(timeline[""]) == ["", "▶", ""]
    # empty values one way, as the fields above: "–", never "None"
    assert list(timeline["processed_at"]) == [
        rows.at(590).strftime("%Y-%m-%d %H:%M:%S UTC"),
        rows.at(200).strftime("%Y-%m-%d %H:%M:%S UTC"),
        "–",
    ]
    assert list(timeline["last_error"]) == ["–", "HTTP 500 from stripe: upstream timeout", "–"]
    assert timeline["created_at"][0] == rows.at(600).strftime("%Y-%m-%d %H:%M:%S UTC")


def test_big_payload_is_truncated_with_size_and_download(open_page, rows):
    row_id = rows.add(payload={"blob": "z" * 300_000})  # 300,012 bytes of JSON text

    at = open_page(PAGE, id=str(row_id))

    assert any("293.0 KiB" in w.value and "256 KiB" in w.value for w in at.warning)
    (head,) = [c.value for c in at.code if c.value.startswith('{"blob"')]
    assert len(head) == 262_144
    assert at.get("download_button")
    assert not at.exception


def test_unknown_and_huge_ids(open_page, rows):
    big = rows.add(id=2**53 + 1)

    at = open_page(PAGE, id=str(2**53))
    assert any("No event with id 9007199254740992" in w.value for w in at.warning)

    st.cache_data.clear()
    at = open_page(PAGE, id=str(big))
    assert any(f"**{2**53 + 1}**" in m.value for m in at.markdown)
    assert listed_ids(at) == [big]


def test_exactly_one_page_has_no_older_and_relative_since_keeps_the_cursor(open_page, rows):
    fifty = [rows.add(created_ago=600 - n) for n in range(50)]

    at = open_page(PAGE)
    assert listed_ids(at) == fifty[::-1]
    assert at.button(key="events.older").disabled  # 50 rows: no empty "older" page

    late = rows.add(created_ago=3 * 3600)  # highest id, oldest created_at: pages go by id
    at = open_page(PAGE, since="4h")
    assert listed_ids(at)[0] == late
    at.button(key="events.older").click().run()
    at.run()  # a rerun must not reset the pages although "4h" moves with the clock
    assert listed_ids(at) == fifty[0:1]


EVIL = "x`[click me](https://example.com)` **bold** :red[red] <b>html</b> $E=mc^2$"


def test_values_from_the_url_and_the_database_are_shown_literally(open_page, rows):
    evil = rows.add(event_type=EVIL, aggregate=(EVIL, EVIL), status="failed", processed_ago=9)

    at = open_page(PAGE, event_type=EVIL, id=str(evil))

    assert not at.exception
    assert listed_ids(at) == [evil]
    [caption] = [c.value for c in at.caption if c.value.startswith("Event type")]
    assert plain(caption) == f"Event type: {EVIL} (sidebar filter)."
    [header] = [m.value for m in at.markdown if "attempts" in m.value]
    assert plain(header) == f"**{evil}** · {EVIL} · status **failed** · attempts **0**"
    [timeline] = [h.value for h in at.subheader if h.value.startswith("Timeline")]
    assert plain(timeline) == f"Timeline of {EVIL} {EVIL}"
    for shown in (caption, header, timeline):
        for construct in ("[click me]", "](", ":red[", "<b>", "$E"):
            assert construct not in unprotected(shown)


def test_a_huge_duration_says_so_and_the_detail_still_works(open_page, rows):
    row_id = rows.add(last_error="HTTP 500 upstream", status="failed", processed_ago=5)

    at = open_page(PAGE, since="9999999d", id=str(row_id))

    assert not at.exception
    [error] = at.error
    assert plain(error.value).startswith("Time range: '9999999d'")
    assert "HTTP 500 upstream" in [c.value for c in at.code]  # the detail below still shows
    assert [h.value for h in at.subheader][-1] == "Timeline of order 1"

    at.text_input(key="since").set_value("0001-01-01T00:00:00+01:00").run()
    assert not at.exception
    assert "outside the dates that can be shown" in plain(at.error[0].value)

    at.text_input(key="since").set_value("2h").run()
    assert not at.error
    assert listed_ids(at) == [row_id]


def in_order(node) -> list:
    """The main area's elements in page order (columns and containers opened)."""
    children = getattr(node, "children", None)
    if children is None:
        return [node]
    return [leaf for index in sorted(children) for leaf in in_order(children[index])]


def test_the_search_fields_come_before_the_list_and_the_list_before_any_definition(open_page, rows):
    # issue 30 item 9's data first holds for the list; the fields that narrow it sit above it
    rows.add(event_type="order.paid")

    at = open_page(PAGE)

    assert not at.exception
    elements = in_order(at.main)
    keys = [getattr(e, "key", None) for e in elements]
    listed = keys.index("events.table")
    fields = ["event_key", "aggregate_type", "aggregate_id", "status", "since", "until"]
    assert all(keys.index(name) < listed for name in fields), keys[: listed + 1]
    # between the fields and the list: one-line captions at most (the sidebar filter, the count)
    between = [e for e in elements[keys.index("until") + 1 : listed] if e.type in TEXT]
    assert between and all(len(plain(e.value)) <= 140 for e in between), between
