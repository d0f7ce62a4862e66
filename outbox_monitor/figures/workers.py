"""The workers as the outbox shows them (issue 15 item 7): each ``locked_by`` (SPEC §1: worker
instance + workflow id, set at claim, cleared at ack) with the rows in its hand now, its
stuck rows, its last claim and last ack; and the fleet's liveness, the figure
``no_claim_while_due`` ("no claim for N min while rows are due": the fleet is down, not slow).

What the table shows now is read here; what it forgets (a row loses ``locked_by`` at its ack)
is what the sampler remembered (``worker_sightings``, ``outbox_monitor.workers_seen``). Reads
only: the processing and pending rows through the users' claim index, led by status; done
and failed rows one step of the recommended ``finished`` index each. Nothing is added to the
workers' claim or ack.
"""

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from outbox_monitor.figures.backlog import BacklogPass, backlog_pass
from outbox_monitor.flow.held import Held, held
from outbox_monitor.store.db import Database
from outbox_monitor.units import bounded_key

WORKERS_SHOWN = 100
"""Workers listed, those holding most rows first (``locked_by`` is the workers' free text:
a value per execution would otherwise make the list as long as the processing rows)."""
IDS_PER_WORKER = 1_000
"""Ids of a worker's rows the sampler remembers per pass, its newest claims first."""
DUE_OFFENDERS = 5
"""Event types an alert's message names among the due rows."""


@dataclass(frozen=True)
class Liveness:
    """The fleet's liveness now, from the table alone.

    Attributes:
        now: the database's ``now()``.
        due_rows: rows due now (SPEC §2 queue depth) of event types no flow control holds
            (SPEC §5: a pause or an open breaker keeps them unclaimed on purpose).
        held_rows: due rows a flow control holds.
        due_since: the oldest ``available_at`` among ``due_rows`` (``None``: none due).
        newest_claim: the newest ``locked_at`` of a processing row (``None``: none).
        newest_retry: the newest claim that failed fast into a retry, as a lower bound: over
            pending rows with ``attempts`` > 0, the latest ``available_at`` minus the longest
            backoff its ``attempts`` can have waited (SPEC §1's schedule plus 10 % jitter,
            ``outbox_monitor.backoff_base`` × 1.1), not after ``now`` (``None``: none). A
            worker that let go of the row set that ``available_at`` at its failure, after
            its claim; a later instant than now is not the shared schedule's and is left out.
        newest_outcome: the newest ``processed_at`` of a done or failed row (``None``: none).
    """

    now: datetime
    due_rows: int
    held_rows: int
    due_since: datetime | None
    newest_claim: datetime | None
    newest_retry: datetime | None
    newest_outcome: datetime | None

    @property
    def no_claim_while_due(self) -> float:
        """Seconds the due rows have waited with no claim and no outcome: while ``due_rows``
        > 0, ``now`` minus the latest of ``due_since``, ``newest_claim``, ``newest_retry``
        and ``newest_outcome`` (never below 0); 0 when no row is due. A row claimed and acked
        between two readings still leaves its ``processed_at``; a claim that fails fast into
        a retry leaves its backoff's ``available_at`` (``newest_retry``), so a fleet failing
        every claim at once is not taken for a fleet that claims nothing."""
        if self.due_rows == 0 or self.due_since is None:
            return 0.0
        instants = (self.due_since, self.newest_claim, self.newest_retry, self.newest_outcome)
        seen = [t for t in instants if t]
        return max(0.0, (self.now - max(seen)).total_seconds())

    def as_json(self) -> dict[str, Any]:
        """``status --json``'s ``workers`` object: instants as ISO-8601 text (or null)."""
        return {
            "no_claim_while_due_seconds": self.no_claim_while_due,
            "due_rows": self.due_rows,
            "held_rows": self.held_rows,
            "due_since": _iso(self.due_since),
            "newest_claim": _iso(self.newest_claim),
            "newest_retry": _iso(self.newest_retry),
            "newest_outcome": _iso(self.newest_outcome),
        }


def liveness(
    db: Database, *, flow: Held | None = None, backlog: BacklogPass | None = None
) -> Liveness:
    """The fleet's liveness now (``Liveness``): from one pass over the backlog (the due rows
    of the types no flow control holds counted, since when the oldest is due, the newest claim
    of the processing rows, the newest retry of the pending rows with attempts) and one index
    step each for the newest done and failed row.

    Args:
        flow: the rows flow control holds now, of every event type, when already read
            (``flow.held.held_by`` of the table's controls); default: read here.
        backlog: the pass over the backlog of every event type when already read
            (``backlog.backlog_pass`` without a filter: ``metrics.status`` shares its own);
            default: read here.

    Raises:
        The connector's errors (``QueryTimeout`` under the statement timeout); ValueError:
        ``backlog`` was read with an event-type filter.
    """
    flow = held(db) if flow is None else flow
    if backlog is None:
        backlog = backlog_pass(db)
    if backlog.event_type is not None:
        raise ValueError("the workers' liveness reads the backlog of every event type")
    held_types = set(flow.by_event_type)
    free = [g for g in backlog.groups if g["event_type"] not in held_types]

    def newest(name: str) -> datetime | None:
        return max((g[name] for g in backlog.groups if g[name] is not None), default=None)

    row = db.fetch_one("workers_newest_outcome")
    return Liveness(
        now=row["now"] if backlog.now is None else backlog.now,
        due_rows=sum(g["queue_depth"] for g in free),
        held_rows=flow.rows_held,
        due_since=min((g["due_since"] for g in free if g["due_since"]), default=None),
        newest_claim=newest("newest_claim"),
        newest_retry=newest("newest_retry"),
        newest_outcome=row["newest_outcome"],
    )


def no_claim_while_due(db: Database) -> float:
    """The figure ``no_claim_while_due`` (seconds): while rows are due that no flow control
    holds, how long since the latest of the newest claim (``max(locked_at)`` of processing
    rows), the newest claim that failed fast into a retry (``Liveness.newest_retry``), the
    newest outcome (``max(processed_at)`` of done and failed rows) and the instant
    the oldest of those rows became due; 0 when none is due (``Liveness.no_claim_while_due``).
    A figure of the whole table: the event-type filter does not apply.

    Raises:
        The connector's errors.
    """
    return liveness(db).no_claim_while_due


def due_offenders(db: Database, limit: int = DUE_OFFENDERS) -> list[dict[str, Any]]:
    """What an alert on ``no_claim_while_due`` names: the due rows in all and the event types
    with most of them, as ``[{"kind": "due", "label": "in all", "count": n},
    {"kind": "due", "event_type", "count"}, …]`` (``limit`` types; empty when none is due).

    Raises:
        The connector's errors.
    """
    rows = sorted(db.fetch_all("due_by_event_type"), key=lambda r: (-r["due"], r["event_type"]))
    if not rows:
        return []
    found: list[dict[str, Any]] = [
        {"kind": "due", "label": "in all", "count": sum(r["due"] for r in rows)}
    ]
    found += [
        {"kind": "due", "event_type": r["event_type"], "count": r["due"]} for r in rows[:limit]
    ]
    return found


@dataclass(frozen=True)
class InHand:
    """One ``locked_by``'s processing rows now (``None``: orphans nobody owns).

    Attributes:
        rows_in_hand: its processing rows.
        stuck: those locked before ``now - lock_timeout`` or with no lock time (SPEC §2).
        newest_claim, oldest_claim: the newest and oldest ``locked_at`` among them.
        ids: their ids, newest claims first (at most ``IDS_PER_WORKER``).
    """

    locked_by: str | None
    rows_in_hand: int
    stuck: int
    newest_claim: datetime | None
    oldest_claim: datetime | None
    ids: tuple[int, ...]


def in_hand(
    db: Database, *, lock_timeout: float | None = None, limit: int = WORKERS_SHOWN
) -> list[InHand]:
    """The processing rows per ``locked_by`` now, the workers holding most first (at most
    ``limit``); reads processing rows only.

    Args:
        lock_timeout: seconds (default: settings, 15 min), for ``stuck``.

    Raises:
        The connector's errors.
    """
    timeout = db.settings.lock_timeout if lock_timeout is None else lock_timeout
    rows = db.fetch_all(
        "workers_in_hand", {"lock_timeout": timeout, "ids": IDS_PER_WORKER, "limit": limit}
    )
    return [
        InHand(
            locked_by=r["locked_by"],
            rows_in_hand=r["rows_in_hand"],
            stuck=r["stuck"],
            newest_claim=r["newest_claim"],
            oldest_claim=r["oldest_claim"],
            ids=tuple(r["ids"] or ()),
        )
        for r in rows
    ]


@dataclass(frozen=True)
class Worker:
    """One worker of the view: what the table shows now and what the sampler saw.

    Attributes:
        locked_by: the worker (``None``: processing rows with no ``locked_by``).
        rows_in_hand, stuck: now, from the table.
        oldest_claim: the oldest ``locked_at`` of its rows in hand now.
        last_claim: the newest ``locked_at`` seen: now's, or a sampler pass's.
        last_ack: the newest ``processed_at`` of a row a pass saw in its hand and a later
            pass found done (``None``: none seen; acks between two passes go unseen).
        last_seen_holding: the last pass that saw it holding rows (``None``: never sampled).
        acks_seen, dead_lettered_seen, returned_seen: rows seen in its hand later found
            done, failed, and pending again or gone.
    """

    locked_by: str | None
    rows_in_hand: int
    stuck: int
    oldest_claim: datetime | None
    last_claim: datetime | None
    last_ack: datetime | None
    last_seen_holding: datetime | None
    acks_seen: int
    dead_lettered_seen: int
    returned_seen: int


@dataclass(frozen=True)
class Workers:
    """The workers listed (``Worker``, at most ``WORKERS_SHOWN``) and how many others the
    table holds now or the sampler remembers (``not_listed``: ``locked_by`` is the workers'
    free text, a value per execution or per restart would make the list endless)."""

    listed: list[Worker]
    not_listed: int


def workers(
    db: Database, *, lock_timeout: float | None = None, limit: int = WORKERS_SHOWN
) -> Workers:
    """The workers the table shows now or the sampler saw (``outbox_monitor.workers_seen``),
    at most ``limit``: those holding rows now (the ``limit`` holding most), then those the
    sampler saw holding rows last; listed with stuck rows first, then by rows in hand,
    then by name.

    Raises:
        The connector's errors (``SchemaNotInitialised`` without migration 013: ``init-db``).
    """
    with db.session():
        now = {w.locked_by: w for w in in_hand(db, lock_timeout=lock_timeout, limit=limit)}
        rows = db.fetch_all(
            "workers_seen_list",
            {
                "table_name": db.table_name,
                "in_hand": [bounded_key(name) for name in now if name is not None],
                "limit": limit,
            },
        )
    seen = {r["locked_by"]: r for r in rows}  # as the sampler keys them (units.bounded_key)
    keys = {name: None if name is None else bounded_key(name) for name in now}
    held = set(keys.values())
    names = [*now, *(n for n in seen if n not in held)][: max(limit, len(now))]
    total = (rows[0]["seen_total"] if rows else 0) + sum(1 for k in held if k not in seen)
    found = []
    for name in names:
        current, past = now.get(name), seen.get(keys.get(name, name)) or {}
        claims = [t for t in (current and current.newest_claim, past.get("last_claim_at")) if t]
        found.append(
            Worker(
                locked_by=name,
                rows_in_hand=current.rows_in_hand if current else 0,
                stuck=current.stuck if current else 0,
                oldest_claim=current.oldest_claim if current else None,
                last_claim=max(claims) if claims else None,
                last_ack=past.get("last_ack_at"),
                last_seen_holding=past.get("last_seen"),
                acks_seen=past.get("acks_seen", 0),
                dead_lettered_seen=past.get("dead_lettered_seen", 0),
                returned_seen=past.get("returned_seen", 0),
            )
        )
    found.sort(key=lambda w: (-w.stuck, -w.rows_in_hand, w.locked_by is None, w.locked_by or ""))
    return Workers(found, max(0, total - len(found)))


def _iso(value: datetime | None) -> str | None:
    return None if value is None else value.isoformat()


@dataclass(frozen=True)
class Sighting:
    """What the sampler's passes saw of one worker (``outbox_monitor.workers_seen``): evidence
    of whether it is alive, never proof (acks between two passes go unseen).

    Attributes:
        locked_by: the worker, as the sampler keys it (``units.bounded_key``).
        last_seen_holding: the last pass that saw it holding rows.
        last_claim: the newest ``locked_at`` a pass saw among its rows.
        last_ack: the newest ``processed_at`` of a row a pass saw in its hand and a later pass
            found done; ``None``: none seen.
        last_fail: the same for a row found dead-lettered (failed); ``None``: none seen.
    """

    locked_by: str
    last_seen_holding: datetime
    last_claim: datetime | None
    last_ack: datetime | None
    last_fail: datetime | None

    def as_json(self) -> dict[str, Any]:
        """The sighting with its times in ISO 8601 (``None`` stays)."""
        return {
            "last_seen_holding": _iso(self.last_seen_holding),
            "last_claim": _iso(self.last_claim),
            "last_ack": _iso(self.last_ack),
            "last_fail": _iso(self.last_fail),
        }


def sightings(db: Database, names: list[str]) -> dict[str, Sighting]:
    """What the sampler saw of the workers ``names`` (``locked_by`` as the table holds it) on
    ``db``'s outbox table, by name; a name it never saw, or forgot after the samples'
    retention, is absent.

    Raises:
        The connector's errors (``SchemaNotInitialised`` without migration 023: ``init-db``).
    """
    keys = {bounded_key(name): name for name in names}
    if not keys:
        return {}
    rows = db.fetch_all("workers_seen_of", {"table_name": db.table_name, "names": sorted(keys)})
    return {
        keys[r["locked_by"]]: Sighting(
            locked_by=r["locked_by"],
            last_seen_holding=r["last_seen"],
            last_claim=r["last_claim_at"],
            last_ack=r["last_ack_at"],
            last_fail=r["last_fail_at"],
        )
        for r in rows
    }
