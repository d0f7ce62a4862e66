"""The ``outbox-monitor`` command: init-db, status, reap, replay, prune and the services."""

import json
import logging
import sys
from collections.abc import Callable
from functools import wraps
from typing import Any

import click

from outbox_monitor import actions, grants, metrics, schema
from outbox_monitor.access import local_identity
from outbox_monitor.cli.support import (
    DURATION,
    DURATION_OR_ZERO,
    EXIT_ERROR,
    ROW_ID,
    TABLE,
    LazyGroup,
    echo,
    emit_json,
    fail,
    open_checked,
    to_jsonable,
)
from outbox_monitor.config import Settings, load_settings
from outbox_monitor.db import Database
from outbox_monitor.db_errors import describe_target
from outbox_monitor.durations import format_duration, parse_instant
from outbox_monitor.errors import ActionInterrupted, ConfigError, OutboxMonitorError
from outbox_monitor.logs import configure_logging, escape_controls
from outbox_monitor.rates import per_minute

EXIT_NOT_CONFIRMED = 2


def common_options(command: Callable) -> Callable:
    """Add ``--dsn``, ``--table`` and ``--json`` and turn package errors into messages.

    Errors print ``error: <message>`` and the fix to stderr (or one JSON object with
    ``error`` and ``hint`` under ``--json``) and exit 1; an invalid setting (an
    ``OUTBOX_MONITOR_*`` variable, named) exits 2, as a bad option does.
    """

    @click.option(
        "--dsn",
        envvar=None,
        help="Database DSN (default: OUTBOX_MONITOR_DSN, DATABASE_URL, then libpq PG* variables).",
    )
    @click.option(
        "--table",
        type=TABLE,
        help="Outbox table, schema.table (default: OUTBOX_MONITOR_TABLE "
        "or public.integration_outbox).",
    )
    @click.option("--json", "as_json", is_flag=True, help="Print exactly one JSON object.")
    @wraps(command)
    def wrapper(*args: Any, dsn: str | None, table: str | None, as_json: bool, **kwargs: Any):
        try:
            settings = load_settings(dsn=dsn, table=table)
        except ConfigError as error:
            fail(error, as_json)
        try:
            return command(*args, settings=settings, as_json=as_json, **kwargs)
        except OutboxMonitorError as error:
            fail(error, as_json)

    return wrapper


class JsonAwareGroup(LazyGroup):
    """A group whose usage errors (``--window abc``, ``--id xyz``) are one JSON object on
    stdout when the command line has ``--json``, as every other outcome of ``--json`` is."""

    def main(self, args: Any = None, **extra: Any) -> Any:
        argv = list(sys.argv[1:] if args is None else args)
        if "--json" not in argv:
            return super().main(argv, **extra)
        try:
            outcome = super().main(argv, standalone_mode=False, **extra)
        except click.ClickException as error:
            command = error.ctx.command_path if getattr(error, "ctx", None) else "outbox-monitor"
            emit_json({"error": error.format_message(), "hint": f"see `{command} --help`"})
            sys.exit(error.exit_code)
        except click.Abort:
            sys.exit(EXIT_NOT_CONFIRMED)
        sys.exit(outcome if isinstance(outcome, int) else 0)


@click.group(
    cls=JsonAwareGroup,
    # The rules engine and YAML load only for the commands that read alerts.yml.
    lazy_subcommands={
        "check": "outbox_monitor.cli.alerting:check",
        "alerts": "outbox_monitor.cli.alerting:alerts",
    },
    context_settings={"help_option_names": ["-h", "--help"]},
)
@click.version_option(package_name="outbox-monitor")
@click.option(
    "--log-level",
    default="INFO",
    show_default=True,
    envvar="OUTBOX_MONITOR_LOG_LEVEL",
    show_envvar=True,  # an invalid value is then reported with the variable's name
    type=click.Choice(["DEBUG", "INFO", "WARNING", "ERROR"], case_sensitive=False),
)
def main(log_level: str) -> None:
    """outbox-monitor: watch and operate a Postgres transactional outbox (SPEC §1–4).

    Configuration comes from OUTBOX_MONITOR_* environment variables (see README);
    --dsn and --table override the database and the table per command.
    """
    configure_logging(log_level.upper())
    # The pool logs every failed reconnect; our own errors already say what is wrong.
    logging.getLogger("psycopg.pool").setLevel(logging.ERROR)


def _role_option(kind: str, default: str) -> Callable:
    def check(ctx: click.Context, param: click.Parameter, value: str) -> str:
        try:
            return grants.check_role_name(value)
        except ValueError as error:
            raise click.BadParameter(str(error)) from None

    return click.option(
        f"--{kind}-role",
        default=default,
        show_default=True,
        callback=check,
        help=f"Name of the {kind} role in --print-grants.",
    )


@main.command("init-db")
@click.option("--no-indexes", is_flag=True, help="Skip the recommended indexes.")
@click.option(
    "--print-grants",
    is_flag=True,
    help="Print the SQL that creates the viewer, scheduler and operator roles and grants "
    "each only what outbox-monitor's processes do, for the configured outbox table; "
    "connects to nothing and changes nothing. Run its output as the role that ran init-db.",
)
@_role_option("viewer", grants.DEFAULT_VIEWER_ROLE)
@_role_option("scheduler", grants.DEFAULT_SCHEDULER_ROLE)
@_role_option("operator", grants.DEFAULT_OPERATOR_ROLE)
@common_options
def init_db_command(
    settings: Settings,
    as_json: bool,
    no_indexes: bool,
    print_grants: bool,
    viewer_role: str,
    scheduler_role: str,
    operator_role: str,
) -> None:
    """Create the outbox table and ledger if absent, the outbox_monitor schema, and the
    recommended indexes (CREATE INDEX CONCURRENTLY). Idempotent; never alters your table.
    With --print-grants: print the roles' GRANT statements instead (README, Security)."""
    if print_grants:
        try:
            roles = grants.Roles(
                viewer=viewer_role, scheduler=scheduler_role, operator=operator_role
            )
        except ValueError as error:
            raise click.BadParameter(str(error), param_hint="--*-role") from None
        script = grants.grant_statements(settings, roles)
        if as_json:
            emit_json(
                {
                    "table": ".".join(settings.table_parts),
                    "roles": {
                        "viewer": roles.viewer,
                        "scheduler": roles.scheduler,
                        "operator": roles.operator,
                    },
                    "sql": script,
                }
            )
        else:
            click.echo(script)
        return
    with Database(settings) as db:
        report = schema.init_db(db, create_indexes=not no_indexes)
    payload = {
        "database": describe_target(settings.dsn),
        "created_tables": report.created_tables,
        "applied_migrations": report.applied_migrations,
        "created_indexes": report.created_indexes,
        "dropped_indexes": report.dropped_indexes,
        "undropped_indexes": report.undropped_indexes,
        "schema_version": report.schema_version,
    }
    if as_json:
        emit_json(payload)
    else:
        changes = ("created_tables", "applied_migrations", "created_indexes", "dropped_indexes")
        nothing = not any(payload[label] for label in changes)
        echo(f"init-db on {payload['database']}: " + ("already up to date" if nothing else "done"))
        for label in changes:
            for item in payload[label]:
                echo(f"  {label.replace('_', ' ')}: {item}")
        for name in report.dropped_indexes:
            echo(f"  ({name} was created by an earlier release; it slows the workers' claim)")
        echo(f"  schema version: {report.schema_version}")
        for name, reason in report.undropped_indexes.items():
            echo(
                f"error: could not drop {name}, which slows the workers' claim: {reason}. "
                "Everything else is done; run `outbox-monitor init-db` again.",
                err=True,
            )
    if report.undropped_indexes:
        sys.exit(EXIT_ERROR)


@main.command()
@click.option("--window", type=DURATION, help="Window of latency, throughput, failures (1h).")
@click.option("--lock-timeout", type=DURATION, help="Age after which a lock is stuck (15m).")
@click.option("--event-type", help="Exact event type, or a LIKE pattern containing %.")
@common_options
def status(
    settings: Settings,
    as_json: bool,
    window: float | None,
    lock_timeout: float | None,
    event_type: str | None,
) -> None:
    """Every SPEC §2 figure, exact (seconds as floats, null where none)."""
    with open_checked(settings) as db:
        figures = metrics.status(
            db, window=window, lock_timeout=lock_timeout, event_type=event_type
        )
    if as_json:
        emit_json(figures)
        return
    latency = figures["latency_seconds"]
    lines = [
        ("queue depth (due now)", figures["queue_depth"]),
        ("pending total", figures["pending_total"]),
        ("scheduled retries", figures["scheduled_retries"]),
        ("oldest pending age", format_duration(figures["oldest_pending_age_seconds"])),
        ("processing", figures["processing"]),
        ("stuck locks", figures["stuck_locks"]),
        ("latency p50 / p95 / p99", " / ".join(format_duration(latency[k]) for k in latency)),
        ("processed", per_minute(figures["processed_per_minute"])),
        ("created", per_minute(figures["created_per_minute"])),
        ("failed in window", figures["failed_in_window"]),
    ]
    echo(
        f"{figures['table']} at {figures['now']} "
        f"(window {format_duration(figures['window_seconds'])})"
    )
    for label, value in lines:
        echo(f"  {label:<26} {value}")
    for event, count in figures["failed_by_event_type"].items():
        echo(f"    failed {escape_controls(event):<19} {count}")  # escaped, then aligned
    histogram = ", ".join(f"{k}: {v}" for k, v in figures["attempts_histogram"].items())
    echo(f"  {'rows by attempts':<26} {histogram or '–'}")


def _action_options(command: Callable) -> Callable:
    for decorator in reversed(
        [
            click.option(
                "--actions-dsn",
                help="DSN of the login that acts, previews included (default: --dsn when "
                "given, else OUTBOX_MONITOR_ACTIONS_DSN, else the read DSN).",
            ),
            click.option("--dry-run", is_flag=True, help="Show the preview; change nothing."),
            click.option("--yes", "-y", is_flag=True, help="Apply without asking."),
            click.option(
                "--actor",
                help="Who acts, for the audit log (default: OUTBOX_MONITOR_ACTOR or the OS user).",
            ),
            click.option(
                "--batch-size",
                type=click.IntRange(1, 100_000),
                help="Rows per transaction (1000; prune 5000).",
            ),
        ]
    ):
        command = decorator(command)
    return command


def _open_for_actions(settings: Settings, actions_dsn: str | None) -> Database:
    """The ``Database`` of an action command, its outbox table checked: every read and
    write of the action (preview included) goes through the login that acts.

    ``--actions-dsn`` wins; then ``--dsn`` given on the command line (the whole command
    on the database the operator named); then ``OUTBOX_MONITOR_ACTIONS_DSN``; then the
    read DSN (``Settings.actions_target``).

    Raises:
        ConfigError (an invalid ``--actions-dsn``), TableMissing, ColumnsMissing,
        SchemaNotInitialised, DatabaseUnavailable, PermissionDenied.
    """
    given = click.get_current_context().params
    option = "--actions-dsn" if actions_dsn else "--dsn" if given.get("dsn") else None
    if option is not None:
        settings = load_settings(
            dsn=given.get("dsn"), table=given.get("table"), actions_dsn=actions_dsn or given["dsn"]
        )
    return open_checked(settings, purpose="actions", dsn_setting=option)


def _run_action(
    db: Database,
    preview: actions.Preview,
    *,
    as_json: bool,
    dry_run: bool,
    yes: bool,
    actor: str | None,
    batch_size: int | None,
) -> None:
    payload: dict[str, Any] = {
        "action": preview.action,
        "dry_run": dry_run,
        "matched": preview.matched,
        "filter": preview.filter,
        "sample": [{**row, "id": str(row["id"])} for row in preview.sample],
    }
    if not as_json:
        _print_preview(preview)
    if dry_run or preview.matched == 0:
        if as_json:
            emit_json({**payload, "applied": False})
        elif preview.matched == 0:
            echo("Nothing to do.")
        return
    if not yes:
        if not sys.stdin.isatty():
            message = "no terminal to confirm on and no --yes: nothing changed"
            if as_json:
                emit_json({**payload, "applied": False, "error": message})
            else:
                echo(f"{message}. Re-run with --yes to apply.", err=True)
            sys.exit(EXIT_NOT_CONFIRMED)
        if not click.confirm(f"{preview.action} {preview.matched} row(s)?", default=False):
            echo("Cancelled; nothing changed.", err=True)
            sys.exit(EXIT_NOT_CONFIRMED)

    def progress(done: int, total: int) -> None:
        echo(f"  {preview.action}: {done}/{total} rows", err=True)

    try:
        result = actions.apply(
            db,
            preview,
            actor=local_identity(db.settings, name=actor, source="cli"),
            batch_size=batch_size,
            on_progress=progress if preview.matched > (batch_size or 1000) else None,
        )
    except ActionInterrupted as error:
        if not as_json:
            raise  # `error: <summary>` and what to do, exit 1 (common_options)
        emit_json(
            {
                **payload,
                "applied": False,
                "interrupted": True,
                "run_id": error.run_id,
                "batches": error.batches,
                "changed": error.changed,
                "error": error.args[0],
                "cause": error.cause,
                "hint": error.hint,
            }
        )
        sys.exit(EXIT_ERROR)
    outcome = {
        "applied": True,
        "run_id": result.run_id,
        "changed": result.changed,
        "skipped": result.skipped,
        "dead_lettered": result.dead_lettered,
        "batches": result.batches,
        "ids": [str(i) for i in result.ids],
    }
    if result.applied_nothing:
        outcome["warning"] = actions.APPLIED_NOTHING
    if as_json:
        emit_json({**payload, **outcome})
        return
    echo(
        f"{preview.action}: {result.changed} row(s) changed, {result.skipped} no longer "
        f"eligible"
        + (f", {result.dead_lettered} dead-lettered" if result.dead_lettered else "")
        + f" (run {result.run_id})"
    )
    if result.applied_nothing:
        echo(f"warning: {actions.APPLIED_NOTHING}", err=True)


def _print_preview(preview: actions.Preview) -> None:
    echo(f"{preview.action} preview: {preview.matched} row(s) match")
    for row in preview.sample:
        details = ", ".join(
            f"{key}={format_duration(value) if key.endswith('_seconds') else value}"
            for key, value in row.items()
            if key != "id"
        )
        echo(f"  #{row['id']}: {details}")
    if preview.matched > len(preview.sample):
        echo(f"  … and {preview.matched - len(preview.sample)} more")


@main.command()
@click.option("--lock-timeout", type=DURATION, help="Locks older than this are stuck (15m).")
@click.option("--event-type", help="Exact event type, or a LIKE pattern containing %.")
@_action_options
@common_options
def reap(
    settings: Settings,
    as_json: bool,
    lock_timeout: float | None,
    event_type: str | None,
    actions_dsn: str | None,
    **options: Any,
) -> None:
    """Return stuck processing rows to pending as one more attempt (SPEC §4); a row at the
    maximum attempts is dead-lettered instead."""
    with _open_for_actions(settings, actions_dsn) as db:
        preview = actions.preview_reap(db, lock_timeout=lock_timeout, event_type=event_type)
        _run_action(db, preview, as_json=as_json, **options)


@main.command()
@click.option("--id", "ids", type=ROW_ID, multiple=True, help="A row id (repeatable).")
@click.option("--event-type", help="Exact event type, or a LIKE pattern containing %.")
@click.option("--error-group", help="Error group id (12 hex digits, see the dashboard).")
@click.option("--since", help="Failed at or after: a duration back from now (2h) or ISO-8601.")
@click.option("--until", help="Failed before: a duration back from now or ISO-8601.")
@_action_options
@common_options
def replay(
    settings: Settings,
    as_json: bool,
    ids: tuple[int, ...],
    event_type: str | None,
    error_group: str | None,
    since: str | None,
    until: str | None,
    actions_dsn: str | None,
    **options: Any,
) -> None:
    """Replay (redrive) dead-lettered rows: failed → pending, attempts 0, due now (SPEC §4)."""
    with _open_for_actions(settings, actions_dsn) as db:
        now = db.fetch_one("db_now")["now"]
        try:
            bounds = [parse_instant(text, now) if text else None for text in (since, until)]
        except ValueError as error:
            raise click.BadParameter(str(error), param_hint="--since/--until") from None
        selection = actions.ReplaySelection(
            ids=ids,
            event_type=event_type,
            error_group=error_group,
            since=bounds[0],
            until=bounds[1],
        )
        preview = actions.preview_replay(db, selection)
        _run_action(db, preview, as_json=as_json, **options)


@main.command()
@click.option(
    "--done-older-than",
    type=DURATION,
    default="30d",
    show_default=True,
    help="Delete done rows processed longer ago than this.",
)
@click.option(
    "--failed-older-than",
    type=DURATION,
    default="90d",
    show_default=True,
    help="Delete failed rows dead-lettered longer ago than this.",
)
@click.option("--event-type", help="Exact event type, or a LIKE pattern containing %.")
@_action_options
@common_options
def prune(
    settings: Settings,
    as_json: bool,
    done_older_than: float,
    failed_older_than: float,
    event_type: str | None,
    actions_dsn: str | None,
    **options: Any,
) -> None:
    """Delete old done and failed rows in batches (SPEC §1 retention); never pending or
    processing rows."""
    with _open_for_actions(settings, actions_dsn) as db:
        preview = actions.preview_prune(
            db,
            done_older_than=done_older_than,
            failed_older_than=failed_older_than,
            event_type=event_type,
        )
        _run_action(db, preview, as_json=as_json, **options)


@main.command()
@click.option(
    "--rules",
    "rules_path",
    type=click.Path(dir_okay=False),
    help="The alerts.yml (default: OUTBOX_MONITOR_RULES, ./alerts.yml, the shipped one).",
)
@click.option(
    "--metrics-port",
    type=click.IntRange(0, 65535),
    help="Serve /metrics and /healthz on this port; 0 disables "
    "(default: OUTBOX_MONITOR_METRICS_PORT or 9108).",
)
@click.option(
    "--metrics-address",
    help="Interface of /metrics and /healthz; 0.0.0.0 in a container "
    "(default: OUTBOX_MONITOR_METRICS_ADDRESS or 127.0.0.1).",
)
@common_options
def scheduler(
    settings: Settings,
    as_json: bool,
    rules_path: str | None,
    metrics_port: int | None,
    metrics_address: str | None,
) -> None:
    """Run the background scheduler until stopped: sampler, alert evaluator and Slack
    sender (and the optional reaper and pruner), each only in the process holding the
    evaluator lease; serves /metrics and /healthz."""
    from outbox_monitor.scheduler import run_scheduler

    run_scheduler(
        settings,
        rules_path=rules_path,
        metrics_port=metrics_port,
        metrics_address=metrics_address,
    )


@main.command()
@click.option("--address", default="127.0.0.1", show_default=True)
@click.option("--port", type=click.IntRange(1, 65535), default=8501, show_default=True)
@click.option("--with-scheduler", is_flag=True, help="Also run the scheduler in-process.")
@click.option(
    "--insecure-no-auth",
    is_flag=True,
    help="Serve on a non-loopback --address without sign-in (OUTBOX_MONITOR_AUTH local); "
    "prints a warning on every start.",
)
@common_options
def dashboard(
    settings: Settings,
    as_json: bool,
    address: str,
    port: int,
    with_scheduler: bool,
    insecure_no_auth: bool,
) -> None:
    """Serve the Streamlit dashboard (on 127.0.0.1 unless a sign-in mode is set)."""
    from outbox_monitor.serve import check_exposure, run_dashboard

    check_exposure(settings, address, insecure_no_auth=insecure_no_auth)
    with open_checked(settings):
        pass
    sys.exit(
        run_dashboard(
            settings,
            address=address,
            port=port,
            with_scheduler=with_scheduler,
            insecure_no_auth=insecure_no_auth,
        )
    )


def _traffic_options(command: Callable) -> Callable:
    """``--rate`` (events per second) and ``--workers`` of the simulated traffic."""
    command = click.option("--workers", type=click.IntRange(1, 64), default=4, show_default=True)(
        command
    )
    return click.option(
        "--rate",
        type=click.FloatRange(0.1, 10_000),
        default=20.0,
        show_default=True,
        help="Events per second.",
    )(command)


@main.command()
@click.option("--port", type=click.IntRange(1, 65535), default=8501, show_default=True)
@_traffic_options
@click.option(
    "--worker",
    type=click.Choice(["simulator", "n8n"]),
    default="simulator",
    show_default=True,
    help="Who works the outbox: simulated worker threads, or the real n8n running the "
    "shipped workflows (install it first: n8n/install.sh; see n8n/README.md).",
)
def demo(port: int, rate: float, workers: int, worker: str) -> None:
    """Throwaway local Postgres + realistic traffic + scheduler + dashboard; Ctrl-C stops
    everything and removes the database."""
    from outbox_monitor.demo.run import run_demo

    try:
        sys.exit(run_demo(port=port, rate=rate, workers=workers, worker=worker))
    except OutboxMonitorError as error:
        fail(error, as_json=False)


@main.command()
@_traffic_options
@click.option("--duration", type=DURATION, help="Stop after this long (default: until Ctrl-C).")
@click.option(
    "--backfill",
    type=DURATION_OR_ZERO,
    default="1h",
    show_default=True,
    help="History to insert before live traffic (0 for none).",
)
@common_options
def simulate(
    settings: Settings,
    as_json: bool,
    rate: float,
    workers: int,
    duration: float | None,
    backfill: float,
) -> None:
    """Publish realistic traffic and run simulated workers against any database."""
    from outbox_monitor.demo.simulate import run_simulation

    with open_checked(settings):
        pass
    counts = run_simulation(
        settings, rate=rate, workers=workers, duration=duration, backfill=backfill
    )
    click.echo(json.dumps(to_jsonable(counts)))


@main.command("healthcheck")
@click.option(
    "--pid",
    type=click.IntRange(1),
    help="The service's process (default: the container's outbox-monitor service).",
)
@click.option(
    "--timeout",
    type=click.FloatRange(0.1, 60),
    default=5.0,
    show_default=True,
    help="Seconds for the HTTP probe.",
)
def healthcheck_command(pid: int | None, timeout: float) -> None:
    """Container HEALTHCHECK: probe what the running role serves (dashboard: /_stcore/health,
    scheduler: /healthz); other commands are healthy. Exit 0 healthy, 1 unhealthy."""
    from outbox_monitor.healthcheck import check_health

    code, message = check_health(main, pid=pid, timeout=timeout)
    click.echo(message)
    sys.exit(code)
