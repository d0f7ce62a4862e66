"""Actions page: reap, replay by filter and prune through the UI, and the audit log."""

from rendered import plain, unprotected

PAGE = "actions"
DAY = 86400
ACTOR = "ui-test"  # set by the open_page fixture


def test_stuck_locks_listed_then_reaped(open_page, rows):
    stuck = rows.add(
        status="processing",
        created_ago=1800,
        locked_ago=20 * 60,
        locked_by="n8n-7:wf-12",
        attempts=2,
    )
    fresh = rows.add(status="processing", created_ago=120, locked_ago=60, locked_by="n8n-1:wf-12")

    at = open_page(PAGE)
    sample = at.dataframe[0].value
    assert [int(i) for i in sample["id"]] == [stuck]
    assert list(sample["locked_by"]) == ["n8n-7:wf-12"]
    assert sample["lock_age_seconds"][0].startswith("20m")  # in words
    assert any("**1** row would be reaped" in m.value for m in at.markdown)

    at.button(key="actions.reap.confirm").click().run()

    assert not at.exception
    assert any("Reaped 1 row; 0 were acked or re-claimed meanwhile." in s.value for s in at.success)
    row = rows.get(stuck)
    assert (row["status"], row["attempts"], row["locked_by"]) == ("pending", 3, None)
    assert row["last_error"].startswith("lock expired: claimed by n8n-7:wf-12")
    assert rows.get(fresh)["status"] == "processing"
    assert any("Nothing to reap" in i.value for i in at.info)
    audit = at.dataframe[-1].value
    assert list(audit["action"]) == ["reap"]
    assert list(audit["actor"]) == [ACTOR]
    assert list(audit["affected_count"]) == [1]
    assert list(audit["first_ids"]) == [str(stuck)]


def test_replay_by_event_type_and_failure_time(open_page, rows):
    recent = rows.add(
        event_type="invoice.sent", status="failed", processed_ago=3600, last_error="e"
    )
    old = rows.add(
        event_type="invoice.sent", status="failed", processed_ago=2 * DAY, last_error="e"
    )
    other = rows.add(event_type="order.paid", status="failed", processed_ago=60, last_error="e")

    at = open_page(PAGE, event_type="invoice.%")
    at.text_input(key="actions.since").set_value("24h").run()
    at.button(key="actions.replay.preview_button").click().run()
    assert any("**1** row would be replayed" in m.value for m in at.markdown)
    at.button(key="actions.replay.confirm").click().run()

    assert any("Replayed 1 row; 0 were no longer failed." in s.value for s in at.success)
    assert rows.get(recent)["status"] == "pending"
    assert rows.get(old)["status"] == "failed"
    assert rows.get(other)["status"] == "failed"


def test_replay_without_a_selection_is_refused_inline(open_page, rows):
    failed = rows.add(status="failed", processed_ago=60, last_error="e")

    at = open_page(PAGE)
    at.button(key="actions.replay.preview_button").click().run()

    assert any("a replay needs a selection" in e.value for e in at.error)
    assert any("'%'" in i.value for i in at.info)
    assert at.get("tab")  # the rest of the page still rendered
    assert rows.get(failed)["status"] == "failed"
    assert not at.exception


def test_prune_preview_counts_then_delete(open_page, rows, conn):
    done_old = [rows.add(status="done", created_ago=41 * DAY, processed_ago=40 * DAY) for _ in "ab"]
    done_recent = rows.add(status="done", created_ago=11 * DAY, processed_ago=10 * DAY)
    failed_old = rows.add(status="failed", created_ago=101 * DAY, processed_ago=100 * DAY)
    failed_recent = rows.add(status="failed", created_ago=51 * DAY, processed_ago=50 * DAY)
    pending_old = rows.add(status="pending", created_ago=200 * DAY)

    at = open_page(PAGE)
    at.button(key="actions.prune.preview_button").click().run()
    assert any("**3** rows would be deleted" in m.value for m in at.markdown)
    assert any(
        "done: **2** rows older than 30 days · failed: **1** row older than 90 days" in m.value
        for m in at.markdown
    )
    at.button(key="actions.prune.confirm").click().run()

    assert any("Deleted 3 rows; 0 no longer matched." in s.value for s in at.success)
    left = {r["id"] for r in conn.execute("SELECT id FROM integration_outbox").fetchall()}
    assert left == {done_recent, failed_recent, pending_old}
    assert not set(done_old) & left
    assert failed_old not in left


def test_prune_of_one_status_only(open_page, rows):
    rows.add(status="done", created_ago=41 * DAY, processed_ago=40 * DAY)
    failed_old = rows.add(status="failed", created_ago=101 * DAY, processed_ago=100 * DAY)

    at = open_page(PAGE)
    at.checkbox(key="actions.prune_done").uncheck().run()
    at.button(key="actions.prune.preview_button").click().run()

    assert any("**1** row would be deleted" in m.value for m in at.markdown)
    at.button(key="actions.prune.confirm").click().run()
    assert rows.get(failed_old) is None


def test_a_huge_failed_since_is_an_inline_error_and_the_page_goes_on(open_page, rows):
    rows.add(status="done", created_ago=41 * DAY, processed_ago=40 * DAY)
    failed = rows.add(status="failed", processed_ago=60, last_error="e")

    at = open_page(PAGE)
    at.text_input(key="actions.since").set_value("9999999d").run()

    assert not at.exception
    [error] = at.error
    assert plain(error.value) == (
        "Time range: '9999999d' is longer than 100 years; expected a duration such as 30d"
    )
    assert at.text_input(key="actions.until")  # the replay inputs are still there
    at.button(key="actions.prune.preview_button").click().run()  # and the other tabs work
    assert any("**1** row would be deleted" in m.value for m in at.markdown)

    at.text_input(key="actions.since").set_value("9999-12-31T23:59:59-01:00").run()
    assert not at.exception
    assert "outside the dates that can be shown" in plain(at.error[0].value)
    assert rows.get(failed)["status"] == "failed"


def test_the_event_type_filter_and_the_actor_are_shown_literally(open_page, environment):
    evil = "x`**y** [z](https://example.com)`"
    environment.setenv("OUTBOX_MONITOR_ACTOR", "r`<b>oot</b>`")

    at = open_page(PAGE, event_type=evil)

    assert not at.exception
    caption = at.caption[0].value
    assert plain(caption) == f"Acting on event type {evil} (the sidebar filter) as r`<b>oot</b>`"
    # what acting means is the caption's help: previewed, audited, to rows still matching
    assert "audited; it applies to what the preview matched" in at.caption[0].proto.help
    [sidebar] = [c.value for c in at.sidebar.caption if "Acting as" in c.value]
    assert plain(sidebar) == "Acting as r`<b>oot</b>` (local, admin)"
    for shown in (caption, sidebar):
        assert "<b>" not in unprotected(shown) and "](" not in unprotected(shown)
        assert "**y**" not in unprotected(shown)


def test_the_automatic_reapers_next_run_is_previewed_with_its_budget_and_holders(
    open_page, environment, rows
):
    # issue 29 item 12: 10 stuck, budget 100 rows / 50 % → ⌈0.5 × 10⌉ = 5, the oldest locks
    environment.setenv("OUTBOX_MONITOR_AUTO_REAP_MAX_ROWS", "100")
    environment.setenv("OUTBOX_MONITOR_AUTO_REAP_MAX_SHARE", "50%")
    stuck = [
        rows.add(status="processing", locked_ago=20 * 60 + n, locked_by="n8n-7:wf-12")
        for n in range(10)
    ]

    at = open_page(PAGE)
    assert any("**10** rows would be reaped" in m.value for m in at.markdown)  # by hand: all
    at.button(key="actions.auto_reap.preview_button").click().run()

    assert not at.exception
    text = "\n".join(plain(m.value) for m in at.markdown)
    assert "**5** rows would be reaped" in text
    assert "takes 5 of 10 stuck rows, 5 left for the next run (budget: 100 rows, 50 %" in text
    assert "holder n8n-7:wf-12: 5 rows; never seen by the sampler" in text
    at.button(key="actions.auto_reap.confirm").click().run()
    assert not at.exception
    assert any("Reaped 5 rows" in s.value for s in at.success)
    still = [row_id for row_id in stuck if rows.get(row_id)["status"] == "processing"]
    assert still == stuck[:5]  # the five newest locks wait for the next run
