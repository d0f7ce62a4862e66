"""An intended pause must not page people (issue 13 item 3): the alert rules a pause of a
filter will trip — backlog, oldest pending age and the other figures of pending rows, over
event types the pause holds — silenced until it is resumed.

``rules_a_pause_trips`` names them (the page and the CLI offer them); ``silence_for_pause``
creates one silence each, marked with the pause's filter, ending at the pause's ``until`` or
after ``MAX_PAUSE_SILENCE_SECONDS``; ``end_pause_silences`` expires them when the filter is
resumed. Silences are audited as any other (``alerts.silences``).
"""

from dataclasses import dataclass
from datetime import datetime, timedelta

from outbox_monitor.access import Identity
from outbox_monitor.alerts.rules import Rule, RuleSet
from outbox_monitor.alerts.silences import (
    active_silences,
    create_silence,
    expire_silence,
    in_outbox,
)
from outbox_monitor.figures.registry import FIGURES
from outbox_monitor.flow.model import matches
from outbox_monitor.store.db import Database

MAX_PAUSE_SILENCE_SECONDS = 24 * 3600.0
"""A pause without ``until`` silences its rules for at most a day: a forgotten pause pages
again rather than hiding a backlog for ever."""

NOT_TRIPPED = ("breaker_open",)
"""Figures of pending rows that a pause does not move (a breaker's own alert stays)."""


@dataclass(frozen=True)
class Tripped:
    """A rule a pause will trip, and the matchers of the silence that would hush it: the
    pause's filter for a ``by: [event_type]`` rule, else the whole rule."""

    rule: Rule
    matchers: dict[str, str]


def _overlap(rule_filter: str | None, pause_filter: str) -> bool:
    """Whether a rule's event-type filter and a pause's can select a common event type (as
    far as the filters' text tells: either matches the other's text)."""
    if not rule_filter:
        return True
    return matches(rule_filter, pause_filter) or matches(pause_filter, rule_filter)


def rules_a_pause_trips(ruleset: RuleSet, event_type_filter: str) -> list[Tripped]:
    """The rules over pending rows whose event types overlap the paused filter.

    Args:
        ruleset: the loaded alerts.yml.
        event_type_filter: the filter to be paused (SPEC §2).

    Returns:
        ``Tripped`` values in the file's order.
    """
    found = []
    for rule in ruleset.rules:
        figure = FIGURES[rule.metric]
        if "pending" not in figure.instances.open or rule.metric in NOT_TRIPPED:
            continue
        if not _overlap(rule.event_type, event_type_filter):
            continue
        matchers = {"rule": rule.name}
        if rule.by:
            matchers["event_type"] = event_type_filter
        found.append(Tripped(rule, matchers))
    return found


def marker(event_type_filter: str) -> str:
    """The comment of a pause's silences, by which ``end_pause_silences`` finds them."""
    return f"flow control: {event_type_filter} paused (silenced until resumed)"


def silence_for_pause(
    db: Database,
    tripped: list[Tripped],
    event_type_filter: str,
    *,
    until: datetime | None,
    now: datetime,
    actor: Identity,
) -> list[int]:
    """Silence each tripped rule until the pause ends (``until``, from
    ``ControlChange.pause_ends``), at most ``MAX_PAUSE_SILENCE_SECONDS`` from ``now``.

    Returns:
        The new silences' ids.

    Raises:
        AccessDenied: ``actor`` is not an operator; the errors of ``create_silence``.
    """
    longest = now + timedelta(seconds=MAX_PAUSE_SILENCE_SECONDS)
    end = min(until, longest) if until else longest
    return [
        create_silence(db, item.matchers, end, marker(event_type_filter), actor, now=now)
        for item in tripped
    ]


def end_pause_silences(
    db: Database, event_type_filter: str, *, now: datetime, actor: Identity
) -> list[int]:
    """Expire the silences a pause of the filter created on ``db``'s outbox that are still in
    force (``silences.in_outbox``: not another outbox's of the database).

    Returns:
        The expired silences' ids.

    Raises:
        AccessDenied: ``actor`` is not an operator; the connector's errors.
    """
    mine = [
        s
        for s in active_silences(db, now)
        if s["comment"] == marker(event_type_filter) and in_outbox(db, s)
    ]
    return [s["id"] for s in mine if expire_silence(db, s["id"], actor, now=now)]
