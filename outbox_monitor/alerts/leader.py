"""Leadership: exactly one evaluator and sender per outbox table, through a lease row.

Every scheduler process (replicas, the dashboard's ``--with-scheduler``, the demo) runs a
``Leadership`` for the outbox table. The leader is the process whose lease row
(``outbox_monitor.leader_leases``, one per table, written only by the scheduler role)
names it; the others only try to take it over every tick. It works like a Kubernetes
Lease or a Consul session: the holder renews it every tick (``expires_at`` = the
database's ``now()`` + TTL), and a follower takes it over when

- the holder's leadership connection is gone (its backend pid left ``pg_stat_activity``:
  the process died, its connection was terminated, the server restarted) — at the
  follower's next tick, as fast as the session advisory lock of earlier versions; or
- the lease expired: the holder is alive but stopped renewing (hung, ``SIGSTOP``,
  cut off) — after at most ``ttl`` plus one tick.

A session advisory lock could be taken by any login, the read-only viewer included, and
then no scheduler led and none said so. The lease row can only be written by the
scheduler role (``init-db --print-grants``), and the time of the last completed
evaluation in it (``evaluated_at``) lets every process see a stall (``alerts.stall``).

Fencing: each takeover increments ``term``. The leader's evaluator and sender call
``fence(conn)`` first in each write transaction: it locks the lease row ``FOR KEY SHARE``
and raises ``LeadershipLost`` when the term is no longer this process's; a takeover takes
the row ``FOR UPDATE`` and so waits for those transactions, and none of them commits
after it. A leader that wakes up after losing the lease (``SIGCONT``) stops writing at
its first transaction. ``record_evaluation`` stamps ``evaluated_at`` only in its term.

The lease lives on a dedicated connection of its own (never a pooled one: the holder is
identified by that connection's backend pid), with TCP keepalives so that a leader cut
off by the network loses its backend in about ``KEEPALIVE_IDLE + KEEPALIVE_INTERVAL *
KEEPALIVE_COUNT`` seconds.
"""

import contextlib
import logging
import os
import socket
import threading
from collections.abc import Callable
from typing import Any

import psycopg
from psycopg import errors as pg_errors
from psycopg.rows import dict_row

from outbox_monitor.config.settings import Settings
from outbox_monitor.errors import DatabaseUnavailable, OutboxMonitorError
from outbox_monitor.store.db import APPLICATION_NAME, CONNECT_TIMEOUT_SECONDS
from outbox_monitor.store.db_errors import (
    PRIMARY_DSN_SETTING,
    READ_DSN_SETTING,
    connect_error,
    first_line,
    mapped_errors,
)
from outbox_monitor.store.queries import compose

log = logging.getLogger(__name__)

KEEPALIVE_IDLE = 10
KEEPALIVE_INTERVAL = 5
KEEPALIVE_COUNT = 3
LEADER_STATEMENT_TIMEOUT_MS = 5000
LEADER_LOCK_TIMEOUT_MS = 1000
"""A takeover waits at most this long for the old leader's fenced transactions (then the
next tick tries again)."""
WRITES_FAILING_APPLICATION = f"{APPLICATION_NAME} leader writes-failing"
"""The ``application_name`` of a leader's lease connection while its writes fail
(``mark_writes_failing``): a session setting, seen in ``pg_stat_activity`` by every login,
so the dashboard can say so while nothing can be written."""
LEASE_MIN_TTL_SECONDS = 5.0
LEASE_MAX_TTL_SECONDS = 15.0
"""Kubernetes' default lease duration (``leaseDuration``)."""


def lease_ttl(interval: float) -> float:
    """The lease TTL for an evaluation interval: twice the interval, within [5 s, 15 s].

    Args:
        interval: the evaluation interval in seconds.

    Returns:
        Seconds a lease lasts without renewal. With intervals of 2.5 s and more a hung
        leader is replaced (TTL + one tick) before alerting counts as stalled (3 intervals).
    """
    return min(LEASE_MAX_TTL_SECONDS, max(LEASE_MIN_TTL_SECONDS, 2.0 * interval))


class LeadershipLost(OutboxMonitorError):
    """This process's lease was taken over by another scheduler: it must stop writing."""


class Leadership:
    """The evaluator lease of one outbox table, held on a dedicated connection.

    Thread-safe (the scheduler's jobs share one object). ``identity`` (host:pid) names
    this process in logs, in the lease row and in the database-unreachable alert.

    Args:
        settings: the DSN and the outbox table (the lease is per table, so two monitors of
            two tables in one database do not exclude each other).
        ttl: seconds the lease lasts without renewal (``lease_ttl(interval)`` in the
            scheduler).
    """

    def __init__(
        self,
        settings: Settings,
        *,
        ttl: float = LEASE_MAX_TTL_SECONDS,
        may_take: Callable[[], bool] | None = None,
    ) -> None:
        self.settings = settings
        self.may_take = may_take
        self.table_name = ".".join(settings.table_parts)
        self.identity = f"{socket.gethostname()}:{os.getpid()}"
        self.ttl = ttl
        self._conn: psycopg.Connection | None = None
        self._term: int | None = None
        self._held = False
        self._writes_failing = False
        self._mutex = threading.RLock()

    # ------------------------------------------------------------------ public

    @property
    def held(self) -> bool:
        """Whether this process held the lease at its last check (no round trip)."""
        return self._held

    @property
    def term(self) -> int | None:
        """The lease's term while this process holds it (the fencing token), else ``None``."""
        return self._term if self._held else None

    def try_acquire(self) -> bool:
        """Renew the lease when held, else take it when free, expired or its holder gone.

        Returns:
            ``True`` when this process is (now) the leader; ``False`` too when the lease
            is not held and ``may_take()`` says no (the lease is then only read).

        Raises:
            DatabaseUnavailable: the database cannot be reached (no leader then).
            PermissionDenied: the login may not write the lease (not the scheduler role).
        """
        with self._mutex:
            if self._held and self._renew():
                return True
            # A replica at its share only looks at the lease (the database is still
            # reached each tick, so an outage shows).
            taking = self.may_take is None or self.may_take()
            # An idle follower's connection may have died with a server restart that is
            # already over: a reused connection that fails gets one retry on a fresh one.
            for attempt in (1, 2):
                reused = self._conn is not None and not self._conn.closed
                conn = self._connection()
                try:
                    term = self._take(conn) if taking else self._look(conn)
                    break
                except DatabaseUnavailable:
                    self._drop()
                    if not reused or attempt == 2:
                        raise
            if term is not None:
                log.info(
                    "%s is now the alert evaluator of %s (lease term %d, TTL %g s)",
                    self.identity,
                    self.table_name,
                    term,
                    self.ttl,
                )
            self._term, self._held = term, term is not None
            return self._held

    @property
    def is_leader(self) -> bool:
        """Whether this process holds the lease now: renews it over the lease's own
        connection. ``False`` when never acquired, released, taken over, or when the
        connection is gone; never raises."""
        with self._mutex:
            return self._held and self._renew()

    def fence(self, conn: psycopg.Connection) -> None:
        """Check, first in a write transaction, that this process still holds the lease.

        Locks the lease row ``FOR KEY SHARE`` until ``conn``'s transaction ends, so a
        takeover cannot commit before it.

        Args:
            conn: the connection of the write transaction (a pooled one).

        Raises:
            LeadershipLost: the lease is in another term (taken over) or was never held.
        """
        term = self._term if self._held else None
        row = conn.execute(compose("lease_fence"), {"table_name": self.table_name}).fetchone()
        current = None if row is None else row["term"]
        if term is None or current != term:
            with self._mutex:
                if self._held and self._term == term:
                    self._lost(f"the lease is in term {current}, this process held term {term}")
            raise LeadershipLost(
                f"{self.identity} no longer leads the evaluation of {self.table_name} "
                f"(lease term {current}, this process's {term}); it stops writing"
            )

    def record_evaluation(self) -> bool:
        """Stamp the end of a completed evaluation pass in the lease (database clock).

        Returns:
            ``True`` when stamped; ``False`` when the lease was taken over meanwhile
            (this process then stops leading).

        Raises:
            DatabaseUnavailable: the database cannot be reached.
        """
        with self._mutex:
            term = self.term
            if term is None:
                return False
            conn = self._connection()
            try:
                with mapped_errors(self.settings):
                    row = conn.execute(
                        compose("lease_record_evaluation"),
                        {"table_name": self.table_name, "term": term},
                    ).fetchone()
            except DatabaseUnavailable:
                self._lost("its connection failed")
                raise
            if row is None:
                self._lost("the lease was taken over during the evaluation")
                return False
            return True

    def release(self) -> None:
        """Give the lease back (it expires now) and close the connection (idempotent;
        never raises)."""
        with self._mutex:
            conn, self._conn = self._conn, None
            was_held, self._held = self._held, False
            if conn is None:
                return
            try:
                if was_held and not conn.closed:
                    conn.execute(
                        compose("lease_release"),
                        {"table_name": self.table_name, "term": self._term},
                    )
            except psycopg.Error as error:
                log.debug("releasing the evaluator lease: %s", error)
            finally:
                conn.close()
            if was_held:
                log.info("%s released the evaluator lease of %s", self.identity, self.table_name)

    def mark_writes_failing(self, failing: bool) -> None:
        """Name the lease connection ``WRITES_FAILING_APPLICATION`` while ``failing`` (the
        writes-failing alert, ``alerts.write_health``), its usual name else; a connection
        opened later takes the same name. ``set_config`` changes a session setting only,
        which a database refusing writes still accepts. Never raises (logged)."""
        with self._mutex:
            self._writes_failing = failing
            conn = self._conn
            if conn is None or conn.closed:
                return
            try:
                conn.execute(
                    compose("lease_mark_application"),
                    {"name": self._connect_kwargs()["application_name"]},
                )
            except psycopg.Error as error:
                log.warning("could not mark the lease connection: %s", first_line(error))

    def __enter__(self) -> "Leadership":
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.release()

    # ----------------------------------------------------------------- private

    def _params(self) -> dict[str, Any]:
        return {"table_name": self.table_name, "holder": self.identity, "ttl": self.ttl}

    def _take(self, conn: psycopg.Connection) -> int | None:
        with mapped_errors(self.settings):
            row = conn.execute(compose("lease_ensure"), self._params()).fetchone()
            if row is None:
                try:
                    row = conn.execute(compose("lease_take"), self._params()).fetchone()
                except pg_errors.LockNotAvailable:
                    log.info(
                        "the lease of %s is locked by its holder's open transaction; "
                        "trying again next tick",
                        self.table_name,
                    )
                    return None
        return None if row is None else int(row["term"])

    def _look(self, conn: psycopg.Connection) -> None:
        with mapped_errors(self.settings):
            conn.execute(compose("lease_status"), {"table_name": self.table_name})

    def _renew(self) -> bool:
        conn = self._conn
        if conn is None or conn.closed:
            self._lost("its connection is closed")
            return False
        try:
            row = conn.execute(
                compose("lease_renew"), {**self._params(), "term": self._term}
            ).fetchone()
        except psycopg.Error as error:
            self._lost(first_line(error))
            return False
        if row is None:
            self._lost("another scheduler took the lease over")
        return row is not None

    def _lost(self, reason: str) -> None:
        if self._held:
            log.warning(
                "%s lost the evaluator lease of %s (term %s): %s",
                self.identity,
                self.table_name,
                self._term,
                reason,
            )
        self._held = False
        self._drop()

    def _drop(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            with contextlib.suppress(psycopg.Error):
                conn.close()

    def _connection(self) -> psycopg.Connection:
        if self._conn is not None and not self._conn.closed:
            return self._conn
        try:
            conn = psycopg.connect(self.settings.dsn or "", **self._connect_kwargs())
        except psycopg.OperationalError as error:
            # a refused login is LoginRefused, as every other connection of ours says it
            setting = PRIMARY_DSN_SETTING if self.settings.primary_dsn else READ_DSN_SETTING
            raise connect_error(error, self.settings, setting) from None
        self._conn = conn
        return conn

    def _connect_kwargs(self) -> dict[str, Any]:
        kwargs = lease_connect_kwargs("leader")
        if self._writes_failing:
            kwargs["application_name"] = WRITES_FAILING_APPLICATION
        return kwargs


def lease_connect_kwargs(purpose: str) -> dict[str, Any]:
    """``psycopg.connect`` keywords of a dedicated connection whose backend pid names this
    process (a lease's, a registry heartbeat's): autocommit, short timeouts, TCP keepalives
    so a holder cut off by the network loses its backend in about 25 s."""
    options = (
        f"-c statement_timeout={LEADER_STATEMENT_TIMEOUT_MS} "
        f"-c lock_timeout={LEADER_LOCK_TIMEOUT_MS} "
        f"-c tcp_keepalives_idle={KEEPALIVE_IDLE} "
        f"-c tcp_keepalives_interval={KEEPALIVE_INTERVAL} "
        f"-c tcp_keepalives_count={KEEPALIVE_COUNT}"
    )
    return {
        "autocommit": True,
        "row_factory": dict_row,
        "application_name": f"{APPLICATION_NAME} {purpose}",
        "connect_timeout": CONNECT_TIMEOUT_SECONDS,
        "keepalives": 1,
        "keepalives_idle": KEEPALIVE_IDLE,
        "keepalives_interval": KEEPALIVE_INTERVAL,
        "keepalives_count": KEEPALIVE_COUNT,
        "options": options,
    }
