"""``outbox-monitor demo --worker n8n``: the demo's traffic processed by the real n8n."""

import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import psycopg
import pytest

from outbox_monitor.config.settings import ENV_PREFIX
from outbox_monitor.demo.n8n_install import N8N_HOME_ENV
from outbox_monitor.demo.pgcluster import free_port

REPO = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.n8n


def _count(dsn: str, query: str) -> int:
    with psycopg.connect(dsn) as conn:
        return conn.execute(query).fetchone()[0]


def test_the_demo_runs_on_the_real_n8n(n8n_binary, tmp_path):
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith(ENV_PREFIX)}
    env["HOME"] = str(tmp_path)
    env[N8N_HOME_ENV] = str(n8n_binary.parents[2])  # HOME moved: name the install
    command = [sys.executable, "-m", "outbox_monitor", "demo", "--worker", "n8n"]
    process = subprocess.Popen(
        [*command, "--port", str(port), "--rate", "5"],
        cwd=REPO,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.extend(process.stdout), daemon=True)
    reader.start()
    try:
        deadline = time.monotonic() + 180
        while "Ctrl-C to stop" not in "".join(lines):
            assert process.poll() is None and time.monotonic() < deadline, "".join(lines)
            time.sleep(0.5)
        dsn = re.search(r"database\s+(postgresql://\S+)", "".join(lines)).group(1)
        live = (
            "SELECT count(*) FROM integration_outbox WHERE status = 'done'"
            " AND processed_at > now() - interval '1 minute'"
        )
        before = _count(dsn, live)
        # rows in flight are claimed by the n8n poller: its locked_by names the workflow
        in_flight = (
            "SELECT count(*) FROM integration_outbox"
            " WHERE status = 'processing' AND locked_by LIKE '%:wf-OutboxPoller0001:exec-%'"
        )
        seen_n8n_claim = False
        deadline = time.monotonic() + 60
        while not seen_n8n_claim or _count(dsn, live) <= before + 5:
            assert time.monotonic() < deadline, "n8n processed no live traffic"
            seen_n8n_claim = seen_n8n_claim or _count(dsn, in_flight) > 0
            time.sleep(0.2)
    finally:
        process.send_signal(signal.SIGINT)
        try:
            code = process.wait(90)
        finally:
            if process.poll() is None:  # deaf to Ctrl-C: SIGTERM stops it and its n8n
                process.terminate()
                process.wait(60)
            reader.join(5)
            process.stdout.close()
    assert code == 0, "".join(lines)
