"""Every event type an operator may want to control (SPEC §5), with its rows waiting now and
the controls that match it: the Controls page's first table.

An event type is listed when it has pending or processing rows (one ``GROUP BY`` over those
rows, which the claim index finds; done and failed rows are never read). A control whose
filter matches none of them is listed by ``controls.controls`` alone.
"""

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from outbox_monitor.flow.controls import Control
from outbox_monitor.flow.model import matches
from outbox_monitor.store.db import Database

STATE_ORDER = ("paused", "breaker open", "breaker half-open", "limited")
"""The states of ``Control.state`` from the one that stops a type the most; ``running`` last."""


@dataclass(frozen=True)
class EventTypeFlow:
    """One event type: ``pending`` rows (due or in backoff), ``due`` rows (SPEC §2 queue
    depth), ``processing`` rows; the ``controls`` (filters) matching it; its ``state`` (the
    most stopping state of those controls, ``running`` without any) and the due rows
    ``held`` now (all of them when a matching control grants 0, SPEC §5)."""

    event_type: str
    pending: int
    due: int
    processing: int
    controls: tuple[str, ...]
    state: str
    held: int


def pending_by_event_type(db: Database) -> list[dict[str, Any]]:
    """Event types with pending or processing rows: event_type, pending, due, processing.

    Raises:
        The connector's errors.
    """
    return db.fetch_all("pending_by_event_type")


def _rank(state: str) -> int:
    return next((i for i, s in enumerate(STATE_ORDER) if state.startswith(s)), len(STATE_ORDER))


def event_type_flows(
    pending: Iterable[dict[str, Any]], controls: Iterable[Control]
) -> list[EventTypeFlow]:
    """Join ``pending_by_event_type`` rows with the controls in force (``controls.controls``).

    Returns:
        One ``EventTypeFlow`` per row, in the rows' order.
    """
    found = list(controls)
    result = []
    for row in pending:
        matching = [c for c in found if matches(c.event_type_filter, row["event_type"])]
        states = sorted((c.state for c in matching), key=_rank)
        holding = any(c.grant == 0 for c in matching)
        result.append(
            EventTypeFlow(
                event_type=row["event_type"],
                pending=row["pending"],
                due=row["due"],
                processing=row["processing"],
                controls=tuple(c.event_type_filter for c in matching),
                state=states[0] if states else "running",
                held=row["due"] if holding else 0,
            )
        )
    return result
