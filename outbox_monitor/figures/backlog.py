"""The backlog read once (issue 32 item 3): the pending and processing rows grouped by event
type and attempts in one statement (named query ``backlog_pass``), from which ``metrics``
adds up every SPEC §2 backlog figure and the backlog part of retry pressure, ``by_event_type``
each event type's backlog row, and ``workers.liveness`` the liveness of the workers: one
heap pass over the backlog where there were three.

The scheduler's sampler stores its own pass, every event type's, as the table's backlog
snapshot (``record_snapshot``, migration 031), with the window's finished rows per event type
(migration 033). Above ``SAMPLED_ABOVE_ROWS`` backlog rows the Overview reads that snapshot
while it is fresh (``sampled_pass``) instead of the backlog's heap, and at any backlog its
table by event type takes each type's latency P95 and rates from it (``BacklogPass.finished``)
instead of the window's finished rows; it says how old they are. ``status --json`` and the
alerts never read it (SPEC §2: exact).
"""

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from psycopg import Connection
from psycopg.types.json import Jsonb

from outbox_monitor.store.db import Database
from outbox_monitor.store.filters import Where

BACKLOG_COUNTS = (
    "queue_depth",
    "pending_total",
    "scheduled_retries",
    "processing",
    "stuck_locks",
    "created_open_in_window",
)
"""The row counts of each ``backlog_pass`` group, added up by ``BacklogPass``."""
INSTANTS = ("oldest_pending_at", "due_since", "newest_claim", "newest_retry")
"""The instants of each ``backlog_pass`` group (ISO text in a snapshot)."""
SAMPLED_ABOVE_ROWS = 20_000
"""Backlog rows (pending and processing, every event type) above which the Overview takes the
backlog figures that need each row's heap tuple — retrying, stuck locks, retry pressure's
backlog part, the table by event type, the workers' liveness — from the scheduler's last
sample while it is fresh, instead of one pass over those rows at each refresh (≈ 1 buffer per
row, and ≈ 2.4 ms per 1,000 rows at 10 M rows on an idle machine: benchmarks/RESULTS.md,
"Scale after one backlog pass" and "The Overview's one backlog pass")."""
FINISHED_SAMPLE_MAX_TYPES = 1_000
"""Event types with finished rows in the window above which the sampler keeps none of their
figures in the snapshot (``BacklogPass.finished`` is then ``None`` and the Overview reads them
at each refresh): the snapshot stays a bounded row."""
FRESH_SAMPLE_INTERVALS = 3
"""A snapshot is fresh for this many sample intervals (``OUTBOX_MONITOR_SAMPLE_INTERVAL``):
a scheduler that skipped a pass or two is still sampling; one that stopped is not."""


@dataclass(frozen=True)
class BacklogPass:
    """The backlog read once (named query ``backlog_pass``): its pending and processing rows
    grouped by event type and attempts, each group with its SPEC §2 backlog figures and the
    workers' liveness parts. Every backlog figure, the backlog part of retry pressure, each
    event type's backlog row and the liveness of the workers are sums, minima and maxima of
    these groups: one heap pass serves ``status``, the Overview's table by event type and
    ``workers.liveness``.

    Attributes:
        now: the database's ``now()`` of the pass (``None`` when the backlog is empty).
        groups: the ``backlog_pass`` rows: ``event_type``, ``attempts``, ``rows``, the
            ``BACKLOG_COUNTS``, ``oldest_pending_at``, ``due_since``, ``newest_claim``,
            ``newest_retry`` (instants or ``None``).
        event_type: the SPEC §2 filter it was read with (``None``: every event type).
        sampled_at: ``None`` for a pass read now; the sample's instant for a snapshot
            (``sampled_pass``: ``now`` is then that instant too).
        age_seconds: a snapshot's age when read (0 for a pass read now).
        backlog_rows: a snapshot's backlog rows of every event type, whatever the filter
            (``None`` for a pass read now).
        finished: a snapshot's ``metrics.finished_by_event_type`` of every event type, read
            with it over ``finished_window`` seconds (``{event_type: {"latency_p95",
            "processed", "created_finished"}}``); ``None`` for a pass read now, a snapshot
            before migration 033 or one of more than ``FINISHED_SAMPLE_MAX_TYPES`` types.
        finished_window: seconds of ``finished``'s window.
        window: seconds of the groups' ``created_open_in_window`` (the pass's window; a
            snapshot's sampler's window, ``None`` for one taken before migration 035).
    """

    now: datetime | None
    groups: list[dict[str, Any]]
    event_type: str | None
    sampled_at: datetime | None = None
    age_seconds: float = 0.0
    backlog_rows: int | None = None
    finished: dict[str, dict[str, Any]] | None = None
    finished_window: float | None = None
    window: float | None = None

    def finished_over(self, window: float) -> dict[str, dict[str, Any]] | None:
        """``finished`` when it was read over ``window`` seconds, else ``None``."""
        return self.finished if self.finished_window == window else None

    def _age(self, oldest: datetime | None) -> float | None:
        return None if oldest is None or self.now is None else (self.now - oldest).total_seconds()

    def backlog(self) -> dict[str, Any]:
        """``metrics.backlog``'s figures (see there)."""
        oldest = [g["oldest_pending_at"] for g in self.groups if g["oldest_pending_at"]]
        histogram: dict[int, int] = {}
        for group in self.groups:
            histogram[group["attempts"]] = histogram.get(group["attempts"], 0) + group["rows"]

        def total(name: str) -> int:
            return sum(group[name] for group in self.groups)

        return {
            "queue_depth": total("queue_depth"),
            "pending_total": total("pending_total"),
            "scheduled_retries": total("scheduled_retries"),
            "retrying": sum(g["pending_total"] for g in self.groups if g["attempts"] > 0),
            "oldest_pending_age_seconds": self._age(min(oldest, default=None)),
            "processing": total("processing"),
            "stuck_locks": total("stuck_locks"),
            "attempts_histogram": dict(sorted(histogram.items())),
        }

    def created_open_in_window(self) -> int:
        """Open rows created in the pass's window (``throughput``'s ``open_created``)."""
        return sum(group["created_open_in_window"] for group in self.groups)

    def by_event_type(self) -> list[dict[str, Any]]:
        """``metrics.open_by_event_type``'s rows (see there), by event type name."""
        rows: dict[str, dict[str, Any]] = {}
        for group in self.groups:
            row = rows.setdefault(
                group["event_type"],
                dict.fromkeys((*BACKLOG_COUNTS, "retrying"), 0)
                | {"event_type": group["event_type"], "oldest_pending_at": None},
            )
            for name in BACKLOG_COUNTS:
                row[name] += group[name]
            if group["attempts"] > 0:
                row["retrying"] += group["pending_total"]
            oldest = group["oldest_pending_at"]
            if oldest is not None and (
                row["oldest_pending_at"] is None or oldest < row["oldest_pending_at"]
            ):
                row["oldest_pending_at"] = oldest
        for row in rows.values():
            row["oldest_pending_age"] = self._age(row["oldest_pending_at"])
        return sorted(rows.values(), key=lambda row: row["event_type"])


def backlog_pass(
    db: Database,
    *,
    lock_timeout: float | None = None,
    event_type: str | None = None,
    window: float | None = None,
) -> BacklogPass:
    """Read the backlog once (``BacklogPass``, named query ``backlog_pass``): O(backlog)
    however many event types, one heap tuple per pending or processing row (``attempts`` and
    ``locked_at`` are in no index of the users').

    Args:
        lock_timeout: seconds of stuck locks (default: settings, 15 min).
        event_type: SPEC §2 filter.
        window: seconds of ``created_open_in_window`` (default: settings).

    Raises:
        The connector's errors (``QueryTimeout``, ``DatabaseUnavailable``, …).
    """
    timeout = db.settings.lock_timeout if lock_timeout is None else lock_timeout
    seconds = db.settings.window if window is None else window
    where = Where().event_type(event_type)
    groups = db.fetch_all(
        "backlog_pass",
        {"lock_timeout": timeout, "window": seconds, **where.params},
        and_filters=where.fragment,
    )
    now = groups[0]["now"] if groups else None
    return BacklogPass(now, groups, event_type or None, window=seconds)


def record_snapshot(
    conn: Connection,
    compose: Any,
    table_name: str,
    passed: BacklogPass,
    *,
    sampled_at: datetime | None = None,
    finished: dict[str, dict[str, Any]] | None = None,
    finished_window: float | None = None,
) -> None:
    """Store ``passed`` (of every event type) as the table's backlog snapshot, replacing the
    last one (named query ``backlog_snapshot_upsert``, migrations 031, 033 and 035: with
    ``passed.window``), in the
    caller's transaction (the sampler's, with its sample).

    Args:
        conn: a connection of the database the scheduler writes to.
        compose: that ``Database``'s ``compose``.
        table_name: the outbox table's name (``Database.table_name``).
        passed: a pass read now without a filter.
        sampled_at: its instant when the pass has none (an empty backlog): the sample's.
        finished: ``metrics.finished_by_event_type`` of every event type, read with the pass
            over ``finished_window`` seconds; kept only up to ``FINISHED_SAMPLE_MAX_TYPES``
            event types (more: none kept).

    Raises:
        ValueError: ``passed`` was read with an event-type filter; psycopg's errors.
    """
    if passed.event_type is not None:
        raise ValueError("a backlog snapshot holds every event type")
    groups = [
        {**g, **{name: g[name].isoformat() if g[name] else None for name in INSTANTS}}
        for g in passed.groups
    ]
    for group in groups:
        group.pop("now", None)
    kept = (
        Jsonb(finished)
        if finished is not None and len(finished) <= FINISHED_SAMPLE_MAX_TYPES
        else None
    )
    conn.execute(
        compose("backlog_snapshot_upsert"),
        {
            "table_name": table_name,
            "sampled_at": passed.now or sampled_at,
            "groups": Jsonb(groups),
            "backlog_window": passed.window,
            "finished": kept,
            "finished_window": finished_window if kept else None,
        },
    )


def sampled_pass(
    db: Database, *, event_type: str | None = None, max_age: float | None = None
) -> BacklogPass | None:
    """The table's backlog snapshot as a ``BacklogPass`` (its groups matching ``event_type``,
    ``now`` = ``sampled_at`` = the sample's instant, ``age_seconds``, ``backlog_rows`` of
    every type, the window's finished rows of every type in ``finished``), or ``None`` when
    there is none at most ``max_age`` seconds old (no scheduler samples this table, or it
    stopped).

    Args:
        event_type: SPEC §2 filter, applied in SQL to the stored groups.
        max_age: seconds (default ``FRESH_SAMPLE_INTERVALS`` sample intervals).

    Raises:
        The connector's errors; ``SchemaNotInitialised`` before migration 031 (run init-db).
    """
    if max_age is None:
        max_age = FRESH_SAMPLE_INTERVALS * db.settings.sample_interval
    where = Where().event_type(event_type)
    row = db.fetch_one(
        "backlog_snapshot",
        {"table_name": db.table_name, "max_age": max_age, **where.params},
        and_filters=where.fragment,
    )
    if row is None:
        return None
    groups = [
        {
            **g,
            **{name: datetime.fromisoformat(g[name]) if g[name] else None for name in INSTANTS},
        }
        for g in row["groups"]
    ]
    return BacklogPass(
        row["sampled_at"],
        groups,
        event_type or None,
        sampled_at=row["sampled_at"],
        age_seconds=row["age_seconds"],
        backlog_rows=row["backlog_rows"],
        finished=row["finished"],
        finished_window=row["finished_window"],
        window=row["backlog_window"],
    )
