"""What both demos (one outbox: ``demo.run``; a fleet: ``demo.fleet_run``) start and stop
alike: the port check, where alerts go (Slack or a local sink), Ctrl-C during cleanup, and
the exit code once the dashboard has stopped."""

import contextlib
import os
import signal
import subprocess
import threading
import time
from collections.abc import Callable
from pathlib import Path

from outbox_monitor.access import Identity, Role
from outbox_monitor.alerts.rules_file import load_rules, resolve_rules_path
from outbox_monitor.alerts.slack import API_URL_ENV, BOT_TOKEN_ENV
from outbox_monitor.demo.pgcluster import port_in_use
from outbox_monitor.demo.slack_sink import SlackSink
from outbox_monitor.errors import OutboxMonitorError

SLACK_VARIABLES = ("SLACK_WEBHOOK_URL", "SLACK_BOT_TOKEN")
"""Set either, and the demo posts to Slack; set neither, and to the local sink."""

DEMO_ADDRESS = "127.0.0.1"

# What both demos run with.
DEMO_SAMPLE_INTERVAL = 5.0  # seconds: the queue-depth chart moves while you watch
# A worker crash becomes a stuck lock after this long: 5 min instead of 15 so that the
# crashes of a demo session show up while it runs (the simulated batches take seconds).
DEMO_LOCK_TIMEOUT = 300.0
DEMO_BACKFILL = 3600.0
START_TIMEOUT = 120.0
DEMO_CONTROLS = Path(__file__).with_name("controls.yml")
"""The demo's controls file: a circuit breaker per downstream."""
DEMO_ACTOR = Identity("demo", Role.operator, "cli")


def check_port_free(port: int) -> None:
    """Refuse a dashboard ``port`` already in use on ``DEMO_ADDRESS``, before anything starts.

    Raises:
        OutboxMonitorError: with how to pick another port.
    """
    if port_in_use(DEMO_ADDRESS, port):
        raise OutboxMonitorError(
            f"port {port} on {DEMO_ADDRESS} is already in use",
            hint=f"Stop what is listening there, or pick another port: "
            f"`make demo ARGS='--port {port + 1}'` (or `.venv/bin/outbox-monitor demo --port "
            f"{port + 1}`).",
        )


@contextlib.contextmanager
def ignoring_sigint():
    """Let cleanup finish even if Ctrl-C is pressed again (main thread only)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


def route_to_sink(sink: SlackSink) -> str:
    """Point every Slack variable of the shipped rules at the local sink, in this process's
    environment (so the dashboard process inherits it: its test button posts there too)."""
    ruleset = load_rules(resolve_rules_path(None))
    for name in {route.webhook_url_env or "SLACK_WEBHOOK_URL" for route in ruleset.routes.values()}:
        os.environ[name] = sink.webhook_url
    os.environ.update({BOT_TOKEN_ENV: sink.token, API_URL_ENV: sink.api_url})
    return (
        f"local Slack sink {sink.url} (no SLACK_* variable set; see the Alerts page)\n"
        f"             for the CLI (`alerts test`): SLACK_WEBHOOK_URL='{sink.webhook_url}'"
    )


def alert_destination() -> tuple[SlackSink | None, str]:
    """Where the demo's alerts go: Slack when a ``SLACK_VARIABLES`` variable is set, else a
    local sink, started (``route_to_sink``). Returns the sink (``None``: Slack) and the
    banner's words for it."""
    if any(os.environ.get(name) for name in SLACK_VARIABLES):
        return None, "Slack, per the routes of alerts.yml and the SLACK_* variables"
    sink = SlackSink().start()
    return sink, route_to_sink(sink)


def wait_for_dashboard(process: subprocess.Popen, tick: Callable[[], None] | None = None) -> int:
    """Wait for the demo's dashboard ``process`` to exit (calling ``tick`` every 0.5 s
    meanwhile), then say so on stdout; returns the demo's exit code: 0 when Ctrl-C or
    SIGTERM stopped it (they reach the whole process group: Streamlit stops first), else
    the dashboard's own code."""
    while process.poll() is None:
        if tick is not None:
            tick()
        time.sleep(0.5)
    if process.returncode in (0, -signal.SIGINT, -signal.SIGTERM):
        print("\nstopping the demo…", flush=True)
        return 0
    print(f"the dashboard exited with code {process.returncode}; stopping", flush=True)
    return process.returncode
