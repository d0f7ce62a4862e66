"""Issue 13 items 4 and 5 through the actions API: drip replay, order-safe replay, replay
outcomes followed by run id — each against hand-computed values."""

import pytest

from outbox_monitor.access import Identity, Role
from outbox_monitor.actions import replay_outcomes
from outbox_monitor.actions.replay import ReplaySelection, preview_replay
from outbox_monitor.actions.run import apply
from outbox_monitor.errors import ActionRefused

ACTOR = Identity("oncall@example.com", Role.operator, "oidc")


def _failed(rows, **fields):
    return rows.add_failed(**fields)


def _later(rows, event_type, aggregate, *, created_ago, status="done"):
    """A later event of ``aggregate``: done (processed 10 s after creation) or ``status``."""
    processed = created_ago - 10 if status == "done" else None
    return rows.add(
        event_type=event_type,
        status=status,
        created_ago=created_ago,
        processed_ago=processed,
        aggregate=aggregate,
    )


def _seconds(conn, sql, params=()):
    return conn.execute(sql, params).fetchone()["s"]


def test_drip_replay_spreads_available_at_in_created_at_order_across_batches(db, rows, conn):
    # ids in another order than created_at: the walk must follow created_at, not id
    ages = [300, 500, 100, 400, 200]  # created seconds before t0
    ids = [_failed(rows, created_ago=age) for age in ages]
    by_created = [row_id for _, row_id in sorted(zip(ages, ids, strict=True), reverse=True)]
    before = conn.execute("SELECT now() AS now").fetchone()["now"]
    preview = preview_replay(db, ReplaySelection(event_type="order.paid"), rate=4)
    assert preview.details["drip_seconds"] == pytest.approx(5 / 4)
    assert preview.filter["rate_per_second"] == 4
    result = apply(db, preview, actor=ACTOR, batch_size=2)
    assert (result.changed, result.batches) == (5, 3)
    due = {
        r["id"]: r["available_at"]
        for r in conn.execute("SELECT id, available_at FROM integration_outbox").fetchall()
    }
    t0 = due[by_created[0]]
    assert t0 >= before
    offsets = [(due[row_id] - t0).total_seconds() for row_id in by_created]
    assert offsets == [0, 0.25, 0.5, 0.75, 1.0]
    statuses = {rows.get(row_id)["status"] for row_id in ids}
    assert statuses == {"pending"}


def test_drip_counts_only_rows_still_failed_and_without_rate_all_are_due_now(db, rows, conn):
    first = _failed(rows, created_ago=30)
    acked = _failed(rows, created_ago=20)
    last = _failed(rows, created_ago=10)
    preview = preview_replay(db, ReplaySelection(event_type="order.paid"), rate=2)
    conn.execute("UPDATE integration_outbox SET status = 'done' WHERE id = %s", (acked,))
    apply(db, preview, actor=ACTOR, batch_size=1)
    gap = rows.get(last)["available_at"] - rows.get(first)["available_at"]
    assert gap.total_seconds() == 0.5  # k = 2: the acked row took no slot

    again = _failed(rows, created_ago=5)
    apply(db, preview_replay(db, ReplaySelection(ids=(again,))), actor=ACTOR)
    assert (
        -5
        < _seconds(
            conn,
            "SELECT extract(epoch FROM available_at - now()) AS s FROM integration_outbox "
            "WHERE id = %s",
            (again,),
        )
        <= 0
    )


def test_a_drip_rate_must_be_positive(db, rows):
    _failed(rows)
    with pytest.raises(ActionRefused, match="rate above 0"):
        preview_replay(db, ReplaySelection(event_type="%"), rate=0)


def test_order_safe_preview_counts_superseded_rows_per_type_and_may_exclude_them(db, rows):
    # order 1: failed paid at -300, later done shipped at -200 → superseded
    superseded_paid = _failed(
        rows, event_type="order.paid", created_ago=300, aggregate=("order", "1")
    )
    _later(rows, "order.shipped", ("order", "1"), created_ago=200)
    # order 2: failed paid, the later event is pending, not done → kept
    kept_paid = _failed(rows, event_type="order.paid", created_ago=300, aggregate=("order", "2"))
    _later(rows, "order.shipped", ("order", "2"), created_ago=100, status="pending")
    # order 3: the done event is older → kept
    _later(rows, "order.created", ("order", "3"), created_ago=900)
    kept_refund = _failed(
        rows, event_type="order.refunded", created_ago=300, aggregate=("order", "3")
    )
    # invoice 9: same created_at, the done one has the larger id → superseded
    tie = _failed(rows, event_type="invoice.sent", created_ago=50, aggregate=("invoice", "9"))
    _later(rows, "invoice.paid", ("invoice", "9"), created_ago=50)
    # the same aggregate id under another aggregate type does not count
    other_type = _failed(
        rows, event_type="invoice.sent", created_ago=500, aggregate=("order9", "9")
    )

    everything = preview_replay(db, ReplaySelection(event_type="%"))
    assert everything.matched == 5
    assert everything.details["superseded"] == {"invoice.sent": 1, "order.paid": 1}

    safe = preview_replay(db, ReplaySelection(event_type="%", exclude_superseded=True))
    assert safe.matched == 3
    assert safe.details["superseded"] == {"invoice.sent": 1, "order.paid": 1}
    assert safe.filter["exclude_superseded"] is True
    result = apply(db, safe, actor=ACTOR)
    assert sorted(result.ids) == sorted([kept_paid, kept_refund, other_type])
    assert rows.get(superseded_paid)["status"] == "failed"
    assert rows.get(tie)["status"] == "failed"


def test_order_safe_drip_walks_only_the_kept_rows(db, rows):
    superseded = _failed(rows, created_ago=300, aggregate=("order", "1"))
    _later(rows, "order.paid", ("order", "1"), created_ago=200)
    first = _failed(rows, created_ago=250, aggregate=("order", "2"))
    second = _failed(rows, created_ago=150, aggregate=("order", "3"))
    preview = preview_replay(
        db, ReplaySelection(event_type="order.paid", exclude_superseded=True), rate=10
    )
    assert preview.matched == 2
    apply(db, preview, actor=ACTOR, batch_size=1)
    gap = rows.get(second)["available_at"] - rows.get(first)["available_at"]
    assert gap.total_seconds() == pytest.approx(0.1)
    assert rows.get(superseded)["status"] == "failed"


def test_outcome_follows_the_run_by_id_with_error_groups(db, rows, conn):
    ids = [_failed(rows, last_error="HTTP 401 invalid key 'sk_1234'") for _ in range(5)]
    result = apply(
        db, preview_replay(db, ReplaySelection(event_type="order.paid")), actor=ACTOR, batch_size=2
    )
    outcome = replay_outcomes.replay_outcome(db, result.run_id)
    assert (outcome.replayed, outcome.pending, outcome.settled) == (5, 5, False)

    conn.execute("UPDATE integration_outbox SET status = 'done' WHERE id = %s", (ids[0],))
    conn.execute("UPDATE integration_outbox SET status = 'processing' WHERE id = %s", (ids[1],))
    conn.execute(
        "UPDATE integration_outbox SET status = 'failed', last_error = 'HTTP 401 invalid key "
        "''sk_999''' WHERE id = ANY(%s)",
        (ids[2:4],),
    )
    conn.execute("DELETE FROM integration_outbox WHERE id = %s", (ids[4],))
    outcome = replay_outcomes.replay_outcome(db, result.run_id)
    assert outcome.counts() == {"done": 1, "failed": 2, "pending": 0, "processing": 1, "gone": 1}
    assert (outcome.replayed, outcome.untracked) == (5, 0)
    group = conn.execute(
        "SELECT outbox_monitor.error_group('order.paid', 'HTTP 401 invalid key ''x''') AS g"
    ).fetchone()["g"]
    assert [(g["group_id"], g["event_type"], g["rows"]) for g in outcome.failed_groups] == [
        (group, "order.paid", 2)
    ]
    assert "2 failed again" in outcome.summary()


def test_a_replay_batch_never_exceeds_the_audited_ids(db, rows, conn):
    rows.add_dead_letters(1001)
    result = apply(
        db, preview_replay(db, ReplaySelection(event_type="%")), actor=ACTOR, batch_size=5000
    )
    assert (result.changed, result.batches) == (1001, 2)
    audit = conn.execute(
        "SELECT affected_count, cardinality(affected_ids) AS n FROM outbox_monitor.audit_log "
        "ORDER BY id"
    ).fetchall()
    assert [(a["affected_count"], a["n"]) for a in audit] == [(1000, 1000), (1, 1)]
    outcome = replay_outcomes.replay_outcome(db, result.run_id)
    assert (outcome.replayed, outcome.pending, outcome.untracked) == (1001, 1001, 0)


def test_the_preview_of_a_group_whose_last_replay_refailed_entirely_says_so(db, rows, conn):
    for _ in range(3):
        _failed(rows, last_error="HTTP 401 unauthorized")
    group = conn.execute(
        "SELECT outbox_monitor.error_group('order.paid', 'HTTP 401 unauthorized') AS g"
    ).fetchone()["g"]
    selection = ReplaySelection(error_group=group)
    assert preview_replay(db, selection).details["last_replay_refailed"] is None
    result = apply(db, preview_replay(db, selection), actor=ACTOR)
    conn.execute("UPDATE integration_outbox SET status = 'failed', processed_at = now()")
    text = preview_replay(db, selection).details["last_replay_refailed"]
    at = replay_outcomes.replay_outcome(db, result.run_id).at
    assert text.startswith(f"the last replay of this group, {at:%Y-%m-%d %H:%M:%S}")
    assert f"re-failed all 3 rows: {group} (order.paid, 3 rows): HTTP 401 unauthorized" in text

    conn.execute(
        "UPDATE integration_outbox SET status = 'done' WHERE id = (SELECT min(id) "
        "FROM integration_outbox)"
    )
    assert preview_replay(db, selection).details["last_replay_refailed"] is None


def test_watch_polls_until_settled_and_reports_each_change(db, rows, conn):
    ids = [_failed(rows) for _ in range(2)]
    result = apply(db, preview_replay(db, ReplaySelection(event_type="%")), actor=ACTOR)
    seen = []
    steps = iter(
        [
            f"UPDATE integration_outbox SET status = 'done' WHERE id = {ids[0]}",
            "SELECT 1",
            f"UPDATE integration_outbox SET status = 'failed' WHERE id = {ids[1]}",
        ]
    )

    def sleep(_seconds):
        conn.execute(next(steps))

    outcome, settled = replay_outcomes.watch_outcome(
        db,
        result.run_id,
        timeout=60,
        interval=0,
        on_change=lambda o: seen.append(o.counts()),
        sleep=sleep,
    )
    assert settled
    assert [(c["done"], c["failed"], c["pending"]) for c in seen] == [
        (0, 0, 2),
        (1, 0, 1),
        (1, 1, 0),
    ]
    assert (outcome.done, outcome.failed) == (1, 1)


def test_watch_stops_at_the_timeout(db, rows):
    _failed(rows)
    result = apply(db, preview_replay(db, ReplaySelection(event_type="%")), actor=ACTOR)
    ticks = iter([0, 0, 10, 10, 10])
    outcome, settled = replay_outcomes.watch_outcome(
        db, result.run_id, timeout=5, sleep=lambda s: None, clock=lambda: next(ticks)
    )
    assert (settled, outcome.pending) == (False, 1)
