"""The operator's actions on the outbox: ``reap``, ``replay`` and ``prune`` (SPEC §4),
each a preview, a confirmation and guarded batches with an audit row."""

import sys
from collections.abc import Callable
from typing import Any

import click

from outbox_monitor.access import local_identity
from outbox_monitor.actions.partition_lines import outcome_lines, preview_lines
from outbox_monitor.actions.preview import Preview
from outbox_monitor.actions.prune import preview_prune
from outbox_monitor.actions.reap import budget_lines, preview_auto_reap, preview_reap
from outbox_monitor.actions.replay import ReplaySelection, preview_replay
from outbox_monitor.actions.run import APPLIED_NOTHING, ActionResult, apply
from outbox_monitor.cli import replay_cli
from outbox_monitor.cli.support import (
    ACTIONS_DSN_OPTION,
    ACTOR_OPTION,
    DRY_RUN_OPTION,
    DURATION,
    EXIT_ERROR,
    EXIT_NOT_CONFIRMED,
    ROW_ID,
    common_options,
    echo,
    emit_json,
    open_for_actions,
)
from outbox_monitor.config.settings import Settings
from outbox_monitor.durations import format_duration, parse_instant
from outbox_monitor.errors import ActionInterrupted
from outbox_monitor.store.db import Database


def _action_options(command: Callable) -> Callable:
    for decorator in reversed(
        [
            ACTIONS_DSN_OPTION,
            DRY_RUN_OPTION,
            click.option("--yes", "-y", is_flag=True, help="Apply without asking."),
            ACTOR_OPTION,
            click.option(
                "--batch-size",
                type=click.IntRange(1, 100_000),
                help="Rows per transaction (1000; prune 5000).",
            ),
        ]
    ):
        command = decorator(command)
    return command


def _run_action(
    db: Database,
    preview: Preview,
    *,
    as_json: bool,
    dry_run: bool,
    yes: bool,
    actor: str | None,
    batch_size: int | None,
    follow: Callable[[ActionResult], dict[str, Any]] | None = None,
) -> None:
    """Preview, confirm and apply; ``follow`` (e.g. ``replay --watch``) runs after a run
    that changed rows and returns fields added to its JSON object."""
    payload: dict[str, Any] = {
        "action": preview.action,
        "dry_run": dry_run,
        "matched": preview.matched,
        "filter": preview.filter,
        "sample": [{**row, "id": str(row["id"])} for row in preview.sample],
    }
    if preview.details:
        payload["details"] = preview.details
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
        result = apply(
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
        outcome["warning"] = APPLIED_NOTHING
    if result.detached or result.kept:
        outcome["partitions_detached"] = list(result.detached)
        outcome["partitions_kept"] = result.kept
    if result.refused:
        outcome["refused"] = {str(row_id): cause for row_id, cause in result.refused.items()}
    if not as_json:
        echo(
            f"{preview.action}: {result.changed} row(s) changed, {result.skipped} no longer "
            f"eligible"
            + (f", {result.dead_lettered} dead-lettered" if result.dead_lettered else "")
            + f" (run {result.run_id})"
        )
        for line in outcome_lines(result.detached, result.kept):
            echo(f"  {line}")
        for row_id, cause in result.refused.items():
            echo(f"warning: row {row_id} left as it was, the table refused it: {cause}", err=True)
        if result.applied_nothing:
            echo(f"warning: {APPLIED_NOTHING}", err=True)
    if follow is not None and result.changed:
        outcome.update(follow(result))
    if as_json:
        emit_json({**payload, **outcome})
    if result.refused:  # applied but for the rows named: not a success to a script
        sys.exit(EXIT_ERROR)


def _print_preview(preview: Preview) -> None:
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
    for line in (
        replay_cli.detail_lines(preview) + preview_lines(preview.details) + budget_lines(preview)
    ):
        echo(line)


@click.command()
@click.option(
    "--lock-timeout",
    type=DURATION,
    help="Locks older than this are stuck (default: OUTBOX_MONITOR_LOCK_TIMEOUT or 15m).",
)
@click.option("--event-type", help="Exact event type, or a LIKE pattern containing %.")
@click.option(
    "--budget",
    is_flag=True,
    help="Take only what one run of the automatic reaper would: the oldest locks, at most "
    "OUTBOX_MONITOR_AUTO_REAP_MAX_ROWS and _MAX_SHARE of the stuck rows (with --dry-run: "
    "its next run's preview, and what the sampler saw of the rows' holders).",
)
@_action_options
@common_options
def reap(
    settings: Settings,
    as_json: bool,
    lock_timeout: float | None,
    event_type: str | None,
    budget: bool,
    actions_dsn: str | None,
    **options: Any,
) -> None:
    """Return stuck processing rows to pending as one more attempt (SPEC §4); a row at the
    maximum attempts is dead-lettered instead."""
    if budget and (lock_timeout is not None or event_type):
        raise click.UsageError(
            "--budget takes what the automatic reaper would (the settings' lock timeout, "
            "every event type): drop --lock-timeout and --event-type"
        )
    with open_for_actions(settings, actions_dsn) as db:
        if budget:
            preview = preview_auto_reap(db)
        else:
            preview = preview_reap(db, lock_timeout=lock_timeout, event_type=event_type)
        _run_action(db, preview, as_json=as_json, **options)


@click.command()
@click.option("--id", "ids", type=ROW_ID, multiple=True, help="A row id (repeatable).")
@click.option("--event-type", help="Exact event type, or a LIKE pattern containing %.")
@click.option("--error-group", help="Error group id (12 hex digits, see the dashboard).")
@click.option("--since", help="Failed at or after: a duration back from now (2h) or ISO-8601.")
@click.option("--until", help="Failed before: a duration back from now or ISO-8601.")
@replay_cli.replay_options
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
    rate: float | None,
    exclude_superseded: bool,
    watch: bool,
    watch_timeout: float,
    actions_dsn: str | None,
    **options: Any,
) -> None:
    """Replay (redrive) dead-lettered rows: failed → pending, attempts 0, due now (SPEC §4);
    with --rate, due one after another at that many rows/s (SPEC §5 drip)."""
    with open_for_actions(settings, actions_dsn) as db:
        now = db.fetch_one("db_now")["now"]
        try:
            bounds = [parse_instant(text, now) if text else None for text in (since, until)]
        except ValueError as error:
            raise click.BadParameter(str(error), param_hint="--since/--until") from None
        selection = ReplaySelection(
            ids=ids,
            event_type=event_type,
            error_group=error_group,
            since=bounds[0],
            until=bounds[1],
            exclude_superseded=exclude_superseded,
        )
        preview = preview_replay(db, selection, rate=rate)
        follow = replay_cli.watcher(db, as_json=as_json, timeout=watch_timeout) if watch else None
        _run_action(db, preview, as_json=as_json, follow=follow, **options)


@click.command()
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
@click.option(
    "--no-detach",
    is_flag=True,
    help="On a partitioned outbox, delete in batches even the partitions whose every row "
    "is past retention (by default detached whole and dropped).",
)
@_action_options
@common_options
def prune(
    settings: Settings,
    as_json: bool,
    done_older_than: float,
    failed_older_than: float,
    event_type: str | None,
    no_detach: bool,
    actions_dsn: str | None,
    **options: Any,
) -> None:
    """Delete old done and failed rows in batches (SPEC §1 retention); never pending or
    processing rows. On an outbox partitioned by created_at, a partition whose every row is
    past retention is detached and dropped whole (re-checked, audited)."""
    with open_for_actions(settings, actions_dsn) as db:
        preview = preview_prune(
            db,
            done_older_than=done_older_than,
            failed_older_than=failed_older_than,
            event_type=event_type,
            detach_partitions=not no_detach,
        )
        _run_action(db, preview, as_json=as_json, **options)
