"""Alert grouping (issue 31 items 3 and 5) on the real Postgres with the real evaluator and
sender, against the local PagerDuty and webhook fakes (tests/receiver_fakes.py) and the
Slack-compatible sink with a bot token (its card edited as instances come and go); a fake
clock stands for time, so every expectation is computed by hand.

Routes: the rule ``type-backlog`` (one instance per event type with a row due) goes to
``oncall``, whose branches send it to ``pd``, ``hook`` and ``card``, each grouped by
``rule`` with ``group_wait`` 10 s and ``group_interval`` 60 s: one group per receiver.
"""

import psycopg
import pytest

from outbox_monitor.alerts.evaluate import Evaluator
from outbox_monitor.alerts.grouping import group_alert_key
from outbox_monitor.alerts.receivers import transports_for
from outbox_monitor.alerts.sender import deliver_due
from outbox_monitor.config.settings import load_settings
from outbox_monitor.demo.slack_sink import SlackSink
from outbox_monitor.service.scheduler import build_scheduler
from outbox_monitor.store.db import Database
from tests.alerting import LOADED_DEADLINE, Scheduler, drain, subprocess_env, wait_for
from tests.receiver_fakes import ROUTING_KEY, receiver_env

BOT_TOKEN = "xoxb-grouping-test-token"
GROUPED = "group_by: [rule], group_wait: 10s, group_interval: 60s, repeat_interval: 300s"

RULES = f"""
version: 1
defaults: {{interval: 5s, for: 0s, keep_firing_for: 0s}}
routes:
  oncall:
    webhook_url_env: TEST_SLACK_URL
    routes:
      - {{matchers: {{severity: critical}}, route: pd, continue: true}}
      - {{matchers: {{severity: critical}}, route: hook, continue: true}}
      - {{matchers: {{severity: critical}}, route: card}}
  pd: {{type: pagerduty, routing_key_env: PD_ROUTING_KEY, url_env: PD_EVENTS_URL, {GROUPED}}}
  hook: {{type: webhook, url_env: HOOK_URL, secret_env: HOOK_SECRET, {GROUPED}}}
  card: {{channel: "#alerts", {GROUPED}}}
rules:
  - {{name: type-backlog, metric: queue_depth, by: [event_type], op: ">", threshold: 0,
     severity: critical, route: oncall, summary: "{{{{ event_type }}}}: {{{{ value }}}} due"}}
"""
GROUP = {"rule": "type-backlog"}
SHORT = "group_by: [rule], group_wait: 1s, group_interval: 2s"


@pytest.fixture
def slack_sink_options() -> dict[str, str]:
    return {"token": BOT_TOKEN}


@pytest.fixture
def env(pagerduty, webhook, slack_sink: SlackSink):
    return {
        **receiver_env(pagerduty, webhook, slack_sink),
        "SLACK_BOT_TOKEN": BOT_TOKEN,
        "SLACK_API_URL": slack_sink.api_url,
    }


@pytest.fixture
def ruleset(write_rules):
    return write_rules(RULES)


@pytest.fixture
def deliver(db, ruleset, env, fake_clock):
    def run(transports=None) -> dict:
        built = transports or transports_for(ruleset, env, timeout=2.0, quick_retry_seconds=0.05)
        return deliver_due(db, ruleset, clock=fake_clock, transports=built, env=env)

    return run


def sent(conn: psycopg.Connection) -> list[tuple[str, str, str]]:
    """(route, instance, status) of every notification, in id order."""
    found = conn.execute(
        "SELECT route, instance, status FROM outbox_monitor.notifications ORDER BY id"
    ).fetchall()
    return [(n["route"], n["instance"], n["status"]) for n in found]


def cards(slack_sink: SlackSink) -> list[dict]:
    return [m for m in slack_sink.messages() if not m["thread_ts"]]


def instances_of(body: dict) -> list[tuple[str, str]]:
    return [(i["instance"], i["status"]) for i in body["group"]["instances"]]


def test_a_group_is_one_message_then_updates_no_sooner_than_group_interval_then_one_resolve(
    db, conn, rows, fake_clock, ruleset, deliver, pagerduty, webhook, slack_sink
):
    evaluator = Evaluator(db, ruleset, clock=fake_clock)
    t0 = fake_clock()
    first = [rows.add(event_type=t, created_ago=30) for t in ("a.paid", "b.paid")]
    evaluator.run_once()  # t0: a and b fire
    assert deliver()["sent"] == 0  # within group_wait: nothing yet
    fake_clock.advance(5)
    third = rows.add(event_type="c.paid", created_ago=30)
    evaluator.run_once()  # t0+5: c fires, within the group's wait
    assert deliver()["sent"] == 0
    assert pagerduty.requests == [] and webhook.requests == [] and slack_sink.messages() == []

    fake_clock.advance(5)  # t0+10 = the oldest row's queueing + group_wait
    counts = deliver()
    assert counts["sent"] == 9 and counts["messages"] == 3  # 3 rows × 3 receivers, 1 each
    key = group_alert_key("", "pd", GROUP, 1)
    [trigger] = pagerduty.requests
    assert trigger.body["dedup_key"] == key and trigger.body["event_action"] == "trigger"
    assert trigger.body["payload"]["summary"] == "[FIRING:3] rule=type-backlog: type-backlog"
    assert [i["instance"] for i in trigger.body["payload"]["custom_details"]["instances"]] == [
        "event_type=a.paid",
        "event_type=b.paid",
        "event_type=c.paid",
    ]
    [body] = webhook.taken
    assert body["kind"] == "firing" and body["status"] == "firing"
    assert body["alert_key"] == group_alert_key("", "hook", GROUP, 1)
    assert body["message_id"] == body["alert_key"] + ":firing"
    assert instances_of(body) == [
        ("event_type=a.paid", "firing"),
        ("event_type=b.paid", "firing"),
        ("event_type=c.paid", "firing"),
    ]
    assert (body["group"]["labels"], body["group"]["firing"]) == (GROUP, 3)
    [card] = slack_sink.messages()
    assert card["via"] == "api" and card["text"].count("type-backlog") >= 3
    assert "FIRING · group rule=type-backlog · 3 firing, 0 resolved" in card["text"]
    for event_type in ("a.paid", "b.paid", "c.paid"):
        assert event_type in card["text"]

    fake_clock.advance(5)  # t0+15: a 4th instance
    fourth = rows.add(event_type="d.paid", created_ago=30)
    evaluator.run_once()
    fake_clock.advance(54)  # t0+69: one second before last message + group_interval
    evaluator.run_once()
    assert deliver()["sent"] == 0 and len(pagerduty.requests) == 1
    fake_clock.advance(1)  # t0+70
    assert deliver()["sent"] == 3
    assert [r.outcome for r in pagerduty.requests] == ["triggered", "deduplicated"]
    assert pagerduty.requests[1].body["dedup_key"] == key
    assert pagerduty.requests[1].body["payload"]["summary"].startswith("[FIRING:4]")
    update = webhook.taken[1]
    assert (update["kind"], update["message_id"]) == ("update", update["alert_key"] + ":update-1")
    assert [i["changed"] for i in update["group"]["instances"]] == [False, False, False, True]
    [card] = cards(slack_sink)
    assert card["edits"] == 1 and "4 firing, 0 resolved" in card["text"]
    [reply] = [m for m in slack_sink.messages() if m["thread_ts"] == card["ts"]]
    assert "d.paid" in reply["text"] and "a.paid" not in reply["text"]

    fake_clock.advance(5)  # t0+75: every instance resolves
    drain(conn, [*first, third, fourth])
    evaluator.run_once()
    assert deliver()["sent"] == 0  # a change: due at t0+70 + 60
    fake_clock.advance(55)  # t0+130
    assert deliver()["sent"] == 12  # 4 resolves × 3 receivers, one message each
    assert [r.outcome for r in pagerduty.requests] == ["triggered", "deduplicated", "resolved"]
    assert pagerduty.requests[2].body == {
        "routing_key": ROUTING_KEY,
        "event_action": "resolve",
        "dedup_key": key,
    }
    assert len(pagerduty.incidents) == 1 and pagerduty.incidents[key]["status"] == "resolved"
    resolve = webhook.taken[2]
    assert (resolve["kind"], resolve["status"]) == ("resolved", "resolved")
    assert [s for _, s in instances_of(resolve)] == ["resolved"] * 4
    [card] = cards(slack_sink)
    assert card["edits"] == 2 and card["text"].startswith("✅ RESOLVED · group rule=type-backlog")
    assert all(status == "sent" for _, _, status in sent(conn))
    assert (fake_clock() - t0).total_seconds() == 130

    # the next episode is a new incident, a new card and a new key
    fake_clock.advance(5)
    rows.add(event_type="a.paid", created_ago=30)
    evaluator.run_once()
    fake_clock.advance(10)
    assert deliver()["sent"] == 3
    second = group_alert_key("", "pd", GROUP, 2)
    assert pagerduty.requests[3].body["dedup_key"] == second != key
    assert pagerduty.incidents[second]["status"] == "triggered"
    assert webhook.taken[3]["kind"] == "firing" and len(cards(slack_sink)) == 2


def test_instances_that_fire_and_resolve_within_group_wait_send_nothing(
    db, conn, rows, fake_clock, ruleset, deliver, pagerduty, webhook, slack_sink
):
    evaluator = Evaluator(db, ruleset, clock=fake_clock)
    backlog = rows.add(event_type="a.paid", created_ago=30)
    evaluator.run_once()
    fake_clock.advance(5)
    drain(conn, [backlog])
    evaluator.run_once()
    fake_clock.advance(5)
    counts = deliver()
    assert (counts["sent"], counts["suppressed"]) == (0, 6)
    assert pagerduty.requests == [] and webhook.requests == [] and slack_sink.messages() == []


def test_a_still_firing_group_repeats_after_repeat_interval(
    db, conn, rows, fake_clock, ruleset, deliver, pagerduty, webhook
):
    evaluator = Evaluator(db, ruleset, clock=fake_clock)
    rows.add(event_type="a.paid", created_ago=30)
    evaluator.run_once()
    fake_clock.advance(10)
    assert deliver()["sent"] == 3
    fake_clock.advance(295)  # t0+305: the instance's repeat is queued (300 s after it fired)
    evaluator.run_once()
    assert deliver()["sent"] == 0  # due at the group's last message (t0+10) + 300 s
    fake_clock.advance(5)
    evaluator.run_once()
    assert deliver()["sent"] == 3
    assert [t["kind"] for t in webhook.taken] == ["firing", "repeat"]
    assert webhook.taken[1]["message_id"].endswith(":repeat-1")
    assert [r.outcome for r in pagerduty.requests] == ["triggered", "deduplicated"]


class Crash(BaseException):
    """A leader killed between the receiver's answer and its commit."""


class CrashingAfter:
    """A transport that sends through ``inner`` and then dies (the commit never happens)."""

    def __init__(self, inner) -> None:
        self._inner = inner

    def __getattr__(self, name: str):
        return getattr(self._inner, name)

    def deliver_group(self, message, **options):
        self._inner.deliver_group(message, **options)
        raise Crash(message.kind)


def test_a_leader_crash_mid_group_resends_under_the_same_key_and_never_loses_the_resolve(
    db, conn, rows, fake_clock, ruleset, env, deliver, pagerduty, webhook
):
    evaluator = Evaluator(db, ruleset, clock=fake_clock)
    backlog = [rows.add(event_type=t, created_ago=30) for t in ("a.paid", "b.paid")]
    evaluator.run_once()
    fake_clock.advance(10)
    for route in ("pd", "hook"):  # each leader dies after its receiver took the first message
        transports = transports_for(ruleset, env, timeout=2.0)
        transports[route] = CrashingAfter(transports[route])
        with pytest.raises(Crash):
            deliver(transports)
    deliver()  # the next leader: the group's state is as before the crash
    key = group_alert_key("", "pd", GROUP, 1)
    assert [r.outcome for r in pagerduty.requests] == ["triggered", "deduplicated"]
    assert {r.body["dedup_key"] for r in pagerduty.requests} == {key}
    assert [r.outcome for r in webhook.requests] == ["taken", "repeat dropped"]

    fake_clock.advance(5)
    drain(conn, backlog)
    evaluator.run_once()
    fake_clock.advance(60)
    for route in ("pd", "hook"):  # and again after the resolve went out
        transports = transports_for(ruleset, env, timeout=2.0)
        transports[route] = CrashingAfter(transports[route])
        with pytest.raises(Crash):
            deliver(transports)
    deliver()
    assert [r.outcome for r in pagerduty.requests][2:] == ["resolved", "resolved"]
    assert pagerduty.incidents[key]["status"] == "resolved" and len(pagerduty.incidents) == 1
    assert [r.outcome for r in webhook.requests][2:] == ["taken", "repeat dropped"]
    assert [t["kind"] for t in webhook.taken] == ["firing", "resolved"]
    assert {status for _, _, status in sent(conn)} == {"sent"}
    groups = conn.execute(
        "SELECT route, episode, open, members FROM outbox_monitor.alert_groups ORDER BY route"
    ).fetchall()
    assert [(g["route"], g["episode"], g["open"], g["members"]) for g in groups] == [
        ("card", 1, False, []),
        ("hook", 1, False, []),
        ("pd", 1, False, []),
    ]


def test_a_running_scheduler_waits_group_wait_and_group_interval_on_the_real_clock(
    db, conn, rows, write_rules, env, pagerduty, webhook, slack_sink
):
    """The real jobs on the real clock (evaluation every second, sender every 0.2 s,
    ``group_wait`` 2 s, ``group_interval`` 3 s): the group's first message no sooner than
    2 s after its first notification, its update no sooner than 3 s after it, one resolve."""
    ruleset = write_rules(
        RULES.replace("interval: 5s", "interval: 1s")
        .replace("group_wait: 10s", "group_wait: 2s")
        .replace("group_interval: 60s", "group_interval: 3s")
    )
    backlog = [rows.add(event_type=t, created_ago=30) for t in ("a.paid", "b.paid")]
    transports = transports_for(ruleset, env, timeout=2.0)
    scheduler = build_scheduler(
        db, blocking=False, ruleset=ruleset, transports=transports, sender_interval=0.2
    )
    scheduler.start()
    try:
        [trigger] = wait_for(lambda: pagerduty.requests, LOADED_DEADLINE)
        queued = conn.execute(
            "SELECT min(created_at) AS at FROM outbox_monitor.notifications"
        ).fetchone()["at"]
        waited = trigger.at - queued.timestamp()
        details = trigger.body["payload"]["custom_details"]
        assert [i["instance"] for i in details["instances"]] == [
            "event_type=a.paid",
            "event_type=b.paid",
        ]
        backlog.append(rows.add(event_type="c.paid", created_ago=30))
        update = wait_for(lambda: pagerduty.requests[1:], LOADED_DEADLINE)[0]
        spacing = update.at - trigger.at
        assert update.body["payload"]["custom_details"]["firing"] == 3
        drain(conn, backlog)
        resolve = wait_for(lambda: pagerduty.requests[2:], LOADED_DEADLINE)[0]
        print(
            f"\n[grouping, real clock] first message {waited:.2f} s after the first "
            f"notification (group_wait 2 s), update {spacing:.2f} s after it (group_interval "
            f"3 s), resolve {resolve.at - update.at:.2f} s after the update"
        )
        assert waited >= 2.0 and spacing >= 3.0 and resolve.at - update.at >= 3.0
        wait_for(lambda: len(webhook.taken) == 3 and cards(slack_sink)[0]["edits"] == 2, 30)
    finally:
        scheduler.shutdown(wait=True)
    assert [r.outcome for r in pagerduty.requests] == ["triggered", "deduplicated", "resolved"]
    assert [t["kind"] for t in webhook.taken] == ["firing", "update", "resolved"]
    assert cards(slack_sink)[0]["text"].startswith("✅ RESOLVED")


def test_the_scheduler_login_keeps_a_groups_state(
    dsn, logins, rows, conn, fake_clock, ruleset, env, pagerduty, webhook
):
    """The scheduler role's grants (``init-db --print-grants``) cover the groups' state."""
    settings = load_settings(dsn=logins.dsn(dsn, logins.scheduler))
    with Database(settings) as scheduler_db:
        evaluator = Evaluator(scheduler_db, ruleset, clock=fake_clock)
        transports = transports_for(ruleset, env, timeout=2.0)
        backlog = rows.add(event_type="a.paid", created_ago=30)
        evaluator.run_once()
        fake_clock.advance(10)
        first = deliver_due(scheduler_db, ruleset, clock=fake_clock, transports=transports, env=env)
        drain(conn, [backlog])
        fake_clock.advance(5)
        evaluator.run_once()
        fake_clock.advance(60)
        then = deliver_due(scheduler_db, ruleset, clock=fake_clock, transports=transports, env=env)
    assert (first["sent"], then["sent"]) == (3, 3)
    assert [r.outcome for r in pagerduty.requests] == ["triggered", "resolved"]


def test_a_receiver_down_never_holds_up_the_other_groups_and_gets_its_message_once_back(
    db, conn, rows, fake_clock, ruleset, deliver, pagerduty, webhook, slack_sink
):
    evaluator = Evaluator(db, ruleset, clock=fake_clock)
    [rows.add(event_type=t, created_ago=30) for t in ("a.paid", "b.paid")]
    evaluator.run_once()
    fake_clock.advance(10)
    pagerduty.stop()
    counts = deliver()
    assert (counts["sent"], counts["retrying"]) == (4, 2)  # hook and card: 2 rows each
    assert len(webhook.taken) == 1 and len(cards(slack_sink)) == 1
    assert [(r, s) for r, _, s in sent(conn)] == [
        ("pd", "pending"),
        ("hook", "sent"),
        ("card", "sent"),
    ] * 2
    pagerduty.start()
    fake_clock.advance(2)  # the next pass: retried
    assert deliver()["sent"] == 2
    [trigger] = pagerduty.requests
    assert trigger.body["payload"]["custom_details"]["firing"] == 2
    assert len(webhook.taken) == 1 and len(cards(slack_sink)) == 1  # nothing sent twice


CRASH_RULES = RULES.replace("interval: 5s", "interval: 1s").replace(GROUPED, SHORT)


def test_kill_9_mid_group_the_next_leader_resends_under_the_group_key_and_resolves_once(
    conn, rows, dsn, tmp_path, env, pagerduty, webhook
):
    """A real crash: the leader is killed (SIGKILL) while PagerDuty holds its answer to the
    group's first message; the next leader sends it again under the group's key (merged),
    then the group's one resolve."""
    rules = tmp_path / "alerts.yml"
    rules.write_text(CRASH_RULES)
    pagerduty.hold_next(30)
    backlog = [rows.add(event_type=t, created_ago=30) for t in ("a.paid", "b.paid")]
    scheduler_env = subprocess_env(dsn, **env)
    first = Scheduler(scheduler_env, rules, tmp_path / "first.log")
    second = None

    def statuses() -> set[str]:
        return {
            n["status"] for n in conn.execute("SELECT status FROM outbox_monitor.notifications")
        }

    try:
        assert wait_for(lambda: pagerduty.requests, LOADED_DEADLINE), first.output
        first.process.kill()  # the answer is held: the rows and the group stay as they were
        first.process.wait(10)
        second = Scheduler(scheduler_env, rules, tmp_path / "second.log")
        assert wait_for(lambda: len(pagerduty.requests) >= 2, LOADED_DEADLINE), second.output
        assert wait_for(lambda: statuses() == {"sent"}, LOADED_DEADLINE), second.output
        drain(conn, backlog)
        assert wait_for(lambda: len(pagerduty.requests) >= 3, LOADED_DEADLINE), second.output
        assert wait_for(lambda: len(webhook.taken) >= 2, LOADED_DEADLINE), second.output
        assert wait_for(lambda: statuses() == {"sent"}, LOADED_DEADLINE), second.output
    finally:
        first.stop()
        if second is not None:
            second.stop()
    key = group_alert_key("", "pd", GROUP, 1)
    assert [r.outcome for r in pagerduty.requests] == ["triggered", "deduplicated", "resolved"]
    assert [r.body["dedup_key"] for r in pagerduty.requests] == [key] * 3
    assert pagerduty.incidents[key]["status"] == "resolved" and len(pagerduty.incidents) == 1
    assert [t["kind"] for t in webhook.taken] == ["firing", "resolved"]


def test_with_send_resolved_false_a_group_closes_quietly_and_its_next_episode_is_new(
    db, conn, rows, fake_clock, write_rules, env, pagerduty
):
    ruleset = write_rules(RULES.replace(GROUPED, GROUPED + ", send_resolved: false"))
    evaluator = Evaluator(db, ruleset, clock=fake_clock)
    transports = transports_for(ruleset, env, timeout=2.0)

    def deliver() -> dict:
        return deliver_due(db, ruleset, clock=fake_clock, transports=transports, env=env)

    backlog = rows.add(event_type="a.paid", created_ago=30)
    evaluator.run_once()
    fake_clock.advance(10)
    assert deliver()["sent"] == 3
    drain(conn, [backlog])
    fake_clock.advance(5)
    evaluator.run_once()
    fake_clock.advance(60)
    assert deliver()["suppressed"] == 3  # the resolves: no message, the group closed
    rows.add(event_type="b.paid", created_ago=30)
    fake_clock.advance(5)
    evaluator.run_once()
    fake_clock.advance(10)
    assert deliver()["sent"] == 3
    assert [r.body["event_action"] for r in pagerduty.requests] == ["trigger", "trigger"]
    first, second = (r.body for r in pagerduty.requests)
    assert second["dedup_key"] == group_alert_key("", "pd", GROUP, 2) != first["dedup_key"]
    assert [i["instance"] for i in second["payload"]["custom_details"]["instances"]] == [
        "event_type=b.paid"
    ]


def test_alerts_told_before_group_by_was_added_resolve_as_they_were_told(
    db, conn, rows, fake_clock, write_rules, env, pagerduty, webhook
):
    """An upgrade: instances fired while the route had no ``group_by``; their resolves,
    after it was added, close the incidents they opened (the instance's key)."""
    before = write_rules(RULES.replace(", " + GROUPED, "").replace(GROUPED, ""))
    assert before.routes["pd"].group_by is None
    backlog = rows.add(event_type="a.paid", created_ago=30)
    Evaluator(db, before, clock=fake_clock).run_once()
    transports = transports_for(before, env, timeout=2.0)
    assert deliver_due(db, before, clock=fake_clock, transports=transports, env=env)["sent"] == 3
    [old_key] = pagerduty.incidents

    after = write_rules(RULES)
    drain(conn, [backlog])
    fake_clock.advance(5)
    Evaluator(db, after, clock=fake_clock).run_once()
    transports = transports_for(after, env, timeout=2.0)
    assert deliver_due(db, after, clock=fake_clock, transports=transports, env=env)["sent"] == 3
    assert pagerduty.incidents == {old_key: {**pagerduty.incidents[old_key], "status": "resolved"}}
    assert [t["kind"] for t in webhook.taken] == ["firing", "resolved"]
    assert webhook.taken[1]["rule"] == "type-backlog" and "group" not in webhook.taken[1]
