"""A real Alertmanager on a loopback port, for the demo's drill (``demo.drill``) and the
alertmanager receiver's tests: Debian's prometheus-alertmanager as ``make alertmanager``
unpacks it (``~/.cache/outbox-monitor/alertmanager-deb``), or one on the ``PATH``; no gossip
(``--cluster.listen-address=``), its storage in a folder of the caller's; or the binary
``OUTBOX_DEMO_ALERTMANAGER`` names. ``find_alertmanager``
says where it is, or ``None``: the demo then runs without it and says so."""

import os
import shutil
import subprocess
import time
import urllib.request
from pathlib import Path

from outbox_monitor.demo.pgcluster import free_port
from outbox_monitor.errors import OutboxMonitorError

BINARY_ENV = "OUTBOX_DEMO_ALERTMANAGER"
"""The Alertmanager binary to run, when set (else ``UNPACKED``, then the ``PATH``)."""
UNPACKED = Path.home() / ".cache/outbox-monitor/alertmanager-deb/usr/bin/prometheus-alertmanager"
TEMPLATE = Path("/usr/share/prometheus/alertmanager/default.tmpl")
"""Where Debian's Alertmanager reads its default template (``make alertmanager`` puts it)."""
CONFIG = """
route: {receiver: blackhole, group_wait: 1s, group_interval: 1s, repeat_interval: 1h}
receivers: [{name: blackhole}]
"""
"""It keeps and shows the alerts posted to it, and notifies no one."""
READY_TIMEOUT_SECONDS = 60.0


def find_alertmanager() -> Path | None:
    """``$OUTBOX_DEMO_ALERTMANAGER``, else ``make alertmanager``'s binary (with the template
    Debian's build reads), else ``prometheus-alertmanager`` or ``alertmanager`` on the
    ``PATH``; ``None`` when none."""
    if os.environ.get(BINARY_ENV):
        return Path(os.environ[BINARY_ENV])
    if UNPACKED.exists() and TEMPLATE.exists():
        return UNPACKED
    found = shutil.which("prometheus-alertmanager") or shutil.which("alertmanager")
    return Path(found) if found else None


class LocalAlertmanager:
    """One Alertmanager process on ``127.0.0.1:port`` (a free one by default).

    Args:
        binary: its executable (``find_alertmanager``).
        directory: its configuration, storage and log (created).
        port: the port; ``None`` for a free one.
    """

    def __init__(self, binary: Path, directory: Path, port: int | None = None) -> None:
        self.binary = binary
        self.directory = directory
        self.port = port or free_port()
        self.log_path = directory / "alertmanager.log"
        self.process: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        """Its base URL, ``http://127.0.0.1:PORT`` (its UI there, its API under ``/api/v2``)."""
        return f"http://127.0.0.1:{self.port}"

    def start(self, timeout: float = READY_TIMEOUT_SECONDS) -> "LocalAlertmanager":
        """Start it and wait until ``/-/ready`` answers; returns ``self``.

        Raises:
            OutboxMonitorError: it exited or did not answer within ``timeout`` seconds (the
                end of its log in the message); it is stopped.
        """
        self.directory.mkdir(parents=True, exist_ok=True)
        (self.directory / "alertmanager.yml").write_text(CONFIG)
        with self.log_path.open("wb") as log:
            self.process = subprocess.Popen(
                [
                    str(self.binary),
                    f"--config.file={self.directory / 'alertmanager.yml'}",
                    f"--storage.path={self.directory / 'data'}",
                    f"--web.listen-address=127.0.0.1:{self.port}",
                    "--cluster.listen-address=",
                ],
                stdout=log,
                stderr=subprocess.STDOUT,
                # its own session: a terminal's Ctrl-C reaches the demo, which stops it after
                # the scheduler's last post (not before: "connection refused" at every stop)
                start_new_session=True,
            )
        deadline = time.monotonic() + timeout
        while not _answers(self.url + "/-/ready"):
            if self.process.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise OutboxMonitorError(
                    f"Alertmanager ({self.binary}) did not start: "
                    f"{self.log_path.read_text(errors='replace')[-2000:]}"
                )
            time.sleep(0.1)
        return self

    def stop(self) -> None:
        """Stop it (SIGTERM, then SIGKILL after 20 s); idempotent."""
        process, self.process = self.process, None
        if process is None:
            return
        process.terminate()
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def _answers(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2) as response:
            return response.status == 200
    except OSError:
        return False
