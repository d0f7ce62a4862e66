"""``outbox-monitor outboxes``: the fleet of outboxes (issue 16 item 1) — the file listed and,
with ``--check``, each outbox's database reached and its table checked."""

import sys
from typing import Any

import click
from psycopg.conninfo import conninfo_to_dict

from outbox_monitor.cli.support import (
    EXIT_ERROR,
    JSON_OPTION,
    echo,
    emit_json,
    open_checked,
    reports_errors,
)
from outbox_monitor.config.fleet import FLEET_ENV, Outbox, load_fleet
from outbox_monitor.config.settings import load_settings
from outbox_monitor.errors import OutboxMonitorError


def database_of(outbox: Outbox) -> str:
    """Where an outbox's figures are read, without secrets: ``host:port/dbname`` of its DSN
    (``"(libpq PG* variables)"`` when it has none)."""
    if not outbox.settings.dsn:
        return "(libpq PG* variables)"
    parts = conninfo_to_dict(outbox.settings.dsn)
    host = parts.get("host") or "localhost"
    port = f":{parts['port']}" if parts.get("port") else ""
    return f"{host}{port}/{parts.get('dbname') or parts.get('user') or ''}"


def _checked(outbox: Outbox) -> str | None:
    """``None`` when the outbox's table passes the table check, else the error's text and
    its fix on one line (``the outbox table public.x does not exist in this database; did
    you mean public.billing_outbox? Set the `table:` of outbox "billing" …``)."""
    try:
        open_checked(outbox.settings).close()
    except OutboxMonitorError as error:
        message = str(error.args[0]) if error.args else type(error).__name__
        stop = "" if message.endswith(("?", ".")) else "."
        return f"{message}{stop} {error.hint}" if error.hint else message
    return None


@click.command()
@click.option(
    "--file",
    "path",
    metavar="FILE",
    help=f"The fleet file (default: {FLEET_ENV}; without one, the OUTBOX_MONITOR_* settings' "
    "single outbox, named default).",
)
@click.option("--check", is_flag=True, help="Connect to each outbox and check its table.")
@JSON_OPTION
@reports_errors
def outboxes(path: str | None, check: bool, as_json: bool) -> None:
    """List the outboxes this control room watches: name, table, database (never a
    password) and labels. With --check, each is reached and its table checked.

    Exit 0: the file is valid (and with --check every outbox answered); 1: an outbox did
    not; 2: the file or a setting cannot be used (every problem named by outbox and field)."""
    fleet = load_fleet(load_settings(), path)
    rows: list[dict[str, Any]] = []
    for outbox in fleet.outboxes:
        row: dict[str, Any] = {
            "name": outbox.name,
            "table": outbox.settings.table,
            "database": database_of(outbox),
            "labels": dict(outbox.labels),
        }
        if check:
            error = _checked(outbox)
            row["reachable"] = error is None
            row["error"] = error
        rows.append(row)
    failed = sum(1 for row in rows if check and not row["reachable"])
    if as_json:
        emit_json({"file": fleet.path, "outboxes": rows, "failed": failed})
    else:
        for row in rows:
            labels = ", ".join(f"{k}={v}" for k, v in row["labels"].items())
            state = ""
            if check:
                state = "  ok" if row["reachable"] else f"  ERROR: {row['error']}"
            echo(f"{row['name']}  {row['table']}  {row['database']}  {labels}{state}".rstrip())
        source = fleet.path or "the OUTBOX_MONITOR_* settings (a fleet of one)"
        echo(f"{len(rows)} outbox(es) from {source}" + (f", {failed} failed" if check else ""))
    sys.exit(EXIT_ERROR if failed else 0)
