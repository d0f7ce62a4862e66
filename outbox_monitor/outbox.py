"""The reference worker API of SPEC §1: publish, claim, ack, retry, dead-letter, ledger guard;
and the publisher's optional nudge of the n8n poller (``nudge``).

Every transition calls the shared SQL functions of the ``outbox_monitor`` schema
(``claim``, ``ack``, ``ack_many``, ``fail``), so Python workers and n8n workflows cannot
drift apart.
All of them take the caller's ``psycopg.Connection`` and run in its transaction.
"""

import logging
import threading
import weakref
from collections.abc import Callable, Mapping
from typing import Any

import psycopg
import urllib3
from psycopg import sql
from psycopg.rows import dict_row, tuple_row
from psycopg.types.json import Jsonb

from outbox_monitor.config.settings import (
    DEFAULT_CLAIM_BATCH,
    DEFAULT_LEDGER_TABLE_NAME,
    DEFAULT_MAX_ATTEMPTS,
    DEFAULT_TABLE,
)
from outbox_monitor.config.values import split_table_name
from outbox_monitor.errors import clean_error
from outbox_monitor.store.queries import compose

log = logging.getLogger(__name__)


class PermanentError(Exception):
    """Raised by a handler for a failure no retry can fix (invalid API key, 4xx
    validation error): the row is dead-lettered at once (SPEC §1)."""


def _identifier(table: str) -> sql.Identifier:
    return sql.Identifier(*split_table_name(table))


def _regclass(table: str) -> str:
    return _identifier(table).as_string()


def _scalar(conn: psycopg.Connection, query: sql.Composed, params: dict[str, Any]) -> Any:
    """First column of the first row (``None`` without a row), whatever the conn's row factory."""
    with conn.cursor(row_factory=tuple_row) as cur:
        row = cur.execute(query, params).fetchone()
    return None if row is None else row[0]


def _ledger_of(table: str) -> str:
    return f"{split_table_name(table)[0]}.{DEFAULT_LEDGER_TABLE_NAME}"


# Per connection and table: whether the table is partitioned, looked up on the first publish.
_partitioned: "weakref.WeakKeyDictionary[psycopg.Connection, dict[str, bool]]" = (
    weakref.WeakKeyDictionary()
)
_partitioned_lock = threading.Lock()

CONFLICT_ON_EVENT_KEY = sql.SQL("(event_key)")
CONFLICT_ON_ANY = sql.SQL("")


def conflict_target(conn: psycopg.Connection, table: str = DEFAULT_TABLE) -> sql.Composable:
    """Publish's ``ON CONFLICT`` target for ``table`` (SPEC §1): ``(event_key)`` on an ordinary
    table; nothing on a partitioned one, whose unique index must hold the partition key
    (``(event_key, created_at)``), so that any unique violation — a duplicate event_key at the
    same ``created_at`` — inserts nothing. Looked up once per connection and table (one catalog
    read in the caller's transaction); a table turned into a partitioned one is seen by new
    connections.

    Raises:
        psycopg.Error: the table does not exist (``UndefinedTable``) or may not be read.
    """
    with _partitioned_lock:
        known = _partitioned.setdefault(conn, {})
        partitioned = known.get(table)
    if partitioned is None:
        partitioned = bool(
            _scalar(conn, compose("table_partitioned"), {"table_regclass": _regclass(table)})
        )
        with _partitioned_lock:
            known[table] = partitioned
    return CONFLICT_ON_ANY if partitioned else CONFLICT_ON_EVENT_KEY


def publish(
    conn: psycopg.Connection,
    *,
    event_type: str,
    aggregate_type: str,
    aggregate_id: str,
    event_key: str,
    payload: Any,
    available_at: Any = None,
    table: str = DEFAULT_TABLE,
) -> int | None:
    """Insert one outbox row in the caller's transaction (SPEC §1 publish).

    Args:
        conn: the connection of the business transaction (commit is the caller's).
        event_type, aggregate_type, aggregate_id: routing key and business entity.
        event_key: the deterministic idempotency key; a duplicate inserts nothing.
        payload: any JSON-serialisable value (stored as jsonb).
        available_at: optional ``datetime`` before which the row is not claimable.
        table: ``schema.table`` of the outbox.

    Returns:
        The new row's id, or ``None`` when ``event_key`` already existed
        (``ON CONFLICT (event_key) DO NOTHING``). On a table partitioned by ``created_at``
        (``ON CONFLICT DO NOTHING``, ``conflict_target``) only a duplicate with the same
        ``created_at`` — published in the same transaction, whose ``now()`` it is —
        inserts nothing: one intent published twice at different instants makes two rows,
        and the idempotency ledger (``take_ledger_slot``) is the guard (SPEC §1).

    Raises:
        psycopg.Error: database errors, unchanged (the caller owns the transaction).
        TypeError: the payload is not JSON-serialisable.
    """
    return _scalar(
        conn,
        compose("publish", table=_identifier(table), conflict_target=conflict_target(conn, table)),
        {
            "event_type": event_type,
            "aggregate_type": aggregate_type,
            "aggregate_id": str(aggregate_id),
            "event_key": event_key,
            "payload": Jsonb(payload),
            "available_at": available_at,
        },
    )


def claim(
    conn: psycopg.Connection,
    worker: str,
    *,
    limit: int = DEFAULT_CLAIM_BATCH,
    table: str = DEFAULT_TABLE,
) -> list[dict[str, Any]]:
    """Claim up to ``limit`` due rows, oldest first, with ``FOR UPDATE SKIP LOCKED``.

    Args:
        conn: a connection (autocommit, or commit soon: the claim holds row locks until then,
            and the outbox's change lock in shared mode, which a control change waits for
            — at most ``OUTBOX_MONITOR_CONTROL_BARRIER_TIMEOUT`` — SPEC §5).
        worker: the worker id stored in ``locked_by`` (instance + workflow id).
        limit: rows per batch (SPEC default 50).
        table: ``schema.table`` of the outbox.

    Returns:
        The claimed rows as dicts: id, event_type, aggregate_type, aggregate_id,
        event_key, payload, attempts, created_at. Empty when nothing is due, and while a
        control change holds or awaits the outbox's change lock (poll again).
    """
    with conn.cursor(row_factory=dict_row) as cur:
        cur.execute(
            compose("claim"), {"table_regclass": _regclass(table), "worker": worker, "limit": limit}
        )
        return cur.fetchall()


def ack(conn: psycopg.Connection, row_id: int, worker: str, *, table: str = DEFAULT_TABLE) -> bool:
    """Mark a claimed row done (SPEC §1 ack).

    Returns:
        ``True`` when acked; ``False`` when this worker no longer holds the claim
        (the row was reaped or re-claimed meanwhile) and nothing changed.
    """
    return bool(
        _scalar(
            conn,
            compose("ack"),
            {"table_regclass": _regclass(table), "id": row_id, "worker": worker},
        )
    )


def ack_many(
    conn: psycopg.Connection, row_ids: list[int], worker: str, *, table: str = DEFAULT_TABLE
) -> list[int]:
    """Mark the claimed rows of a finished batch done in one call (SPEC §1 ack, per row).

    Each row is acked as ``ack`` would (and its breaker outcome logged, SPEC §5); one
    statement acks them all, and when it fails (a trigger of yours refusing one row, say)
    the function acks row by row, each in a savepoint: a row whose recording fails stays
    ``processing`` for the reaper (SPEC §4) with a server WARNING naming it, the others are
    acked.

    Args:
        row_ids: ids this worker claimed; an empty list is a no-op.

    Returns:
        The ids acked, ascending. An id missing from it was not held by ``worker`` (reaped
        or re-claimed meanwhile: nothing changed) or its recording failed.
    """
    if not row_ids:
        return []
    acked = _scalar(
        conn,
        compose("ack_many"),
        {"table_regclass": _regclass(table), "ids": list(row_ids), "worker": worker},
    )
    return list(acked or [])


def fail(
    conn: psycopg.Connection,
    row_id: int,
    worker: str,
    error: str,
    *,
    permanent: bool = False,
    max_attempts: int = DEFAULT_MAX_ATTEMPTS,
    ledger_action: str | None = None,
    table: str = DEFAULT_TABLE,
) -> str | None:
    """Record one failed attempt of a claimed row (SPEC §1 retry / dead-letter).

    ``attempts`` grows by one; a permanent error, or reaching ``max_attempts``,
    dead-letters the row (``failed``, ``processed_at=now()``); otherwise it returns to
    ``pending`` with ``available_at = now() + schedule[attempts-1]`` plus 0–10 % jitter
    (30 s, 2 min, 5 min, 15 min, 30 min, then 1 h). ``last_error`` keeps ``error`` as
    ``clean_error`` makes it: U+0000 and lone surrogates replaced, at most 2000 characters.

    Args:
        error: the failure's text, any ``str``.
        ledger_action: when the effect was guarded by the idempotency ledger and the
            downstream gave a definite "no", the action name whose ledger row the same
            statement deletes, so the retry may try again.

    Returns:
        ``"pending"`` (retry scheduled), ``"failed"`` (dead-lettered), or ``None`` when
        this worker no longer holds the claim.
    """
    return _scalar(
        conn,
        compose("fail"),
        {
            "table_regclass": _regclass(table),
            "id": row_id,
            "worker": worker,
            "error": clean_error(error),
            "permanent": permanent,
            "max_attempts": max_attempts,
            "ledger_regclass": _identifier(_ledger_of(table)).as_string()
            if ledger_action
            else None,
            "ledger_action": ledger_action,
        },
    )


def retry(
    conn: psycopg.Connection, row_id: int, worker: str, error: str, **options: Any
) -> str | None:
    """A transient failure: ``fail(..., permanent=False)``; see ``fail`` for arguments."""
    return fail(conn, row_id, worker, error, permanent=False, **options)


def dead_letter(
    conn: psycopg.Connection, row_id: int, worker: str, error: str, **options: Any
) -> str | None:
    """A permanent failure: ``fail(..., permanent=True)``; see ``fail`` for arguments."""
    return fail(conn, row_id, worker, error, permanent=True, **options)


def take_ledger_slot(
    conn: psycopg.Connection, event_key: str, action: str, *, table: str = DEFAULT_TABLE
) -> bool:
    """Idempotency-ledger guard (SPEC §1): insert ``(event_key, action)`` before an effect.

    Commit right after (autocommit) so a crash after the call leaves the slot taken.

    Args:
        table: the outbox ``schema.table``; the ledger is ``integration_idempotency`` in
            the same schema.

    Returns:
        ``True`` when the slot was free and is now taken: perform the effect.
        ``False`` when it was taken before: skip the effect (it ran, or its outcome was
        ambiguous — the ledger trades a rare lost effect for never a double one).
    """
    inserted = _scalar(
        conn,
        compose("ledger_insert", ledger=_identifier(_ledger_of(table))),
        {"event_key": event_key, "action": action},
    )
    return inserted is not None


Handler = Callable[[dict[str, Any]], None]

_COUNTED_AS = {"done": "acked", "pending": "retried", "failed": "dead_lettered", None: "lost"}


def _error_text(error: Exception) -> tuple[str, bool]:
    """A handler exception's text and whether it could be read: ``(str(error), True)``;
    when its ``__str__`` raises (or returns no ``str``), its type's name and why, as in
    ``("RuntimeError (its message could not be read: ValueError: …)", False)``, so the row
    is still retried or dead-lettered rather than left ``processing``."""
    try:
        return str(error), True
    except Exception as reading:
        try:
            why = f"{type(reading).__name__}: {reading}"
        except Exception:
            why = type(reading).__name__
        return f"{type(error).__name__} (its message could not be read: {why})", False


def _handle(
    conn: psycopg.Connection,
    worker: str,
    handler: Handler,
    row: dict[str, Any],
    *,
    max_attempts: int,
    table: str,
) -> str | None:
    """Run ``handler`` on one claimed row. ``"handled"`` when it returned (the row waits for
    the batch's ``ack_many``); when it raised, its failure is recorded at once in a
    transaction of its own (a savepoint inside the caller's transaction): ``"pending"``,
    ``"failed"``, or ``None`` when the claim was lost. Raises when recording fails."""
    try:
        handler(row)
    except PermanentError as error:
        text, _ = _error_text(error)
        with conn.transaction():
            return dead_letter(
                conn,
                row["id"],
                worker,
                text or "permanent error",
                max_attempts=max_attempts,
                table=table,
            )
    except Exception as error:
        text, readable = _error_text(error)
        with conn.transaction():
            return retry(
                conn,
                row["id"],
                worker,
                f"{type(error).__name__}: {text}" if readable else text,
                max_attempts=max_attempts,
                table=table,
            )
    return "handled"


def _unrecorded(table: str, row_id: int, error: Exception) -> None:
    log.error(
        "row %d of %s: recording its outcome failed, it stays processing until a reap (%r)",
        row_id,
        table,
        error,
    )


def _ack_handled(
    conn: psycopg.Connection, worker: str, handled: list[int], table: str, counts: dict[str, int]
) -> None:
    """Ack the handled rows with one ``ack_many`` (its own transaction); a row it did not
    ack is acked alone, to tell a lost claim (``False``) from a recording that fails (the
    error logged with the row's id, the row left ``processing``)."""
    if not handled:
        return
    try:
        with conn.transaction():
            acked = set(ack_many(conn, handled, worker, table=table))
    except Exception:
        if conn.closed:
            raise
        acked = set()
    counts["acked"] += len(acked)
    for row_id in handled:
        if row_id in acked:
            continue
        try:
            with conn.transaction():
                done = ack(conn, row_id, worker, table=table)
        except Exception as error:
            if conn.closed:
                raise
            _unrecorded(table, row_id, error)
            counts["unrecorded"] += 1
        else:
            counts["acked" if done else "lost"] += 1


def process_batch(
    conn: psycopg.Connection,
    worker: str,
    handler: Handler,
    *,
    limit: int = DEFAULT_CLAIM_BATCH,
    max_attempts: int = DEFAULT_MAX_ATTEMPTS,
    table: str = DEFAULT_TABLE,
) -> dict[str, int]:
    """One poll of a worker: claim a batch, run ``handler`` per row, ack or record failure.

    ``handler(row)`` returning normally acks the row; raising ``PermanentError``
    dead-letters it; any other exception schedules a retry with backoff (error text
    cleaned by ``clean_error``; an exception whose ``__str__`` raises is recorded by its
    type's name). A failure is recorded as soon as its handler raised; the rows handled
    are acked together after the last one, by one ``ack_many`` (one statement for the
    batch, issue 32). One bad row never blocks the rest of the batch: each failure, and
    the batch's acks, run in a transaction of their own (a savepoint when ``conn`` is in a
    transaction); a row ``ack_many`` did not ack is acked alone, and when recording one
    row's outcome fails, the error is logged with the row's id, the row stays
    ``processing`` for the reaper (SPEC §4), and the others go on.

    Args:
        conn: an autocommit connection (each transition commits on its own).

    Returns:
        Counts ``{"claimed", "acked", "retried", "dead_lettered", "lost", "unrecorded"}``
        where ``lost`` are rows whose claim was reaped before the worker finished and
        ``unrecorded`` rows whose outcome could not be recorded (left for the reaper).

    Raises:
        psycopg.Error: the claim failed, or the connection broke (nothing more can be
            recorded; the rows not yet recorded stay claimed until a reap).
        BaseException: one that is not an ``Exception`` (``KeyboardInterrupt``,
            ``SystemExit``, ``asyncio.CancelledError``) raised by ``handler`` propagates
            once the rows handled before it are acked: the row being handled and the rows
            of the batch never handed to ``handler`` stay ``processing``, claimed by
            ``worker``, until a reap returns them to ``pending`` as one more attempt
            (SPEC §4).
    """
    counts = dict.fromkeys(("claimed", *_COUNTED_AS.values(), "unrecorded"), 0)
    rows = claim(conn, worker, limit=limit, table=table)
    counts["claimed"] = len(rows)
    handled: list[int] = []
    try:
        for row in rows:
            try:
                outcome = _handle(
                    conn, worker, handler, row, max_attempts=max_attempts, table=table
                )
            except Exception as error:
                if conn.closed:
                    raise
                _unrecorded(table, row["id"], error)
                counts["unrecorded"] += 1
            else:
                if outcome == "handled":
                    handled.append(row["id"])
                else:
                    counts[_COUNTED_AS[outcome]] += 1
    except BaseException:
        # the rows handled before a KeyboardInterrupt or CancelledError are still acked
        if not conn.closed:
            try:
                _ack_handled(conn, worker, handled, table, counts)
            except Exception as error:
                log.error("acking the rows handled before the batch stopped failed (%r)", error)
        raise
    _ack_handled(conn, worker, handled, table, counts)
    return counts


NUDGE_TIMEOUT_SECONDS = 2.0
"""``nudge``'s default bound: a nudge only saves the wait for the next poll, so it never
holds the publisher up for long."""


def nudge(
    url: str,
    *,
    event_key: str | None = None,
    timeout: float = NUDGE_TIMEOUT_SECONDS,
    headers: Mapping[str, str] | None = None,
) -> bool:
    """Wake the worker now: POST ``{"event_key": …}`` to its nudge webhook (SPEC §1 webhook
    nudge; the shipped n8n workflow ``outbox-nudge`` runs its poller at once).

    Call it after the publishing transaction commits, never inside it: a nudge before the
    commit wakes a poller that cannot see the row yet. The nudge carries no payload; the
    worker claims whatever is due from Postgres. A lost nudge costs at most one poll
    interval, so it never raises into the caller: a failure is one WARNING line on the
    ``outbox_monitor.outbox`` logger naming the URL's scheme, host and port (never its
    path, query, user info or the headers) and the reason, and ``False`` is returned.
    One request, no retry, no redirect followed; a new connection each call.

    Args:
        url: the webhook, e.g. ``http://n8n:5678/webhook/outbox-nudge``. User info in the
            URL is not sent: pass credentials in ``headers``.
        event_key: the published row's ``event_key``, a label of the wake-up for the
            worker's logs (the shipped workflow keeps only it); ``None`` sends ``{}``.
        timeout: seconds, > 0, shared by the connect and the wait for the answer
            (urllib3's total timeout: each read of the status line and headers may wait
            what the connect left, so only a server trickling them byte by byte can
            stretch it). The body is not read. Name resolution (``getaddrinfo``) is the
            system resolver's and not bounded by it.
        headers: extra request headers, e.g. ``{"Authorization": "Bearer …"}`` for an
            n8n webhook with Header Auth.

    Returns:
        ``True`` when the webhook answered 2xx (n8n's nudge answers 202 on receipt);
        ``False`` when it answered anything else or could not be reached in time.

    Raises:
        ValueError: ``timeout`` is not a positive number (before any request is made).
    """
    bound = urllib3.Timeout(total=timeout)
    try:
        with urllib3.PoolManager(retries=False, timeout=bound) as pool:
            response = pool.request(
                "POST",
                url,
                json={} if event_key is None else {"event_key": event_key},
                headers=headers,
                redirect=False,
                preload_content=False,
            )
            try:
                if 200 <= response.status < 300:
                    return True
                failure = f"HTTP {response.status} {response.reason or ''}".rstrip()
            finally:
                response.close()
    except (urllib3.exceptions.HTTPError, OSError, ValueError) as error:
        failure = _nudge_failure(error, timeout)
    log.warning(
        "nudge of %s not delivered: %s; the worker claims the row at its next poll",
        _origin(url),
        failure,
    )
    return False


def _nudge_failure(error: Exception, timeout: float) -> str:
    """Why a nudge's request failed, without a secret: the text of a malformed URL or
    header may hold one, so those name only the error's type."""
    if isinstance(error, urllib3.exceptions.NewConnectionError) and error.__cause__:
        return str(error.__cause__)  # refused, unreachable, unknown host: "[Errno 111] …"
    if isinstance(error, urllib3.exceptions.TimeoutError):
        return f"no answer within {timeout:g} s"
    if isinstance(error, ValueError):
        return f"the request could not be made ({type(error).__name__})"
    return f"{type(error).__name__}: {error}"


def _origin(url: str) -> str:
    """``scheme://host:port`` of ``url``, the only part of it a log line shows."""
    try:
        parsed = urllib3.util.parse_url(url)
    except ValueError:
        return "a malformed URL"
    port = f":{parsed.port}" if parsed.port else ""
    return f"{parsed.scheme or 'http'}://{parsed.host or '?'}{port}"
