"""The incident timeline (issue 15 item 5): what changed between two instants, from four
sources read apart — alert transitions, the audit log, error groups first seen, breaker
transitions — merged newest first, so that "what changed at 14:02" is one look.

Each source is one named query (``timeline_*`` in ``sql/queries.sql``) under the statement
timeout, bounded by the range and a row limit. A source whose read fails is named with the
reason in ``Timeline.failures`` and the others are still returned; only a database that
cannot be reached at all (``DatabaseUnavailable``) raises.
"""

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any
from urllib.parse import urlencode

import psycopg

from outbox_monitor.alerts.outbox_scope import unscoped_instance
from outbox_monitor.alerts.state import transition_kind
from outbox_monitor.durations import format_duration
from outbox_monitor.errors import DatabaseUnavailable, OutboxMonitorError
from outbox_monitor.figures import error_grouping
from outbox_monitor.privacy.redaction import Redactor
from outbox_monitor.store.db import Database
from outbox_monitor.units import format_value

ALERT = "alert"
ACTION = "action"
ERROR_GROUP = "error group"
BREAKER = "breaker"
KINDS = (ALERT, ACTION, ERROR_GROUP, BREAKER)
"""The kinds of entry, one lane each on the page's chart, in this order."""
DEFAULT_LIMIT = 200
"""Entries returned at most (each source reads one more, to tell that it has more)."""
VIEWER_AUDIT_KEYS = ("event_type",)
"""The keys of an audit row's filter a viewer is shown: the event type (which every page
shows); the whole filter is the operators' Audit log (Actions page), as there."""

ALERTS_PATH = "/alerts"
ACTIONS_PATH = "/actions"
DEAD_LETTERS_PATH = "/dead_letters"
CONTROLS_PATH = "/controls"


@dataclass(frozen=True)
class TimelineEntry:
    """One change: ``at`` (the database's instant), ``kind`` (one of ``KINDS``), ``title``
    and ``detail`` (text for people, redacted as the page that owns the source shows it),
    and ``link``: the dashboard path where it is shown (``/alerts?rule=…``), ``None`` when
    the viewer may not open one."""

    at: datetime
    kind: str
    title: str
    detail: str
    link: str | None


@dataclass(frozen=True)
class SourceFailure:
    """A source that could not be read: its kind and the first line of the reason."""

    kind: str
    reason: str


@dataclass(frozen=True)
class Timeline:
    """The entries between ``since`` and ``until`` (inclusive), newest first, at most
    ``limit``; ``failures``: the sources not read; ``more``: the kinds that had more
    entries in the range than shown (the range holds more than ``limit``); ``notes``:
    what else the reader must know (error groups as of an earlier refresh)."""

    since: datetime
    until: datetime
    entries: list[TimelineEntry]
    failures: list[SourceFailure] = field(default_factory=list)
    more: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


def read_timeline(
    db: Database,
    *,
    since: datetime,
    until: datetime,
    redactor: Redactor,
    full_audit: bool,
    units: Mapping[str, str] | None = None,
    limit: int = DEFAULT_LIMIT,
) -> Timeline:
    """What changed between ``since`` and ``until``, newest first (issue 15 item 5).

    Args:
        db: the Database of reads (any login with the viewer's grants).
        since, until: the range, aware datetimes, both included.
        redactor: redacts error fingerprints, as the Dead letters page shows them.
        full_audit: show an audit row's whole filter (an operator, as the Audit log tab
            shows it); otherwise only its ``VIEWER_AUDIT_KEYS``, and no link to the
            operators' Actions page.
        units: rule name → the unit of its figure (``Rule.unit``), so that an alert
            transition's value is written as the rule's figure is (``units.format_value``:
            ``"14m 37s"``, ``"9.0 %"``); a rule not named is written as a plain number.
        limit: entries at most, 1 to 1000.

    Returns:
        A ``Timeline``: entries of every source read, merged by ``at`` (newest first; ties
        by kind order), the failed sources with their reason.

    Raises:
        ValueError: ``limit`` out of range or ``since`` after ``until``.
        DatabaseUnavailable: the database cannot be reached (no source can be read).
    """
    if not 1 <= limit <= 1000:
        raise ValueError(f"limit must be between 1 and 1000, got {limit}")
    if since > until:
        raise ValueError(f"the range starts ({since}) after it ends ({until})")
    units = units or {}
    params = {
        "since": since,
        "until": until,
        "limit": limit + 1,
        "table_name": db.table_name,
        "table_regclass": db.table_name,
        "outbox": db.alert_outbox,
    }
    readers: dict[str, Callable[[], list[TimelineEntry]]] = {
        ALERT: lambda: [
            _alert({**row, "instance": unscoped_instance(db.alert_outbox, row["instance"])}, units)
            for row in db.fetch_all("timeline_alert_transitions", params)
        ],
        ACTION: lambda: [
            _action(row, full_audit) for row in db.fetch_all("timeline_audit", params)
        ],
        ERROR_GROUP: lambda: [
            _error_group(row, redactor) for row in db.fetch_all("timeline_error_groups", params)
        ],
        BREAKER: lambda: [
            _breaker(row) for row in db.fetch_all("timeline_breaker_transitions", params)
        ],
    }
    entries: list[TimelineEntry] = []
    failures: list[SourceFailure] = []
    more: list[str] = []
    notes: list[str] = []
    for kind, read in readers.items():
        if kind == ERROR_GROUP:
            note = _refresh_error_groups(db)
            if note:
                notes.append(note)
        try:
            found = read()
        except DatabaseUnavailable:
            raise
        except (OutboxMonitorError, psycopg.Error) as error:
            failures.append(SourceFailure(kind, _first_line(error)))
            continue
        if len(found) > limit:
            more.append(kind)
        entries.extend(found[:limit])
    entries.sort(key=lambda e: (e.at, -KINDS.index(e.kind)), reverse=True)
    more.extend(e.kind for e in entries[limit:])
    return Timeline(since, until, entries[:limit], failures, [k for k in KINDS if k in more], notes)


def _refresh_error_groups(db: Database) -> str | None:
    """Bring the error groups' cache up to date; when this login cannot, the reason (the
    groups are then read as of their last refresh)."""
    try:
        error_grouping.refresh_error_groups(db)
    except DatabaseUnavailable:
        raise
    except (OutboxMonitorError, psycopg.Error) as error:
        return (
            "error groups as of their last refresh (this login could not refresh them: "
            f"{_first_line(error)})"
        )
    return None


def _first_line(error: Exception) -> str:
    return (str(error).splitlines() or [type(error).__name__])[0]


def _path(page: str, **params: str | None) -> str:
    given = {name: value for name, value in params.items() if value}
    return f"{page}?{urlencode(given)}" if given else page


ROW_ACTIONS = frozenset({"reap", "replay", "prune"})
"""Audited actions whose affected count is of outbox rows (SPEC §4); the others (pause,
resume, silences, reveals) say their count only when it is not zero."""


def _alert(row: dict[str, Any], units: Mapping[str, str]) -> TimelineEntry:
    kind = transition_kind(row["from_state"], row["to_state"])
    instance = f" [{row['instance']}]" if row["instance"] else ""
    value = row["value"]
    detail = "no value" if value is None else f"value {format_value(value, units.get(row['rule']))}"
    if row["detail"]:
        detail += f" · {row['detail']}"
    return TimelineEntry(
        at=row["at"],
        kind=ALERT,
        title=f"{row['rule']}{instance} {kind}",
        detail=detail,
        link=_path(ALERTS_PATH, rule=row["rule"], instance=row["instance"]),
    )


def _action(row: dict[str, Any], full_audit: bool) -> TimelineEntry:
    shown = (
        row["filter"]
        if full_audit
        else {key: row["filter"][key] for key in VIEWER_AUDIT_KEYS if row["filter"].get(key)}
    )
    count = row["affected_count"]
    rows = f"{count:,} row" + ("" if count == 1 else "s")
    parts = [rows] if row["action"] in ROW_ACTIONS or count else []
    detail = " · ".join(part for part in [*parts, filter_text(shown)] if part)
    return TimelineEntry(
        at=row["at"],
        kind=ACTION,
        title=f"{row['action']} by {row['actor']}",
        detail=detail,
        link=ACTIONS_PATH if full_audit else None,
    )


def filter_text(audit_filter: Mapping[str, Any]) -> str:
    """An audit row's filter in words, its keys in order: ``"event_type order.paid · status
    failed"``, ``"after (breaker yes · breaker_cooldown_seconds 30)"``; never raw JSON (a key
    without a value is left out)."""
    return " · ".join(
        f"{key} {_filter_value(value)}"
        for key, value in sorted(audit_filter.items())
        if value is not None
    )


def _filter_value(value: Any) -> str:
    """An audit filter's value in words: text as it is, a yes/no, a number, a list joined, an
    object (a control change's ``before`` and ``after``) as its keys and values in brackets."""
    if isinstance(value, str):
        return value
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        return f"{value:g}"
    if isinstance(value, list):
        return ", ".join(_filter_value(item) for item in value)
    if isinstance(value, dict):
        return f"({filter_text(value)})"
    return str(value)


def _error_group(row: dict[str, Any], redactor: Redactor) -> TimelineEntry:
    return TimelineEntry(
        at=row["first_seen"],
        kind=ERROR_GROUP,
        title=f"new error group {row['group_id']} · {row['event_type']}",
        detail=f"{row['failed']:,} failed so far · {redactor.redact_text(row['fingerprint'])}",
        link=_path(DEAD_LETTERS_PATH, event_type=row["event_type"], error_group=row["group_id"]),
    )


def _breaker(row: dict[str, Any]) -> TimelineEntry:
    parts = []
    if row["outcomes"] is not None:
        parts.append(f"{row['failures'] or 0:,} of {row['outcomes']:,} outcomes failed")
    if row["cooldown_seconds"] is not None and row["transition"] == "opened":
        parts.append(f"cool-down {format_duration(row['cooldown_seconds'])}")
    return TimelineEntry(
        at=row["at"],
        kind=BREAKER,
        title=f"breaker {row['transition']} · {row['event_type_filter']}",
        detail=" · ".join(parts),
        link=_path(CONTROLS_PATH, event_type=row["event_type_filter"]),
    )
