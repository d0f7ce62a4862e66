"""An alert's Slack message links to the incident timeline around its time (issue 15 item 5):
a firing message around the breach's start, its resolve around the resolve; the page's own
reading of that link's ``at`` covers the transition."""

from datetime import UTC, timedelta
from urllib.parse import parse_qs, quote, urlsplit

from outbox_monitor.alerts.evaluate import Evaluator
from outbox_monitor.alerts.receivers import transports_for
from outbox_monitor.alerts.sender import deliver_due
from outbox_monitor.alerts.timeline import read_timeline
from outbox_monitor.privacy.redaction import redactor_for
from outbox_monitor.ui.timeline import parse_at, time_range
from tests.alerting import drain, stuck_lock_rules

BASE = "https://ops.example.com/outbox"


def timeline_link(instant) -> str:
    at = instant.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    return f"<{BASE}/timeline?at={quote(at, safe='')}|Timeline>"


def test_firing_and_resolved_messages_link_the_timeline_around_their_time(
    db, conn, rows, fake_clock, write_rules, slack_sink
):
    ruleset = write_rules(stuck_lock_rules("30s"))
    evaluator = Evaluator(db, ruleset, clock=fake_clock)
    env = {"OUTBOX_MONITOR_DASHBOARD_URL": BASE}
    transports = transports_for(ruleset, {"SLACK_WEBHOOK_URL": slack_sink.webhook_url})
    fired_at = fake_clock()
    stuck = rows.add(status="processing", created_ago=25 * 60, locked_ago=20 * 60)

    assert evaluator.run_once().instance("stuck-lock").transitions == ("inactive→firing",)
    deliver_due(db, ruleset, clock=fake_clock, transports=transports, env=env)
    drain(conn, [stuck])
    resolved_at = fake_clock.advance(60)
    assert evaluator.run_once().instance("stuck-lock").transitions == ("firing→inactive",)
    deliver_due(db, ruleset, clock=fake_clock, transports=transports, env=env)

    firing, resolved = slack_sink.messages()
    sections = [
        [b["text"]["text"] for b in m["blocks"] if b["type"] == "section"]
        for m in (firing, resolved)
    ]
    assert timeline_link(fired_at) in sections[0][0]
    assert timeline_link(resolved_at) in sections[1][0]

    # the page reads the link's at as the centre of its window: the firing is in it
    link = sections[0][0].split("<")[-1].split("|")[0]
    at = parse_at(parse_qs(urlsplit(link).query)["at"][0])
    since, until = time_range(fake_clock(), 15 * 60, at)
    assert (since, until) == (at - timedelta(minutes=7.5), at + timedelta(minutes=7.5))
    found = read_timeline(
        db, since=since, until=until, redactor=redactor_for(db.settings), full_audit=False
    )
    assert [(e.title, e.at) for e in found.entries] == [
        ("stuck-lock resolved", resolved_at),
        ("stuck-lock firing", fired_at),
    ]
