"""A throwaway streaming hot standby of a ``TemporaryCluster`` (for the test suite): a
replication role on the primary, ``pg_basebackup -R``, and a server in recovery on its own
port, replaying what the primary streams."""

import contextlib
import time

import psycopg

from outbox_monitor.demo.pgcluster import TemporaryCluster
from outbox_monitor.errors import OutboxMonitorError

REPLICATION_ROLE = "replicator"
MATCHED_SETTINGS = (
    "max_connections",
    "max_prepared_transactions",
    "max_locks_per_transaction",
    "max_worker_processes",
    "max_wal_senders",
)
"""A hot standby refuses to start with less of these than its primary: copied from it."""
CATCH_UP_TIMEOUT_SECONDS = 30.0


class TemporaryStandby(TemporaryCluster):
    """``pg_basebackup -R`` of ``primary`` (as the replication role ``replicator``, over
    TCP, WAL streamed during the backup), started with ``hot_standby=on`` on another port.

    ``stop()`` stops it and removes its folder; the primary is the caller's. Like the
    primary it runs as the ``postgres`` user when run as root.

    Args:
        primary: a started cluster whose ``wal_level`` is ``replica`` (PostgreSQL's
            default) and whose ``pg_hba.conf`` lets ``replicator`` connect for replication
            from 127.0.0.1 (initdb's default ``trust`` entries do).
        port: the standby's port (default: a free one).
    """

    def __init__(self, primary: TemporaryCluster, port: int | None = None) -> None:
        super().__init__(port)
        self.primary = primary
        self._settings = ""

    def start(self) -> "TemporaryStandby":
        """Create the replication role when absent, take the base backup, start the
        standby and wait until it accepts connections in recovery; returns ``self``.

        Raises:
            OutboxMonitorError: the primary cannot stream (``wal_level``), or
                pg_basebackup/pg_ctl failed (with the server log's tail).
        """
        with psycopg.connect(self.primary.dsn, autocommit=True) as conn:
            level = conn.execute("SHOW wal_level").fetchone()[0]
            if level == "minimal":
                raise OutboxMonitorError("the primary runs wal_level=minimal: no streaming")
            conn.execute(
                "DO $$ BEGIN CREATE ROLE replicator REPLICATION LOGIN; "
                "EXCEPTION WHEN duplicate_object THEN NULL; END $$"
            )
            rows = conn.execute(
                "SELECT name, setting FROM pg_settings WHERE name = ANY(%s)",
                (list(MATCHED_SETTINGS),),
            ).fetchall()
        self._settings = " ".join(f"-c {name}={value}" for name, value in rows)
        self._prepare_root()
        self._run(
            "pg_basebackup",
            "-D",
            str(self.data),
            "-R",
            "-X",
            "stream",
            "-c",
            "fast",
            "--no-sync",
            "-h",
            "127.0.0.1",
            "-p",
            str(self.primary.port),
            "-U",
            REPLICATION_ROLE,
        )
        self.resume()
        return self

    def _options(self) -> str:
        return f"{super()._options()} {self._settings} -c hot_standby=on"

    def wait_for_database(self, dbname: str, timeout: float = CATCH_UP_TIMEOUT_SECONDS) -> None:
        """Wait until the standby has replayed everything the primary has written so far
        (its current WAL insert position, asynchronous commits included), so ``dbname``
        and every row committed before the call are there.

        Raises:
            OutboxMonitorError: not caught up within ``timeout`` seconds.
        """
        with psycopg.connect(self.primary.dsn, autocommit=True) as conn:
            target = conn.execute("SELECT pg_current_wal_insert_lsn()::text").fetchone()[0]
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with (
                contextlib.suppress(psycopg.OperationalError),
                psycopg.connect(self.dsn_for(dbname), autocommit=True, connect_timeout=2) as conn,
            ):
                caught_up = conn.execute(
                    "SELECT pg_last_wal_replay_lsn() >= %s::pg_lsn", (target,)
                ).fetchone()[0]
                if caught_up:
                    return
            time.sleep(0.05)
        raise OutboxMonitorError(f"the standby did not replay {dbname} within {timeout:g} s")

    def pause_replay(self) -> None:
        """``pg_wal_replay_pause()``: the standby keeps receiving WAL but replays none."""
        self._call("SELECT pg_wal_replay_pause()")

    def resume_replay(self) -> None:
        """``pg_wal_replay_resume()`` (harmless when replay is not paused)."""
        self._call("SELECT pg_wal_replay_resume()")

    def _call(self, statement: str) -> None:
        with psycopg.connect(self.dsn, autocommit=True) as conn:
            conn.execute(statement)
