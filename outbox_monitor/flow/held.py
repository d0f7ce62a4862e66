"""The flow-control figures (SPEC §5): due rows held by a control that grants 0 now, and rows
throttled by one that grants fewer than are due — for ``status --json``, alert rules
(``rows_held``, ``rows_throttled``), ``/metrics`` and the overview.

A due row is held when any control matching its event type grants 0 (a pause in force, an
open breaker, a probe out, a spent bucket, a full concurrency limit); held rows still count
in queue depth and oldest pending age (SPEC §5). Throttled rows are counted per control: the
due rows it matches beyond its positive grant.
"""

from dataclasses import dataclass, field

from outbox_monitor.flow.controls import Control, controls
from outbox_monitor.flow.model import matches
from outbox_monitor.store.db import Database
from outbox_monitor.store.filters import ExactEventType


@dataclass(frozen=True)
class Held:
    """``by_event_type``: due rows held per event type (a row once, however many controls
    hold it); ``by_control``: per control filter, its held rows per event type;
    ``throttled_by_control``: per control filter, due rows beyond its grant."""

    by_event_type: dict[str, int] = field(default_factory=dict)
    by_control: dict[str, dict[str, int]] = field(default_factory=dict)
    throttled_by_control: dict[str, int] = field(default_factory=dict)

    @property
    def rows_held(self) -> int:
        """Due rows held, all event types."""
        return sum(self.by_event_type.values())

    @property
    def rows_throttled(self) -> int:
        """Due rows throttled, summed over controls."""
        return sum(self.throttled_by_control.values())


def held(db: Database, *, event_type: str | None = None) -> Held:
    """The rows held and throttled now, for the event types matching ``event_type`` (SPEC §2
    filter; ``None``: all). Without a control on the table it reads only the controls.

    Raises:
        The connector's errors.
    """
    return held_by(controls(db), event_type=event_type)


def held_by(found: list[Control], *, event_type: str | None = None) -> Held:
    """``held`` of controls already read (``controls.controls``)."""
    by_event_type: dict[str, int] = {}
    by_control: dict[str, dict[str, int]] = {}
    throttled: dict[str, int] = {}
    for control in found:
        held_here = {
            t: n for t, n in control.held.items() if not event_type or matches(event_type, t)
        }
        if held_here:
            by_control[control.event_type_filter] = held_here
            by_event_type.update(held_here)
        if control.throttled and (not event_type or matches(event_type, control.event_type_filter)):
            throttled[control.event_type_filter] = control.throttled
    return Held(dict(sorted(by_event_type.items())), by_control, throttled)


OPEN_STATES = ("open", "half_open")
"""Breaker states that hold rows: open, or half-open (a probe out or about to be)."""


def breaker_filters(db: Database, event_type: str | None = None) -> list[str]:
    """The filters of the table's controls with a circuit breaker, within ``event_type`` (a
    SPEC §2 filter applied to the control's filter text; ``None``: all): the instances of a
    ``breaker_open`` rule with ``by: [event_type]``."""
    return [
        c.event_type_filter
        for c in controls(db)
        if c.settings.breaker and _within(event_type, c.event_type_filter)
    ]


def breakers_open(db: Database, event_type: str | None = None) -> int:
    """How many circuit breakers are open or half-open now, among the controls whose filter
    is within ``event_type`` (an ``ExactEventType``: that one control; ``None``: all)."""
    return breakers_open_among(controls(db), event_type)


def breakers_open_among(found: list[Control], event_type: str | None = None) -> int:
    """``breakers_open`` of controls already read."""
    return sum(
        1
        for c in found
        if c.breaker_state in OPEN_STATES and _within(event_type, c.event_type_filter)
    )


def _within(event_type: str | None, control_filter: str) -> bool:
    if not event_type:
        return True
    if isinstance(event_type, ExactEventType):
        return control_filter == event_type
    return matches(event_type, control_filter)


def held_note(db: Database, event_type: str | None) -> tuple[int, list[str]]:
    """What an alert about pending rows says of flow control: the due rows of ``event_type``
    (a filter, an ``ExactEventType``, or ``None`` for all) held now, and by what
    (``["pause crm.%", "breaker sms.%"]``); ``(0, [])`` when none is.

    Raises:
        The connector's errors.
    """
    rows: dict[str, int] = {}
    by: list[str] = []
    for control in controls(db):
        within = {t: n for t, n in control.held.items() if not event_type or matches(event_type, t)}
        if not within:
            continue
        rows.update(within)
        kind = (
            "pause"
            if control.pause_in_force
            else "breaker"
            if control.breaker_state in OPEN_STATES
            else "limit"
        )
        by.append(f"{kind} {control.event_type_filter}")
    return sum(rows.values()), by
