"""The Overview's retrying (issue 30 items 1 and 8): the Retrying tile, and the retry error
groups beside it, from hand-computed rows; the header counts every group, not the listed."""

import re

import psycopg
import streamlit as st
from rendered import plain
from streamlit.testing.v1 import AppTest

from outbox_monitor.figures import error_grouping

SAMPLE_503 = "HTTP 503 from erp for order 1002"


def seed(rows) -> None:
    """4 retrying rows in 3 groups (2 types), one never tried; window 1 h."""
    rows.add(
        event_type="order.paid",
        attempts=2,
        created_ago=600,
        available_ago=30,  # due again since 30 s
        last_error="HTTP 503 from erp for order 1001",
    )
    rows.add(
        event_type="order.paid",
        attempts=1,
        created_ago=500,
        available_ago=-60,  # in backoff for a minute
        last_error=SAMPLE_503,
    )
    rows.add(
        event_type="order.paid",
        attempts=1,
        created_ago=400,
        available_ago=-90,
        last_error="timeout after 3000 ms calling 'erp'",
    )
    rows.add(
        event_type="mail.sent",
        attempts=3,
        created_ago=300,
        available_ago=-30,
        last_error="HTTP 421 too many connections",
    )
    rows.add(event_type="mail.sent", created_ago=60)  # never tried: not retrying


def tile(at: AppTest, label: str) -> str:
    [value] = [m.value for m in at.metric if m.label == label]
    return value


def groups_frame(at: AppTest):
    [frame] = [d.value for d in at.dataframe if "rows retrying" in d.value.columns]
    return frame


def header(at: AppTest) -> str:
    [caption] = [plain(c.value) for c in at.caption if "retry error group" in c.value]
    return caption.replace("**", "")  # the rows in bold


def age_counts(conn, seconds: int) -> None:
    """The counts were taken ``seconds`` earlier (a scheduler's sample)."""
    conn.execute(
        "UPDATE outbox_monitor.retry_error_groups_refreshed"
        " SET refreshed_at = refreshed_at - make_interval(secs => %s)",
        (seconds,),
    )


def test_the_tile_and_the_groups_show_hand_computed_figures(open_page, rows):
    seed(rows)

    at = open_page("overview")

    assert not at.exception
    assert tile(at, "Retrying") == "4"
    assert header(at) == "4 rows retrying in 3 retry error groups (all event types)."
    frame = groups_frame(at)
    # biggest first; the two of one row: the one due latest (in 90 s) first
    assert frame[["event type", "rows retrying", "due now"]].values.tolist() == [
        ["order.paid", 2, 1],
        ["order.paid", 1, 0],
        ["mail.sent", 1, 0],
    ]
    assert frame["sample_error"].tolist() == [
        SAMPLE_503,  # the group's newest row
        "timeout after 3000 ms calling 'erp'",
        "HTTP 421 too many connections",
    ]
    assert frame["events"].tolist()[0] == "events?event_type=order.paid&window=1h"
    assert frame["events"].tolist()[2] == "events?event_type=mail.sent&window=1h"


def test_a_filtered_type_shows_its_figure_and_the_total(open_page, rows):
    seed(rows)

    at = open_page("overview", event_type="mail.%")

    assert tile(at, "Retrying") == "1"
    assert any(plain(c.value) == "mail.% only; 4 retrying in all event types." for c in at.caption)
    assert header(at) == "1 row retrying in 1 retry error group (mail.%)."
    assert groups_frame(at)["event type"].tolist() == ["mail.sent"]


def test_the_header_counts_every_group_not_the_listed_ones(open_page, rows):
    """Issue 30 item 8: 12 groups of one row and one of two; the 10 biggest listed."""
    for n in range(12):
        rows.add(event_type=f"bulk.{n}", attempts=1, last_error="HTTP 500 upstream")
    for account in (1001, 1002):
        rows.add(
            event_type="crm.upsert",
            attempts=1,
            last_error=f"HTTP 401 invalid API key for account {account}",
        )

    at = open_page("overview")

    assert tile(at, "Retrying") == "14"
    assert header(at) == (
        "14 rows retrying in 13 retry error groups (all event types); the 10 biggest listed."
    )
    frame = groups_frame(at)
    assert len(frame) == 10
    assert frame["event type"].tolist()[0] == "crm.upsert"


def test_counts_taken_earlier_say_how_old_they_are(open_page, rows, db, conn):
    """A scheduler's sampler counted the groups 40 s ago (younger than the 60 s a page
    waits before counting them itself): the page reads those counts and says their age;
    a row that failed since is not in them yet."""
    seed(rows)
    error_grouping.refresh_retry_error_groups(db)
    age_counts(conn, 40)
    rows.add(event_type="mail.sent", attempts=1, last_error="HTTP 421 too many connections")

    at = open_page("overview")

    assert tile(at, "Retrying") == "5"  # the tile's figure is read now
    text = header(at)
    assert text.startswith("4 rows retrying in 3 retry error groups (all event types); counted ")
    assert re.fullmatch(r".*; counted 4[0-9]s ago\.", text), text


def test_no_retrying_row_says_so(open_page, rows):
    rows.add(event_type="order.paid", created_ago=60)

    at = open_page("overview")

    assert tile(at, "Retrying") == "0"
    assert any("No row is retrying" in c.value for c in at.caption)
    assert not [d for d in at.dataframe if "rows retrying" in d.value.columns]


def test_the_chart_of_retrying_over_time_from_the_samples(open_page, rows, conn):
    seed(rows)
    at = open_page("overview", view="Charts")
    assert any("No samples of retrying yet" in c.value for c in at.caption)

    conn.execute(
        """INSERT INTO outbox_monitor.samples (table_name, sampled_at, queue_depth,
               pending_total, scheduled_retries, retrying, processing, stuck_locks,
               failed_in_window)
           VALUES ('public.integration_outbox', now() - interval '2 minutes', 1, 4, 3, 4, 0, 0,
                   0),
                  ('public.integration_outbox', now() - interval '1 minute', 2, 5, 3, 4, 0, 0,
                   0)"""
    )
    st.cache_data.clear()  # the samples loader would serve its cached empty list for 5 s
    at = open_page("overview", view="Charts")

    assert not [c for c in at.caption if "No samples of retrying yet" in c.value]
    # the legend's labels are values of the chart's data (Arrow, UTF-8)
    [chart] = [
        c for c in at.get("vega_lite_chart") if b"waiting in backoff" in c.proto.SerializeToString()
    ]
    assert b"retrying (attempts > 0)" in chart.proto.SerializeToString()


def test_no_group_in_counts_taken_earlier_says_how_old_they_are(open_page, rows, db, conn):
    """Counted 40 s ago with nothing retrying, a row failed since: the tile (read now) says
    1, and the groups' line says when nothing was retrying — before, it said "No row is
    retrying" beside the tile's 1, with no age."""
    rows.add(event_type="order.paid", created_ago=60)
    error_grouping.refresh_retry_error_groups(db)
    age_counts(conn, 40)
    rows.add(event_type="order.paid", attempts=1, last_error="HTTP 503 from erp")

    at = open_page("overview")

    assert tile(at, "Retrying") == "1"
    [line] = [plain(c.value) for c in at.caption if "retrying" in c.value and "No row" in c.value]
    assert re.fullmatch(r"No row was retrying when the groups were counted 4[0-9]s ago\.", line)


def test_the_total_of_all_types_from_earlier_counts_says_how_old_it_is(open_page, rows, db, conn):
    """The filtered caption's all-types total comes from the counts: taken 40 s ago, before
    4 mail.sent rows failed, it is below the filter's own tile (read now) — before, with no
    age, "mail.% only; 3 retrying in all event types" beside a tile of 4."""
    for n in range(3):
        rows.add(event_type="order.paid", attempts=1, last_error=f"HTTP 503 for order {n}")
    error_grouping.refresh_retry_error_groups(db)
    age_counts(conn, 40)
    for _ in range(4):
        rows.add(event_type="mail.sent", attempts=1, last_error="HTTP 421 too many connections")

    at = open_page("overview", event_type="mail.%")

    assert tile(at, "Retrying") == "4"
    [line] = [plain(c.value) for c in at.caption if c.value.startswith("`mail.%` only")]
    assert re.fullmatch(
        r"mail\.% only; 3 retrying in all event types when counted 4[0-9]s ago\.", line
    ), line


def open_while_counting_times_out(open_page, environment, dsn: str) -> AppTest:
    """The Overview while counting the retry error groups again hits the statement timeout:
    a session holds the counts' time row, the timeout is 1 s."""
    environment.setenv("OUTBOX_MONITOR_STATEMENT_TIMEOUT", "1")
    with psycopg.connect(dsn) as holding:
        holding.execute("SELECT FROM outbox_monitor.retry_error_groups_refreshed FOR UPDATE")
        return open_page("overview")


def test_a_count_that_times_out_shows_the_last_counts_and_why(
    open_page, environment, rows, db, conn, dsn
):
    """Counting the groups again hits the statement timeout (a session holds the counts'
    time row; 1 s timeout): the Overview shows the last counts, their age and why — before,
    the QueryTimeout replaced everything below the Retrying tile with an error."""
    seed(rows)
    error_grouping.refresh_retry_error_groups(db)
    age_counts(conn, 120)
    at = open_while_counting_times_out(open_page, environment, dsn)

    assert not at.exception and not at.error
    assert re.fullmatch(r".*; counted 2m [0-9]+s ago\.", header(at)), header(at)
    assert any(
        plain(c.value).startswith("Counting them again failed: a monitor query was cancelled")
        for c in at.caption
    )
    assert len(groups_frame(at)) == 3


def test_a_count_that_times_out_with_no_group_counted_says_why_too(
    open_page, environment, rows, db, conn, dsn
):
    rows.add(event_type="order.paid", created_ago=60)
    error_grouping.refresh_retry_error_groups(db)
    age_counts(conn, 120)
    at = open_while_counting_times_out(open_page, environment, dsn)

    captions = [plain(c.value) for c in at.caption]
    assert any(
        re.fullmatch(r"No row was retrying when the groups were counted 2m [0-9]+s ago\.", c)
        for c in captions
    ), captions
    assert any(c.startswith("Counting them again failed: a monitor query") for c in captions)
