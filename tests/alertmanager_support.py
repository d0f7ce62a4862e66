"""A real Alertmanager for the alertmanager receiver's tests: Debian's prometheus-alertmanager
(``make alertmanager`` unpacks it into ~/.cache/outbox-monitor/alertmanager-deb), run as the
demo runs it (``outbox_monitor.demo.alertmanager_run``: a loopback port, no gossip, its
storage in a temporary folder); and small local HTTP servers that answer as a broken
receiver or a heartbeat check does. Without the binary the tests skip, loudly, and fail
under ``make test`` (``OUTBOX_MONITOR_REQUIRE_ALERTMANAGER``)."""

import json
import os
import threading
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from outbox_monitor.demo.alertmanager_run import LocalAlertmanager, find_alertmanager
from tests.alerting import LOADED_DEADLINE

REQUIRE_ENV = "OUTBOX_MONITOR_REQUIRE_ALERTMANAGER"


def alertmanager_binary() -> str:
    """``make alertmanager``'s Alertmanager (``demo.alertmanager_run.find_alertmanager``);
    skips (fails under ``REQUIRE_ENV``) when it is missing."""
    found = find_alertmanager()
    if found is None:
        message = "ALERTMANAGER IS MISSING, THE RECEIVER IS NOT TESTED: make alertmanager"
        if os.environ.get(REQUIRE_ENV):
            pytest.fail(message)
        pytest.skip(message)
    return str(found)


@contextmanager
def running_alertmanager(directory: Path, port: int | None = None) -> Iterator[str]:
    """A real Alertmanager for the block, on ``127.0.0.1:port`` (a free one by default);
    yields its base URL once ``/-/ready`` answers."""
    alertmanager = LocalAlertmanager(Path(alertmanager_binary()), directory, port)
    alertmanager.start(timeout=LOADED_DEADLINE)
    try:
        yield alertmanager.url
    finally:
        alertmanager.stop()


def active_alerts(url: str) -> list[dict[str, Any]]:
    """Alertmanager's own view: ``GET /api/v2/alerts`` (active, silenced and inhibited; a
    resolved alert is not listed)."""
    with urllib.request.urlopen(url + "/api/v2/alerts", timeout=5) as response:
        return json.load(response)


class LocalServer:
    """A local HTTP server on 127.0.0.1 answering every request with ``status`` (``hang``:
    never answering until stopped; ``status`` may be changed while it runs); ``requests``
    holds ``(monotonic time, method, path)``."""

    def __init__(self, *, status: int = 200, hang: bool = False) -> None:
        self.status = status
        self.requests: list[tuple[float, str, str]] = []
        self.release = threading.Event()
        server = self

        class Handler(BaseHTTPRequestHandler):
            def _answer(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                self.rfile.read(length)
                server.requests.append((time.monotonic(), self.command, self.path))
                if hang:
                    server.release.wait(60)
                    return
                body = b"" if server.status == 200 else b"upstream broken"
                self.send_response(server.status)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            do_GET = do_POST = _answer

            def log_message(self, *args: Any) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}"
        threading.Thread(target=self._server.serve_forever, daemon=True).start()

    def stop(self) -> None:
        self.release.set()
        self._server.shutdown()
        self._server.server_close()
