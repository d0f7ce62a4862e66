"""What the sampler infers of each worker when its rows go elsewhere (issue 15 item 7, the
review's attack): a row seen in one worker's hand, then reaped or retried and finished by
another worker between two passes, is no ack of the first (a crashed worker must not look
alive); a worker idle at two passes is not written again at every pass."""

from outbox_monitor.figures.worker_sightings import record_workers
from outbox_monitor.outbox import ack, claim, fail


def _seen(conn) -> dict:
    return {
        r["locked_by"]: r
        for r in conn.execute("SELECT * FROM outbox_monitor.workers_seen ORDER BY locked_by")
    }


def test_a_row_reaped_or_retried_then_finished_by_another_worker_is_no_ack_of_the_first(
    db, rows, conn
):
    # worker-a crashed holding r1 and r2 (locked 20 min ago: stuck), holding r3 as well
    r1 = rows.add(status="processing", locked_by="worker-a", locked_ago=1200, created_ago=1300)
    r2 = rows.add(status="processing", locked_by="worker-a", locked_ago=1200, created_ago=1300)
    r3 = rows.add(status="processing", locked_by="worker-a", locked_ago=10, created_ago=1300)
    assert record_workers(db) == 1
    # between two passes: r1 and r2 reaped (SPEC §4: pending, due now, attempts + 1), r3
    # retried by worker-a (SPEC §1: pending in backoff, here due at once); worker-b then
    # claims all three, acks r1 and r3 and dead-letters r2 (a permanent failure)
    conn.execute(
        "UPDATE integration_outbox SET status = 'pending', available_at = now(), "
        "attempts = attempts + 1, locked_at = NULL, locked_by = NULL WHERE id = ANY(%s)",
        ([r1, r2, r3],),
    )
    claimed = claim(conn, "worker-b", limit=10)
    assert sorted(r["id"] for r in claimed) == sorted([r1, r2, r3])
    assert ack(conn, r1, "worker-b") and ack(conn, r3, "worker-b")
    fail(conn, r2, "worker-b", "HTTP 401 bad key", permanent=True)
    record_workers(db)
    a = _seen(conn)["worker-a"]
    # none of the three is worker-a's outcome: each went back to the queue after the pass
    assert (a["acks_seen"], a["dead_lettered_seen"], a["returned_seen"]) == (0, 0, 3)
    assert a["last_ack_at"] is None
    # worker-b's claims and outcomes fell between two passes: never seen in its hand
    assert "worker-b" not in _seen(conn)


def test_a_row_acked_from_the_hand_it_was_seen_in_still_counts(db, rows, conn):
    r1 = rows.add(status="processing", locked_by="worker-a", locked_ago=30, created_ago=60)
    record_workers(db)
    assert ack(conn, r1, "worker-a")
    processed_at = rows.get(r1)["processed_at"]
    record_workers(db)
    a = _seen(conn)["worker-a"]
    assert (a["acks_seen"], a["returned_seen"], a["last_ack_at"]) == (1, 0, processed_at)


def test_a_worker_idle_at_two_passes_is_not_written_again(db, rows, conn):
    r1 = rows.add(status="processing", locked_by="worker-a", locked_ago=30, created_ago=60)
    rows.add(status="processing", locked_by="worker-b", locked_ago=30, created_ago=60)
    record_workers(db)
    assert ack(conn, r1, "worker-a")
    assert record_workers(db) == 2  # worker-a let go of r1: written with its ack
    after_ack = _seen(conn)["worker-a"]
    assert (after_ack["rows_in_hand"], after_ack["acks_seen"]) == (0, 1)
    assert record_workers(db) == 1  # only worker-b, still holding, is written
    idle = _seen(conn)["worker-a"]
    assert idle["updated_at"] == after_ack["updated_at"]
    assert (idle["acks_seen"], idle["last_seen"]) == (1, after_ack["last_seen"])
    assert _seen(conn)["worker-b"]["updated_at"] > after_ack["updated_at"]
