"""Flow control from the command line (SPEC §5): ``pause``, ``resume``, ``limit``,
``breaker`` per event-type filter, ``controls`` to list them and ``controls apply`` for a
controls file. Every change is role-checked and audited by ``flow.controls``."""

from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any

import click

from outbox_monitor.access import local_identity
from outbox_monitor.cli.support import (
    ACTIONS_DSN_OPTION,
    ACTOR_OPTION,
    DRY_RUN_OPTION,
    DURATION,
    common_options,
    echo,
    emit_json,
    open_checked,
    open_for_actions,
)
from outbox_monitor.config.settings import Settings
from outbox_monitor.durations import parse_instant, until_label
from outbox_monitor.flow import controls as flow
from outbox_monitor.flow.controls import BYPASS_NOTE, HELD_ROWS_READ_NOTE
from outbox_monitor.flow.model import default_burst, describe
from outbox_monitor.store.db import Database

FollowUp = Callable[[Database, flow.ControlChange], tuple[dict[str, Any], list[str]]]
"""After a change: ``(JSON keys, lines)`` to add to its outcome."""


def _change_options(command: Any) -> Any:
    for decorator in reversed([ACTIONS_DSN_OPTION, ACTOR_OPTION, DRY_RUN_OPTION]):
        command = decorator(command)
    return command


def _report(
    db: Database,
    event_type_filter: str,
    *,
    as_json: bool,
    dry_run: bool,
    actor: str | None,
    action: str,
    changes: dict[str, Any] | None = None,
    clear: bool = False,
    override_seconds: float | None = None,
    follow_up: FollowUp | None = None,
) -> None:
    """Preview what the filter's rows would be held by, then apply (unless ``dry_run``);
    ``follow_up`` adds to the outcome (the silences of a pause or a resume)."""
    held = flow.preview_hold(db, event_type_filter)
    payload: dict[str, Any] = {
        "action": action,
        "event_type": event_type_filter,
        "due_rows_matching": held,
        "dry_run": dry_run,
    }
    if not as_json:
        total = sum(held.values())
        types = ", ".join(f"{t} {n}" for t, n in held.items()) or "none"
        echo(f"{action} {event_type_filter}: {total} due row(s) match now ({types})")
    if dry_run:
        if as_json:
            emit_json({**payload, "applied": False})
        return
    result = flow.change(
        db,
        event_type_filter,
        actor=local_identity(db.settings, name=actor, source="cli"),
        action=action,
        changes=changes,
        clear=clear,
        override_seconds=override_seconds,
    )
    outcome = {
        "applied": True,
        "changed": result.changed,
        "before": result.before.model_dump(mode="json") if result.before else None,
        "after": result.after.model_dump(mode="json") if result.after else None,
        "expires_at": result.expires_at,
        "audit_id": result.audit_id,
        "claims_in_flight": result.claims_in_flight,
        "barrier_note": result.barrier_note,
    }
    notes: list[str] = [f"WARNING: {result.barrier_note}"] if result.barrier_note else []
    if follow_up is not None:
        extra, more = follow_up(db, result)
        outcome.update(extra)
        notes.extend(more)
    outcome["claims_read_held_rows"] = flow.claims_read_held_rows(db)
    if outcome["claims_read_held_rows"] and result.after is not None:
        notes.append(HELD_ROWS_READ_NOTE)
    if as_json:
        emit_json({**payload, **outcome})
        return
    if not result.changed:
        echo(f"{action} {event_type_filter}: already so; nothing changed (audited)")
    if result.expires_at is not None:
        echo(
            f"  the controls file owns {event_type_filter}: this override lasts until "
            f"{result.expires_at.isoformat(timespec='seconds')}"
        )
    echo(f"  now: {describe(result.after)}")
    for note in notes:
        echo(f"  {note}")


@click.command()
@click.argument("event_type")
@click.option("--for", "for_", type=DURATION, help="Pause for this long (30m), then resume.")
@click.option("--until", help="Pause until this instant (ISO-8601) or a duration from now.")
@click.option("--reason", help="Why, shown on the dashboard and in the audit log.")
@click.option(
    "--silence",
    is_flag=True,
    help="Silence the alert rules this pause will trip (backlog, oldest age of these types) "
    "until it is resumed (at most a day without --for/--until).",
)
@_change_options
@common_options
def pause(
    settings: Settings,
    as_json: bool,
    event_type: str,
    for_: float | None,
    until: str | None,
    reason: str | None,
    silence: bool,
    actions_dsn: str | None,
    **options: Any,
) -> None:
    """Stop handing out EVENT_TYPE's rows (exact, or a pattern with %): they stay pending and
    keep their attempts (SPEC §5). The alert rules it will trip are listed, and silenced
    with --silence."""
    if for_ is not None and until is not None:
        raise click.UsageError("give --for or --until, not both")
    with open_for_actions(settings, actions_dsn) as db:
        now = db.fetch_one("db_now")["now"]
        try:
            end = (
                now + timedelta(seconds=for_)
                if for_ is not None
                else _future(until, now)
                if until
                else None
            )
        except ValueError as error:
            raise click.BadParameter(str(error), param_hint="--until") from None
        _report(
            db,
            event_type,
            as_json=as_json,
            action="pause",
            changes={"paused": True, "paused_until": end, "pause_reason": reason},
            follow_up=lambda db, change: _silence_for_pause(
                db, event_type, change.pause_ends, now, silence, options
            ),
            **options,
        )


def _silence_for_pause(
    db: Database,
    event_type: str,
    end: datetime | None,
    now: datetime,
    silence: bool,
    options: dict[str, Any],
) -> tuple[dict[str, Any], list[str]]:
    # alerts.yml loads only when a pause is applied: `status --json` and `--help` stay light.
    from outbox_monitor.alerts.pause_silences import rules_a_pause_trips, silence_for_pause
    from outbox_monitor.alerts.rules_file import load_rules, resolve_rules_path
    from outbox_monitor.errors import ConfigError

    try:
        tripped = rules_a_pause_trips(load_rules(resolve_rules_path()), event_type)
    except ConfigError as error:
        return {"rules_tripped": None}, [f"warning: no rules to silence: {error.args[0]}"]
    names = [item.rule.name for item in tripped]
    if not tripped:
        return {"rules_tripped": []}, []
    if not silence:
        return {"rules_tripped": names, "silences": []}, [
            f"this pause will trip: {', '.join(names)} (add --silence to silence them until "
            "resumed)"
        ]
    actor = local_identity(db.settings, name=options.get("actor"), source="cli")
    ids = silence_for_pause(db, tripped, event_type, until=end, now=now, actor=actor)
    return {"rules_tripped": names, "silences": ids}, [
        f"silenced until resumed: {', '.join(names)} (silences {', '.join(map(str, ids))})"
    ]


def _end_silences(db: Database, event_type: str, actor: str | None) -> tuple[dict, list[str]]:
    from outbox_monitor.alerts.pause_silences import end_pause_silences

    identity = local_identity(db.settings, name=actor, source="cli")
    now = db.fetch_one("db_now")["now"]
    ended = end_pause_silences(db, event_type, now=now, actor=identity)
    lines = [f"ended the pause's silences {', '.join(map(str, ended))}"] if ended else []
    return {"silences_ended": ended}, lines


def _future(text: str, now: Any) -> Any:
    """``--until``: an ISO-8601 instant, or a duration from now (``30m``)."""
    try:
        return now + timedelta(seconds=DURATION.convert(text, None, None))
    except click.BadParameter:
        instant = parse_instant(text, now)
    if instant <= now:
        raise ValueError(f"{text!r} is not in the future")
    return instant


@click.command()
@click.argument("event_type")
@_change_options
@common_options
def resume(
    settings: Settings, as_json: bool, event_type: str, actions_dsn: str | None, **options: Any
) -> None:
    """End EVENT_TYPE's pause; its limits and breaker stay (SPEC §5)."""
    with open_for_actions(settings, actions_dsn) as db:
        changes = {"paused": False, "paused_until": None, "pause_reason": None}
        _report(
            db,
            event_type,
            as_json=as_json,
            action="resume",
            changes=changes,
            follow_up=lambda db, _: _end_silences(db, event_type, options.get("actor")),
            **options,
        )


@click.command()
@click.argument("event_type")
@click.option("--concurrency", type=click.IntRange(1), help="At most N rows in processing.")
@click.option("--rate", type=click.FloatRange(min=0, min_open=True), help="Rows per second.")
@click.option("--burst", type=click.IntRange(1), help="Bucket size (default: one second's worth).")
@click.option("--no-concurrency", is_flag=True, help="Remove the concurrency limit.")
@click.option("--no-rate", is_flag=True, help="Remove the rate limit.")
@click.option("--for", "for_", type=DURATION, help="How long an override of a file control lasts.")
@_change_options
@common_options
def limit(
    settings: Settings,
    as_json: bool,
    event_type: str,
    concurrency: int | None,
    rate: float | None,
    burst: int | None,
    no_concurrency: bool,
    no_rate: bool,
    for_: float | None,
    actions_dsn: str | None,
    **options: Any,
) -> None:
    """Limit EVENT_TYPE's concurrency (rows in processing) and rate (token bucket, SPEC §5)."""
    changes: dict[str, Any] = {}
    if concurrency is not None or no_concurrency:
        changes["concurrency_limit"] = None if no_concurrency else concurrency
    if rate is not None or no_rate:
        changes["rate_per_second"] = None if no_rate else rate
        changes["burst"] = None if no_rate else burst or default_burst(rate or 1)
    elif burst is not None:
        raise click.UsageError("--burst goes with --rate")
    if not changes:
        raise click.UsageError("give --concurrency, --rate, --no-concurrency or --no-rate")
    with open_for_actions(settings, actions_dsn) as db:
        _report(
            db,
            event_type,
            as_json=as_json,
            action="limit",
            changes=changes,
            override_seconds=for_,
            **options,
        )


@click.command()
@click.argument("event_type")
@click.option("--on/--off", "enabled", required=True, help="Switch the circuit breaker.")
@click.option("--window", type=DURATION, help="Outcomes counted over this window (60s).")
@click.option("--min-attempts", type=click.IntRange(1), help="Outcomes needed to open (20).")
@click.option("--ratio", type=click.FloatRange(0, 1, min_open=True), help="Failure ratio (0.9).")
@click.option("--cooldown", type=DURATION, help="Open for this long before a probe (30s).")
@click.option("--for", "for_", type=DURATION, help="How long an override of a file control lasts.")
@_change_options
@common_options
def breaker(
    settings: Settings,
    as_json: bool,
    event_type: str,
    enabled: bool,
    window: float | None,
    min_attempts: int | None,
    ratio: float | None,
    cooldown: float | None,
    for_: float | None,
    actions_dsn: str | None,
    **options: Any,
) -> None:
    """Switch EVENT_TYPE's circuit breaker: open (as a pause) when transient failures reach the
    ratio of its outcomes, probe once after the cool-down, close on the probe's ack (SPEC §5)."""
    changes: dict[str, Any] = {"breaker": enabled}
    for name, value in (
        ("breaker_window_seconds", window),
        ("breaker_min_attempts", min_attempts),
        ("breaker_ratio", ratio),
        ("breaker_cooldown_seconds", cooldown),
    ):
        if value is not None:
            changes[name] = value
    with open_for_actions(settings, actions_dsn) as db:
        _report(
            db,
            event_type,
            as_json=as_json,
            action="breaker",
            changes=changes,
            override_seconds=for_,
            **options,
        )


def control_json(control: flow.Control) -> dict[str, Any]:
    """One control as ``controls --json`` prints it (seconds and rows/s as numbers)."""
    return {
        "event_type": control.event_type_filter,
        "state": control.state,
        "layer": control.layer,
        "settings": control.settings.model_dump(mode="json"),
        "grant": control.grant,
        "processing": control.processing,
        "tokens": control.tokens,
        "breaker_state": control.breaker_state,
        "breaker_cooldown_seconds_now": control.cooldown_seconds,
        "breaker_next_probe_at": control.next_probe_at,
        "rows_held": control.rows_held,
        "held_by_event_type": control.held,
        "rows_throttled": control.throttled,
        "override_expires_at": control.expires_at,
        "file_settings": control.file_settings.model_dump(mode="json")
        if control.file_settings
        else None,
        "updated_at": control.updated_at,
        "updated_by": control.updated_by,
    }


@click.group(invoke_without_command=True)
@common_options
@click.pass_context
def controls(ctx: click.Context, settings: Settings, as_json: bool) -> None:
    """The flow controls in force (SPEC §5): state, rows held and throttled per event type."""
    if ctx.invoked_subcommand is not None:
        return
    with open_checked(settings) as db:
        found = flow.controls(db)
        reads_held = flow.claims_read_held_rows(db)
    if as_json:
        emit_json(
            {
                "controls": [control_json(c) for c in found],
                "claims_read_held_rows": reads_held,
                "note": BYPASS_NOTE,
            }
        )
        return
    if not found:
        echo("No controls: every due row is handed out.")
    for control in found:
        held = f", {control.rows_held} due row(s) held" if control.rows_held else ""
        throttled = f", {control.throttled} throttled" if control.throttled else ""
        who = "controls file" if control.layer == "file" else f"operator {control.updated_by}"
        echo(f"{control.event_type_filter}: {control.state}{held}{throttled} (set by {who})")
        echo(f"  {describe(control.settings, now=control.now)}")
        if control.breaker_note:
            echo(f"  breaker: {control.breaker_note}")
        if control.file_settings is not None and control.expires_at is not None:
            echo(
                f"  overrides the controls file until "
                f"{until_label(control.expires_at, control.now)}; the file says: "
                f"{describe(control.file_settings, now=control.now)}"
            )
    if found and reads_held:
        echo(HELD_ROWS_READ_NOTE)
    echo(BYPASS_NOTE)


@controls.command("apply")
@click.argument("path", type=click.Path(dir_okay=False))
@_change_options
@common_options
def apply_command(
    settings: Settings,
    as_json: bool,
    path: str,
    actions_dsn: str | None,
    actor: str | None,
    dry_run: bool,
) -> None:
    """Make the file-owned controls equal the controls file PATH (idempotent; operators'
    overrides stay until they expire)."""
    # YAML loads only for this command: `status --json` and `--help` stay light.
    from outbox_monitor.flow.controls_file import apply_controls, load_controls

    wanted = load_controls(path)
    with open_for_actions(settings, actions_dsn) as db:
        identity = local_identity(db.settings, name=actor, source="cli")
        report = apply_controls(db, wanted, actor=identity, dry_run=dry_run)
        reads_held = flow.claims_read_held_rows(db)
    if as_json:
        emit_json(
            {
                "path": path,
                "dry_run": dry_run,
                "written": report.written,
                "removed": report.removed,
                "unchanged": report.unchanged,
                "audit_id": report.audit_id,
                "barrier_note": report.barrier_note,
                "claims_read_held_rows": reads_held,
            }
        )
        return
    verb, gone = ("would write", "would remove") if dry_run else ("wrote", "removed")
    echo(
        f"{path}: {verb} {len(report.written)}, {gone} {len(report.removed)}, "
        f"unchanged {len(report.unchanged)}"
    )
    for name in report.written:
        echo(f"  {verb}: {name}: {describe(wanted[name])}")
    for name in report.removed:
        echo(f"  {gone}: {name}")
    if report.barrier_note:
        echo(f"WARNING: {report.barrier_note}")
    if wanted and reads_held:
        echo(HELD_ROWS_READ_NOTE)
