"""Serve the Streamlit dashboard as a child process (``outbox-monitor dashboard`` and demo).

The dashboard reads its settings from ``OUTBOX_MONITOR_*`` variables, so the child gets
the parent's settings through its environment. This module never imports Streamlit.
"""

import contextlib
import os
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import IO

from outbox_monitor.config import ENV_PREFIX, Settings
from outbox_monitor.db import Database
from outbox_monitor.errors import OutboxMonitorError
from outbox_monitor.scheduler import build_scheduler, interrupt_on_sigterm, load_alerting

HEALTH_PATH = "/_stcore/health"
HEALTH_TIMEOUT_SECONDS = 90.0
STOP_TIMEOUT_SECONDS = 10.0


def dashboard_script() -> Path:
    """The path of ``dashboard.py`` at the repository root.

    Raises:
        OutboxMonitorError: it is absent (e.g. a non-editable install without the repo).
    """
    path = Path(__file__).resolve().parents[1] / "dashboard.py"
    if not path.is_file():
        raise OutboxMonitorError(
            f"the dashboard script is missing: {path}",
            hint="Run outbox-monitor from a checkout of the repository, installed with "
            "`pip install -e .` (the README's `make demo` does this).",
        )
    return path


def streamlit_command(*, address: str, port: int) -> list[str]:
    """The command line that serves the dashboard headless.

    Args:
        address: interface to listen on (``127.0.0.1`` unless you mean to expose it).
        port: TCP port.

    Returns:
        ``[python, -m, streamlit, run, <repo>/dashboard.py, --server.headless=true, …]``
        with usage statistics and the file watcher off.

    Raises:
        OutboxMonitorError: ``dashboard.py`` is absent.
    """
    return [
        sys.executable,
        "-m",
        "streamlit",
        "run",
        str(dashboard_script()),
        "--server.headless=true",
        f"--server.address={address}",
        f"--server.port={port}",
        "--browser.gatherUsageStats=false",
        "--server.fileWatcherType=none",
        "--client.toolbarMode=minimal",
    ]


def _number(value: float) -> str:
    return f"{value:.6f}".rstrip("0").rstrip(".")


def settings_environment(settings: Settings) -> dict[str, str]:
    """``OUTBOX_MONITOR_*`` variables that reproduce ``settings`` in a child process.

    Durations are written in seconds. ``dsn`` is left out when it is ``None`` (libpq
    ``PG*`` variables then apply in the child as in the parent).
    """
    env = {
        f"{ENV_PREFIX}TABLE": settings.table,
        f"{ENV_PREFIX}LOCK_TIMEOUT": _number(settings.lock_timeout),
        f"{ENV_PREFIX}MAX_ATTEMPTS": str(settings.max_attempts),
        f"{ENV_PREFIX}WINDOW": _number(settings.window),
        f"{ENV_PREFIX}STATEMENT_TIMEOUT": _number(settings.statement_timeout),
        f"{ENV_PREFIX}SAMPLE_INTERVAL": _number(settings.sample_interval),
        f"{ENV_PREFIX}SAMPLE_RETENTION": _number(settings.sample_retention),
        f"{ENV_PREFIX}REFRESH": _number(settings.refresh),
    }
    if settings.dsn:
        env[f"{ENV_PREFIX}DSN"] = settings.dsn
    if settings.ledger_table:
        env[f"{ENV_PREFIX}LEDGER_TABLE"] = settings.ledger_table
    if settings.actor:
        env[f"{ENV_PREFIX}ACTOR"] = settings.actor
    return env


def start_dashboard(
    settings: Settings, *, address: str, port: int, output: IO[bytes] | None = None
) -> subprocess.Popen:
    """Start Streamlit serving the dashboard; returns at once (see ``wait_until_healthy``).

    Args:
        settings: passed to the child as ``OUTBOX_MONITOR_*`` variables.
        address, port: where it listens.
        output: a binary file for the child's stdout and stderr; ``None`` inherits ours.

    Returns:
        The child process.

    Raises:
        OutboxMonitorError: ``dashboard.py`` is absent.
    """
    command = streamlit_command(address=address, port=port)
    env = {**os.environ, **settings_environment(settings)}
    return subprocess.Popen(
        command,
        env=env,
        cwd=dashboard_script().parent,
        stdout=output,
        stderr=subprocess.STDOUT if output is not None else None,
        stdin=subprocess.DEVNULL,
    )


def health_url(address: str, port: int) -> str:
    """The dashboard's health endpoint (``0.0.0.0``/``::`` are probed on localhost)."""
    host = "127.0.0.1" if address in ("0.0.0.0", "", "::") else address
    host = f"[{host}]" if ":" in host else host
    return f"http://{host}:{port}{HEALTH_PATH}"


def wait_until_healthy(
    process: subprocess.Popen,
    *,
    address: str,
    port: int,
    timeout: float = HEALTH_TIMEOUT_SECONDS,
    log_path: Path | None = None,
) -> float:
    """Wait until ``/_stcore/health`` answers ``ok``.

    Args:
        process: the Streamlit child.
        address, port: where it listens.
        timeout: seconds to wait at most.
        log_path: the child's output file, quoted in the error message.

    Returns:
        Seconds waited.

    Raises:
        OutboxMonitorError: the child exited first (e.g. the port is taken) or it did not
            answer within ``timeout``; the message carries the end of its output.
    """
    url = health_url(address, port)
    started = time.monotonic()
    while time.monotonic() - started < timeout:
        if process.poll() is not None:
            raise OutboxMonitorError(
                f"the dashboard exited with code {process.returncode} before answering "
                f"{url}{_tail(log_path)}",
                hint=f"Is port {port} already in use? Pick another one with --port.",
            )
        with (
            contextlib.suppress(OSError, urllib.error.URLError),
            urllib.request.urlopen(url, timeout=1) as response,
        ):
            if response.read().decode().strip() == "ok":
                return time.monotonic() - started
        time.sleep(0.2)
    raise OutboxMonitorError(
        f"the dashboard did not answer {url} within {timeout:g} s{_tail(log_path)}"
    )


def _tail(path: Path | None, chars: int = 2000) -> str:
    if path is None or not path.exists():
        return ""
    text = path.read_bytes()[-chars:].decode(errors="replace").strip()
    return f"; its output ends with:\n{text}" if text else ""


def stop_process(process: subprocess.Popen | None, timeout: float = STOP_TIMEOUT_SECONDS) -> None:
    """SIGTERM the child, wait up to ``timeout`` s, then SIGKILL it. No-op if it exited."""
    if process is None or process.poll() is not None:
        return
    process.terminate()
    try:
        process.wait(timeout)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


def run_dashboard(
    settings: Settings,
    *,
    address: str = "127.0.0.1",
    port: int = 8501,
    with_scheduler: bool = False,
) -> int:
    """``outbox-monitor dashboard``: serve the dashboard until it exits or Ctrl-C/SIGTERM.

    Args:
        settings: passed to the dashboard through its environment.
        address, port: where it listens.
        with_scheduler: also run the scheduler (sampler, alert evaluator and Slack sender
            with the rules of ``load_alerting``) in this process, in background threads,
            started with the server, not on a first page view.

    Returns:
        Streamlit's exit code; ``0`` when stopped by Ctrl-C or SIGTERM.

    Raises:
        OutboxMonitorError: ``dashboard.py`` is absent.
        RulesError: ``with_scheduler`` and the rules file is invalid.
    """
    db = scheduler = process = None
    try:
        if with_scheduler:
            ruleset, transports = load_alerting(None)
            db = Database(settings)
            scheduler = build_scheduler(db, blocking=False, ruleset=ruleset, transports=transports)
            scheduler.start()
        process = start_dashboard(settings, address=address, port=port)
        with interrupt_on_sigterm():
            return process.wait()
    except KeyboardInterrupt:
        return 0
    finally:
        stop_process(process)
        if scheduler is not None and scheduler.running:
            scheduler.shutdown(wait=True)
        if db is not None:
            db.close()
