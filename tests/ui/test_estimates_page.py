"""The dashboard shows an exact count at or below its cap and a labelled estimate above it
(SPEC §2), and what a confirmed action applies stays exact.

The cap is set low (``estimates.DASHBOARD_COUNT_CAP``) so the tables stay small; after
``ANALYZE`` the planner's estimate of a table this small equals the count worked out by hand.
"""

from outbox_monitor.figures import dead_letter_attempts, estimates

ACTOR = "ui-test"  # set by the open_page fixture


def replay_preview(open_page):
    at = open_page("actions", event_type="order.paid")
    return at.button(key="actions.replay.preview_button").click().run()


def test_replay_preview_exact_at_the_cap(open_page, rows, conn, monkeypatch):
    for _ in range(3):
        rows.add(status="failed", processed_ago=60, last_error="e")
    monkeypatch.setattr(estimates, "DASHBOARD_COUNT_CAP", 3)

    at = replay_preview(open_page)

    assert any("**3** rows would be replayed" in m.value for m in at.markdown)
    assert at.button(key="actions.replay.confirm").label == "Confirm replay of 3 rows"
    assert not [m for m in at.markdown if "estimate" in m.value]


def test_replay_preview_labels_an_estimate_above_the_cap_and_applies_exactly(
    open_page, rows, conn, monkeypatch
):
    failed = [rows.add(status="failed", processed_ago=60, last_error="e") for _ in range(3)]
    conn.execute("ANALYZE integration_outbox")
    monkeypatch.setattr(estimates, "DASHBOARD_COUNT_CAP", 2)

    at = replay_preview(open_page)

    assert any("**≈ 3** rows (estimate) would be replayed" in m.value for m in at.markdown)
    assert any("More than 2 rows match" in c.value for c in at.caption)
    confirm = at.button(key="actions.replay.confirm")
    assert confirm.label == "Confirm replay of ≈ 3 rows (estimate)"
    late = rows.add(status="failed", processed_ago=1, last_error="e")  # after the preview

    at = confirm.click().run()

    assert not at.exception
    assert any("Replayed 3 rows (previewed: ≈ 3 rows, an estimate)." in s.value for s in at.success)
    assert [rows.get(i)["status"] for i in failed] == ["pending"] * 3
    assert rows.get(late)["status"] == "failed"
    audit = at.dataframe[-1].value
    assert list(audit["affected_count"]) == [3]
    assert list(audit["actor"]) == [ACTOR]


def test_prune_preview_labels_each_status(open_page, rows, conn, monkeypatch):
    day = 86400
    for _ in range(3):
        rows.add(status="done", created_ago=41 * day, processed_ago=40 * day)
    for _ in range(2):  # two rows per processed_at: the statistics list every value
        rows.add(status="done", created_ago=2 * day, processed_ago=day)
    conn.execute("ANALYZE integration_outbox")
    monkeypatch.setattr(estimates, "DASHBOARD_COUNT_CAP", 2)

    at = open_page("actions")
    at = at.button(key="actions.prune.preview_button").click().run()

    # 3 of the 5 rows, all done, were processed more than 30 days ago; no failed row
    assert any(
        "done: **≈ 3** rows (estimate) older than 30 days · failed: **0** rows older than "
        "90 days" in m.value
        for m in at.markdown
    )


def test_retry_pressure_says_when_dead_letters_are_estimated(open_page, rows, conn, monkeypatch):
    rows.add(status="pending")
    rows.add_dead_letters(3000)
    conn.execute("ANALYZE integration_outbox")  # the planner expects 3,000 dead letters
    pages = conn.execute(
        "SELECT pg_relation_size('integration_outbox') / 8192 AS pages"
    ).fetchone()["pages"]
    monkeypatch.setattr(dead_letter_attempts, "DEAD_LETTERS_SAMPLE_PAGES", pages // 2)
    monkeypatch.setattr(dead_letter_attempts, "MIN_SAMPLED_DEAD_LETTERS", 1)
    monkeypatch.setattr(dead_letter_attempts, "DEAD_LETTERS_PER_SAMPLED_PAGE", 1)

    monkeypatch.setattr(estimates, "DASHBOARD_COUNT_CAP", 3000)
    at = open_page("overview", view="Charts")
    assert not at.exception
    assert not [c for c in at.caption if "Estimate:" in c.value]
    assert {m.label: m.value for m in at.metric}["Failed (24 h)"] == "3,000"

    monkeypatch.setattr(estimates, "DASHBOARD_COUNT_CAP", 10)
    at = open_page("overview", view="Charts")
    assert any(
        "Estimate: more than 10 dead letters" in c.value and "status --json" in c.value
        for c in at.caption
    )
    assert {m.label: m.value for m in at.metric}["Failed (24 h)"] == "3,000"  # exact
