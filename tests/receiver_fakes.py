"""Local receivers on 127.0.0.1 that speak PagerDuty's Events API v2 and the signed webhook's
documented contract, for the receiver tests (standard library only; nothing mocked: the
product talks HTTP to them).

``FakeReceiver`` records every request and can misbehave on demand: ``fail_next`` (a status
and body), ``hang_next`` (read the request, answer nothing until the client gave up),
``hold_next`` (take it, answer late),
``stop``/``start`` (nothing listening on its port). ``FakePagerDuty`` checks each event as
PagerDuty does (400 with ``errors`` for an invalid one) and keeps incidents by
``dedup_key``; ``FakeWebhook`` verifies each request with the Python snippet of
docs/receivers.md ("Verifying a request"), executed as the page prints it.
"""

import json
import re
import socket
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from outbox_monitor.demo.slack_sink import held_port

DOCS = Path(__file__).resolve().parents[1] / "docs" / "receivers.md"
SEVERITIES = ("critical", "error", "warning", "info")
ROUTING_KEY = "R0UT1NGKEY0123456789abcdef012345"
"""The routing key of the ``pagerduty`` fixture (tests/conftest.py)."""
SECRET = "whsec-0123456789-SeCrEt"
"""The signing secret of the ``webhook`` fixture (tests/conftest.py)."""


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


class FakePagerDuty(FakeReceiver):
    """``POST /v2/enqueue`` as PagerDuty's Events API v2 answers it; ``incidents`` by
    ``dedup_key``: ``{"status": "triggered"|"acknowledged"|"resolved", "triggers": n,
    "summary": …}``."""

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


def verifier_from_docs() -> dict[str, Any]:
    """The namespace of docs/receivers.md's verification snippet (``verify``, ``SEEN``), run as
    the page prints it."""
    text = DOCS.read_text()
    block = re.search(r"<!-- verify-snippet -->\s*```python\n(.*?)```", text, re.S)
    assert block, "docs/receivers.md lost its verification snippet"
    namespace: dict[str, Any] = {}
    exec(block.group(1), namespace)  # the docs' own code, in a test
    return namespace


class FakeWebhook(FakeReceiver):
    """A receiver of the signed webhook that verifies each request with the docs' snippet:
    401 for a bad signature or an old timestamp, 200 and dropped for a message id it took
    already; ``taken`` holds the bodies it took, in order."""

    def __init__(self, secret: str) -> None:
        self.secret = secret
        self.verifier = verifier_from_docs()
        self.taken: list[dict[str, Any]] = []
        super().__init__()

    def answer(self, request: Request, headers: Any) -> tuple[int, str, dict[str, str]]:
        try:
            fresh = self.verifier["verify"](self.secret, headers, request.raw)
        except PermissionError as error:
            request.outcome = f"refused: {error}"
            return 401, json.dumps({"ok": False, "error": str(error)}), {}
        if not fresh:
            request.outcome = "repeat dropped"
            return 200, json.dumps({"ok": True}), {}
        request.outcome = "taken"
        self.taken.append(request.body)
        return 200, json.dumps({"ok": True}), {}


def receiver_env(pagerduty: FakePagerDuty, webhook: FakeWebhook, slack_sink: Any) -> dict[str, str]:
    """The variables of the receiver tests' routes: ``pd`` (``PD_ROUTING_KEY``,
    ``PD_EVENTS_URL``), ``hook`` (``HOOK_URL``, ``HOOK_SECRET``) and a Slack incoming
    webhook of the sink (``TEST_SLACK_URL``)."""
    return {
        "PD_ROUTING_KEY": ROUTING_KEY,
        "PD_EVENTS_URL": pagerduty.url,
        "HOOK_URL": f"{webhook.url}/alerts",
        "HOOK_SECRET": SECRET,
        "TEST_SLACK_URL": f"{slack_sink.url}/services/T0/B0/hooksecret0123",
    }
