"""Overview page on seeded rows: tiles show the hand-computed figures, coloured by SLO."""

import streamlit as st
from rendered import plain
from streamlit.testing.v1 import AppTest

HOUR = 3600


def seed(rows) -> None:
    """14 rows whose figures are computed by hand in the tests below (window 1 h)."""
    rows.add(event_type="invoice.sent", created_ago=2.5 * HOUR)  # oldest pending: 2 h 30 m
    rows.add(created_ago=30 * 60)
    rows.add(created_ago=60)
    rows.add(created_ago=10 * 60, available_ago=-10 * 60)  # waiting in backoff, not due
    for latency in (10, 20, 30, 40, 50):  # done 4–5 min ago: P95 = 40 + 0.8 * 10 = 48 s
        rows.add(status="done", created_ago=300, processed_ago=300 - latency)
    rows.add(status="failed", created_ago=100 * 60, processed_ago=90 * 60, last_error="x")
    rows.add(status="failed", created_ago=21 * HOUR, processed_ago=20 * HOUR, last_error="x")
    rows.add(status="failed", created_ago=49 * HOUR, processed_ago=48 * HOUR, last_error="x")
    rows.add(status="processing", created_ago=25 * 60, locked_ago=20 * 60)  # stuck (> 15 min)
    rows.add(status="processing", created_ago=120, locked_ago=60)


def tiles(at: AppTest) -> dict[str, tuple[str, str]]:
    return {m.label: (m.value, m.delta) for m in at.metric}


def test_tiles_show_hand_computed_figures(open_page, rows):
    seed(rows)

    at = open_page("overview")

    assert not at.exception
    shown = {label: value for label, (value, _) in tiles(at).items()}
    # queue depth: 3 due pending rows (the one in backoff is not due)
    assert shown["Queue depth"] == "3"
    assert shown["Oldest pending age"] == "2h 30m"
    assert shown["P95 latency"] == "48s"
    # failed 90 min and 20 h ago count; 48 h ago does not
    assert shown["Failed (24 h)"] == "2"
    assert shown["Stuck locks"] == "1"
    # 5 done in the last hour / 60 min; 10 rows created in the last hour / 60 min
    assert shown["Processed / min"] == "0.08/min"
    assert shown["Created / min"] == "0.17/min"
    assert shown["Failed (1h)"] == "0"
    # badges are the rules' state (tests/ui/test_overview_alerting.py); no scheduler here
    assert tiles(at)["Queue depth"][1] == "state unknown"
    assert tiles(at)["Processed / min"][1] == ""
    # no samples: no trend, and no drain ETA made up from the window's rates (issue 30 item 3)
    trend = "Trend over 15m: none yet (0 samples, needs 3: the scheduler records them)"
    assert trend in [plain(c.value) for c in at.caption]
    assert any("Updated at" in c.value and "(database time)" in c.value for c in at.caption)


def test_event_type_and_window_from_the_url(open_page, rows):
    seed(rows)

    invoices = tiles(open_page("overview", event_type="invoice.%"))
    whole_day = tiles(open_page("overview", window="24h"))

    assert invoices["Queue depth"][0] == "1"
    assert invoices["Oldest pending age"][0] == "2h 30m"
    assert invoices["Failed (24 h)"][0] == "0"
    assert invoices["Stuck locks"][0] == "0"
    assert whole_day["Failed (24h)"][0] == "2"
    # 13 rows created in the last 24 h (all but the one of 49 h ago) / 1440 min
    assert whole_day["Created / min"][0] == f"{13 / 1440:.2f}/min"


def test_charts_run_only_in_their_tab(open_page, rows):
    seed(rows)

    at = open_page("overview")

    assert [tab.label for tab in at.tabs] == ["By event type", "Charts"]
    assert not at.get("vega_lite_chart")  # the Charts tab's code did not run
    assert not [i for i in at.info if "No samples yet" in i.value]


def test_charts_and_the_no_samples_hint(open_page, rows, conn):
    seed(rows)

    at = open_page("overview", view="Charts")

    assert any(
        "No samples yet" in i.value and "outbox-monitor scheduler" in i.value for i in at.info
    )
    # throughput, retry pressure, latency; no failures chart: none failed in the last hour
    assert len(at.get("vega_lite_chart")) == 3

    conn.execute(
        """INSERT INTO outbox_monitor.samples (table_name, sampled_at, queue_depth,
               pending_total, scheduled_retries, processing, stuck_locks, failed_in_window)
           VALUES ('public.integration_outbox', now() - interval '1 minute', 3, 4, 1, 2, 1, 0)"""
    )
    st.cache_data.clear()  # the samples loader would serve its cached empty list for 5 s
    at = open_page("overview", view="Charts")

    assert not [i for i in at.info if "No samples yet" in i.value]
    # and retrying over time (its scheduled retries: ui/retrying.py)
    assert len(at.get("vega_lite_chart")) == 5


def test_empty_outbox_shows_no_value(open_page):
    at = open_page("overview")

    shown = tiles(at)
    assert shown["Queue depth"][0] == "0"
    assert shown["Oldest pending age"][0] == "–"
    assert shown["P95 latency"][0] == "–"
    empty = (
        "Trend over 15m: none yet (0 samples, needs 3: the scheduler records them) · queue empty"
    )
    assert empty in [plain(c.value) for c in at.caption]
    assert not at.warning


def test_missing_recommended_index_is_named_with_its_fix(open_page, conn):
    conn.execute("DROP INDEX integration_outbox_clock_skew_idx")

    at = open_page("overview")

    (warning,) = at.warning
    text = plain(warning.value)
    assert "integration_outbox_clock_skew_idx" in text
    assert "done_at_idx" not in text
    assert "outbox-monitor init-db" in text


def test_an_index_of_an_earlier_release_that_slows_the_claim_is_named(open_page, conn):
    conn.execute(
        "CREATE INDEX integration_outbox_created_at_idx ON integration_outbox (created_at)"
    )
    conn.execute(  # as an earlier release's init-db left them (up to migration 005)
        "UPDATE outbox_monitor.schema_migrations SET applied_at = applied_at - interval '1 day'"
        " WHERE version <= 5"
    )

    at = open_page("overview")

    (warning,) = at.warning
    text = plain(warning.value)
    assert "integration_outbox_created_at_idx" in text
    assert "slows the workers' claim" in text
    assert "outbox-monitor init-db" in text


def test_ignored_url_parameters_are_named(open_page, rows):
    seed(rows)

    at = open_page("overview", window="abc", refresh="0s")

    assert not at.exception
    warnings = [plain(w.value) for w in at.sidebar.warning]
    assert warnings == [
        "Ignored window=abc from the link: not one of 15m, 1h, 6h, 24h; showing 1h.",
        "Ignored refresh=0s from the link: not one of 5s, 10s, 30s, 1m; showing 10s.",
    ]
    assert tiles(at)["Queue depth"][0] == "3"  # the page works with the defaults

    at = open_page("overview", window="6h", refresh="30s")
    assert not at.sidebar.warning
