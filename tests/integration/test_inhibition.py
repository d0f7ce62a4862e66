"""Inhibition (issue 31 item 4) on a real Postgres: instances built by hand from outbox rows
(a dead letter makes the source fire, pending rows the targets), a fake clock, the local Slack
sink, and for the ``type: alertmanager`` route a real Alertmanager."""

from pathlib import Path

import psycopg

from outbox_monitor.alerts.alertmanager import AlertmanagerReceiver, alertmanager_urls
from outbox_monitor.alerts.evaluate import Evaluator
from outbox_monitor.alerts.outage import DatabaseHealth
from outbox_monitor.alerts.own_alerts import insert_all, resolve_params
from outbox_monitor.alerts.receivers import transports_for
from outbox_monitor.alerts.rules_file import SHIPPED_RULES_PATH, load_rules
from outbox_monitor.alerts.sender import deliver_due
from outbox_monitor.alerts.state import list_instances
from outbox_monitor.errors import DatabaseUnavailable
from outbox_monitor.flow import controls as flow
from outbox_monitor.store.db import Database
from tests.alerting import drain, notifications, open_stall_episode, rules_file
from tests.alertmanager_support import active_alerts, running_alertmanager
from tests.conftest import Rows
from tests.integration.test_fleet_alerts import databases, fleet  # noqa: F401 (fixtures)
from tests.integration.test_flow_alerts import BREAKER, OPERATOR, fail_all

HEAD = """
version: 1
defaults: {interval: 30s, for: 0s, keep_firing_for: 0s}
routes:
  oncall: {webhook_url_env: SLACK_WEBHOOK_URL, repeat_interval: 1h, send_resolved: true}
rules:
"""
BACKLOGS = """  - {name: type-backlog, metric: queue_depth, by: [event_type], op: ">", threshold: 0,
     severity: TARGET_SEVERITY, route: oncall}
  - {name: outbox-backlog, metric: queue_depth, op: ">", threshold: 0, severity: warning,
     route: oncall}
"""
# The source is listed last: the evaluator moves it first (inhibition.sources_first).
RULES = (
    HEAD
    + BACKLOGS
    + """  - {name: type-dead, metric: failed_in_window, window: 15m, by: [event_type], op: ">",
     threshold: 0, severity: SOURCE_SEVERITY, route: oncall}
inhibit:
  - source_matchers: {rule: type-dead}
    target_matchers: {severity: "%"}
    equal: [event_type]
"""
)
PAID = "event_type=order.paid"
SHIPPED = "event_type=order.shipped"
SOURCE = "type-dead event_type=order.paid"


def rules(source: str = "warning", target: str = "warning") -> str:
    return RULES.replace("SOURCE_SEVERITY", source).replace("TARGET_SEVERITY", target)


def kinds(conn: psycopg.Connection, rule: str, instance: str) -> list[tuple[str, str, str | None]]:
    """``(kind, status, payload's inhibited_by)`` of one instance's notifications in order."""
    return [
        (n["kind"], n["status"], n["payload"].get("inhibited_by"))
        for n in notifications(conn, rule)
        if n["payload"]["instance"] == instance
    ]


def marks(db: Database) -> dict[tuple[str, str], str | None]:
    """What ``alert_instances.inhibited_by`` says of each instance, by (rule, instance),
    raw (an inactive instance's too)."""
    rows = db.fetch_all("alert_instances_inhibited", {"outbox": db.alert_outbox})
    return {(row["rule"], row["instance"]): row["inhibited_by"] for row in rows}


def end_dead_letters(conn: psycopg.Connection) -> None:
    """The source's dead letters leave its 15-minute window."""
    conn.execute(
        "UPDATE integration_outbox SET processed_at = now() - interval '1 hour' "
        "WHERE status = 'failed'"
    )


def test_a_target_is_inhibited_while_its_source_fires_and_notified_after(
    db, conn, rows: Rows, fake_clock, write_rules, slack_sink
) -> None:
    ruleset = write_rules(rules())
    transports = transports_for(ruleset, {"SLACK_WEBHOOK_URL": slack_sink.webhook_url})
    paid = rows.add(event_type="order.paid")
    rows.add(event_type="order.shipped")
    rows.add_failed(event_type="order.paid")
    evaluator = Evaluator(db, ruleset, clock=fake_clock)

    report = evaluator.run_once()
    # the source fires and is notified; it matches the target matchers and `equal` with
    # itself, but never inhibits itself
    assert report.instance("type-dead", PAID).state == "firing"
    assert report.instance("type-dead", PAID).inhibited_by is None
    assert kinds(conn, "type-dead", PAID) == [("firing", "pending", None)]
    # its type's backlog fires on the dashboard, its notification suppressed with the reason
    target = report.instance("type-backlog", PAID)
    assert (target.state, target.inhibited_by) == ("firing", SOURCE)
    assert kinds(conn, "type-backlog", PAID) == [("firing", "suppressed", SOURCE)]
    # another type's backlog is not inhibited (its event_type differs)
    assert kinds(conn, "type-backlog", SHIPPED) == [("firing", "pending", None)]
    # the outbox's backlog has no event_type label: a label missing never matches
    assert kinds(conn, "outbox-backlog", "") == [("firing", "pending", None)]
    assert marks(db) == {("type-backlog", PAID): SOURCE}
    listed = {(i["rule"], i["instance"]): i["state"] for i in list_instances(db)}
    assert listed[("type-backlog", PAID)] == "firing"

    delivered = deliver_due(db, ruleset, clock=fake_clock, transports=transports)
    texts = [m["text"] for m in slack_sink.messages()]
    assert delivered["messages"] == len(texts) == 1  # one packed message, 3 alerts
    assert "type-dead" in texts[0] and "outbox-backlog" in texts[0]
    assert "order.shipped" in texts[0]

    # still inhibited at the next pass: no repeat, nothing new; the source, firing since the
    # last pass, is among the sources now and still does not inhibit itself
    fake_clock.advance(30)
    report = evaluator.run_once()
    assert report.instance("type-backlog", PAID).notifications == ()
    assert report.instance("type-dead", PAID).inhibited_by is None

    # the source resolves: the target, never told, is notified at the next pass, once
    end_dead_letters(conn)
    fake_clock.advance(30)
    report = evaluator.run_once()
    assert report.instance("type-dead", PAID).notifications == ("resolved",)
    # the source moved first in the pass, so its resolve frees the target in the same pass
    assert report.instance("type-backlog", PAID).inhibited_by is None
    assert report.instance("type-backlog", PAID).notifications == ("repeat",)
    fake_clock.advance(30)
    assert evaluator.run_once().instance("type-backlog", PAID).notifications == ()
    assert marks(db) == {}

    # and its resolve is sent: somebody was told it fired
    drain(conn, [paid])
    fake_clock.advance(30)
    assert evaluator.run_once().instance("type-backlog", PAID).state == "inactive"
    assert kinds(conn, "type-backlog", PAID) == [
        ("firing", "suppressed", SOURCE),
        ("repeat", "pending", None),
        ("resolved", "pending", None),
    ]


def test_a_warning_never_inhibits_a_critical_but_a_critical_inhibits_a_critical(
    db, conn, rows: Rows, fake_clock, write_rules
) -> None:
    rows.add(event_type="order.paid")
    rows.add_failed(event_type="order.paid")
    Evaluator(
        db, write_rules(rules(source="warning", target="critical")), clock=fake_clock
    ).run_once()
    assert kinds(conn, "type-backlog", PAID) == [("firing", "pending", None)]
    assert marks(db) == {}

    conn.execute("DELETE FROM outbox_monitor.notifications")
    conn.execute("DELETE FROM outbox_monitor.alert_instances")
    ruleset = write_rules(rules(source="critical", target="critical"), name="critical.yml")
    Evaluator(db, ruleset, clock=fake_clock).run_once()
    assert kinds(conn, "type-backlog", PAID) == [("firing", "suppressed", SOURCE)]


def test_the_resolve_of_a_notified_target_is_sent_while_it_is_inhibited(
    db, conn, rows: Rows, fake_clock, write_rules
) -> None:
    evaluator = Evaluator(db, write_rules(rules()), clock=fake_clock)
    paid = rows.add(event_type="order.paid")
    evaluator.run_once()
    assert kinds(conn, "type-backlog", PAID) == [("firing", "pending", None)]

    # the source starts firing after the on-call was told of the target
    rows.add_failed(event_type="order.paid")
    fake_clock.advance(30)
    assert evaluator.run_once().instance("type-backlog", PAID).inhibited_by == SOURCE
    # the target ends while its source still fires: its resolve is not lost
    drain(conn, [paid])
    fake_clock.advance(30)
    report = evaluator.run_once()
    assert report.instance("type-dead", PAID).state == "firing"
    assert report.instance("type-backlog", PAID).state == "inactive"
    assert kinds(conn, "type-backlog", PAID) == [
        ("firing", "pending", None),
        ("resolved", "pending", None),
    ]
    assert marks(db) == {}


# the own alerts are critical: they inhibit a critical too
OWN = (
    HEAD
    + BACKLOGS.replace("TARGET_SEVERITY", "critical")
    + """inhibit:
  - {source_matchers: {rule: database-unreachable}, target_matchers: {event_type: "%"}}
  - {source_matchers: {rule: alerting-stalled, severity: critical},
     target_matchers: {event_type: "%"}}
"""
)


def test_the_schedulers_own_alerts_inhibit_every_per_type_alert_of_the_outbox(
    db, conn, rows: Rows, fake_clock, write_rules
) -> None:
    ruleset = write_rules(OWN)
    rows.add(event_type="order.paid")
    open_stall_episode(db, fake_clock())
    health = DatabaseHealth(db, identity="host-a:41", alert_after=0.0)
    evaluator = Evaluator(db, ruleset, clock=fake_clock, own_sources=health.firing_sources)

    report = evaluator.run_once()
    stall = f"alerting-stalled {db.table_name}"
    assert report.instance("type-backlog", PAID).inhibited_by == stall
    assert kinds(conn, "type-backlog", PAID) == [("firing", "suppressed", stall)]
    assert kinds(conn, "outbox-backlog", "") == [("firing", "pending", None)]

    # the stall resolved, this process alerts an outage of the database: that inhibits now
    [opened] = db.fetch_all(
        "open_error_notifications",
        {"outbox": db.alert_outbox, "rule": "alerting-stalled", "instance": db.table_name},
    )
    with db.transaction() as tx:
        insert_all(db, tx, [resolve_params(opened, now=fake_clock())])
    health.failed(DatabaseUnavailable("connection refused"), was_leader=True)
    assert health.firing_sources() == [("database-unreachable", "host-a:41")]
    fake_clock.advance(30)
    report = evaluator.run_once()
    assert report.instance("type-backlog", PAID).inhibited_by == "database-unreachable host-a:41"
    assert report.instance("type-backlog", PAID).notifications == ()

    # both over: the per-type alert nobody was told of is notified
    health.outage = None
    fake_clock.advance(30)
    assert evaluator.run_once().instance("type-backlog", PAID).notifications == ("repeat",)


AM_RULES = """
version: 1
defaults: {interval: 30s, for: 0s, keep_firing_for: 0s}
routes:
  main:
    webhook_url_env: OM_TEST_CHAT_URL
    routes:
      - {matchers: {rule: type-backlog}, route: am, continue: true}
      - {matchers: {rule: type-backlog}, route: chat}
  chat: {webhook_url_env: OM_TEST_CHAT_URL}
  am: {type: alertmanager, alertmanager_urls: [AM_URL]}
rules:
  - {name: type-backlog, metric: queue_depth, by: [event_type], op: ">", threshold: 0,
     severity: warning, route: main}
  - {name: type-dead, metric: failed_in_window, window: 15m, by: [event_type], op: ">",
     threshold: 0, severity: warning, route: main}
inhibit:
  - {source_matchers: {rule: type-dead}, target_matchers: {rule: type-backlog},
     equal: [event_type]}
"""


def test_an_alertmanager_route_still_gets_the_inhibited_alert(
    tmp_path: Path, db, conn, rows: Rows, fake_clock, write_rules
) -> None:
    """A ``type: alertmanager`` route is Alertmanager's to inhibit: the inhibited instance
    reaches the real Alertmanager while its Slack route's row is suppressed."""
    rows.add(event_type="order.paid")
    rows.add_failed(event_type="order.paid")
    with running_alertmanager(tmp_path / "am") as am:
        ruleset = write_rules(AM_RULES.replace("AM_URL", am))
        report = Evaluator(db, ruleset, clock=fake_clock).run_once()
        assert report.instance("type-backlog", PAID).inhibited_by == SOURCE
        receiver = AlertmanagerReceiver(db, ruleset, alertmanager_urls(ruleset), interval=30.0)
        assert receiver.run_once() == {am: 1}
        [alert] = active_alerts(am)
        assert (alert["labels"]["alertname"], alert["labels"]["event_type"]) == (
            "type-backlog",
            "order.paid",
        )
    queued = [(n["route"], n["status"]) for n in _rows(conn, "type-backlog")]
    assert queued == [("chat", "suppressed")]


def _rows(conn: psycopg.Connection, rule: str) -> list[dict]:
    return conn.execute(
        "SELECT route, status FROM outbox_monitor.notifications WHERE rule = %s ORDER BY id",
        (rule,),
    ).fetchall()


TYPE_WARNING = """  - {name: type-retrying, metric: retrying, by: [event_type], op: ">",
     threshold: 0, severity: warning, route: oncall}
"""


def test_the_shipped_file_mutes_a_types_warnings_while_its_real_breaker_is_open(
    db, conn, rows: Rows, fake_clock, write_rules
) -> None:
    """The shipped entry with a real circuit breaker (SPEC §5) on order.paid, beside the
    shipped rules and one per-type warning of a team's own: its order.paid instance is
    inhibited by the breaker, its order.shipped one is not."""
    shipped = SHIPPED_RULES_PATH.read_text()
    at = shipped.index("\n# Inhibition")
    ruleset = write_rules(shipped[:at] + "\n" + TYPE_WARNING + shipped[at:])
    flow.change(db, "order.paid", actor=OPERATOR, action="breaker", changes=BREAKER)
    fail_all(conn, rows, 2, "order.paid")  # the breaker opens; its rows retry
    fail_all(conn, rows, 1, "order.shipped")  # retrying, no breaker

    report = Evaluator(db, ruleset, clock=fake_clock).run_once()

    assert report.instance("breaker-open", PAID).state == "firing"
    assert report.instance("type-retrying", PAID).inhibited_by == "breaker-open " + PAID
    assert report.instance("type-retrying", SHIPPED).inhibited_by is None
    assert kinds(conn, "type-retrying", PAID) == [("firing", "suppressed", "breaker-open " + PAID)]
    assert kinds(conn, "type-retrying", SHIPPED) == [("firing", "pending", None)]
    assert kinds(conn, "breaker-open", PAID) == [("firing", "pending", None)]


FLEET_RULES = HEAD.replace("SLACK_WEBHOOK_URL", "ONCALL_HOOK") + (
    BACKLOGS.replace("TARGET_SEVERITY", "critical")
    + """inhibit:
  - {source_matchers: {rule: alerting-stalled, outbox: "%"},
     target_matchers: {event_type: "%"}, equal: [outbox]}
"""
)


def test_with_a_fleet_an_outboxs_own_alert_inhibits_its_alerts_only(
    fleet,  # noqa: F811 (test_fleet_alerts' fixture)
    databases,  # noqa: F811
    conn,
    rows: Rows,
    tmp_path: Path,
    fake_clock,
) -> None:
    """Two outboxes of a fleet file in one database: orders' open ``alerting-stalled``
    (labelled ``outbox=orders``) inhibits orders' per-type alert, never billing's."""
    ruleset = load_rules(rules_file(tmp_path, FLEET_RULES), fleet)
    rows.add(event_type="order.paid")
    conn.execute("INSERT INTO public.billing_outbox SELECT * FROM integration_outbox")
    orders = databases["orders"]
    open_stall_episode(orders, fake_clock())
    reports = {
        name: Evaluator(db, ruleset, clock=fake_clock, outbox=fleet.get(name)).run_once()
        for name, db in databases.items()
    }
    source = f"alerting-stalled {orders.table_name}"
    assert reports["orders"].instance("type-backlog", PAID).inhibited_by == source
    assert reports["billing"].instance("type-backlog", PAID).inhibited_by is None
    statuses = conn.execute(
        "SELECT outbox, status FROM outbox_monitor.notifications WHERE rule = 'type-backlog'"
        " ORDER BY outbox"
    ).fetchall()
    assert [(r["outbox"], r["status"]) for r in statuses] == [
        ("billing", "pending"),
        ("orders", "suppressed"),
    ]
