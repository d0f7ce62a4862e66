"""The demo's Slack sink presses a message's buttons as Slack does (its drill, ``demo.drill``):
``POST /_sink/press`` signs a ``block_actions`` payload with the app's secret and posts it to
the listener, here a local server checking it with slack-sdk's ``SignatureVerifier`` (what
the product's listener uses); its page lists the buttons as forms; each edit is a version."""

import json
import threading
import urllib.error
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs

from slack_sdk.signature import SignatureVerifier

from outbox_monitor.demo.slack_sink import SlackSink

SECRET = "unit-test-signing-secret"
BLOCKS = [
    {"type": "header", "text": {"type": "plain_text", "text": "🔥 FIRING · breaker-open"}},
    {
        "type": "actions",
        "elements": [
            {
                "type": "button",
                "text": {"type": "plain_text", "text": "Acknowledge"},
                "action_id": "outbox-monitor:acknowledge:7",
            },
            {
                "type": "button",
                "text": {"type": "plain_text", "text": "Open dashboard"},
                "action_id": "open",
                "url": "http://127.0.0.1:1/alerts",
            },
        ],
    },
]


class Listener:
    """A stand-in for the listener: records each POST and whether its signature verifies."""

    def __init__(self) -> None:
        self.received: list[tuple[bool, dict]] = []
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers["Content-Length"]))
                valid = SignatureVerifier(SECRET).is_valid(
                    body,
                    self.headers["X-Slack-Request-Timestamp"],
                    self.headers["X-Slack-Signature"],
                )
                owner.received.append((valid, json.loads(parse_qs(body.decode())["payload"][0])))
                self.send_response(200 if valid else 401)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/slack/actions"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def call(url: str, method: str, data: bytes | None = None, **headers: str) -> tuple[int, bytes]:
    request = urllib.request.Request(url, data=data, headers=headers, method=method)
    try:
        with urllib.request.urlopen(request, timeout=10) as answer:
            return answer.status, answer.read()
    except urllib.error.HTTPError as error:
        with error:
            return error.code, error.read()


def post(sink: SlackSink, method: str, body: dict) -> dict:
    status, data = call(
        f"{sink.api_url}{method}",
        "POST",
        json.dumps(body).encode(),
        **{"Content-Type": "application/json", "Authorization": f"Bearer {sink.token}"},
    )
    assert status == 200
    return json.loads(data)


def press(sink: SlackSink, **body: str) -> tuple[int, dict]:
    status, data = call(
        f"{sink.url}/_sink/press",
        "POST",
        json.dumps(body).encode(),
        **{"Content-Type": "application/json"},
    )
    return status, json.loads(data)


def test_the_sink_presses_a_button_signed_as_slack_does_and_keeps_each_version():
    listener = Listener()
    try:
        with SlackSink() as sink:
            posted = post(
                sink,
                "chat.postMessage",
                {"channel": "#alerts", "text": "[FIRING] x", "blocks": BLOCKS},
            )
            assert press(sink, action="acknowledge") == (
                409,
                {"ok": False, "error": "presses_not_accepted"},
            )
            sink.accept_presses(listener.url, SECRET, team="T0DEMO", user="U0ONCALL")
            assert press(sink, action="pause-1h")[0] == 404  # no such button on the message
            assert press(sink, action="acknowledge", ts="1.000000")[0] == 404  # no such message
            assert press(sink, action="acknowledge") == (
                200,
                {
                    "ok": True,
                    "listener": 200,
                    "action_id": "outbox-monitor:acknowledge:7",
                    "ts": posted["ts"],
                },
            )
            [(valid, payload)] = listener.received
            assert valid
            assert payload["type"] == "block_actions"
            assert (payload["team"]["id"], payload["user"]["id"]) == ("T0DEMO", "U0ONCALL")
            assert payload["actions"][0]["action_id"] == "outbox-monitor:acknowledge:7"
            assert payload["response_url"] == sink.webhook_url

            # the page: the message with its button as a form; pressing it comes back to it
            status, page = call(f"{sink.url}/_sink/", "GET")
            assert status == 200
            assert b"<button>Acknowledge</button>" in page and b"Open dashboard" not in page
            form = f"ts={posted['ts']}&action=acknowledge".encode()
            status, _ = call(
                f"{sink.url}/_sink/press",
                "POST",
                form,
                **{"Content-Type": "application/x-www-form-urlencoded"},
            )
            assert status == 200 and len(listener.received) == 2  # redirected to the page

            edited = [{**BLOCKS[0], "text": {"type": "plain_text", "text": "👀 ACKED by a"}}]
            post(
                sink,
                "chat.update",
                {"channel": "#alerts", "ts": posted["ts"], "text": "y", "blocks": edited},
            )
            [message] = sink.messages()
            assert [(v["text"], v["header"]) for v in message["versions"]] == [
                ("[FIRING] x", "🔥 FIRING · breaker-open"),
                ("y", "👀 ACKED by a"),
            ]
    finally:
        listener.close()
