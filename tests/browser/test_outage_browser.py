"""A database outage in a real browser: the Overview keeps its title and shows the banner,
its live refresh (every 5 s) does not queue connection attempts behind each other, and the
figures come back by themselves when the database does.

The session's retry delay after a failed connection is ``OUTBOX_MONITOR_OUTAGE_RETRY``,
20 s here (30 s by default): the watch still spans more than two live refreshes, and the
figures come back 10 s sooner."""

import contextlib
import re
import socket
import threading
import time
from datetime import UTC, datetime
from urllib.parse import urlsplit, urlunsplit

import pytest
from playwright.sync_api import Page, expect

pytestmark = pytest.mark.browser

REFRESH_SECONDS = 5
OUTAGE_RETRY_SECONDS = 20


class DatabaseProxy:
    """A TCP proxy on 127.0.0.1 to the test's Postgres. ``down()`` cuts every connection
    and then accepts new ones without ever answering (a host gone silent: libpq waits for
    its connect timeout); ``attempts`` counts those. ``up()`` forwards again."""

    def __init__(self, target_port: int) -> None:
        self.target_port = target_port
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.attempts = 0
        self._down = False
        self._lock = threading.Lock()
        self._sockets: list[socket.socket] = []
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            with self._lock:
                self._sockets.append(client)
                if self._down:
                    self.attempts += 1  # held open, never answered
                    continue
            upstream = socket.create_connection(("127.0.0.1", self.target_port))
            with self._lock:
                self._sockets.append(upstream)
            for source, sink in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pipe, args=(source, sink), daemon=True).start()

    @staticmethod
    def _pipe(source: socket.socket, sink: socket.socket) -> None:
        try:
            while data := source.recv(65536):
                sink.sendall(data)
        except OSError:
            pass
        finally:
            for end in (source, sink):
                end.close()

    def _close_all(self) -> None:
        with self._lock:
            for sock in self._sockets:
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)
                sock.close()
            self._sockets.clear()

    def down(self) -> None:
        with self._lock:
            self._down = True
        self._close_all()

    def up(self) -> None:
        with self._lock:
            self._down = False
        self._close_all()  # the held attempts fail at once

    def close(self) -> None:
        self.listener.close()
        self._close_all()


@pytest.fixture
def proxy(dsn: str):
    port = urlsplit(dsn).port
    database_proxy = DatabaseProxy(port)
    yield database_proxy
    database_proxy.close()


def through(dsn: str, port: int) -> str:
    parts = urlsplit(dsn)
    return urlunsplit(parts._replace(netloc=f"{parts.username}@127.0.0.1:{port}"))


def queue_depth(page: Page):
    tile = page.locator('[data-testid="stMetric"]').filter(has_text="Queue depth")
    return tile.locator('[data-testid="stMetricValue"]')


def test_an_outage_does_not_stack_up_live_refreshes(dashboard_at, page, proxy, dsn, rows):
    rows.add(created_ago=60)
    with dashboard_at(through(dsn, proxy.port), outage_retry=f"{OUTAGE_RETRY_SECONDS}s") as url:
        page.goto(f"{url}/?refresh={REFRESH_SECONDS}s")
        expect(queue_depth(page)).to_have_text("1")

        proxy.down()

        expect(page.get_by_text("Database unreachable")).to_be_visible()
        expect(page.get_by_role("heading", name="Overview")).to_be_visible()
        before = proxy.attempts
        said = page.get_by_text("Last attempt failed at").inner_text()
        failed_at = datetime.strptime(
            re.search(r"failed at (\S+ \S+) UTC", said).group(1), "%Y-%m-%d %H:%M:%S"
        ).replace(tzinfo=UTC)
        # watch until just before the retry delay ends (the time shown is cut to the second)
        watch = (failed_at - datetime.now(UTC)).total_seconds() + OUTAGE_RETRY_SECONDS - 3
        assert watch > 2 * REFRESH_SECONDS, said
        time.sleep(watch)
        # a refresh every 5 s that connected each time would wait out a connect timeout
        # per refresh, one after the other; within the retry delay it does not connect
        assert proxy.attempts - before <= 1, proxy.attempts - before
        expect(page.get_by_text("Database unreachable")).to_be_visible()

        proxy.up()
        rows.add(created_ago=30)

        expect(queue_depth(page)).to_have_text("2")
        expect(page.get_by_text("Database unreachable")).to_have_count(0)
