"""``outbox-monitor demo --outboxes 3`` (issue 16, "Done means"): a fleet of three outboxes
with their own traffic, listed in the fleet file the demo writes; breaking one outbox's
downstream opens its breaker and fires its breaker-open alert, and nothing changes in the
alert states of the other two. The demo's rules are given as a rules file of the test's,
evaluated every 2 s instead of 30 s (``shortened_demo_rules``: otherwise the demo's)."""

import json
import re
import time
import urllib.request
from typing import Any

import psycopg
import pytest
from click.testing import CliRunner
from psycopg import sql

from outbox_monitor.alerts.rules_file import RULES_ENV
from outbox_monitor.cli import main
from outbox_monitor.config.fleet import FLEET_ENV, load_fleet
from outbox_monitor.config.settings import load_settings
from outbox_monitor.demo.fleet import DEMO_FLEET, demo_fleet
from outbox_monitor.demo.run import run_demo
from outbox_monitor.errors import OutboxMonitorError
from tests.integration.test_demo import running_demo
from tests.integration.test_demo_outage import demo_downstream, shortened_demo_rules, wait

RATE = 10  # running_demo's --rate: the fleet's, split by each outbox's share
BROKEN = DEMO_FLEET[1]  # billing: invoice.sent


def firing(dsn: str, outbox: str) -> set[tuple[str, str]]:
    """The (rule, instance) pairs firing for ``outbox`` in the alert state of ``dsn``'s
    database (migration 017: instances carry their outbox)."""
    with psycopg.connect(dsn) as conn:
        rows = conn.execute(
            "SELECT rule, instance FROM outbox_monitor.alert_instances"
            " WHERE state = 'firing' AND outbox = %s",
            (outbox,),
        ).fetchall()
    return set(rows)


def counts(dsn: str, table: str) -> dict[str, Any]:
    """Rows of ``table`` by status, and ``types``: how many distinct event types."""
    with psycopg.connect(dsn) as conn:
        query = sql.SQL("SELECT status, count(*) FROM {} GROUP BY status").format(
            sql.Identifier(*table.split("."))
        )
        found = dict(conn.execute(query).fetchall())
        types = conn.execute(
            sql.SQL("SELECT array_agg(DISTINCT event_type) FROM {}").format(
                sql.Identifier(*table.split("."))
            )
        ).fetchone()[0]
    return {**found, "rows": sum(found.values()), "types": sorted(types)}


def opened(sink: str) -> list[str]:
    """The "[FIRING] breaker-open" messages the demo's Slack sink received."""
    with urllib.request.urlopen(f"{sink}/_sink/messages", timeout=5) as response:
        texts = [m.get("text", "") for m in json.loads(response.read())["messages"]]
    return [t for t in texts if "[FIRING] breaker-open" in t]


def test_a_fleet_of_three_with_its_own_traffic_alerts_only_for_the_broken_one(
    tmp_path, monkeypatch
):
    rules = shortened_demo_rules(tmp_path, monkeypatch, {}, drill=False)
    environment = {RULES_ENV: str(rules)}
    with running_demo(tmp_path, "--outboxes", "3", timeout=150, environment=environment) as output:
        path = re.search(r"fleet\s+(\S+outboxes\.yml) \(" + FLEET_ENV, output).group(1)
        env = dict(re.findall(r"(\w+_DSN)='([^']+)'", output))
        breaks = re.findall(r"break --url (\S+) --event-type (\S+)", output)
        sink = re.search(r"local Slack sink (http://\S+)", output).group(1)

        # the fleet file loads as any other, with the variables the banner names
        fleet = load_fleet(load_settings(dsn=env["ORDERS_DSN"]), path, env=env)
        assert fleet.names == ["orders", "billing", "notifications"]
        assert [dict(o.labels) for o in fleet.outboxes] == [dict(m.labels) for m in DEMO_FLEET]
        assert [o.settings.table for o in fleet.outboxes] == [m.table for m in DEMO_FLEET]
        assert [o.settings.lock_timeout for o in fleet.outboxes] == [300.0] * 3
        databases = [o.settings.dsn.rsplit("/", 1)[1] for o in fleet.outboxes]
        assert databases == [m.database for m in DEMO_FLEET]
        assert databases == ["shop", "shop", "comms"]  # orders and billing share a database
        assert len({o.settings.dsn.rsplit("/", 1)[0] for o in fleet.outboxes}) == 1  # one cluster
        assert [t for _, t in breaks] == [m.broken for m in DEMO_FLEET]

        # each outbox's traffic: an hour of history at its share of the rate, its own types
        found = {o.name: counts(o.settings.dsn, o.settings.table) for o in fleet.outboxes}
        for member in DEMO_FLEET:
            figures = found[member.name]
            assert figures["types"] == sorted(member.event_types)
            assert 0.9 * RATE * member.share * 3600 < figures["rows"], figures
            assert figures["rows"] < 1.1 * RATE * member.share * 3600, figures
        # orders' downstreams fail transiently only; billing's CRM rejects every crm.upsert
        # (≈ 45 % of its rows); notifications' bounces dead-letter ≈ 1.5 % of its e-mails
        orders, billing, notifications = (found[name] for name in fleet.names)
        assert orders.get("failed", 0) == 0
        assert billing["failed"] > 0.35 * billing["rows"]
        assert 0 < notifications["failed"] < 0.05 * notifications["rows"]
        assert orders["done"] > notifications["done"] > billing["done"]

        # the banner's CLI line: `status` of every outbox, keyed by name
        for name, value in {**env, FLEET_ENV: path}.items():
            monkeypatch.setenv(name, value)
        monkeypatch.delenv("OUTBOX_MONITOR_DSN", raising=False)
        status = CliRunner().invoke(main, ["status", "--json"], prog_name="outbox-monitor")
        assert status.exit_code == 0, status.output
        report = json.loads(status.stdout)
        assert list(report["outboxes"]) == fleet.names and not report["failed"]
        tables = {n: report["outboxes"][n]["table"] for n in fleet.names}
        assert tables == {m.name: m.table for m in DEMO_FLEET}

        # break billing's downstream: its breaker opens and only its alert fires
        before = {o.name: firing(o.settings.dsn, o.name) for o in fleet.outboxes}
        # nothing is broken yet: no alert fires by itself (the backfill leaves no notification
        # waiting past notifications-late's 5 min, no worker crashes: no stuck lock)
        assert before == {o.name: set() for o in fleet.outboxes}
        url = dict((t, u) for u, t in breaks)[BROKEN.broken]
        assert demo_downstream(url, "break", "--event-type", BROKEN.broken) == {
            "broken": [BROKEN.broken]
        }
        billing_dsn = fleet.get(BROKEN.name).settings.dsn
        expected = ("breaker-open", f"outbox={BROKEN.name},event_type={BROKEN.broken}")
        broke = time.monotonic()
        wait(
            lambda: expected in firing(billing_dsn, BROKEN.name),
            150,
            "billing's breaker-open never fired",
        )
        fired_after = time.monotonic() - broke
        assert firing(billing_dsn, BROKEN.name) - before[BROKEN.name] == {expected}
        for outbox in fleet.outboxes:
            if outbox.name != BROKEN.name:
                assert firing(outbox.settings.dsn, outbox.name) == before[outbox.name], outbox.name
                with psycopg.connect(outbox.settings.dsn) as conn:
                    transitions = conn.execute(
                        "SELECT count(*) FROM outbox_monitor.breaker_transitions"
                        " WHERE outbox = %s::regclass",
                        (outbox.settings.table,),
                    ).fetchone()[0]
                assert transitions == 0, outbox.name
        wait(lambda: opened(sink), 30, "no breaker-open message")
        [message] = opened(sink)
        assert f"event_type={BROKEN.broken}" in message
        assert f"outbox {BROKEN.name}" in message
        assert re.search(rf"Dashboard: http://\S+[?&;]outbox={BROKEN.name}\b", message), message

        # one fleet scheduler: its /metrics labels every series by outbox
        metrics = re.search(r"(http://\S+)/metrics", output).group(1)
        with urllib.request.urlopen(f"{metrics}/metrics", timeout=5) as response:
            exposition = response.read().decode()
        for member in DEMO_FLEET:
            assert f'outbox="{member.name}"' in exposition, member.name
        started = float(re.search(r"started in ([\d.]+) s", output).group(1))
        print(f"\ndemo fleet started in {started:.1f} s; breaker-open fired {fired_after:.0f} s")


def test_the_demo_fleet_has_one_to_three_outboxes_worked_by_the_simulator():
    assert [m.name for m in demo_fleet(2)] == ["orders", "billing"]
    with pytest.raises(OutboxMonitorError, match="1 to 3 outboxes"):
        demo_fleet(4)
    with pytest.raises(OutboxMonitorError, match="a fleet is worked by the simulated workers"):
        run_demo(outboxes=3, worker="n8n")
