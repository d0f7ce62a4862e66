"""``outbox_monitor.nudge``, the publisher's wake-up call, against a real HTTP server on
127.0.0.1: delivered, refused by status, nobody listening, an answer that never comes, a
malformed URL. It never raises, returns within its timeout and logs one WARNING line that
names the host and the reason and nothing secret. The real n8n webhook:
tests/n8n/test_n8n_poller.py."""

import json
import logging
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

import outbox_monitor
from outbox_monitor import outbox
from outbox_monitor.demo.pgcluster import free_port

SECRET_PATH = "/webhook/s3cret-path"
SECRET_QUERY = "token=s3cret-query"
SECRET_HEADER = "Bearer s3cret-header"
SECRETS = ("s3cret", "user", "pass")
HANG_BOUND = 10.0  # the hanging server's own limit, far past every timeout here


@dataclass
class Webhook:
    """A local webhook answering ``status`` (``None``: never answers until closed)."""

    status: int | None = 202
    requests: list[tuple[str, dict[str, str], bytes]] = field(default_factory=list)
    closing: threading.Event = field(default_factory=threading.Event)
    port: int = 0

    def url(self, path: str = SECRET_PATH) -> str:
        return f"http://127.0.0.1:{self.port}{path}"


@pytest.fixture
def webhook() -> Iterator[Webhook]:
    hook = Webhook()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            hook.requests.append((self.path, dict(self.headers), body))
            if hook.status is None:
                hook.closing.wait(HANG_BOUND)
                return
            self.send_response(hook.status)
            self.send_header("Location", hook.url("/elsewhere"))
            self.send_header("Content-Length", "2")
            self.end_headers()
            self.wfile.write(b"{}")

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    hook.port = server.server_address[1]
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    try:
        yield hook
    finally:
        hook.closing.set()
        server.shutdown()
        server.server_close()
        thread.join(5)


def warnings_of(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [
        record.getMessage()
        for record in caplog.records
        if record.name == "outbox_monitor.outbox" and record.levelno == logging.WARNING
    ]


def assert_one_clean_warning(caplog: pytest.LogCaptureFixture, origin: str, reason: str) -> None:
    (line,) = warnings_of(caplog)
    assert line == (
        f"nudge of {origin} not delivered: {reason}; the worker claims the row at its next poll"
    )
    assert not any(secret in line for secret in SECRETS), line


def test_a_delivered_nudge_posts_the_event_key_as_json_and_logs_nothing(webhook, caplog):
    assert outbox_monitor.nudge(
        webhook.url(), event_key="order.paid:42", headers={"Authorization": SECRET_HEADER}
    )
    assert outbox_monitor.nudge(webhook.url())  # no event_key: an empty object
    ((path, headers, body), (_, _, empty)) = webhook.requests
    assert path == SECRET_PATH
    assert headers["Content-Type"] == "application/json"
    assert headers["Authorization"] == SECRET_HEADER
    assert json.loads(body) == {"event_key": "order.paid:42"}
    assert json.loads(empty) == {}
    assert warnings_of(caplog) == []


def test_the_package_function_is_the_worker_apis_and_importing_the_package_stays_light():
    assert outbox_monitor.nudge is outbox.nudge
    with pytest.raises(AttributeError, match="no attribute 'nudge_'"):
        outbox_monitor.nudge_  # noqa: B018
    script = (
        "import sys, outbox_monitor; print('nudge' in dir(outbox_monitor), sorted(sys.modules))"
    )
    listed, loaded = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=True
    ).stdout.split(" ", 1)
    assert listed == "True"  # dir() lists it before its first use, without importing it
    assert "'outbox_monitor.outbox'" not in loaded and "'urllib3'" not in loaded


@pytest.mark.parametrize(("status", "reason"), [(500, "Internal Server Error"), (307, None)])
def test_an_answer_other_than_2xx_is_not_delivered_and_no_redirect_is_followed(
    webhook, caplog, status, reason
):
    webhook.status = status
    url = webhook.url(f"{SECRET_PATH}?{SECRET_QUERY}").replace("//", "//user:pass@", 1)
    assert outbox.nudge(url, event_key="k", headers={"Authorization": SECRET_HEADER}) is False
    assert [path for path, _, _ in webhook.requests] == [f"{SECRET_PATH}?{SECRET_QUERY}"]
    assert_one_clean_warning(
        caplog,
        f"http://127.0.0.1:{webhook.port}",
        f"HTTP {status} {reason or 'Temporary Redirect'}",
    )


def test_nobody_listening_is_not_delivered(caplog):
    port = free_port()  # bound, then closed: nothing listens there
    started = time.monotonic()
    assert outbox.nudge(f"http://127.0.0.1:{port}{SECRET_PATH}", event_key="k") is False
    assert time.monotonic() - started < outbox.NUDGE_TIMEOUT_SECONDS
    assert_one_clean_warning(caplog, f"http://127.0.0.1:{port}", "[Errno 111] Connection refused")


@pytest.mark.parametrize("timeout", [0.3, 0.8])
def test_an_answer_that_never_comes_returns_within_the_timeout(webhook, caplog, timeout):
    webhook.status = None
    started = time.monotonic()
    assert outbox.nudge(webhook.url(), event_key="k", timeout=timeout) is False
    elapsed = time.monotonic() - started
    print(f"\nnudge against a hanging webhook, timeout {timeout:g} s: {elapsed:.3f} s")
    assert len(webhook.requests) == 1  # it was sent, and its answer waited for
    assert timeout * 0.95 <= elapsed < timeout + 0.5
    assert_one_clean_warning(
        caplog, f"http://127.0.0.1:{webhook.port}", f"no answer within {timeout:g} s"
    )


@pytest.mark.parametrize(
    ("url", "headers", "origin", "error"),
    [
        ("http://user:pass@[::1/s3cret", None, "a malformed URL", "LocationParseError"),
        ("ftp://host/s3cret", None, "ftp://host", "URLSchemeUnknown"),
        ("http://127.0.0.1:9/", {"Authorization": "s3cret\n"}, "http://127.0.0.1:9", "ValueError"),
    ],
    ids=["malformed URL", "unknown scheme", "header with a newline"],
)
def test_a_request_that_cannot_be_made_is_logged_without_its_text(
    caplog, url, headers, origin, error
):
    assert outbox.nudge(url, event_key="k", headers=headers) is False
    assert_one_clean_warning(caplog, origin, f"the request could not be made ({error})")


@pytest.mark.parametrize("timeout", [0, -1.0])
def test_a_timeout_that_is_not_positive_is_the_callers_mistake(webhook, timeout):
    with pytest.raises(ValueError, match="less than or equal to 0"):
        outbox.nudge(webhook.url(), timeout=timeout)
    assert webhook.requests == []
