"""``outbox-monitor init-db`` (the schema, the indexes, the roles' grants) and
``outbox-monitor status`` (every SPEC §2 figure)."""

import sys
from collections.abc import Callable
from textwrap import shorten
from typing import Any

import click

from outbox_monitor.cli.support import (
    DURATION,
    EXIT_ERROR,
    common_options,
    echo,
    emit_json,
    open_checked,
)
from outbox_monitor.config.fleet import SINGLE, Outbox
from outbox_monitor.config.settings import Settings
from outbox_monitor.durations import format_duration
from outbox_monitor.errors import OutboxMonitorError
from outbox_monitor.figures import metrics
from outbox_monitor.health.claim_plan import claim_plan_status
from outbox_monitor.logs import escape_controls
from outbox_monitor.store import grants, schema
from outbox_monitor.store.db import Database
from outbox_monitor.store.db_errors import describe_target
from outbox_monitor.store.indexes import retired_harm
from outbox_monitor.store.standby import ReplicaStatus, replica_status
from outbox_monitor.units import format_bytes, format_value, per_minute


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


@click.command(
    "init-db",
    short_help="Create the schema and the recommended indexes (with --create-table, a "
    "missing outbox table); with --print-grants, print the database roles' GRANT "
    "statements instead.",
)
@click.option(
    schema.CREATE_TABLE_FLAG,
    "create_table",
    is_flag=True,
    help="Create the outbox table and the workers' idempotency ledger when absent (a new, "
    "empty outbox). Without it, a table that does not exist stops init-db with exit 1, "
    "naming the tables of the database that have the outbox's columns: a misspelled "
    "--table never becomes an empty outbox.",
)
@click.option("--no-indexes", is_flag=True, help="Skip the recommended indexes.")
@click.option(
    "--flow-control",
    is_flag=True,
    help="Also create the index through which a claim skips the rows flow control holds "
    "(pending rows by event type): for teams that pause, limit or break event types. Each "
    "publish and retry then writes one more index entry (docs/flow-control.md).",
)
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
    create_table: bool,
    no_indexes: bool,
    flow_control: bool,
    print_grants: bool,
    viewer_role: str,
    scheduler_role: str,
    operator_role: str,
) -> None:
    """Create the outbox_monitor schema and the recommended indexes (CREATE INDEX
    CONCURRENTLY; partition by partition on a partitioned table) for an existing outbox
    table, and with --create-table the outbox table and ledger if absent. Idempotent; never
    alters your table.
    With --print-grants: print the roles' GRANT statements instead (docs/security.md)."""
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
        report = schema.init_db(
            db,
            create_table=create_table,
            create_indexes=not no_indexes,
            flow_control=flow_control,
        )
    payload = {
        "database": describe_target(settings.dsn),
        "created_tables": report.created_tables,
        "missing_tables": report.missing_tables,
        "applied_migrations": report.applied_migrations,
        "created_indexes": report.created_indexes,
        "dropped_indexes": report.dropped_indexes,
        "undropped_indexes": report.undropped_indexes,
        "unfinished_indexes": report.unfinished_indexes,
        "schema_version": report.schema_version,
        "near_tables": report.near_tables,
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
        _, table = settings.table_parts
        for name in report.dropped_indexes:
            echo(f"  ({name} was created by an earlier release; it {retired_harm(table, name)})")
        echo(f"  schema version: {report.schema_version}")
        for name in report.missing_tables:
            echo(
                f"warning: the workers' idempotency ledger {name} does not exist and was not "
                f"created: workers that guard their effects need it; `outbox-monitor init-db "
                f"{schema.CREATE_TABLE_FLAG}` creates it (OUTBOX_MONITOR_LEDGER_TABLE names "
                "another).",
                err=True,
            )
        for name, near in report.near_tables.items():
            echo(
                f"warning: created the new, empty outbox {name}, yet this database has "
                f"{' and '.join(near)} with the outbox's columns: if you meant "
                f"{near[0]}, set the table to it and drop {name} (DROP TABLE {name}).",
                err=True,
            )
        for name, reason in report.undropped_indexes.items():
            echo(
                f"error: could not drop {name}, which {retired_harm(table, name)}: {reason}. "
                "Everything else is done; run `outbox-monitor init-db` again.",
                err=True,
            )
        for name, reason in report.unfinished_indexes.items():
            echo(
                f"error: the recommended index {name} is not finished on the partitioned "
                f"table: {reason}. Everything else is done.",
                err=True,
            )
    if report.undropped_indexes or report.unfinished_indexes:
        sys.exit(EXIT_ERROR)


def _rows(count: int) -> str:
    """A count as the text output writes every count: ``3852`` → ``"3,852"``."""
    return format_value(count, "rows")


@click.command()
@click.option(
    "--window",
    type=DURATION,
    help="Window of latency, throughput, failures (default: OUTBOX_MONITOR_WINDOW or 1h).",
)
@click.option(
    "--lock-timeout",
    type=DURATION,
    help="Age after which a lock is stuck (default: OUTBOX_MONITOR_LOCK_TIMEOUT or 15m).",
)
@click.option("--event-type", help="Exact event type, or a LIKE pattern containing %.")
@common_options(every_outbox=True)
def status(
    outboxes: list[Outbox],
    as_json: bool,
    window: float | None,
    lock_timeout: float | None,
    event_type: str | None,
) -> None:
    """Every SPEC §2 figure, exact (seconds as floats, null where none); whether the
    database is a read replica, with its replay lag (key replica); the table's health: dead
    tuples, vacuums, sizes, who holds the xmin horizon (key health); and how Postgres plans
    the workers' claim (key health.claim_plan). With a fleet file and no --outbox, every
    outbox's, keyed by name (key outboxes; one that cannot be read has key error: exit 1);
    with --outbox, that outbox's alone."""
    options = {"window": window, "lock_timeout": lock_timeout, "event_type": event_type}
    named = click.get_current_context().params.get("outbox") is not None
    if len(outboxes) == 1 and (named or outboxes[0].name == SINGLE):
        figures, reading = _status(outboxes[0].settings, **options)
        emit_json(figures) if as_json else _print_status(figures, reading)
        return
    found: dict[str, dict[str, Any]] = {}
    readings: dict[str, ReplicaStatus] = {}
    for outbox in outboxes:
        try:
            found[outbox.name], readings[outbox.name] = _status(outbox.settings, **options)
        except OutboxMonitorError as error:
            found[outbox.name] = {"error": str(error.args[0]) if error.args else repr(error)}
    failed = [name for name, figures in found.items() if "error" in figures]
    if as_json:
        emit_json({"outboxes": found, "failed": failed})
    else:
        for name, figures in found.items():
            echo(f"outbox {name}")
            if "error" in figures:
                echo(f"  error: {figures['error']}", fg="red")
            else:
                _print_status(figures, readings[name])
    if failed:
        sys.exit(EXIT_ERROR)


def _status(settings: Settings, **options: Any) -> tuple[dict[str, Any], ReplicaStatus]:
    """``status --json``'s object of one outbox (``metrics.status`` with ``replica`` and
    ``health.claim_plan``) and its replica reading."""
    with open_checked(settings) as db:
        figures = metrics.status(db, **options)
        reading = replica_status(db)
        claim_plan = claim_plan_status(db)
    figures["replica"] = reading.as_json()
    figures.setdefault("health", {})["claim_plan"] = claim_plan
    return figures, reading


def _print_status(figures: dict[str, Any], reading: ReplicaStatus) -> None:
    latency = figures["latency_seconds"]
    lines = [
        ("queue depth (due now)", _rows(figures["queue_depth"])),
        ("pending total", _rows(figures["pending_total"])),
        ("scheduled retries", _rows(figures["scheduled_retries"])),
        ("retrying (attempts > 0)", _rows(figures["retrying"])),
        ("oldest pending age", format_duration(figures["oldest_pending_age_seconds"])),
        ("processing", _rows(figures["processing"])),
        ("stuck locks", _rows(figures["stuck_locks"])),
        ("latency p50 / p95 / p99", " / ".join(format_duration(latency[k]) for k in latency)),
        ("processed", per_minute(figures["processed_per_minute"])),
        ("created", per_minute(figures["created_per_minute"])),
        ("failed in window", _rows(figures["failed_in_window"])),
    ]
    echo(
        f"{figures['table']} at {figures['now']} "
        f"(window {format_duration(figures['window_seconds'])})"
    )
    for label, value in lines:
        echo(f"  {label:<26} {value}")
    for event, count in figures["failed_by_event_type"].items():
        echo(f"    failed {escape_controls(event):<19} {_rows(count)}")  # escaped, then aligned
    for group in figures["retry_error_groups"]:
        echo(
            f"    retrying {escape_controls(group['event_type']):<17} "
            f"{_rows(group['retrying'])}: {shorten(escape_controls(group['fingerprint']), 100)}"
        )
    histogram = "; ".join(f"{k}: {_rows(v)}" for k, v in figures["attempts_histogram"].items())
    echo(f"  {'rows by attempts':<26} {histogram or '–'}")
    for label, value in health_lines(figures["health"]):
        echo(f"  {label:<26} {value}")
    if reading.in_recovery:
        echo(f"  {'read from':<26} {reading.describe()}")
    for label, value in claim_plan_lines(figures["health"]["claim_plan"]):
        echo(f"  {label:<26} {value}")


def health_lines(health: dict[str, Any]) -> list[tuple[str, str]]:
    """``status``'s lines of the table's health (``metrics.status``'s ``health``): tuples,
    last autovacuum, sizes, the xmin horizon's holders with the command that ends each, and
    what this login cannot see."""
    fraction = format_value(health["dead_tuple_fraction"], "fraction")
    autovacuum = health["last_autovacuum"] or "never"
    if not health["autovacuum_enabled"]:
        autovacuum += " (autovacuum is off for this table)"
    lines = [
        ("dead / live tuples", f"{health['dead_tuples']:,} / {health['live_tuples']:,}"),
        ("dead tuple fraction", fraction),
        ("last autovacuum", autovacuum),
        (
            "table / indexes size",
            f"{format_bytes(health['table_bytes'])} / {format_bytes(health['indexes_bytes'])}",
        ),
        ("xmin horizon held", format_duration(health["xmin_horizon_age_seconds"])),
    ]
    for holder in health["xmin_horizon_holders"]:
        if holder["holds_horizon"]:
            held = format_duration(holder["held_seconds"])
            action = holder["command"] or holder["advice"]
            lines.append(("  held by", f"{holder['summary']} for {held}: {action}"))
    lines += [("hidden", note) for note in health["hidden"]]
    return lines


def claim_plan_lines(found: dict[str, Any]) -> list[tuple[str, str]]:
    """``status``'s lines of the claim's plan (``health.claim_plan.claim_plan_status``):
    each statement's shape and cost, what is wrong with it, and the workers' statements
    from ``pg_stat_statements`` (or why they are not shown)."""
    lines = []
    for plan in found["plans"]:
        verdict = "DEGRADED" if plan["degraded"] else "ok"
        lines.append(
            (
                f"claim plan ({plan['statement']})",
                f"{verdict}: {plan['shape']}, cost {plan['total_cost']:,.0f}",
            )
        )
        lines += [("  walks non-pending rows", reason) for reason in plan["reasons"]]
        if plan["cost_jumped"]:
            lines.append(("  cost jumped", f"from a median of {plan['baseline_cost']:,.0f}"))
    statements = found["statements"]
    if not statements["available"]:
        lines.append(("workers' statements", statements["note"]))
    for kind in statements["kinds"]:
        mean = kind["mean_exec_ms"]
        lines.append(
            (
                kind["label"],
                f"{per_minute(kind['calls_per_minute'])}, mean "
                f"{'–' if mean is None else f'{mean:.2f} ms'}, max {kind['max_exec_ms']:.2f} ms",
            )
        )
    return lines
