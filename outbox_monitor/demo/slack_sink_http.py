"""The local Slack sink's HTTP side: the request handler, the record kept of each request,
the replies it writes, and reading a request's body (JSON or form fields) and bearer token.

``Handler`` hands each POST to its ``SlackSink`` (``slack_sink``), which answers as Slack
does; this module knows HTTP, not Slack. Standard library only.
"""

import json
from dataclasses import dataclass, field
from datetime import datetime
from http.server import BaseHTTPRequestHandler
from typing import Any, Protocol
from urllib.parse import parse_qs, urlsplit


@dataclass(frozen=True)
class RecordedRequest:
    """One request the sink received.

    ``headers`` has the ``Authorization`` value redacted; ``body`` is the parsed JSON (or
    the form fields as a flat dict, or ``None``); ``raw`` the body text; ``at`` the
    receive time (aware UTC); ``status`` the HTTP status answered (``None`` for a hang);
    ``outcome`` is ``"posted"``, ``"updated"``, ``"ok"``, ``"error:<code>"``,
    ``"injected:<status>"`` or ``"hung"``; ``authorized`` whether the bearer token matched.
    """

    method: str
    path: str
    headers: dict[str, str]
    body: Any
    raw: str
    at: datetime
    status: int | None
    outcome: str
    authorized: bool = False


@dataclass
class Reply:
    """An answer to write: status, body, content type, extra headers, and the seconds to
    hold it before writing (``SlackSink.hold_next``)."""

    status: int
    body: bytes
    content_type: str = "application/json; charset=utf-8"
    headers: dict[str, str] = field(default_factory=dict)
    delay: float = 0.0


def json_reply(status: int, data: dict[str, Any], **headers: str) -> Reply:
    """A JSON answer (the Web API's)."""
    return Reply(status, json.dumps(data).encode(), headers=headers)


def text_reply(status: int, text: str, **headers: str) -> Reply:
    """A plain-text answer (the incoming webhooks', served as ``text/html`` like Slack)."""
    return Reply(status, text.encode(), "text/html; charset=utf-8", headers)


def parse_body(headers: dict[str, str], text: str, raw_path: str) -> Any:
    """The body as parsed JSON, or the form fields (and query string) as a flat dict, or
    ``None``."""
    content_type = next((v for k, v in headers.items() if k.lower() == "content-type"), "")
    if "json" in content_type:
        try:
            return json.loads(text)
        except ValueError:
            return None
    fields = parse_qs(text) if text else {}
    fields.update(parse_qs(urlsplit(raw_path).query))
    return {key: values[-1] for key, values in fields.items()} if fields else None


def request_token(headers: dict[str, str], body: Any) -> str:
    """The bearer token of ``Authorization``, else the body's ``token`` field, else ``""``."""
    value = next((v for k, v in headers.items() if k.lower() == "authorization"), "")
    token = value.removeprefix("Bearer ").strip() if value.startswith("Bearer ") else ""
    if not token and isinstance(body, dict):
        token = str(body.get("token") or "")
    return token


class Sink(Protocol):
    """What ``Handler`` asks of its sink (``slack_sink.SlackSink``): the messages kept, the
    answer to a request (a ``Reply``, or the seconds to hang), and the hang itself."""

    def messages(self) -> list[dict[str, Any]]: ...

    def page(self) -> str: ...

    def _handle(self, method: str, raw_path: str, headers: dict[str, str], raw: bytes) -> Any: ...

    def _stall(self, seconds: float) -> None: ...


class Handler(BaseHTTPRequestHandler):
    """Serves one request: GETs here, POSTs answered by ``sink`` (a subclass per sink)."""

    server_version = "LocalSlackSink/1.0"
    sink: Sink  # set on the subclass made per sink

    def log_message(self, format: str, *args: Any) -> None:
        """Silence the default stderr access log (paths carry webhook secrets)."""

    def do_GET(self) -> None:
        path = urlsplit(self.path).path
        if path in ("/", "/health"):
            self._send(text_reply(200, "ok"))
        elif path == "/_sink/messages":
            self._send(json_reply(200, {"ok": True, "messages": self.sink.messages()}))
        elif path == "/_sink/":
            self._send(Reply(200, self.sink.page().encode(), "text/html; charset=utf-8"))
        else:
            self._send(text_reply(404, "not_found"))

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        headers = {key: value for key, value in self.headers.items()}
        reply = self.sink._handle("POST", self.path, headers, raw)
        if isinstance(reply, float):
            self.sink._stall(reply)
            self.close_connection = True
            return
        if reply.delay:
            self.sink._stall(reply.delay)
        self._send(reply)

    def _send(self, reply: Reply) -> None:
        try:
            self.send_response(reply.status)
            self.send_header("Content-Type", reply.content_type)
            self.send_header("Content-Length", str(len(reply.body)))
            for name, value in reply.headers.items():
                self.send_header(name, value)
            self.end_headers()
            self.wfile.write(reply.body)
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True
