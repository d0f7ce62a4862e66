"""Leadership: exactly one evaluator and sender per outbox table, through a Postgres advisory lock.

Every scheduler process (replicas, the dashboard's ``--with-scheduler``, the demo) runs a
``Leadership`` and tries ``pg_try_advisory_lock`` on a key derived from the outbox table's
name, on a dedicated connection of its own (never a pooled one: the lock belongs to the
session, and a pool would hand that session to other work or close it). The process that
holds it evaluates rules, sends notifications and samples; the others only keep trying.

Failover: when the leader process dies its socket closes and Postgres frees the lock at
once; when its backend is terminated (``pg_terminate_backend``) or the server restarts,
likewise. The next ``try_acquire`` of another process (each evaluation interval, and
each sender tick) takes it. A leader cut off by the network is detected by TCP keepalives
on both sides (about ``KEEPALIVE_IDLE + KEEPALIVE_INTERVAL * KEEPALIVE_COUNT`` seconds),
so failover then takes that long plus one interval. ``is_leader`` asks the server whether
this session still holds the lock, so a leader whose connection died stops at once.
"""

import contextlib
import logging
import os
import socket
import threading
from typing import Any

import psycopg
from psycopg.rows import dict_row

from outbox_monitor.config import Settings
from outbox_monitor.db import (
    APPLICATION_NAME,
    CONNECT_TIMEOUT_SECONDS,
    describe_target,
    mapped_errors,
)
from outbox_monitor.errors import DatabaseUnavailable
from outbox_monitor.queries import compose

log = logging.getLogger(__name__)

LOCK_NAME_PREFIX = "outbox_monitor.evaluator:"
"""The advisory-lock key is ``hashtextextended(LOCK_NAME_PREFIX || <schema.table>, 0)``."""
KEEPALIVE_IDLE = 10
KEEPALIVE_INTERVAL = 5
KEEPALIVE_COUNT = 3
LEADER_STATEMENT_TIMEOUT_MS = 5000


def _first_line(error: BaseException) -> str:
    return (str(error).strip().splitlines() or [type(error).__name__])[0]


class Leadership:
    """The leadership lock of one outbox table, held on a dedicated connection.

    Thread-safe (the scheduler's jobs share one object). ``identity`` (host:pid) names
    this process in logs and in the database-unreachable alert.

    Args:
        settings: the DSN and the outbox table (the lock is per table, so two monitors of
            two tables in one database do not exclude each other).
    """

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.table_name = ".".join(settings.table_parts)
        self.lock_name = LOCK_NAME_PREFIX + self.table_name
        self.identity = f"{socket.gethostname()}:{os.getpid()}"
        self._conn: psycopg.Connection | None = None
        self._key: int | None = None
        self._held = False
        self._mutex = threading.RLock()

    # ------------------------------------------------------------------ public

    @property
    def held(self) -> bool:
        """Whether this process held the lock at its last check (no round trip)."""
        return self._held

    def try_acquire(self) -> bool:
        """Take the lock if free; keep it if already held.

        Returns:
            ``True`` when this process is (now) the leader.

        Raises:
            DatabaseUnavailable: the database cannot be reached (no leader then).
        """
        with self._mutex:
            if self._held and self._still_held():
                return True
            # An idle follower's connection may have died with a server restart that is
            # already over: a reused connection that fails gets one retry on a fresh one.
            for attempt in (1, 2):
                reused = self._conn is not None and not self._conn.closed
                conn = self._connection()
                try:
                    with mapped_errors(self.settings):
                        row = conn.execute(
                            compose("leader_try_lock"), {"key": self._key}
                        ).fetchone()
                    break
                except DatabaseUnavailable:
                    self._drop()
                    if not reused or attempt == 2:
                        raise
            if row["locked"] and not self._held:
                log.info("%s is now the alert evaluator of %s", self.identity, self.table_name)
            self._held = bool(row["locked"])
            return self._held

    @property
    def is_leader(self) -> bool:
        """Whether this process holds the lock now: asks the server (``pg_locks``) over
        the lock's own connection. ``False`` when never acquired, released, or when the
        connection is gone (the lock went with it); never raises."""
        with self._mutex:
            return self._held and self._still_held()

    def release(self) -> None:
        """Give the lock back and close the connection (idempotent; never raises)."""
        with self._mutex:
            conn, self._conn = self._conn, None
            was_held, self._held = self._held, False
            if conn is None:
                return
            try:
                if was_held and not conn.closed:
                    conn.execute(compose("leader_unlock"), {"key": self._key})
            except psycopg.Error as error:
                log.debug("releasing the leadership lock: %s", error)
            finally:
                conn.close()
            if was_held:
                log.info("%s released the evaluator lock of %s", self.identity, self.table_name)

    def __enter__(self) -> "Leadership":
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.release()

    # ----------------------------------------------------------------- private

    def _still_held(self) -> bool:
        conn = self._conn
        if conn is None or conn.closed:
            self._lost("its connection is closed")
            return False
        try:
            held = conn.execute(compose("leader_holds_lock"), {"key": self._key}).fetchone()["held"]
        except psycopg.Error as error:
            self._lost(_first_line(error))
            return False
        if not held:
            self._lost("the server no longer lists the lock")
        return bool(held)

    def _lost(self, reason: str) -> None:
        if self._held:
            log.warning(
                "%s lost the evaluator lock of %s: %s", self.identity, self.table_name, reason
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
            raise DatabaseUnavailable(
                f"cannot connect to {describe_target(self.settings.dsn)}: {_first_line(error)}",
                hint="The scheduler retries with backoff; check that Postgres is running.",
            ) from None
        try:
            with mapped_errors(self.settings):
                if self._key is None:
                    self._key = conn.execute(
                        compose("leader_lock_key"), {"name": self.lock_name}
                    ).fetchone()["key"]
        except BaseException:
            conn.close()
            raise
        self._conn = conn
        return conn

    def _connect_kwargs(self) -> dict[str, Any]:
        options = (
            f"-c statement_timeout={LEADER_STATEMENT_TIMEOUT_MS} "
            f"-c tcp_keepalives_idle={KEEPALIVE_IDLE} "
            f"-c tcp_keepalives_interval={KEEPALIVE_INTERVAL} "
            f"-c tcp_keepalives_count={KEEPALIVE_COUNT}"
        )
        return {
            "autocommit": True,
            "row_factory": dict_row,
            "application_name": f"{APPLICATION_NAME} leader",
            "connect_timeout": CONNECT_TIMEOUT_SECONDS,
            "keepalives": 1,
            "keepalives_idle": KEEPALIVE_IDLE,
            "keepalives_interval": KEEPALIVE_INTERVAL,
            "keepalives_count": KEEPALIVE_COUNT,
            "options": options,
        }
