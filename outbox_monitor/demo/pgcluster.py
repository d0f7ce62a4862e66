"""A throwaway local PostgreSQL cluster (for the demo and the test suite)."""

import contextlib
import glob
import os
import shutil
import socket
import subprocess
import tempfile
from pathlib import Path

import psycopg
from psycopg import sql

from outbox_monitor.errors import OutboxMonitorError

SERVER_USER = "postgres"


class PostgresNotFound(OutboxMonitorError):
    """No PostgreSQL server binaries (initdb, pg_ctl) on this machine."""


def find_bindir() -> Path:
    """Locate the directory holding ``initdb`` and ``pg_ctl``.

    Looks at ``OUTBOX_MONITOR_PG_BINDIR``, ``pg_config --bindir``, then the newest
    ``/usr/lib/postgresql/*/bin`` and ``PATH``.

    Raises:
        PostgresNotFound: with how to install the server or use an existing database.
    """
    candidates = []
    if os.environ.get("OUTBOX_MONITOR_PG_BINDIR"):
        candidates.append(Path(os.environ["OUTBOX_MONITOR_PG_BINDIR"]))
    if shutil.which("pg_config"):
        result = subprocess.run(["pg_config", "--bindir"], capture_output=True, text=True)
        if result.returncode == 0:
            candidates.append(Path(result.stdout.strip()))
    versions = sorted(
        glob.glob("/usr/lib/postgresql/*/bin"), key=lambda p: int(Path(p).parent.name), reverse=True
    )
    candidates += [Path(p) for p in versions]
    if shutil.which("initdb"):
        candidates.append(Path(shutil.which("initdb")).parent)
    for candidate in candidates:
        if (candidate / "initdb").exists() and (candidate / "pg_ctl").exists():
            return candidate
    raise PostgresNotFound(
        "no PostgreSQL server binaries (initdb, pg_ctl) found on this machine",
        hint="Install them (Debian/Ubuntu: `apt-get install postgresql`), set "
        "OUTBOX_MONITOR_PG_BINDIR to their folder, or set OUTBOX_MONITOR_DSN to an "
        "existing database.",
    )


def free_port() -> int:
    """An unused TCP port on 127.0.0.1."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def port_in_use(address: str, port: int) -> bool:
    """Whether a server listens on ``address``:``port`` (a bind there fails). Connections
    left in TIME-WAIT by a server just stopped do not count, as for the servers we start."""
    with socket.socket() as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((address, port))
        except OSError:
            return True
        return False


class TemporaryCluster:
    """initdb + pg_ctl start on 127.0.0.1 in a temporary folder; ``stop()`` removes it.

    When run as root, the server runs as the ``postgres`` user (initdb refuses root).
    Durability is off (``fsync=off``): the data is throwaway by design.
    """

    def __init__(self, port: int | None = None) -> None:
        self.port = port or free_port()
        self.bindir = find_bindir()
        self.root = Path(tempfile.mkdtemp(prefix="outbox-monitor-pg-"))
        self.data = self.root / "data"
        self.log = self.root / "server.log"
        self._as_root = os.geteuid() == 0

    @property
    def dsn(self) -> str:
        """``postgresql://postgres@127.0.0.1:<port>/postgres``."""
        return self.dsn_for("postgres")

    def dsn_for(self, dbname: str) -> str:
        """The DSN of one database of this cluster."""
        return f"postgresql://postgres@127.0.0.1:{self.port}/{dbname}"

    def create_database(self, dbname: str) -> str:
        """Create the database ``dbname`` in this (started) cluster; returns its DSN.

        Raises:
            psycopg.Error: it exists already, or the server refused.
        """
        with psycopg.connect(self.dsn, autocommit=True) as conn:
            conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(dbname)))
        return self.dsn_for(dbname)

    def _run(self, *args: str) -> None:
        command = [str(self.bindir / args[0]), *args[1:]]
        if self._as_root:
            command = ["runuser", "-u", SERVER_USER, "--", *command]
        result = subprocess.run(command, capture_output=True, text=True)
        if result.returncode != 0:
            log_tail = self.log.read_text()[-2000:] if self.log.exists() else ""
            raise OutboxMonitorError(
                f"{args[0]} failed ({result.returncode}): {result.stderr.strip()}\n{log_tail}"
            )

    def start(self) -> "TemporaryCluster":
        """Create and start the cluster; returns ``self``.

        Raises:
            PostgresNotFound, OutboxMonitorError: binaries missing, or initdb/pg_ctl failed
                (the message carries the server log's tail).
        """
        if self._as_root:
            os.chmod(self.root, 0o755)
            shutil.chown(self.root, SERVER_USER, SERVER_USER)
        self._run(
            "initdb",
            "-D",
            str(self.data),
            "-U",
            "postgres",
            "--auth=trust",
            "-E",
            "UTF8",
            "--no-sync",
            "--locale=C",
        )
        self.resume()
        return self

    def _options(self) -> str:
        # The health tests hold the xmin horizon with prepared transactions and logical
        # slots: this throwaway cluster allows both (the product needs neither).
        return (
            f"-p {self.port} -k {self.root} -c listen_addresses=127.0.0.1 "
            "-c fsync=off -c synchronous_commit=off -c full_page_writes=off "
            "-c max_connections=200 -c max_prepared_transactions=10 -c wal_level=logical"
        )

    def pause(self) -> None:
        """Stop the server but keep its data (``resume()`` starts it again), as in an outage."""
        self._run("pg_ctl", "-D", str(self.data), "-m", "fast", "-w", "stop")

    def resume(self) -> None:
        """Start a paused server again on the same port."""
        self._run(
            "pg_ctl",
            "-D",
            str(self.data),
            "-l",
            str(self.log),
            "-w",
            "-o",
            self._options(),
            "start",
        )

    def stop(self) -> None:
        """Stop the server (fast shutdown) and delete its folder."""
        if self.data.exists():
            with contextlib.suppress(OutboxMonitorError):
                self._run("pg_ctl", "-D", str(self.data), "-m", "fast", "-w", "stop")
        shutil.rmtree(self.root, ignore_errors=True)

    def __enter__(self) -> "TemporaryCluster":
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()
