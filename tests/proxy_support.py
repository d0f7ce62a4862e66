"""A stand-in for an authenticating reverse proxy (oauth2-proxy style) in front of the
dashboard: every request it forwards, the websocket upgrade included, carries the
identity headers it was given; the same headers sent by the browser are dropped.

Why not Playwright's ``extra_http_headers``: Chromium does not add them to a websocket
handshake (measured: the page's GET has them, the ``Upgrade: websocket`` GET has not),
and Streamlit reads ``st.context.headers`` from the websocket's request.

Plain asyncio streams on a thread: each connection carries one request (the proxy asks
the upstream for ``Connection: close``) or one websocket, piped both ways as bytes.
"""

import asyncio
import threading
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager, suppress
from pathlib import Path

CHUNK = 65536
HEAD_LIMIT = 65536
"""Largest request head (request line and headers) accepted, bytes."""
SETTLE_SECONDS = 0.05
"""At stop, how long a turn waits for the connections accepted but not yet made."""


def _rewrite(head: bytes, headers: Mapping[str, str]) -> bytes:
    """The request head with ``headers`` set (the client's own values of them dropped) and,
    unless it is a websocket upgrade, ``Connection: close``."""
    request_line, *fields = head.decode("latin-1").split("\r\n")[:-2]
    names = {name.lower() for name in headers}
    upgrade = any(
        field.split(":", 1)[0].strip().lower() == "upgrade" and "websocket" in field.lower()
        for field in fields
    )
    if not upgrade:
        names.add("connection")
    kept = [field for field in fields if field.split(":", 1)[0].strip().lower() not in names]
    added = [f"{name}: {value}" for name, value in headers.items()]
    if not upgrade:
        added.append("Connection: close")
    return "\r\n".join([request_line, *kept, *added, "", ""]).encode("latin-1")


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    with suppress(ConnectionError):
        while data := await reader.read(CHUNK):
            writer.write(data)
            await writer.drain()


async def _close(*writers: asyncio.StreamWriter | None) -> None:
    """Close every writer first (a cancellation while waiting cannot leave one open: a loaded
    run saw an unclosed transport's ResourceWarning fail the next test), then wait."""
    shut = [writer for writer in writers if writer is not None]
    for writer in shut:
        writer.close()
    with suppress(ConnectionError):
        await asyncio.gather(*(writer.wait_closed() for writer in shut), return_exceptions=True)


class HeaderProxy:
    """Forwards ``127.0.0.1:<port>`` to ``127.0.0.1:<upstream_port>`` adding ``headers``."""

    def __init__(self, upstream_port: int, headers: Mapping[str, str]) -> None:
        self.upstream_port = upstream_port
        self.headers = dict(headers)
        self.port = 0
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._server: asyncio.Server | None = None
        self._connections: dict[asyncio.Task, asyncio.StreamWriter] = {}

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def _accept(self, client_reader, client_writer) -> None:
        """A plain callback, called as the connection is made: the client's writer is known
        before its handler's first step, so ``stop`` closes even a connection whose handler
        never ran (cancelling such a task leaves its socket to the GC: a ResourceWarning that a
        loaded run saw fail a test at teardown)."""
        task = self._loop.create_task(self._handle(client_reader, client_writer))
        self._connections[task] = client_writer
        task.add_done_callback(self._connections.pop)

    async def _handle(self, client_reader, client_writer) -> None:
        upstream_writer = None
        try:
            try:
                head = await client_reader.readuntil(b"\r\n\r\n")
            except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, ConnectionError):
                return
            upstream_reader, upstream_writer = await asyncio.open_connection(
                "127.0.0.1", self.upstream_port, limit=HEAD_LIMIT
            )
            upstream_writer.write(_rewrite(head, self.headers))
            await upstream_writer.drain()
            pipes = [
                asyncio.create_task(_pipe(client_reader, upstream_writer)),
                asyncio.create_task(_pipe(upstream_reader, client_writer)),
            ]
            # the first side to end (usually the upstream, after its response) ends both
            _, pending = await asyncio.wait(pipes, return_when=asyncio.FIRST_COMPLETED)
            for task in pending:
                task.cancel()
            await asyncio.gather(*pending, return_exceptions=True)
        finally:
            await _close(upstream_writer, client_writer)

    def start(self) -> "HeaderProxy":
        self._thread.start()
        self._server = asyncio.run_coroutine_threadsafe(
            asyncio.start_server(self._accept, "127.0.0.1", 0, limit=HEAD_LIMIT), self._loop
        ).result(timeout=10)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    def stop(self) -> None:
        async def shutdown() -> None:
            # Accept no more, but leave the server open until the connections already
            # accepted are made: Python 3.11's server.close() makes a connection accepted just
            # before fail in Server._attach, and its socket is left to the GC
            for listening in self._server.sockets:
                self._loop.remove_reader(listening.fileno())
            while True:
                await asyncio.sleep(SETTLE_SECONDS)  # the accepted are made within a turn
                if not (connections := dict(self._connections)):
                    break
                for task in connections:
                    task.cancel()
                await asyncio.gather(*connections, return_exceptions=True)
                await _close(*connections.values())  # those whose handler never ran
            self._server.close()
            await self._server.wait_closed()

        asyncio.run_coroutine_threadsafe(shutdown(), self._loop).result(timeout=10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=10)
        self._loop.close()


@contextmanager
def header_proxy(upstream_url: str, headers: Mapping[str, str]) -> Iterator[str]:
    """``with header_proxy("http://127.0.0.1:8501", {"X-Forwarded-Email": "a@x"}) as url``:
    the dashboard at ``upstream_url`` seen through a proxy that sends ``headers``; yields
    the proxy's base URL."""
    port = int(upstream_url.rsplit(":", 1)[1].rstrip("/"))
    proxy = HeaderProxy(port, headers).start()
    try:
        yield proxy.url
    finally:
        proxy.stop()


def log_line(log: Path, *needles: str, timeout: float = 10.0) -> str | None:
    """The first line of the dashboard's ``log`` holding every one of ``needles``, read
    again until ``timeout`` seconds have passed; ``None`` when none came."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for line in log.read_text(errors="replace").splitlines():
            if all(needle in line for needle in needles):
                return line
        time.sleep(0.2)
    return None
