"""A local Slack-compatible HTTP server (webhooks, chat.postMessage/update) for tests and the demo.

``SlackSink`` listens on 127.0.0.1 and answers like Slack does for what the sender uses:

- incoming webhooks: ``POST /services/T…/B…/…`` → ``200 ok``; errors as plain-text bodies
  (``400 invalid_payload``, ``400 invalid_blocks``, ``404 no_service``, ``429`` with
  ``Retry-After``, ``500``);
- the Web API under ``/api/``: ``chat.postMessage`` (also replies, with ``thread_ts``),
  ``chat.update`` and ``auth.test``, checking the bearer token (``not_authed`` /
  ``invalid_auth`` with HTTP 200 and ``"ok": false``, as Slack does);
- ``GET /`` (health, ``ok``) and ``GET /_sink/messages`` (what was posted, as JSON, each
  message with its ``versions``: the text of each post and edit, and when);
- pressing a button as Slack does, once told where (``accept_presses``: the listener's URL,
  the app's signing secret, the team and user who press): ``POST /_sink/press`` (JSON or form
  fields ``action`` — ``acknowledge``, ``silence-1h``, ``pause-1h`` — and optional ``ts``, the
  message; default the newest with that button) signs a ``block_actions`` payload and posts it
  to the listener (``slack_presses``), its ``response_url`` the sink's webhook; ``GET
  /_sink/`` lists the messages with their buttons as forms that do so (a page to click).

It checks the Block Kit limits the renderer must respect (``slack_limits``: ≤ 50 blocks,
header ≤ 150 chars, section text ≤ 3000, button url ≤ 3000, text ≤ 40,000) and refuses a
message that breaks them like Slack (``invalid_blocks`` / ``msg_too_long``). Tests can make
it misbehave: ``fail_next``, ``hang_next``, ``hold_next`` (``slack_sink_faults``),
``down``/``up``. Its HTTP side is ``slack_sink_http``. Standard library only.

Run it alone with ``python -m outbox_monitor.demo.slack_sink --port 3210``.
"""

import argparse
import hashlib
import html
import json
import re
import signal
import socket
import threading
import time
from collections import deque
from dataclasses import dataclass
from datetime import UTC, datetime
from http.server import ThreadingHTTPServer
from typing import Any
from urllib.parse import urlsplit

from outbox_monitor.demo.slack_limits import message_problem
from outbox_monitor.demo.slack_presses import post_signed, press_body
from outbox_monitor.demo.slack_sink_faults import Fault, fault_reply
from outbox_monitor.demo.slack_sink_http import (
    Handler,
    RecordedRequest,
    Reply,
    json_reply,
    parse_body,
    request_token,
    text_reply,
)

DEFAULT_TOKEN = "xoxb-local-sink-token"
"""The bot token the sink accepts unless told otherwise."""
TEAM_ID = "T000"
BOT_USER_ID = "U000"
BOT_ID = "B000"
WEBHOOK_PATH = "/services/T000/B000/XXX"
PRESS_PATH = "/_sink/press"
PAGE_PATH = "/_sink/"
ACTION_PREFIX = "outbox-monitor:"
"""The ``action_id`` prefix of outbox-monitor's buttons (``alerts.message.ACTION_PREFIX``)."""

_WEBHOOK = re.compile(r"^/services/(T[A-Za-z0-9]+)/(B[A-Za-z0-9]+)/([A-Za-z0-9_-]+)$")
_CHANNEL_ID = re.compile(r"^[CGD][A-Z0-9]{6,}$")


@dataclass(frozen=True)
class PressTarget:
    """Where the sink's presses go: the listener's URL, the app's signing secret, and the
    Slack team and user who press (``SlackSink.accept_presses``)."""

    url: str
    secret: str
    team: str
    user: str


def _channel_id(channel: str) -> str:
    if _CHANNEL_ID.match(channel):
        return channel
    digest = hashlib.sha1(channel.lstrip("#").encode()).hexdigest()[:10].upper()
    return f"C{digest}"


def held_port(host: str, port: int) -> socket.socket:
    """A TCP socket bound to ``(host, port)`` that does not listen: the kernel refuses every
    connection to the port (as to a stopped server) and no other socket may bind it until
    this one is closed. A fake server that goes "down" holds its port with it.

    Raises:
        OSError: the port is bound already.
    """
    held = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    held.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        held.bind((host, port))
    except OSError:
        held.close()
        raise
    return held


def _version(message: dict[str, Any], at: str) -> dict[str, Any]:
    """One version of a message, kept in its ``versions``: when, its text and its first
    block's text (a card's header: FIRING, ACKED, RESOLVED)."""
    blocks = message["blocks"]
    header = blocks[0].get("text", {}).get("text", "") if blocks else ""
    return {"at": at, "text": message["text"], "header": header}


def _buttons(message: dict[str, Any]) -> list[tuple[str, str, str]]:
    """A message's buttons of outbox-monitor: (action, label, action_id) each."""
    return [
        (
            action_id.removeprefix(ACTION_PREFIX).split(":")[0],
            str(element.get("text", {}).get("text", "")),
            action_id,
        )
        for block in message["blocks"]
        if block.get("type") == "actions"
        for element in block.get("elements", [])
        for action_id in [str(element.get("action_id", ""))]
        if action_id.startswith(ACTION_PREFIX)
    ]


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
        self._faults: deque[Fault] = deque()
        self._last_ts = 0.0
        self._stopping = threading.Event()
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None
        self._held: socket.socket | None = None
        self._press_target: PressTarget | None = None

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
        self._release_port()

    def __enter__(self) -> "SlackSink":
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    def down(self) -> None:
        """Close the listening socket: new connections are refused until ``up()``. The port
        stays bound (a socket that does not listen: the kernel refuses connections to it), so
        no other server started meanwhile on this host gets it (a loaded test run saw another
        test's server answer on a port freed this way)."""
        self._shutdown()
        self._held = held_port(self.host, self.port)

    def up(self) -> None:
        """Listen again on the same port after ``down()``."""
        self._release_port()
        if self._server is None:
            self._serve()

    def _release_port(self) -> None:
        held, self._held = self._held, None
        if held is not None:
            held.close()

    @property
    def is_up(self) -> bool:
        """Whether the sink currently accepts connections."""
        return self._server is not None

    def _serve(self) -> None:
        handler = type("SinkHandler", (Handler,), {"sink": self})
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
                self._faults.append(Fault("fail", status, retry_after, error))

    def hang_next(self, n: int = 1, seconds: float = 5.0) -> None:
        """Make the next ``n`` POSTs stall ``seconds`` then close without an answer.

        The request is read (and recorded with outcome ``"hung"``) but nothing is
        posted, as when Slack times out before processing it.
        """
        with self._lock:
            for _ in range(n):
                self._faults.append(Fault("hang", seconds=seconds))

    def hold_next(self, n: int = 1, seconds: float = 5.0) -> None:
        """Make the next ``n`` POSTs post their message, then hold the answer ``seconds``
        (or until ``stop``) before sending it: Slack took the message but the sender has
        not heard so yet (a client killed meanwhile never does). Recorded as posted."""
        with self._lock:
            for _ in range(n):
                self._faults.append(Fault("hold", seconds=seconds))

    def accept_presses(self, url: str, secret: str, *, team: str, user: str) -> None:
        """Serve ``POST /_sink/press`` (and the page's buttons): a press of one of a message's
        buttons by ``user`` of ``team``, signed with ``secret``, posted to the listener at
        ``url`` (``service.slack_listener``)."""
        self._press_target = PressTarget(url, secret, team, user)

    def press(self, action: str, ts: str | None = None) -> tuple[int, dict[str, Any]]:
        """Press ``action`` on the message ``ts`` (default: the newest message with that
        button) as Slack does: a signed ``block_actions`` payload posted to the listener.

        Returns:
            (HTTP status for the caller, JSON answer): ``{"ok": true, "listener": status,
            "action_id", "ts"}``; 404 when no message has that button, 409 before
            ``accept_presses``.

        Raises:
            OSError: the listener cannot be reached.
        """
        target = self._press_target
        if target is None:
            return 409, {"ok": False, "error": "presses_not_accepted"}
        found = [
            (message, button_id)
            for message in self.messages()
            if ts in (None, message["ts"])
            for pressed, _, button_id in _buttons(message)
            if pressed == action
        ]
        if not found:
            return 404, {"ok": False, "error": "no_such_button", "action": action, "ts": ts}
        message, action_id = found[-1]
        body = press_body(
            team=target.team,
            user=target.user,
            action=action,
            notification_id=int(action_id.rsplit(":", 1)[1]),
            action_ts=f"{time.time():.6f}",
            response_url=self.webhook_url,
        )
        status = post_signed(target.url, body, target.secret)
        return 200, {
            "ok": status == 200,
            "listener": status,
            "action_id": action_id,
            "ts": message["ts"],
        }

    def page(self) -> str:
        """``GET /_sink/``: the messages, newest first, each with its buttons as forms that
        press them (``POST /_sink/press``)."""
        items = []
        for message in reversed(self.messages()):
            buttons = "".join(
                f'<form method=post action="{PRESS_PATH}" style="display:inline">'
                f'<input type=hidden name=ts value="{html.escape(message["ts"])}">'
                f'<input type=hidden name=action value="{html.escape(action)}">'
                f"<button>{html.escape(label)}</button></form> "
                for action, label, _ in _buttons(message)
            )
            items.append(
                f"<li><small>{html.escape(message['posted_at'])} {html.escape(message['via'])} "
                f"ts={html.escape(message['ts'])} edits={message['edits']}</small>"
                f"<pre>{html.escape(html.unescape(message['text']))}</pre>{buttons}</li>"
            )
        return (
            "<!doctype html><title>Slack sink (demo)</title><meta http-equiv=refresh content=10>"
            "<h1>Messages posted to the demo's Slack sink</h1>"
            + (
                ""
                if self._press_target
                else "<p>Buttons are not pressed from here: no listener.</p>"
            )
            + f"<ol>{''.join(items) or '<li>none yet</li>'}</ol>"
        )

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
            "posted_at": iso, "edits": int, "versions": [{"at": iso, "text", "header"}]},
            ...]`` (``versions``: as posted, then after each edit); replies are messages with
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
    ) -> Reply | float:
        path = urlsplit(raw_path).path
        text = raw.decode("utf-8", errors="replace")
        body = parse_body(headers, text, raw_path)
        token = request_token(headers, body)
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

        if path == PRESS_PATH:
            return self._press_request(body, headers)
        with self._lock:
            fault = self._faults.popleft() if self._faults else None
        is_webhook = bool(_WEBHOOK.match(path))
        if fault is not None and fault.kind == "hang":
            record(None, "hung")
            return float(fault.seconds)
        if fault is not None and fault.kind != "hold":
            reply = fault_reply(fault, is_webhook)
            record(reply.status, f"injected:{fault.status}")
            return reply
        if is_webhook:
            reply, outcome = self._webhook(path, body)
        elif path.startswith("/api/"):
            reply, outcome = self._web_api(path.removeprefix("/api/"), body, token)
        elif path.startswith("/services/"):
            reply, outcome = text_reply(404, "no_service"), "error:no_service"
        else:
            reply, outcome = text_reply(404, "not_found"), "error:not_found"
        record(reply.status, outcome)
        if fault is not None:  # a hold: answered once held
            reply.delay = float(fault.seconds)
        return reply

    def _press_request(self, body: Any, headers: dict[str, str]) -> Reply:
        """``POST /_sink/press``: JSON from a client, or a form from the page (then a
        redirect back to the page)."""
        fields = body if isinstance(body, dict) else {}
        try:
            status, answer = self.press(str(fields.get("action") or ""), fields.get("ts") or None)
        except OSError as error:
            status, answer = 502, {"ok": False, "error": f"listener not reached: {error}"}
        content_type = next((v for k, v in headers.items() if k.lower() == "content-type"), "")
        if "json" not in content_type and status == 200:
            return Reply(303, b"", "text/plain", {"Location": PAGE_PATH})
        return json_reply(status, answer)

    def _webhook(self, path: str, body: Any) -> tuple[Reply, str]:
        if not isinstance(body, dict):
            return text_reply(400, "invalid_payload"), "error:invalid_payload"
        problem = message_problem(body)
        if problem:
            return text_reply(400, problem), f"error:{problem}"
        hook = _WEBHOOK.match(path)
        assert hook is not None
        self._post(body, channel=f"webhook:{hook.group(2)}", via="webhook")
        return text_reply(200, "ok"), "posted"

    def _post(self, body: dict[str, Any], *, channel: str, via: str) -> dict[str, Any]:
        ts = self._next_ts()
        message = {
            "type": "message",
            "channel": channel,
            "ts": ts,
            "thread_ts": body.get("thread_ts"),
            "text": body.get("text") or "",
            "blocks": body.get("blocks") or [],
            "metadata": body.get("metadata"),
            "via": via,
            "posted_at": datetime.now(UTC).isoformat(),
            "edits": 0,
        }
        message["versions"] = [_version(message, message["posted_at"])]
        with self._lock:
            self._messages.append(message)
        return message

    def _web_api(self, method: str, body: Any, token: str) -> tuple[Reply, str]:
        body = body if isinstance(body, dict) else {}
        if method not in ("auth.test", "chat.postMessage", "chat.update"):
            return json_reply(404, {"ok": False, "error": "unknown_method"}), "error:unknown"
        if token != self.token:
            code = "invalid_auth" if token else "not_authed"
            return json_reply(200, {"ok": False, "error": code}), f"error:{code}"
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
            return json_reply(200, data), "ok"
        channel = str(body.get("channel") or "")
        channel_id = _channel_id(channel) if channel else ""
        if not channel or (self.channels is not None and channel_id not in self.channels):
            return json_reply(200, {"ok": False, "error": "channel_not_found"}), (
                "error:channel_not_found"
            )
        problem = message_problem(body)
        if problem:
            return json_reply(200, {"ok": False, "error": problem}), f"error:{problem}"
        if method == "chat.postMessage":
            message = self._post(body, channel=channel_id, via="api")
            data = {"ok": True, "channel": channel_id, "ts": message["ts"], "message": message}
            return json_reply(200, data), "posted"
        return self._update(channel_id, str(body.get("ts") or ""), body)

    def _update(self, channel_id: str, ts: str, body: dict[str, Any]) -> tuple[Reply, str]:
        with self._lock:
            message = next(
                (m for m in self._messages if m["channel"] == channel_id and m["ts"] == ts), None
            )
            if message is None:
                return json_reply(200, {"ok": False, "error": "message_not_found"}), (
                    "error:message_not_found"
                )
            message["text"] = body.get("text") or ""
            message["blocks"] = body.get("blocks") or []
            message["edits"] += 1
            message["versions"].append(_version(message, datetime.now(UTC).isoformat()))
            snapshot = json.loads(json.dumps(message))
        data = {
            "ok": True,
            "channel": channel_id,
            "ts": ts,
            "text": snapshot["text"],
            "message": snapshot,
        }
        return json_reply(200, data), "updated"


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
