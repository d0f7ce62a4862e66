"""Issue 13 items 4 and 5 on the dashboard: the drip rate and the order-safe choice on the
Actions page, the replay's outcome after it and for recent runs, the warning of a group
whose last replay re-failed, and the replay of one event from its detail (operator; a
viewer sees the button disabled with why)."""

from rendered import plain

from outbox_monitor.access import Identity, Role
from outbox_monitor.ui import access

ACTOR = "ui-test"  # tests/ui/conftest.py's OUTBOX_MONITOR_ACTOR


def texts(at) -> str:
    kinds = ("markdown", "caption", "success", "info", "warning", "error")
    joined = "\n".join(plain(e.value) for kind in kinds for e in getattr(at, kind))
    return joined.replace("**", "")


def test_drip_and_order_safe_replay_then_its_outcome(open_page, rows, conn):
    stale = rows.add_failed(created_ago=300, aggregate=("order", "1"))
    rows.add(status="done", created_ago=200, processed_ago=100, aggregate=("order", "1"))
    first = rows.add_failed(created_ago=250, aggregate=("order", "2"))
    second = rows.add_failed(created_ago=150, aggregate=("order", "3"))

    at = open_page("actions", event_type="order.paid")
    at.number_input(key="actions.rate").set_value(4.0).run()
    at.checkbox(key="actions.exclude_superseded").check().run()
    at.button(key="actions.replay.preview_button").click().run()
    shown = texts(at)
    assert "2 rows would be replayed" in shown
    assert "Order-safe: 1 row selected has a later done event" in shown
    assert "they are excluded from this replay. By event type: order.paid 1" in shown
    assert "Drip at 4 rows/s: the rows fall due one after another, oldest first, over 0.5 s." in (
        shown
    )

    at.button(key="actions.replay.confirm").click().run()
    assert not at.exception
    assert any("Replayed 2 rows; 0 were no longer failed." in s.value for s in at.success)
    gap = rows.get(second)["available_at"] - rows.get(first)["available_at"]
    assert gap.total_seconds() == 0.25
    assert rows.get(stale)["status"] == "failed"
    assert "Outcome so far: 2 replayed: 0 done, 0 failed again, 2 pending, 0 processing" in (
        texts(at)
    )

    conn.execute("UPDATE integration_outbox SET status = 'done' WHERE id = %s", (first,))
    conn.execute(
        "UPDATE integration_outbox SET status = 'failed', last_error = 'HTTP 401 bad key' "
        "WHERE id = %s",
        (second,),
    )
    run_id = conn.execute("SELECT run_id::text AS r FROM outbox_monitor.audit_log").fetchone()["r"]
    at.button(key=f"outcome.{run_id}.refresh").click().run()
    shown = texts(at)
    assert "Outcome: 2 replayed: 1 done, 1 failed again, 0 pending, 0 processing" in shown
    assert "(order.paid, 1 rows): HTTP 401 bad key" in shown
    recent = next(d.value for d in at.dataframe if "run_id" in d.value.columns)
    assert list(recent["run_id"]) == [run_id]
    assert (list(recent["replayed"]), list(recent["done"]), list(recent["failed"])) == (
        [2],
        [1],
        [1],
    )


def test_a_group_whose_last_replay_refailed_says_so_before_the_click(open_page, rows, conn):
    for _ in range(2):
        rows.add_failed(last_error="HTTP 401 unauthorized")
    group = conn.execute(
        "SELECT outbox_monitor.error_group('order.paid', 'HTTP 401 unauthorized') AS g"
    ).fetchone()["g"]
    at = open_page("actions")
    at.text_input(key="actions.error_group").set_value(group).run()
    at.button(key="actions.replay.preview_button").click().run()
    assert not [e for e in at.error if "last replay" in e.value]
    at.button(key="actions.replay.confirm").click().run()
    conn.execute("UPDATE integration_outbox SET status = 'failed', processed_at = now()")

    at.button(key="actions.replay.preview_button").click().run()
    warning = [plain(e.value) for e in at.error if "last replay" in e.value]
    assert len(warning) == 1
    assert warning[0].startswith("The last replay of this group, ")
    assert (
        f"re-failed all 2 rows: {group} (order.paid, 2 rows): HTTP 401 unauthorized" in (warning[0])
    )


def test_an_operator_replays_one_event_from_its_detail(open_page, rows, conn):
    failed = rows.add_failed(last_error="HTTP 500 upstream")
    other = rows.add_failed()
    at = open_page("events", id=str(failed))
    at.button(key=f"events.replay.{failed}.preview_button").click().run()
    assert "1 row would be replayed" in texts(at)
    at.button(key=f"events.replay.{failed}.confirm").click().run()
    assert not at.exception
    assert any("Replayed 1 row; 0 were no longer failed." in s.value for s in at.success)
    assert "Outcome so far: 1 replayed: 0 done, 0 failed again, 1 pending" in texts(at)
    assert (rows.get(failed)["status"], rows.get(other)["status"]) == ("pending", "failed")
    audit = conn.execute("SELECT actor, action, affected_ids FROM outbox_monitor.audit_log")
    assert audit.fetchall() == [{"actor": ACTOR, "action": "replay", "affected_ids": [failed]}]


def test_no_replay_button_for_an_event_that_is_not_failed(open_page, rows):
    done = rows.add(status="done", processed_ago=10)
    at = open_page("events", id=str(done))
    assert not [b for b in at.button if b.key and b.key.startswith("events.replay")]


def test_a_viewer_sees_the_replay_button_disabled_with_why(open_page, rows, monkeypatch):
    failed = rows.add_failed()
    viewer = Identity("vic@example.com", Role.viewer, "proxy")
    monkeypatch.setattr(access, "identity", lambda settings, paths=(), also=(): viewer)
    at = open_page("events", id=str(failed))
    button = at.button(key=f"events.replay.{failed}.preview_button")
    assert button.disabled
    assert "vic@example.com is a viewer: replaying needs the operator role." in texts(at)
    assert rows.get(failed)["status"] == "failed"
