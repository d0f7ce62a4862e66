"""Scheduler replicas share a fleet's outboxes (issue 16 item 5): each replica heartbeats into a
registry (``outbox_monitor.scheduler_replicas``, migration 018) so that it knows N, the live
replicas of its fleet, and takes at most its share of the M outboxes' leases.

The registry is one database: ``OUTBOX_MONITOR_REGISTRY_DSN``, else the first outbox's primary
(its ``primary_dsn_env``, else its ``dsn_env``). Every replica of a fleet must see the same
one. A replica counts while its heartbeat has not expired (``ttl``) and its heartbeat
connection's backend is there: one killed is no longer counted at the survivors' next tick.
The fleet is identified by a digest of its outbox names, so fleets sharing a registry
database do not count each other's replicas.

``LeaseShare``: a replica holding ⌈M/N⌉ leases takes no further one (it holds fewer than
⌈M/N⌉ + 1), and one holding more (N grew) releases the surplus at a tick, between passes.
While the registry is unreachable the last N read is kept (at start 1: the replica may lead
every outbox; each outbox's lease still admits one leader, so notifications stay exactly
once, only the balance waits for the registry).
"""

import contextlib
import hashlib
import logging
import math
import threading
from collections.abc import Callable

import psycopg

from outbox_monitor.alerts.leader import lease_connect_kwargs
from outbox_monitor.config.fleet import Fleet
from outbox_monitor.errors import ConfigError
from outbox_monitor.store.db_errors import describe_target, first_line
from outbox_monitor.store.queries import compose

# the logger keeps its name from before the move into a package (log filters use it)
log = logging.getLogger("outbox_monitor.replicas")

REGISTRY_ENV = "OUTBOX_MONITOR_REGISTRY_DSN"


def fleet_key(names: list[str]) -> str:
    """The fleet's key in the registry: a digest of its outbox names (order ignored)."""
    return hashlib.sha256("\n".join(sorted(names)).encode()).hexdigest()[:16]


def registry_target(fleet: Fleet) -> tuple[str, str]:
    """``(dsn, source)`` of the registry: ``OUTBOX_MONITOR_REGISTRY_DSN`` (already validated
    in the settings), else the first outbox's primary; ``source`` names where it came from
    for messages."""
    first = fleet.outboxes[0]
    if first.settings.registry_dsn:
        return first.settings.registry_dsn, REGISTRY_ENV
    return (
        first.settings.primary_target or "",
        f'the primary of outbox "{first.name}" ({REGISTRY_ENV} unset)',
    )


class ReplicaRegistry:
    """This replica's heartbeat in the registry, on a dedicated connection (its backend pid
    marks the replica alive). Thread-safe.

    Args:
        dsn, source: ``registry_target``'s.
        fleet: ``fleet_key`` of the fleet.
        identity: this process (host:pid, as its leases name it).
        ttl: seconds a heartbeat counts without renewal (the lease TTL).
    """

    def __init__(self, dsn: str, source: str, *, fleet: str, identity: str, ttl: float) -> None:
        self.dsn, self.source = dsn, source
        self.fleet, self.identity, self.ttl = fleet, identity, ttl
        self.replicas = 1
        self._conn: psycopg.Connection | None = None
        self._mutex = threading.Lock()
        self._failing = False

    def check(self) -> None:
        """The start-up check: the registry can hold heartbeats. An unreachable registry is
        logged and retried at every heartbeat (not fatal).

        Raises:
            ConfigError: naming ``source``: a hot standby, or without migration 018's table.
        """
        try:
            with self._mutex:
                row = self._connection().execute(compose("replica_registry_check")).fetchone()
        except psycopg.Error as error:
            self._failed(error)
            return
        where = f"{self.source}: the replicas' registry at {describe_target(self.dsn)}"
        if row["in_recovery"]:
            raise ConfigError(
                f"{where} is a hot standby",
                hint=f"Point {REGISTRY_ENV} at a primary the scheduler's login may write.",
            )
        if not row["has_table"]:
            raise ConfigError(
                f"{where} has no outbox_monitor.scheduler_replicas table",
                hint=f"Run `outbox-monitor init-db` on that database, or set {REGISTRY_ENV}.",
            )

    def heartbeat(self, leases: int) -> int:
        """Renew this replica's row (with the ``leases`` it holds) and count the live
        replicas of the fleet. Never raises: while the registry fails the last count is
        kept (logged once per episode).

        Returns:
            N, at least 1.
        """
        params = {
            "fleet": self.fleet,
            "replica": self.identity,
            "ttl": self.ttl,
            "leases": leases,
        }
        with self._mutex:
            try:
                conn = self._connection()
                conn.execute(compose("replica_heartbeat"), params)
                row = conn.execute(compose("replica_count"), params).fetchone()
            except psycopg.Error as error:
                self._failed(error)
                return self.replicas
        if self._failing:
            log.info("the replicas' registry at %s answers again", describe_target(self.dsn))
            self._failing = False
        self.replicas = max(1, int(row["replicas"]))
        return self.replicas

    def leave(self) -> None:
        """Remove this replica's row and close the connection (a graceful stop; never
        raises)."""
        with self._mutex:
            conn, self._conn = self._conn, None
            if conn is None:
                return
            with contextlib.suppress(psycopg.Error):
                conn.execute(
                    compose("replica_leave"), {"fleet": self.fleet, "replica": self.identity}
                )
            conn.close()

    def _failed(self, error: psycopg.Error) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            with contextlib.suppress(psycopg.Error):
                conn.close()
        if not self._failing:
            log.warning(
                "the replicas' registry at %s (%s) fails: %s; keeping %d replica(s) as the "
                "count until it answers",
                describe_target(self.dsn),
                self.source,
                first_line(error),
                self.replicas,
            )
        self._failing = True

    def _connection(self) -> psycopg.Connection:
        if self._conn is None or self._conn.closed:
            self._conn = psycopg.connect(self.dsn, **lease_connect_kwargs("registry"))
        return self._conn


class LeaseShare:
    """How many of the fleet's M leases this replica may hold: ⌈M/N⌉ with N from the
    registry (``ReplicaRegistry.heartbeat``).

    Args:
        outboxes: M.
        held: counts the leases this replica holds now (no round trip).
    """

    def __init__(self, outboxes: int, held: Callable[[], int]) -> None:
        self.outboxes = outboxes
        self.held = held
        self.replicas = 1

    @property
    def cap(self) -> int:
        """⌈M/N⌉: the most leases this replica holds."""
        return math.ceil(self.outboxes / max(1, self.replicas))

    def may_take(self) -> bool:
        """Whether a lease not held may be taken now (``Leadership(may_take=…)``)."""
        return self.held() < self.cap

    def surplus(self) -> int:
        """Leases held over the cap (to release at this tick)."""
        return max(0, self.held() - self.cap)
