"""Cached reads for the pages (``cache.cached``, TTL ≤ the shortest refresh): the Overview's
figures and series, dead letters, events and their payloads (redacted), the audit log; and
``clear_stale``, which clears the caches an action made stale (``flows.apply`` calls it).

Values are the plain rows of ``metrics``, ``events`` and ``actions``.
"""

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from outbox_monitor.access import Identity
from outbox_monitor.browse import events
from outbox_monitor.browse.events import EventFilter, RevealedPayload
from outbox_monitor.errors import SchemaNotInitialised
from outbox_monitor.figures import by_event_type, error_grouping, estimates, metrics
from outbox_monitor.figures.backlog import (
    SAMPLED_ABOVE_ROWS,
    BacklogPass,
    backlog_pass,
    sampled_pass,
)
from outbox_monitor.privacy.redaction import ERROR_HEAD_CHARS, Redactor, redactor_for
from outbox_monitor.store import indexes
from outbox_monitor.store.audit import recent_audit
from outbox_monitor.store.db import Database
from outbox_monitor.store.standby import ReplicaStatus
from outbox_monitor.store.standby import replica_status as replica_status_of
from outbox_monitor.ui.cache import cached, db_key
from outbox_monitor.ui.slo import FAILED_TILE_WINDOW_SECONDS

SERIES_POINTS = 60
"""Time series use ``window / SERIES_POINTS`` buckets (at least ``MIN_BUCKET_SECONDS``)."""
MIN_BUCKET_SECONDS = 15.0


def bucket_for(window: float) -> float:
    """Seconds per bucket of the time-series charts of a window (1 h → 60 s)."""
    return max(window / SERIES_POINTS, MIN_BUCKET_SECONDS)


@cached
def _status(
    key: str, _db: Database, window: float, event_type: str | None, cap: int
) -> dict[str, Any]:
    with _db.session():  # a dozen statements, one connection checkout
        every_type = _fresh_snapshot(_db, None)
        finished = (
            every_type
            if every_type is not None and every_type.finished_over(window) is not None
            else None
        )
        if every_type is None or every_type.backlog_rows <= SAMPLED_ABOVE_ROWS:
            passed = backlog_pass(_db, event_type=event_type, window=window)
            figures = metrics.status(
                _db, window=window, event_type=event_type, count_cap=cap, backlog=passed
            )
            return {
                **figures,
                "backlog_pass": passed,
                "sampled": None,
                "finished_sample": finished,
            }
        # above the threshold: the scheduler's pass, and what needs no heap tuple counted now
        passed = _fresh_snapshot(_db, event_type) if event_type else every_type
        figures = metrics.status(
            _db,
            window=window,
            event_type=event_type,
            count_cap=cap,
            backlog=passed,
            every_type=every_type,
        )
        for key, figure in COUNTED_NOW.items():
            figures[key] = figure(_db, event_type=event_type)
    sampled = {
        "sampled_at": passed.sampled_at.isoformat(),
        "age_seconds": passed.age_seconds,
        "backlog_rows": every_type.backlog_rows,
        "figures": list(SAMPLED_FIGURES),
    }
    return {**figures, "backlog_pass": passed, "sampled": sampled, "finished_sample": finished}


def _fresh_snapshot(db: Database, event_type: str | None) -> BacklogPass | None:
    try:
        return sampled_pass(db, event_type=event_type)
    except SchemaNotInitialised:
        return None  # before migration 031: read live (the banner asks for init-db)


COUNTED_NOW = {
    "queue_depth": metrics.queue_depth,
    "pending_total": metrics.pending_total,
    "scheduled_retries": metrics.scheduled_retries,
    "oldest_pending_age_seconds": metrics.oldest_pending_age,
    "processing": metrics.processing,
}
"""Above ``backlog.SAMPLED_ABOVE_ROWS``, the backlog figures the Overview still counts at each
refresh: each reads the users' claim index (status, available_at, created_at) and no
row's heap tuple once the table's visibility map covers its pages."""
SAMPLED_FIGURES = ("retrying", "stuck_locks", "attempts_histogram", "workers", "by_event_type")
"""Above ``backlog.SAMPLED_ABOVE_ROWS``, what the Overview takes from the scheduler's fresh
backlog snapshot: the figures that read each backlog row's heap tuple (``attempts``,
``locked_at``), the workers' liveness and the backlog columns of the table by event type."""


def status(db: Database, *, window: float, event_type: str | None) -> dict[str, Any]:
    """``metrics.status`` with ``count_cap()``: every SPEC §2 figure plus the database's
    ``now`` (ISO text); ``"estimated"`` names the figures that are estimates (the dead
    letters of ``attempts_histogram`` above the cap); ``"backlog_pass"`` is the one pass over
    the backlog they came from (``backlog.BacklogPass``), which the Overview's table by event
    type reads too (``event_types.load``): the page reads the backlog's rows once a refresh.

    Above ``backlog.SAMPLED_ABOVE_ROWS`` backlog rows, while a scheduler's snapshot of the
    backlog is fresh (``backlog.sampled_pass``), the page reads no backlog row's heap tuple:
    ``SAMPLED_FIGURES`` come from that snapshot and ``COUNTED_NOW`` are counted now;
    ``"sampled"`` then says so (``{"sampled_at", "age_seconds", "backlog_rows",
    "figures"}``), else it is ``None``. ``"finished_sample"`` is that fresh snapshot, at any
    backlog, when it holds the window's finished rows per event type over this ``window``
    (``BacklogPass.finished_over``): the table by event type takes its P95 and rates from it
    (``event_types.load``); else ``None``."""
    return _status(db_key(db), db, window, event_type, count_cap())


def count_cap() -> int:
    """Rows the dashboard counts exactly before it estimates (``estimates.DASHBOARD_COUNT_CAP``,
    read at each call)."""
    return estimates.DASHBOARD_COUNT_CAP


@cached
def _failed_tile(key: str, _db: Database, event_type: str | None) -> int:
    return metrics.failed_in_window(_db, window=FAILED_TILE_WINDOW_SECONDS, event_type=event_type)


def failed_last_24h(db: Database, *, event_type: str | None) -> int:
    """Rows dead-lettered in the last 24 hours (the "Failed (24 h)" tile), exact."""
    return _failed_tile(db_key(db), db, event_type)


@cached
def _samples(key: str, _db: Database, window: float) -> list[dict[str, Any]]:
    return metrics.samples_series(_db, window=window)


def samples(db: Database, *, window: float) -> list[dict[str, Any]]:
    """``metrics.samples_series``: the sampler's rows over the window, oldest first."""
    return _samples(db_key(db), db, window)


@cached
def _latency_series(
    key: str, _db: Database, window: float, event_type: str | None
) -> list[dict[str, Any]]:
    return metrics.latency_series(
        _db, window=window, bucket=bucket_for(window), event_type=event_type
    )


def latency_series(db: Database, *, window: float, event_type: str | None) -> list[dict[str, Any]]:
    """``metrics.latency_series`` with ``bucket_for(window)`` buckets."""
    return _latency_series(db_key(db), db, window, event_type)


@cached
def _throughput_series(
    key: str, _db: Database, window: float, event_type: str | None
) -> list[dict[str, Any]]:
    return metrics.throughput_series(
        _db, window=window, bucket=bucket_for(window), event_type=event_type
    )


def throughput_series(
    db: Database, *, window: float, event_type: str | None
) -> list[dict[str, Any]]:
    """``metrics.throughput_series`` with ``bucket_for(window)`` buckets."""
    return _throughput_series(db_key(db), db, window, event_type)


@cached
def _missing_indexes(key: str, _db: Database) -> list[str]:
    return indexes.missing_recommended_indexes(_db)


def missing_indexes(db: Database) -> list[str]:
    """``indexes.missing_recommended_indexes``: descriptions of absent recommended indexes."""
    return _missing_indexes(db_key(db), db)


@cached
def _retired_indexes(key: str, _db: Database) -> dict[str, str]:
    _, table = _db.settings.table_parts
    return {
        name: indexes.retired_harm(table, name) for name in indexes.retired_indexes_present(_db)
    }


def retired_indexes(db: Database) -> dict[str, str]:
    """``indexes.retired_indexes_present``: the indexes an earlier init-db created that
    init-db drops, each with why (``indexes.retired_harm``: it slows the workers' claim, or it
    refuses rows of a long event type)."""
    return _retired_indexes(db_key(db), db)


@cached
def _replica(key: str, _db: Database) -> ReplicaStatus:
    return replica_status_of(_db)


def replica_status(db: Database) -> ReplicaStatus:
    """``store.standby.replica_status``: whether the database is a hot standby and its replay lag
    (the banner on every page)."""
    return _replica(db_key(db), db)


@dataclass(frozen=True)
class DeadLetters:
    """What the Dead letters page shows, read in one load so that its figures agree:
    ``groups`` (``error_grouping.error_groups`` rows, biggest first), and the ``rows`` of the
    chosen ``error_group`` (``events.list_failed``, newest first; empty without one or when
    it is not among ``groups``). ``complete``: ``rows`` holds every row of the group."""

    groups: list[dict[str, Any]]
    error_group: str | None
    rows: list[dict[str, Any]]
    complete: bool

    @property
    def total(self) -> int:
        """Failed rows in every group matching the filter, listed or not."""
        return self.groups[0]["failed_total"] if self.groups else 0

    @property
    def group_count(self) -> int:
        """Error groups matching the filter, listed or not (``groups`` holds the biggest)."""
        return self.groups[0]["groups_total"] if self.groups else 0

    def group(self, group_id: str | None) -> dict[str, Any] | None:
        """The listed group of that id, if any."""
        return next((g for g in self.groups if g["group_id"] == group_id), None)


@cached
def _dead_letters(
    key: str, _db: Database, event_type: str | None, error_group: str | None
) -> DeadLetters:
    with _db.session():
        return _read_dead_letters(_db, event_type, error_group)


def _read_dead_letters(
    db: Database, event_type: str | None, error_group: str | None
) -> DeadLetters:
    groups = error_grouping.error_groups(db, event_type=event_type)
    if error_group is None or all(g["group_id"] != error_group for g in groups):
        return DeadLetters(groups, error_group, [], False)
    limit = events.DEFAULT_FAILED_ROWS_LIMIT
    rows = events.list_failed(db, error_group=error_group, event_type=event_type, limit=limit)
    complete = len(rows) < limit
    if complete:
        # The rows were read a moment after the counts: a row failed or replayed in
        # between must not make the group's count (nor the totals) disagree with its rows.
        [chosen] = [g for g in groups if g["group_id"] == error_group]
        more, gone = len(rows) - chosen["failed"], 0 if rows else 1
        groups = [
            {
                **g,
                "failed": len(rows) if g["group_id"] == error_group else g["failed"],
                "failed_total": g["failed_total"] + more,
                "groups_total": g["groups_total"] - gone,
            }
            for g in groups
            if g["group_id"] != error_group or rows
        ]
    return DeadLetters(groups, error_group, rows, complete)


DEAD_LETTER_ERROR_FIELDS = ("sample_error", "fingerprint", "last_error")
"""The text fields of error groups and dead letters that the page shows redacted."""


def dead_letters(db: Database, *, event_type: str | None, error_group: str | None) -> DeadLetters:
    """The error groups and the rows of one group, from one load (one cache entry): the
    group's count in the table, in the picker and above its rows are the same number.
    Their ``DEAD_LETTER_ERROR_FIELDS`` are redacted (docs/security.md).

    Args:
        event_type: the sidebar filter (exact or LIKE pattern), ``None`` for all.
        error_group: the chosen group's 12-hex id, or ``None``.
    """
    return _redacted_dead_letters(db_key(db), db, event_type, error_group)


@cached
def _redacted_dead_letters(
    key: str, _db: Database, event_type: str | None, error_group: str | None
) -> DeadLetters:
    # redacted once per load, not at each call: the Overview's headline and firing alerts
    # read the groups of each troubled type at every run (issue 32 item 4)
    loaded = _dead_letters(key, _db, event_type, error_group)
    shown = redactor(_db)
    return DeadLetters(
        shown.redact_rows(loaded.groups, DEAD_LETTER_ERROR_FIELDS),
        loaded.error_group,
        shown.redact_rows(loaded.rows, DEAD_LETTER_ERROR_FIELDS, head=ERROR_HEAD_CHARS),
        loaded.complete,
    )


OVERVIEW_ERROR_GROUPS_MAX_AGE_SECONDS = 60.0
"""The Overview reads the dead letters' error groups of its troubled types without bringing
their cache current again for this long after this process last did (each refresh of that
cache passes over every dead letter's index entry; issue 32 item 3)."""


@cached
def _overview_error_groups(key: str, _db: Database, event_type: str) -> list[dict[str, Any]]:
    groups = error_grouping.error_groups(
        _db, event_type=event_type, max_age=OVERVIEW_ERROR_GROUPS_MAX_AGE_SECONDS
    )
    return redactor(_db).redact_rows(groups, DEAD_LETTER_ERROR_FIELDS)


def overview_error_groups(db: Database, *, event_type: str) -> list[dict[str, Any]]:
    """The error groups of one event type (exact, or a LIKE pattern) for the Overview's
    headline and firing alerts: ``error_grouping.error_groups`` rows, redacted, as current as
    this process made them at most ``OVERVIEW_ERROR_GROUPS_MAX_AGE_SECONDS`` ago (the Dead
    letters page brings them current at each load)."""
    return _overview_error_groups(db_key(db), db, event_type)


@cached
def _group_event_type(
    key: str, _db: Database, error_group: str, event_type: str | None
) -> str | None:
    rows = events.list_failed(_db, error_group=error_group, event_type=event_type, limit=1)
    return rows[0]["event_type"] if rows else None


def group_event_type(db: Database, error_group: str, *, event_type: str | None) -> str | None:
    """The event type of a group that still has dead letters matching ``event_type``
    (``None``: any), or ``None`` when it has none (replayed, pruned, or never existed)."""
    return _group_event_type(db_key(db), db, error_group, event_type)


@cached
def _events_page(key: str, _db: Database, search: EventFilter, limit: int) -> list[dict[str, Any]]:
    return events.list_events(_db, search, limit=limit)


def events_page(db: Database, *, limit: int, **filters: Any) -> list[dict[str, Any]]:
    """``events.list_events`` of ``EventFilter(**filters)`` (one keyset page).

    Raises:
        ValueError: an unknown status; TypeError: an unknown filter.
    """
    return _events_page(db_key(db), db, EventFilter(**filters), limit)


@cached
def _matching_events(key: str, _db: Database, search: EventFilter, cap: int) -> int:
    return estimates.count_up_to(_db, "event_rows", cap=cap, where=search.where())


def matching_events(db: Database, **filters: Any) -> int:
    """The events ``EventFilter(**filters)`` matches on every page (no cursor), counted up to
    ``count_cap()`` only: a value above the cap means "more than the cap" (the Events page's
    header, issue 30 item 8). Reads at most cap + 1 matching rows.

    Raises:
        ValueError: an unknown status; TypeError: an unknown filter.
    """
    return _matching_events(db_key(db), db, EventFilter(**filters), count_cap())


@cached
def _event(key: str, _db: Database, event_id: int) -> dict[str, Any] | None:
    return events.get_event(_db, event_id)


def event(db: Database, event_id: int) -> dict[str, Any] | None:
    """``events.get_event``: one event with its (possibly truncated) payload."""
    return _event(db_key(db), db, event_id)


def event_payload(db: Database, event_id: int) -> str | None:
    """``events.event_payload``: the whole payload text (not cached: it may be large)."""
    return events.event_payload(db, event_id)


# ----------------------------------------------------------------------- payload privacy


def redactor(db: Database) -> Redactor:
    """The redactor of the database's settings (``redaction.redactor_for``)."""
    return redactor_for(db.settings)


def redacted_events_page(db: Database, *, limit: int, **filters: Any) -> list[dict[str, Any]]:
    """``events_page`` with ``last_error`` redacted (``Redactor.redact_text``)."""
    return redactor(db).redact_rows(events_page(db, limit=limit, **filters), head=ERROR_HEAD_CHARS)


@cached
def _redacted_event(key: str, _db: Database, event_id: int) -> dict[str, Any] | None:
    found = events.get_event(_db, event_id)
    return None if found is None else events.redact_event(found, redactor(_db))


def redacted_event(db: Database, event_id: int) -> dict[str, Any] | None:
    """``events.get_event`` through ``events.redact_event``: payload (or its head) and
    last_error redacted, as everyone sees them until an operator reveals them."""
    return _redacted_event(db_key(db), db, event_id)


def redacted_payload(db: Database, event_id: int) -> str | None:
    """``events.redacted_payload``: the whole payload, redacted (not cached)."""
    return events.redacted_payload(db, event_id, redactor(db))


def redacted_timeline(db: Database, aggregate_type: str, aggregate_id: str) -> list[dict[str, Any]]:
    """``timeline`` with ``last_error`` redacted."""
    return redactor(db).redact_rows(
        timeline(db, aggregate_type, aggregate_id), head=ERROR_HEAD_CHARS
    )


def events_csv(db: Database, *, limit: int, **filters: Any) -> str:
    """``events.events_csv`` of ``EventFilter(**filters)`` with the database's redactor (not
    cached: built on download)."""
    return events.events_csv(db, redactor(db), EventFilter(**filters), limit=limit)


def reveal_payload(db: Database, event_id: int, identity: Identity) -> RevealedPayload | None:
    """``events.reveal_payload`` (audited), then clears the audit log cache.

    Args:
        db: the Database of actions (``ctx.actions_db``).

    Raises:
        The errors of ``events.reveal_payload`` (``AccessDenied`` for a viewer).
    """
    try:
        return events.reveal_payload(db, event_id, identity)
    finally:
        _audit.clear()


@cached
def _timeline(
    key: str, _db: Database, aggregate_type: str, aggregate_id: str
) -> list[dict[str, Any]]:
    return events.aggregate_timeline(_db, aggregate_type, aggregate_id)


def timeline(db: Database, aggregate_type: str, aggregate_id: str) -> list[dict[str, Any]]:
    """``events.aggregate_timeline``: every event of one aggregate, oldest first."""
    return _timeline(db_key(db), db, aggregate_type, aggregate_id)


@cached
def _audit(key: str, _db: Database, limit: int) -> list[dict[str, Any]]:
    return recent_audit(_db, limit=limit)


def audit(db: Database, *, limit: int = 50) -> list[dict[str, Any]]:
    """``recent_audit``: the newest audit rows."""
    return _audit(db_key(db), db, limit)


def clear_audit() -> None:
    """Forget the cached audit log (an audited change was just made)."""
    _audit.clear()


KNOWN_TYPES_WINDOW_SECONDS = 3600.0
"""The samples an event-type filter is checked against: the last hour's."""
MAX_KNOWN_TYPES = 5000
"""Event types read for that check, at most."""


@cached
def _known_event_types(key: str, _db: Database, dead_letters: bool) -> list[str]:
    return by_event_type.known_event_types(
        _db, window=KNOWN_TYPES_WINDOW_SECONDS, limit=MAX_KNOWN_TYPES, dead_letters=dead_letters
    )


def known_event_types(db: Database) -> list[str]:
    """``by_event_type.known_event_types`` over the last hour's samples, with the dead
    letters' types when the recommended index by type of the dead letters is there
    (``missing_indexes``): the event types the sidebar's filter is checked against
    (``ui.filter_check``), sorted."""
    index = indexes.FAILED_BY_TYPE.name(db.settings.table_parts[1])
    indexed = not any(missing.startswith(f"{index}:") for missing in missing_indexes(db))
    return _known_event_types(db_key(db), db, indexed)


def database_now(db: Database) -> datetime:
    """The database clock (not cached), the reference for relative time inputs."""
    return events.database_now(db)


STALE_AFTER_ACTION = (
    _status,
    _failed_tile,
    _latency_series,
    _throughput_series,
    _dead_letters,
    _redacted_dead_letters,
    _overview_error_groups,
    _group_event_type,
    _events_page,
    _event,
    _redacted_event,
    _timeline,
    _audit,
)
"""Every reap, replay or prune changes row statuses (or deletes rows) and writes the audit
log, so it stales all of these; only the samples and the index check survive it."""


def clear_stale() -> None:
    """Clear every cache an action makes stale (``STALE_AFTER_ACTION``)."""
    for loader in STALE_AFTER_ACTION:
        loader.clear()
