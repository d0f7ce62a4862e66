"""The Overview reads the backlog's rows once a refresh (issue 32 item 3): its tiles, its table
by event type and the workers' liveness come from one pass (``backlog.backlog_pass``), with
the figures computed by hand from the inserted rows."""

import re

import pytest

from outbox_monitor.figures import backlog, metrics
from outbox_monitor.service.sampler import record_sample
from outbox_monitor.store.db import Database
from outbox_monitor.ui import backlog_sample, format, loaders

HEAP_READS = {"backlog_pass", "retrying", "stuck_locks", "attempts_at_least"}
"""Named queries that read backlog rows' heap tuples (``attempts``, ``locked_at``)."""


def seed(rows) -> None:
    """order.paid: 3 due (600, 300, 60 s ago), 1 processing locked 20 min ago (stuck);
    payment.captured: 1 retry (attempts 2) waiting in backoff for 5 more minutes;
    mail.sent: 1 retry (attempts 1) due since 30 s."""
    for ago in (600, 300, 60):
        rows.add(event_type="order.paid", created_ago=ago)
    rows.add(event_type="order.paid", status="processing", created_ago=1300, locked_ago=1200)
    rows.add(event_type="payment.captured", created_ago=900, available_ago=-300, attempts=2)
    rows.add(event_type="mail.sent", created_ago=120, available_ago=30, attempts=1)


@pytest.fixture
def statements(monkeypatch) -> list[str]:
    """The named queries every ``Database`` of this process runs, in order."""
    names: list[str] = []
    for method in ("fetch_one", "fetch_all"):
        original = getattr(Database, method)

        def recording(self, name, *args, _original=original, **kwargs):
            names.append(name)
            return _original(self, name, *args, **kwargs)

        monkeypatch.setattr(Database, method, recording)
    return names


def test_one_pass_over_the_backlog_serves_tiles_table_and_workers(open_page, rows, statements):
    seed(rows)

    at = open_page("overview")

    assert not at.exception
    assert [name for name in statements if name in HEAP_READS] == ["backlog_pass"]
    shown = {m.label: m.value for m in at.metric}
    assert shown["Queue depth"] == "4"  # 3 order.paid + 1 mail.sent due
    assert shown["Stuck locks"] == "1"
    assert shown["Retrying"] == "2"  # payment.captured and mail.sent, attempts > 0
    (frame,) = [d.value for d in at.dataframe if "depth trend" in d.value.columns]
    table = {row["event type"]: row for row in frame.to_dict("records")}
    # most troubled first: the stuck lock, then depth
    assert list(table) == ["order.paid", "mail.sent", "payment.captured"]
    assert [table[name]["retrying"] for name in table] == [0, 1, 1]


@pytest.fixture
def low_threshold(monkeypatch) -> int:
    """Backlogs above 3 rows count as large (``backlog.SAMPLED_ABOVE_ROWS``)."""
    monkeypatch.setattr(backlog, "SAMPLED_ABOVE_ROWS", 3)
    monkeypatch.setattr(loaders, "SAMPLED_ABOVE_ROWS", 3)
    monkeypatch.setattr(backlog_sample, "SAMPLED_ABOVE_ROWS", 3)
    return 3


def sampled_caption(at) -> str | None:
    found = [c.value for c in at.caption if "the scheduler's sample of" in c.value]
    return found[0] if found else None


def test_above_the_threshold_a_fresh_sample_serves_what_reads_the_heap(
    open_page, db, rows, statements, low_threshold
):
    seed(rows)
    record_sample(db)  # the scheduler's pass: 6 backlog rows, 2 retrying, 1 stuck
    # after the sample: one more due row and one more retry (attempts 3) of a new type
    rows.add(event_type="order.paid", created_ago=5)
    rows.add(event_type="sms.sent", created_ago=50, available_ago=10, attempts=3)
    statements.clear()

    at = open_page("overview")

    assert not at.exception
    assert [name for name in statements if name in HEAP_READS] == []
    shown = {m.label: m.value for m in at.metric}
    assert shown["Queue depth"] == "6"  # counted now: 4 + the two added
    assert shown["Retrying"] == "2"  # sampled: the retry added since is not in it
    assert shown["Stuck locks"] == "1"
    caption = sampled_caption(at)
    assert caption is not None and "More than 3 rows pending or processing (6 when sampled)" in (
        caption
    )
    age = re.search(r"sample of ([\d.]+)s ago", caption)
    assert age is not None and float(age.group(1)) < 60, caption  # sampled just before
    (frame,) = [d.value for d in at.dataframe if "depth trend" in d.value.columns]
    assert "sms.sent" not in set(frame["event type"])  # the table's rows are the sample's
    assert any("as the scheduler sampled them" in c.value for c in at.caption)
    # status --json counts now, whatever the Overview shows (SPEC §2)
    exact = metrics.status(db)
    assert (exact["queue_depth"], exact["retrying"]) == (6, 3)


def test_without_a_fresh_sample_the_page_reads_the_backlog_once(
    open_page, db, rows, conn, statements, low_threshold
):
    seed(rows)
    record_sample(db)
    # the scheduler stopped: its snapshot is older than 3 sample intervals
    conn.execute("UPDATE outbox_monitor.backlog_snapshots SET sampled_at = now() - interval '1h'")
    rows.add(event_type="sms.sent", created_ago=50, available_ago=10, attempts=3)
    statements.clear()

    at = open_page("overview")

    assert not at.exception
    assert [name for name in statements if name in HEAP_READS] == ["backlog_pass"]
    shown = {m.label: m.value for m in at.metric}
    assert shown["Retrying"] == "3"  # counted now
    assert sampled_caption(at) is None


def test_below_the_threshold_a_fresh_sample_is_not_read_for_figures(
    open_page, db, rows, statements
):
    seed(rows)
    record_sample(db)
    rows.add(event_type="sms.sent", created_ago=50, available_ago=10, attempts=3)
    statements.clear()

    at = open_page("overview")

    assert [name for name in statements if name in HEAP_READS] == ["backlog_pass"]
    assert {m.label: m.value for m in at.metric}["Retrying"] == "3"
    assert sampled_caption(at) is None


def finished_seed(rows) -> None:
    """order.paid: 1 due row (so that it has a row in the table) and 3 done in the window,
    created 10, 20 and 30 s before they were processed: P95 29 s (percentile_cont: 20 + 0.9 ×
    10), 3 processed and 4 created in the hour."""
    rows.add(event_type="order.paid", created_ago=60)
    for latency in (10, 20, 30):
        rows.add(
            event_type="order.paid", status="done", created_ago=600 + latency, processed_ago=600
        )


def table_row(at, event_type: str) -> dict:
    (frame,) = [d.value for d in at.dataframe if "depth trend" in d.value.columns]
    return {row["event type"]: row for row in frame.to_dict("records")}[event_type]


def test_a_fresh_sample_gives_the_table_its_p95_and_rates_at_any_backlog(
    open_page, db, rows, statements
):
    finished_seed(rows)
    record_sample(db)  # the scheduler's sample: P95 29 s, 3 processed, 4 created
    # after the sample: one more done row, 100 s late (now P95 89.5 s: 30 + 0.85 × 70)
    rows.add(event_type="order.paid", status="done", created_ago=100, processed_ago=0)
    statements.clear()

    at = open_page("overview")

    assert not at.exception
    assert "finished_by_event_type" not in statements
    row = table_row(at, "order.paid")
    assert (row["P95 latency"], row["processed/min"], row["created/min"]) == (
        format.duration(29.0),
        "0.05/min",  # 3 in 60 min
        "0.07/min",  # 4 in 60 min
    )
    note = [c.value for c in at.caption if "P95 and rates as the scheduler sampled them" in c.value]
    assert len(note) == 1, [c.value for c in at.caption]
    # the tiles, status --json and the alerts count now (SPEC §2)
    assert metrics.finished_by_event_type(db, event_types=["order.paid"])["order.paid"] == {
        "latency_p95": pytest.approx(89.5),
        "processed": 4,
        "created_finished": 4,
    }


def test_without_a_fresh_sample_or_of_another_window_the_table_reads_the_finished_rows(
    open_page, db, rows, conn, statements
):
    finished_seed(rows)
    record_sample(db)
    rows.add(event_type="order.paid", status="done", created_ago=100, processed_ago=0)
    statements.clear()

    at = open_page("overview", window="6h")  # the sample's window is the settings' 1 h

    assert "finished_by_event_type" in statements
    live = metrics.finished_by_event_type(db, event_types=["order.paid"], window=6 * 3600)
    assert live["order.paid"]["latency_p95"] == pytest.approx(89.5)  # 30 + 0.85 × 70
    assert table_row(at, "order.paid")["P95 latency"] == format.duration(
        live["order.paid"]["latency_p95"]
    )
    assert not [c.value for c in at.caption if "P95 and rates as the scheduler" in c.value]

    conn.execute("UPDATE outbox_monitor.backlog_snapshots SET sampled_at = now() - interval '1h'")
    statements.clear()
    at = open_page("overview")

    assert "finished_by_event_type" in statements
    assert table_row(at, "order.paid")["P95 latency"] == format.duration(
        live["order.paid"]["latency_p95"]
    )


def test_the_other_rows_rates_come_from_the_same_sample_as_the_named_types(
    open_page, environment, db, rows, statements
):
    """attack33: with one type of its own (top 1), ``other``'s rates were the total counted
    now less the named type's sampled figures. order.paid: 2 due, 3 done in the hour (before
    the sample) and 6 more done after it; mail.sent (folded into other): 1 due, nothing done.
    Sampled: order.paid 3 processed, 2 + 3 = 5 created; other 0 processed, 1 created."""
    environment.setenv("OUTBOX_MONITOR_OVERVIEW_TOP_EVENT_TYPES", "1")
    for ago in (120, 60):
        rows.add(event_type="order.paid", created_ago=ago)
    for latency in (10, 20, 30):
        rows.add(
            event_type="order.paid", status="done", created_ago=600 + latency, processed_ago=600
        )
    rows.add(event_type="mail.sent", created_ago=30)
    record_sample(db)
    for _ in range(6):
        rows.add(event_type="order.paid", status="done", created_ago=50, processed_ago=0)
    statements.clear()

    at = open_page("overview")

    assert not at.exception
    # no finished row read for the table (the tiles' throughput reads them: "the tiles count now")
    assert statements.count("processed_in_window") <= 1, statements
    named = table_row(at, "order.paid")
    assert (named["processed/min"], named["created/min"]) == ("0.05/min", "0.08/min")
    other = table_row(at, "other (1 event type)")
    # 0 processed and 1 created (mail.sent's due row) in 60 min
    assert (other["processed/min"], other["created/min"]) == ("0.00/min", "0.02/min")


def test_with_a_pattern_filter_other_sums_the_sampled_types_the_filter_holds(
    open_page, environment, db, rows
):
    """attack33: the filter ``%.sent`` with one type of its own. mail.sent: 2 due, 3 done
    before the sample, 6 more after; sms.sent (other): 1 due, 2 done before the sample;
    order.paid (outside the filter): 4 done. Other: 2 processed, 1 + 2 = 3 created in 60 min."""
    environment.setenv("OUTBOX_MONITOR_OVERVIEW_TOP_EVENT_TYPES", "1")
    for ago in (120, 60):
        rows.add(event_type="mail.sent", created_ago=ago)
    rows.add(event_type="sms.sent", created_ago=30)
    for event_type, done in (("mail.sent", 3), ("sms.sent", 2), ("order.paid", 4)):
        for _ in range(done):
            rows.add(event_type=event_type, status="done", created_ago=700, processed_ago=600)
    record_sample(db)
    for _ in range(6):
        rows.add(event_type="mail.sent", status="done", created_ago=50, processed_ago=0)

    at = open_page("overview", event_type="%.sent")

    assert not at.exception
    named = table_row(at, "mail.sent")
    assert (named["processed/min"], named["created/min"]) == ("0.05/min", "0.08/min")
    other = table_row(at, "other (1 event type)")
    assert (other["processed/min"], other["created/min"]) == ("0.03/min", "0.05/min")


def test_above_the_threshold_with_another_window_the_tables_created_counts_that_window(
    open_page, db, rows, low_threshold
):
    """attack33: the snapshot's open rows created in the window are over the sampler's window
    (the settings' 1 h). order.paid: 36 pending rows created 2 h ago, none finished. With the
    page's window 6 h, its created per minute is 36 in 360 min = 0.10/min, not the 0 the
    1-hour snapshot holds; the tile counts now (0.10/min)."""
    for _ in range(36):
        rows.add(event_type="order.paid", created_ago=7200)
    record_sample(db)

    at = open_page("overview", window="6h")

    assert not at.exception
    assert sampled_caption(at) is not None  # above the threshold: the backlog is the sample's
    assert {m.label: m.value for m in at.metric}["Created / min"] == "0.10/min"
    assert table_row(at, "order.paid")["created/min"] == "0.10/min"


def test_the_headline_does_not_mix_sampled_created_rows_with_dead_letters_counted_now(
    open_page, db, rows, conn
):
    """mail.sent after the sample: 300 rows done and 12 dead letters, all created in the
    hour: 12 < 5 % of 312, so not troubled (SPEC §2 figures at the call); the sample, taken
    before, held none of its rows."""
    from tests.integration.test_diagnosis import add_done, claims_recently

    claims_recently(rows)
    record_sample(db)
    add_done(conn, 300, event_type="mail.sent")
    for _ in range(12):
        rows.add_failed(event_type="mail.sent", created_ago=40, processed_ago=30)

    at = open_page("overview")

    assert not at.exception
    assert at.success and at.success[0].value.startswith("Nothing wrong"), [
        m.value for m in at.markdown[:3]
    ]
