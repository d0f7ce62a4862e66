"""The real n8n worker: find the installed n8n, import the shipped workflows, run it headless.

Used by ``outbox-monitor demo --worker n8n`` and by the end-to-end test of the workflows
(tests/n8n). n8n is installed outside the repository, by ``n8n/install.sh``, into a cache
folder keyed by its version (``~/.cache/outbox-monitor/n8n-<version>``); this module never
installs anything. The local API the poller calls in the demo and the test is
``outbox_monitor.demo.downstream``.
"""

import contextlib
import json
import os
import re
import secrets
import shutil
import signal
import subprocess
import tempfile
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from psycopg.conninfo import conninfo_to_dict

from outbox_monitor.demo.pgcluster import free_port
from outbox_monitor.errors import ConfigError, OutboxMonitorError

N8N_VERSION = "1.123.81"
"""The n8n release the workflows are proven on (the newest that accepts Node 20)."""
N8N_HOME_ENV = "OUTBOX_MONITOR_N8N_HOME"
"""A folder holding ``node_modules/.bin/n8n`` (an install made elsewhere); overrides the cache."""
N8N_WORKFLOWS_ENV = "OUTBOX_MONITOR_N8N_WORKFLOWS"
"""The folder of workflow JSON files to import (default: the repository's n8n/workflows)."""
SHIPPED_FOLDER = Path(__file__).resolve().parents[2] / "n8n"
"""The repository's n8n folder: workflows/ and credentials/ (the files users import)."""
POLLER_ID = "OutboxPoller0001"
NUDGE_ID = "OutboxNudge00001"
NUDGE_PATH = "outbox-nudge"
POSTGRES_CREDENTIAL = "Outbox Postgres"
DOWNSTREAM_CREDENTIAL = "Outbox downstream"
POSTGRES_CREDENTIAL_ID = "OutboxPostgres01"
DOWNSTREAM_CREDENTIAL_ID = "OutboxDownstrm01"
"""The ids of the shipped credential files (n8n/credentials), so a re-import replaces them."""
START_TIMEOUT_SECONDS = 120.0
CLI_TIMEOUT_SECONDS = 180.0
STOP_TIMEOUT_SECONDS = 30.0
READY_LINE = "Editor is now accessible via"
"""n8n logs this once its server is up *and* the active workflows are activated."""
INSTALL_HINT = (
    "Install n8n {version} (once, ≈ 10 min and 1.8 GB, outside the repository) with "
    "`n8n/install.sh`, or point {env} at a folder holding node_modules/.bin/n8n."
)
_PLAIN_SSL_MODES = ("disable", "allow", "prefer")
"""libpq modes that accept a plain connection; n8n's credential has no fallback, so: ``disable``."""


class N8nNotFound(OutboxMonitorError):
    """No n8n install where this module looks; the hint says how to install it."""


class N8nError(OutboxMonitorError):
    """An n8n command failed or n8n did not start; the message quotes its output."""


def cache_folder(version: str = N8N_VERSION) -> Path:
    """Where ``n8n/install.sh`` installs n8n: ``$XDG_CACHE_HOME`` (or ``~/.cache``) /
    ``outbox-monitor/n8n-<version>``."""
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "outbox-monitor" / f"n8n-{version}"


def find_n8n(version: str = N8N_VERSION) -> Path:
    """The ``n8n`` executable: under ``$OUTBOX_MONITOR_N8N_HOME`` when set, else in the cache.

    Returns:
        The path of ``node_modules/.bin/n8n``.

    Raises:
        N8nNotFound: nothing there (or node missing); the hint says how to install it.
    """
    home = os.environ.get(N8N_HOME_ENV)
    folder = Path(home).expanduser() if home else cache_folder(version)
    binary = folder / "node_modules" / ".bin" / "n8n"
    hint = INSTALL_HINT.format(version=version, env=N8N_HOME_ENV)
    if not binary.exists():
        raise N8nNotFound(f"n8n is not installed: {binary} does not exist", hint=hint)
    if shutil.which("node") is None:
        raise N8nNotFound("n8n needs Node.js (node) on the PATH", hint=hint)
    return binary


def workflows_folder() -> Path:
    """The workflows to import: ``$OUTBOX_MONITOR_N8N_WORKFLOWS``, else this checkout's
    ``n8n/workflows``.

    Raises:
        N8nNotFound: the folder has no workflow JSON (an installed package without the repo).
    """
    override = os.environ.get(N8N_WORKFLOWS_ENV)
    folder = Path(override) if override else SHIPPED_FOLDER / "workflows"
    if not list(folder.glob("*.json")):
        raise N8nNotFound(
            f"no n8n workflows in {folder}",
            hint=f"Run from a checkout of outbox-monitor, or set {N8N_WORKFLOWS_ENV}.",
        )
    return folder


def pg_environment(dsn: str) -> dict[str, str]:
    """The libpq variables (``PGHOST``, ``PGPORT``, ``PGDATABASE``, ``PGUSER``,
    ``PGPASSWORD``, ``PGSSLMODE``) the shipped credential files read, for a DSN.

    Missing parts fall back to this process's ``PG*`` variables, then to libpq's defaults.

    Raises:
        ConfigError: the DSN names a Unix socket (n8n connects over TCP only).
    """
    parts = conninfo_to_dict(dsn)

    def part(key: str, variable: str, default: str) -> str:
        return str(parts.get(key) or os.environ.get(variable) or default).split(",")[0]

    host = part("host", "PGHOST", "localhost")
    if host.startswith("/"):
        raise ConfigError(
            f"n8n cannot use the Unix socket {host}",
            hint="Give a DSN with a TCP host, e.g. postgresql://user:pw@127.0.0.1:5432/db.",
        )
    return {
        "PGHOST": host,
        "PGPORT": part("port", "PGPORT", "5432"),
        "PGDATABASE": part("dbname", "PGDATABASE", "postgres"),
        "PGUSER": part("user", "PGUSER", "postgres"),
        "PGPASSWORD": str(parts.get("password") or os.environ.get("PGPASSWORD") or ""),
        "PGSSLMODE": part("sslmode", "PGSSLMODE", "prefer"),
    }


def postgres_credential(dsn: str, *, name: str = POSTGRES_CREDENTIAL) -> dict[str, Any]:
    """The n8n Postgres credential (plain, unencrypted import format) for a libpq DSN.

    Args:
        dsn: ``postgresql://user:password@host:port/db`` or ``key=value`` form; missing
            parts come from ``PG*`` variables (see ``pg_environment``).
        name: the credential's name, which the workflows reference.

    Returns:
        ``{"id", "name", "type": "postgres", "data": {host, port, database, user,
        password, ssl, ...}}`` for ``n8n import:credentials``. n8n has no ``prefer``
        (TLS, else plain): ``disable``/``allow``/``prefer`` give ``disable``, the
        others ``require``.

    Raises:
        ConfigError: the DSN names a Unix socket (n8n connects over TCP only).
    """
    env = pg_environment(dsn)
    return {
        "id": POSTGRES_CREDENTIAL_ID,
        "name": name,
        "type": "postgres",
        "data": {
            "host": env["PGHOST"],
            "port": int(env["PGPORT"]),
            "database": env["PGDATABASE"],
            "user": env["PGUSER"],
            "password": env["PGPASSWORD"],
            "maxConnections": 10,
            "allowUnauthorizedCerts": False,
            "ssl": "disable" if env["PGSSLMODE"] in _PLAIN_SSL_MODES else "require",
            "sshTunnel": False,
        },
    }


def header_credential(
    header: str, value: str, *, name: str = DOWNSTREAM_CREDENTIAL
) -> dict[str, Any]:
    """The n8n HTTP Header Auth credential sent to the downstream (e.g. ``Authorization``)."""
    return {
        "id": DOWNSTREAM_CREDENTIAL_ID,
        "name": name,
        "type": "httpHeaderAuth",
        "data": {"name": header, "value": value},
    }


def _tail(path: Path, chars: int = 3000) -> str:
    if not path.exists():
        return ""
    return path.read_bytes()[-chars:].decode(errors="replace").strip()


class N8n:
    """One headless n8n with its own temporary user folder (SQLite, settings, logs).

    Typical use::

        with N8n(dsn, settings={"OUTBOX_POLL_SECONDS": "5"}) as n8n:
            n8n.setup()        # credentials, workflows, activate both
            n8n.start()        # waits for /healthz and the activation of the workflows
            ...
            n8n.kill()         # a crash (SIGKILL); n8n.start() again later

    Args:
        dsn: the outbox database (the Postgres credential is generated from it).
        settings: the workflows' ``OUTBOX_*`` settings (see n8n/README.md), added to
            this process's environment for every n8n command.
        downstream_header: ``(header, value)`` of the HTTP Header Auth credential.
        port: the n8n port on 127.0.0.1 (default: a free one).
        binary: the ``n8n`` executable (default: ``find_n8n()``).
        workflows: the folder of workflow JSON to import (default: ``workflows_folder()``).

    Raises:
        N8nNotFound: from ``find_n8n`` / ``workflows_folder``.
    """

    def __init__(
        self,
        dsn: str,
        *,
        settings: Mapping[str, str] | None = None,
        downstream_header: tuple[str, str] = ("Authorization", "Bearer outbox-demo"),
        port: int | None = None,
        binary: Path | None = None,
        workflows: Path | None = None,
    ) -> None:
        self.binary = binary or find_n8n()
        self.workflows = workflows or workflows_folder()
        self.dsn = dsn
        self.settings = dict(settings or {})
        self.downstream_header = downstream_header
        self.port = port or free_port()
        self.folder = Path(tempfile.mkdtemp(prefix="outbox-n8n-"))
        self.log_path = self.folder / "n8n.log"
        self._encryption_key = secrets.token_hex(24)
        self._process: subprocess.Popen | None = None
        self._log: Any = None
        self._lock = threading.Lock()  # start() against close() from another thread
        self._closed = False

    # ----------------------------------------------------------------- setup
    @property
    def url(self) -> str:
        """``http://127.0.0.1:<port>`` (the editor, ``/healthz``, ``/webhook/…``)."""
        return f"http://127.0.0.1:{self.port}"

    @property
    def nudge_url(self) -> str:
        """The outbox-nudge webhook: POST ``{"event_key": …}``."""
        return f"{self.url}/webhook/{NUDGE_PATH}"

    def environment(self) -> dict[str, str]:
        """The environment of every n8n command: headless, loopback, env access allowed."""
        env = dict(os.environ)
        env.update(
            {
                "HOME": str(self.folder),
                "N8N_USER_FOLDER": str(self.folder),
                "N8N_ENCRYPTION_KEY": self._encryption_key,
                "N8N_LISTEN_ADDRESS": "127.0.0.1",
                "N8N_HOST": "127.0.0.1",
                "N8N_PORT": str(self.port),
                "N8N_PROTOCOL": "http",
                "WEBHOOK_URL": f"{self.url}/",
                "N8N_DIAGNOSTICS_ENABLED": "false",
                "N8N_PERSONALIZATION_ENABLED": "false",
                "N8N_VERSION_NOTIFICATIONS_ENABLED": "false",
                "N8N_TEMPLATES_ENABLED": "false",
                "N8N_SECURE_COOKIE": "false",
                # the workflows read their OUTBOX_* settings through $env
                "N8N_BLOCK_ENV_ACCESS_IN_NODE": "false",
                "N8N_ENFORCE_SETTINGS_FILE_PERMISSIONS": "true",
                # no task runner: the workflows have no Code node, and its broker would take
                # the fixed port 5679 (two n8n at once would clash); n8n logs a deprecation
                "N8N_RUNNERS_ENABLED": "false",
                "N8N_GIT_NODE_DISABLE_BARE_REPOS": "true",
                "N8N_GRACEFUL_SHUTDOWN_TIMEOUT": "10",
                "DB_SQLITE_POOL_SIZE": "2",
                "GENERIC_TIMEZONE": "UTC",
                "N8N_LOG_LEVEL": "info",
                "N8N_LOG_OUTPUT": "console",
            }
        )
        env.update(self.settings)
        return env

    def run_cli(self, *args: str, timeout: float = CLI_TIMEOUT_SECONDS) -> str:
        """Run ``n8n <args>`` to completion (n8n must not be running for DB-changing ones).

        Returns:
            Its combined output.

        Raises:
            N8nError: a non-zero exit, a logged error, or a timeout; with the output.
        """
        try:
            done = subprocess.run(
                [str(self.binary), *args],
                env=self.environment(),
                cwd=self.folder,
                capture_output=True,
                text=True,
                timeout=timeout,
                check=False,
            )
        except subprocess.TimeoutExpired as error:
            raise N8nError(f"`n8n {' '.join(args)}` did not finish within {timeout:g} s") from error
        output = (done.stdout or "") + (done.stderr or "")
        # n8n's import commands log an error and still exit 0
        if done.returncode != 0 or re.search(r"^An error occurred|^Error ", output, re.M):
            raise N8nError(f"`n8n {' '.join(args)}` failed (exit {done.returncode}):\n{output}")
        return output

    def import_credentials(self, folder: Path | None = None) -> None:
        """Import the two credentials the workflows name.

        Args:
            folder: credential files to import as they are (e.g. the shipped
                ``n8n/credentials``, which read ``PG*`` and
                ``OUTBOX_DOWNSTREAM_AUTHORIZATION`` from n8n's environment); by default
                they are generated: Postgres from the DSN, header auth from
                ``downstream_header``.
        """
        if folder is not None:
            self.run_cli("import:credentials", "--separate", f"--input={folder}")
            return
        path = self.folder / "credentials.json"
        path.write_text(
            json.dumps([postgres_credential(self.dsn), header_credential(*self.downstream_header)])
        )
        path.chmod(0o600)
        try:
            self.run_cli("import:credentials", f"--input={path}")
        finally:
            path.unlink()

    def import_workflows(self) -> None:
        """Import every workflow JSON of ``self.workflows`` (imported inactive)."""
        self.run_cli("import:workflow", "--separate", f"--input={self.workflows}")

    def set_active(self, workflow_id: str, active: bool = True) -> None:
        """Activate or deactivate one workflow (takes effect at the next ``start``)."""
        self.run_cli("update:workflow", f"--id={workflow_id}", f"--active={str(active).lower()}")

    def setup(self, *, activate: tuple[str, ...] = (POLLER_ID, NUDGE_ID)) -> None:
        """Import the credentials, then the workflows (which find the credentials by name),
        then activate ``activate`` (default: the poller and the nudge)."""
        self.import_credentials()
        self.import_workflows()
        for workflow_id in activate:
            self.set_active(workflow_id)

    # ---------------------------------------------------------------- process
    @property
    def running(self) -> bool:
        """Whether the ``n8n start`` process is alive."""
        return self._process is not None and self._process.poll() is None

    def start(self, timeout: float = START_TIMEOUT_SECONDS) -> float:
        """Start ``n8n start`` and wait until it answers ``/healthz`` with its workflows active.

        Returns:
            Seconds until ready.

        Raises:
            N8nError: it exited first, or was not ready within ``timeout``; with its log.
        """
        started = time.monotonic()
        with self._lock:
            if self._closed or self.running:
                raise N8nError("n8n is " + ("closed" if self._closed else "already running"))
            offset = self.log_path.stat().st_size if self.log_path.exists() else 0
            self._log = self.log_path.open("ab")
            process = self._process = subprocess.Popen(
                [str(self.binary), "start"],
                env=self.environment(),
                cwd=self.folder,
                stdin=subprocess.DEVNULL,
                stdout=self._log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        while time.monotonic() - started < timeout:
            if process.poll() is not None:
                raise N8nError(
                    f"n8n exited with code {process.returncode} while starting; "
                    f"its log ends with:\n{_tail(self.log_path)}"
                )
            if self._ready(offset):
                return time.monotonic() - started
            time.sleep(0.2)
        self.kill()
        raise N8nError(
            f"n8n was not ready within {timeout:g} s; its log ends with:\n{_tail(self.log_path)}"
        )

    def _ready(self, offset: int) -> bool:
        with self.log_path.open("rb") as log:
            log.seek(offset)
            if READY_LINE.encode() not in log.read():
                return False
        with (
            contextlib.suppress(OSError, urllib.error.URLError),
            urllib.request.urlopen(f"{self.url}/healthz", timeout=2) as response,
        ):
            return response.status == 200
        return False

    def stop(self, timeout: float = STOP_TIMEOUT_SECONDS) -> None:
        """Graceful stop (SIGTERM: n8n finishes running executions), SIGKILL after ``timeout``."""
        if self.running:
            assert self._process is not None
            self._process.terminate()
            try:
                self._process.wait(timeout)
            except subprocess.TimeoutExpired:
                self.kill()
        self._close_log()

    def kill(self) -> None:
        """A crash: SIGKILL n8n and its task runner at once (a batch in flight stays claimed)."""
        if self._process is not None and self._process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self._process.pid, signal.SIGKILL)
            self._process.wait()
        self._close_log()

    def _close_log(self) -> None:
        if self._log is not None:
            self._log.close()
            self._log = None

    def close(self) -> None:
        """Stop n8n and delete its user folder; a later ``start`` (another thread) refuses."""
        with self._lock:
            self._closed = True
        self.stop()
        shutil.rmtree(self.folder, ignore_errors=True)

    def __enter__(self) -> "N8n":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def nudge(self, event_key: str, timeout: float = 10.0) -> int:
        """POST ``{"event_key": …}`` to the outbox-nudge webhook; returns the HTTP status."""
        request = urllib.request.Request(
            self.nudge_url,
            data=json.dumps({"event_key": event_key}).encode(),
            headers={"Content-Type": "application/json"},
            method="POST",
        )
        try:
            with urllib.request.urlopen(request, timeout=timeout) as response:
                return response.status
        except urllib.error.HTTPError as error:
            return error.code
