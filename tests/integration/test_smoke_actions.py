from outbox_monitor import actions


def test_replay_twice(db, rows):
    a = rows.add(status="failed", processed_ago=50, attempts=10, last_error="boom 1234")
    b = rows.add(
        status="failed", processed_ago=50, attempts=3, last_error="boom 5678", event_type="x.y"
    )
    p = actions.preview_replay(db, actions.ReplaySelection(event_type="order.%"))
    assert p.matched == 1
    r = actions.apply(db, p, actor="me")
    assert (r.changed, r.skipped) == (1, 0)
    r2 = actions.apply(db, p, actor="me")
    assert (r2.changed, r2.skipped) == (0, 1)
    assert rows.get(a)["status"] == "pending"
    assert rows.get(b)["status"] == "failed"
    print(actions.recent_audit(db))


def test_reap(db, rows):
    a = rows.add(status="processing", locked_ago=1000, attempts=9)
    b = rows.add(status="processing", locked_ago=1000, attempts=2)
    c = rows.add(status="processing", locked_ago=10)
    p = actions.preview_reap(db)
    assert p.matched == 2
    r = actions.apply(db, p, actor="me", batch_size=1)
    assert (r.changed, r.dead_lettered, r.batches) == (2, 1, 2)
    assert rows.get(a)["status"] == "failed"
    assert rows.get(b)["status"] == "pending"
    assert rows.get(b)["attempts"] == 3
    assert rows.get(c)["status"] == "processing"
