"""compose.yaml's ``n8n`` service (``--profile n8n``), its start script run as the container
runs it (the ``./n8n:/n8n:ro`` volume standing for ``/n8n``): the shipped credentials and
workflows are imported, every workflow activated, n8n serves, and published events are
processed once each."""

import os
import signal
import subprocess
import urllib.request
from pathlib import Path

import psycopg
import pytest
from psycopg.rows import dict_row

from outbox_monitor import outbox
from outbox_monitor.demo.downstream import IDEMPOTENT_PATH, LEDGER_PATH, Downstream, poller_settings
from outbox_monitor.demo.n8n_credentials import pg_environment
from outbox_monitor.demo.pgcluster import free_port
from tests.alerting import wait_for
from tests.deploy.deployfiles import compose
from tests.n8n.conftest import TOKEN

REPO = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.n8n


def _healthy(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2) as response:
            return response.status == 200
    except OSError:
        return False


def test_the_compose_n8n_service_imports_the_shipped_files_and_processes_events(
    dsn: str, n8n_binary: Path, downstream: Downstream, tmp_path: Path
):
    service = compose()["services"]["n8n"]
    assert service["entrypoint"] == ["tini", "--", "/bin/sh", "-c"]
    assert "./n8n:/n8n:ro" in service["volumes"]
    [script] = service["command"]
    script = script.replace("/n8n/", f"{REPO / 'n8n'}/")
    port = free_port()
    env = {
        "PATH": f"{n8n_binary.parent}:{os.environ['PATH']}",
        "HOME": str(tmp_path),
        "N8N_USER_FOLDER": str(tmp_path),
        "N8N_ENCRYPTION_KEY": "compose-test-" + "k" * 32,
        "N8N_LISTEN_ADDRESS": "127.0.0.1",
        "N8N_PORT": str(port),
        # the image runs its task runner in the container; here it would take a fixed port
        "N8N_RUNNERS_ENABLED": "false",
        **service["environment"],
        **pg_environment(dsn),  # the bundled postgres service, as this test's database
        **poller_settings(downstream, OUTBOX_POLL_SECONDS="1"),
        "OUTBOX_DOWNSTREAM_AUTHORIZATION": TOKEN,  # from the env file
    }
    log = (tmp_path / "n8n.log").open("wb")
    process = subprocess.Popen(
        ["/bin/sh", "-c", script],
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
        start_new_session=True,
    )
    keys = {"payment.captured:c1": IDEMPOTENT_PATH, "notification.email:c2": LEDGER_PATH}
    try:
        wait_for(
            lambda: _healthy(f"http://127.0.0.1:{port}/healthz") or process.poll() is not None,
            timeout=180,
        )
        assert process.poll() is None, (tmp_path / "n8n.log").read_text()[-3000:]
        assert _healthy(f"http://127.0.0.1:{port}/healthz"), "n8n did not answer /healthz"
        with psycopg.connect(dsn, autocommit=True, row_factory=dict_row) as conn:
            for key in keys:
                event_type = key.split(":")[0]
                outbox.publish(
                    conn,
                    event_type=event_type,
                    aggregate_type="order",
                    aggregate_id=key,
                    event_key=key,
                    payload={"key": key},
                )

            def statuses() -> list[str]:
                rows = conn.execute("SELECT status FROM integration_outbox").fetchall()
                return [row["status"] for row in rows]

            assert wait_for(lambda: statuses() == ["done", "done"], timeout=60), statuses()
        assert downstream.applied() == {(path, key): 1 for key, path in keys.items()}
    finally:
        os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(30)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
        log.close()
