"""Dead letters page: error groups, URL filters, a replay click that changes the database."""

import hashlib

from rendered import plain, unprotected

PAGE = "dead_letters"
FLOW = "dead_letters.replay"


def group_id(event_type: str, normalised_error: str) -> str:
    """SPEC §2 group id by hand: md5(event_type || ':' || normalised last_error)[:12]."""
    return hashlib.md5(f"{event_type}:{normalised_error}".encode()).hexdigest()[:12]


TIMEOUTS = group_id("order.paid", "timeout after <n> ms")
UNAUTHORISED = group_id("order.paid", "HTTP 401 invalid api key")
UPSTREAM = group_id("invoice.sent", "HTTP 500 upstream")


def seed(rows) -> dict[str, list[int]]:
    def failed(event_type, error, ago):
        return rows.add(
            event_type=event_type, status="failed", attempts=10, processed_ago=ago, last_error=error
        )

    return {
        TIMEOUTS: [
            failed("order.paid", "timeout after 5000 ms", 300),
            failed("order.paid", "timeout after 12000 ms", 200),
            failed("order.paid", "timeout after 7500 ms", 100),
        ],
        UNAUTHORISED: [failed("order.paid", "HTTP 401 invalid api key", 50)],
        UPSTREAM: [
            failed("invoice.sent", "HTTP 500 upstream", 40),
            failed("invoice.sent", "HTTP 500 upstream", 30),
        ],
    }


def groups_shown(at) -> dict[str, int]:
    table = at.dataframe[0].value
    return dict(zip(table["group_id"], table["failed"], strict=True))


def test_groups_with_counts_filtered_by_the_url(open_page, rows):
    seed(rows)

    every = open_page(PAGE)
    orders = open_page(PAGE, event_type="order.paid")

    assert groups_shown(every) == {TIMEOUTS: 3, UPSTREAM: 2, UNAUTHORISED: 1}
    assert groups_shown(orders) == {TIMEOUTS: 3, UNAUTHORISED: 1}
    assert not orders.exception


def test_replay_a_whole_group_by_click(open_page, rows):
    ids = seed(rows)

    at = open_page(PAGE, event_type="order.paid")
    at.selectbox(key="dead_letters.group").set_value(TIMEOUTS).run()
    assert [int(i) for i in at.dataframe[1].value["id"]] == ids[TIMEOUTS][::-1]
    at.button(key=f"{FLOW}.preview_button").click().run()
    assert any("**3** rows would be replayed" in m.value for m in at.markdown)

    at.button(key=f"{FLOW}.confirm").click().run()

    assert not at.exception
    assert any("Replayed 3 rows; 0 were no longer failed." in s.value for s in at.success)
    for row_id in ids[TIMEOUTS]:
        row = rows.get(row_id)
        assert (row["status"], row["attempts"], row["processed_at"]) == ("pending", 0, None)
    assert {rows.get(i)["status"] for i in ids[UNAUTHORISED] + ids[UPSTREAM]} == {"failed"}
    # the group is gone from the (refreshed) list
    assert groups_shown(at) == {UNAUTHORISED: 1}


def test_replay_chosen_rows_of_a_group_from_the_url_counts_the_skipped(open_page, rows, conn):
    ids = seed(rows)
    first, second, third = ids[TIMEOUTS]

    at = open_page(PAGE, error_group=TIMEOUTS)
    assert at.selectbox(key="dead_letters.group").value == TIMEOUTS
    at.multiselect(key="dead_letters.ids").set_value([str(first), str(third)]).run()
    at.button(key=f"{FLOW}.preview_button").click().run()
    assert any("**2** rows would be replayed" in m.value for m in at.markdown)
    # meanwhile someone else replays the third row: it is no longer failed
    conn.execute("UPDATE integration_outbox SET status = 'pending' WHERE id = %s", (third,))

    at.button(key=f"{FLOW}.confirm").click().run()

    assert any("Replayed 1 row; 1 was no longer failed." in s.value for s in at.success)
    assert rows.get(first)["status"] == "pending"
    assert rows.get(first)["attempts"] == 0
    assert rows.get(second)["status"] == "failed"
    assert rows.get(second)["attempts"] == 10


def test_unknown_group_in_the_url_says_so(open_page, rows):
    seed(rows)

    at = open_page(PAGE, error_group="0123456789ab")

    assert at.selectbox(key="dead_letters.group").value is None
    assert any("0123456789ab" in i.value and "no dead letters" in i.value for i in at.info)


def test_no_dead_letters(open_page, rows):
    rows.add(status="done", processed_ago=5)

    at = open_page(PAGE)

    assert any("No dead letters" in s.value for s in at.success)
    assert not at.exception


EVIL = "x`[click me](https://example.com)` **bold** :red[red] <b>html</b> $E=mc^2$"


def test_event_type_from_the_url_is_shown_literally(open_page, rows):
    rows.add(event_type=EVIL, status="failed", attempts=10, processed_ago=60, last_error=EVIL)

    at = open_page(PAGE, event_type=EVIL)

    assert not at.exception
    [caption] = [c.value for c in at.caption if "error group" in c.value]
    assert f"event type {EVIL}" in plain(caption)
    assert "[click me](https://example.com)" not in unprotected(caption)
    assert "**" not in unprotected(caption) and ":red[" not in unprotected(caption)


def test_event_type_and_error_from_the_database_are_shown_literally(open_page, rows):
    rows.add(event_type=EVIL, status="failed", attempts=10, processed_ago=60, last_error=EVIL)
    group = group_id(EVIL, EVIL)

    at = open_page(PAGE, error_group=group)

    assert not at.exception
    assert at.selectbox(key="dead_letters.group").value == group
    [heading] = at.subheader
    assert plain(heading.value) == f"{EVIL} · {EVIL}"
    for construct in ("[click me]", "](", "**", ":red[", "<b>", "$E"):
        assert construct not in unprotected(heading.value)


def test_counts_are_written_with_correct_plurals(open_page, rows):
    rows.add(status="failed", attempts=10, processed_ago=60, last_error="HTTP 401 invalid api key")

    at = open_page(PAGE)

    assert any("1 failed row in 1 error group (all event types)" in c.value for c in at.caption)
    assert at.selectbox(key="dead_letters.group").options == [
        f"{UNAUTHORISED} · order.paid · HTTP 401 invalid api key"
    ]


def test_the_picker_the_groups_and_the_rows_come_from_one_load(open_page, rows):
    ids = seed(rows)
    at = open_page(PAGE)  # the group counts are now cached (3 timeouts)
    ids[TIMEOUTS].append(
        rows.add(status="failed", attempts=10, processed_ago=10, last_error="timeout after 9900 ms")
    )

    at.selectbox(key="dead_letters.group").set_value(TIMEOUTS).run()

    assert not at.exception
    shown_rows = [int(i) for i in at.dataframe[1].value["id"]]
    assert shown_rows == ids[TIMEOUTS][::-1]
    label = f"{TIMEOUTS} · order.paid · timeout after <n> ms"
    assert label in at.selectbox(key="dead_letters.group").options
    assert groups_shown(at)[TIMEOUTS] == 4
    assert any(c.value.startswith("4 rows, first failed") for c in at.caption)


def test_a_group_outside_the_event_type_filter_offers_to_clear_the_filter(open_page, rows):
    seed(rows)

    at = open_page(PAGE, event_type="invoice.sent", error_group=TIMEOUTS)

    assert not at.exception
    assert not [i for i in at.info if "no dead letters" in i.value]
    [warning] = at.warning
    assert plain(warning.value) == (
        f"Error group {TIMEOUTS} (event type order.paid) is outside the event-type filter "
        "invoice.sent."
    )
    assert at.query_params["error_group"] == TIMEOUTS  # kept in the URL

    at.button(key="dead_letters.clear_filter").click().run()

    assert not at.exception
    assert at.text_input(key="event_type").value == ""
    assert at.selectbox(key="dead_letters.group").value == TIMEOUTS
    assert [int(i) for i in at.dataframe[1].value["id"]] == sorted(seed_ids(rows), reverse=True)


def seed_ids(rows) -> list[int]:
    return [
        r["id"]
        for r in rows.conn.execute(
            "SELECT id FROM integration_outbox WHERE last_error LIKE 'timeout%'"
        ).fetchall()
    ]


def test_the_header_counts_every_group_not_the_listed_ones(open_page, rows):
    """Issue 30 item 8: 205 one-row groups plus seed's 6 rows in 3 groups are 211 rows in
    208 groups; the page lists the 200 biggest (error_groups' limit) and says so."""
    for n in range(205):
        rows.add(
            event_type=f"bulk.{n}",
            status="failed",
            attempts=10,
            processed_ago=60,
            last_error="HTTP 500 upstream",
        )
    seed_rows = seed(rows)
    assert len(seed_rows[TIMEOUTS]) == 3

    at = open_page(PAGE)

    assert not at.exception
    [caption] = [c.value for c in at.caption if "error group" in c.value]
    assert plain(caption) == (
        "211 failed rows in 208 error groups (all event types); the 200 biggest groups listed"
    ), caption
    assert len(at.selectbox(key="dead_letters.group").options) == 200

    at = open_page(PAGE, error_group=TIMEOUTS)  # the chosen group's rows: the totals agree
    [caption] = [c.value for c in at.caption if "error group" in c.value]
    assert plain(caption).startswith("211 failed rows in 208 error groups"), caption
