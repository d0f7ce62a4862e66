"""Shared pieces of the command line: option types, JSON output, error exits."""

import importlib
import json
import sys
from collections.abc import Callable
from datetime import date, datetime
from decimal import Decimal
from functools import wraps
from typing import Any

import click

from outbox_monitor.config.fleet import FLEET_ENV, SINGLE, Outbox, load_fleet
from outbox_monitor.config.settings import Settings, load_settings
from outbox_monitor.config.values import split_table_name
from outbox_monitor.durations import parse_duration
from outbox_monitor.errors import ConfigError, OutboxMonitorError
from outbox_monitor.logs import escape_controls
from outbox_monitor.store import schema
from outbox_monitor.store.db import Database
from outbox_monitor.store.db_errors import READ_DSN_SETTING, writing_setting
from outbox_monitor.store.standby import refuse_standby

EXIT_ERROR = 1
EXIT_USAGE = 2
"""A bad option or setting, as click (and argparse) exit on a usage error."""
EXIT_NOT_CONFIRMED = 2
"""An action not confirmed (no terminal and no ``--yes``, or answered no): nothing changed."""
BIGINT_MAX = 2**63 - 1


class LazyGroup(click.Group):
    """A group whose subcommands named in ``lazy_subcommands`` (name -> ``"module:attribute"``)
    are imported only when chosen or listed by ``--help`` (click's documented pattern for
    lazily loaded subcommands), so other commands start without their dependencies."""

    def __init__(self, *args: Any, lazy_subcommands: dict[str, str], **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.lazy_subcommands = lazy_subcommands

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted([*super().list_commands(ctx), *self.lazy_subcommands])

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name not in self.lazy_subcommands:
            return super().get_command(ctx, cmd_name)
        module_name, attribute = self.lazy_subcommands[cmd_name].split(":")
        return getattr(importlib.import_module(module_name), attribute)


class DurationType(click.ParamType):
    """A positive duration option (``90s``, ``15m``, ``1h``, ``30d``) converted to seconds.

    Zero is refused: a zero lock timeout would reap rows that live workers still hold,
    and a zero window has no rows."""

    name = "duration"

    def __init__(self, *, allow_zero: bool = False) -> None:
        self.allow_zero = allow_zero

    def convert(self, value: Any, param: Any, ctx: Any) -> float:
        if isinstance(value, float):
            return value
        try:
            seconds = parse_duration(value)
        except ValueError as error:
            self.fail(str(error), param, ctx)
        if seconds <= 0 and not (self.allow_zero and seconds == 0):
            self.fail(f"must be longer than 0 s, got {value!r}", param, ctx)
        return seconds


class RowIdType(click.ParamType):
    """A row id given as text: a positive bigint (beyond 2^53 included; bigserial ids
    start at 1)."""

    name = "id"

    def convert(self, value: Any, param: Any, ctx: Any) -> int:
        try:
            number = int(str(value).strip())
        except ValueError:
            self.fail(f"expected an integer row id, got {value!r}", param, ctx)
        if not 1 <= number <= BIGINT_MAX:
            self.fail(f"{value} is not a row id: ids run from 1 to 2^63-1", param, ctx)
        return number


class TableNameType(click.ParamType):
    """``--table``: ``schema.table`` or ``table`` (``config.values.split_table_name``); a bad name
    is a usage error (exit 2) naming the option, as a bad duration is."""

    name = "schema.table"

    def convert(self, value: Any, param: Any, ctx: Any) -> str:
        try:
            split_table_name(value)
        except ValueError as error:
            self.fail(str(error), param, ctx)
        return value


DURATION = DurationType()
DURATION_OR_ZERO = DurationType(allow_zero=True)
ROW_ID = RowIdType()
TABLE = TableNameType()


def to_jsonable(value: Any) -> Any:
    """Make query results JSON-safe: datetimes → ISO-8601, Decimal → float, ids stay ints
    except in places that call ``str`` themselves (ids beyond 2^53 are strings there)."""
    if isinstance(value, dict):
        return {str(key): to_jsonable(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [to_jsonable(item) for item in value]
    if isinstance(value, datetime | date):
        return value.isoformat()
    if isinstance(value, Decimal):
        return float(value)
    return value


def emit_json(payload: dict[str, Any]) -> None:
    """Print one JSON object (``to_jsonable`` applied), indented, to stdout."""
    click.echo(json.dumps(to_jsonable(payload), indent=2, sort_keys=False))


def echo(text: str, *, err: bool = False, **style: Any) -> None:
    """Print one line of human-readable output, its control characters escaped as the
    logs escape them (``logs.escape_controls``: a newline becomes ``\\n``, ESC ``\\x1b``).

    Outbox text (event types, ``last_error``, the database's error text) reaches the
    terminal only through here, so it can neither start a line of its own (a forged
    ``error:`` or log line) nor move the cursor, retitle the terminal or ring its bell.
    ``--json`` output goes through ``emit_json`` (JSON escapes it already).

    Args:
        text: one line, without its newline.
        err: print to stderr instead of stdout.
        **style: ``click.style`` options (``fg="red"``).
    """
    click.secho(escape_controls(text), err=err, **style)


def fail(error: OutboxMonitorError, as_json: bool, exit_code: int | None = None) -> None:
    """Report a package error and exit: ``error: <message>`` and the fix on stderr,
    escaped (``echo``), or one JSON object ``{"error", "hint"}`` on stdout under
    ``--json``. Never returns.

    A ``ConfigError`` lists one problem per line (settings, alerts.yml: text from the
    operator's own configuration), so its lines stay lines, each escaped; any other
    error may quote the database or the outbox (a trigger's message, an event type), so
    it is printed as one line, its newlines escaped: it cannot forge a line of its own.

    The exit code is ``exit_code``, else ``EXIT_USAGE`` (2) for a ``ConfigError`` (a
    setting or option that cannot be used, whichever command reads it), else
    ``EXIT_ERROR`` (1)."""
    if exit_code is None:
        exit_code = EXIT_USAGE if isinstance(error, ConfigError) else EXIT_ERROR
    message = str(error.args[0]) if error.args else type(error).__name__
    if as_json:
        emit_json({"error": message, "hint": error.hint or None})
    else:
        first, *more = message.split("\n") if isinstance(error, ConfigError) else [message]
        echo(f"error: {first}", fg="red", err=True)
        for line in more:
            echo(line, fg="red", err=True)
        if error.hint:
            echo(error.hint, err=True)
    sys.exit(exit_code)


def open_checked(settings: Settings, **options: Any) -> Database:
    """A ``Database`` whose outbox table passed ``schema.check_outbox_table``.

    Args:
        settings: the connection and table.
        **options: more arguments of ``Database`` (``purpose``, ``dsn_setting``).

    Raises:
        TableMissing, ColumnsMissing, SchemaNotInitialised, DatabaseUnavailable.
    """
    db = Database(settings, **options)
    try:
        schema.check_outbox_table(db)
    except BaseException:
        db.close()
        raise
    return db


def open_for_actions(settings: Settings, actions_dsn: str | None) -> Database:
    """The ``Database`` of an action command, its outbox table checked: every read and
    write of the action (preview included) goes through the login that acts.

    ``--actions-dsn`` wins; then ``--dsn`` given on the command line (the whole command
    on the database the operator named); then ``OUTBOX_MONITOR_ACTIONS_DSN``; then the
    read DSN (``Settings.actions_target``). A hot standby there is refused before anything
    runs (``store.standby.refuse_standby``).

    Raises:
        ConfigError (an invalid ``--actions-dsn``; a DSN that is a hot standby, naming the
        setting or option to point at the primary), TableMissing, ColumnsMissing,
        SchemaNotInitialised, DatabaseUnavailable, PermissionDenied.
    """
    given = click.get_current_context().params
    option = "--actions-dsn" if actions_dsn else "--dsn" if given.get("dsn") else None
    if option is not None:
        settings = load_settings(
            dsn=given.get("dsn"), table=given.get("table"), actions_dsn=actions_dsn or given["dsn"]
        )
    db = open_checked(settings, purpose="actions", dsn_setting=option)
    try:
        refuse_standby(
            db,
            setting=writing_setting(db.dsn_setting, acting=True),
            fallback_of=READ_DSN_SETTING if db.dsn_setting == READ_DSN_SETTING else None,
            needs="operator actions (their previews included)",
        )
    except BaseException:
        db.close()
        raise
    return db


def reports_errors(command: Callable | None = None, *, exit_code: int | None = None) -> Callable:
    """Turn the package errors a command raises into ``fail``'s report and exit: the one
    place a command's error is printed. ``--json`` is read from the command's ``as_json``
    argument (absent: text).

    Use as ``@reports_errors`` (exit 1, or 2 for a ``ConfigError``) or
    ``@reports_errors(exit_code=2)`` (``check`` and ``alerts``: every error exits 2).
    """
    if command is None:
        return lambda command: reports_errors(command, exit_code=exit_code)

    @wraps(command)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return command(*args, **kwargs)
        except OutboxMonitorError as error:
            fail(error, kwargs.get("as_json", False), exit_code)

    return wrapper


DSN_OPTION = click.option(
    "--dsn",
    help="Database DSN (default: OUTBOX_MONITOR_DSN, DATABASE_URL, then libpq PG* variables).",
)
TABLE_OPTION = click.option(
    "--table",
    type=TABLE,
    help="Outbox table, schema.table (default: OUTBOX_MONITOR_TABLE or public.integration_outbox).",
)
ACTIONS_DSN_OPTION = click.option(
    "--actions-dsn",
    help="DSN of the login that acts, previews included (default: --dsn when "
    "given, else OUTBOX_MONITOR_ACTIONS_DSN, else the read DSN).",
)
ACTOR_OPTION = click.option(
    "--actor",
    help="Who acts, for the audit log (default: OUTBOX_MONITOR_ACTOR or the OS user).",
)
DRY_RUN_OPTION = click.option("--dry-run", is_flag=True, help="Show the preview; change nothing.")
JSON_OPTION = click.option("--json", "as_json", is_flag=True, help="Print exactly one JSON object.")


OUTBOX_OPTION = click.option(
    "--outbox",
    metavar="NAME",
    help=f"The outbox of the fleet file ({FLEET_ENV}) to use; required when it lists several.",
)


def command_outboxes(
    outbox: str | None, dsn: str | None, table: str | None, *, every: bool = False
) -> list[Outbox]:
    """The outboxes a command works on: ``--dsn``/``--table`` name one ad hoc; else the
    fleet's ``--outbox``; else the fleet's only outbox, or with ``every`` all of them.

    Raises:
        ConfigError: ``--outbox`` with ``--dsn``/``--table``; an unknown name; several
            outboxes and none named (the names listed); a setting or the fleet file that
            cannot be used (``FleetError``).
    """
    if dsn is not None or table is not None:
        if outbox is not None:
            raise ConfigError("--outbox and --dsn/--table: use one (--outbox reads the fleet file)")
        return [Outbox(SINGLE, load_settings(dsn=dsn, table=table))]
    fleet = load_fleet(load_settings())
    if outbox is not None:
        try:
            return [fleet.get(outbox)]
        except KeyError as error:
            raise ConfigError(f"--outbox: {error.args[0]}") from None
    if every or len(fleet.outboxes) == 1:
        return list(fleet.outboxes)
    raise ConfigError(
        f"{fleet.path} lists {len(fleet.outboxes)} outboxes: name one with --outbox "
        f"({', '.join(fleet.names)})"
    )


def common_options(
    command: Callable | None = None, *, json_output: bool = True, every_outbox: bool = False
) -> Callable:
    """Add ``--dsn``, ``--table``, ``--outbox`` and ``--json``, pass the command its
    ``settings`` (and ``as_json``) and turn package errors into messages (``reports_errors``).

    Use as ``@common_options``, or ``@common_options(json_output=False)`` for a command that
    prints no JSON (the services ``scheduler`` and ``dashboard``): no ``--json`` option then,
    and no ``as_json`` argument. With ``every_outbox`` the command gets ``outboxes`` (every
    outbox of the fleet when ``--outbox`` is not given, ``command_outboxes``) instead of
    ``settings``.

    Errors print ``error: <message>`` and the fix to stderr (or one JSON object with
    ``error`` and ``hint`` under ``--json``) and exit 1; an invalid setting (an
    ``OUTBOX_MONITOR_*`` variable, named, or the fleet file) exits 2, as a bad option does.
    """
    if command is None:
        return lambda command: common_options(
            command, json_output=json_output, every_outbox=every_outbox
        )

    @reports_errors
    @wraps(command)
    def wrapper(*args: Any, dsn: str | None, table: str | None, outbox: str | None, **kwargs: Any):
        targets = command_outboxes(outbox, dsn, table, every=every_outbox)
        if every_outbox:
            return command(*args, outboxes=targets, **kwargs)
        return command(*args, settings=targets[0].settings, **kwargs)

    options = DSN_OPTION(TABLE_OPTION(OUTBOX_OPTION(wrapper)))
    return JSON_OPTION(options) if json_output else options
