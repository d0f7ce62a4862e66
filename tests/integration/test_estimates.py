"""Exact where it must be, estimated where it may be (SPEC §2): the dashboard's capped counts,
their estimates above the cap, and the exact id ceiling and audit of the actions they preview.

Estimates are checked after ``ANALYZE``: on a table this small the statistics hold every row,
so the planner's estimate equals the count worked out by hand.
"""

import json

import pytest
from click.testing import CliRunner

from outbox_monitor.access import Identity, Role
from outbox_monitor.actions.prune import preview_prune
from outbox_monitor.actions.replay import ReplaySelection, preview_replay
from outbox_monitor.actions.run import apply
from outbox_monitor.alerts import measure
from outbox_monitor.cli import main
from outbox_monitor.figures import dead_letter_attempts, estimates, metrics
from outbox_monitor.store.filters import Where
from tests.integration.test_measure import make_rule

DAY = 86400
OPERATOR = Identity("estimator", Role.operator, "cli")


def analyze(conn) -> None:
    conn.execute("ANALYZE integration_outbox")


def test_capped_count_and_the_planners_estimate(db, rows, conn):
    for _ in range(4):
        rows.add(status="failed", processed_ago=60, last_error="e")
    rows.add(status="pending")
    analyze(conn)
    where = Where().event_type("order.paid")

    assert estimates.count_up_to(db, "dead_letter_rows", cap=4, where=where) == 4
    assert estimates.count_up_to(db, "dead_letter_rows", cap=2, where=where) == 3  # cap + 1
    rows_statement = db.compose("dead_letter_rows", and_filters=where.fragment)
    # statistics holding every row: the estimate of the 4 failed rows is 4
    assert estimates.planner_rows(db, rows_statement, where.params) == 4
    other = Where().event_type("invoice.sent")
    other_rows = db.compose("dead_letter_rows", and_filters=other.fragment)
    assert estimates.planner_rows(db, other_rows, other.params) <= 1  # the filter counts


def test_dashboard_replay_preview_estimates_above_the_cap_and_applies_exactly(db, rows, conn):
    failed = [
        rows.add(status="failed", processed_ago=60 * n, attempts=10, last_error="e")
        for n in range(1, 6)
    ]
    done = rows.add(status="done", processed_ago=30)
    analyze(conn)
    selection = ReplaySelection(event_type="order.paid")

    at_cap = preview_replay(db, selection, count_cap=5)
    assert (at_cap.matched, at_cap.exact) == (5, True)
    assert at_cap.filter["max_id"] == str(max(failed))

    above = preview_replay(db, selection, count_cap=3)
    assert (above.matched, above.exact, above.count) == (5, False, estimates.Count(5, False))
    assert above.filter["max_id"] == str(max(failed))  # the id ceiling stays exact
    assert len(above.sample) == 5
    late = rows.add(status="failed", processed_ago=1, last_error="e")  # after the preview

    result = apply(db, above, actor=OPERATOR)

    assert (result.changed, result.matched, result.skipped) == (5, 5, None)
    assert sorted(result.ids) == sorted(failed)
    assert [rows.get(i)["status"] for i in failed] == ["pending"] * 5
    assert rows.get(late)["status"] == "failed"  # above the preview's largest id
    assert rows.get(done)["status"] == "done"
    audit = conn.execute(
        "SELECT affected_count, affected_ids, filter FROM outbox_monitor.audit_log"
    ).fetchall()
    assert [(a["affected_count"], sorted(a["affected_ids"])) for a in audit] == [
        (5, sorted(failed))
    ]
    assert audit[0]["filter"]["max_id"] == str(max(failed))


def test_dashboard_replay_preview_of_an_error_group_counts_and_finds_the_id_in_one_pass(
    db, rows, conn
):
    # digit runs of 4 or more normalise to one placeholder: both errors are one group
    group = [
        rows.add(status="failed", processed_ago=60, last_error=f"HTTP 500 order {n}")
        for n in (12345, 67890)
    ]
    rows.add(status="failed", processed_ago=60, last_error="timeout")
    group_id = conn.execute(
        "SELECT outbox_monitor.error_group('order.paid', 'HTTP 500 order 12345') AS g"
    ).fetchone()["g"]
    selection = ReplaySelection(error_group=group_id)

    exact = preview_replay(db, selection, count_cap=2)
    assert (exact.matched, exact.exact, exact.filter["max_id"]) == (2, True, str(max(group)))
    above = preview_replay(db, selection, count_cap=1)
    assert (above.exact, above.filter["max_id"]) == (False, str(max(group)))
    assert above.matched >= 2


def test_dashboard_prune_preview_per_status_and_the_delete_is_exact(db, rows, conn):
    old = [rows.add(status="done", created_ago=41 * DAY, processed_ago=40 * DAY) for _ in range(5)]
    recent = [rows.add(status="done", created_ago=DAY, processed_ago=DAY - 60) for _ in "ab"]
    analyze(conn)

    exact = preview_prune(db, done_older_than=30 * DAY, failed_older_than=90 * DAY, count_cap=5)
    assert [(p.params["status"], p.matched, p.exact) for p in exact.parts] == [
        ("done", 5, True),
        ("failed", 0, True),
    ]
    above = preview_prune(db, done_older_than=30 * DAY, failed_older_than=90 * DAY, count_cap=4)
    # 5 of the 7 rows, all done, were processed more than 30 days ago: the estimate is 5
    assert [(p.params["status"], p.matched, p.exact) for p in above.parts] == [
        ("done", 5, False),
        ("failed", 0, True),
    ]
    assert (above.matched, above.exact) == (5, False)
    assert above.filter["max_ids"] == {"done": str(max(old)), "failed": None}
    later = rows.add(status="done", created_ago=41 * DAY, processed_ago=40 * DAY)

    result = apply(db, above, actor=OPERATOR)

    assert (result.changed, result.skipped) == (5, None)
    assert sorted(result.ids) == sorted(old)
    left = {r["id"] for r in conn.execute("SELECT id FROM integration_outbox").fetchall()}
    assert left == {*recent, later}


def test_cli_and_scheduler_previews_stay_exact(db, rows):
    for _ in range(3):
        rows.add(status="failed", processed_ago=60, last_error="e")
    preview = preview_replay(db, ReplaySelection(event_type="%"))
    assert (preview.matched, preview.exact) == (3, True)
    result = apply(db, preview, actor=OPERATOR)
    assert (result.changed, result.skipped) == (3, 0)


@pytest.fixture
def backlog(rows):
    """Two pending rows with 0 attempts and one processing row with 2: exact in every test."""
    rows.add(status="pending", attempts=0)
    rows.add(status="pending", attempts=0)
    rows.add(status="processing", attempts=2, locked_ago=30)


def test_retry_pressure_exact_at_the_cap(db, rows, backlog):
    rows.add_dead_letters(6)
    rows.add_dead_letters(2, attempts=1)
    histogram = {0: 2, 1: 2, 2: 1, 10: 6}

    assert metrics.attempts_histogram_capped(db, cap=8) == (histogram, True)
    assert metrics.attempts_histogram(db) == histogram


def test_retry_pressure_estimates_dead_letters_above_the_cap_from_a_sample(
    db, rows, conn, backlog, monkeypatch
):
    rows.add_dead_letters(3000)
    conn.execute("ANALYZE integration_outbox")  # the planner expects 3,000 dead letters
    pages = conn.execute(
        "SELECT pg_relation_size('integration_outbox') / 8192 AS pages"
    ).fetchone()["pages"]
    assert pages > 40
    monkeypatch.setattr(dead_letter_attempts, "DEAD_LETTERS_SAMPLE_PAGES", pages // 2)  # half
    monkeypatch.setattr(dead_letter_attempts, "MIN_SAMPLED_DEAD_LETTERS", 1)
    monkeypatch.setattr(dead_letter_attempts, "DEAD_LETTERS_PER_SAMPLED_PAGE", 1)

    histogram, exact = metrics.attempts_histogram_capped(db, cap=10)

    assert not exact
    assert set(histogram) == {0, 2, 10}  # every dead letter has 10 attempts
    assert (histogram[0], histogram[2]) == (2, 1)  # the backlog, exact
    assert histogram[10] > 10
    figures = metrics.status(db, count_cap=10)
    assert figures["estimated"] == ["attempts_histogram"]
    assert figures["attempts_histogram"]["10"] == histogram[10]
    # status --json, the sampler and alerts: exact, whatever the dashboard's cap
    exact_figures = metrics.status(db)
    assert "estimated" not in exact_figures
    assert exact_figures["attempts_histogram"] == {"0": 2, "2": 1, "10": 3000}


def test_status_json_and_alerts_are_exact_above_the_dashboard_cap(
    dsn, db, rows, backlog, monkeypatch
):
    """The dashboard's cap set to 2 and its sample to any page: status --json and the alert
    measurements still count all 3,000 dead letters."""
    rows.add_dead_letters(3000)
    monkeypatch.setattr(estimates, "DASHBOARD_COUNT_CAP", 2)
    monkeypatch.setattr(dead_letter_attempts, "DEAD_LETTERS_SAMPLE_PAGES", 1)
    monkeypatch.setattr(dead_letter_attempts, "MIN_SAMPLED_DEAD_LETTERS", 1)
    monkeypatch.setattr(dead_letter_attempts, "DEAD_LETTERS_PER_SAMPLED_PAGE", 1)
    monkeypatch.setenv("OUTBOX_MONITOR_DSN", dsn)

    result = CliRunner().invoke(main, ["status", "--json", "--window", "1h"])

    assert result.exit_code == 0, result.output
    figures = json.loads(result.stdout)
    assert "estimated" not in figures
    assert figures["attempts_histogram"] == {"0": 2, "2": 1, "10": 3000}
    assert figures["failed_in_window"] == 3000
    assert figures["failed_by_event_type"] == {"order.paid": 3000}
    assert metrics.failed_in_window(db, window=3600) == 3000
    pressure = make_rule(metric="attempts_at_least", attempts=10, threshold=0)
    failures = make_rule(metric="failed_in_window", window="1h", threshold=0)
    assert [m.value for m in measure.measure(db, pressure)] == [3000.0]
    assert [m.value for m in measure.measure(db, failures)] == [3000.0]
