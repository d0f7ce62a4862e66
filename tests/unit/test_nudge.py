"""``outbox_monitor.nudge``, the publisher's wake-up call, against a real HTTP server on
127.0.0.1: delivered, refused by status, nobody listening, an answer that never comes or
trickles in a byte at a time, a malformed URL, arguments of the wrong type, a proxy from the
environment. It never raises (but for a timeout that is no positive number of seconds),
returns within its timeout and logs one WARNING line that names the host and the reason and
nothing secret. The real n8n webhook: tests/n8n/test_n8n_poller.py."""

import base64
import datetime
import json
import logging
import socket
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
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
TRICKLE_BOUND = 8.0  # the trickling server's own limit: it closes after sending this long
BYTE_EVERY = 0.2  # seconds between two bytes of a trickled answer, far below every timeout
LATE = 1.0
"""The timeout of the nudges left running late: a trickled byte comes every ``BYTE_EVERY``,
far within each read's share of it, so the threads still run when the test counts them (at
0.3 s, a loaded machine's 0.3 s gap between two bytes ended one first)."""


@dataclass
class Webhook:
    """A local webhook answering ``status`` (``None``: never answers until closed)."""

    status: int | None = 202
    requests: list[tuple[str, dict[str, str], bytes]] = field(default_factory=list)
    closing: threading.Event = field(default_factory=threading.Event)
    port: int = 0

    def url(self, path: str = SECRET_PATH) -> str:
        return f"http://127.0.0.1:{self.port}{path}"


@contextmanager
def serving() -> Iterator[Webhook]:
    """A ``Webhook`` served on 127.0.0.1 until the block ends. It records the request line's
    target as sent: a path, or the absolute URL a proxy is sent."""
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


@pytest.fixture
def webhook() -> Iterator[Webhook]:
    with serving() as hook:
        yield hook


@pytest.fixture(autouse=True)
def no_proxy_set(monkeypatch: pytest.MonkeyPatch) -> None:
    """No proxy variable of the machine running the tests reaches ``nudge``."""
    for name in ("http_proxy", "https_proxy", "all_proxy", "no_proxy"):
        monkeypatch.delenv(name, raising=False)
        monkeypatch.delenv(name.upper(), raising=False)


@dataclass
class Trickle:
    """A webhook that reads the request, then sends ``HTTP/1.1 202 Accepted`` and a header
    one byte every ``BYTE_EVERY`` seconds for ``TRICKLE_BOUND`` seconds, or until
    ``stop`` is set, then closes."""

    url: str
    stop: threading.Event


@pytest.fixture
def trickling_webhook() -> Iterator[Trickle]:
    listener = socket.create_server(("127.0.0.1", 0))
    stop = threading.Event()

    def answer(connection: socket.socket) -> None:
        with connection:
            connection.recv(65536)
            head = b"HTTP/1.1 202 Accepted\r\nX-Pad: " + b"a" * 10_000
            deadline = time.monotonic() + TRICKLE_BOUND
            for byte in head:
                if stop.is_set() or time.monotonic() > deadline:
                    return
                try:
                    connection.send(bytes([byte]))
                except OSError:
                    return
                stop.wait(BYTE_EVERY)

    def serve() -> None:
        while not stop.is_set():
            try:
                connection, _ = listener.accept()
            except OSError:
                return
            threading.Thread(target=answer, args=(connection,), daemon=True).start()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield Trickle(f"http://127.0.0.1:{listener.getsockname()[1]}/webhook/outbox-nudge", stop)
    finally:
        stop.set()
        listener.shutdown(socket.SHUT_RDWR)  # wakes the accept; a close alone would not
        listener.close()
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


@pytest.mark.parametrize("timeout", [0, -1.0, float("nan"), float("inf"), "1", True, None])
def test_a_timeout_that_is_no_positive_finite_number_is_the_callers_mistake(webhook, timeout):
    with pytest.raises(ValueError, match=r"nudge's timeout must be a finite number of seconds > 0"):
        outbox.nudge(webhook.url(), timeout=timeout)
    assert webhook.requests == []


def test_an_answer_trickled_a_byte_at_a_time_returns_within_the_timeout(trickling_webhook, caplog):
    timeout = 1.0
    started = time.monotonic()
    delivered = outbox.nudge(trickling_webhook.url, event_key="k", timeout=timeout)
    elapsed = time.monotonic() - started
    print(f"\nnudge against a trickling webhook, timeout {timeout:g} s: {elapsed:.3f} s")
    assert delivered is False  # no whole answer within the timeout
    assert timeout * 0.95 <= elapsed < timeout + 0.5  # unbounded, it lasts TRICKLE_BOUND
    origin = trickling_webhook.url.removesuffix("/webhook/outbox-nudge")
    assert_one_clean_warning(caplog, origin, f"no answer within {timeout:g} s")


@pytest.mark.parametrize(
    ("event_key", "sent"),
    [
        (uuid.UUID(int=42), "00000000-0000-0000-0000-00000000002a"),
        (
            datetime.datetime(2026, 12, 4, 21, 40, tzinfo=datetime.UTC),
            "2026-12-04 21:40:00+00:00",
        ),
    ],
    ids=["uuid", "datetime"],
)
def test_an_event_key_that_is_a_uuid_or_a_datetime_is_sent_as_its_text(
    webhook, caplog, event_key, sent
):
    assert outbox.nudge(webhook.url(), event_key=event_key) is True
    ((_, _, body),) = webhook.requests
    assert json.loads(body) == {"event_key": sent}
    assert warnings_of(caplog) == []


@pytest.mark.parametrize(
    ("url", "event_key", "headers", "origin", "reason"),
    [
        (None, b"order.paid:42", None, None, "event_key is bytes, not text (TypeError)"),
        (None, {"order.paid:42"}, None, None, "event_key is set, not text (TypeError)"),
        (None, "k", [("Authorization", "s3cret")], None, "AttributeError"),
        (b"http://127.0.0.1:9/s3cret", "k", None, "a malformed URL", "TypeError"),
    ],
    ids=["bytes event_key", "set event_key", "list headers", "bytes URL"],
)
def test_an_argument_of_the_wrong_type_never_raises_into_the_publisher(
    webhook, caplog, url, event_key, headers, origin, reason
):
    try:
        result = outbox.nudge(url or webhook.url(), event_key=event_key, headers=headers)
    except Exception as error:  # the promise: never raising into the caller
        pytest.fail(f"nudge raised {type(error).__name__}: {error}")
    assert result is False
    assert webhook.requests == []  # nothing half-made was sent
    if not reason.startswith("event_key"):
        reason = f"the request could not be made ({reason})"
    assert_one_clean_warning(caplog, origin or f"http://127.0.0.1:{webhook.port}", reason)


def wait_until_no_nudge_runs_late(bound: float = 10.0) -> None:
    deadline = time.monotonic() + bound
    while outbox._overruns.count:
        assert time.monotonic() < deadline, f"{outbox._overruns.count} nudges still run late"
        time.sleep(0.05)


def test_nudges_left_running_past_their_timeout_are_bounded_and_end_with_the_answer(
    trickling_webhook, webhook, caplog, monkeypatch
):
    monkeypatch.setattr(outbox, "NUDGE_OVERRUNS_MAX", 2)
    wait_until_no_nudge_runs_late()  # an earlier test's trickled answer has ended
    caplog.set_level(logging.INFO, logger="outbox_monitor.outbox")
    assert outbox.nudge(trickling_webhook.url, timeout=LATE) is False
    assert outbox.nudge(trickling_webhook.url, timeout=LATE) is False
    assert outbox._overruns.count == 2  # both threads still read the trickled answers
    started = time.monotonic()
    assert outbox.nudge(webhook.url(), timeout=LATE) is False  # skipped at once, not sent
    assert time.monotonic() - started < LATE
    assert webhook.requests == []
    trickling = trickling_webhook.url.removesuffix("/webhook/outbox-nudge")
    suffix = "; the worker claims the row at its next poll"
    assert warnings_of(caplog) == [
        f"nudge of {trickling} not delivered: no answer within {LATE:g} s{suffix}",
        f"nudge of {trickling} not delivered: no answer within {LATE:g} s{suffix}",
        f"nudge of http://127.0.0.1:{webhook.port} not delivered: skipped: 2 earlier nudges "
        f"still run past their timeout (a webhook trickling its answers?){suffix}",
    ]
    trickling_webhook.stop.set()  # the webhook closes: the threads reading it end
    wait_until_no_nudge_runs_late()
    ended = [r.getMessage() for r in caplog.records if r.levelno == logging.INFO]
    assert len(ended) == 2
    assert all(
        line.startswith(f"nudge of {trickling} ended ")
        and f" past its timeout of {LATE:g} s: " in line
        for line in ended
    ), ended
    assert outbox.nudge(webhook.url(), timeout=0.3) is True


def test_the_proxy_of_the_environment_carries_the_nudge(monkeypatch, caplog):
    with serving() as proxy:
        monkeypatch.setenv("http_proxy", f"http://user:pass@127.0.0.1:{proxy.port}")
        assert outbox.nudge("http://n8n.invalid:5678/webhook/outbox-nudge", event_key="k")
    ((target, headers, body),) = proxy.requests
    assert target == "http://n8n.invalid:5678/webhook/outbox-nudge"  # the absolute URL
    authorization = {name.lower(): value for name, value in headers.items()}
    assert (
        authorization["proxy-authorization"] == f"Basic {base64.b64encode(b'user:pass').decode()}"
    )
    assert json.loads(body) == {"event_key": "k"}
    assert warnings_of(caplog) == []


def test_no_proxy_bypasses_the_proxy_and_a_proxy_out_of_reach_is_logged(
    webhook, monkeypatch, caplog
):
    monkeypatch.setenv("http_proxy", f"http://user:pass@127.0.0.1:{free_port()}")
    monkeypatch.setenv("no_proxy", "localhost,127.0.0.1")
    assert outbox.nudge(webhook.url(), event_key="k") is True
    assert len(webhook.requests) == 1
    monkeypatch.setenv("no_proxy", "localhost")
    assert outbox.nudge(webhook.url(), event_key="k") is False
    assert len(webhook.requests) == 1
    assert_one_clean_warning(
        caplog,
        f"http://127.0.0.1:{webhook.port}",
        "the proxy could not be reached ([Errno 111] Connection refused)",
    )
