"""The workers as the outbox sees them (issue 15 item 7): rows in hand and stuck per
``locked_by`` (SPEC §2's stuck, a null ``locked_at`` included), what the sampler remembers of
each worker and the ack it infers, and the fleet's liveness ``no_claim_while_due``, which
fires "no claim for 10 min while rows are due" to Slack and resolves at the next claim."""

import json

import pytest

from outbox_monitor import outbox
from outbox_monitor.alerts.evaluate import Evaluator
from outbox_monitor.alerts.receivers import transports_for
from outbox_monitor.alerts.sender import deliver_due
from outbox_monitor.figures import metrics
from outbox_monitor.figures.worker_sightings import record_workers
from outbox_monitor.figures.workers import in_hand, liveness, no_claim_while_due, workers
from outbox_monitor.service.sampler import record_sample
from tests.alerting import notifications, oncall_rules
from tests.flow import control

SLACK_SECONDS = 5.0
"""Seconds between inserting rows at ``t0`` and measuring an age from the database's now."""
RULES = oncall_rules(
    """\
  - name: no-claim-while-due
    metric: no_claim_while_due
    op: ">"
    threshold: 10m
    severity: critical
    route: oncall
    summary: "No worker has claimed or finished a row for {{ value }} while rows are due"
""",
    route=", repeat_interval: 1h, send_resolved: true",
)


def test_rows_in_hand_and_stuck_per_locked_by(db, rows):
    rows.add(status="processing", locked_by="worker-a", locked_ago=10)
    rows.add(status="processing", locked_by="worker-a", locked_ago=1200)  # > 15 min: stuck
    rows.add(status="processing", locked_by="worker-b", locked_ago=60)
    rows.add(status="processing", locked_by="worker-b")  # no lock time: stuck by definition
    rows.add(status="processing")  # no locked_by, no lock time: an orphan
    rows.add(status="pending", locked_by="worker-c")  # not in hand: not processing
    rows.add(status="done", processed_ago=5)
    found = {w.locked_by: w for w in in_hand(db)}
    assert set(found) == {"worker-a", "worker-b", None}
    a, b, orphan = found["worker-a"], found["worker-b"], found[None]
    assert (a.rows_in_hand, a.stuck) == (2, 1)
    assert (a.newest_claim, a.oldest_claim) == (rows.at(10), rows.at(1200))
    assert (b.rows_in_hand, b.stuck) == (2, 1)
    assert b.newest_claim == b.oldest_claim == rows.at(60)
    assert (orphan.rows_in_hand, orphan.stuck, orphan.newest_claim) == (1, 1, None)
    # a 30 s lock timeout makes worker-b's 60 s lock stuck too
    shorter = {w.locked_by: w.stuck for w in in_hand(db, lock_timeout=30)}
    assert shorter == {"worker-a": 1, "worker-b": 2, None: 1}
    # the view: stuck first, then rows in hand; never sampled, so no ack is known
    view = workers(db).listed
    assert [(w.locked_by, w.rows_in_hand, w.stuck) for w in view] == [
        ("worker-a", 2, 1),
        ("worker-b", 2, 1),
        (None, 1, 1),
    ]
    assert view[0].last_claim == rows.at(10)
    assert all(w.last_ack is None and w.last_seen_holding is None for w in view)


def test_the_sampler_remembers_each_worker_and_infers_its_ack(db, rows, conn):
    r1 = rows.add(status="processing", locked_by="worker-a", locked_ago=30)
    r2 = rows.add(status="processing", locked_by="worker-a", locked_ago=20)
    r3 = rows.add(status="processing", locked_by="worker-b", locked_ago=40)
    rows.add(status="processing")  # an orphan: no worker's
    assert record_workers(db) == 2
    first = _seen(conn)
    assert first["worker-a"]["rows_in_hand"] == 2
    assert sorted(first["worker-a"]["ids_in_hand"]) == [r1, r2]
    assert first["worker-a"]["last_claim_at"] == rows.at(20)
    assert first["worker-b"]["last_claim_at"] == rows.at(40)
    first_pass = first["worker-a"]["last_seen"]

    # worker-a acks r1 (at t0 - 5 s) and retries r2, then claims r4; worker-b dead-letters r3
    acked_at = rows.at(5)
    conn.execute(
        "UPDATE integration_outbox SET status = 'done', processed_at = %s, locked_at = NULL, "
        "locked_by = NULL WHERE id = %s",
        (acked_at, r1),
    )
    conn.execute(
        "UPDATE integration_outbox SET status = 'pending', attempts = 1, locked_at = NULL, "
        "locked_by = NULL, available_at = now() + interval '30 seconds' WHERE id = %s",
        (r2,),
    )
    conn.execute(
        "UPDATE integration_outbox SET status = 'failed', processed_at = %s, locked_at = NULL, "
        "locked_by = NULL WHERE id = %s",
        (rows.at(2), r3),
    )
    r4 = rows.add(status="processing", locked_by="worker-a", locked_ago=1)
    assert record_workers(db) == 2
    second = _seen(conn)
    a, b = second["worker-a"], second["worker-b"]
    assert (a["rows_in_hand"], a["ids_in_hand"], a["last_claim_at"]) == (1, [r4], rows.at(1))
    assert (a["acks_seen"], a["dead_lettered_seen"], a["returned_seen"]) == (1, 0, 1)
    assert a["last_ack_at"] == acked_at  # the done row's processed_at: the inferred ack
    assert a["last_seen"] > first_pass
    assert (b["rows_in_hand"], b["ids_in_hand"], b["last_claim_at"]) == (0, [], rows.at(40))
    assert (b["acks_seen"], b["dead_lettered_seen"], b["last_ack_at"]) == (0, 1, None)
    assert (a["last_fail_at"], b["last_fail_at"]) == (None, rows.at(2))  # r3's processed_at
    assert b["last_seen"] == first_pass  # not seen holding since

    # a third pass with nothing let go of adds nothing
    record_workers(db)
    third = _seen(conn)
    assert (third["worker-a"]["acks_seen"], third["worker-b"]["dead_lettered_seen"]) == (1, 1)

    view = {w.locked_by: w for w in workers(db).listed}
    assert (view["worker-a"].last_ack, view["worker-a"].last_claim) == (acked_at, rows.at(1))
    assert view["worker-b"].rows_in_hand == 0
    assert view["worker-b"].last_seen_holding == first_pass
    assert view[None].rows_in_hand == 1  # the orphan, from the table only


def test_the_sampler_records_workers_and_forgets_them_after_the_retention(db, rows, conn):
    rows.add(status="processing", locked_by="worker-a", locked_ago=30)
    assert record_sample(db)["workers"] == 1
    conn.execute("UPDATE integration_outbox SET status = 'done', processed_at = now()")
    conn.execute("UPDATE outbox_monitor.workers_seen SET last_seen = now() - interval '8 days'")
    assert record_sample(db)["workers"] == 1  # let go of its row: recorded, then forgotten
    assert _seen(conn) == {}


def test_liveness_is_how_long_due_rows_waited_without_a_claim_or_an_outcome(db, rows, conn):
    assert no_claim_while_due(db) == 0.0  # nothing due
    rows.add(status="done", created_ago=2000, processed_ago=900)
    rows.add(status="failed", created_ago=2000, processed_ago=1000)
    rows.add(status="pending", created_ago=3000, available_ago=-60)  # in backoff: not due
    assert no_claim_while_due(db) == 0.0
    rows.add(status="pending", created_ago=700)
    rows.add(status="pending", created_ago=750, available_ago=650)
    found = liveness(db)
    assert (found.due_rows, found.held_rows) == (2, 0)
    assert found.due_since == rows.at(700)
    assert (found.newest_claim, found.newest_outcome) == (None, rows.at(900))
    # the oldest due row became due 700 s ago: later than the newest outcome, 900 s ago
    assert found.no_claim_while_due == pytest.approx(700, abs=SLACK_SECONDS)
    rows.add(status="pending", created_ago=1500)  # due 1500 s ago: the outcome is later
    assert no_claim_while_due(db) == pytest.approx(900, abs=SLACK_SECONDS)
    rows.add(status="processing", locked_ago=100)  # a claim 100 s ago
    assert no_claim_while_due(db) == pytest.approx(100, abs=SLACK_SECONDS)
    shown = metrics.status(db)["workers"]
    assert shown["due_rows"] == 3
    assert shown["no_claim_while_due_seconds"] == pytest.approx(100, abs=SLACK_SECONDS)
    assert shown["newest_claim"] == rows.at(100).isoformat()


def test_claims_that_fail_fast_into_a_retry_count_as_claims(db, rows, conn):
    # An outage: every claim fails at once and the row goes back to pending in backoff, so
    # the sampler never sees one processing; the oldest due row has waited 20 min.
    rows.add(status="pending", created_ago=1200)
    rows.add(status="done", created_ago=3000, processed_ago=2400)
    assert no_claim_while_due(db) == pytest.approx(1200, abs=SLACK_SECONDS)
    # failed 100 s ago at its 3rd attempt (5 min, no jitter): due 200 s ahead; with at most
    # 10 % jitter the failure was no later than available_at - 330 s = 130 s ago
    rows.add(status="pending", created_ago=2000, available_ago=-200, attempts=3)
    found = liveness(db)
    assert found.newest_retry == rows.at(130)
    assert found.no_claim_while_due == pytest.approx(130, abs=SLACK_SECONDS)
    # a 1st failure 5 s ago: available_at 25 s ahead, so no later than 25 - 33 = 8 s ago
    rows.add(status="pending", created_ago=900, available_ago=-25, attempts=1)
    assert no_claim_while_due(db) == pytest.approx(8, abs=SLACK_SECONDS)
    assert metrics.status(db)["workers"]["newest_retry"] == rows.at(8).isoformat()


def test_the_newest_retry_leaves_out_replays_reaps_and_delays_not_of_the_schedule(db, rows, conn):
    rows.add(status="pending", created_ago=1200)
    rows.add(status="pending", created_ago=50, available_ago=-3600)  # replayed: attempts 0
    rows.add(status="pending", created_ago=60, available_ago=10, attempts=2)  # reaped 10 s ago
    rows.add(status="pending", created_ago=70, available_ago=-900, attempts=1)  # 15 min ahead
    found = liveness(db)
    # the reap's row: 10 s + 132 s (2 min + 10 %) back; the 15 min delay would be 867 s ahead
    assert found.newest_retry == rows.at(142)
    assert found.no_claim_while_due == pytest.approx(142, abs=SLACK_SECONDS)


def test_a_fleet_failing_every_claim_through_the_shared_functions_looks_alive(db, rows, conn):
    for n in range(6):
        rows.add(status="pending", created_ago=1200 + n)
    assert no_claim_while_due(db) == pytest.approx(1205, abs=SLACK_SECONDS)
    for row in outbox.claim(conn, "worker-a", limit=2):
        assert outbox.fail(conn, row["id"], "worker-a", "HTTP 503 from the downstream")
    found = liveness(db)
    assert (found.due_rows, found.newest_claim, found.newest_outcome) == (4, None, None)
    # failed just now at the 1st attempt: no later than now - 3 s (10 % of 30 s) on the bound
    assert 0 <= found.no_claim_while_due <= 3 + SLACK_SECONDS


def test_rows_a_pause_holds_are_not_waiting_for_a_worker(db, rows, conn):
    rows.add(event_type="mail.sent", status="pending", created_ago=3600)
    rows.add(event_type="order.paid", status="pending", created_ago=1200)
    assert no_claim_while_due(db) == pytest.approx(3600, abs=SLACK_SECONDS)
    control(conn, "mail.%", paused=True)
    found = liveness(db)
    assert (found.due_rows, found.held_rows, found.due_since) == (1, 1, rows.at(1200))
    assert found.no_claim_while_due == pytest.approx(1200, abs=SLACK_SECONDS)
    control(conn, "order.%", paused=True)
    assert liveness(db).due_rows == 0 and no_claim_while_due(db) == 0.0


def test_no_claim_for_ten_minutes_fires_naming_how_long_and_how_many_and_a_claim_resolves(
    db, rows, conn, fake_clock, write_rules, slack_sink
):
    ruleset = write_rules(RULES)
    evaluator = Evaluator(db, ruleset, clock=fake_clock)
    transports = transports_for(ruleset, {"SLACK_WEBHOOK_URL": slack_sink.webhook_url})

    def deliver() -> dict:
        return deliver_due(db, ruleset, clock=fake_clock, transports=transports)

    rows.add(status="done", created_ago=3000, processed_ago=1800)
    rows.add(event_type="order.paid", status="pending", created_ago=1200)
    due = rows.add(event_type="order.paid", status="pending", created_ago=900)
    rows.add(event_type="mail.sent", status="pending", created_ago=1000)
    report = evaluator.run_once()
    instance = report.instance("no-claim-while-due")
    assert instance.transitions == ("inactive→firing",)
    assert instance.value == pytest.approx(1200, abs=SLACK_SECONDS)  # the oldest due row
    [firing] = notifications(conn, "no-claim-while-due")
    payload = firing["payload"]
    assert payload["dashboard_path"] == "/workers"
    assert payload["offenders"] == [
        {"kind": "due", "label": "in all", "count": 3},
        {"kind": "due", "event_type": "order.paid", "count": 2},
        {"kind": "due", "event_type": "mail.sent", "count": 1},
    ]
    assert deliver()["sent"] == 1
    [message] = slack_sink.messages()
    minutes = int(payload["value"] // 60)
    assert f"No worker has claimed or finished a row for {minutes}m" in message["text"]
    assert "Rows due: 3 in all (order.paid 2, mail.sent 1)" in message["text"]
    blocks = json.dumps(message["blocks"], ensure_ascii=False)
    assert "*Rows due:* in all — 3 · order.paid — 2 · mail.sent — 1" in blocks
    assert "/workers" in blocks

    # a worker claims one row: the fleet is alive, the alert resolves at once
    conn.execute(
        "UPDATE integration_outbox SET status = 'processing', locked_at = now(), "
        "locked_by = 'worker-a' WHERE id = %s",
        (due,),
    )
    fake_clock.advance(30)
    report = evaluator.run_once()
    assert report.instance("no-claim-while-due").transitions == ("firing→inactive",)
    assert report.instance("no-claim-while-due").value == pytest.approx(0, abs=SLACK_SECONDS)
    assert deliver()["sent"] == 1
    resolved = slack_sink.messages()[1]
    assert resolved["text"].startswith("✅ RESOLVED · no-claim-while-due")
    assert "no_claim_while_due was 20m" in resolved["text"]
    assert [n["kind"] for n in notifications(conn, "no-claim-while-due")] == [
        "firing",
        "resolved",
    ]


def _seen(conn) -> dict:
    return {
        r["locked_by"]: r
        for r in conn.execute("SELECT * FROM outbox_monitor.workers_seen ORDER BY locked_by")
    }
