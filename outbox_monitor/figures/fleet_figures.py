"""The fleet's figures (issue 16 item 2): one row per outbox — its headline SPEC §2 figures,
its firing alerts and whether its database answered — measured concurrently, each outbox
under a short connect and statement timeout, so that one unreachable database costs only its
own row, never the page.

Connections are shared per database: ``FleetConnections`` keeps one small pool per distinct
read DSN (outboxes of one database share it), with no connection kept open once idle, so
50 outboxes in 10 databases hold at most ``POOL_MAX_SIZE`` connections per database while
the page is read, and none a minute later.
"""

import threading
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from typing import Any, Literal

import psycopg
from psycopg_pool import ConnectionPool

from outbox_monitor.config.fleet import Fleet, Outbox
from outbox_monitor.config.settings import Settings
from outbox_monitor.errors import DatabaseUnavailable, OutboxMonitorError, SchemaNotInitialised
from outbox_monitor.figures import metrics
from outbox_monitor.figures.diagnosis import Diagnosis, diagnose, firing_instances, read_evidence
from outbox_monitor.figures.error_grouping import RETRY_GROUPS_MAX_AGE_SECONDS
from outbox_monitor.store.db import APPLICATION_NAME, Database, MonitorConnection
from outbox_monitor.store.db_errors import READ_DSN_SETTING, connect_error

WORKERS = 8
"""Outboxes measured at once (threads); each holds at most one connection at a time."""
CONNECT_TIMEOUT_SECONDS = 2
"""A database that does not accept a connection within this is unreachable (its row says so)."""
STATEMENT_TIMEOUT_SECONDS = 2.0
"""Each figure's query of the fleet page runs under at most this statement timeout (the
outbox's own ``OUTBOX_MONITOR_STATEMENT_TIMEOUT`` when shorter)."""
DEADLINE_SECONDS = 5.0
"""The page waits at most this long for all rows; a row not measured by then says so."""
POOL_MAX_SIZE = 2
"""Connections per database at most, shared by the outboxes of that database."""
POOL_MAX_IDLE_SECONDS = 60.0
"""A pooled connection idle this long is closed (the pools keep none open while idle)."""

Status = Literal["ok", "firing", "error", "unreachable"]


@dataclass(frozen=True)
class OutboxRow:
    """One outbox's row of the fleet page.

    ``status``: ``unreachable`` (its database did not answer: ``problem`` says why),
    ``error`` (it answered, but a figure could not be read: ``problem``), ``firing`` (at
    least one alert firing) or ``ok`` (no alert firing — it says nothing of a figure no rule
    watches: the Fleet page says "no alert firing", never a bare "ok"). Figures (SPEC §2,
    over ``window`` seconds where windowed) are ``None`` when not measured: ``queue_depth``
    (rows due now), ``oldest_pending_age`` (seconds; also ``None`` when nothing is pending),
    ``latency_p95`` (seconds of created→processed; also ``None`` when nothing was done in the
    window), ``failed_in_window`` (rows dead-lettered in the window), ``firing_alerts`` and
    ``alert_errors`` (rule instances firing, in error; ``None`` when the database has no
    alert state: ``init-db`` not run). ``diagnosis``: what is wrong (``figures.diagnosis``:
    a line per troubled event type, the Overview's headline), ``None`` when not read
    (``diagnosis_problem`` says why, when it failed on its own).
    """

    name: str
    labels: Mapping[str, str] = field(default_factory=dict)
    status: Status = "ok"
    problem: str | None = None
    queue_depth: int | None = None
    oldest_pending_age: float | None = None
    latency_p95: float | None = None
    failed_in_window: int | None = None
    firing_alerts: int | None = None
    alert_errors: int | None = None
    diagnosis: Diagnosis | None = None
    diagnosis_problem: str | None = None

    @property
    def reachable(self) -> bool:
        """Whether its database answered."""
        return self.status != "unreachable"


def _first_line(error: Exception) -> str:
    return str(error).splitlines()[0] if str(error) else type(error).__name__


class FleetConnections:
    """One small pool per distinct DSN (``POOL_MAX_SIZE``, none kept once idle), and the
    DSNs last reached: a DSN not reached yet, or whose last use failed, is first tried with
    a direct connection under ``CONNECT_TIMEOUT_SECONDS``, so an unreachable database is
    said at once instead of after a pool's wait. Thread-safe; ``close()`` closes every pool.
    """

    def __init__(self, *, connect_timeout: float = CONNECT_TIMEOUT_SECONDS) -> None:
        self._connect_timeout = connect_timeout
        self._pools: dict[str, ConnectionPool[Any]] = {}
        self._reached: set[str] = set()
        self._lock = threading.Lock()

    def _pool(self, dsn: str) -> ConnectionPool[Any]:
        with self._lock:
            pool = self._pools.get(dsn)
            if pool is None:
                pool = ConnectionPool(
                    dsn,
                    connection_class=MonitorConnection,
                    kwargs={
                        "connect_timeout": self._connect_timeout,
                        "application_name": APPLICATION_NAME,
                    },
                    min_size=0,
                    max_size=POOL_MAX_SIZE,
                    max_idle=POOL_MAX_IDLE_SECONDS,
                    check=ConnectionPool.check_connection,
                    name=f"{APPLICATION_NAME}-fleet",
                    open=False,
                )
                pool.open(wait=False)
                self._pools[dsn] = pool
            return pool

    def database(self, settings: Settings) -> Database:
        """A ``Database`` of ``settings`` (statement timeout at most
        ``STATEMENT_TIMEOUT_SECONDS``) on the pool of its DSN.

        Raises:
            DatabaseUnavailable: a DSN not reached before does not accept a connection
                within the connect timeout (libpq's reason, no secret).
        """
        dsn = settings.dsn or ""
        short = settings.model_copy(
            update={"statement_timeout": min(settings.statement_timeout, STATEMENT_TIMEOUT_SECONDS)}
        )
        if dsn not in self._reached:
            try:
                psycopg.connect(
                    dsn, connect_timeout=self._connect_timeout, application_name=APPLICATION_NAME
                ).close()
            except psycopg.OperationalError as error:
                raise connect_error(error, short, READ_DSN_SETTING) from None
            with self._lock:
                self._reached.add(dsn)
        return Database(short, purpose="read", pool=self._pool(dsn))

    def failed(self, settings: Settings) -> None:
        """The DSN of ``settings`` failed: try it directly again before using its pool."""
        with self._lock:
            self._reached.discard(settings.dsn or "")

    def close(self) -> None:
        """Close every pool (their connections with them)."""
        with self._lock:
            pools, self._pools = list(self._pools.values()), {}
            self._reached.clear()
        for pool in pools:
            pool.close()


def alert_counts(db: Database) -> tuple[int, int] | None:
    """``(firing, in error)`` rule instances of the outbox of ``db`` (``Database.alert_outbox``:
    outboxes sharing a database keep apart, migration 017), or ``None`` when the database has
    no alert state (the ``outbox_monitor`` schema is missing)."""
    try:
        row = db.fetch_one("alert_instances_firing_count", {"outbox": db.alert_outbox})
    except SchemaNotInitialised:
        return None
    return row["firing"], row["errors"]


def measure_outbox(db: Database, outbox: Outbox, *, window: float) -> OutboxRow:
    """One outbox's row, its figures read on one connection (``Database.session``).

    Args:
        db: the outbox's read ``Database``.
        outbox: names the row and gives its labels.
        window: seconds, for the P95 latency and the dead letters of the window.

    Returns:
        The row: ``ok`` or ``firing`` with every figure, or ``error`` with the reason when a
        query failed (a missing table, a statement timeout).

    Raises:
        DatabaseUnavailable: the database did not answer (``measure_fleet`` makes it the
            row's ``unreachable``).
    """
    base = {"name": outbox.name, "labels": outbox.labels}
    try:
        with db.session():
            figures = {
                "queue_depth": metrics.queue_depth(db),
                "oldest_pending_age": metrics.oldest_pending_age(db),
                "latency_p95": metrics.latency_percentiles(db, window=window)["p95"],
                "failed_in_window": metrics.failed_in_window(db, window=window),
            }
            alerts = alert_counts(db)
    except DatabaseUnavailable:
        raise
    except OutboxMonitorError as error:
        return OutboxRow(**base, status="error", problem=_first_line(error))
    firing, errors = alerts if alerts is not None else (None, None)
    status: Status = "firing" if firing else "ok"
    found, problem = what_is_wrong(db, window=window)
    return OutboxRow(
        **base,
        status=status,
        **figures,
        firing_alerts=firing,
        alert_errors=errors,
        diagnosis=found,
        diagnosis_problem=problem,
    )


def what_is_wrong(db: Database, *, window: float) -> tuple[Diagnosis | None, str | None]:
    """The outbox's diagnosis (``diagnosis.read_evidence`` with its firing alerts, over
    ``window`` seconds, the retry error groups as a page reads them: counted again when
    ``RETRY_GROUPS_MAX_AGE_SECONDS`` old) on one connection, or ``(None, why)`` when a read
    failed (a statement timeout, a column missing): the row keeps its figures.

    Raises:
        DatabaseUnavailable: the database stopped answering.
    """
    try:
        with db.session():
            firing = firing_instances(db)
            found = diagnose(
                read_evidence(
                    db, window=window, firing=firing, max_age=RETRY_GROUPS_MAX_AGE_SECONDS
                )
            )
    except DatabaseUnavailable:
        raise
    except Exception as error:  # whatever it is, the row keeps its figures and says it
        return None, _first_line(error)
    return found, None


def _measure(connections: FleetConnections, outbox: Outbox, window: float) -> OutboxRow:
    try:
        db = connections.database(outbox.settings)
        return measure_outbox(db, outbox, window=window)
    except DatabaseUnavailable as error:
        connections.failed(outbox.settings)
        return OutboxRow(
            outbox.name, outbox.labels, status="unreachable", problem=_first_line(error)
        )


def measure_fleet(
    fleet: Fleet,
    connections: FleetConnections,
    *,
    window: float,
    workers: int = WORKERS,
    deadline: float = DEADLINE_SECONDS,
) -> list[OutboxRow]:
    """Every outbox's row, in the fleet's order, measured ``workers`` at a time.

    Args:
        fleet: the outboxes.
        connections: the pools (``FleetConnections``), kept by the caller across calls.
        window: seconds (P95 latency, dead letters of the window).
        workers: threads at most (never more than outboxes).
        deadline: seconds the call waits at most; a row not measured by then is
            ``unreachable`` with "no answer within …" (its thread ends on its own timeouts).

    Returns:
        One ``OutboxRow`` per outbox; an unreachable database makes only its own rows
        ``unreachable``.
    """
    outboxes = fleet.outboxes
    executor = ThreadPoolExecutor(
        max_workers=max(1, min(workers, len(outboxes))), thread_name_prefix="fleet-figures"
    )
    try:
        futures = [executor.submit(_measure, connections, outbox, window) for outbox in outboxes]
        done, _ = wait(futures, timeout=deadline)
    finally:
        executor.shutdown(wait=False, cancel_futures=True)
    return [
        future.result()
        if future in done
        else OutboxRow(
            outbox.name,
            outbox.labels,
            status="unreachable",
            problem=f"no answer within {deadline:g} s",
        )
        for outbox, future in zip(outboxes, futures, strict=True)
    ]
