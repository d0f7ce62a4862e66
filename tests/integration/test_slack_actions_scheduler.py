"""The Slack listener beside a real ``outbox-monitor scheduler`` process (issue 31 items 5
and 6): the card of a firing alert goes FIRING → ACKED (a press signed as Slack signs) →
RESOLVED, through the local Slack-compatible sink (bot token), the real PostgreSQL and the
operator login ``--print-grants`` grants; a configuration the listener cannot run with stops
the start with exit 2, naming what to fix."""

import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from outbox_monitor.demo.pgcluster import free_port
from outbox_monitor.demo.slack_sink import SlackSink
from tests import slack_presses as presses
from tests.alerting import LOADED_DEADLINE, REPO, drain, rules_file, subprocess_env, wait_for

RULES = presses.stuck_lock_rules("1s")


def scheduler(env: dict[str, str], rules: Path, log: Path) -> subprocess.Popen:
    with log.open("wb") as output:
        return subprocess.Popen(
            [sys.executable, "-m", "outbox_monitor", "scheduler", "--rules", str(rules)],
            cwd=REPO,
            env=env,
            stdout=output,
            stderr=subprocess.STDOUT,
        )


def listener_env(dsn: str, actions_dsn: str, sink: SlackSink, port: int) -> dict[str, str]:
    return subprocess_env(
        dsn,
        OUTBOX_MONITOR_ACTIONS_DSN=actions_dsn,
        OUTBOX_MONITOR_SLACK_ACTIONS_PORT=str(port),
        OUTBOX_MONITOR_SLACK_ACTIONS_TEAMS=presses.TEAM,
        OUTBOX_MONITOR_SLACK_ACTIONS_PEOPLE=f"{presses.TEAM}/{presses.USER}={presses.EMAIL}",
        OUTBOX_MONITOR_SLACK_ACTIONS_RESPONSE_URL=sink.url + "/",
        OUTBOX_MONITOR_OPERATORS=presses.EMAIL,
        SLACK_SIGNING_SECRET=presses.SECRET,
        SLACK_BOT_TOKEN=sink.token,
        SLACK_API_URL=sink.api_url,
    )


def header(sink: SlackSink) -> str:
    (card,) = [m for m in sink.messages() if m["via"] == "api" and not m["thread_ts"]]
    return card["blocks"][0]["text"]["text"]


def test_a_card_goes_firing_acked_resolved_with_a_signed_press(
    dsn, conn, rows, logins, tmp_path, slack_sink
):
    port = free_port()
    env = listener_env(dsn, logins.dsn(dsn, logins.actions), slack_sink, port)
    log = tmp_path / "scheduler.log"
    rows.add(status="processing", created_ago=3600, locked_ago=3600)  # a stuck lock
    process = scheduler(env, rules_file(tmp_path, RULES), log)
    try:
        posted = wait_for(
            lambda: (
                [m for m in slack_sink.messages() if m["via"] == "api"]
                or process.poll() is not None
            ),
            LOADED_DEADLINE,
        )
        assert isinstance(posted, list), log.read_text()
        assert header(slack_sink).startswith("🔥")
        (button,) = [
            e["action_id"]
            for b in posted[0]["blocks"]
            if b["type"] == "actions"
            for e in b["elements"]
            if "acknowledge" in e["action_id"]
        ]
        notification = int(button.rsplit(":", 1)[1])
        body = presses.press_body(
            team=presses.TEAM,
            user=presses.USER,
            action="acknowledge",
            notification_id=notification,
            action_ts=f"{time.time():.6f}",
            response_url=slack_sink.webhook_url,
        )
        started = time.monotonic()
        url = f"http://127.0.0.1:{port}/slack/actions"
        assert presses.post_signed(url, body, presses.SECRET) == 200
        answered = time.monotonic() - started
        said = wait_for(
            lambda: [m["text"] for m in slack_sink.messages() if m["via"] == "webhook"],
            LOADED_DEADLINE,
        )
        assert said == [f"stuck-lock: acknowledged by {presses.EMAIL}; no more repeats of it."]
        acked = wait_for(lambda: "ACKED" in header(slack_sink), LOADED_DEADLINE)
        edited = time.monotonic() - started
        assert acked, header(slack_sink)
        assert header(slack_sink).startswith(f"👀 ACKED by {presses.EMAIL}")
        print(
            f"\nthe listener answered the press in {answered * 1000:.0f} ms, the card said "
            f"ACKED after {edited * 1000:.0f} ms"
        )
        drain(conn)
        resolved = wait_for(lambda: header(slack_sink).startswith("✅ RESOLVED"), LOADED_DEADLINE)
        assert resolved, header(slack_sink)
    finally:
        process.send_signal(signal.SIGTERM)
        code = process.wait(LOADED_DEADLINE)
    assert code == 0, log.read_text()
    (ack,) = conn.execute("SELECT acked_by, slack_user_id FROM outbox_monitor.alert_acks")
    assert (ack["acked_by"], ack["slack_user_id"]) == (presses.EMAIL, presses.USER)


@pytest.mark.parametrize(
    ("change", "named"),
    [
        ({"SLACK_SIGNING_SECRET": ""}, "SLACK_SIGNING_SECRET is not"),
        ({"OUTBOX_MONITOR_ACTIONS_DSN": ""}, "OUTBOX_MONITOR_ACTIONS_DSN is not"),
        ({"OUTBOX_MONITOR_OPERATORS": ""}, "alice@example.com is no one"),
        ({"OUTBOX_MONITOR_SLACK_ACTIONS_TEAMS": "T0OTHER"}, "is of team T0ALLOWED"),
    ],
)
def test_a_listener_that_cannot_run_stops_the_start_naming_it(
    dsn, tmp_path, slack_sink, change, named
):
    env = {**listener_env(dsn, dsn, slack_sink, free_port()), **change}
    rules = rules_file(tmp_path, RULES)
    result = subprocess.run(
        [sys.executable, "-m", "outbox_monitor", "scheduler", "--rules", str(rules)],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=LOADED_DEADLINE * 2,
    )
    assert result.returncode == 2, result.stderr
    assert re.search(re.escape(named), result.stderr), result.stderr
