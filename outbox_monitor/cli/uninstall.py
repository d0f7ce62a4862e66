"""``outbox-monitor uninstall``: preview, confirm, then drop the product's schema and the
indexes init-db created (``outbox_monitor.store.uninstall``)."""

import sys

import click

from outbox_monitor.access import local_identity
from outbox_monitor.cli.support import (
    ACTOR_OPTION,
    DRY_RUN_OPTION,
    EXIT_NOT_CONFIRMED,
    common_options,
    echo,
    emit_json,
)
from outbox_monitor.config.settings import Settings
from outbox_monitor.store.db import Database
from outbox_monitor.store.db_errors import describe_target
from outbox_monitor.store.uninstall import UninstallPlan, describe_plan, plan_uninstall, uninstall
from outbox_monitor.units import format_bytes


def _payload(plan: UninstallPlan, **more: object) -> dict[str, object]:
    return {
        "schema": plan.schema,
        "tables": plan.tables,
        "functions": plan.functions,
        "indexes": plan.indexes,
        "blockers": plan.blockers,
        **more,
    }


@click.command(
    "uninstall",
    short_help="Drop the outbox_monitor schema and the indexes init-db created (previewed, "
    "confirmed); never your tables or rows.",
)
@click.option("--yes", is_flag=True, help="Drop without asking (no terminal needed).")
@DRY_RUN_OPTION
@ACTOR_OPTION
@common_options
def uninstall_command(
    settings: Settings, as_json: bool, yes: bool, dry_run: bool, actor: str | None
) -> None:
    """Show what outbox-monitor added to the database — the outbox_monitor schema (its
    tables: samples, alerts, notifications, the audit log …; the workers' shared functions)
    and the indexes init-db created on the outbox table — then, confirmed, drop it.

    The outbox table, the idempotency ledger, their rows and every index of your own stay.
    Stop the workers that call outbox_monitor.claim/ack/fail and the scheduler first. Refused
    while an object outside the schema depends on it (it is named). The audit log goes with
    the schema: the uninstall is logged instead. Running it again says there is nothing to
    drop.
    """
    with Database(settings) as db:
        plan = plan_uninstall(db)
        target = f"{db.table_name} at {describe_target(db.settings.dsn)}"
        if plan.empty:
            if as_json:
                emit_json(_payload(plan, applied=False, nothing_to_drop=True))
            else:
                echo(f"Nothing of outbox-monitor's to drop on {target}.")
            return
        if not as_json:
            echo(f"Uninstall outbox-monitor from {target} would drop:")
            for line in describe_plan(plan):
                echo(f"  {line}")
            size = sum(plan.tables.values())
            echo(f"  ({format_bytes(size)} in the schema's tables; your tables and rows stay)")
            for blocker in plan.blockers:
                echo(f"  blocked by: {blocker}", err=True)
        if dry_run:
            if as_json:
                emit_json(_payload(plan, applied=False))
            return
        if not yes and not plan.blockers:
            if not sys.stdin.isatty():
                message = "no terminal to confirm on and no --yes: nothing dropped"
                if as_json:
                    emit_json(_payload(plan, applied=False, error=message))
                else:
                    echo(f"{message}. Re-run with --yes to drop.", err=True)
                sys.exit(EXIT_NOT_CONFIRMED)
            if not click.confirm("Drop all of this?", default=False):
                echo("Cancelled; nothing dropped.", err=True)
                sys.exit(EXIT_NOT_CONFIRMED)
        who = local_identity(settings, name=actor, source="cli").name
        dropped = uninstall(db, plan, actor=who)
        if as_json:
            emit_json(_payload(dropped, applied=True))
        else:
            echo(f"Dropped ({who}): " + "; ".join(describe_plan(dropped)))
