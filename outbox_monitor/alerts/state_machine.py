"""The alert state machine of one rule instance, pure: ``advance`` takes the persisted state,
the time and this pass's measurement, and returns the new state and the transitions (with the
notification each one queues); ``alerts.evaluate`` persists them. The states and the rules
for moving between them are in ``alerts/evaluate.py``'s docstring (issue 3 §2)."""

from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from typing import Any

INACTIVE, PENDING, FIRING, ERROR = "inactive", "pending", "firing", "error"
FIRING_KIND, RESOLVED_KIND, REPEAT_KIND, ERROR_KIND = "firing", "resolved", "repeat", "error"


@dataclass(frozen=True)
class InstanceState:
    """One rule instance's persisted state (a row of ``outbox_monitor.alert_instances``).

    Times are aware datetimes of the evaluator's clock. ``firing_seq`` numbers episodes.
    ``last_notified_at``: when this episode last queued a notification that is sent
    (not suppressed); ``None`` when it has none yet.
    """

    state: str = INACTIVE
    value: float | None = None
    pending_since: datetime | None = None
    firing_since: datetime | None = None
    cleared_since: datetime | None = None
    last_evaluated_at: datetime | None = None
    last_notified_at: datetime | None = None
    firing_seq: int = 0
    error: str | None = None

    @classmethod
    def from_row(cls, row: dict[str, Any]) -> "InstanceState":
        """Build from an ``alert_instance_lock`` row."""
        return cls(**{name: row[name] for name in cls.__dataclass_fields__})


@dataclass(frozen=True)
class Step:
    """One transition of a pass: ``from_state`` → ``to_state``.

    ``kind``: the notification it queues (``firing``, ``resolved``, ``error``) or ``None``
    (pending, and pending that clears). ``seq``: the episode it belongs to. ``detail``:
    a line for the transition history.
    """

    from_state: str
    to_state: str
    kind: str | None
    seq: int
    detail: str


def held(since: datetime | None, now: datetime, seconds: float) -> bool:
    return since is not None and (now - since) >= timedelta(seconds=seconds)


def _seconds(value: float) -> str:
    return f"{value:g}s"


def advance(
    current: InstanceState,
    *,
    now: datetime,
    breached: bool,
    value: float | None,
    for_: float,
    keep_firing_for: float,
    error: str | None = None,
) -> tuple[InstanceState, list[Step]]:
    """One evaluation step of one instance (pure; the module docstring has the diagram).

    Args:
        current: the state before this pass.
        now: this pass's instant (the evaluator's clock).
        breached: the condition holds now (ignored when ``error`` is given).
        value: the measured value (``None``: no value, or the instance vanished).
        for_: seconds the condition must hold before firing (0: fire at once).
        keep_firing_for: seconds a firing instance must stay clear before it resolves.
        error: the measurement failed with this message.

    Returns:
        The new state and the transitions taken, in order (two when an error resolves
        and the instance goes straight on, e.g. ``error→inactive``, ``inactive→firing``).
    """
    steps: list[Step] = []
    new = replace(current, value=value, last_evaluated_at=now)
    if error is not None:
        if current.state == ERROR:
            return replace(new, value=None, error=error), steps
        seq = current.firing_seq if current.state == FIRING else current.firing_seq + 1
        steps.append(Step(current.state, ERROR, ERROR_KIND, seq, f"evaluation failed: {error}"))
        reset = replace(new, pending_since=None, firing_since=None, cleared_since=None)
        last = current.last_notified_at if current.state == FIRING else None
        return (
            replace(
                reset, state=ERROR, value=None, error=error, firing_seq=seq, last_notified_at=last
            ),
            steps,
        )
    if new.state == ERROR:
        steps.append(
            Step(ERROR, INACTIVE, RESOLVED_KIND, new.firing_seq, "resolved: evaluation works again")
        )
        new = replace(
            new,
            state=INACTIVE,
            error=None,
            pending_since=None,
            firing_since=None,
            cleared_since=None,
        )

    def fire(from_state: str, pending_since: datetime) -> InstanceState:
        seq = new.firing_seq + 1
        waited = "at once (for 0s)" if for_ <= 0 else f"breached for {_seconds(for_)}"
        steps.append(Step(from_state, FIRING, FIRING_KIND, seq, f"firing: {waited}"))
        return replace(
            new,
            state=FIRING,
            firing_seq=seq,
            pending_since=pending_since,
            firing_since=now,
            cleared_since=None,
            last_notified_at=None,
        )

    if new.state == INACTIVE:
        if breached:
            if for_ <= 0:
                return fire(INACTIVE, now), steps
            steps.append(
                Step(INACTIVE, PENDING, None, new.firing_seq, f"pending for {_seconds(for_)}")
            )
            return replace(new, state=PENDING, pending_since=now), steps
        return new, steps
    if new.state == PENDING:
        if not breached:
            steps.append(
                Step(PENDING, INACTIVE, None, new.firing_seq, "cleared before `for` elapsed")
            )
            return replace(new, state=INACTIVE, pending_since=None), steps
        if new.pending_since is None or held(new.pending_since, now, for_):
            return fire(PENDING, new.pending_since or now), steps
        return new, steps
    # FIRING
    if breached:
        return replace(new, cleared_since=None), steps
    cleared_since = new.cleared_since or now
    if held(cleared_since, now, keep_firing_for):
        detail = f"resolved: clear for {_seconds(keep_firing_for)} (keep_firing_for)"
        steps.append(Step(FIRING, INACTIVE, RESOLVED_KIND, new.firing_seq, detail))
        return (
            replace(new, state=INACTIVE, pending_since=None, firing_since=None, cleared_since=None),
            steps,
        )
    return replace(new, cleared_since=cleared_since), steps


def dedupe_key(rule: str, instance: str, seq: int, kind: str, repeat: int | None = None) -> str:
    """The notification's dedupe key: ``rule|instance|firing_seq|kind`` (``repeat-<n>``)."""
    suffix = f"{kind}-{repeat}" if repeat is not None else kind
    return f"{rule}|{instance}|{seq}|{suffix}"
