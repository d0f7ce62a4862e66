"""Dead letters page: error groups, URL filters, a replay click that changes the database."""

import hashlib

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

    assert any("Replayed 1 row; 1 were no longer failed." in s.value for s in at.success)
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
