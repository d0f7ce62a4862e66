"""The demo's forgotten transaction on demand (issue 14, "Done means"):
``outbox-monitor demo-forgotten-transaction start`` opens a session idle in a transaction
that holds the xmin horizon, ``end`` (or the command the Health page shows, run by hand)
ends it. End to end in ``outbox-monitor demo``: the outbox's dead tuples climb, the health
names the session (application, age, how to end it), the demo's Slack sink gets one
"xmin-horizon-held" message, and ending the session resolves it. The demo runs with its own
rules given as a rules file of the test's with their timings shortened (evaluations every 2 s
instead of 30 s, ``xmin-horizon-held``'s threshold ``THRESHOLD`` instead of the demo's 1 min:
tests/integration/test_demo_outage.py's ``shortened_demo_rules``; the banner's line on the
demo's 1 min: tests/integration/test_demo.py)."""

import json
import os
import re
import subprocess
import sys
import time
import urllib.request

import pytest
from click.testing import CliRunner

from outbox_monitor.alerts.rules_file import RULES_ENV
from outbox_monitor.cli import main
from outbox_monitor.demo.downstream import Downstream
from outbox_monitor.demo.forgotten_transaction import (
    APPLICATION_NAME,
    CONTROL_PATH,
    ForgottenTransaction,
    request,
)
from outbox_monitor.demo.slack_sink import SlackSink
from outbox_monitor.demo.switches import URL_ENV
from outbox_monitor.errors import OutboxMonitorError
from outbox_monitor.export.scheduler_status import SchedulerStatus
from outbox_monitor.export.server import MetricsServer
from outbox_monitor.health.horizon import horizon
from tests.health import wait_until
from tests.integration.test_demo import REPO, running_demo
from tests.integration.test_demo_outage import shortened_demo_rules

RULE = "xmin-horizon-held"
THRESHOLD = "20s"
"""``xmin-horizon-held``'s threshold in the test's rules (the demo's: 1m)."""


def forgotten_transaction(url: str, *args: str) -> dict:
    """``outbox-monitor demo-forgotten-transaction <args> --url URL --json``, its answer."""
    result = CliRunner().invoke(
        main,
        ["demo-forgotten-transaction", *args, "--url", url, "--json"],
        prog_name="outbox-monitor",
    )
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def holders_named(db, application: str) -> list:
    return [h for h in horizon(db).holding if h.application == application]


def test_the_forgotten_transaction_starts_and_ends_over_the_demos_switch(db, dsn, conn):
    forgotten = ForgottenTransaction(dsn)
    with Downstream(authorization=None, switches={CONTROL_PATH: forgotten}) as downstream:
        url = downstream.url("")
        assert forgotten_transaction(url, "status")["open"] is False
        started = forgotten_transaction(url, "start")
        assert started["open"] and started["application"] == APPLICATION_NAME
        assert request(url, "start")["pid"] == started["pid"]  # one at a time
        [holder] = holders_named(db, APPLICATION_NAME)
        assert holder.name == f"pid {started['pid']}" and holder.state == "idle in transaction"
        assert holder.command == f"SELECT pg_terminate_backend({started['pid']});"

        ended = forgotten_transaction(url, "end")
        assert ended["open"] is False and ended["ended_outside"] is False
        assert ended["ended"]["pid"] == started["pid"]
        assert ended["ended"]["application"] == APPLICATION_NAME
        assert ended["ended"]["held_seconds"] > 0
        assert holders_named(db, APPLICATION_NAME) == []
        assert forgotten_transaction(url, "end")["ended"] is None  # nothing left to end

        again = request(url, "start")
        conn.execute(f"SELECT pg_terminate_backend({again['pid']})")  # as the page says
        state = wait_until(
            lambda: (s := request(url, "status"))["ended_outside"] and s,
            5,
            "the demo to notice its session ended",
        )
        assert state["open"] is False
        text = CliRunner().invoke(main, ["demo-forgotten-transaction", "status", "--url", url])
        assert text.output == "no forgotten transaction is open (it was ended from outside)\n"

        with pytest.raises(OutboxMonitorError, match='action must be "start" or "end"'):
            request(url, "forget")
        forgotten.close()
    with pytest.raises(OutboxMonitorError, match="cannot reach the demo's downstream") as caught:
        request(url, "status")
    assert URL_ENV in caught.value.hint


@pytest.mark.parametrize("command", [["demo-forgotten-transaction"], ["demo-downstream"]])
def test_a_url_that_answers_but_is_not_the_demos_downstream_is_named_as_such(db, command):
    status = SchedulerStatus()
    with (
        SlackSink() as sink,
        MetricsServer(db, status) as metrics,
        Downstream(authorization=None) as downstream,
    ):
        # the scheduler's /metrics, the Slack sink and its webhook, the downstream's own calls
        wrong = [metrics.url, f"{metrics.url}/metrics", sink.url, sink.webhook_url]
        wrong.append(downstream.url("/ledger"))
        for url in wrong:
            for action in ("status", "start" if command[0] != "demo-downstream" else "break"):
                result = CliRunner().invoke(
                    main, [*command, action, "--url", url], prog_name="outbox-monitor"
                )
                assert result.exit_code == 1, (url, result.output)
                assert result.exception is None or isinstance(result.exception, SystemExit)
                assert "Traceback" not in result.output
                assert (
                    f"{url} answered but is not the demo's control endpoint (it is printed in"
                    " the demo banner as `--url http://127.0.0.1:PORT`" in result.output
                ), (
                    url,
                    result.output,
                )


def cli_text(url: str, action: str) -> str:
    """``outbox-monitor demo-forgotten-transaction <action> --url URL``, its text."""
    result = CliRunner().invoke(main, ["demo-forgotten-transaction", action, "--url", url])
    assert result.exit_code == 0, result.output
    return result.output


def test_status_is_closed_at_once_after_the_session_is_terminated(dsn, conn):
    forgotten = ForgottenTransaction(dsn)
    with Downstream(authorization=None, switches={CONTROL_PATH: forgotten}) as downstream:
        url = downstream.url("")
        pid = request(url, "start")["pid"]
        # the timeout makes pg_terminate_backend return once the backend has exited
        [row] = conn.execute("SELECT pg_terminate_backend(%s, 5000) AS gone", (pid,))
        assert row["gone"] is True
        # the very next status, with no wait: the session's FATAL message and then its end
        assert cli_text(url, "status") == (
            "no forgotten transaction is open (it was ended from outside)\n"
        )
        forgotten.close()


def test_end_names_the_session_it_ended_and_how_long_it_held_the_horizon(dsn):
    forgotten = ForgottenTransaction(dsn)
    with Downstream(authorization=None, switches={CONTROL_PATH: forgotten}) as downstream:
        url = downstream.url("")
        begun = time.monotonic()
        started = request(url, "start")
        pid = started["pid"]
        assert started["already_open"] is False
        time.sleep(1.2)
        for action, opened in (("status", "open"), ("start", "already open")):
            text = cli_text(url, action)
            match = re.fullmatch(
                rf"forgotten transaction {opened}: pid {pid}, application nightly-report, since "
                rf"{re.escape(started['since'])}, age (\d\.\d)s; end it with "
                rf"`demo-forgotten-transaction end` or SELECT pg_terminate_backend\({pid}\);\n",
                text,
            )
            assert match, text
            assert 1.1 <= float(match.group(1)) <= time.monotonic() - begun + 0.1
        assert request(url, "start")["already_open"] is True
        text = cli_text(url, "end")
        elapsed = time.monotonic() - begun
        match = re.fullmatch(
            rf"ended the forgotten transaction: pid {pid}, application nightly-report; it "
            r"held the xmin horizon for (\d\.\d)s\n",
            text,
        )
        assert match, text
        assert 1.1 <= float(match.group(1)) <= elapsed + 0.1
        assert cli_text(url, "end") == "no forgotten transaction is open\n"
        forgotten.close()


def sink_messages(sink: str) -> list[str]:
    with urllib.request.urlopen(f"{sink}/_sink/messages", timeout=5) as response:
        messages = json.loads(response.read())["messages"]
    return [m["text"] + json.dumps(m.get("blocks")) for m in messages if RULE in m["text"]]


def status_json(dsn: str) -> dict:
    result = subprocess.run(
        [sys.executable, "-m", "outbox_monitor", "status", "--json", "--dsn", dsn],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
        env={"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": os.environ["HOME"]},
    )
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)["health"]


def test_the_demos_forgotten_transaction_is_seen_alerted_once_and_resolved(tmp_path, monkeypatch):
    rules = shortened_demo_rules(
        tmp_path, monkeypatch, {RULE: {"threshold": THRESHOLD}}, alertmanager=False
    )
    with running_demo(tmp_path, timeout=120, environment={RULES_ENV: str(rules)}) as output:
        dsn = re.search(r"database\s+(postgresql://\S+)", output).group(1)
        url = re.search(r"demo-forgotten-transaction start --url (\S+)", output).group(1)
        sink = re.search(r"local Slack sink (http://\S+)", output).group(1)
        assert f"rules      {rules}: your rules, as they are" in output

        started = forgotten_transaction(url, "start")
        held_at = time.monotonic()
        first = status_json(dsn)
        holder = wait_until(
            lambda: [
                h
                for h in status_json(dsn)["xmin_horizon_holders"]
                if h["application"] == APPLICATION_NAME
            ],
            10,
            "the health to name the forgotten transaction",
        )[0]
        assert holder["command"] == f"SELECT pg_terminate_backend({started['pid']});"
        assert holder["state"] == "idle in transaction" and holder["held_seconds"] >= 0
        # the workers' claims and acks leave dead tuples no vacuum may remove now
        wait_until(
            lambda: status_json(dsn)["dead_tuples"] > first["dead_tuples"] + 100,
            60,
            "the dead tuples to climb",
            step=2,
        )

        # THRESHOLD in the test's rules (1 min in the demo's), evaluated every 2 s (30 s)
        [firing] = wait_until(lambda: sink_messages(sink), 150, "the firing message", step=2)
        alerted_after = time.monotonic() - held_at
        assert f"[FIRING] {RULE}" in firing and APPLICATION_NAME in firing
        assert f"pg_terminate_backend({started['pid']})" in firing

        assert forgotten_transaction(url, "end")["open"] is False
        messages = wait_until(
            lambda: len(sink_messages(sink)) == 2 and sink_messages(sink),
            60,
            "the resolved message",
            step=2,
        )
        assert f"[RESOLVED] {RULE}" in messages[1]
        assert status_json(dsn)["xmin_horizon_age_seconds"] < 60
        print(f"\ndemo horizon alerted {alerted_after:.0f} s after the transaction began")
