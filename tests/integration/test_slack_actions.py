"""Acting from Slack (issue 31 item 6): a client that signs as Slack does presses the buttons
of a real firing message against the real listener on 127.0.0.1, the real PostgreSQL (the
actions run with a login of the operator role as ``--print-grants`` prints it) and the local
Slack-compatible sink, which is also the presses' ``response_url``.

The alert fires from rows (a row locked an hour ago: ``stuck-lock``), the evaluator and the
sender run on a clock the test moves; each refusal is checked to change nothing in the
database (no acknowledgement, no silence, no audit row of either).
"""

import socket
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, timedelta
from typing import Any

import pytest
from slack_sdk.signature import SignatureVerifier

from outbox_monitor.alerts.evaluate import Evaluator
from outbox_monitor.alerts.grouping import group_alert_key
from outbox_monitor.alerts.message import ACKNOWLEDGE, PAUSE, SILENCE
from outbox_monitor.alerts.receivers import transports_for
from outbox_monitor.alerts.sender import deliver_due
from outbox_monitor.alerts.slack_actions import after_acknowledge
from outbox_monitor.config.settings import Settings, load_settings
from outbox_monitor.demo.pgcluster import free_port
from outbox_monitor.demo.slack_sink import SlackSink
from outbox_monitor.errors import ConfigError
from outbox_monitor.service.slack_listener import SlackListener, slack_listener
from outbox_monitor.store.db import Database
from tests.alerting import LOADED_DEADLINE, notifications, wait_for
from tests.receiver_fakes import ROUTING_KEY
from tests.slack_presses import (
    EMAIL,
    SECRET,
    TEAM,
    USER,
    post_signed,
    press_body,
    stuck_lock_rules,
)

MAX_BODY = 4096
PAGED_RULES = stuck_lock_rules(
    "30s",
    oncall='{channel: "#alerts", routes: [{matchers: {rule: stuck-lock}, route: pd, '
    "continue: true}, {matchers: {rule: stuck-lock}, route: slack}]}",
    more="  pd: {type: pagerduty, routing_key_env: PD_ROUTING_KEY, url_env: PD_EVENTS_URL}\n"
    '  slack: {channel: "#alerts", repeat_interval: 1h}',
)

RULES = stuck_lock_rules("30s")


@dataclass
class Setup:
    """A fired alert, its posted message, and the listener."""

    db: Database
    sink: SlackSink
    listener: SlackListener
    evaluator: Evaluator
    notification_id: int
    ts: int = 0

    def press(
        self,
        action: str = ACKNOWLEDGE,
        *,
        team: str = TEAM,
        user: str = USER,
        action_ts: str | None = None,
        age: float = 0,
        secret: str = SECRET,
        body: bytes | None = None,
    ) -> tuple[int, bytes]:
        """POST a press signed as Slack signs (v0 HMAC-SHA256 of ``v0:ts:body``), its
        timestamp ``age`` seconds old; returns the HTTP status and the raw body sent."""
        self.ts += 1
        raw = body or press_body(
            team=team,
            user=user,
            action=action,
            notification_id=self.notification_id,
            action_ts=action_ts or f"{time.time():.6f}{self.ts}",
            response_url=self.sink.webhook_url,
        )
        return post_signed(self.listener.url, raw, secret, age=age), raw

    def responses(self) -> list[str]:
        """The texts posted to ``response_url`` (the sink's webhook), in order."""
        return [m["text"] for m in self.sink.messages() if m["via"] == "webhook"]

    def wait_responses(self, count: int) -> list[str]:
        deadline = time.monotonic() + LOADED_DEADLINE
        while len(self.responses()) < count:
            assert time.monotonic() < deadline, f"{self.responses()} after {LOADED_DEADLINE} s"
            time.sleep(0.05)
        return self.responses()


def settings_for(dsn: str, actions_dsn: str, sink: SlackSink, **more: Any) -> Settings:
    return load_settings(
        dsn=dsn,
        actions_dsn=actions_dsn,
        slack_actions_port=free_port(),
        slack_actions_teams=TEAM,
        slack_actions_people=f"{TEAM}/{USER}={EMAIL}",
        operators=EMAIL,
        viewers="viewer@example.com",
        slack_actions_max_body=MAX_BODY,
        slack_actions_response_url=sink.url + "/",
        **more,
    )


@pytest.fixture
def rules_text() -> str:
    """The alerts.yml of ``setup`` (a test parametrizes it to change it)."""
    return RULES


@pytest.fixture
def actions_login() -> str:
    """The ``Logins`` field of ``setup``'s actions login (a test parametrizes it)."""
    return "actions"


@pytest.fixture
def setup(
    dsn,
    conn,
    logins,
    rows,
    fake_clock,
    write_rules,
    slack_sink,
    pagerduty,
    rules_text,
    actions_login,
) -> Iterator[Setup]:
    ruleset = write_rules(rules_text)
    settings = settings_for(dsn, logins.dsn(dsn, getattr(logins, actions_login)), slack_sink)
    transports = transports_for(
        ruleset,
        {
            "SLACK_BOT_TOKEN": slack_sink.token,
            "SLACK_API_URL": slack_sink.api_url,
            "PD_ROUTING_KEY": ROUTING_KEY,
            "PD_EVENTS_URL": pagerduty.url,
        },
    )
    rows.add(status="processing", created_ago=3600, locked_ago=3600)
    with Database(settings) as db:
        evaluator = Evaluator(db, ruleset, clock=fake_clock)
        report = evaluator.run_once()
        assert [i.notifications for i in report.instances] == [("firing",)]
        queued = conn.execute("SELECT id, route FROM outbox_monitor.notifications").fetchall()
        sent = deliver_due(db, ruleset, clock=fake_clock, transports=transports)["sent"]
        waits = [route.group_wait for route in ruleset.routes.values() if route.group_by]
        if waits:  # a grouped route's message waits its group_wait
            fake_clock.advance(max(waits))
            sent += deliver_due(db, ruleset, clock=fake_clock, transports=transports)["sent"]
        assert sent == len(queued)
        (posted,) = slack_sink.messages()
        buttons = [e for b in posted["blocks"] if b["type"] == "actions" for e in b["elements"]]
        (firing,) = [n for n in queued if n["route"] != "pd"]
        assert [b["action_id"] for b in buttons][:2] == [
            f"outbox-monitor:{ACKNOWLEDGE}:{firing['id']}",
            f"outbox-monitor:{SILENCE}:{firing['id']}",
        ]
        env = {"SLACK_SIGNING_SECRET": SECRET}
        with slack_listener(
            settings, env, on_acknowledged=after_acknowledge(ruleset, transports)
        ) as listener:
            assert listener is not None
            yield Setup(db, slack_sink, listener, evaluator, firing["id"])


def changes(conn) -> dict[str, Any]:
    """What a press may change: acknowledgements, silences, their audit rows."""
    return {
        "acks": conn.execute("SELECT * FROM outbox_monitor.alert_acks").fetchall(),
        "silences": conn.execute("SELECT id FROM outbox_monitor.silences").fetchall(),
        "audit": conn.execute(
            "SELECT action, actor, filter FROM outbox_monitor.audit_log"
            " WHERE action IN ('acknowledge', 'silence') ORDER BY id"
        ).fetchall(),
    }


def test_a_signed_press_acknowledges_the_episode_and_its_repeats_stop(setup, conn, fake_clock):
    status, _ = setup.press()
    assert status == 200
    (said,) = setup.wait_responses(1)
    assert said == f"stuck-lock: acknowledged by {EMAIL}; no more repeats of it."
    found = changes(conn)
    (ack,) = found["acks"]
    assert (ack["rule"], ack["acked_by"], ack["slack_team_id"], ack["slack_user_id"]) == (
        "stuck-lock",
        EMAIL,
        TEAM,
        USER,
    )
    episode = conn.execute(
        "SELECT episode_id FROM outbox_monitor.alert_instances WHERE rule = 'stuck-lock'"
    ).fetchone()["episode_id"]
    assert ack["episode_id"] == episode
    (audit,) = found["audit"]
    assert (audit["action"], audit["actor"]) == ("acknowledge", EMAIL)
    assert (audit["filter"]["slack_team_id"], audit["filter"]["slack_user_id"]) == (TEAM, USER)
    # an hour later the route would repeat (repeat_interval 1h): the episode is acknowledged
    fake_clock.advance(3600)
    assert setup.evaluator.run_once().instance("stuck-lock").notifications == ()
    fake_clock.advance(3600)
    setup.evaluator.run_once()
    assert [n["kind"] for n in notifications(conn, "stuck-lock")] == ["firing"]
    # the card was edited in place: FIRING → ACKED by whom
    (card,) = [m for m in setup.sink.messages() if m["via"] == "api"]
    assert card["edits"] == 1
    assert card["blocks"][0]["text"]["text"].startswith(f"👀 ACKED by {EMAIL}")


def test_the_next_episode_repeats_again(setup, conn, rows, fake_clock):
    setup.press()
    setup.wait_responses(1)
    conn.execute("UPDATE integration_outbox SET status = 'done', locked_at = NULL")
    setup.evaluator.run_once()  # resolved
    rows.add(status="processing", created_ago=3600, locked_ago=3600)
    fake_clock.advance(60)
    assert setup.evaluator.run_once().instance("stuck-lock").notifications == ("firing",)
    fake_clock.advance(3600)
    assert setup.evaluator.run_once().instance("stuck-lock").notifications == ("repeat",)


def test_a_press_not_signed_by_slack_is_refused_and_changes_nothing(setup, conn):
    before = changes(conn)
    assert setup.press(secret="another-secret-of-another-app")[0] == 401
    assert setup.press(age=5 * 60 + 30)[0] == 401  # older than Slack's 5 minutes
    assert setup.press(age=-(5 * 60 + 30))[0] == 401  # from the future
    # a body changed after signing: sign one, send another
    status, raw = setup.press(action=SILENCE)
    assert status == 200
    setup.wait_responses(1)
    assert changes(conn)["silences"] != before["silences"]  # that one was Slack's: it acted
    after_silence = changes(conn)
    stamp = str(int(time.time()))
    forged = raw.replace(b"silence-1h", b"acknowledge")
    request = urllib.request.Request(
        setup.listener.url,
        data=forged,
        headers={
            "X-Slack-Request-Timestamp": stamp,
            "X-Slack-Signature": SignatureVerifier(SECRET).generate_signature(
                timestamp=stamp, body=raw
            )
            or "",
        },
    )
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(request, timeout=LOADED_DEADLINE)
    refused.value.close()
    assert refused.value.code == 401
    assert changes(conn) == after_silence
    assert len(setup.responses()) == 1  # no response_url of an unsigned request is called


def test_a_replayed_press_is_refused(setup, conn):
    assert setup.press(action_ts="1733300000.000100")[0] == 200
    setup.wait_responses(1)
    after_first = changes(conn)
    assert len(after_first["acks"]) == 1
    assert setup.press(action_ts="1733300000.000100")[0] == 200
    said = setup.wait_responses(2)[1]
    assert said == f"Refused: this press ({TEAM}, 1733300000.000100) was received before"
    assert changes(conn) == after_first
    (cached,) = conn.execute("SELECT * FROM outbox_monitor.slack_action_requests").fetchall()
    assert (cached["team_id"], cached["action_ts"]) == (TEAM, "1733300000.000100")


@pytest.mark.parametrize(
    ("team", "user", "why"),
    [
        ("T0OTHERORG", USER, "Refused: team T0OTHERORG may not act on these alerts"),
        (
            TEAM,
            "U0MALLORY",
            "Refused: Slack user U0MALLORY is not mapped to a person of the monitor",
        ),
    ],
)
def test_a_press_of_a_foreign_team_or_an_unmapped_user_is_refused(setup, conn, team, user, why):
    before = changes(conn)
    assert setup.press(team=team, user=user)[0] == 200
    assert setup.wait_responses(1) == [why]
    assert changes(conn) == before


def test_a_body_over_the_cap_is_refused_before_it_is_read(setup, conn):
    before = changes(conn)
    status, _ = setup.press(body=b"payload=" + b"x" * MAX_BODY)
    assert status == 413
    assert changes(conn) == before


def test_silence_1h_silences_the_instance_labels(setup, conn):
    assert setup.press(action=SILENCE)[0] == 200
    (said,) = setup.wait_responses(1)
    (silence,) = conn.execute("SELECT * FROM outbox_monitor.silences").fetchall()
    assert said.startswith("Silenced until ") and said.endswith(
        f"by {EMAIL} (silence {silence['id']})."
    )
    labels = conn.execute(
        "SELECT labels FROM outbox_monitor.alert_instances WHERE rule = 'stuck-lock'"
    ).fetchone()["labels"]
    assert silence["matchers"] == labels and labels["rule"] == "stuck-lock"
    assert silence["created_by"] == EMAIL
    assert (silence["ends_at"] - silence["starts_at"]).total_seconds() == 3600
    (audit,) = changes(conn)["audit"]
    assert (audit["action"], audit["filter"]["slack_user_id"]) == ("silence", USER)


def test_bad_configuration_stops_the_start_naming_it(dsn, slack_sink, monkeypatch):
    good = settings_for(dsn, dsn, slack_sink)
    with pytest.raises(ConfigError, match="SLACK_SIGNING_SECRET"), slack_listener(good, {}):
        pass
    no_role = good.model_copy(update={"operators": ()})
    viewer = good.model_copy(update={"operators": (), "viewers": (EMAIL,)})
    env = {"SLACK_SIGNING_SECRET": SECRET}
    as_viewer = pytest.raises(ConfigError, match=r"alice@example\.com is viewer in the dash")
    with as_viewer, slack_listener(viewer, env):
        pass
    env = {"SLACK_SIGNING_SECRET": SECRET}
    no_one = pytest.raises(ConfigError, match=r"alice@example\.com is no one")
    with no_one, slack_listener(no_role, env):
        pass
    environment = {
        "OUTBOX_MONITOR_SLACK_ACTIONS_PORT": "9999",
        "OUTBOX_MONITOR_SLACK_ACTIONS_TEAMS": TEAM,
        "OUTBOX_MONITOR_SLACK_ACTIONS_PEOPLE": EMAIL,
    }
    for name, value in environment.items():
        monkeypatch.setenv(name, value)
    with pytest.raises(ConfigError, match=r"ACTIONS_PEOPLE: expected TEAM/USER=e-mail entries"):
        load_settings(dsn=dsn)
    monkeypatch.setenv("OUTBOX_MONITOR_SLACK_ACTIONS_PEOPLE", "T0ELSE/U0X=bob@example.com")
    with pytest.raises(ConfigError, match=r"PEOPLE: 'T0ELSE/U0X=bob@example\.com' is of team"):
        load_settings(dsn=dsn)
    monkeypatch.setenv("OUTBOX_MONITOR_SLACK_ACTIONS_PEOPLE", f"{TEAM}/{USER}={EMAIL}")
    monkeypatch.setenv("OUTBOX_MONITOR_METRICS_PORT", "9999")
    with pytest.raises(ConfigError, match="PORT: 9999 is the /metrics port"):
        load_settings(dsn=dsn)


def test_a_second_press_says_who_acknowledged_and_writes_nothing(setup, conn):
    setup.press()
    setup.wait_responses(1)
    after_first = changes(conn)
    setup.press()  # another press (another action_ts) of the same button
    assert setup.wait_responses(2)[1] == f"stuck-lock: acknowledged already by {EMAIL}."
    assert changes(conn) == after_first


def test_a_press_after_the_resolve_is_refused(setup, conn):
    conn.execute("UPDATE integration_outbox SET status = 'done', locked_at = NULL")
    setup.evaluator.run_once()  # resolved
    before = changes(conn)
    setup.press()
    assert setup.wait_responses(1) == ["Refused: stuck-lock: this episode has ended already"]
    assert changes(conn) == before


@pytest.mark.parametrize("rules_text", [PAGED_RULES])
def test_acknowledge_acknowledges_the_pagerduty_incident_of_the_same_alert(setup, pagerduty):
    (key,) = pagerduty.incidents
    assert pagerduty.incidents[key]["status"] == "triggered"
    setup.press()
    (said,) = setup.wait_responses(1)
    assert said == (
        f"stuck-lock: acknowledged by {EMAIL}; no more repeats of it. "
        "PagerDuty route pd acknowledged."
    )
    assert pagerduty.incidents == {key: {**pagerduty.incidents[key], "status": "acknowledged"}}
    assert [r.body["event_action"] for r in pagerduty.requests] == ["trigger", "acknowledge"]
    assert pagerduty.requests[1].body["dedup_key"] == key


@pytest.mark.parametrize(
    "rules_text",
    [PAGED_RULES.replace("PD_EVENTS_URL}", "PD_EVENTS_URL, group_by: [rule], group_wait: 1s}")],
)
def test_acknowledge_on_a_grouped_pagerduty_route_acknowledges_the_groups_incident(
    setup, pagerduty
):
    """Issue 31 item 3: a grouped route's incident is the group's (``dedup_key`` = the
    group's key), so the press acknowledges that one."""
    (key,) = pagerduty.incidents
    assert key == group_alert_key("", "pd", {"rule": "stuck-lock"}, 1)
    setup.press()
    (said,) = setup.wait_responses(1)
    assert said.endswith("PagerDuty route pd acknowledged.")
    assert pagerduty.incidents[key]["status"] == "acknowledged"
    assert [r.body["dedup_key"] for r in pagerduty.requests] == [key, key]


@pytest.mark.parametrize("rules_text", [PAGED_RULES])
def test_a_pagerduty_refusing_the_acknowledge_is_said_and_the_ack_stands(setup, pagerduty, conn):
    pagerduty.fail_next(1, status=400, body='{"status": "invalid event"}')
    setup.press()
    (said,) = setup.wait_responses(1)
    assert said.startswith(
        f"stuck-lock: acknowledged by {EMAIL}; no more repeats of it. PagerDuty route pd not told: "
    )
    assert len(changes(conn)["acks"]) == 1
    (key,) = pagerduty.incidents
    assert pagerduty.incidents[key]["status"] == "triggered"


def test_the_replay_cache_forgets_presses_past_twice_the_window(setup, conn):
    conn.execute(
        "INSERT INTO outbox_monitor.slack_action_requests (team_id, action_ts, received_at)"
        " VALUES (%s, 'old', now() - interval '11 minutes'),"
        " (%s, 'recent', now() - interval '9 minutes')",
        (TEAM, TEAM),
    )
    setup.press(action_ts="new")
    setup.wait_responses(1)
    kept = conn.execute(
        "SELECT action_ts FROM outbox_monitor.slack_action_requests ORDER BY action_ts"
    ).fetchall()
    assert [row["action_ts"] for row in kept] == ["new", "recent"]


@pytest.mark.parametrize(
    "rules_text",
    [RULES.replace("route: oncall}", "by: [event_type], route: oncall}")],
)
def test_pause_this_type_pauses_the_alert_event_type_for_an_hour(setup, conn):
    assert setup.press(action=PAUSE)[0] == 200
    (said,) = setup.wait_responses(1)
    (control,) = conn.execute("SELECT * FROM outbox_monitor.controls").fetchall()
    assert (control["event_type_filter"], control["paused"]) == ("order.paid", True)
    now = conn.execute("SELECT now() AS now").fetchone()["now"]
    assert timedelta(minutes=59) < control["paused_until"] - now <= timedelta(hours=1)
    assert control["pause_reason"] == f"paused from Slack by {EMAIL} ({TEAM}/{USER})"
    end = control["paused_until"].astimezone(UTC)
    assert said == f"order.paid paused until {end:%H:%M} UTC by {EMAIL}: its rows stay pending."
    (audit,) = conn.execute(
        "SELECT actor, filter FROM outbox_monitor.audit_log WHERE action = 'pause'"
    ).fetchall()
    assert audit["actor"] == EMAIL
    assert audit["filter"]["after"]["pause_reason"] == control["pause_reason"]


def test_pause_of_an_alert_of_no_event_type_is_refused(setup, conn):
    setup.press(action=PAUSE)
    assert setup.wait_responses(1) == [
        "Refused: stuck-lock is not an alert of one event type: nothing to pause"
    ]
    assert conn.execute("SELECT count(*) AS n FROM outbox_monitor.controls").fetchone()["n"] == 0


def test_a_click_of_the_dashboard_link_button_is_taken_and_ignored(setup, conn):
    before = changes(conn)
    body = press_body(
        team=TEAM,
        user=USER,
        action="x",
        notification_id=setup.notification_id,
        action_ts="1733300000.000200",
        response_url=setup.sink.webhook_url,
    ).replace(b"outbox-monitor%3Ax%3A", b"open-dashboard-0%3A")
    assert setup.press(body=body)[0] == 200
    setup.press(action=SILENCE)  # a press after it: its answer is the first one posted
    assert setup.wait_responses(1)[0].startswith("Silenced until ")
    assert changes(conn)["acks"] == before["acks"]


@pytest.mark.parametrize("actions_login", ["read"])
def test_a_login_without_the_operator_grants_is_said_not_done(setup, conn):
    before = changes(conn)
    setup.press()
    (said,) = setup.wait_responses(1)
    assert said.startswith("Not done: "), said
    assert "permission" in said.lower() or "privilege" in said.lower(), said
    assert changes(conn) == before


def test_slacks_retry_of_a_press_received_is_not_acted_on_nor_answered_twice(setup, conn, caplog):
    status, raw = setup.press(action_ts="1733300000.000300")
    assert status == 200
    setup.wait_responses(1)
    after_first = changes(conn)
    retry = {"X-Slack-Retry-Num": "1", "X-Slack-Retry-Reason": "http_timeout"}
    assert post_signed(setup.listener.url, raw, SECRET, headers=retry) == 200
    handled = wait_for(
        lambda: [r for r in caplog.records if r.getMessage().endswith("(Slack's retry)")],
        LOADED_DEADLINE,
    )
    assert handled, [r.getMessage() for r in caplog.records]
    assert setup.responses() == [f"stuck-lock: acknowledged by {EMAIL}; no more repeats of it."]
    assert changes(conn) == after_first


def test_a_client_that_sends_nothing_is_cut_off_and_presses_go_on(setup):
    quick = SlackListener(
        setup.listener.actions, address="127.0.0.1", port=0, max_body=MAX_BODY, read_timeout=0.5
    ).start()
    setup.listener = quick
    try:
        with socket.create_connection(("127.0.0.1", quick.port)) as idle:
            idle.sendall(b"POST /slack/actions HTTP/1.1\r\nContent-Length: 100\r\n\r\n")
            assert setup.press(action=SILENCE)[0] == 200  # another connection is served
            assert setup.wait_responses(1)[0].startswith("Silenced until ")
            idle.settimeout(LOADED_DEADLINE)  # not closed by then: socket.timeout, a failure
            assert idle.recv(1) == b""  # closed by the listener, no body ever came
    finally:
        quick.stop()
