"""``outbox-monitor healthcheck``: the container HEALTHCHECK, aware of the role it runs.

One image runs several roles, chosen by its command (Dockerfile ``ENTRYPOINT``/``CMD``,
compose ``command``). The health check finds the container's service process — the
``outbox-monitor`` process with the lowest PID that is not itself a health check: PID 1 in
a container, or the child of an init such as tini — reads its command line, parses it
with the CLI's own options (defaults and ``OUTBOX_MONITOR_*`` variables included) and
probes what that role serves:

- ``dashboard``: Streamlit's ``/_stcore/health`` on ``--address``/``--port``, body ``ok``;
- ``scheduler``: ``/healthz`` on ``--metrics-address``/``--metrics-port`` (else
  ``OUTBOX_MONITOR_METRICS_ADDRESS``/``_PORT``), HTTP 200; with port 0 it serves nothing;
- any other command (``init-db``, ``simulate``, ``status`` …): nothing to probe, healthy.

Exit codes follow Docker's HEALTHCHECK: 0 healthy, 1 unhealthy. This module never
imports Streamlit and opens no database connection.
"""

import os
import urllib.error
import urllib.request
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import click

from outbox_monitor.config.settings import load_settings
from outbox_monitor.errors import OutboxMonitorError

PROGRAM = "outbox-monitor"
MODULE = "outbox_monitor"
HEALTHCHECK_COMMAND = "healthcheck"
DEFAULT_TIMEOUT_SECONDS = 5.0

HEALTHY = 0
UNHEALTHY = 1


@dataclass(frozen=True)
class Endpoint:
    """What one role serves: the options naming its address and port, the path, the body.

    ``from_settings``: an option left unset falls back to the ``Settings`` field of the
    same name (``OUTBOX_MONITOR_METRICS_PORT`` …), as the service itself resolves it.
    """

    address_option: str
    port_option: str
    path: str
    expected_body: str | None
    from_settings: bool = False


ENDPOINTS = {
    "dashboard": Endpoint("address", "port", "/_stcore/health", "ok"),
    "scheduler": Endpoint("metrics_address", "metrics_port", "/healthz", None, from_settings=True),
}
"""Roles with something to probe, by subcommand name."""


@dataclass(frozen=True)
class Service:
    """The process the health check is about."""

    pid: int
    role: str
    """The subcommand it runs (``dashboard``, ``scheduler``, ``init-db`` …)."""
    url: str | None
    """What to probe; ``None`` for a role that serves nothing."""
    expected_body: str | None = None


def cli_arguments(cmdline: Sequence[str]) -> list[str] | None:
    """The arguments given to ``outbox-monitor`` in a process's command line.

    Args:
        cmdline: ``/proc/<pid>/cmdline`` split on NUL, e.g. ``["/opt/venv/bin/python",
            "/opt/venv/bin/outbox-monitor", "dashboard", "--port", "8501"]`` (a console
            script runs under its interpreter) or ``[python, "-m", "outbox_monitor", …]``.

    Returns:
        The arguments after the program (``["dashboard", "--port", "8501"]``), or
        ``None`` when the process does not run outbox-monitor.
    """
    for index, word in enumerate(cmdline[:3]):
        if os.path.basename(word) == PROGRAM:
            return list(cmdline[index + 1 :])
        if word == "-m" and index + 1 < len(cmdline) and cmdline[index + 1] == MODULE:
            return list(cmdline[index + 2 :])
    return None


def subcommand(
    group: click.Group, arguments: Sequence[str]
) -> tuple[str, click.Command, list[str]] | None:
    """Split ``arguments`` into the subcommand and its own arguments.

    Args:
        group: the ``outbox-monitor`` click group.
        arguments: as returned by ``cli_arguments``.

    Returns:
        ``(name, command, rest)``, or ``None`` when no known subcommand is named.
    """
    ctx = click.Context(group, info_name=PROGRAM, resilient_parsing=True)
    try:
        rest = click.Command.parse_args(group, ctx, list(arguments))
        if not rest:
            return None
        name, command, rest = group.resolve_command(ctx, rest)
    except click.ClickException:
        return None
    if command is None or name is None:
        return None
    return name, command, list(rest)


def describe_service(group: click.Group, pid: int, arguments: Sequence[str]) -> Service | None:
    """The role of a process running ``outbox-monitor <arguments>`` and what to probe.

    The subcommand's options are parsed by click exactly as the service parsed them
    (defaults and ``envvar`` settings read from this process's environment, which in a
    container is the service's).

    Returns:
        The service, or ``None`` when the arguments name no known subcommand or the
        subcommand is ``healthcheck`` itself.

    Raises:
        click.ClickException: the subcommand's options do not parse.
        ConfigError: the ``OUTBOX_MONITOR_*`` settings do not load.
    """
    split = subcommand(group, arguments)
    if split is None or split[0] == HEALTHCHECK_COMMAND:
        return None
    name, command, rest = split
    endpoint = ENDPOINTS.get(name)
    if endpoint is None:
        return Service(pid=pid, role=name, url=None)
    parent = click.Context(group, info_name=PROGRAM)
    with command.make_context(name, rest, parent=parent) as ctx:
        params = dict(ctx.params)
    address, port = params.get(endpoint.address_option), params.get(endpoint.port_option)
    if endpoint.from_settings:
        settings = load_settings()
        address = address or getattr(settings, endpoint.address_option)
        port = getattr(settings, endpoint.port_option) if port is None else port
    if not port:
        return Service(pid=pid, role=name, url=None)
    return Service(
        pid=pid,
        role=name,
        url=f"http://{probe_host(address)}:{port}{endpoint.path}",
        expected_body=endpoint.expected_body,
    )


def probe_host(address: str) -> str:
    """The host to probe a server listening on ``address`` (all interfaces → loopback)."""
    host = "127.0.0.1" if address in ("0.0.0.0", "", "::") else address
    return f"[{host}]" if ":" in host else host


def processes(proc: Path = Path("/proc")) -> Iterator[tuple[int, list[str]]]:
    """``(pid, cmdline)`` of every process visible in ``proc``, lowest PID first.

    Processes that vanish or cannot be read meanwhile are skipped.
    """
    pids = sorted(int(entry.name) for entry in proc.iterdir() if entry.name.isdigit())
    for pid in pids:
        try:
            raw = (proc / str(pid) / "cmdline").read_bytes()
        except OSError:
            continue
        if raw:
            yield pid, raw.rstrip(b"\0").decode(errors="replace").split("\0")


def find_service(
    group: click.Group, *, pid: int | None = None, proc: Path = Path("/proc")
) -> Service | None:
    """The service this health check is about.

    Args:
        group: the ``outbox-monitor`` click group.
        pid: look only at this process; default: the lowest-PID outbox-monitor process
            that is not a health check (in a container: the one its command started).
        proc: the proc file system (tests pass another).

    Returns:
        The service, or ``None`` when no such process is visible (or ``pid`` does not
        run outbox-monitor).
    """
    for candidate, cmdline in processes(proc):
        if pid is not None and candidate != pid:
            continue
        arguments = cli_arguments(cmdline)
        if arguments is None:
            continue
        service = describe_service(group, candidate, arguments)
        if service is not None:
            return service
    return None


def probe(url: str, *, expected_body: str | None, timeout: float) -> str | None:
    """GET ``url``; ``None`` when it answers 200 (and ``expected_body``), else the problem."""
    try:
        with urllib.request.urlopen(url, timeout=timeout) as response:
            body = response.read().decode(errors="replace").strip()
    except urllib.error.HTTPError as error:
        return f"HTTP {error.code}"
    except (OSError, urllib.error.URLError) as error:
        return str(getattr(error, "reason", error))
    if expected_body is not None and body != expected_body:
        return f"answered {body[:80]!r}, expected {expected_body!r}"
    return None


def check_health(
    group: click.Group,
    *,
    pid: int | None = None,
    timeout: float = DEFAULT_TIMEOUT_SECONDS,
    proc: Path = Path("/proc"),
) -> tuple[int, str]:
    """Run the health check once.

    Args:
        group: the ``outbox-monitor`` click group (to parse the service's command line).
        pid: the service's PID; default: found as ``find_service`` does.
        timeout: seconds for the HTTP probe.
        proc: the proc file system.

    Returns:
        ``(exit_code, message)``: ``HEALTHY`` (0) or ``UNHEALTHY`` (1) and one line
        saying what was checked, e.g. ``"healthy: dashboard (pid 1) answers
        http://127.0.0.1:8501/_stcore/health"``.
    """
    try:
        service = find_service(group, pid=pid, proc=proc)
    except click.ClickException as error:
        return UNHEALTHY, f"unhealthy: cannot parse the service's options: {error.format_message()}"
    except OutboxMonitorError as error:
        return UNHEALTHY, f"unhealthy: cannot read the service's settings: {error}"
    if service is None:
        where = f"pid {pid}" if pid is not None else "this container"
        return HEALTHY, f"healthy: no outbox-monitor service in {where}; nothing to probe"
    label = f"{service.role} (pid {service.pid})"
    if service.url is None:
        return HEALTHY, f"healthy: {label} serves nothing; nothing to probe"
    problem = probe(service.url, expected_body=service.expected_body, timeout=timeout)
    if problem is None:
        return HEALTHY, f"healthy: {label} answers {service.url}"
    return UNHEALTHY, f"unhealthy: {label}: {service.url}: {problem}"
