"""The demo's paging drill (issue 31, "Done means"), on ``outbox-monitor demo`` itself: during
``demo-downstream break``, order.paid's ``breaker-open`` (critical in the demo) gives one
PagerDuty incident — one ``dedup_key``, triggered, acknowledged by the Slack press, resolved —
in the demo's local Events API v2; the same alert in the real Alertmanager's ``GET
/api/v2/alerts``, gone after the resolve; one Slack card (one ``ts``) that ``chat.update``
takes FIRING → ACKED (a press the demo's sink signs as Slack does, to the demo's listener) →
RESOLVED; and while it fires, order.paid's ``backlog-by-type`` fires inhibited — no message —
and the Alerts page (AppTest) says so.

The demo runs with its own drill rules (``use_demo_rules(drill=True)``, as ``outbox-monitor
demo`` writes them) given as a rules file of the test's with the demo's timings shortened:
evaluations every 2 s instead of 30 s and ``breaker-open``'s ``keep_firing_for`` 15 s instead
of 2 min (the rules are otherwise the demo's: asserted; ``backlog-by-type`` keeps the demo's
threshold, and the test checks that the rows held reach it, at the test's rate of 10 events/s,
half the demo's); its breakers are the demo's with their cool-down shortened
(``shorten_breakers``). Every wait polls with a deadline.
"""

import json
import os
import re
import time
import urllib.request
from datetime import UTC, datetime
from pathlib import Path

import psycopg
import streamlit as st
from streamlit.testing.v1 import AppTest

from outbox_monitor.alerts.rules_file import RULES_ENV, load_rules
from outbox_monitor.demo.alertmanager_run import BINARY_ENV
from outbox_monitor.demo.drill import BACKLOG_BY_TYPE, LATENCY_BY_TYPE, PAGED_RULE
from tests.alerting import LOADED_DEADLINE, wait_for
from tests.alertmanager_support import active_alerts, alertmanager_binary
from tests.integration.test_demo import REPO, running_demo
from tests.integration.test_demo_outage import (
    BROKEN,
    demo_downstream,
    demo_rules_copy,
    shorten_breakers,
    shortened_demo_rules,
)

KEEP_FIRING = "15s"
DRILL_DEADLINE = 4 * LOADED_DEADLINE
"""From the break to the breaker's alert (the breaker opens within about a minute with the
demo's breakers), or from the heal to its resolve (a probe after a cool-down of 30 s or more,
then ``KEEP_FIRING``); on a loaded machine several times that. The tests' breakers
(``shorten_breakers``) probe sooner; the deadline stays."""
PER_TYPE = (BACKLOG_BY_TYPE, LATENCY_BY_TYPE)


def drill_rules(tmp_path: Path, monkeypatch) -> Path:
    """The demo's drill rules with its timings shortened (``shortened_demo_rules``):
    ``breaker-open``'s ``keep_firing_for`` at ``KEEP_FIRING``; ``backlog-by-type`` as the demo
    ships it (``shipped_backlog_threshold``)."""
    path = shortened_demo_rules(
        tmp_path, monkeypatch, {PAGED_RULE: {"keep_firing_for": KEEP_FIRING}}
    )
    rules = {rule.name: rule for rule in load_rules(path).rules}
    assert rules[PAGED_RULE].severity == "critical" and rules[PAGED_RULE].keep_firing_for == 15
    return path


def shipped_backlog_threshold(tmp_path: Path) -> float:
    """``backlog-by-type``'s threshold (due rows) in the rules ``outbox-monitor demo`` writes
    (``demo_rules_copy``, after ``drill_rules``), not in the test's copy."""
    demo = load_rules(demo_rules_copy(tmp_path))
    [rule] = [rule for rule in demo.rules if rule.name == BACKLOG_BY_TYPE]
    return rule.threshold


def get_json(url: str) -> dict:
    with urllib.request.urlopen(url, timeout=10) as response:
        return json.load(response)


def post_json(url: str, body: dict) -> tuple[int, dict]:
    request = urllib.request.Request(
        url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(request, timeout=LOADED_DEADLINE) as response:
        return response.status, json.load(response)


def incidents(pagerduty: str) -> dict[str, dict]:
    """The demo PagerDuty's incidents of order.paid's breaker-open (its summary), by dedup_key."""
    shown = get_json(f"{pagerduty}/incidents")["incidents"]
    return {
        key: incident
        for key, incident in shown.items()
        if incident.get("summary", "").startswith(f"Circuit breaker open for {BROKEN}:")
    }


def paged_in_alertmanager(alertmanager: str) -> list[dict]:
    return [
        alert
        for alert in active_alerts(alertmanager)
        if alert["labels"].get("alertname") == PAGED_RULE
        and alert["labels"].get("event_type") == BROKEN
    ]


def messages(sink: str) -> list[dict]:
    return get_json(f"{sink}/_sink/messages")["messages"]


def cards(sink: str) -> list[dict]:
    """The top-level messages posted with the bot token that name breaker-open."""
    return [
        m
        for m in messages(sink)
        if m["via"] == "api" and not m["thread_ts"] and PAGED_RULE in m["text"]
    ]


def per_type_messages(sink: str) -> list[dict]:
    """Every message (or version of one) naming a per-type rule of order.paid."""
    return [
        {"at": version["at"], "text": version["text"]}
        for m in messages(sink)
        for version in m["versions"]
        if BROKEN in version["text"] and any(rule in version["text"] for rule in PER_TYPE)
    ]


def inhibited(dsn: str) -> dict[str, str | None]:
    """order.paid's per-type instances that fire: rule → what inhibits it."""
    with psycopg.connect(dsn) as conn:
        rows = conn.execute(
            "SELECT rule, inhibited_by FROM outbox_monitor.alert_instances"
            " WHERE rule = ANY(%s) AND labels->>'event_type' = %s AND state = 'firing'",
            (list(PER_TYPE), BROKEN),
        ).fetchall()
    return dict(rows)


def backlog_reading(dsn: str) -> tuple[float, float]:
    """order.paid's ``backlog-by-type`` instance: its last value (due rows) and threshold."""
    with psycopg.connect(dsn) as conn:
        return conn.execute(
            "SELECT value, threshold FROM outbox_monitor.alert_instances"
            " WHERE rule = %s AND labels->>'event_type' = %s",
            (BACKLOG_BY_TYPE, BROKEN),
        ).fetchone()


def fired_at(dsn: str, state: str = "firing") -> datetime:
    """When order.paid's breaker-open first went to ``state`` (its transition's time)."""
    with psycopg.connect(dsn) as conn:
        return conn.execute(
            "SELECT min(at) FROM outbox_monitor.alert_transitions"
            " WHERE rule = %s AND instance = %s AND to_state = %s",
            (PAGED_RULE, f"event_type={BROKEN}", state),
        ).fetchone()[0]


def alerts_page_states(monkeypatch, dsn: str, rules: Path) -> dict[tuple[str, str], str]:
    """The Alerts page's state column (AppTest, this process pointed at the demo's database)."""
    for name in list(os.environ):
        if name.startswith("OUTBOX_MONITOR_"):
            monkeypatch.delenv(name)
    monkeypatch.setenv("OUTBOX_MONITOR_DSN", dsn)
    monkeypatch.setenv(RULES_ENV, str(rules))
    st.cache_data.clear()
    st.cache_resource.clear()
    try:
        at = AppTest.from_file(REPO / "dashboard.py", default_timeout=2 * LOADED_DEADLINE)
        at = at.switch_page("pages/alerts.py").run()
        assert not at.exception, at.exception
        return {
            (r["rule"], r["instance"]): r["state"] for r in at.dataframe[0].value.to_dict("records")
        }
    finally:
        st.cache_data.clear()
        st.cache_resource.clear()


def test_the_demos_paging_drill(tmp_path, monkeypatch):
    environment = {RULES_ENV: str(drill_rules(tmp_path, monkeypatch))}
    environment[BINARY_ENV] = alertmanager_binary()  # skips loudly without one
    with running_demo(tmp_path, environment=environment, timeout=2 * LOADED_DEADLINE) as output:
        dsn = re.search(r"database\s+(postgresql://\S+)", output).group(1)
        downstream = re.search(r"demo-downstream break --url (\S+)", output).group(1)
        sink = re.search(r"local Slack sink (http://\S+)", output).group(1)
        pagerduty = re.search(r"pagerduty\s+(http://\S+)", output).group(1)
        alertmanager = re.search(r"alertmgr\s+(http://\S+)", output).group(1)
        assert f"curl -X POST {sink}/_sink/press" in output
        shorten_breakers(dsn, tmp_path)

        assert demo_downstream(downstream, "break") == {"broken": [BROKEN]}
        broke = time.monotonic()
        seen: dict[str, datetime] = {}  # each receiver's first sight of the page, polled together

        def paged() -> bool:
            for name, found in (
                ("pagerduty", lambda: incidents(pagerduty)),
                ("slack", lambda: cards(sink)),
                ("alertmanager", lambda: paged_in_alertmanager(alertmanager)),
            ):
                if name not in seen and found():
                    seen[name] = datetime.now(UTC)
            return len(seen) == 3

        assert wait_for(paged, DRILL_DEADLINE, step=0.2), f"paged only by {sorted(seen)}"
        paged_after = time.monotonic() - broke
        [card] = cards(sink)
        assert card["versions"][0]["header"].startswith("🔥 FIRING"), card["versions"]
        [alert] = paged_in_alertmanager(alertmanager)
        assert alert["status"]["state"] == "active"

        # the held rows pass the demo's threshold: backlog-by-type fires, inhibited, and says
        # nothing
        muted = wait_for(lambda: inhibited(dsn).get(BACKLOG_BY_TYPE), DRILL_DEADLINE, step=1)
        assert muted == f"{PAGED_RULE} event_type={BROKEN}", inhibited(dsn)
        held, threshold = backlog_reading(dsn)
        assert threshold == shipped_backlog_threshold(tmp_path)
        assert held > threshold, (held, threshold)
        held_after = time.monotonic() - broke
        states = alerts_page_states(monkeypatch, dsn, Path(environment[RULES_ENV]))
        assert states[(BACKLOG_BY_TYPE, f"event_type={BROKEN}")] == (
            f"FIRING · inhibited by {PAGED_RULE} event_type={BROKEN}"
        ), states
        assert states[(PAGED_RULE, f"event_type={BROKEN}")] == "FIRING", states

        # Acknowledge, pressed as Slack presses it (signed with the app's secret)
        pressed = time.monotonic()
        assert post_json(f"{sink}/_sink/press", {"action": "acknowledge", "ts": card["ts"]}) == (
            200,
            {"ok": True, "listener": 200, "action_id": card_button(card), "ts": card["ts"]},
        )
        acked = wait_for(
            lambda: cards(sink)[0]["versions"][-1]["header"].startswith("👀 ACKED by"),
            LOADED_DEADLINE,
            step=0.2,
        )
        assert acked, cards(sink)[0]["versions"]
        acked_after = time.monotonic() - pressed
        assert wait_for(
            lambda: [i["status"] for i in incidents(pagerduty).values()] == ["acknowledged"],
            LOADED_DEADLINE,
            step=0.2,
        ), incidents(pagerduty)

        assert demo_downstream(downstream, "heal") == {"broken": [], "healed": [BROKEN]}
        cleared: dict[str, datetime] = {}  # each receiver's first sight of the resolve

        def resolved() -> bool:
            for name, done in (
                (
                    "pagerduty",
                    lambda: [i["status"] for i in incidents(pagerduty).values()] == ["resolved"],
                ),
                ("slack", lambda: cards(sink)[0]["versions"][-1]["header"].startswith("✅")),
                ("alertmanager", lambda: not paged_in_alertmanager(alertmanager)),
            ):
                if name not in cleared and done():
                    cleared[name] = datetime.now(UTC)
            return len(cleared) == 3

        assert wait_for(resolved, DRILL_DEADLINE, step=0.2), (
            sorted(cleared),
            incidents(pagerduty),
            cards(sink)[0]["versions"],
        )

        # one incident, one card, and nothing from the per-type rules while it fired
        [(key, incident)] = incidents(pagerduty).items()
        assert [e["action"] for e in incident["events"]] == ["trigger", "acknowledge", "resolve"]
        assert incident["triggers"] == 1
        [card] = cards(sink)
        headers = [v["header"].split(" ")[1] for v in card["versions"]]
        assert list(dict.fromkeys(headers)) == ["FIRING", "ACKED", "RESOLVED"], headers
        resolved_at = datetime.fromisoformat(card["versions"][-1]["at"])
        said = per_type_messages(sink)
        early = [m for m in said if datetime.fromisoformat(m["at"]) < resolved_at]
        assert early == [], early
        # backlog-by-type resolved (its rows drained) before breaker-open did: never posted;
        # latency-by-type may post after the resolve (the held rows' latency outlives it)
        assert [m for m in said if BACKLOG_BY_TYPE in m["text"]] == [], said

        fired, ended = fired_at(dsn), fired_at(dsn, "inactive")
        cleared["pagerduty"] = datetime.fromisoformat(incident["events"][-1]["at"])
        cleared["slack"] = datetime.fromisoformat(card["versions"][-1]["at"])
        print(
            "\ndrill: from breaker-open's resolve: "
            + ", ".join(f"{k} {(v - ended).total_seconds():.2f} s" for k, v in cleared.items())
            + " (PagerDuty and Slack as received; Alertmanager the first poll without it)"
        )
        triggered = datetime.fromisoformat(incident["events"][0]["at"])
        posted = datetime.fromisoformat(card["versions"][0]["at"])
        print(
            f"\ndrill: paged {paged_after:.0f} s after the break; from breaker-open's firing "
            f"transition: PagerDuty {(triggered - fired).total_seconds():.2f} s, Slack card "
            f"{(posted - fired).total_seconds():.2f} s (as received), Alertmanager "
            f"{(seen['alertmanager'] - fired).total_seconds():.2f} s (first poll showing it, "
            "every 0.2 s); press → ACKED "
            f"card {acked_after * 1000:.0f} ms; dedup_key {key}; card edits {card['edits']}; "
            f"backlog-by-type over {threshold:g} ({held:g} due) {held_after:.0f} s after the "
            "break; "
            f"per-type messages after the resolve: {len(said)}"
        )


def card_button(card: dict) -> str:
    [button] = [
        element["action_id"]
        for block in card["blocks"]
        if block["type"] == "actions"
        for element in block["elements"]
        if element["action_id"].startswith("outbox-monitor:acknowledge:")
    ]
    return button
