"""A local Slack-compatible HTTP server (webhooks, chat.postMessage/update) for tests and the demo.

``SlackSink`` listens on 127.0.0.1 and answers like Slack does for what the sender uses:

- incoming webhooks: ``POST /services/T…/B…/…`` → ``200 ok``; errors as plain-text bodies
  (``400 invalid_payload``, ``400 invalid_blocks``, ``404 no_service``, ``429`` with
  ``Retry-After``, ``500``);
- the Web API under ``/api/``: ``chat.postMessage`` (also replies, with ``thread_ts``),
  ``chat.update`` and ``auth.test``, checking the bearer token (``not_authed`` /
  ``invalid_auth`` with HTTP 200 and ``"ok": false``, as Slack does);
- ``GET /`` (health, ``ok``) and ``GET /_sink/messages`` (what was posted, as JSON).

It checks the Block Kit limits the renderer must respect (≤ 50 blocks, header ≤ 150 chars,
section text ≤ 3000, button url ≤ 3000, text ≤ 40,000) and refuses a message that breaks
them like Slack (``invalid_blocks`` / ``msg_too_long``). Tests can make it misbehave:
``fail_next``, ``hang_next``, ``down``/``up``. Standard library only.

Run it alone with ``python -m outbox_monitor.demo.slack_sink --port 3210``.
"""

import argparse
import hashlib
import json
import re
import signal
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

DEFAULT_TOKEN = "xoxb-local-sink-token"
"""The bot token the sink accepts unless told otherwise."""
TEAM_ID = "T000"
BOT_USER_ID = "U000"
BOT_ID = "B000"
WEBHOOK_PATH = "/services/T000/B000/XXX"
DEFAULT_RETRY_AFTER_SECONDS = 30

MAX_BLOCKS = 50
MAX_HEADER_CHARS = 150
MAX_SECTION_CHARS = 3000
MAX_FIELD_CHARS = 2000
MAX_CONTEXT_ELEMENTS = 10
MAX_ACTION_ELEMENTS = 25
MAX_BUTTON_TEXT_CHARS = 75
MAX_URL_CHARS = 3000
MAX_ACTION_ID_CHARS = 255
MAX_TEXT_CHARS = 40_000
KNOWN_BLOCK_TYPES = {"header", "section", "context", "actions", "divider", "image", "rich_text"}

_WEBHOOK = re.compile(r"^/services/(T[A-Za-z0-9]+)/(B[A-Za-z0-9]+)/([A-Za-z0-9_-]+)$")
_CHANNEL_ID = re.compile(r"^[CGD][A-Z0-9]{6,}$")
_ERROR_CODES = {400: "invalid_payload", 403: "invalid_token", 404: "no_service", 410: "gone"}


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
class _Fault:
    kind: str  # "fail" | "hang"
    status: int = 500
    retry_after: float | str | None = None
    error: str | None = None
    seconds: float = 0.0


@dataclass
class _Reply:
    status: int
    body: bytes
    content_type: str = "application/json; charset=utf-8"
    headers: dict[str, str] = field(default_factory=dict)


def _json_reply(status: int, data: dict[str, Any], **headers: str) -> _Reply:
    return _Reply(status, json.dumps(data).encode(), headers=headers)


def _text_reply(status: int, text: str, **headers: str) -> _Reply:
    return _Reply(status, text.encode(), "text/html; charset=utf-8", headers)


def _text_length(text_object: Any) -> int:
    if isinstance(text_object, dict):
        return len(str(text_object.get("text", "")))
    return len(str(text_object or ""))


def check_blocks(blocks: Any) -> str | None:
    """Check Block Kit blocks against the Slack limits the renderer must respect.

    Args:
        blocks: the ``blocks`` value of a message (``None`` means no blocks).

    Returns:
        ``None`` when valid, else a short reason (``"header text over 150 chars"``).
    """
    if blocks is None:
        return None
    if not isinstance(blocks, list):
        return "blocks is not a list"
    if len(blocks) > MAX_BLOCKS:
        return f"{len(blocks)} blocks (over {MAX_BLOCKS})"
    action_ids: set[str] = set()
    for index, block in enumerate(blocks):
        if not isinstance(block, dict) or block.get("type") not in KNOWN_BLOCK_TYPES:
            return f"blocks[{index}]: unknown block"
        kind = block["type"]
        elements: list[Any] = []
        if kind == "header" and _text_length(block.get("text")) > MAX_HEADER_CHARS:
            return f"blocks[{index}]: header text over {MAX_HEADER_CHARS} chars"
        if kind == "section":
            if _text_length(block.get("text")) > MAX_SECTION_CHARS:
                return f"blocks[{index}]: section text over {MAX_SECTION_CHARS} chars"
            if any(_text_length(f) > MAX_FIELD_CHARS for f in block.get("fields") or []):
                return f"blocks[{index}]: a field over {MAX_FIELD_CHARS} chars"
            if block.get("accessory"):
                elements = [block["accessory"]]
        if kind == "context":
            elements = block.get("elements") or []
            if len(elements) > MAX_CONTEXT_ELEMENTS:
                return f"blocks[{index}]: over {MAX_CONTEXT_ELEMENTS} context elements"
            if any(_text_length(e) > MAX_SECTION_CHARS for e in elements):
                return f"blocks[{index}]: context text over {MAX_SECTION_CHARS} chars"
        if kind == "actions":
            elements = block.get("elements") or []
            if len(elements) > MAX_ACTION_ELEMENTS:
                return f"blocks[{index}]: over {MAX_ACTION_ELEMENTS} actions"
        for element in elements:
            if not isinstance(element, dict) or element.get("type") != "button":
                continue
            if _text_length(element.get("text")) > MAX_BUTTON_TEXT_CHARS:
                return f"blocks[{index}]: button text over {MAX_BUTTON_TEXT_CHARS} chars"
            if len(str(element.get("url", ""))) > MAX_URL_CHARS:
                return f"blocks[{index}]: button url over {MAX_URL_CHARS} chars"
            action_id = str(element.get("action_id", ""))
            if len(action_id) > MAX_ACTION_ID_CHARS or (action_id and action_id in action_ids):
                return f"blocks[{index}]: action_id too long or not unique"
            action_ids.add(action_id)
    return None


def _channel_id(channel: str) -> str:
    if _CHANNEL_ID.match(channel):
        return channel
    digest = hashlib.sha1(channel.lstrip("#").encode()).hexdigest()[:10].upper()
    return f"C{digest}"


class _Handler(BaseHTTPRequestHandler):
    server_version = "LocalSlackSink/1.0"
    sink: "SlackSink"  # set on the subclass made per sink

    def log_message(self, format: str, *args: Any) -> None:
        """Silence the default stderr access log (paths carry webhook secrets)."""

    def do_GET(self) -> None:
        path = urlsplit(self.path).path
        if path in ("/", "/health"):
            self._send(_text_reply(200, "ok"))
        elif path == "/_sink/messages":
            self._send(_json_reply(200, {"ok": True, "messages": self.sink.messages()}))
        else:
            self._send(_text_reply(404, "not_found"))

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        headers = {key: value for key, value in self.headers.items()}
        reply = self.sink._handle("POST", self.path, headers, raw)
        if isinstance(reply, float):
            self.sink._stall(reply)
            self.close_connection = True
            return
        self._send(reply)

    def _send(self, reply: _Reply) -> None:
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


class SlackSink:
    """A Slack-compatible HTTP server on 127.0.0.1, in a background thread.

    Args:
        port: TCP port, 0 for a free one (the chosen port is kept across ``down``/``up``).
        token: the bot token ``/api/`` methods require (``Authorization: Bearer …``).
        channels: channel names or ids that exist; ``None`` accepts any channel, else
            others get ``channel_not_found``.
        host: the address to bind (default 127.0.0.1).

    Use as a context manager, or ``start()`` / ``stop()``. Thread-safe.
    """

    def __init__(
        self,
        port: int = 0,
        *,
        token: str = DEFAULT_TOKEN,
        channels: list[str] | None = None,
        host: str = "127.0.0.1",
    ) -> None:
        self.host = host
        self.port = port
        self.token = token
        self.channels = None if channels is None else {_channel_id(c) for c in channels}
        self._lock = threading.Lock()
        self._requests: list[RecordedRequest] = []
        self._messages: list[dict[str, Any]] = []
        self._faults: deque[_Fault] = deque()
        self._last_ts = 0.0
        self._stopping = threading.Event()
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    # ------------------------------------------------------------------ lifecycle

    def start(self) -> "SlackSink":
        """Bind and serve in a daemon thread; returns ``self``."""
        self._stopping.clear()
        self._serve()
        return self

    def stop(self) -> None:
        """Stop serving, release the port and wake any hung request."""
        self._stopping.set()
        self._shutdown()

    def __enter__(self) -> "SlackSink":
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    def down(self) -> None:
        """Close the listening socket: new connections are refused until ``up()``."""
        self._shutdown()

    def up(self) -> None:
        """Listen again on the same port after ``down()``."""
        if self._server is None:
            self._serve()

    @property
    def is_up(self) -> bool:
        """Whether the sink currently accepts connections."""
        return self._server is not None

    def _serve(self) -> None:
        handler = type("SinkHandler", (_Handler,), {"sink": self})
        server = ThreadingHTTPServer((self.host, self.port), handler)
        server.daemon_threads = True
        self.port = server.server_address[1]
        thread = threading.Thread(
            target=server.serve_forever,
            kwargs={"poll_interval": 0.05},
            name=f"slack-sink-{self.port}",
            daemon=True,
        )
        self._server, self._thread = server, thread
        thread.start()

    def _shutdown(self) -> None:
        server, self._server = self._server, None
        if server is not None:
            server.shutdown()
            server.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None

    # ------------------------------------------------------------------ addresses

    @property
    def url(self) -> str:
        """Base URL, ``http://127.0.0.1:PORT``."""
        return f"http://{self.host}:{self.port}"

    @property
    def webhook_url(self) -> str:
        """An incoming-webhook URL the sink accepts."""
        return self.url + WEBHOOK_PATH

    @property
    def api_url(self) -> str:
        """The Web API base for ``WebClient(base_url=...)``; ends with ``/api/``."""
        return self.url + "/api/"

    # ------------------------------------------------------------------ test controls

    def fail_next(
        self,
        n: int = 1,
        *,
        status: int = 429,
        retry_after: float | str | None = None,
        error: str | None = None,
    ) -> None:
        """Make the next ``n`` POSTs fail without posting anything.

        Args:
            n: how many requests fail.
            status: HTTP status (429, 500, 503, 400, …; 200 gives ``"ok": false`` on the
                Web API, e.g. with ``error="channel_not_found"``).
            retry_after: seconds for the ``Retry-After`` header (429 defaults to 30); a
                string is sent as it is (a malformed header, for tests).
            error: the Slack error code in the body (default per status).
        """
        with self._lock:
            for _ in range(n):
                self._faults.append(_Fault("fail", status, retry_after, error))

    def hang_next(self, n: int = 1, seconds: float = 5.0) -> None:
        """Make the next ``n`` POSTs stall ``seconds`` then close without an answer.

        The request is read (and recorded with outcome ``"hung"``) but nothing is
        posted, as when Slack times out before processing it.
        """
        with self._lock:
            for _ in range(n):
                self._faults.append(_Fault("hang", seconds=seconds))

    def reset(self) -> None:
        """Forget recorded requests, messages and pending faults."""
        with self._lock:
            self._requests.clear()
            self._messages.clear()
            self._faults.clear()

    # ------------------------------------------------------------------ what was received

    @property
    def requests(self) -> list[RecordedRequest]:
        """Every request received so far, in arrival order (a copy)."""
        with self._lock:
            return list(self._requests)

    def messages(self) -> list[dict[str, Any]]:
        """The messages posted so far, in order, with updates applied (copies).

        Returns:
            ``[{"channel", "ts", "thread_ts", "text", "blocks", "via": "webhook"|"api",
            "posted_at": iso, "edits": int}, ...]``; replies are messages with
            ``thread_ts`` set to their parent's ``ts``.
        """
        with self._lock:
            return json.loads(json.dumps(self._messages))

    # ------------------------------------------------------------------ request handling

    def _stall(self, seconds: float) -> None:
        self._stopping.wait(seconds)

    def _record(self, request: RecordedRequest) -> None:
        with self._lock:
            self._requests.append(request)

    def _next_ts(self) -> str:
        with self._lock:
            now = max(time.time(), self._last_ts + 0.000001)
            self._last_ts = now
            return f"{now:.6f}"

    def _handle(
        self, method: str, raw_path: str, headers: dict[str, str], raw: bytes
    ) -> _Reply | float:
        path = urlsplit(raw_path).path
        text = raw.decode("utf-8", errors="replace")
        body = self._parse_body(headers, text, raw_path)
        token = self._token(headers, body)
        authorized = bool(token) and token == self.token
        safe_headers = {
            k: ("Bearer <redacted>" if k.lower() == "authorization" else v)
            for k, v in headers.items()
        }

        def record(status: int | None, outcome: str) -> None:
            self._record(
                RecordedRequest(
                    method=method,
                    path=path,
                    headers=safe_headers,
                    body=body,
                    raw=text,
                    at=datetime.now(UTC),
                    status=status,
                    outcome=outcome,
                    authorized=authorized,
                )
            )

        with self._lock:
            fault = self._faults.popleft() if self._faults else None
        is_webhook = bool(_WEBHOOK.match(path))
        if fault is not None and fault.kind == "hang":
            record(None, "hung")
            return float(fault.seconds)
        if fault is not None:
            reply = self._fault_reply(fault, is_webhook)
            record(reply.status, f"injected:{fault.status}")
            return reply
        if is_webhook:
            reply, outcome = self._webhook(path, body)
        elif path.startswith("/api/"):
            reply, outcome = self._web_api(path.removeprefix("/api/"), body, token)
        elif path.startswith("/services/"):
            reply, outcome = _text_reply(404, "no_service"), "error:no_service"
        else:
            reply, outcome = _text_reply(404, "not_found"), "error:not_found"
        record(reply.status, outcome)
        return reply

    @staticmethod
    def _parse_body(headers: dict[str, str], text: str, raw_path: str) -> Any:
        content_type = next((v for k, v in headers.items() if k.lower() == "content-type"), "")
        if "json" in content_type:
            try:
                return json.loads(text)
            except ValueError:
                return None
        fields = parse_qs(text) if text else {}
        fields.update(parse_qs(urlsplit(raw_path).query))
        return {key: values[-1] for key, values in fields.items()} if fields else None

    @staticmethod
    def _token(headers: dict[str, str], body: Any) -> str:
        value = next((v for k, v in headers.items() if k.lower() == "authorization"), "")
        token = value.removeprefix("Bearer ").strip() if value.startswith("Bearer ") else ""
        if not token and isinstance(body, dict):
            token = str(body.get("token") or "")
        return token

    @staticmethod
    def _fault_reply(fault: _Fault, is_webhook: bool) -> _Reply:
        headers: dict[str, str] = {}
        if fault.status == 429:
            retry_after = (
                DEFAULT_RETRY_AFTER_SECONDS if fault.retry_after is None else fault.retry_after
            )
            headers["Retry-After"] = (
                retry_after if isinstance(retry_after, str) else f"{retry_after:g}"
            )
        default_code = (
            "rate_limited"
            if fault.status == 429
            else "internal_error"
            if fault.status >= 500
            else _ERROR_CODES.get(fault.status, "invalid_arguments")
        )
        code = fault.error or default_code
        if is_webhook:
            return _text_reply(fault.status, code, **headers)
        if fault.status == 429:
            code = fault.error or "ratelimited"
        elif 400 <= fault.status < 500:
            code = fault.error or "invalid_arguments"
        return _json_reply(fault.status, {"ok": False, "error": code}, **headers)

    def _webhook(self, path: str, body: Any) -> tuple[_Reply, str]:
        if not isinstance(body, dict):
            return _text_reply(400, "invalid_payload"), "error:invalid_payload"
        problem = self._message_problem(body)
        if problem:
            return _text_reply(400, problem), f"error:{problem}"
        hook = _WEBHOOK.match(path)
        assert hook is not None
        self._post(body, channel=f"webhook:{hook.group(2)}", via="webhook")
        return _text_reply(200, "ok"), "posted"

    @staticmethod
    def _message_problem(body: dict[str, Any]) -> str | None:
        text, blocks = body.get("text"), body.get("blocks")
        if isinstance(blocks, str):
            try:
                blocks = body["blocks"] = json.loads(blocks)
            except ValueError:
                return "invalid_blocks_format"
        if not text and not blocks:
            return "no_text"
        if text is not None and len(str(text)) > MAX_TEXT_CHARS:
            return "msg_too_long"
        if check_blocks(blocks):
            return "invalid_blocks"
        return None

    def _post(self, body: dict[str, Any], *, channel: str, via: str) -> dict[str, Any]:
        ts = self._next_ts()
        message = {
            "type": "message",
            "channel": channel,
            "ts": ts,
            "thread_ts": body.get("thread_ts"),
            "text": body.get("text") or "",
            "blocks": body.get("blocks") or [],
            "via": via,
            "posted_at": datetime.now(UTC).isoformat(),
            "edits": 0,
        }
        with self._lock:
            self._messages.append(message)
        return message

    def _web_api(self, method: str, body: Any, token: str) -> tuple[_Reply, str]:
        body = body if isinstance(body, dict) else {}
        if method not in ("auth.test", "chat.postMessage", "chat.update"):
            return _json_reply(404, {"ok": False, "error": "unknown_method"}), "error:unknown"
        if token != self.token:
            code = "invalid_auth" if token else "not_authed"
            return _json_reply(200, {"ok": False, "error": code}), f"error:{code}"
        if method == "auth.test":
            data = {
                "ok": True,
                "url": "https://local-sink.slack.com/",
                "team": "Local Slack sink",
                "user": "outbox-monitor",
                "team_id": TEAM_ID,
                "user_id": BOT_USER_ID,
                "bot_id": BOT_ID,
            }
            return _json_reply(200, data), "ok"
        channel = str(body.get("channel") or "")
        channel_id = _channel_id(channel) if channel else ""
        if not channel or (self.channels is not None and channel_id not in self.channels):
            return _json_reply(200, {"ok": False, "error": "channel_not_found"}), (
                "error:channel_not_found"
            )
        problem = self._message_problem(body)
        if problem:
            return _json_reply(200, {"ok": False, "error": problem}), f"error:{problem}"
        if method == "chat.postMessage":
            message = self._post(body, channel=channel_id, via="api")
            data = {"ok": True, "channel": channel_id, "ts": message["ts"], "message": message}
            return _json_reply(200, data), "posted"
        return self._update(channel_id, str(body.get("ts") or ""), body)

    def _update(self, channel_id: str, ts: str, body: dict[str, Any]) -> tuple[_Reply, str]:
        with self._lock:
            message = next(
                (m for m in self._messages if m["channel"] == channel_id and m["ts"] == ts), None
            )
            if message is None:
                return _json_reply(200, {"ok": False, "error": "message_not_found"}), (
                    "error:message_not_found"
                )
            message["text"] = body.get("text") or ""
            message["blocks"] = body.get("blocks") or []
            message["edits"] += 1
            snapshot = json.loads(json.dumps(message))
        data = {
            "ok": True,
            "channel": channel_id,
            "ts": ts,
            "text": snapshot["text"],
            "message": snapshot,
        }
        return _json_reply(200, data), "updated"


def main(argv: list[str] | None = None) -> None:
    """Serve a sink until interrupted: ``python -m outbox_monitor.demo.slack_sink --port N``."""
    parser = argparse.ArgumentParser(description="Local Slack-compatible sink for outbox-monitor")
    parser.add_argument("--port", type=int, default=3210, help="TCP port (0: any free port)")
    parser.add_argument("--host", default="127.0.0.1", help="address to bind")
    parser.add_argument("--token", default=DEFAULT_TOKEN, help="bot token to accept")
    args = parser.parse_args(argv)
    sink = SlackSink(args.port, token=args.token, host=args.host).start()
    print(f"Local Slack sink on {sink.url}", flush=True)
    print(f"  SLACK_WEBHOOK_URL={sink.webhook_url}", flush=True)
    print(f"  SLACK_API_URL={sink.api_url}  (token: {args.token})", flush=True)
    print(f"  posted messages: {sink.url}/_sink/messages", flush=True)
    done = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: done.set())
    try:
        done.wait()
    except KeyboardInterrupt:
        pass
    finally:
        sink.stop()


if __name__ == "__main__":
    main()
