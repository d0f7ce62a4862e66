"""Rules and alerts across a fleet (issue 16 item 3): two outboxes of one fleet file in ONE
database (two tables), each with its own scheduler (evaluator, sender, lease per table).

Each transition is posted exactly once, by its outbox's sender; the instances, transitions and
notifications of the two are apart (migration 017's ``outbox`` column); a rule selecting
outboxes by name or label runs only on them; a route's branch sends the payments team's
alerts to its own channel; messages name the outbox and their links carry ``?outbox=``.
Real parts only: the test's Postgres, two ``build_scheduler`` schedulers, the local Slack
sink (one incoming webhook per route: its messages' ``channel`` is ``webhook:<B…>``).
"""

import json
import re
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
from apscheduler.schedulers.base import BaseScheduler
from click.testing import CliRunner

from outbox_monitor.access import Identity, Role
from outbox_monitor.alerts import silences, state
from outbox_monitor.alerts.evaluate import Evaluator
from outbox_monitor.alerts.receivers import transports_for
from outbox_monitor.alerts.rules_file import load_rules
from outbox_monitor.cli import main
from outbox_monitor.config.fleet import FLEET_ENV, Fleet, load_fleet
from outbox_monitor.config.settings import load_settings
from outbox_monitor.demo.slack_sink import SlackSink
from outbox_monitor.errors import ActionRefused
from outbox_monitor.service.scheduler import build_scheduler
from outbox_monitor.store.db import Database
from outbox_monitor.store.schema import init_db
from tests.alerting import SENDER_INTERVAL, drain, messages_after, rules_file, running_scheduler

# Evaluated every second: "alerting is stalled" (no evaluation for 3 intervals, its own
# message) needs a 3 s pause of the jobs; at 0.3 s a loaded machine's 1.1 s pause fired it.
RULES = """
version: 1
defaults: {interval: 1s, for: 0s, keep_firing_for: 0s}
routes:
  oncall:
    webhook_url_env: ONCALL_HOOK
    repeat_interval: 1h
    routes:
      - matchers: {team: payments}
        route: payments-oncall
  payments-oncall: {webhook_url_env: PAYMENTS_HOOK, repeat_interval: 1h}
rules:
  - {name: stuck-lock, metric: stuck_locks, op: ">", threshold: 0, route: oncall}
  - {name: billing-depth, metric: queue_depth, op: ">", threshold: 1000000, route: oncall,
     outboxes: [billing]}
  - {name: payments-depth, metric: queue_depth, op: ">", threshold: 1000000, route: oncall,
     outboxes: {team: payments}}
"""

FLEET = """
version: 1
outboxes:
  - {name: orders, dsn_env: TEST_DSN, labels: {team: checkout}}
  - {name: billing, dsn_env: TEST_DSN, table: public.billing_outbox, labels: {team: payments}}
"""
ONCALL, PAYMENTS = "webhook:BONCALL", "webhook:BPAYMENTS"
OPERATOR = Identity("ops@example.com", Role.operator, "cli")
DASHBOARD_LINK = re.compile(r"http://127\.0\.0\.1:8501/[^\s'\"|>]*")


@pytest.fixture
def fleet(dsn: str, tmp_path: Path) -> Fleet:
    """orders (``integration_outbox``) and billing (``billing_outbox``) in one database."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(
            "CREATE TABLE public.billing_outbox (LIKE public.integration_outbox INCLUDING ALL)"
        )
    path = tmp_path / "outboxes.yml"
    path.write_text(FLEET)
    fleet = load_fleet(load_settings(dsn=dsn), path, env={"TEST_DSN": dsn})
    with Database(fleet.get("billing").settings) as db:
        init_db(db, create_indexes=False)  # billing's audited writers (silences go through them)
    return fleet


@pytest.fixture
def databases(fleet: Fleet) -> Iterator[dict[str, Database]]:
    opened = {outbox.name: Database(outbox.settings) for outbox in fleet.outboxes}
    yield opened
    for database in opened.values():
        database.close()


def _stuck_row_in_each(conn: psycopg.Connection, rows) -> None:
    """One row locked an hour ago in orders, and its copy in billing."""
    rows.add(status="processing", created_ago=3600, locked_ago=3600)
    conn.execute("INSERT INTO public.billing_outbox SELECT * FROM integration_outbox")


def _by_channel(messages: list[dict]) -> dict[str, list[str]]:
    found: dict[str, list[str]] = {}
    for message in messages:
        found.setdefault(message["channel"], []).append(message["text"])
    return found


def test_two_outboxes_in_one_database_alert_apart_once_each(
    fleet, databases, conn, rows, tmp_path, slack_sink: SlackSink
):
    ruleset = load_rules(rules_file(tmp_path, RULES), fleet)
    env = {
        "ONCALL_HOOK": f"{slack_sink.url}/services/T000/BONCALL/one",
        "PAYMENTS_HOOK": f"{slack_sink.url}/services/T000/BPAYMENTS/two",
    }
    transports = transports_for(ruleset, env)
    _stuck_row_in_each(conn, rows)
    options = {"ruleset": ruleset, "transports": transports, "sender_interval": SENDER_INTERVAL}

    def scheduler(name: str) -> BaseScheduler:
        return build_scheduler(databases[name], blocking=False, outbox=fleet.get(name), **options)

    first, second = scheduler("orders"), scheduler("billing")
    first.start()
    second.start()
    try:
        fired = messages_after(slack_sink, 2, timeout=15, settle=1.5)
        assert len(fired) == 2, [m["text"] for m in fired]
        channels = _by_channel(fired)
        assert sorted(channels) == [ONCALL, PAYMENTS]  # billing's team is payments
        [orders_text], [billing_text] = channels[ONCALL], channels[PAYMENTS]
        assert "outbox orders" in orders_text and "stuck-lock" in orders_text
        assert "outbox billing" in billing_text and "stuck-lock" in billing_text
        links = {m["channel"]: DASHBOARD_LINK.findall(str(m["blocks"])) for m in fired}
        assert links[ONCALL] and all("outbox=orders" in url for url in links[ONCALL])
        assert links[PAYMENTS] and all("outbox=billing" in url for url in links[PAYMENTS])

        drain(conn)
        conn.execute("UPDATE public.billing_outbox SET status = 'done', processed_at = now()")
        everything = messages_after(slack_sink, 4, timeout=15, settle=1.5)
    finally:
        first.shutdown(wait=True)
        second.shutdown(wait=True)

    channels = _by_channel(everything)
    assert [len(channels[ONCALL]), len(channels[PAYMENTS])] == [2, 2], channels
    assert "outbox orders" in channels[ONCALL][1] and "outbox billing" in channels[PAYMENTS][1]

    instances = conn.execute(
        "SELECT outbox, rule, instance, state, labels FROM outbox_monitor.alert_instances "
        "ORDER BY outbox, rule"
    ).fetchall()
    assert [(i["outbox"], i["rule"], i["instance"], i["state"]) for i in instances] == [
        ("billing", "billing-depth", "outbox=billing", "inactive"),
        ("billing", "payments-depth", "outbox=billing", "inactive"),
        ("billing", "stuck-lock", "outbox=billing", "inactive"),
        ("orders", "stuck-lock", "outbox=orders", "inactive"),  # no depth rule selects orders
    ]
    stuck = {i["outbox"]: i["labels"] for i in instances if i["rule"] == "stuck-lock"}
    assert stuck["orders"] == {
        "rule": "stuck-lock",
        "severity": "warning",
        "outbox": "orders",
        "team": "checkout",
    }
    assert stuck["billing"]["outbox"] == "billing" and stuck["billing"]["team"] == "payments"

    sent = conn.execute(
        "SELECT outbox, dedupe_key, route, status FROM outbox_monitor.notifications "
        "ORDER BY outbox, id"
    ).fetchall()
    assert [tuple(row.values()) for row in sent] == [
        ("billing", "stuck-lock|outbox=billing|1|firing", "payments-oncall", "sent"),
        ("billing", "stuck-lock|outbox=billing|1|resolved", "payments-oncall", "sent"),
        ("orders", "stuck-lock|outbox=orders|1|firing", "oncall", "sent"),
        ("orders", "stuck-lock|outbox=orders|1|resolved", "oncall", "sent"),
    ]
    moves = conn.execute(
        "SELECT outbox, from_state, to_state FROM outbox_monitor.alert_transitions "
        "ORDER BY outbox, id"
    ).fetchall()
    assert [tuple(row.values()) for row in moves] == [
        ("billing", "inactive", "firing"),
        ("billing", "firing", "inactive"),
        ("orders", "inactive", "firing"),
        ("orders", "firing", "inactive"),
    ]
    # each outbox's Alerts page reads its own state
    assert [(i["rule"], i["instance"]) for i in state.list_instances(databases["orders"])] == [
        ("stuck-lock", "")
    ]
    assert len(state.list_notifications(databases["billing"])) == 2


def test_a_fleet_of_one_keeps_its_keys_and_labels(db, conn, rows, write_rules, slack_sink):
    """Without a fleet file the state is keyed by '' and the labels are those of before."""
    ruleset = write_rules(
        RULES.replace("ONCALL_HOOK", "SLACK_WEBHOOK_URL").replace(
            "PAYMENTS_HOOK", "SLACK_WEBHOOK_URL"
        )
    )
    rows.add(status="processing", created_ago=3600, locked_ago=3600)
    with running_scheduler(db, ruleset=ruleset, sink=slack_sink):
        [message] = messages_after(slack_sink, 1, timeout=15, settle=1.0)
    assert "outbox" not in message["text"]
    assert all("outbox=" not in str(block) for block in message["blocks"])
    [instance] = conn.execute(
        "SELECT outbox, rule, instance, labels FROM outbox_monitor.alert_instances"
    ).fetchall()  # the depth rules select other outboxes than the single "default"
    assert instance == {
        "outbox": "",
        "rule": "stuck-lock",
        "instance": "",
        "labels": {"rule": "stuck-lock", "severity": "warning"},
    }
    [note] = conn.execute("SELECT outbox, dedupe_key, route FROM outbox_monitor.notifications")
    assert note == {"outbox": "", "dedupe_key": "stuck-lock||1|firing", "route": "oncall"}


BY_TYPE = """
version: 1
defaults: {interval: 30s, for: 0s, keep_firing_for: 0s}
routes:
  oncall: {webhook_url_env: ONCALL_HOOK}
rules:
  - {name: payment-failed, metric: failed_in_window, event_type: "payment.%", window: 15m,
     by: [event_type], op: ">", threshold: 0, route: oncall}
"""


def test_an_instance_per_event_type_is_scoped_by_its_outbox_until_it_vanishes(
    fleet, databases, conn, rows, tmp_path, fake_clock
):
    ruleset = load_rules(rules_file(tmp_path, BY_TYPE), fleet)
    evaluators = {
        name: Evaluator(databases[name], ruleset, clock=fake_clock, outbox=fleet.get(name))
        for name in ("orders", "billing")
    }
    failed = rows.add_failed(event_type="payment.captured")
    conn.execute("INSERT INTO public.billing_outbox SELECT * FROM integration_outbox")
    for evaluator in evaluators.values():
        report = evaluator.run_once()
        assert report.transitions == [
            ("payment-failed", "event_type=payment.captured", "inactive→firing")
        ]
    conn.execute("DELETE FROM integration_outbox WHERE id = %s", (failed,))  # orders only
    fake_clock.advance(30)
    gone = evaluators["orders"].run_once().instance("payment-failed", "event_type=payment.captured")
    assert (gone.state, gone.transitions) == ("inactive", ("firing→inactive",))
    assert evaluators["billing"].run_once().transitions == []  # billing's still fails
    stored = conn.execute(
        "SELECT outbox, instance, state, labels->>'event_type' AS type "
        "FROM outbox_monitor.alert_instances ORDER BY outbox"
    ).fetchall()
    assert [tuple(row.values()) for row in stored] == [
        ("billing", "outbox=billing,event_type=payment.captured", "firing", "payment.captured"),
        ("orders", "outbox=orders,event_type=payment.captured", "inactive", "payment.captured"),
    ]
    [detail] = (
        conn.execute(
            "SELECT detail FROM outbox_monitor.alert_transitions WHERE outbox = 'orders' "
            "AND to_state = 'inactive'"
        )
        .fetchone()
        .values()
    )
    assert detail.endswith("(no longer reported)")


def test_a_silence_made_on_an_outbox_covers_only_it(fleet, databases, fake_clock):
    orders, billing = databases["orders"], databases["billing"]
    until = fake_clock.advance(3600)
    made = silences.create_silence(orders, {"rule": "stuck-lock"}, until, "deploy", OPERATOR)
    [silence] = silences.list_silences(orders)
    assert (silence["id"], silence["matchers"]) == (
        made,
        {"rule": "stuck-lock", "outbox": "orders"},
    )
    assert silences.list_silences(billing) == []  # billing's page lists its own only
    labels = {"rule": "stuck-lock", "severity": "warning"}
    assert silences.matches(silence, {**labels, "outbox": "orders"})
    assert not silences.matches(silence, {**labels, "outbox": "billing"})
    with pytest.raises(ActionRefused, match="a silence made on outbox billing covers only it"):
        silences.create_silence(billing, {"outbox": "orders"}, until, "no", OPERATOR)


def test_an_outbox_lists_its_own_silences_whatever_the_others_made(
    fleet, databases, db, fake_clock
):
    """The list's limit counts an outbox's own silences only: 5 of billing made after 2 of
    orders leave orders' 2 in its list of 3; a fleet of one (``db``) lists only silences
    without an ``outbox`` matcher."""
    orders, billing = databases["orders"], databases["billing"]
    until = fake_clock.advance(3600)

    def make(database: Database, count: int) -> list[int]:
        return [
            silences.create_silence(database, {"rule": f"r{n}"}, until, "deploy", OPERATOR)
            for n in range(count)
        ]

    made_orders, made_billing, made_single = make(orders, 2), make(billing, 5), make(db, 1)
    assert [s["id"] for s in silences.list_silences(orders, limit=3)] == made_orders[::-1]
    assert [s["id"] for s in silences.list_silences(billing, limit=3)] == made_billing[:1:-1]
    assert [s["id"] for s in silences.list_silences(db, limit=3)] == made_single
    assert [s["active"] for s in silences.list_silences(orders, limit=3)] == [True, True]


def test_an_outbox_cannot_end_another_outboxs_silence(fleet, databases, fake_clock):
    orders, billing = databases["orders"], databases["billing"]  # one database, two outboxes
    made = silences.create_silence(
        orders, {"rule": "stuck-lock"}, fake_clock.advance(3600), "deploy", OPERATOR
    )
    with pytest.raises(ActionRefused, match=f"silence {made} is outbox orders's"):
        silences.expire_silence(billing, made, OPERATOR)
    [silence] = silences.list_silences(orders)
    assert (silence["id"], silence["active"]) == (made, True)  # still in force
    assert silences.expire_silence(orders, made, OPERATOR)
    assert [s["active"] for s in silences.list_silences(orders)] == [False]


def test_check_and_validate_know_the_fleet(fleet, dsn, conn, rows, tmp_path, monkeypatch):
    monkeypatch.setenv(FLEET_ENV, str(fleet.path))
    monkeypatch.setenv("TEST_DSN", dsn)
    rules = str(rules_file(tmp_path, RULES))
    _stuck_row_in_each(conn, rows)
    runner = CliRunner()

    def check(outbox: str) -> tuple[int, list[tuple[str, bool]]]:
        args = ["check", "--rules", rules, "--outbox", outbox, "--json"]
        result = runner.invoke(main, args, catch_exceptions=False)
        return result.exit_code, [
            (r["rule"], r["breached"]) for r in json.loads(result.stdout)["rules"]
        ]

    assert check("orders") == (1, [("stuck-lock", True)])
    assert check("billing") == (
        1,
        [("stuck-lock", True), ("billing-depth", False), ("payments-depth", False)],
    )
    result = runner.invoke(main, ["alerts", "validate", "--rules", rules], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    wrong = str(rules_file(tmp_path, RULES.replace("[billing]", "[biling]"), "wrong.yml"))
    result = runner.invoke(main, ["alerts", "validate", "--rules", wrong], catch_exceptions=False)
    assert result.exit_code == 2
    assert (
        f'{wrong}: rules[1] "billing-depth": outboxes: unknown outbox "biling" '
        f"({fleet.path} lists orders, billing)"
    ) in result.stderr
