"""Since when a session holds the xmin horizon, from one reading of ``pg_stat_activity`` and
what a long-lived monitor remembers of the readings before.

A session holds the horizon through its transaction id (``backend_xid``: from when it got
one, at most since its transaction began) or through its snapshot's ``backend_xmin``. A
REPEATABLE READ or SERIALIZABLE transaction keeps one snapshot from its first statement
to its end; a READ COMMITTED one takes a snapshot per statement and, without a transaction
id, holds the horizon only while a statement runs (between statements its ``backend_xmin``
is empty). ``pg_stat_activity`` does not show the isolation level, so one reading counts
from the transaction's start — never less than the truth — and says that the isolation is
unknown. A caller that reads again (the scheduler's ``Database``, the dashboard's, both
long-lived; not a one-shot CLI command) remembers each transaction by
``(pid, backend_start, xact_start)``: once the same transaction shows another
``backend_xmin``, or none after one, its snapshots are per statement, and from then on a
running statement counts from its start (``query_start``).

Another role's session, to a login without ``pg_read_all_stats``, shows no start at all,
only its xids: it is remembered by pid and role, and counted — at least — from the first
reading that showed its current transaction id (or, without one, its current
``backend_xmin``); on that first reading its age is unknown.
"""

import threading
import weakref
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from typing import Any

from outbox_monitor.store.db import Database

FROM_XID = "transaction start (it has a transaction id)"
FROM_BEGIN = "transaction start (isolation unknown from one reading)"
FROM_STATEMENT = "statement start (its snapshots are per statement)"
FROM_KEPT_SNAPSHOT = "first seen by this monitor (a snapshot kept between statements)"
FROM_FIRST_SEEN = "first seen by this monitor (at least: its start is hidden)"
UNKNOWN_HIDDEN = "unknown (hidden: counted from the next reading on)"
"""How a session's hold is counted (``Holder.held_from``)."""
FORGET_AFTER = timedelta(minutes=30)
"""A transaction no reading has shown for this long is forgotten. A reading lists at most the
oldest ``horizon.SESSIONS_LIMIT`` sessions: one pushed out for a while by older holders keeps
what earlier readings showed of it (its snapshots per statement) when it comes back."""
MAX_REMEMBERED = 10_000
"""At most this many transactions remembered (those seen longest ago are forgotten first)."""


@dataclass(frozen=True)
class Seen:
    """What the readings so far showed of one transaction (or, hidden, one session).

    Attributes:
        xid, xmin: its ``backend_xid`` and ``backend_xmin`` in the newest reading.
        xid_since, xmin_since: the first reading (the database's ``now()``) that showed
            the current value.
        per_statement: some reading showed another ``backend_xmin`` than the one before
            (or none after one): its snapshots are per statement (READ COMMITTED).
        readings: how many readings showed it.
        last_seen: the newest reading that showed it.
    """

    xid: str | None
    xmin: str | None
    xid_since: datetime
    xmin_since: datetime
    per_statement: bool = False
    readings: int = 1
    last_seen: datetime | None = None


class HorizonMemory:
    """Each session's ``Seen``, kept between readings; thread-safe (the scheduler's
    sampler, evaluator and exporter read through one ``Database``)."""

    def __init__(self) -> None:
        self._seen: dict[tuple[Any, ...], Seen] = {}
        self._lock = threading.Lock()

    def observe(self, rows: list[dict[str, Any]]) -> list[Seen]:
        """Record one reading of ``horizon_sessions``'s rows (each with the reading's
        ``now``), and forget every transaction no reading has shown for ``FORGET_AFTER``
        (ended; pids are reused, but the key holds the backend's and transaction's starts).

        Returns:
            Each row's ``Seen``, in the rows' order.
        """
        found = []
        with self._lock:
            for row in rows:
                key = (row["pid"], row["role"], row["backend_start"], row["xact_start"])
                seen = _next(self._seen.get(key), row["xid"], row["xmin"], row["now"])
                self._seen[key] = seen
                found.append(seen)
            if rows:
                self._forget(rows[0]["now"] - FORGET_AFTER)
        return found

    def _forget(self, before: datetime) -> None:
        kept = sorted(
            ((key, seen) for key, seen in self._seen.items() if seen.last_seen >= before),
            key=lambda item: item[1].last_seen,
        )
        self._seen = dict(kept[-MAX_REMEMBERED:])

    def __len__(self) -> int:
        """How many transactions are remembered."""
        return len(self._seen)


def _next(before: Seen | None, xid: str | None, xmin: str | None, now: datetime) -> Seen:
    if before is None:
        return Seen(xid, xmin, now, now, last_seen=now)
    return replace(
        before,
        xid=xid,
        xmin=xmin,
        xid_since=before.xid_since if xid == before.xid else now,
        xmin_since=before.xmin_since if xmin == before.xmin else now,
        per_statement=before.per_statement or (before.xmin is not None and xmin != before.xmin),
        readings=before.readings + 1,
        last_seen=now,
    )


def held_since(row: dict[str, Any], seen: Seen) -> tuple[datetime | None, str | None]:
    """Since when one session (a row of ``horizon_sessions``) holds the horizon, and how
    that was counted (``FROM_*``).

    Returns:
        ``(since, held_from)``: for a session in full view, its transaction's start — or,
        once its snapshots are known to be per statement and it has no transaction id, the
        earlier of its running statement's start and the first reading of its current
        ``backend_xmin`` (idle: that reading, a snapshot it keeps, such as a cursor's — as a
        statement under it runs, so the age does not fall back); for a hidden session, the
        earlier of the first readings of its current xid and xmin (a snapshot holder that
        then writes keeps its age) from its second reading on, else
        ``(None, UNKNOWN_HIDDEN)``; ``(xact_start, None)`` for a session holding nothing.
    """
    if row["xid"] is None and row["xmin"] is None:
        return row["xact_start"], None
    if row["hidden"]:
        if seen.readings < 2:
            return None, UNKNOWN_HIDDEN
        held = [seen.xid_since] if row["xid"] is not None else []
        held += [seen.xmin_since] if row["xmin"] is not None else []
        return min(held), FROM_FIRST_SEEN
    if row["xid"] is not None:
        return row["xact_start"], FROM_XID
    if not seen.per_statement:
        return row["xact_start"], FROM_BEGIN
    if row["state"] != "active" or row["query_start"] is None:
        return seen.xmin_since, FROM_KEPT_SNAPSHOT
    return min(row["query_start"], seen.xmin_since), FROM_STATEMENT


_memories: "weakref.WeakKeyDictionary[Database, HorizonMemory]" = weakref.WeakKeyDictionary()
_memories_lock = threading.Lock()


def memory_of(db: Database) -> HorizonMemory:
    """The readings remembered for ``db`` for as long as it lives: a long-lived caller's
    ``Database`` (the scheduler's, the dashboard's ``st.cache_resource`` one) remembers,
    a one-shot command's starts with nothing."""
    with _memories_lock:
        memory = _memories.get(db)
        if memory is None:
            memory = _memories[db] = HorizonMemory()
        return memory
