"""The reference worker API (SPEC §1) and the shared SQL functions it calls."""

import threading

import psycopg
import pytest
from psycopg.rows import dict_row

from outbox_monitor import outbox

WORKER = "worker-a@host/wf-1"


def _seconds_until_available(conn, row_id):
    return conn.execute(
        "SELECT extract(epoch FROM available_at - now())::float8 AS s FROM integration_outbox "
        "WHERE id = %s",
        (row_id,),
    ).fetchone()["s"]


def test_publish_inserts_once_per_event_key(conn):
    first = outbox.publish(
        conn,
        event_type="order.paid",
        aggregate_type="order",
        aggregate_id=42,
        event_key="order.paid:42:pay_9",
        payload={"a": 1},
    )
    again = outbox.publish(
        conn,
        event_type="order.paid",
        aggregate_type="order",
        aggregate_id="42",
        event_key="order.paid:42:pay_9",
        payload={"a": 2},
    )
    assert isinstance(first, int)
    assert again is None
    row = conn.execute("SELECT * FROM integration_outbox").fetchone()
    assert (row["status"], row["attempts"], row["payload"], row["aggregate_id"]) == (
        "pending",
        0,
        {"a": 1},
        "42",
    )


def test_publish_rolls_back_with_the_business_transaction(dsn):
    with psycopg.connect(dsn) as conn:
        with pytest.raises(ZeroDivisionError), conn.transaction():
            outbox.publish(
                conn,
                event_type="x",
                aggregate_type="a",
                aggregate_id="1",
                event_key="k1",
                payload={},
            )
            raise ZeroDivisionError
        assert conn.execute("SELECT count(*) FROM integration_outbox").fetchone()[0] == 0


def test_publish_keeps_odd_and_large_payloads(conn):
    payload = {
        "emoji": "🧾",
        "nul_free": 'tab\tquote"',
        "nested": [[{"n": None}]],
        "big": "x" * 300_000,
    }
    row_id = outbox.publish(
        conn,
        event_type="x",
        aggregate_type="a",
        aggregate_id="1",
        event_key="k-odd",
        payload=payload,
    )
    stored = conn.execute(
        "SELECT payload FROM integration_outbox WHERE id = %s", (row_id,)
    ).fetchone()["payload"]
    assert stored == payload


def test_claim_takes_due_rows_oldest_first_up_to_the_limit(conn, rows):
    newest = rows.add(created_ago=10)
    oldest = rows.add(created_ago=300)
    middle = rows.add(created_ago=100)
    rows.add(created_ago=500, available_ago=-60)  # in backoff
    rows.add(status="done", created_ago=900, processed_ago=800)
    claimed = outbox.claim(conn, WORKER, limit=2)
    assert [row["id"] for row in claimed] == [oldest, middle]
    stored = rows.get(oldest)
    assert (stored["status"], stored["locked_by"]) == ("processing", WORKER)
    assert stored["locked_at"] is not None
    assert rows.get(newest)["status"] == "pending"


def test_claim_skips_rows_locked_by_a_concurrent_claim(dsn, rows):
    ids = [rows.add(created_ago=30 - i) for i in range(3)]
    with (
        psycopg.connect(dsn, row_factory=dict_row) as first,
        psycopg.connect(dsn, autocommit=True, row_factory=dict_row) as second,
    ):
        got_first = outbox.claim(first, "w1", limit=2)  # transaction left open: rows locked
        got_second = outbox.claim(second, "w2", limit=10)
        first.commit()
    assert [r["id"] for r in got_first] == ids[:2]
    assert [r["id"] for r in got_second] == ids[2:]


def test_ack_marks_done_and_only_for_the_claim_holder(conn, rows):
    row_id = rows.add(last_error="earlier failure")
    outbox.claim(conn, WORKER)
    assert outbox.ack(conn, row_id, "someone-else") is False
    assert outbox.ack(conn, row_id, WORKER) is True
    row = rows.get(row_id)
    assert (row["status"], row["locked_at"], row["locked_by"], row["last_error"]) == (
        "done",
        None,
        None,
        None,
    )
    assert row["processed_at"] is not None
    assert outbox.ack(conn, row_id, WORKER) is False


@pytest.mark.parametrize(
    ("attempts_before", "base_seconds"),
    [(0, 30), (1, 120), (2, 300), (3, 900), (4, 1800), (5, 3600), (8, 3600)],
)
def test_retry_waits_the_schedule_plus_up_to_ten_percent_jitter(
    conn, rows, attempts_before, base_seconds
):
    row_id = rows.add(attempts=attempts_before)
    outbox.claim(conn, WORKER)
    assert outbox.retry(conn, row_id, WORKER, "HTTP 503") == "pending"
    row = rows.get(row_id)
    assert row["attempts"] == attempts_before + 1
    assert (row["status"], row["locked_by"], row["last_error"]) == ("pending", None, "HTTP 503")
    wait = _seconds_until_available(conn, row_id)
    assert base_seconds - 1 <= wait <= base_seconds * 1.1 + 1


def test_the_failure_reaching_max_attempts_dead_letters(conn, rows):
    row_id = rows.add(attempts=9)
    outbox.claim(conn, WORKER)
    assert outbox.retry(conn, row_id, WORKER, "still 503", max_attempts=10) == "failed"
    row = rows.get(row_id)
    assert (row["status"], row["attempts"]) == ("failed", 10)
    assert row["processed_at"] is not None


def test_permanent_error_dead_letters_at_once_and_keeps_2000_chars(conn, rows):
    row_id = rows.add()
    outbox.claim(conn, WORKER)
    assert outbox.dead_letter(conn, row_id, WORKER, "HTTP 401 " + "x" * 5000) == "failed"
    row = rows.get(row_id)
    assert (row["status"], row["attempts"], len(row["last_error"])) == ("failed", 1, 2000)


def test_fail_after_the_claim_was_lost_changes_nothing(conn, rows):
    row_id = rows.add()
    outbox.claim(conn, WORKER)
    conn.execute("UPDATE integration_outbox SET status = 'pending', locked_by = NULL")
    assert outbox.retry(conn, row_id, WORKER, "late") is None
    assert rows.get(row_id)["attempts"] == 0


def test_ledger_guard_and_release_on_a_definite_no(conn, rows):
    row_id = rows.add(event_key="invoice.sent:7")
    assert outbox.take_ledger_slot(conn, "invoice.sent:7", "send_email") is True
    assert outbox.take_ledger_slot(conn, "invoice.sent:7", "send_email") is False
    assert outbox.take_ledger_slot(conn, "invoice.sent:7", "post_crm") is True
    outbox.claim(conn, WORKER)
    outbox.retry(conn, row_id, WORKER, "HTTP 422", ledger_action="send_email")
    left = conn.execute("SELECT action FROM integration_idempotency ORDER BY action").fetchall()
    assert [r["action"] for r in left] == ["post_crm"]
    assert outbox.take_ledger_slot(conn, "invoice.sent:7", "send_email") is True


def test_ambiguous_failure_keeps_the_ledger_slot(conn, rows):
    row_id = rows.add(event_key="invoice.sent:8")
    outbox.take_ledger_slot(conn, "invoice.sent:8", "send_email")
    outbox.claim(conn, WORKER)
    outbox.retry(conn, row_id, WORKER, "timeout")  # no ledger_action: outcome unknown
    assert outbox.take_ledger_slot(conn, "invoice.sent:8", "send_email") is False


def test_process_batch_acks_retries_and_dead_letters(conn, rows):
    ok = rows.add(event_type="order.paid", created_ago=30)
    flaky = rows.add(event_type="invoice.sent", created_ago=20)
    bad = rows.add(event_type="crm.upsert", created_ago=10)

    def handler(row):
        if row["event_type"] == "invoice.sent":
            raise TimeoutError("downstream slow")
        if row["event_type"] == "crm.upsert":
            raise outbox.PermanentError("HTTP 401 invalid API key")

    counts = outbox.process_batch(conn, WORKER, handler)
    assert counts == {
        "claimed": 3,
        "acked": 1,
        "retried": 1,
        "dead_lettered": 1,
        "lost": 0,
        "unrecorded": 0,
    }
    assert [rows.get(i)["status"] for i in (ok, flaky, bad)] == ["done", "pending", "failed"]
    assert rows.get(flaky)["last_error"] == "TimeoutError: downstream slow"


def test_concurrent_workers_never_claim_the_same_row(dsn, rows):
    for i in range(200):
        rows.add(created_ago=300 - i)
    claimed: dict[str, list[int]] = {}

    def work(name):
        with psycopg.connect(dsn, autocommit=True) as conn:
            mine = claimed.setdefault(name, [])
            while batch := outbox.claim(conn, name, limit=7):
                mine += [row["id"] for row in batch]

    threads = [threading.Thread(target=work, args=(f"w{i}",)) for i in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    all_ids = [i for ids in claimed.values() for i in ids]
    assert len(all_ids) == len(set(all_ids)) == 200
