"""The reference worker API of SPEC §1: publish, claim, ack, retry, dead-letter, ledger guard;
and the publisher's optional nudge of the n8n poller (``nudge``).

Every transition calls the shared SQL functions of the ``outbox_monitor`` schema
(``claim``, ``ack``, ``ack_many``, ``fail``), so Python workers and n8n workflows cannot
drift apart.
All of them take the caller's ``psycopg.Connection`` and run in its transaction.
"""

import datetime
import json
import logging
import math
import threading
import time
import urllib.request
import uuid
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

NUDGE_OVERRUNS_MAX = 4
"""How many nudges may still run past their timeout before the next one is skipped. A nudge
runs on a daemon thread its caller stops waiting for at the timeout; a webhook trickling its
answer a byte at a time keeps that thread until it closes, so a publisher's threads never
pile up behind it: at most this many wait on such webhooks at once."""


class _Overruns:
    """The nudges still running past their timeout: their count, under a lock."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.count = 0


_overruns = _Overruns()


def nudge(
    url: str,
    *,
    event_key: str | uuid.UUID | datetime.date | datetime.time | None = None,
    timeout: float = NUDGE_TIMEOUT_SECONDS,
    headers: Mapping[str, str] | None = None,
) -> bool:
    """Wake the worker now: POST ``{"event_key": …}`` to its nudge webhook (SPEC §1 webhook
    nudge; the shipped n8n workflow ``outbox-nudge`` runs its poller at once).

    Call it after the publishing transaction commits, never inside it: a nudge before the
    commit wakes a poller that cannot see the row yet. The nudge carries no payload; the
    worker claims whatever is due from Postgres. A lost nudge costs at most one poll
    interval, so it never raises into the caller (but for a ``timeout`` that is no number of
    seconds, a programming error): a failure — including arguments of the wrong type — is
    one WARNING line on the ``outbox_monitor.outbox`` logger naming the URL's scheme, host
    and port (never its path, query, user info or the headers) and the reason (an
    exception's type, never its text, which may hold a secret), and ``False`` is returned.
    One request, no retry, no redirect followed; a new connection each call.

    It returns within ``timeout``, whatever the webhook does: the request runs on a daemon
    thread the caller waits for at most ``timeout`` seconds (connect, name resolution, the
    request and the answer's status line and headers, even trickled a byte at a time). A
    thread left running past it ends when the webhook answers or closes; while
    ``NUDGE_OVERRUNS_MAX`` such threads run, a nudge is skipped at once (WARNING), and each
    one's late end is an INFO line with its outcome (a late 2xx is not reported to the
    caller, which has had ``False``).

    The proxy variables are honoured as by ``urllib.request``: ``http_proxy`` /
    ``https_proxy`` (or ``all_proxy``) send the nudge through that proxy (its user info as
    Basic proxy authorisation), unless ``no_proxy`` names the webhook's host.

    Args:
        url: the webhook, e.g. ``http://n8n:5678/webhook/outbox-nudge``. User info in the
            URL is not sent: pass credentials in ``headers``.
        event_key: the published row's ``event_key``, a label of the wake-up for the
            worker's logs (the shipped workflow keeps only it); ``None`` sends ``{}``. A
            ``uuid.UUID``, ``datetime``, ``date`` or ``time`` is sent as ``str(event_key)``
            (``00000000-…-00000000002a``, ``2026-12-04 21:40:00+00:00``); a value JSON
            cannot hold (bytes, a set, …) is not sent (WARNING, ``False``).
        timeout: seconds, a finite number > 0 (not a bool, not a string): the bound of the
            whole call. Within it the request also uses it as urllib3's total timeout.
        headers: extra request headers, e.g. ``{"Authorization": "Bearer …"}`` for an
            n8n webhook with Header Auth.

    Returns:
        ``True`` when the webhook answered 2xx (n8n's nudge answers 202 on receipt);
        ``False`` when it answered anything else, could not be reached in time, or the
        request could not be made.

    Raises:
        ValueError: ``timeout`` is not a finite number of seconds > 0 (before any request
            is made).
    """
    seconds = _nudge_timeout(timeout)
    body = _nudge_body(event_key)
    if isinstance(body, str):
        failure: str | None = body
    else:
        with _overruns.lock:
            running_late = _overruns.count
        if running_late >= NUDGE_OVERRUNS_MAX:
            failure = (
                f"skipped: {running_late} earlier nudges still run past their timeout "
                "(a webhook trickling its answers?)"
            )
        else:
            failure = _post_within(url, body, headers, seconds)
    if failure is None:
        return True
    log.warning(
        "nudge of %s not delivered: %s; the worker claims the row at its next poll",
        _origin(url),
        failure,
    )
    return False


def _nudge_timeout(timeout: object) -> float:
    """``timeout`` as seconds, or ValueError when it is no finite number > 0."""
    if isinstance(timeout, int | float) and not isinstance(timeout, bool):
        try:
            seconds = float(timeout)
        except OverflowError:
            seconds = math.inf
        if 0 < seconds <= threading.TIMEOUT_MAX:
            return seconds
    raise ValueError(f"nudge's timeout must be a finite number of seconds > 0, not {timeout!r}")


def _nudge_body(event_key: object) -> dict[str, Any] | str:
    """The JSON object a nudge posts, or why it cannot be made."""
    if event_key is None:
        return {}
    if isinstance(event_key, uuid.UUID | datetime.date | datetime.time):
        event_key = str(event_key)
    try:
        json.dumps(event_key)
    except (TypeError, ValueError) as error:
        return f"event_key is {type(event_key).__name__}, not text ({type(error).__name__})"
    return {"event_key": event_key}


def _post_within(url: str, body: dict[str, Any], headers: object, timeout: float) -> str | None:
    """POST ``body`` on a daemon thread waited for at most ``timeout`` seconds: ``None``
    when it was delivered, else why not."""
    outcome: list[str | None] = []
    late = threading.Event()  # set under _overruns.lock when the caller stopped waiting
    started = time.monotonic()

    def post() -> None:
        try:
            outcome.append(_post(url, body, headers, timeout))
        except Exception as error:  # never into the publisher, and never unlogged
            outcome.append(_nudge_failure(error, timeout))
        finally:
            with _overruns.lock:
                if late.is_set():
                    _overruns.count -= 1
            if late.is_set():
                log.info(
                    "nudge of %s ended %.2f s after it started, past its timeout of %g s: %s",
                    _origin(url),
                    time.monotonic() - started,
                    timeout,
                    "delivered late" if outcome == [None] else (outcome or ["stopped"])[0],
                )

    thread = threading.Thread(target=post, name="outbox-monitor-nudge", daemon=True)
    try:
        thread.start()
    except RuntimeError as error:  # no thread left to start
        return _nudge_failure(error, timeout)
    thread.join(timeout)
    with _overruns.lock:
        if outcome:
            return outcome[0]
        late.set()
        _overruns.count += 1
    return f"no answer within {timeout:g} s"


def _post(url: str, body: dict[str, Any], headers: Any, timeout: float) -> str | None:
    """The nudge's one request: ``None`` when answered 2xx, else the answer's status."""
    with _pool_manager(url, urllib3.Timeout(total=timeout)) as pool:
        response = pool.request(
            "POST", url, json=body, headers=headers, redirect=False, preload_content=False
        )
        try:
            if 200 <= response.status < 300:
                return None
            return f"HTTP {response.status} {response.reason or ''}".rstrip()
        finally:
            response.close()


def _pool_manager(url: str, timeout: urllib3.Timeout) -> urllib3.PoolManager:
    """A pool for one request to ``url``: through the proxy the environment names for its
    scheme (``urllib.request.getproxies``) unless ``no_proxy`` bypasses its host."""
    parsed = urllib3.util.parse_url(url)
    proxies = urllib.request.getproxies()
    proxy = proxies.get(parsed.scheme or "http") or proxies.get("all")
    if proxy and not urllib.request.proxy_bypass(parsed.host or ""):
        auth = urllib3.util.parse_url(proxy).auth
        return urllib3.ProxyManager(
            proxy,
            proxy_headers=urllib3.make_headers(proxy_basic_auth=auth) if auth else None,
            retries=False,
            timeout=timeout,
        )
    return urllib3.PoolManager(retries=False, timeout=timeout)


def _nudge_failure(error: Exception, timeout: float) -> str:
    """Why a nudge's request failed, without a secret: the text of a malformed URL or
    header may hold one, so an error other than a refused connection or a timeout is
    named by its type only."""
    if isinstance(error, urllib3.exceptions.ProxyError):
        return f"the proxy could not be reached ({_nudge_failure(error.original_error, timeout)})"
    if isinstance(error, urllib3.exceptions.NewConnectionError) and error.__cause__:
        return str(error.__cause__)  # refused, unreachable, unknown host: "[Errno 111] …"
    if isinstance(error, urllib3.exceptions.TimeoutError):
        return f"no answer within {timeout:g} s"
    if isinstance(error, urllib3.exceptions.HTTPError | OSError) and not isinstance(
        error,
        ValueError,  # a malformed URL or header: its text may hold a secret
    ):
        return f"{type(error).__name__}: {error}"
    return f"the request could not be made ({type(error).__name__})"


def _origin(url: object) -> str:
    """``scheme://host:port`` of ``url``, the only part of it a log line shows."""
    try:
        parsed = urllib3.util.parse_url(url)  # type: ignore[arg-type]
    except Exception:  # ValueError, or TypeError for no str
        return "a malformed URL"
    port = f":{parsed.port}" if parsed.port else ""
    return f"{parsed.scheme or 'http'}://{parsed.host or '?'}{port}"
