"""Local receivers on 127.0.0.1 that speak PagerDuty's Events API v2, for the demo (its
drill: ``demo.drill``) and the receiver tests (standard library only; nothing mocked: the
product talks HTTP to them; tests/receiver_fakes.py adds the signed webhook's).

``FakeReceiver`` records every request and can misbehave on demand: ``fail_next`` (a status
and body), ``hang_next`` (read the request, answer nothing until the client gave up),
``hold_next`` (take it, answer late),
``stop``/``start`` (nothing listening on its port); a ``GET`` is answered by its ``page``.
``FakePagerDuty`` checks each event as PagerDuty does (400 with ``errors`` for an invalid
one), keeps incidents by ``dedup_key`` and shows them: ``GET /`` a page a person reads,
``GET /incidents`` the same as JSON, each incident with its events and when they came.
"""

import html
import json
import socket
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from outbox_monitor.demo.slack_sink import held_port

SEVERITIES = ("critical", "error", "warning", "info")


@dataclass
class Request:
    """One request received: its path, headers, raw body, parsed JSON, the status answered
    (``None``: hung), what the fake made of it (``outcome``) and when it came (``at``, Unix
    seconds)."""

    path: str
    headers: dict[str, str]
    raw: bytes
    body: Any
    status: int | None = None
    outcome: str = ""
    at: float = field(default_factory=time.time)


@dataclass
class Fault:
    kind: str  # "status", "hang" or "hold"
    status: int = 500
    body: str = ""
    headers: dict[str, str] = field(default_factory=dict)
    seconds: float = 0.0


class FakeReceiver:
    """An HTTP server on 127.0.0.1 (a free port, kept across ``stop``/``start``)."""

    def __init__(self) -> None:
        self.requests: list[Request] = []
        self._faults: deque[Fault] = deque()
        self._lock = threading.Lock()
        self._release = threading.Event()
        self._server: ThreadingHTTPServer | None = None
        self.port = 0
        self._held: socket.socket | None = None
        self.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> None:
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                try:
                    body = json.loads(raw)
                except ValueError:
                    body = None
                request = Request(self.path, dict(self.headers.items()), raw, body)
                with owner._lock:
                    owner.requests.append(request)
                    fault = owner._faults.popleft() if owner._faults else None
                if fault is not None and fault.kind == "hang":
                    request.outcome = "hung"
                    owner._release.wait(30)
                    self.close_connection = True
                    return
                if fault is not None and fault.kind == "hold":
                    status, text, headers = owner.answer(request, self.headers)
                    owner._release.wait(fault.seconds)  # taken, but not answered yet
                elif fault is not None:
                    status, text, headers = fault.status, fault.body, fault.headers
                    request.outcome = f"injected:{status}"
                else:
                    status, text, headers = owner.answer(request, self.headers)
                request.status = status
                data = text.encode()
                try:
                    self.send_response(status)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(data)))
                    for name, value in headers.items():
                        self.send_header(name, value)
                    self.end_headers()
                    self.wfile.write(data)
                except OSError:  # the client is gone (killed while an answer was held)
                    self.close_connection = True

            def do_GET(self) -> None:
                status, content_type, data = owner.page(self.path)
                self.send_response(status)
                self.send_header("Content-Type", content_type)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args: Any) -> None:
                pass

        self._release_port()
        self._server = ThreadingHTTPServer(("127.0.0.1", self.port), Handler)
        self._server.daemon_threads = True
        self.port = self._server.server_address[1]
        threading.Thread(target=self._server.serve_forever, daemon=True).start()

    def stop(self) -> None:
        """Nothing listens on the port any more (connection refused) until ``start``; the
        port stays held (``slack_sink.held_port``) so no other server takes it meanwhile."""
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
            self._held = held_port("127.0.0.1", self.port)

    def close(self) -> None:
        self._release.set()
        self.stop()
        self._release_port()

    def _release_port(self) -> None:
        held, self._held = self._held, None
        if held is not None:
            held.close()

    def fail_next(self, n: int = 1, status: int = 500, body: str = "", **headers: str) -> None:
        with self._lock:
            self._faults.extend(Fault("status", status, body, headers) for _ in range(n))

    def hang_next(self, n: int = 1) -> None:
        with self._lock:
            self._faults.extend(Fault("hang") for _ in range(n))

    def hold_next(self, seconds: float) -> None:
        """The next request is taken (as without a fault) but answered only after ``seconds``
        (or at ``close``): a client killed meanwhile never hears that it was."""
        with self._lock:
            self._faults.append(Fault("hold", seconds=seconds))

    def answer(self, request: Request, headers: Any) -> tuple[int, str, dict[str, str]]:
        raise NotImplementedError

    def page(self, path: str) -> tuple[int, str, bytes]:
        """Answer a ``GET`` of ``path``: (HTTP status, content type, body); 404 unless a
        receiver shows something."""
        return 404, "text/plain; charset=utf-8", b"not found\n"


class FakePagerDuty(FakeReceiver):
    """``POST /v2/enqueue`` as PagerDuty's Events API v2 answers it; ``incidents`` by
    ``dedup_key``: ``{"status": "triggered"|"acknowledged"|"resolved", "triggers": n,
    "summary": …}``; ``GET /incidents`` and ``GET /`` show them (``incidents_shown``)."""

    def __init__(self, routing_key: str) -> None:
        self.routing_key = routing_key
        self.incidents: dict[str, dict[str, Any]] = {}
        super().__init__()

    def answer(self, request: Request, headers: Any) -> tuple[int, str, dict[str, str]]:
        event = request.body
        errors = _event_errors(request.path, event, self.routing_key)
        if errors:
            request.outcome = "invalid"
            return 400, json.dumps({"status": "invalid event", "errors": errors}), {}
        key = event["dedup_key"]
        incident = self.incidents.get(key)
        if event["event_action"] == "trigger":
            if incident is None or incident["status"] == "resolved":
                self.incidents[key] = incident = {"status": "triggered", "triggers": 0}
            incident["triggers"] += 1
            incident["summary"] = event["payload"]["summary"]
            request.outcome = "triggered" if incident["triggers"] == 1 else "deduplicated"
        elif incident is not None:
            action = event["event_action"]
            incident["status"] = "resolved" if action == "resolve" else "acknowledged"
            request.outcome = incident["status"]
        else:
            request.outcome = f"{event['event_action']} of no incident"
        return (
            202,
            json.dumps({"status": "success", "message": "Event processed", "dedup_key": key}),
            {},
        )

    def incidents_shown(self) -> dict[str, dict[str, Any]]:
        """Each incident by ``dedup_key`` with its ``events``: every accepted event of the key,
        in order, ``{"action": "trigger"|"acknowledge"|"resolve", "outcome", "at": ISO 8601
        UTC}`` (what a person sees on the fake's page)."""
        with self._lock:
            shown = {key: dict(incident, events=[]) for key, incident in self.incidents.items()}
            taken = [r for r in self.requests if r.status == 202]
        for request in taken:
            incident = shown.get(request.body["dedup_key"])
            if incident is not None:
                incident["events"].append(
                    {
                        "action": request.body["event_action"],
                        "outcome": request.outcome,
                        "at": datetime.fromtimestamp(request.at, UTC).isoformat(),
                    }
                )
        return shown

    def page(self, path: str) -> tuple[int, str, bytes]:
        """``/incidents``: ``incidents_shown`` as JSON; ``/``: the same as an HTML table."""
        shown = self.incidents_shown()
        if path == "/incidents":
            return 200, "application/json", json.dumps({"incidents": shown}).encode()
        if path != "/":
            return super().page(path)
        rows = "".join(
            "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>".format(
                *map(
                    html.escape,
                    (
                        key,
                        incident["status"],
                        incident.get("summary", ""),
                        ", ".join(f"{e['action']} {e['at'][11:19]}" for e in incident["events"]),
                    ),
                )
            )
            for key, incident in shown.items()
        )
        text = (
            "<!doctype html><title>PagerDuty (demo)</title><meta http-equiv=refresh content=5>"
            "<h1>Incidents of the demo's PagerDuty (Events API v2 fake)</h1>"
            "<table border=1 cellpadding=4><tr><th>dedup_key</th><th>status</th><th>summary</th>"
            f"<th>events (UTC)</th></tr>{rows or '<tr><td colspan=4>none yet</td></tr>'}</table>"
        )
        return 200, "text/html; charset=utf-8", text.encode()


def _event_errors(path: str, event: Any, routing_key: str) -> list[str]:
    """What PagerDuty would refuse in an event (its 400's ``errors``)."""
    if path != "/v2/enqueue":
        return [f"unknown path {path}"]
    if not isinstance(event, dict):
        return ["Event object is invalid"]
    errors = []
    if event.get("routing_key") != routing_key:
        errors.append("'routing_key' is invalid")
    if event.get("event_action") not in ("trigger", "acknowledge", "resolve"):
        errors.append("'event_action' is invalid")
    key = event.get("dedup_key")
    if not isinstance(key, str) or not 0 < len(key) <= 255:
        errors.append("'dedup_key' must be 1 to 255 characters")
    if event.get("event_action") == "trigger":
        payload = event.get("payload") or {}
        if not payload.get("summary") or len(payload["summary"]) > 1024:
            errors.append("'payload.summary' is missing or longer than 1024")
        if not payload.get("source"):
            errors.append("'payload.source' is missing")
        if payload.get("severity") not in SEVERITIES:
            errors.append("'payload.severity' is invalid")
    return errors
