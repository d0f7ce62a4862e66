"""The HTTP listener of Slack's button presses, beside the scheduler (issue 31 item 6), on
its own address and port (``OUTBOX_MONITOR_SLACK_ACTIONS_ADDRESS``/``_PORT``), never the
``/metrics`` one.

``POST /slack/actions`` only. A body over ``OUTBOX_MONITOR_SLACK_ACTIONS_MAX_BODY`` bytes
(or of no stated length) is refused before it is read (413, 411); a request that Slack did
not sign within the window is refused (401); a signed one is answered 200 at once (Slack
wants an answer within 3 s) and acted on in a worker thread
(``alerts.slack_actions.SlackActions.handle``), which reports through ``response_url``.
"""

import errno
import logging
import socket
import threading
from collections.abc import Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from outbox_monitor.alerts.slack_actions import SlackActions
from outbox_monitor.config.settings import Settings
from outbox_monitor.errors import ConfigError
from outbox_monitor.export.server import local_url, serve_in_thread, stop_serving
from outbox_monitor.store.db import Database

log = logging.getLogger("outbox_monitor.service.slack_listener")

PATH = "/slack/actions"
WORKERS = 2
"""Presses acted on at once; more wait in the pool's queue (each takes milliseconds)."""
READ_TIMEOUT_SECONDS = 10.0
"""A connection that sends nothing for this long is closed (a slow client holds no thread)."""


class _Server(ThreadingHTTPServer):
    daemon_threads = True


class _Server6(_Server):
    address_family = socket.AF_INET6


def _handler(
    actions: SlackActions, pool: ThreadPoolExecutor, max_body: int, read_timeout: float
) -> type:
    class Handler(BaseHTTPRequestHandler):
        timeout = read_timeout

        def log_message(self, format: str, *args: Any) -> None:
            log.debug("%s %s", self.address_string(), format % args)

        def _answer(self, status: int, text: str = "") -> None:
            body = text.encode()
            self.send_response(status)
            self.send_header("Content-Type", "text/plain; charset=utf-8")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_GET(self) -> None:
            self._answer(405, f"POST Slack's interactivity requests to {PATH}\n")

        def do_POST(self) -> None:
            if self.path != PATH:
                self._answer(404, f"not found: try {PATH}\n")
                return
            length = self.headers.get("Content-Length", "")
            if not length.isdigit():
                log.warning(
                    "Slack press refused from %s: no Content-Length", self.client_address[0]
                )
                self._answer(411, "length required\n")
                return
            if int(length) > max_body:
                log.warning(
                    "Slack press refused from %s: a body of %s bytes, over the %s accepted",
                    self.client_address[0],
                    length,
                    max_body,
                )
                self.close_connection = True
                self._answer(413, f"at most {max_body} bytes\n")
                return
            body = self.rfile.read(int(length))
            reason = actions.refusal_of_request(body, dict(self.headers.items()))
            if reason is not None:
                log.warning("Slack press refused from %s: %s", self.client_address[0], reason)
                self._answer(401, "refused\n")
                return
            self._answer(200)
            pool.submit(_handle, actions, body, "X-Slack-Retry-Num" in self.headers)

    return Handler


def _handle(actions: SlackActions, body: bytes, retry: bool) -> None:
    try:
        actions.handle(body, retry=retry)
    except Exception:  # a worker never dies silently
        log.exception("a Slack press could not be handled")


class SlackListener:
    """The listener in a daemon thread.

    Args:
        actions: the checks and actions (``SlackActions``).
        address, port: where it listens; port ``0`` binds a free one (``port`` after
            ``start``).
        max_body: bytes of a request body read at most.
        read_timeout: seconds a connection may send nothing before it is closed.
    """

    def __init__(
        self,
        actions: SlackActions,
        *,
        address: str,
        port: int,
        max_body: int,
        read_timeout: float = READ_TIMEOUT_SECONDS,
    ) -> None:
        self.actions = actions
        self.address = address
        self.port = port
        self.max_body = max_body
        self.read_timeout = read_timeout
        self.pool = ThreadPoolExecutor(max_workers=WORKERS, thread_name_prefix="slack-press")
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        """The URL presses are posted to (``0.0.0.0``/``::`` reached on localhost)."""
        return local_url(self.address, self.port) + PATH

    def start(self) -> "SlackListener":
        """Bind and serve; returns ``self``.

        Raises:
            ConfigError: the address or port cannot be bound, naming the setting.
        """
        server_class = _Server6 if ":" in self.address else _Server
        handler = _handler(self.actions, self.pool, self.max_body, self.read_timeout)
        try:
            server = server_class((self.address, self.port), handler)
        except OSError as error:
            setting = (
                "OUTBOX_MONITOR_SLACK_ACTIONS_PORT"
                if error.errno in (errno.EADDRINUSE, errno.EACCES)
                else "OUTBOX_MONITOR_SLACK_ACTIONS_ADDRESS"
            )
            raise ConfigError(
                f"{setting}: cannot listen for Slack's presses on {self.address}:{self.port}: "
                f"{error.strerror or error}",
                hint="Choose a free port and an address of this host.",
            ) from None
        self._server = server
        self.port = server.server_address[1]
        self._thread = serve_in_thread(server, "outbox-monitor-slack-actions")
        log.info("listening for Slack's button presses on %s", self.url)
        return self

    def stop(self) -> None:
        """Stop listening, finish the presses being acted on (idempotent)."""
        server, self._server = self._server, None
        stop_serving(server, self._thread)
        self.pool.shutdown(wait=True)


@contextmanager
def slack_listener(
    settings: Settings, env: Mapping[str, str], **options: Any
) -> Iterator[SlackListener | None]:
    """The listener of ``settings`` started for the block (``None`` when
    ``OUTBOX_MONITOR_SLACK_ACTIONS_PORT`` is 0), with its own Database of actions.

    Args:
        settings: the listener's settings and the actions DSN.
        env: for ``SLACK_SIGNING_SECRET``.
        **options: as ``SlackActions`` (``on_acknowledged``, ``clock``).

    Raises:
        ConfigError: as ``SlackActions.from_settings`` and ``SlackListener.start``.
    """
    if not settings.slack_actions_port:
        yield None
        return
    with Database(settings, purpose="actions") as db:
        actions = SlackActions.from_settings(settings, db, env, **options)
        listener = SlackListener(
            actions,
            address=settings.slack_actions_address,
            port=settings.slack_actions_port,
            max_body=settings.slack_actions_max_body,
        ).start()
        try:
            yield listener
        finally:
            listener.stop()
