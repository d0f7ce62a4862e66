"""The controls of an outbox table (SPEC §5): what is in force, what each holds now, and the
operator's changes — role-checked, audited, and never undoing a controls file for good.

Rows live in ``outbox_monitor.controls`` in two layers. ``file`` rows come from
``outbox-monitor controls apply``; ``ui`` rows are an operator's changes (dashboard or CLI).
For a filter the file owns, the operator's change is an override that expires
(``DEFAULT_OVERRIDE_SECONDS`` unless said otherwise), after which the file's settings are in
force again; ``apply`` never touches it. The claim reads the same rows
(``outbox_monitor.effective_controls``), so what this module shows is what workers obey.
"""

from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, Literal

from psycopg import sql

from outbox_monitor.access import Identity, Role
from outbox_monitor.durations import clock_label, format_duration, until_label
from outbox_monitor.errors import ActionRefused
from outbox_monitor.flow.model import (
    DEFAULT_OVERRIDE_SECONDS,
    ControlSettings,
    check_filter,
    matches,
)
from outbox_monitor.flow.rows import (
    Layer,
    barrier,
    check_table,
    deleted,
    key,
    lock,
    save,
    settings_of,
    written,
)
from outbox_monitor.store.audit import require_audited
from outbox_monitor.store.db import Database

BreakerState = Literal["closed", "open", "half_open"]

BYPASS_NOTE = (
    "Controls bind workers that claim through outbox_monitor.claim (the shipped n8n "
    "workflows, the Python API); a worker running the SPEC §1 SQL claim itself bypasses them."
)
"""Said wherever controls are shown (SPEC §5)."""

HELD_ROWS_READ_NOTE = (
    "Every claim reads every row a pause or an open breaker holds: this table lacks the index "
    "that lets the claim skip them. Run outbox-monitor init-db --flow-control (it builds "
    "the index CONCURRENTLY; each publish and retry then writes one more index entry)."
)
"""Said wherever controls are shown while ``claims_read_held_rows`` (migration 009)."""


@dataclass(frozen=True)
class Control:
    """One control in force and what it does to the claim now.

    ``grant`` is how many matching rows the claim would hand out now (``None``: no limit);
    ``held`` the due rows it holds per event type (it grants 0); ``throttled`` the due rows
    beyond a positive grant. ``file_settings`` is set when an operator's override of a
    file-owned control is in force (drift from the file) until ``expires_at``.
    ``cooldown_seconds`` is an open breaker's cool-down now (its setting, doubled by each
    failed probe, at most 15 min); ``next_probe_at`` when it ends (the next claim after it
    hands out the probe) and ``next_probe_in_seconds`` how long until then (negative: due,
    no claim since), ``None`` unless open; ``probe_at`` when a half-open breaker's probe was
    handed out (``None``: the next claim hands it out). ``now`` is the database clock it was
    read at (``None``: unknown).
    """

    event_type_filter: str
    layer: Layer
    settings: ControlSettings
    updated_at: datetime
    updated_by: str
    expires_at: datetime | None
    file_settings: ControlSettings | None
    pause_in_force: bool
    breaker_state: BreakerState | None
    breaker_since: datetime | None
    cooldown_seconds: float | None
    next_probe_at: datetime | None
    next_probe_in_seconds: float | None
    probe_at: datetime | None
    tokens: float | None
    processing: int | None
    grant: int | None
    held: dict[str, int] = field(default_factory=dict)
    throttled: int = 0
    now: datetime | None = None

    @property
    def state(self) -> str:
        """In words: ``paused``, ``paused until 14:05 UTC (in 23m 0s)``
        (``durations.until_label``), ``breaker open``, ``breaker half-open``, ``limited`` (a
        limit with headroom 0 now, or a throttle), or ``running``."""
        if self.pause_in_force:
            until = self.settings.paused_until
            return f"paused until {until_label(until, self.now)}" if until else "paused"
        if self.breaker_state == "open":
            return "breaker open"
        if self.breaker_state == "half_open":
            return "breaker half-open"
        if self.grant is not None and (self.grant == 0 or self.throttled):
            return "limited"
        return "running"

    @property
    def breaker_note(self) -> str | None:
        """An open or half-open breaker's probe in words, for the CLI: ``"open, cool-down
        2m 0s now (set: 30s; each failed probe doubles it); next probe at 10:00 UTC (in 1m
        30s)"`` (``durations.clock_label``), ``"half-open, probe handed out at 09:59 UTC"``,
        ``"half-open, the next claim hands out a probe"``; ``None`` when closed or off."""
        if self.breaker_state == "half_open":
            if self.probe_at is None:
                return "half-open, the next claim hands out a probe"
            return f"half-open, probe handed out at {clock_label(self.probe_at, self.now)}"
        if self.breaker_state != "open" or self.next_probe_at is None:
            return None
        cooldown = format_duration(self.cooldown_seconds)
        configured = format_duration(self.settings.breaker_cooldown_seconds)
        seconds = self.next_probe_in_seconds or 0.0
        when = f"in {format_duration(seconds)}" if seconds > 0 else "due: at the next claim"
        return (
            f"open, cool-down {cooldown} now (set: {configured}; each failed probe doubles "
            f"it); next probe at {clock_label(self.next_probe_at, self.now)} ({when})"
        )

    @property
    def rows_held(self) -> int:
        """Due rows this control holds, all event types."""
        return sum(self.held.values())


def _grant(row: dict[str, Any]) -> int | None:
    """What the claim would grant now (``claim_grants`` in SQL, read without locking)."""
    if row["pause_in_force"] or row["breaker_state"] == "open":
        return 0
    limits = []
    if row["breaker_state"] == "half_open":
        limits.append(0 if row["probe_id"] is not None else 1)
    if row["tokens"] is not None:
        limits.append(int(row["tokens"]))
    if row["concurrency_limit"] is not None:
        limits.append(max(0, row["concurrency_limit"] - row["processing"]))
    return min(limits) if limits else None


def claims_read_held_rows(db: Database) -> bool:
    """Whether a claim reads every row flow control holds, for want of an index led by
    ``event_type`` over the pending rows (migration 009's ``pending_types_index``; created by
    ``init-db --flow-control``): then a claim behind N held rows costs O(N).

    Raises:
        The connector's errors (``DatabaseUnavailable``, ``PermissionDenied`` …).
    """
    return db.fetch_one("claims_read_held_rows", key(db, None))["reads"]


def controls(db: Database) -> list[Control]:
    """Every control in force on the table, with its state and the rows it holds now.

    Returns:
        ``Control`` values ordered by filter; ``held`` counts due rows (SPEC §2 queue depth)
        of each matching event type when the control grants 0.

    Raises:
        The connector's errors (``DatabaseUnavailable``, ``PermissionDenied`` …).
    """
    with db.session():
        states = db.fetch_all("control_states", key(db, None))
        if not states:
            return []  # no due-rows count without a control: the figures cost nothing then
        rows = db.fetch_all("control_rows", key(db, None), lock=sql.SQL(""))
        due = {r["event_type"]: r["due"] for r in db.fetch_all("due_by_event_type")}
    files = {r["event_type_filter"]: r for r in rows if r["layer"] == "file"}
    result = []
    for row in states:
        grant = _grant(row)
        matching = {t: n for t, n in due.items() if matches(row["event_type_filter"], t)}
        file_row = files.get(row["event_type_filter"]) if row["layer"] == "ui" else None
        result.append(
            Control(
                event_type_filter=row["event_type_filter"],
                layer=row["layer"],
                settings=settings_of(row),
                updated_at=row["updated_at"],
                updated_by=row["updated_by"],
                expires_at=row["expires_at"],
                file_settings=settings_of(file_row) if file_row else None,
                pause_in_force=row["pause_in_force"],
                breaker_state=row["breaker_state"],
                breaker_since=row["breaker_since"],
                cooldown_seconds=row["cooldown_seconds"],
                next_probe_at=row["next_probe_at"],
                next_probe_in_seconds=row["next_probe_in_seconds"],
                probe_at=row["probe_at"],
                tokens=row["tokens"],
                processing=row["processing"],
                grant=grant,
                held=matching if grant == 0 else {},
                now=row["now"],
                throttled=max(0, sum(matching.values()) - grant) if grant else 0,
            )
        )
    return result


@dataclass(frozen=True)
class ControlChange:
    """The outcome of one change: the settings before and after (``None``: no control), the
    layer written, an override's expiry, and the audit row. ``barrier_note`` is set when
    the change stopped waiting for the claims already running (``rows.barrier``): they may
    still hand out rows it forbids; every caller shows it."""

    event_type_filter: str
    action: str
    before: ControlSettings | None
    after: ControlSettings | None
    layer: Layer
    expires_at: datetime | None
    audit_id: int
    barrier_note: str | None = None

    @property
    def claims_in_flight(self) -> bool:
        """Whether the change stopped waiting for claims still running (``barrier_note``)."""
        return self.barrier_note is not None

    @property
    def changed(self) -> bool:
        """Whether the settings in force differ after the change."""
        return self.before != self.after

    @property
    def pause_ends(self) -> datetime | None:
        """When the pause in force after the change ends: its ``paused_until``, or the
        expiry of the override it is on a file-owned filter, whichever comes first; ``None``
        for "until resumed" (or no pause)."""
        ends = [
            end
            for end in (self.after.paused_until if self.after else None, self.expires_at)
            if end is not None
        ]
        return min(ends) if ends else None


def change(
    db: Database,
    event_type_filter: str,
    *,
    actor: Identity,
    action: str,
    changes: dict[str, Any] | None = None,
    clear: bool = False,
    override_seconds: float | None = None,
) -> ControlChange:
    """Change the control of one filter as an operator, in one audited transaction that is
    a barrier (SPEC §5): it first waits, at most ``control_barrier_timeout``, for the claims
    already running, and no claim hands out a row until it commits (``rows.barrier``).

    The new settings are the ones in force with ``changes`` applied (``clear``: none at
    all). On a filter the controls file owns, they are written as an override that expires
    after ``override_seconds`` (default ``DEFAULT_OVERRIDE_SECONDS``; a pause with
    ``paused_until`` expires then) — or, equal to the file's, the override is removed.
    Elsewhere an empty control deletes the row.

    Args:
        db: the Database of actions (its login needs the operator's grants).
        event_type_filter: SPEC §2 filter (exact, or LIKE with ``%``); not empty.
        actor: who; must hold the operator role.
        action: the audit action: ``pause``, ``resume``, ``limit``, ``breaker``, ``clear
            control``.
        changes: ``ControlSettings`` fields to set.
        clear: remove the operator's control (an override: back to the file's).
        override_seconds: seconds an override of a file-owned control lasts.

    Returns:
        A ``ControlChange`` (``barrier_note``: the wait for the claims ran out).

    Raises:
        AccessDenied: ``actor`` is not an operator; nothing is changed.
        ActionRefused: an empty filter, settings the model refuses (the field named), or a
            table the claim could not apply controls to (``rows.check_table``).
        The connector's errors.
    """
    require_audited(db, actor, Role.operator, f"{action} {event_type_filter!r}", action)
    try:
        check_filter(event_type_filter)
    except ValueError as error:
        raise ActionRefused(str(error)) from None
    with db.transaction() as conn:
        note = barrier(conn, db)
        check_table(conn, db)
        lock(conn, db)
        rows = conn.execute(
            db.compose("control_rows", lock=sql.SQL("")), key(db, event_type_filter)
        ).fetchall()
        layers = {row["layer"]: row for row in rows}
        ui, file = layers.get("ui"), layers.get("file")
        in_force = ui if ui is not None and ui["unexpired"] else file
        before = settings_of(in_force) if in_force else None
        try:
            after = (
                ControlSettings()
                if clear
                else (before or ControlSettings()).with_changes(**(changes or {}))
            )
        except ValueError as error:
            raise ActionRefused(f"{event_type_filter}: {error}") from None
        expires_at = None
        if file is not None:
            file_settings = settings_of(file)
            if clear or after == file_settings:
                change_rows = [deleted(event_type_filter, layer="ui")]
                after = file_settings
            else:
                now = conn.execute("SELECT now() AS now").fetchone()["now"]
                expires_at = after.paused_until or now + timedelta(
                    seconds=override_seconds or DEFAULT_OVERRIDE_SECONDS
                )
                change_rows = [written(event_type_filter, after, layer="ui", expires_at=expires_at)]
        elif after.is_empty:
            change_rows = [deleted(event_type_filter, layer="ui")]
            after = None
        else:
            change_rows = [written(event_type_filter, after, layer="ui", expires_at=None)]
        audit_id = save(
            conn,
            db,
            change_rows,
            actor=actor,
            action=action,
            details={
                "event_type": event_type_filter,
                "before": before.model_dump(mode="json") if before else None,
                "after": after.model_dump(mode="json") if after else None,
                "expires_at": expires_at,
            },
        )
    return ControlChange(
        event_type_filter=event_type_filter,
        action=action,
        before=before,
        after=after,
        layer="ui",
        expires_at=expires_at,
        audit_id=audit_id,
        barrier_note=note,
    )


def recent_transitions(db: Database, *, limit: int = 50) -> list[dict[str, Any]]:
    """The newest breaker transitions: id, event_type_filter, transition (``opened`` /
    ``closed``), at, outcomes, failures, cooldown_seconds (seconds)."""
    return db.fetch_all(
        "breaker_transitions_recent", {"table_regclass": db.table_regclass, "limit": limit}
    )


def pause(
    db: Database,
    event_type_filter: str,
    *,
    actor: Identity,
    until: datetime | None = None,
    reason: str | None = None,
) -> ControlChange:
    """Pause handing out the filter's rows, until ``until`` (``None``: until resumed); the
    rows stay pending and keep their attempts. See ``change`` for the errors."""
    return change(
        db,
        event_type_filter,
        actor=actor,
        action="pause",
        changes={"paused": True, "paused_until": until, "pause_reason": reason},
    )


def resume(db: Database, event_type_filter: str, *, actor: Identity) -> ControlChange:
    """End the filter's pause (its limits and breaker stay). See ``change`` for the errors."""
    return change(
        db,
        event_type_filter,
        actor=actor,
        action="resume",
        changes={"paused": False, "paused_until": None, "pause_reason": None},
    )


def preview_hold(db: Database, event_type_filter: str) -> dict[str, int]:
    """What a pause of the filter would hold now: due rows per matching event type.

    Raises:
        The connector's errors.
    """
    due = db.fetch_all("due_by_event_type")
    return {r["event_type"]: r["due"] for r in due if matches(event_type_filter, r["event_type"])}
