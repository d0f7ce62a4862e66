"""Our indexes accept every row the users' table accepts (issue 29 item 1).

The users' table takes an event type of any length; a btree entry holds at most 2,704 bytes.
Each test writes event types of about 3 kB and 100 kB — random characters, 1 to 4 bytes each,
so that Postgres cannot compress them under the limit — through every path that writes or
reads our indexes by type, with ``init-db --flow-control``'s index too. On the main of before
(indexes keyed on the whole ``event_type``) each of them failed with "index row size … exceeds
btree version 4 maximum 2704" (or, at 100 kB, "index row requires … bytes, maximum size is
8191"): the publish under ``pending_by_type``, the dead-lettering and the reap under
``dead_letters``, the error groups under their cache's primary key.
"""

import random

import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families
from psycopg import sql

from outbox_monitor import outbox
from outbox_monitor.access import Identity, Role
from outbox_monitor.actions.prune import preview_prune
from outbox_monitor.actions.reap import preview_reap
from outbox_monitor.actions.replay import ReplaySelection, preview_replay
from outbox_monitor.actions.run import apply
from outbox_monitor.alerts.evaluate import Evaluator
from outbox_monitor.alerts.receivers import transports_for
from outbox_monitor.alerts.sender import deliver_due
from outbox_monitor.export.collector import OutboxCollector
from outbox_monitor.export.scheduler_status import SchedulerStatus
from outbox_monitor.figures import error_grouping, metrics
from outbox_monitor.store import indexes, schema
from outbox_monitor.store.audit import recent_audit
from outbox_monitor.store.filters import ExactEventType, Where
from outbox_monitor.ui.flows import describe_result
from outbox_monitor.units import MAX_KEY_CHARS, bounded_key
from tests.alerting import notifications
from tests.flow import control

ACTOR = Identity("oncall@example.com", Role.operator, "oidc")
WORKER = "worker-long@host"
# 1-byte, 2-byte, 3-byte and 4-byte characters in UTF-8
ALPHABET = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789éüßñ日本語😀🚀"


def long_type(size: int, seed: int = 1) -> str:
    """An event type of at least ``size`` bytes in UTF-8, ``order.`` then random characters:
    incompressible, and longer than 200 characters in every case."""
    rnd = random.Random(seed)
    chars, length = ["order."], len(b"order.")
    while length < size:  # counted as it grows: encoding the whole text each time took 7 s
        chars.append(rnd.choice(ALPHABET))
        length += len(chars[-1].encode())
    return "".join(chars)


SIZES = {"3kB": 3_200, "100kB": 100_000}


@pytest.fixture(params=list(SIZES))
def long(request) -> str:
    return long_type(SIZES[request.param])


@pytest.fixture
def indexed(db):
    """The outbox with every index init-db creates, the flow-control one included."""
    schema.init_db(db, flow_control=True)
    return db


def _status(conn, row_id: int) -> str:
    return conn.execute(
        "SELECT status FROM integration_outbox WHERE id = %s", (row_id,)
    ).fetchone()["status"]


def test_publish_claim_ack_and_fail_of_a_long_type(indexed, conn, long):
    published = [
        outbox.publish(
            conn,
            event_type=long,
            aggregate_type="order",
            aggregate_id=str(n),
            event_key=f"long:{n}",
            payload={"n": n},
        )
        for n in range(3)
    ]
    assert all(isinstance(row_id, int) for row_id in published)

    claimed = outbox.claim(conn, WORKER, limit=10)
    assert sorted(row["id"] for row in claimed) == published
    assert {row["event_type"] for row in claimed} == {long}

    first, second, third = published
    assert outbox.ack(conn, first, WORKER) is True
    assert outbox.retry(conn, second, WORKER, "HTTP 503") == "pending"  # back in pending_types
    assert outbox.dead_letter(conn, third, WORKER, "HTTP 401 bad key") == "failed"
    assert [_status(conn, i) for i in published] == ["done", "pending", "failed"]
    # retry pressure by its exact type (the dead letter through failed_by_type): the retried
    # row and the dead letter, each at 1 attempt
    assert metrics.attempts_histogram(indexed, event_type=long) == {1: 2}


def test_a_pause_holds_a_long_type_and_leaves_the_others_under_the_type_scan(
    indexed, conn, rows, long
):
    """The claim under flow control lists the pending types through pending_types (a loose
    scan of their first 200 characters). Two long types sharing those 200 characters: the one
    paused by its exact name is held, the other handed out (each row rechecked by its whole
    type); a pause of the 199 characters and % holds every type of that head."""
    sibling = long[:200] + "-other"  # 206 characters: a filter the controls accept
    free = rows.add(event_type=long, created_ago=300, event_key="k1")
    held = rows.add(event_type=sibling, created_ago=200, event_key="k2")
    short = rows.add(event_type="crm.contact", created_ago=100, event_key="k3")
    control(conn, sibling, paused=True)
    assert conn.execute(
        "SELECT outbox_monitor.pending_types_index('integration_outbox') AS found"
    ).fetchone()["found"]

    assert sorted(row["id"] for row in outbox.claim(conn, WORKER, limit=10)) == [free, short]
    assert _status(conn, held) == "pending"

    control(conn, long[:199] + "%", paused=True)
    later = rows.add(event_type=long, created_ago=50, event_key="k4")
    other = rows.add(event_type="crm.contact", created_ago=40, event_key="k5")
    assert [row["id"] for row in outbox.claim(conn, WORKER, limit=10)] == [other]
    assert _status(conn, held) == _status(conn, later) == "pending"


def test_reap_takes_all_51_stuck_rows_with_a_long_type_among_them(indexed, conn, long):
    """The issue's case: 51 rows stuck in processing at 9 attempts, one of a long type. On
    main the first batch failed on dead_letters_idx and none was reaped, on every run."""
    conn.execute(
        "INSERT INTO integration_outbox (event_type, aggregate_type, aggregate_id, event_key,"
        " payload, status, attempts, locked_at, locked_by)"
        " SELECT CASE WHEN g = 25 THEN %s ELSE 'order.paid' END, 'order', g::text,"
        " 'stuck:' || g, '{}', 'processing', 9, now() - interval '2 hours', 'gone-worker'"
        " FROM generate_series(1, 51) AS g",
        (long,),
    )
    assert metrics.stuck_locks(indexed) == 51

    result = apply(indexed, preview_reap(indexed, lock_timeout=600), actor=ACTOR)

    assert (result.matched, result.changed, result.dead_lettered) == (51, 51, 51)
    assert metrics.stuck_locks(indexed) == 0
    counts = conn.execute(
        "SELECT status, count(*) AS n FROM integration_outbox GROUP BY status"
    ).fetchall()
    assert counts == [{"status": "failed", "n": 51}]
    [audit] = recent_audit(indexed, limit=5)
    assert (audit["action"], audit["affected_count"]) == ("reap", 51)


def test_replay_by_error_group_and_by_id_and_prune_of_long_types(indexed, conn, rows, long):
    """Error groups count a long type's dead letters (their cache keyed it whole before);
    a replay reaches them by group and by id, and a prune deletes them."""
    grouped = [
        rows.add_failed(
            event_type=long, last_error="HTTP 502 from psp", processed_ago=60, event_key=f"g{n}"
        )
        for n in range(2)
    ]
    alone = rows.add_failed(
        event_type=long, last_error="HTTP 401 key", processed_ago=60, event_key="k7"
    )
    old = rows.add_failed(
        event_type=long,
        last_error="HTTP 500",
        created_ago=40 * 86400,
        processed_ago=40 * 86400,
        event_key="old",
    )
    groups = {g["fingerprint"]: g for g in error_grouping.error_groups(indexed)}
    assert groups["HTTP 502 from psp"]["failed"] == 2
    assert groups["HTTP 502 from psp"]["event_type"] == long

    by_group = apply(
        indexed,
        preview_replay(
            indexed, ReplaySelection(error_group=groups["HTTP 502 from psp"]["group_id"])
        ),
        actor=ACTOR,
    )
    by_id = apply(indexed, preview_replay(indexed, ReplaySelection(ids=(alone,))), actor=ACTOR)
    assert (sorted(by_group.ids), by_id.ids) == (grouped, [alone])
    assert [_status(conn, i) for i in (*grouped, alone)] == ["pending"] * 3

    pruned = apply(
        indexed,
        preview_prune(indexed, done_older_than=None, failed_older_than=30 * 86400),
        actor=ACTOR,
    )
    assert (pruned.changed, pruned.ids) == (1, [old])


def test_metrics_alerts_and_slack_hold_a_long_type(
    indexed, conn, rows, long, write_rules, fake_clock, slack_sink
):
    """/metrics labels the long type in full (Prometheus takes any label value); the alert
    instance's key is bounded (units.bounded_key: its head, … and 8 hex digits of its md5),
    its labels and the Slack text hold the type; nothing raises."""
    rows.add_failed(event_type=long, processed_ago=60, event_key="k8")
    rows.add(event_type=long, created_ago=30, event_key="k9")
    ruleset = write_rules(
        """
version: 1
defaults: {interval: 30s, for: 0s, keep_firing_for: 0s}
routes:
  oncall: {webhook_url_env: SLACK_WEBHOOK_URL, repeat_interval: 1h, send_resolved: true}
rules:
  - name: order-failed
    metric: failed_in_window
    event_type: "order.%"
    window: 15m
    by: [event_type]
    op: ">"
    threshold: 0
    severity: critical
    route: oncall
"""
    )
    registry = CollectorRegistry()
    registry.register(OutboxCollector(indexed, SchedulerStatus(), ruleset=ruleset))
    text = generate_latest(registry).decode()
    depth = {
        sample.labels.get("event_type"): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
        if sample.name == "outbox_queue_depth" and "event_type" in sample.labels
    }
    assert depth[long] == 1

    report = Evaluator(indexed, ruleset, clock=fake_clock).run_once()
    key = f"event_type={bounded_key(long)}"
    assert len(bounded_key(long)) == MAX_KEY_CHARS
    assert report.instance("order-failed", key).state == "firing"
    [firing] = notifications(conn, "order-failed")
    assert firing["payload"]["labels"]["event_type"] == long

    env = {"SLACK_WEBHOOK_URL": slack_sink.webhook_url}
    counts = deliver_due(
        indexed, ruleset, clock=fake_clock, transports=transports_for(ruleset, env)
    )
    assert counts["messages"] == 1
    [message] = slack_sink.messages()
    assert long[:100] in message["text"]


@pytest.mark.parametrize(
    "event_type", ["type.7", "type.1%", ExactEventType("type.7")], ids=["exact", "like", "instance"]
)
def test_filters_by_type_still_find_dead_letters_through_failed_by_type(indexed, conn, event_type):
    """Retry pressure by event type (exact, a LIKE prefix, an alert instance's exact type)
    plans an index scan of failed_by_type: the filter states left(event_type, 200) beside the
    exact condition, which rechecks each row. 20,000 dead letters of 40 types."""
    conn.execute(
        "INSERT INTO integration_outbox (event_type, aggregate_type, aggregate_id, event_key,"
        " payload, status, attempts, processed_at)"
        " SELECT 'type.' || (g % 40), 'a', g::text, 'dead:' || g, '{}', 'failed', 1 + g % 10,"
        " now() - interval '1 day' FROM generate_series(1, 20000) AS g"
    )
    conn.execute("ANALYZE integration_outbox")
    where = Where(keyed=True).event_type(event_type)
    query = indexed.compose("attempts_histogram_dead_letters", and_filters=where.fragment)
    plan = "\n".join(
        row["QUERY PLAN"]
        for row in conn.execute(sql.SQL("EXPLAIN ") + query, where.params).fetchall()
    )
    assert "integration_outbox_failed_by_type_idx" in plan, plan
    expected = 11 * 500 if event_type == "type.1%" else 500  # type.1, type.10 … type.19
    assert sum(metrics.attempts_histogram(indexed, event_type=event_type).values()) == expected


def test_init_db_retires_the_indexes_keyed_on_the_whole_type(db, conn):
    """IF NOT EXISTS matches by name, so the new definitions come under new names and the old
    indexes, exactly as an earlier init-db built them, are dropped (a plain init-db builds
    pending_types where pending_by_type was: the claim keeps skipping held rows); then the long type
    that they refused is published and dead-lettered. A users' index of an old name but
    another definition stays."""
    conn.execute("DROP INDEX integration_outbox_failed_by_type_idx")
    conn.execute(
        "CREATE INDEX integration_outbox_dead_letters_idx ON integration_outbox"
        " (event_type, attempts) WHERE status = 'failed'"
    )
    conn.execute(
        "CREATE INDEX integration_outbox_pending_by_type_idx ON integration_outbox"
        " (event_type, available_at, created_at)"
        " WHERE status = 'pending' AND event_type IS NOT NULL"
    )
    old = ["integration_outbox_dead_letters_idx", "integration_outbox_pending_by_type_idx"]
    assert indexes.retired_indexes_present(db) == old  # the Overview names them, and why:
    assert {indexes.retired_harm("integration_outbox", name) for name in old} == {
        "refuses every row whose event type is longer than an index entry holds"
    }
    report = schema.init_db(db)  # not asked: --flow-control's index replaces its old one
    assert report.created_indexes == [
        "integration_outbox_failed_by_type_idx",
        "integration_outbox_pending_types_idx",
    ]
    assert report.dropped_indexes == [
        "integration_outbox_dead_letters_idx",
        "integration_outbox_pending_by_type_idx",
    ]
    assert schema.init_db(db, flow_control=True).dropped_indexes == []
    row_id = outbox.publish(
        conn,
        event_type=long_type(3_200),
        aggregate_type="order",
        aggregate_id="1",
        event_key="k",
        payload={},
    )
    outbox.claim(conn, WORKER)
    assert outbox.dead_letter(conn, row_id, WORKER, "HTTP 401") == "failed"

    conn.execute(
        "CREATE INDEX integration_outbox_dead_letters_idx ON integration_outbox (attempts)"
    )
    assert schema.init_db(db).dropped_indexes == []


REFUSING_TRIGGER = """
CREATE FUNCTION refuse_bad() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF OLD.event_key = 'bad' THEN
        RAISE EXCEPTION 'row % may not change', OLD.id;
    END IF;
    RETURN CASE WHEN TG_OP = 'DELETE' THEN OLD ELSE NEW END;
END $$;
CREATE TRIGGER refuse_bad BEFORE UPDATE OR DELETE ON integration_outbox
    FOR EACH ROW EXECUTE FUNCTION refuse_bad();
"""


@pytest.mark.parametrize("action", ["reap", "replay", "prune"])
def test_a_row_the_table_refuses_never_blocks_its_batch_and_is_reported_and_audited(
    indexed, conn, action, caplog
):
    """Our indexes refuse no row now, but the users' own trigger or constraint still may: 51
    rows, the 25th refused by a trigger, batches of 10. The other 50 are applied, the 25th is
    left as it was, named in the result, the page's sentence and a WARNING, and audited. On
    main the run stopped at the batch holding it: 20 applied, the 31 others never reached."""
    status, age = {
        "reap": ("processing", "now() - interval '2 hours'"),
        "replay": ("failed", "now() - interval '1 hour'"),
        "prune": ("failed", "now() - interval '40 days'"),
    }[action]
    ids = [
        row["id"]
        for row in conn.execute(
            "INSERT INTO integration_outbox (event_type, aggregate_type, aggregate_id, event_key,"
            " payload, status, attempts, locked_at, locked_by, processed_at, created_at)"
            f" SELECT 'order.paid', 'order', g::text, CASE WHEN g = 25 THEN 'bad' ELSE 'k' || g"
            f" END, '{{}}', %s, 3, {age}, 'gone', {age}, {age} - interval '1 minute'"
            " FROM generate_series(1, 51) AS g RETURNING id",
            (status,),
        ).fetchall()
    ]
    conn.execute(REFUSING_TRIGGER)
    preview = {
        "reap": lambda: preview_reap(indexed, lock_timeout=600),
        "replay": lambda: preview_replay(indexed, ReplaySelection(event_type="order.paid")),
        "prune": lambda: preview_prune(indexed, done_older_than=None, failed_older_than=30 * 86400),
    }[action]()

    result = apply(indexed, preview, actor=ACTOR, batch_size=10)

    bad = ids[24]
    assert (result.matched, result.changed, result.skipped) == (51, 50, 0)
    assert list(result.refused) == [bad] and f"row {bad} may not change" in result.refused[bad]
    left = conn.execute("SELECT id, status FROM integration_outbox ORDER BY id").fetchall()
    if action == "prune":
        assert left == [{"id": bad, "status": "failed"}]
    else:
        assert [row["id"] for row in left if row["status"] == status] == [bad]
    audit = conn.execute(
        "SELECT affected_count, filter FROM outbox_monitor.audit_log ORDER BY id"
    ).fetchall()
    assert sum(row["affected_count"] for row in audit) == 50
    assert [row["filter"]["refused_id"] for row in audit if "refused_id" in row["filter"]] == [
        str(bad)
    ]
    assert f"row {bad} was left as it was" in caplog.text
    assert f"Row {bad} was left as it was" in describe_result(result)
