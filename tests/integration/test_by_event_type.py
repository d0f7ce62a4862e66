"""The figures per event type (issue 15 items 1 and 2), computed by hand from inserted rows:
the Overview's table (top N by trouble, the rest folded into ``other``), the status each
type gets from the rules' own firing instances, and the sampler's history per event type
with its retention."""

import pytest

from outbox_monitor.alerts import coverage
from outbox_monitor.alerts.evaluate import Evaluator
from outbox_monitor.alerts.state import list_instances
from outbox_monitor.config.settings import load_settings
from outbox_monitor.figures import by_event_type, metrics
from outbox_monitor.flow.controls import controls
from outbox_monitor.flow.event_types import event_type_flows
from outbox_monitor.service.sampler import record_sample
from outbox_monitor.store.db import Database
from outbox_monitor.store.filters import ExactEventType
from tests.flow import control

TOLERANCE = 2.0  # seconds between inserting the rows and measuring them

RULES = {
    "version": 1,
    "defaults": {"interval": "30s", "for": "0s", "keep_firing_for": "0s"},
    "routes": {"oncall": {"webhook_url_env": "SLACK_WEBHOOK_URL"}},
    "rules": [
        {
            "name": "notifications-late",
            "metric": "oldest_pending_age",
            "event_type": "notification.%",
            "op": ">",
            "threshold": "5m",
            "route": "oncall",
        },
        {
            "name": "payment-failed",
            "metric": "failed_in_window",
            "event_type": "payment.%",
            "window": "15m",
            "by": ["event_type"],
            "op": ">",
            "threshold": 0,
            "route": "oncall",
        },
        {"name": "backlog", "metric": "queue_depth", "op": ">", "threshold": 5, "route": "oncall"},
    ],
}


def seed(rows, conn) -> None:
    """Four event types (window 1 h), values by hand in the tests below."""
    # order.paid, paused: 3 due (oldest 600 s), 1 processing locked 20 min ago (stuck)
    for ago in (600, 300, 60):
        rows.add(event_type="order.paid", created_ago=ago)
    rows.add(event_type="order.paid", status="processing", created_ago=1300, locked_ago=1200)
    control(conn, "order.paid", paused=True, pause_reason="ERP down")
    # payment.captured, failing: 2 dead letters in the window, 1 retry waiting in backoff
    rows.add_failed(event_type="payment.captured", created_ago=400, processed_ago=120)
    rows.add_failed(event_type="payment.captured", created_ago=400, processed_ago=60)
    rows.add_failed(event_type="payment.captured", created_ago=9000, processed_ago=7200)  # old
    rows.add(event_type="payment.captured", created_ago=900, available_ago=-300, attempts=2)
    # payment.refunded: covered by payment-failed, which has no instance for it (ok)
    rows.add(event_type="payment.refunded", created_ago=30)
    # notification.email, late (notifications-late fires): 1 due row created 20 min ago,
    # 5 done with latencies 10…50 s: P95 = 40 + 0.8 · 10 = 48 s; 5 processed in 60 min
    rows.add(event_type="notification.email", created_ago=1200)
    for latency in (10, 20, 30, 40, 50):
        rows.add(
            event_type="notification.email",
            status="done",
            created_ago=300,
            processed_ago=300 - latency,
        )


def test_table_rows_are_the_hand_computed_figures_per_event_type(db, rows, conn):
    seed(rows, conn)

    table = {row["event_type"]: row for row in by_event_type.measure(db, top=20, window=3600)}

    assert set(table) == {
        "order.paid",
        "payment.captured",
        "payment.refunded",
        "notification.email",
    }
    order = table["order.paid"]
    assert (order["queue_depth"], order["pending_total"], order["processing"]) == (3, 3, 1)
    assert (order["stuck_locks"], order["failed_in_window"], order["retrying"]) == (1, 0, 0)
    assert 600 <= order["oldest_pending_age"] < 600 + TOLERANCE
    assert order["latency_p95"] is None and order["processed_per_minute"] == 0
    assert order["created_per_minute"] == pytest.approx(4 / 60)  # 600, 300, 60 s and 1300 s
    payment = table["payment.captured"]
    assert (payment["queue_depth"], payment["pending_total"], payment["retrying"]) == (0, 1, 1)
    assert payment["failed_in_window"] == 2  # the one failed 2 h ago is outside
    assert payment["created_per_minute"] == pytest.approx(3 / 60)  # 900, 400, 400 s ago
    email = table["notification.email"]
    assert email["latency_p95"] == pytest.approx(48)
    assert email["processed_per_minute"] == pytest.approx(5 / 60)
    assert 1200 <= email["oldest_pending_age"] < 1200 + TOLERANCE
    # most troubled first: stuck, then dead letters, then depth, then age
    assert [row["event_type"] for row in table.values()] == [
        "order.paid",
        "payment.captured",
        "notification.email",
        "payment.refunded",
    ]
    # every value is the metrics function's for exactly that type
    for name, row in table.items():
        exact = ExactEventType(name)
        assert row["queue_depth"] == metrics.queue_depth(db, event_type=exact)
        assert row["stuck_locks"] == metrics.stuck_locks(db, event_type=exact)
        assert row["pending_total"] == metrics.pending_total(db, event_type=exact)


def test_flow_control_state_per_event_type(db, rows, conn):
    seed(rows, conn)
    measured = by_event_type.measure(db, top=20, window=3600)
    flows = event_type_flows(
        [
            {
                "event_type": r["event_type"],
                "pending": r["pending_total"],
                "due": r["queue_depth"],
                "processing": r["processing"],
            }
            for r in measured
        ],
        controls(db),
    )
    states = {flow.event_type: (flow.state, flow.held) for flow in flows}
    assert states["order.paid"] == ("paused", 3)
    assert states["payment.captured"] == ("running", 0)


def test_status_comes_from_the_firing_instance_of_the_rule_that_covers_the_type(
    db, rows, conn, write_rules
):
    seed(rows, conn)
    ruleset = write_rules(RULES)
    Evaluator(db, ruleset).run_once()
    instances = list_instances(db)

    def status(name):
        return coverage.verdict(name, instances, ruleset)

    assert status("payment.captured") == coverage.Verdict("failing", ("payment-failed",))
    assert status("notification.email") == coverage.Verdict("backlogged", ("notifications-late",))
    # covered by payment-failed (payment.%), whose instances name only payment.captured
    assert status("payment.refunded") == coverage.Verdict("healthy", ("payment-failed",))
    # paused, stuck, 3 due: no rule watches it apart; the backlog over all types (5, not > 5)
    # holds its rows too, and is ok (issue 30 item 4: not "no rule covers it")
    assert status("order.paid") == coverage.Verdict("ok for all types", ("backlog",))
    # backlog (queue depth 3 + 1 + 1 = 5, not > 5) is ok; unscoped: it labels no type
    assert coverage.unscoped_firing(instances, ruleset) == []
    assert coverage.firing_event_types(instances, ruleset) == ["payment.captured"]


def test_an_unscoped_firing_rule_is_listed_apart(db, rows, conn, write_rules):
    seed(rows, conn)
    rows.add(event_type="order.paid", created_ago=10)  # depth 6 > 5
    ruleset = write_rules(RULES)
    Evaluator(db, ruleset).run_once()
    instances = list_instances(db)

    (firing,) = coverage.unscoped_firing(instances, ruleset)

    assert (firing["rule"], firing["value"]) == ("backlog", 6)
    assert coverage.verdict("order.paid", instances, ruleset) == coverage.Verdict(
        "FIRING for all types", ("backlog",)
    )


def insert_types(conn, count: int) -> None:
    """Type ``t<i>`` (i = 0 … count-1) gets i + 1 due rows, created 1000 - i s ago."""
    conn.execute(
        """INSERT INTO integration_outbox (event_type, aggregate_type, aggregate_id, event_key,
               payload, created_at, available_at)
           SELECT 't' || lpad(i::text, 2, '0'), 'a', n::text, 'k:' || i || ':' || n, '{}',
                  now() - make_interval(secs => 1000 - i), now() - make_interval(secs => 1000 - i)
           FROM generate_series(0, %s - 1) AS i, generate_series(1, i + 1) AS n""",
        (count,),
    )


def test_thirty_event_types_fold_into_the_top_five_and_other(db, conn):
    insert_types(conn, 30)

    measured = by_event_type.measure(db, top=5, window=3600)

    # the deepest five: t29 … t25 with 30 … 26 due rows
    assert [(r["event_type"], r["queue_depth"]) for r in measured[:5]] == [
        ("t29", 30),
        ("t28", 29),
        ("t27", 28),
        ("t26", 27),
        ("t25", 26),
    ]
    other = measured[5]
    assert other["event_type"] == "other" and len(measured) == 6
    # t00 … t24: 1 + 2 + … + 25 = 325 rows; the oldest is t00's, created 1000 s ago
    assert (other["event_types"], other["queue_depth"], other["pending_total"]) == (25, 325, 325)
    assert 1000 <= other["oldest_pending_age"] < 1000 + TOLERANCE
    assert other["latency_p95"] is None
    # 465 rows created in the window, 30 + 29 + 28 + 27 + 26 = 140 of them kept
    assert other["created_per_minute"] == pytest.approx((465 - 140) / 60)
    assert sorted(other["folded"]) == [f"t{i:02d}" for i in range(25)]
    # pinned (a firing instance names it) ranks first whatever its depth
    pinned = by_event_type.measure(db, top=5, window=3600, pinned=("t03",), rates=False)
    assert [r["event_type"] for r in pinned[:2]] == ["t03", "t29"]


@pytest.mark.parametrize("top", [5, 20])
def test_the_same_statements_however_many_types_are_kept(db, conn, monkeypatch, top):
    """O(backlog) and O(window) with N kept types: one pass over the backlog, one grouped count
    of dead letters, one statement over the window's finished rows for every kept type, and
    ``other``'s total throughput (2 statements: its open part of created per minute comes from
    the backlog pass): 5, not 3 per kept type."""
    insert_types(conn, 30)
    statements = []
    for method in ("fetch_one", "fetch_all"):
        original = getattr(db, method)

        def recording(name, *args, _original=original, **kwargs):
            statements.append(name)
            return _original(name, *args, **kwargs)

        monkeypatch.setattr(db, method, recording)
    measured = by_event_type.measure(db, top=top, window=3600)
    assert sorted(statements) == sorted(
        [
            "backlog_pass",
            "failed_by_event_type",
            "finished_by_event_type",
            "processed_in_window",
            "created_finished_in_window",
        ]
    )
    # t29 has 30 rows, all created in the window and still open
    assert measured[0]["created_per_minute"] == pytest.approx(30 / 60)


def test_each_kept_type_has_its_own_metrics_figures(db, rows, conn):
    """``finished_by_event_type`` counts per type what ``latency_percentiles`` and
    ``throughput`` count for that one type, the edge rows included: done and failed rows
    created before the window, a row processed before it was created (clock skew), a failed
    row with no processed_at, a done row processed in the future."""
    for created, processed in ((600, 60), (1200, 30), (7200, 120), (300, 5)):
        rows.add(event_type="a.done", status="done", created_ago=created, processed_ago=processed)
    rows.add(event_type="a.done", status="done", created_ago=300, processed_ago=-120)  # future
    rows.add(event_type="a.done", status="done", created_ago=100, processed_ago=4000)  # skew
    rows.add_failed(event_type="b.failed", created_ago=500, processed_ago=50)
    rows.add_failed(event_type="b.failed", created_ago=5000, processed_ago=50)  # made before
    rows.add(event_type="b.failed", status="failed", created_ago=200)  # no processed_at
    rows.add(event_type="a.done", created_ago=10)  # open: the type is listed
    rows.add(event_type="c.open", created_ago=30)

    measured = {r["event_type"]: r for r in by_event_type.measure(db, top=10, window=3600)}

    for name in ("a.done", "b.failed", "c.open"):
        exact = ExactEventType(name)
        expected = metrics.throughput(db, window=3600, event_type=exact)
        assert measured[name]["processed_per_minute"] == pytest.approx(
            expected["processed_per_minute"]
        ), name
        assert measured[name]["created_per_minute"] == pytest.approx(
            expected["created_per_minute"]
        ), name
        p95 = metrics.latency_percentiles(db, window=3600, event_type=exact)["p95"]
        assert measured[name]["latency_p95"] == pytest.approx(p95), name
    # by hand: a.done has 4 rows done in the window (60, 30, 120, 5 s ago; not the future one,
    # not the one processed 4000 s ago) and 6 of its rows were created in the window (600, 1200,
    # 300, 300, 100 and 10 s ago); b.failed: 2 created in it (500 and 200 s ago); c.open: 1
    assert measured["a.done"]["processed_per_minute"] == pytest.approx(4 / 60)
    assert measured["a.done"]["created_per_minute"] == pytest.approx(6 / 60)
    assert measured["b.failed"]["created_per_minute"] == pytest.approx(2 / 60)
    assert measured["c.open"]["created_per_minute"] == pytest.approx(1 / 60)
    # latencies 540, 1170, 7080, 295 s: P95 = 1170 + 0.85 * (7080 - 1170) (continuous)
    assert measured["a.done"]["latency_p95"] == pytest.approx(1170 + 0.85 * 5910)
    assert measured["b.failed"]["latency_p95"] is None


def test_one_sampler_pass_writes_the_top_event_types_and_other(dsn, rows, conn):
    seed(rows, conn)
    insert_types(conn, 3)  # t00 (1 due), t01 (2), t02 (3)

    with Database(load_settings(dsn=dsn, metrics_top_event_types=3)) as db:
        recorded = record_sample(db)

    stored = {
        row["event_type"]: row
        for row in conn.execute(
            "SELECT * FROM outbox_monitor.event_type_samples ORDER BY event_type"
        ).fetchall()
    }
    assert {row["sampled_at"] for row in stored.values()} == {recorded["sampled_at"]}
    assert list(stored) == ["order.paid", "other", "payment.captured", "t02"]
    order = stored["order.paid"]
    assert (order["queue_depth"], order["failed_in_window"], order["retrying"]) == (3, 0, 0)
    assert 600 <= order["oldest_pending_age_seconds"] < 600 + TOLERANCE
    payment = stored["payment.captured"]
    assert (payment["queue_depth"], payment["failed_in_window"], payment["retrying"]) == (0, 2, 1)
    # the rest: notification.email (1 due, P95 48 s), payment.refunded (1), t00 (1), t01 (2)
    other = stored["other"]
    assert (other["queue_depth"], other["failed_in_window"], other["retrying"]) == (5, 0, 0)
    assert other["latency_p95_seconds"] is None  # percentiles do not add up
    assert 1200 <= other["oldest_pending_age_seconds"] < 1200 + TOLERANCE
    assert stored["t02"]["queue_depth"] == 3
    assert stored["t02"]["latency_p95_seconds"] is None


def test_per_event_type_samples_keep_the_samples_retention(dsn, rows, conn):
    rows.add(event_type="order.paid", created_ago=60)
    insert = (
        "INSERT INTO outbox_monitor.event_type_samples (table_name, sampled_at, event_type,"
        " queue_depth, failed_in_window, retrying)"
        " VALUES (%s, now() - make_interval(secs => %s), 'order.paid', 1, 0, 0)"
    )
    conn.execute(insert, ("public.integration_outbox", 7200))  # older than 1 h: deleted
    conn.execute(insert, ("public.integration_outbox", 3700))  # older than 1 h: deleted
    conn.execute(insert, ("public.integration_outbox", 1800))  # kept
    conn.execute(insert, ("other.outbox", 7200))  # another table's: kept

    with Database(load_settings(dsn=dsn, sample_retention="1h")) as db:
        recorded = record_sample(db)
        history = by_event_type.history(db, event_types=["order.paid"], window=3600)

    assert recorded["event_types_pruned"] == 2
    assert [row["queue_depth"] for row in history] == [1, 1]  # 30 min ago and now
    left = conn.execute(
        "SELECT table_name, count(*) AS n FROM outbox_monitor.event_type_samples"
        " GROUP BY table_name ORDER BY table_name"
    ).fetchall()
    assert [(r["table_name"], r["n"]) for r in left] == [
        ("other.outbox", 1),
        ("public.integration_outbox", 2),
    ]


def test_an_open_breaker_labels_the_types_its_filter_matches(db, rows, conn, write_rules):
    rows.add(event_type="crm.contact", created_ago=60)
    rows.add(event_type="erp.order", created_ago=60)
    control(conn, "crm.%", breaker=True)
    conn.execute(
        "UPDATE outbox_monitor.control_state SET breaker_state = 'open',"
        " since = now(), cooldown_seconds = 30"
    )
    ruleset = write_rules(
        {
            **RULES,
            "rules": [
                {
                    "name": "breaker-open",
                    "metric": "breaker_open",
                    "by": ["event_type"],
                    "op": ">",
                    "threshold": 0,
                    "route": "oncall",
                }
            ],
        }
    )
    Evaluator(db, ruleset).run_once()
    instances = list_instances(db)

    assert coverage.verdict("crm.contact", instances, ruleset) == coverage.Verdict(
        "paused", ("breaker-open",)
    )
    # no breaker watches it: the breaker rule, whose instances are the breakers' filters, does
    # not make it "healthy" (issue 30 item 4)
    assert coverage.verdict("erp.order", instances, ruleset) == coverage.Verdict(
        "no rule covers it"
    )
