"""Serve the Streamlit dashboard as a child process (``outbox-monitor dashboard`` and demo).

The dashboard reads its settings from ``OUTBOX_MONITOR_*`` variables, so the child gets
the parent's settings through its environment. This module never imports Streamlit.
"""

import contextlib
import json
import os
import subprocess
import sys
import tempfile
import time
import tomllib
import urllib.error
import urllib.request
from contextlib import ExitStack
from pathlib import Path
from typing import IO

from pydantic import SecretStr

from outbox_monitor.access import FORWARDED_ALLOW_IPS, is_loopback
from outbox_monitor.config.fleet import Fleet
from outbox_monitor.config.settings import ENV_PREFIX, Settings
from outbox_monitor.errors import ConfigError, OutboxMonitorError
from outbox_monitor.service.scheduler import background_scheduler, interrupt_on_sigterm
from outbox_monitor.shipped import shipped_folder

HEALTH_PATH = "/_stcore/health"
HEALTH_TIMEOUT_SECONDS = 90.0
STOP_TIMEOUT_SECONDS = 10.0
OIDC_PROMPT = "login"
"""Asked of the identity provider at sign-in (Streamlit's default, ``select_account``, is
Google's; ``login`` is understood by every OpenID provider)."""
PROXY_NO_GROUPS_WARNING = (
    "WARNING: proxy sign-in reads no groups header (OUTBOX_MONITOR_PROXY_GROUPS_HEADER is "
    "unset), so {entries} match no one: set it to the header your proxy sets and strips "
    "from clients' requests, e.g. X-Forwarded-Groups."
)
NO_ROLES_WARNING = (
    "WARNING: {mode} sign-in with no one mapped to a role (OUTBOX_MONITOR_ADMINS, "
    "_OPERATORS, _VIEWERS are empty): everyone who signs in is asked to ask for access."
)
INSECURE_WARNING = (
    "WARNING: the dashboard listens on {address} WITHOUT sign-in (--insecure-no-auth): "
    "anyone who reaches it can see payloads and replay, reap and prune as {actor}."
)


def check_exposure(settings: Settings, address: str, *, insecure_no_auth: bool) -> list[str]:
    """Check the sign-in settings before serving (docs/security.md).

    Args:
        settings: ``auth`` (``local``, ``oidc``, ``proxy``), the OIDC settings, the role
            mapping and ``insecure_no_auth``.
        address: the interface Streamlit will listen on (loopback: ``localhost``, any
            ``127.0.0.0/8`` address, ``::1``; see ``access.is_loopback``).
        insecure_no_auth: the ``--insecure-no-auth`` flag.

    Returns:
        The warnings to print on every start: serving without sign-in on a non-loopback
        address (asked for explicitly); proxy mode with ``groups=`` role
        entries but no groups header set (they match no one); a sign-in mode with no one
        mapped to a role.

    Raises:
        ConfigError: a non-loopback ``address`` in ``local`` mode without the flag (or
            ``OUTBOX_MONITOR_INSECURE_NO_AUTH=true``); ``oidc`` mode without the
            ``OUTBOX_MONITOR_OIDC_*`` settings or an ``[auth]`` section in a Streamlit
            secrets file; ``proxy`` mode on a non-loopback ``address`` with
            ``OUTBOX_MONITOR_TRUSTED_PROXIES`` empty (naming it).
    """
    exposed = not is_loopback(address)
    warnings = []
    if settings.auth != "local" and not (settings.admins or settings.operators or settings.viewers):
        warnings.append(NO_ROLES_WARNING.format(mode=settings.auth))
    if settings.auth == "oidc" and settings.oidc_client_id is None and not _auth_secrets():
        raise ConfigError(
            "OUTBOX_MONITOR_AUTH=oidc, but no OIDC settings are given",
            hint="Set OUTBOX_MONITOR_OIDC_METADATA_URL, _CLIENT_ID, _CLIENT_SECRET, "
            "_COOKIE_SECRET and _REDIRECT_URL, or write an [auth] section in "
            ".streamlit/secrets.toml (docs/security.md).",
        )
    if settings.auth == "proxy" and exposed and not settings.trusted_proxies:
        raise ConfigError(
            f"refusing to serve the dashboard in proxy mode on {address} with "
            "OUTBOX_MONITOR_TRUSTED_PROXIES empty: its identity headers would be believed "
            "from loopback only, so either no one signs in or the address is wrong",
            hint="Set OUTBOX_MONITOR_TRUSTED_PROXIES to the authenticating proxy's addresses "
            "(CIDRs, e.g. 10.0.0.0/8), or serve on 127.0.0.1 behind a proxy on this machine "
            "(docs/security.md).",
        )
    group_entries = [
        entry
        for entry in (*settings.admins, *settings.operators, *settings.viewers)
        if entry.startswith("groups=")
    ]
    if settings.auth == "proxy" and group_entries and not settings.proxy_groups_header:
        warnings.append(PROXY_NO_GROUPS_WARNING.format(entries=", ".join(group_entries)))
    if settings.auth != "local" or not exposed:
        return warnings
    if insecure_no_auth or settings.insecure_no_auth:
        return [INSECURE_WARNING.format(address=address, actor=settings.actor or "the OS user")]
    raise ConfigError(
        f"refusing to serve the dashboard on {address} without sign-in: anyone who reaches "
        "it could read payloads and replay, reap and prune",
        hint="Set OUTBOX_MONITOR_AUTH=oidc (sign-in) or proxy (behind an authenticating "
        "proxy), serve on 127.0.0.1, or pass --insecure-no-auth if a network boundary "
        "already guards it (docs/security.md).",
    )


def _auth_secrets() -> bool:
    """Whether a Streamlit secrets file Streamlit reads for the dashboard (the user's or
    the repository's ``.streamlit/secrets.toml``) has an ``[auth]`` section."""
    places = (Path.home() / ".streamlit", dashboard_script().parent / ".streamlit")
    for path in (folder / "secrets.toml" for folder in places):
        with contextlib.suppress(OSError, ValueError):
            if "auth" in tomllib.loads(path.read_text()):
                return True
    return False


def _toml_string(value: str) -> str:
    # A JSON string is a valid TOML basic string (same escapes for quotes, backslashes
    # and control characters).
    return json.dumps(value)


def oidc_secrets(settings: Settings) -> str | None:
    """Streamlit's ``[auth]`` secrets (``st.login``) from the ``OUTBOX_MONITOR_OIDC_*``
    settings, as TOML text, or ``None`` when they are unset (then Streamlit reads
    ``.streamlit/secrets.toml`` as usual)."""
    if settings.auth != "oidc" or settings.oidc_client_id is None:
        return None
    values = {
        "redirect_uri": settings.oidc_redirect_url,
        "cookie_secret": settings.oidc_cookie_secret.get_secret_value(),
        "client_id": settings.oidc_client_id,
        "client_secret": settings.oidc_client_secret.get_secret_value(),
        "server_metadata_url": settings.oidc_metadata_url,
    }
    lines = ["[auth]", *(f"{key} = {_toml_string(str(v))}" for key, v in values.items())]
    lines += ["", "[auth.client_kwargs]", f"prompt = {_toml_string(OIDC_PROMPT)}", ""]
    return "\n".join(lines)


def dashboard_script() -> Path:
    """The path of ``dashboard.py``: in the installed wheel (``outbox_monitor/app``), else
    at the checkout's root (``shipped.shipped_folder``); its ``pages/`` are beside it.

    Raises:
        OutboxMonitorError: it is absent (a package installed without it, e.g. built by
            hand from the package folder alone).
    """
    path = shipped_folder() / "dashboard.py"
    if not path.is_file():
        raise OutboxMonitorError(
            f"the dashboard script is missing: {path}",
            hint="Install the outbox-monitor wheel (`python -m build`, then `pip install "
            "dist/*.whl`), or run from a checkout installed with `pip install -e .`.",
        )
    return path


def streamlit_command(*, address: str, port: int, secrets_file: Path | None = None) -> list[str]:
    """The command line that serves the dashboard headless.

    Args:
        address: interface to listen on (``127.0.0.1`` unless you mean to expose it).
        port: TCP port.
        secrets_file: Streamlit secrets to read instead of the default places (the OIDC
            settings, see ``oidc_secrets``).

    Returns:
        ``[python, -m, outbox_monitor.ui.streamlit_main, run, <shipped>/dashboard.py,
        --server.headless=true, …]`` (Streamlit's command line, every page decided by
        ``st.navigation`` from the first run: ``ui.streamlit_main``) with usage statistics
        and the file watcher off, tracebacks kept off the page
        (``client.showErrorDetails=none``), and no per-run work the pages do not need:
        no full garbage collection after every script run (``runner.postScriptGC``: with
        pandas and altair loaded it takes 100-250 ms, during which the server sends
        nothing; Python's own generational collector still runs) and no "magic" rewrite of
        the scripts (``runner.magicEnabled``: pages never write bare expressions, and
        Streamlit recompiles the scripts whenever its last session closes).

    Raises:
        OutboxMonitorError: ``dashboard.py`` is absent.
    """
    return [
        sys.executable,
        "-m",
        "outbox_monitor.ui.streamlit_main",
        "run",
        str(dashboard_script()),
        "--server.headless=true",
        f"--server.address={address}",
        f"--server.port={port}",
        "--browser.gatherUsageStats=false",
        "--server.fileWatcherType=none",
        "--client.toolbarMode=minimal",
        # the last guard behind banners.show_unexpected: an error that escapes a page is
        # shown without its traceback (the server log keeps it)
        "--client.showErrorDetails=none",
        "--runner.postScriptGC=false",
        "--runner.magicEnabled=false",
        *([f"--secrets.files={secrets_file}"] if secrets_file else []),
    ]


def _number(value: float) -> str:
    return f"{value:.6f}".rstrip("0").rstrip(".")


def settings_environment(settings: Settings) -> dict[str, str]:
    """``OUTBOX_MONITOR_*`` variables that reproduce ``settings`` in a child process: every
    field of ``Settings``, so that a new setting cannot be forgotten on the way to the
    dashboard (a test loads them back and compares every field).

    Durations are written in seconds, lists as JSON arrays, booleans as ``true``/``false``,
    secrets in clear (the child needs them; they never reach a log). A field that is
    ``None`` is left out: the child then reads it as the parent did (``dsn``: libpq's
    ``PG*`` variables).
    """
    env = {}
    for name in Settings.model_fields:
        value = getattr(settings, name)
        if value is None:
            continue
        if isinstance(value, SecretStr):
            value = value.get_secret_value()
        if isinstance(value, bool):
            text = "true" if value else "false"
        elif isinstance(value, float):
            text = _number(value)
        elif isinstance(value, tuple):
            text = json.dumps(list(value))
        else:
            text = str(value)
        env[f"{ENV_PREFIX}{name.upper()}"] = text
    return env


def start_dashboard(
    settings: Settings,
    *,
    address: str,
    port: int,
    output: IO[bytes] | None = None,
    secrets_file: Path | None = None,
) -> subprocess.Popen:
    """Start Streamlit serving the dashboard; returns at once (see ``wait_until_healthy``).

    Args:
        settings: passed to the child as ``OUTBOX_MONITOR_*`` variables (with
            ``FORWARDED_ALLOW_IPS`` empty: uvicorn then believes no ``X-Forwarded-For``).
        address, port: where it listens.
        output: a binary file for the child's stdout and stderr; ``None`` inherits ours.
        secrets_file: see ``streamlit_command``.

    Returns:
        The child process.

    Raises:
        OutboxMonitorError: ``dashboard.py`` is absent.
    """
    command = streamlit_command(address=address, port=port, secrets_file=secrets_file)
    # uvicorn believes no X-Forwarded-For: st.context.ip_address is the connection's peer,
    # which proxy mode checks against OUTBOX_MONITOR_TRUSTED_PROXIES (ui.access._peer)
    env = {**os.environ, **settings_environment(settings), FORWARDED_ALLOW_IPS: ""}
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
    insecure_no_auth: bool = False,
    fleet: Fleet | None = None,
) -> int:
    """``outbox-monitor dashboard``: serve the dashboard until it exits or Ctrl-C/SIGTERM.

    Args:
        settings: passed to the dashboard through its environment.
        address, port: where it listens.
        with_scheduler: also run the scheduler (sampler, alert evaluator and Slack sender
            with the rules of ``load_alerting``, and its ``/metrics`` and ``/healthz`` on
            ``settings.metrics_address``/``metrics_port``) in this process, in background
            threads, started with the server, not on a first page view
            (``scheduler.background_scheduler``). It measures through ``OUTBOX_MONITOR_DSN``
            and writes through ``OUTBOX_MONITOR_PRIMARY_DSN``, else
            ``OUTBOX_MONITOR_ACTIONS_DSN`` when set (the read DSN may be a viewer role or a
            hot standby); with a ``fleet`` of several, every outbox of it, as
            ``outbox-monitor scheduler`` runs them.
        insecure_no_auth: serve a ``local``-mode dashboard on a non-loopback address
            anyway (a warning is printed on every start; see ``check_exposure``).
        fleet: the fleet file's outboxes the scheduler watches when there are several;
            ``None`` (or one): the single outbox of ``settings``.

    Returns:
        Streamlit's exit code; ``0`` when stopped by Ctrl-C or SIGTERM.

    Raises:
        ConfigError: a non-loopback address without sign-in, or in proxy mode without
            ``OUTBOX_MONITOR_TRUSTED_PROXIES`` (``check_exposure``).
        OutboxMonitorError: ``dashboard.py`` is absent.
        RulesError: ``with_scheduler`` and the rules file is invalid.
        TransportConfigError: ``with_scheduler`` and a Slack variable is set but invalid.
        ConfigError: ``with_scheduler`` and the metrics address or port cannot be served
            (``scheduler.start_metrics_server``), or its writes would reach a hot standby
            (naming ``OUTBOX_MONITOR_PRIMARY_DSN``), or a fleet's registry is unusable.
        RulesError: ``with_scheduler``, a ``fleet`` and a rule naming an outbox it lacks.
        TableMissing, ColumnsMissing, SchemaNotInitialised: ``with_scheduler`` and a
            fleet's outbox table (named); an unreachable outbox is logged and retried.
    """
    warnings = check_exposure(settings, address, insecure_no_auth=insecure_no_auth)
    for warning in warnings:
        print(warning, file=sys.stderr, flush=True)
    if insecure_no_auth:
        settings = settings.model_copy(update={"insecure_no_auth": True})
    scheduler = server = process = None
    databases = ExitStack()
    secrets_text = oidc_secrets(settings)  # sign-in only: no folder to leave behind otherwise
    secrets_dir = (
        tempfile.TemporaryDirectory(prefix="outbox-monitor-secrets-") if secrets_text else None
    )
    try:
        secrets_file = _write_secrets(secrets_text, Path(secrets_dir.name)) if secrets_dir else None
        if with_scheduler:
            scheduler, server = databases.enter_context(background_scheduler(settings, fleet))
            scheduler.start()
        process = start_dashboard(settings, address=address, port=port, secrets_file=secrets_file)
        with interrupt_on_sigterm():
            return process.wait()
    except KeyboardInterrupt:
        return 0
    finally:
        stop_process(process)
        if scheduler is not None and scheduler.running:
            scheduler.shutdown(wait=True)
        if server is not None:
            server.stop()
        databases.close()
        if secrets_dir is not None:
            secrets_dir.cleanup()


def _write_secrets(text: str, directory: Path) -> Path:
    path = directory / "secrets.toml"
    path.touch(mode=0o600)
    path.write_text(text)
    return path
