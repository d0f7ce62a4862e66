"""Issue 10, item 7: a confirmed action always ends with a clear outcome.

Dead letters → a group still receiving new failures → "Select all" → Preview → wait →
Confirm: the preview used to vanish with nothing changed, no audit row and no message
(new failures pushed the chosen rows out of the newest 200 listed, the choice shrank, and
the confirm click landed on a run without the preview). Now the confirm applies what
its preview matched, or says why it did not, visibly and in the log.
"""

import hashlib
import logging
import threading
import time

import pytest
import streamlit as st
from playwright.sync_api import expect

from outbox_monitor.ui import cache
from tests.browser_support import settled
from tests.ui.conftest import environment, fresh_caches, open_page  # noqa: F401 (fixtures)
from tests.ui.rendered import plain

FLOW = "dead_letters.replay"
IDS = "dead_letters.ids"
ERROR = "HTTP 503 upstream busy"
GROUP = hashlib.md5(f"order.paid:{ERROR}".encode()).hexdigest()[:12]
PREVIEWED = 196
"""Rows in the group when it is previewed; the page lists the newest 200 of a group."""
NEW_FAILURES = 10
SECONDS_OPEN = 12.0
"""How long the preview stays open in the browser: longer than the 10 s default refresh
and the 4 s cache TTL (``cache.CACHE_TTL_SECONDS``)."""


def fail_rows(conn, count: int) -> list[int]:
    """``count`` order.paid rows dead-lettered with ``ERROR`` just now; their ids."""
    found = conn.execute(
        """
        INSERT INTO integration_outbox
            (event_type, aggregate_type, aggregate_id, event_key, payload, status, attempts,
             last_error, processed_at)
        SELECT 'order.paid', 'order', n::text, 'order.paid:' || gen_random_uuid(), '{}',
               'failed', 10, %(error)s, clock_timestamp()
        FROM generate_series(1, %(count)s) AS n
        RETURNING id
        """,
        {"count": count, "error": ERROR},
    ).fetchall()
    return sorted(row["id"] for row in found)


def outcome(conn, previewed: list[int], later: list[int]) -> dict:
    """What changed: statuses of the previewed and of the later rows, and the audit rows."""

    def statuses(ids: list[int]) -> dict[str, int]:
        found = conn.execute(
            "SELECT status, count(*)::int AS n FROM integration_outbox WHERE id = ANY(%s) "
            "GROUP BY status",
            (ids,),
        ).fetchall()
        return {row["status"]: row["n"] for row in found}

    audit = conn.execute(
        "SELECT action, affected_count FROM outbox_monitor.audit_log ORDER BY id"
    ).fetchall()
    return {
        "previewed": statuses(previewed),
        "later": statuses(later),
        "audit": [(row["action"], row["affected_count"]) for row in audit],
    }


def test_group_groups_rows_as_the_database_does(conn):
    fail_rows(conn, 1)
    [row] = conn.execute(
        "SELECT outbox_monitor.error_group(event_type, last_error) AS g FROM integration_outbox"
    ).fetchall()
    assert row["g"] == GROUP


def test_new_failures_after_the_preview_do_not_lose_the_confirm(open_page, conn):  # noqa: F811
    previewed = fail_rows(conn, PREVIEWED)
    at = open_page("dead_letters", error_group=GROUP)
    at.multiselect(key=IDS).set_value([str(i) for i in previewed]).run()  # "Select all"
    at.button(key=f"{FLOW}.preview_button").click().run()
    assert any(f"**{PREVIEWED}** rows would be replayed" in m.value for m in at.markdown)

    later = fail_rows(conn, NEW_FAILURES)  # the group now has 206 rows: 200 are listed
    st.cache_data.clear()  # the loaders' TTL ran out while the preview was open
    at.button(key=f"{FLOW}.confirm").click().run()

    assert not at.exception
    assert [plain(s.value) for s in at.success] == ["Replayed 196 rows; 0 were no longer failed."]
    assert outcome(conn, previewed, later) == {
        "previewed": {"pending": PREVIEWED},
        "later": {"failed": NEW_FAILURES},
        "audit": [("replay", PREVIEWED)],
    }


def test_a_confirm_for_a_changed_selection_says_so_and_changes_nothing(
    open_page,  # noqa: F811
    conn,
    caplog,
):
    previewed = fail_rows(conn, 3)
    at = open_page("dead_letters", error_group=GROUP)
    at.button(key=f"{FLOW}.preview_button").click().run()  # the whole group: 3 rows
    assert any("**3** rows would be replayed" in m.value for m in at.markdown)

    # the choice changes in the same run as the click (a click on a stale page)
    at.multiselect(key=IDS).set_value([str(previewed[0])])
    at.button(key=f"{FLOW}.confirm").click()
    with caplog.at_level(logging.WARNING, logger="outbox_monitor"):
        at.run()

    assert not at.exception
    assert [plain(w.value) for w in at.warning] == [
        "Not replayed: the selection changed after the preview (of 3 rows). Nothing was "
        "changed: preview again."
    ]
    assert outcome(conn, previewed, []) == {"previewed": {"failed": 3}, "later": {}, "audit": []}
    [record] = [r for r in caplog.records if "selection changed" in r.getMessage()]
    assert "replay of 3 rows by ui-test not applied" in record.getMessage()


@pytest.mark.browser
def test_in_the_browser_a_confirm_after_new_failures_replays_the_preview(
    dashboard,
    page,
    conn,
):
    previewed = fail_rows(conn, PREVIEWED)
    page.goto(f"{dashboard}/dead_letters?error_group={GROUP}")
    rows_to_replay = page.locator('[data-testid="stMultiSelect"]').filter(has_text="Rows to replay")
    expect(rows_to_replay).to_be_visible()
    settled(page)  # a click on a widget its run is still drawing leaves the list closed
    rows_to_replay.click()
    page.get_by_role("option", name="Select all").click()
    page.keyboard.press("Escape")
    page.get_by_role("button", name="Preview replay").click()
    confirm = page.get_by_role("button", name=f"Confirm replay of {PREVIEWED} rows")
    expect(confirm).to_be_visible()

    later: list[int] = []
    stop = threading.Event()

    def simulator() -> None:  # a worker still dead-lettering rows into the group
        while not stop.wait(SECONDS_OPEN / 24):
            later.extend(fail_rows(conn, 1))

    started = time.monotonic()
    thread = threading.Thread(target=simulator)
    thread.start()
    try:
        while time.monotonic() - started < SECONDS_OPEN or len(later) < NEW_FAILURES:
            time.sleep(0.2)
    finally:
        stop.set()
        thread.join()
    assert time.monotonic() - started > cache.CACHE_TTL_SECONDS
    confirm.click()

    expect(page.get_by_text("Replayed 196 rows; 0 were no longer failed.")).to_be_visible()
    assert outcome(conn, previewed, later) == {
        "previewed": {"pending": PREVIEWED},
        "later": {"failed": len(later)},
        "audit": [("replay", PREVIEWED)],
    }


def test_rows_chosen_in_one_group_are_not_carried_to_another(open_page, rows):  # noqa: F811
    chosen = rows.add(status="failed", processed_ago=60, last_error=ERROR)
    other = rows.add(status="failed", processed_ago=60, last_error="HTTP 401 invalid api key")
    at = open_page("dead_letters", error_group=GROUP)
    at.multiselect(key=IDS).set_value([str(chosen)]).run()

    at.selectbox(key="dead_letters.group").set_value(
        hashlib.md5(b"order.paid:HTTP 401 invalid api key").hexdigest()[:12]
    ).run()

    assert not at.exception
    assert at.multiselect(key=IDS).value == []
    assert at.multiselect(key=IDS).options == [str(other)]
