"""An event type or a locked_by longer than a btree entry holds (the users' table takes any
length; our history keys them): the sampler still records every figure, keyed by
``units.bounded_key``, and the Workers view joins the worker now with what was seen of it."""

import hashlib

from outbox_monitor.figures.workers import workers
from outbox_monitor.outbox import ack
from outbox_monitor.service.sampler import record_sample
from outbox_monitor.units import MAX_KEY_CHARS, bounded_key

# 4,800 hex digits: incompressible enough that Postgres cannot fit them in a 2,704-byte entry
LONG = "".join(hashlib.md5(str(n).encode()).hexdigest() for n in range(150))


def test_a_sample_with_a_type_and_a_worker_named_past_a_btree_entry(db, rows, conn):
    twin = LONG[:-1] + "x"  # the same head: two keys still
    for name in (LONG, twin):
        rows.add(event_type=name, event_key=f"k:{name[-1]}", created_ago=30)
    held = rows.add(status="processing", locked_by=LONG, locked_ago=10, event_key="k:held")

    sample = record_sample(db)

    assert sample["workers"] == 1
    assert conn.execute("SELECT count(*) AS n FROM outbox_monitor.samples").fetchone()["n"] == 1
    samples = conn.execute("SELECT event_type, queue_depth FROM outbox_monitor.event_type_samples")
    stored = {r["event_type"]: r["queue_depth"] for r in samples}
    assert stored == {bounded_key(LONG): 1, bounded_key(twin): 1, "order.paid": 0}
    keys = [key for key in stored if key != "order.paid"]
    assert all(len(key) == MAX_KEY_CHARS and key.startswith(LONG[:191]) for key in keys)
    assert bounded_key(LONG) != bounded_key(twin)

    # the worker acks its row: the next pass counts it for the same (keyed) worker
    assert ack(conn, held, LONG)
    record_sample(db)
    [seen] = conn.execute("SELECT * FROM outbox_monitor.workers_seen").fetchall()
    assert (seen["locked_by"], seen["acks_seen"]) == (bounded_key(LONG), 1)

    # holding a row again: one line in the view, the live name with what was seen of it
    rows.add(status="processing", locked_by=LONG, locked_ago=5, event_key="k:again")
    view = workers(db)
    assert [(w.locked_by, w.rows_in_hand, w.acks_seen) for w in view.listed] == [(LONG, 1, 1)]
    assert view.not_listed == 0


def test_an_alert_per_type_on_a_type_past_a_btree_entry_fires_and_the_others_still_do(
    db, rows, fake_clock, write_rules
):
    from outbox_monitor.alerts.evaluate import Evaluator
    from outbox_monitor.alerts.state import list_instances
    from tests.alerting import oncall_rules

    rules = oncall_rules(
        """\
  - name: per-type-depth
    metric: queue_depth
    by: [event_type]
    op: ">"
    threshold: 0
    route: oncall
"""
    )
    rows.add(event_type=LONG, event_key="k:long", created_ago=30)
    rows.add(event_type="order.paid", created_ago=30)

    report = Evaluator(db, write_rules(rules), clock=fake_clock).run_once()

    firing = {i.instance: i.state for i in report.instances}
    assert firing == {
        f"event_type={bounded_key(LONG)}": "firing",
        "event_type=order.paid": "firing",
    }
    labels = {r["instance"]: r["labels"] for r in list_instances(db)}
    assert labels[f"event_type={bounded_key(LONG)}"]["event_type"] == LONG
