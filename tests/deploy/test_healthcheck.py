"""``outbox-monitor healthcheck``: which process it checks, what it probes, its verdicts —
against real HTTP servers and real processes (the sandboxed services are in
test_dockerfile.py)."""

import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from outbox_monitor.cli import main
from outbox_monitor.demo.pgcluster import free_port
from outbox_monitor.service.healthcheck import (
    HEALTHY,
    UNHEALTHY,
    check_health,
    cli_arguments,
    describe_service,
    find_service,
)

VENV_BIN = Path(sys.prefix) / "bin"


class Answer:
    """What the fake server answers: status and body per path."""

    def __init__(self) -> None:
        self.routes: dict[str, tuple[int, bytes]] = {}


@pytest.fixture
def server() -> Iterator[tuple[int, Answer]]:
    """A real HTTP server on 127.0.0.1 answering ``Answer.routes``."""
    answer = Answer()

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            status, body = answer.routes.get(self.path, (404, b"not found"))
            self.send_response(status)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield httpd.server_address[1], answer
    httpd.shutdown()
    httpd.server_close()


def fake_proc(root: Path, processes: dict[int, list[str]]) -> Path:
    """A /proc look-alike with ``<pid>/cmdline`` files (NUL-separated, as the kernel's)."""
    for pid, argv in processes.items():
        (root / str(pid)).mkdir(parents=True)
        (root / str(pid) / "cmdline").write_bytes(b"\0".join(a.encode() for a in argv) + b"\0")
    return root


SCRIPT = "/opt/venv/bin/outbox-monitor"
PYTHON = "/opt/venv/bin/python"
APP_DASHBOARD = "/opt/venv/lib/python3.11/site-packages/outbox_monitor/app/dashboard.py"
"""Where the image's Streamlit child runs the dashboard from (the installed wheel)."""


def test_cli_arguments_of_console_script_module_and_other_processes():
    assert cli_arguments([PYTHON, SCRIPT, "dashboard", "--port", "8501"]) == [
        "dashboard",
        "--port",
        "8501",
    ]
    assert cli_arguments(["outbox-monitor", "scheduler"]) == ["scheduler"]
    assert cli_arguments([PYTHON, "-m", "outbox_monitor", "init-db"]) == ["init-db"]
    assert cli_arguments(["tini", "--", "outbox-monitor", "scheduler"]) == ["scheduler"]
    streamlit_child = [PYTHON, "-m", "streamlit", "run", APP_DASHBOARD]
    assert cli_arguments(streamlit_child) is None
    assert cli_arguments(["/bin/sh", "-c", "outbox-monitor dashboard"]) is None


def test_dashboard_probe_follows_its_options(monkeypatch):
    service = describe_service(
        main, 1, ["--log-level", "DEBUG", "dashboard", "--address", "0.0.0.0", "--port=8765"]
    )
    assert service.role == "dashboard"
    assert service.url == "http://127.0.0.1:8765/_stcore/health"
    assert service.expected_body == "ok"
    default = describe_service(main, 1, ["dashboard"])
    assert default.url == "http://127.0.0.1:8501/_stcore/health"
    ipv6 = describe_service(main, 1, ["dashboard", "--address", "::1", "--port", "9000"])
    assert ipv6.url == "http://[::1]:9000/_stcore/health"


def test_scheduler_probe_follows_options_then_environment(monkeypatch):
    monkeypatch.delenv("OUTBOX_MONITOR_METRICS_PORT", raising=False)
    monkeypatch.delenv("OUTBOX_MONITOR_METRICS_ADDRESS", raising=False)
    assert describe_service(main, 1, ["scheduler"]).url == "http://127.0.0.1:9108/healthz"
    monkeypatch.setenv("OUTBOX_MONITOR_METRICS_PORT", "9200")
    monkeypatch.setenv("OUTBOX_MONITOR_METRICS_ADDRESS", "0.0.0.0")
    assert describe_service(main, 1, ["scheduler"]).url == "http://127.0.0.1:9200/healthz"
    given = describe_service(main, 1, ["scheduler", "--metrics-port", "9300"])
    assert given.url == "http://127.0.0.1:9300/healthz"
    off = describe_service(main, 1, ["scheduler", "--metrics-port", "0"])
    assert off.role == "scheduler" and off.url is None


def test_one_off_commands_serve_nothing_and_healthcheck_is_not_a_service():
    for arguments in (["init-db"], ["simulate", "--rate", "5"], ["status", "--json"]):
        service = describe_service(main, 1, arguments)
        assert service.role == arguments[0] and service.url is None
    assert describe_service(main, 1, ["healthcheck"]) is None
    assert describe_service(main, 1, ["no-such-command"]) is None
    assert describe_service(main, 1, ["--version"]) is None


def test_the_service_is_the_lowest_pid_outbox_monitor_process_not_a_healthcheck(tmp_path):
    proc = fake_proc(
        tmp_path,
        {
            1: [PYTHON, SCRIPT, "dashboard", "--address", "0.0.0.0"],
            7: [PYTHON, "-m", "streamlit", "run", APP_DASHBOARD],
            30: [PYTHON, SCRIPT, "healthcheck"],
        },
    )
    found = find_service(main, proc=proc)
    assert (found.pid, found.role) == (1, "dashboard")
    assert find_service(main, pid=7, proc=proc) is None

    behind_init = fake_proc(
        tmp_path / "init",
        {
            1: ["/sbin/docker-init", "--", "/bin/true"],
            6: [PYTHON, SCRIPT, "healthcheck"],
            7: [PYTHON, SCRIPT, "scheduler"],
        },
    )
    found = find_service(main, proc=behind_init)
    assert (found.pid, found.role) == (7, "scheduler")


def test_verdicts_against_a_real_server(tmp_path, server):
    port, answer = server
    proc = fake_proc(tmp_path, {1: [PYTHON, SCRIPT, "dashboard", "--port", str(port)]})
    url = f"http://127.0.0.1:{port}/_stcore/health"

    answer.routes["/_stcore/health"] = (200, b"ok")
    assert check_health(main, proc=proc) == (HEALTHY, f"healthy: dashboard (pid 1) answers {url}")

    answer.routes["/_stcore/health"] = (200, b"starting")
    code, message = check_health(main, proc=proc)
    assert code == UNHEALTHY and message.startswith(f"unhealthy: dashboard (pid 1): {url}: ")
    assert "'starting'" in message

    answer.routes["/_stcore/health"] = (503, b"ok")
    assert check_health(main, proc=proc) == (
        UNHEALTHY,
        f"unhealthy: dashboard (pid 1): {url}: HTTP 503",
    )


def test_scheduler_healthz_status_decides(tmp_path, server):
    port, answer = server
    proc = fake_proc(tmp_path, {1: [PYTHON, SCRIPT, "scheduler", "--metrics-port", str(port)]})
    answer.routes["/healthz"] = (200, b"anything")
    assert check_health(main, proc=proc)[0] == HEALTHY
    answer.routes["/healthz"] = (503, b"database unreachable")
    assert check_health(main, proc=proc)[0] == UNHEALTHY


def test_nothing_listening_is_unhealthy_and_no_service_is_healthy(tmp_path):
    port = free_port()
    proc = fake_proc(tmp_path / "a", {1: [PYTHON, SCRIPT, "dashboard", "--port", str(port)]})
    code, message = check_health(main, proc=proc, timeout=2)
    assert code == UNHEALTHY and "refused" in message.lower()
    empty = fake_proc(tmp_path / "b", {1: ["/bin/sleep", "60"]})
    assert check_health(main, proc=empty) == (
        HEALTHY,
        "healthy: no outbox-monitor service in this container; nothing to probe",
    )


def test_cli_checks_a_real_process_by_pid(tmp_path, server):
    """The installed command, on a real process whose command line is a dashboard's."""
    port, answer = server
    answer.routes["/_stcore/health"] = (200, b"ok")
    fake = tmp_path / "outbox-monitor"
    fake.write_text(f"#!{sys.executable}\nimport time\ntime.sleep(60)\n")
    fake.chmod(0o755)
    process = subprocess.Popen([str(fake), "dashboard", "--port", str(port)])
    try:
        deadline = time.monotonic() + 10
        cmdline = Path(f"/proc/{process.pid}/cmdline")
        while b"dashboard" not in cmdline.read_bytes() and time.monotonic() < deadline:
            time.sleep(0.02)
        command = [str(VENV_BIN / "outbox-monitor"), "healthcheck", "--pid", str(process.pid)]
        env = {k: v for k, v in os.environ.items() if not k.startswith("OUTBOX_MONITOR_")}
        healthy = subprocess.run(command, capture_output=True, text=True, env=env)
        assert healthy.returncode == 0, healthy.stdout + healthy.stderr
        assert healthy.stdout.strip() == (
            f"healthy: dashboard (pid {process.pid}) answers http://127.0.0.1:{port}/_stcore/health"
        )
        answer.routes.clear()
        unhealthy = subprocess.run(command, capture_output=True, text=True, env=env)
        assert unhealthy.returncode == 1
        assert unhealthy.stdout.startswith("unhealthy: dashboard")
    finally:
        process.kill()
        process.wait()
