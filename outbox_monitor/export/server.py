"""The scheduler process's HTTP endpoint: ``/metrics`` (the ``export.collector.OutboxCollector``
figures and the process's own) and ``/healthz`` (``scheduler_status.SchedulerStatus``),
served by a small threaded WSGI server on the configured address and port."""

import errno
import json
import logging
import socket
import socketserver
import threading
from collections.abc import Callable, Iterable
from socketserver import ThreadingMixIn
from typing import Any, Protocol
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from prometheus_client import CollectorRegistry, PlatformCollector, ProcessCollector, make_wsgi_app
from prometheus_client.registry import Collector

from outbox_monitor.errors import ConfigError
from outbox_monitor.export.collector import OutboxCollector
from outbox_monitor.export.scheduler_status import SchedulerStatus
from outbox_monitor.store.db import Database

# the logger keeps its name from before the move into a package (log filters use it)
log = logging.getLogger("outbox_monitor.metrics_server")


class _QuietHandler(WSGIRequestHandler):
    """Request lines go to the debug log, not stderr."""

    def log_message(self, format: str, *args: Any) -> None:
        log.debug("%s %s", self.address_string(), format % args)


class _ThreadingServer(ThreadingMixIn, WSGIServer):
    daemon_threads = True


class _ThreadingServer6(_ThreadingServer):
    address_family = socket.AF_INET6


class HealthSource(Protocol):
    """What ``/healthz`` reads: ``SchedulerStatus`` or ``export.fleet.FleetStatus``."""

    def health(self) -> tuple[bool, dict[str, Any]]: ...


def make_app(registry: CollectorRegistry, status: HealthSource) -> Callable:
    """The WSGI app: ``/metrics`` (prometheus_client), ``/healthz``, 404 elsewhere.

    ``/healthz``: 200 ``ok`` (text) when ``status.health()`` is good — ``ok: <notice>``
    while it has a notice (rules not evaluated: the read replica lags) — else 503 with its
    details as JSON (``reason`` says why).
    """
    metrics_app = make_wsgi_app(registry)

    def app(environ: dict[str, Any], start_response: Callable) -> Iterable[bytes]:
        path = environ.get("PATH_INFO") or "/"
        if path == "/metrics":
            return metrics_app(environ, start_response)
        if path == "/healthz":
            healthy, details = status.health()
            if healthy:
                start_response("200 OK", [("Content-Type", "text/plain; charset=utf-8")])
                notice = details.get("notice")
                return [f"ok: {notice}".encode() if notice else b"ok"]
            body = json.dumps(details).encode()
            start_response("503 Service Unavailable", [("Content-Type", "application/json")])
            return [body]
        if path == "/":
            start_response("200 OK", [("Content-Type", "text/plain; charset=utf-8")])
            return [b"outbox-monitor scheduler: /metrics, /healthz\n"]
        start_response("404 Not Found", [("Content-Type", "text/plain; charset=utf-8")])
        return [b"not found: try /metrics or /healthz\n"]

    return app


def local_url(address: str, port: int) -> str:
    """``http://host:port`` of a server listening on ``address`` (``0.0.0.0``/``::`` are
    reached on localhost; an IPv6 address in brackets)."""
    host = "127.0.0.1" if address in ("0.0.0.0", "", "::") else address
    return f"http://{f'[{host}]' if ':' in host else host}:{port}"


def serve_in_thread(server: socketserver.BaseServer, name: str) -> threading.Thread:
    """Run ``server.serve_forever`` in a daemon thread named ``name``, started."""
    thread = threading.Thread(target=server.serve_forever, name=name, daemon=True)
    thread.start()
    return thread


def stop_serving(server: socketserver.BaseServer | None, thread: threading.Thread | None) -> None:
    """Stop ``server`` (``None``: stopped already), close its socket, wait for its thread."""
    if server is None:
        return
    server.shutdown()
    server.server_close()
    if thread is not None:
        thread.join(timeout=5)


class MetricsServer:
    """``/metrics`` and ``/healthz`` over HTTP in a daemon thread.

    Args:
        db: the connector the figures are read through.
        status: the scheduler's ``SchedulerStatus`` (a fleet's: ``FleetStatus``).
        primary: the connector of the scheduler's writes (alert states and samples are
            read there); default ``db``.
        ruleset: the loaded alerts.yml, or ``None``.
        address: interface (``127.0.0.1``; ``0.0.0.0`` or ``::`` to expose it).
        port: TCP port; ``0`` binds a free one (see ``port`` after ``start``).
        top_event_types, cache_seconds: as ``OutboxCollector`` (default: settings).
        collector: the collector of ``/metrics`` instead of an ``OutboxCollector`` of ``db``
            (a fleet's ``export.fleet.FleetCollector``; ``db`` is then unused).
    """

    def __init__(
        self,
        db: Database | None,
        status: HealthSource,
        *,
        primary: Database | None = None,
        ruleset: Any = None,
        address: str = "127.0.0.1",
        port: int = 0,
        top_event_types: int | None = None,
        cache_seconds: float | None = None,
        collector: Collector | None = None,
    ) -> None:
        self.address = address
        self.port = port
        self.registry = CollectorRegistry()
        if collector is None:
            assert db is not None and isinstance(status, SchedulerStatus)
            collector = OutboxCollector(
                db,
                status,
                primary=primary,
                ruleset=ruleset,
                top_event_types=top_event_types,
                cache_seconds=cache_seconds,
            )
        self.collector = collector
        self.registry.register(self.collector)
        ProcessCollector(registry=self.registry)
        PlatformCollector(registry=self.registry)
        self.app = make_app(self.registry, status)
        self._server: WSGIServer | None = None
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        """Base URL (``0.0.0.0``/``::`` are reached on localhost)."""
        return local_url(self.address, self.port)

    def start(self) -> "MetricsServer":
        """Bind and serve in a daemon thread; returns ``self``.

        Raises:
            ConfigError: the address cannot be bound: the message names the setting to
                change, ``OUTBOX_MONITOR_METRICS_PORT`` (``--metrics-port``) for a port in
                use or refused, else ``OUTBOX_MONITOR_METRICS_ADDRESS``
                (``--metrics-address``: a name that does not resolve, an address of
                another host).
        """
        server_class = _ThreadingServer6 if ":" in self.address else _ThreadingServer
        try:
            server = make_server(
                self.address,
                self.port,
                self.app,
                server_class=server_class,
                handler_class=_QuietHandler,
            )
        except OSError as error:
            port_fault = error.errno in (errno.EADDRINUSE, errno.EACCES)
            setting = (
                "OUTBOX_MONITOR_METRICS_PORT (--metrics-port)"
                if port_fault
                else "OUTBOX_MONITOR_METRICS_ADDRESS (--metrics-address)"
            )
            raise ConfigError(
                f"{setting}: cannot serve /metrics and /healthz on {self.address}:{self.port}: "
                f"{error.strerror or error}",
                hint="Is another process using the port? Choose another with --metrics-port "
                "(OUTBOX_MONITOR_METRICS_PORT; 0 disables the server)."
                if port_fault
                else "Choose an address of this host's interfaces with --metrics-address "
                "(OUTBOX_MONITOR_METRICS_ADDRESS): 127.0.0.1, or 0.0.0.0 (or ::) in a "
                "container.",
            ) from None
        self._server = server
        self.port = server.server_address[1]
        self._thread = serve_in_thread(server, "outbox-monitor-metrics")
        log.info("serving %s/metrics and /healthz", self.url)
        return self

    def stop(self) -> None:
        """Stop serving and close the socket (idempotent)."""
        server, self._server = self._server, None
        stop_serving(server, self._thread)

    def __enter__(self) -> "MetricsServer":
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()
