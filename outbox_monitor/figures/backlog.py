"""The backlog read once (issue 32 item 3): the pending and processing rows grouped by event
type and attempts in one statement (named query ``backlog_pass``), from which ``metrics``
adds up every SPEC §2 backlog figure and the backlog part of retry pressure, ``by_event_type``
each event type's backlog row, and ``workers.liveness`` the liveness of the workers: one
heap pass over the backlog where there were three.
"""

from dataclasses import dataclass
from datetime import datetime
from typing import Any

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
    """

    now: datetime | None
    groups: list[dict[str, Any]]
    event_type: str | None

    def _age(self, oldest: datetime | None) -> float | None:
        return None if oldest is None or self.now is None else (self.now - oldest).total_seconds()

    def backlog(self) -> dict[str, Any]:
        """``backlog``'s figures (see there)."""
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
        """``open_by_event_type``'s rows (see there), by event type name."""
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
    where = Where().event_type(event_type)
    groups = db.fetch_all(
        "backlog_pass",
        {
            "lock_timeout": timeout,
            "window": db.settings.window if window is None else window,
            **where.params,
        },
        and_filters=where.fragment,
    )
    now = groups[0]["now"] if groups else None
    return BacklogPass(now, groups, event_type or None)
