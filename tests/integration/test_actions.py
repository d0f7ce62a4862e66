"""SPEC §4 actions: previews, guards, batches, audit rows, concurrency."""

import threading
import time

import psycopg
import pytest

from outbox_monitor.access import Identity, Role
from outbox_monitor.actions.prune import preview_prune
from outbox_monitor.actions.reap import preview_reap
from outbox_monitor.actions.replay import ReplaySelection, preview_replay
from outbox_monitor.actions.run import apply
from outbox_monitor.errors import AccessDenied, ActionRefused
from outbox_monitor.store.audit import recent_audit
from outbox_monitor.store.db import Database

ACTOR = Identity("oncall@example.com", Role.operator, "oidc")


def _failed(rows, **fields):
    return rows.add_failed(**fields)


def _audit(conn):
    return conn.execute("SELECT * FROM outbox_monitor.audit_log ORDER BY id").fetchall()


def test_replay_moves_failed_rows_back_and_keeps_last_error(db, rows, conn):
    row_id = _failed(rows, last_error="HTTP 401 bad key", locked_ago=100, locked_by="w9")
    preview = preview_replay(db, ReplaySelection(ids=(row_id,)))
    assert (preview.matched, [r["id"] for r in preview.sample]) == (1, [row_id])
    result = apply(db, preview, actor=ACTOR)
    assert (result.changed, result.skipped, result.ids) == (1, 0, [row_id])
    row = rows.get(row_id)
    assert (row["status"], row["attempts"], row["processed_at"]) == ("pending", 0, None)
    assert (row["locked_at"], row["locked_by"], row["last_error"]) == (
        None,
        None,
        "HTTP 401 bad key",
    )
    due_in = conn.execute(
        "SELECT extract(epoch FROM available_at - now()) AS s FROM integration_outbox"
    ).fetchone()["s"]
    assert -5 < due_in <= 0


def test_replaying_twice_changes_nothing_the_second_time(db, rows, conn):
    ids = [_failed(rows, event_type="order.paid") for _ in range(3)]
    _failed(rows, event_type="invoice.sent")
    preview = preview_replay(db, ReplaySelection(event_type="order.paid"))
    first = apply(db, preview, actor=ACTOR)
    second = apply(db, preview, actor=ACTOR)
    assert (first.changed, second.changed, second.skipped) == (3, 0, 3)
    audit = _audit(conn)
    assert [(a["action"], a["affected_count"]) for a in audit] == [("replay", 3), ("replay", 0)]
    assert audit[0]["affected_ids"] == ids
    assert audit[0]["actor"] == ACTOR.name
    assert audit[0]["filter"]["event_type"] == "order.paid"
    assert audit[0]["filter"]["max_id"] == str(ids[-1])


def test_replay_applies_only_to_what_the_preview_saw(db, rows):
    seen = _failed(rows)
    preview = preview_replay(db, ReplaySelection(event_type="order.paid"))
    later = _failed(rows)  # dead-lettered after the preview: larger id
    assert apply(db, preview, actor=ACTOR).ids == [seen]
    assert rows.get(later)["status"] == "failed"


def test_replay_by_error_group_and_time_range(db, rows):
    from outbox_monitor.figures import error_grouping

    a = _failed(rows, last_error="HTTP 401 key for account 1234", processed_ago=100)
    b = _failed(rows, last_error="HTTP 401 key for account 5678", processed_ago=5000)
    c = _failed(rows, last_error="HTTP 500 boom", processed_ago=100)
    group = next(
        g["group_id"]
        for g in error_grouping.error_groups(db)
        if g["fingerprint"].startswith("HTTP 401")
    )
    by_group = preview_replay(db, ReplaySelection(error_group=group))
    assert by_group.matched == 2
    recent = ReplaySelection(error_group=group, since=rows.at(1000))
    assert apply(db, preview_replay(db, recent), actor=ACTOR).ids == [a]
    older = ReplaySelection(until=rows.at(1000))
    assert apply(db, preview_replay(db, older), actor=ACTOR).ids == [b]
    assert rows.get(c)["status"] == "failed"


def test_replay_ids_beyond_two_to_the_53(db, rows):
    big = 2**53 + 1
    _failed(rows, id=big)
    _failed(rows, id=2**53)
    preview = preview_replay(db, ReplaySelection(ids=(big,)))
    assert preview.filter["ids"] == ["9007199254740993"]
    assert apply(db, preview, actor=ACTOR).ids == [big]
    assert rows.get(2**53)["status"] == "failed"


def test_an_empty_replay_selection_is_refused(db):
    with pytest.raises(ActionRefused, match="needs a selection"):
        preview_replay(db, ReplaySelection())


def test_concurrent_replays_of_the_same_rows_change_each_row_once(settings, rows, conn):
    ids = [_failed(rows) for _ in range(300)]
    results = []
    barrier = threading.Barrier(2)

    def replay():
        with Database(settings) as db:
            preview = preview_replay(db, ReplaySelection(event_type="order.paid"))
            barrier.wait()
            results.append(apply(db, preview, actor=ACTOR, batch_size=50))

    threads = [threading.Thread(target=replay) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sum(r.changed for r in results) == 300
    audited = [i for a in _audit(conn) for i in a["affected_ids"]]
    assert sorted(audited) == ids


def test_replay_waits_for_a_concurrent_change_and_skips_the_row(settings, rows, dsn):
    target = _failed(rows)
    other = _failed(rows)
    with Database(settings) as db:
        preview = preview_replay(db, ReplaySelection(event_type="order.paid"))
        with psycopg.connect(dsn) as rival:  # another operator's replay, not yet committed
            rival.execute(
                "UPDATE integration_outbox SET status = 'pending', attempts = 0 WHERE id = %s",
                (target,),
            )
            outcome = []
            worker = threading.Thread(
                target=lambda: outcome.append(apply(db, preview, actor=ACTOR))
            )
            worker.start()
            time.sleep(0.5)
            assert worker.is_alive()  # blocked on the row lock
            rival.commit()
            worker.join()
    assert (outcome[0].changed, outcome[0].skipped, outcome[0].ids) == (1, 1, [other])


def test_reap_returns_stuck_rows_and_dead_letters_at_max_attempts(db, rows):
    near_max = rows.add(status="processing", locked_ago=1000, attempts=9, locked_by="w-crashed")
    stuck = rows.add(status="processing", locked_ago=1000, attempts=2, locked_by="w-crashed")
    fresh = rows.add(status="processing", locked_ago=10)
    preview = preview_reap(db)
    assert preview.matched == 2
    assert preview.sample[0]["lock_age_seconds"] >= 1000
    result = apply(db, preview, actor=ACTOR, batch_size=1)
    assert (result.changed, result.dead_lettered, result.batches) == (2, 1, 2)
    failed, back = rows.get(near_max), rows.get(stuck)
    assert (failed["status"], failed["attempts"]) == ("failed", 10)
    assert failed["processed_at"] is not None
    assert (back["status"], back["attempts"], back["locked_by"], back["processed_at"]) == (
        "pending",
        3,
        None,
        None,
    )
    assert back["last_error"].startswith("lock expired: claimed by w-crashed")
    assert rows.get(fresh)["status"] == "processing"


def test_reap_never_touches_a_row_acked_or_reclaimed_after_the_preview(db, rows, conn):
    acked = rows.add(status="processing", locked_ago=1000)
    reclaimed = rows.add(status="processing", locked_ago=1000)
    stuck = rows.add(status="processing", locked_ago=1000)
    preview = preview_reap(db)
    assert preview.matched == 3
    conn.execute(
        "UPDATE integration_outbox SET status = 'done', processed_at = now(), "
        "locked_at = NULL, locked_by = NULL WHERE id = %s",
        (acked,),
    )
    conn.execute(
        "UPDATE integration_outbox SET locked_at = now(), locked_by = 'w2' WHERE id = %s",
        (reclaimed,),
    )
    result = apply(db, preview, actor=ACTOR)
    assert (result.ids, result.skipped) == ([stuck], 2)
    assert rows.get(acked)["status"] == "done"
    assert rows.get(reclaimed)["locked_by"] == "w2"


def test_reap_guard_holds_when_the_ack_commits_while_reap_waits(settings, rows, dsn):
    row_id = rows.add(status="processing", locked_ago=1000, locked_by="slow-worker")
    with Database(settings) as db:
        preview = preview_reap(db)
        with psycopg.connect(dsn) as worker:  # the worker acks in a transaction
            worker.execute(
                "UPDATE integration_outbox SET status = 'done', processed_at = now(),"
                " locked_at = NULL, locked_by = NULL WHERE id = %s",
                (row_id,),
            )
            outcome = []
            reaper = threading.Thread(
                target=lambda: outcome.append(apply(db, preview, actor=ACTOR))
            )
            reaper.start()
            time.sleep(0.5)
            worker.commit()
            reaper.join()
    assert outcome[0].changed == 0
    assert rows.get(row_id)["status"] == "done"


def test_prune_deletes_old_terminal_rows_in_batches_and_audits_each(db, rows, conn):
    day = 86400
    old_done = [
        rows.add(status="done", created_ago=40 * day, processed_ago=31 * day) for _ in range(5)
    ]
    rows.add(status="done", created_ago=20 * day, processed_ago=29 * day)
    old_failed = rows.add(status="failed", created_ago=100 * day, processed_ago=91 * day)
    rows.add(status="failed", created_ago=80 * day, processed_ago=60 * day)
    rows.add(status="pending", created_ago=200 * day)
    rows.add(status="processing", created_ago=200 * day, locked_ago=100 * day)
    preview = preview_prune(db, done_older_than=30 * day, failed_older_than=90 * day)
    assert preview.matched == 6
    result = apply(db, preview, actor=ACTOR, batch_size=2)
    assert (result.changed, result.batches) == (6, 4)  # done: 2+2+1, failed: 1
    left = conn.execute(
        "SELECT status, count(*) AS n FROM integration_outbox GROUP BY status ORDER BY status"
    ).fetchall()
    assert {r["status"]: r["n"] for r in left} == {
        "done": 1,
        "failed": 1,
        "pending": 1,
        "processing": 1,
    }
    audit = _audit(conn)
    assert [a["affected_count"] for a in audit] == [2, 2, 1, 1]
    assert len({a["run_id"] for a in audit}) == 1
    assert sorted(i for a in audit for i in a["affected_ids"]) == sorted([*old_done, old_failed])


def test_prune_never_deletes_a_previewed_row_replayed_before_its_batch(db, rows, conn):
    day = 86400
    kept = rows.add(status="failed", created_ago=100 * day, processed_ago=91 * day)
    gone = rows.add(status="failed", created_ago=100 * day, processed_ago=92 * day)
    preview = preview_prune(db, done_older_than=30 * day, failed_older_than=90 * day)
    assert preview.matched == 2
    conn.execute(  # replayed between the preview and the confirm
        "UPDATE integration_outbox SET status = 'pending', attempts = 0, processed_at = NULL"
        " WHERE id = %s",
        (kept,),
    )
    result = apply(db, preview, actor=ACTOR)
    assert (result.changed, result.skipped, result.ids) == (1, 1, [gone])
    assert rows.get(kept)["status"] == "pending"
    assert rows.get(gone) is None


def test_prune_refuses_ages_under_a_day(db):
    with pytest.raises(ActionRefused, match="younger than one day"):
        preview_prune(db, done_older_than=1800, failed_older_than=None)


def test_progress_is_reported_per_batch(db, rows):
    for _ in range(5):
        _failed(rows)
    seen = []
    preview = preview_replay(db, ReplaySelection(event_type="order.%"))
    apply(
        db,
        preview,
        actor=ACTOR,
        batch_size=2,
        on_progress=lambda done, total: seen.append((done, total)),
    )
    assert seen == [(2, 5), (4, 5), (5, 5)]


def test_recent_audit_lists_newest_first(db, rows):
    _failed(rows)
    apply(db, preview_reap(db), actor=Identity("a", Role.operator, "cli"))
    apply(
        db,
        preview_replay(db, ReplaySelection(event_type="%")),
        actor=Identity("b", Role.admin, "cli"),
    )
    audit = recent_audit(db)
    assert [(a["action"], a["actor"], a["affected_count"]) for a in audit] == [
        ("replay", "b", 1),
        ("reap", "a", 0),
    ]


def test_a_viewer_is_refused_inside_apply_and_nothing_changes(db, rows, conn):
    failed = _failed(rows)
    stuck = rows.add(status="processing", locked_ago=3600, attempts=1)
    viewer = Identity("vic@example.com", Role.viewer, "oidc")
    previews = [
        preview_replay(db, ReplaySelection(ids=(failed,))),
        preview_reap(db),
        preview_prune(db, done_older_than=None, failed_older_than=0.5 * 86400 * 2),
    ]
    for preview in previews:
        with pytest.raises(AccessDenied, match=r"^vic@example.com \(viewer\) may not"):
            apply(db, preview, actor=viewer)
    assert (rows.get(failed)["status"], rows.get(stuck)["status"]) == ("failed", "processing")
    # only the refusals (issue 29 item 5), one per action refused
    assert [(a["action"], a["actor"], a["filter"]) for a in _audit(conn)] == [
        ("refused", "vic@example.com", {"action": action}) for action in ("replay", "reap", "prune")
    ]
