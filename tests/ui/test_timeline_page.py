"""The Timeline page (issue 15 item 5): opened from an alert's link (``?at=``) it shows the
sidebar's window centred on that instant, the entries newest first in a table and a chart;
a source that cannot be read is named above the others; a bad ``at`` is said and ignored."""

from datetime import UTC, timedelta

from rendered import plain

from tests.timeline_rows import group_id, seed


def iso(instant) -> str:
    return instant.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def test_the_link_centres_the_window_on_its_instant(open_page, conn, db, rows):
    seed(conn, db, rows)
    at_instant = (rows.t0 - timedelta(minutes=30)).replace(microsecond=0)

    at = open_page("timeline", at=iso(at_instant), window="1h")

    assert not at.exception
    captions = [plain(c.value) for c in at.caption]
    since = (at_instant - timedelta(minutes=30)).strftime("%Y-%m-%d %H:%M:%S UTC")
    until = (at_instant + timedelta(minutes=30)).strftime("%Y-%m-%d %H:%M:%S UTC")
    assert any(
        c.startswith(f"{since} – {until}: around {at_instant:%Y-%m-%d %H:%M:%S} UTC (±30m)")
        for c in captions
    ), captions
    assert not at.warning
    [table] = at.dataframe
    group = group_id(conn, "order.paid")
    # at t0 − 30 min ± 30 min: the resolve at t0 − 10 min is in, nothing after t0
    assert list(table.value["title"]) == [
        "stuck-lock resolved",
        "replay by bob",
        "breaker closed · order.%",
        "pause by alice@example.com",
        "stuck-lock firing",
        "breaker opened · order.%",
        f"new error group {group} · order.paid",
    ]
    assert list(table.value["link"])[:3] == [
        "alerts?rule=stuck-lock",
        "actions",
        "controls?event_type=order.%25",
    ]
    assert len(at.get("vega_lite_chart")) == 1

    narrower = open_page("timeline", at=iso(rows.t0 - timedelta(minutes=45)), window="15m")
    # t0 − 52.5 … t0 − 37.5 min: the firing, the breaker opening, the new error group
    assert list(narrower.dataframe[0].value["kind"]) == ["alert", "breaker", "error group"]


def test_a_source_that_cannot_be_read_is_named(open_page, conn, db, rows):
    seed(conn, db, rows)
    conn.execute("DROP TABLE outbox_monitor.breaker_transitions")

    at = open_page("timeline", window="1h")

    assert not at.exception
    [warning] = [plain(w.value) for w in at.warning]
    assert warning.startswith("**Breaker transitions not shown**: could not be read — ")
    assert "The other sources are below." in warning
    kinds = list(at.dataframe[0].value["kind"])
    assert kinds.count("breaker") == 0 and kinds.count("action") == 2 and len(kinds) == 5


def test_a_bad_instant_is_said_and_the_last_window_shown(open_page, conn, db, rows):
    seed(conn, db, rows)

    at = open_page("timeline", at="yesterday", window="1h")

    assert not at.exception
    assert [plain(w.value) for w in at.warning] == [
        "Ignored at=yesterday from the link: not an ISO 8601 instant "
        "(e.g. 2026-12-02T14:02:07Z); showing the last 1h."
    ]
    assert len(at.dataframe[0].value) == 7


def test_an_instant_whose_window_leaves_the_calendar_is_said_and_the_last_window_shown(
    open_page, conn, db, rows
):
    seed(conn, db, rows)
    for given in ("9999-12-31T23:59:59Z", "0001-01-01T00:00:00Z"):
        at = open_page("timeline", at=given, window="1h")

        assert not at.exception
        assert [plain(e.value) for e in at.error] == []
        assert [plain(w.value) for w in at.warning] == [
            f"Ignored at={given} from the link: the window around it falls outside years 1 "
            "to 9999; showing the last 1h."
        ]
        assert len(at.dataframe[0].value) == 7
