"""What the sampler remembers of each worker (issue 15 item 7): a row loses ``locked_by`` at
its ack (SPEC §1), so each pass records, per ``locked_by``, the rows in its hand and their
ids into ``outbox_monitor.workers_seen`` (migration 013); at the next pass a row seen in a
worker's hand and no longer processing under it was let go of, and found done it was acked at
its ``processed_at`` — unless its ``available_at`` moved past the pass that saw it: a retry,
a reap or a replay (SPEC §1, §4) sets it to their own now, an ack or a dead-letter keeps it,
so such a row went back to the queue and was finished by whoever claimed it next (another
worker, perhaps), which is no ack of this one: it counts as returned.

What cannot be known: a row claimed and let go of between two passes is never seen in a
hand (its ack counts in no worker's, though its ``processed_at`` keeps the fleet's liveness);
a retry or a reap leaves no time (SPEC §1 and §4 clear the lock), nor whose it was after a
prune. On a read replica the pass sees the data as of its replay lag, so a row moved back
within that lag before the pass may still count for the worker that held it. Migration 010's
outcome log (``control_outcomes``) records no worker and exists only while a breaker does.
"""

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from outbox_monitor.figures.workers import InHand, in_hand
from outbox_monitor.store.db import Database, database_now
from outbox_monitor.units import bounded_key


@dataclass(frozen=True)
class LetGo:
    """What became of the rows a worker held at the last pass and no longer holds: ``acked``
    (done; the newest ``processed_at`` is ``last_ack``), ``dead_lettered`` (failed; the
    newest ``processed_at`` is ``last_fail``) and
    ``returned`` (pending again — a retry or a reap —, processing under another worker,
    finished after going back to the queue, or gone)."""

    acked: int = 0
    dead_lettered: int = 0
    returned: int = 0
    last_ack: datetime | None = None
    last_fail: datetime | None = None


@dataclass(frozen=True)
class Hand:
    """What the last pass saw in one worker's hand: the ids, and the pass's instant
    (``seen_at``, the database's now read before the rows)."""

    ids: list[int]
    seen_at: datetime


def let_go(previous: dict[str, Hand], rows: list[dict[str, Any]]) -> dict[str, LetGo]:
    """Per worker of the last pass, what became of its rows (``LetGo``), given ``rows`` (id,
    status, locked_by, processed_at, available_at now) of every id it held; an id absent
    from ``rows`` was pruned. A row still processing under the same ``locked_by`` is still
    in hand; a row done or failed whose ``available_at`` is past the hand's ``seen_at`` went
    back to the queue since (retry, reap, replay) and was finished from there: returned."""
    now = {row["id"]: row for row in rows}
    found = {}
    for worker, hand in previous.items():
        acked = dead = returned = 0
        last_ack = last_fail = None
        for row_id in hand.ids:
            row = now.get(row_id)
            if row is None:
                returned += 1
            elif row["status"] == "processing" and _key(row["locked_by"]) == worker:
                continue
            elif row["available_at"] > hand.seen_at:
                returned += 1
            elif row["status"] == "done":
                acked += 1
                last_ack = _newest(last_ack, row["processed_at"])
            elif row["status"] == "failed":
                dead += 1
                last_fail = _newest(last_fail, row["processed_at"])
            else:
                returned += 1
        found[worker] = LetGo(acked, dead, returned, last_ack, last_fail)
    return found


def record_workers(db: Database, *, primary: Database | None = None) -> int:
    """One sampler pass over the workers: read each ``locked_by``'s processing rows now and
    what became of the rows each held at the last pass (by id, through ``db``), then upsert
    one ``workers_seen`` row per worker (its ``locked_by`` as ``units.bounded_key``) holding
    rows now or at the last pass (a worker idle
    at both is not written again: one statement per worker in hand, not per worker seen in
    the retention) and forget those holding nothing for the samples' retention (through
    ``primary``, default ``db``). Processing rows without ``locked_by`` are no worker's: the
    view shows them, this records nothing of them.

    Returns:
        How many workers the pass recorded (holding rows now or at the last pass).

    Raises:
        The connector's errors (``SchemaNotInitialised`` without migration 013: ``init-db``).
    """
    writes = primary or db
    table = {"table_name": db.table_name}
    previous = {
        r["locked_by"]: Hand(list(r["ids_in_hand"]), r["updated_at"])
        for r in writes.fetch_all("workers_seen_hands", table)
    }
    seen_at = database_now(db)
    current = {bounded_key(w.locked_by): w for w in in_hand(db) if w.locked_by is not None}
    ids = sorted({i for hand in previous.values() for i in hand.ids})
    rows = db.fetch_all("workers_rows_by_id", {"ids": ids}) if ids else []
    outcomes = let_go(previous, rows)
    with writes.connection() as conn, conn.transaction():
        for name in [*current, *(n for n in previous if n not in current)]:
            conn.execute(
                writes.compose("workers_seen_upsert"),
                {
                    **_upsert_params(name, current.get(name), outcomes.get(name, LetGo())),
                    **table,
                    "seen_at": seen_at,
                },
            )
        conn.execute(
            writes.compose("workers_seen_prune"),
            {**table, "retention": db.settings.sample_retention},
        )
    return len(current.keys() | previous.keys())


def _newest(known: datetime | None, found: datetime | None) -> datetime | None:
    return known if found is None or (known is not None and known >= found) else found


def _key(locked_by: str | None) -> str | None:
    return None if locked_by is None else bounded_key(locked_by)


def _upsert_params(name: str, holding: InHand | None, gone: LetGo) -> dict[str, Any]:
    return {
        "locked_by": name,
        "rows_in_hand": holding.rows_in_hand if holding else 0,
        "stuck": holding.stuck if holding else 0,
        "ids": list(holding.ids) if holding else [],
        "newest_claim": holding.newest_claim if holding else None,
        "last_ack": gone.last_ack,
        "last_fail": gone.last_fail,
        "acked": gone.acked,
        "dead_lettered": gone.dead_lettered,
        "returned": gone.returned,
    }
