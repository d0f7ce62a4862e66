"""A local downstream API for the n8n poller's two routes (the demo and tests/n8n).

``POST /idempotent`` dedupes by ``Idempotency-Key`` (as payment APIs do); ``POST /ledger``
has no idempotency (the poller's ledger guard protects it). Every request is recorded and
the answer can be scripted: fail with 500/401, or apply the effect and then hang past the
client's timeout (an ambiguous outcome).
"""

import contextlib
import json
import random
import re
import threading
import time
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from outbox_monitor.demo.outage import CONTROL_PATH, OUTAGE_ERROR, DownstreamOutage
from outbox_monitor.demo.switches import SWITCH_HEADER, Switch

IDEMPOTENT_PATH = "/idempotent"
LEDGER_PATH = "/ledger"


@dataclass(frozen=True)
class Reply:
    """How the downstream answers one request.

    ``apply``: the side effect happens (before any hang); ``status``: the HTTP status;
    ``hang``: seconds to wait before answering (past the client's timeout: an ambiguous
    outcome); ``hold``: wait until ``Downstream.release()`` (a batch kept in flight).
    """

    status: int = 200
    message: str = "ok"
    apply: bool = True
    delay: float = 0.0
    hang: float = 0.0
    hold: bool = False


OUTCOMES: dict[str, Reply] = {
    "ok": Reply(),
    "500": Reply(500, "internal error", apply=False),
    "503": Reply(503, "service unavailable", apply=False),
    "401": Reply(401, "invalid API key", apply=False),
    "timeout": Reply(hang=30.0),
    "hold": Reply(hold=True),
}
"""The named outcomes ``Downstream.script`` accepts."""


@dataclass(frozen=True)
class Received:
    """One request the downstream received."""

    path: str
    event_key: str
    event_type: str
    attempts: int | None
    idempotency_key: str | None
    status: int
    applied: bool
    at: float


@dataclass
class _State:
    lock: threading.Lock = field(default_factory=threading.Lock)
    requests: list[Received] = field(default_factory=list)
    applied: Counter = field(default_factory=Counter)
    scripts: dict[str, list[Reply]] = field(default_factory=dict)
    then: dict[str, Reply] = field(default_factory=dict)
    in_flight: int = 0


class Downstream:
    """A local downstream API on 127.0.0.1 for the poller's two routes.

    ``POST /idempotent`` applies the effect of each ``Idempotency-Key`` once and answers a
    repeated key with 200 without applying it again (as payment APIs do). ``POST /ledger``
    has no idempotency: every accepted request applies its effect (the poller's ledger
    guard must keep it to one). Both read ``event_key`` from the JSON body, require the
    ``Authorization`` value given (else 401), and record every request.

    Args:
        authorization: the required ``Authorization`` header value (``None``: any).
        decide: ``decide(path, body) -> Reply`` for requests without a script (default:
            ``ok``); the demo injects the simulator's faults this way.
        outage: the broken event types (default: none until ``outage.break_``); their
            requests get HTTP 503 before any script. ``GET``/``POST`` on ``CONTROL_PATH``
            read and change it (``outage.DownstreamOutage.control``).
        switches: more of the demo's switches by path (``switches.Switch``; the forgotten
            transaction's), served the same way.
    """

    def __init__(
        self,
        *,
        authorization: str | None = "Bearer outbox-demo",
        decide: Callable[[str, dict[str, Any]], Reply] | None = None,
        outage: DownstreamOutage | None = None,
        switches: Mapping[str, Switch] | None = None,
    ) -> None:
        self.authorization = authorization
        self.decide = decide
        self.outage = outage or DownstreamOutage()
        self.switches: dict[str, Switch] = {CONTROL_PATH: self.outage, **(switches or {})}
        self._state = _State()
        self._release = threading.Event()
        self._stopping = threading.Event()
        self._holding = False
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    # ------------------------------------------------------------- control
    def script(self, event_key: str, *outcomes: str, then: str = "ok") -> None:
        """The next requests for ``event_key`` meet ``outcomes`` in order (names of
        ``OUTCOMES``), every later one ``then`` (until ``fix``)."""
        with self._state.lock:
            self._state.scripts[event_key] = [OUTCOMES[name] for name in outcomes]
            self._state.then[event_key] = OUTCOMES[then]

    def hold(self) -> None:
        """From now on, unscripted requests apply their effect and then wait for ``release``."""
        self._release.clear()
        self._holding = True

    def release(self) -> None:
        """Answer the held requests and stop holding."""
        self._holding = False
        self._release.set()

    def fix(self) -> None:
        """The downstream is repaired: every script and outage is dropped, every request
        succeeds."""
        self.outage.heal()
        with self._state.lock:
            self._state.scripts.clear()
            self._state.then.clear()
        self.decide = None
        self.release()

    @property
    def requests(self) -> list[Received]:
        """Every request so far, in arrival order."""
        with self._state.lock:
            return list(self._state.requests)

    @property
    def in_flight(self) -> int:
        """Requests received and not answered yet (held or hanging)."""
        with self._state.lock:
            return self._state.in_flight

    def applied(self) -> Counter:
        """How many times each ``(path, event_key)`` effect was applied."""
        with self._state.lock:
            return Counter(self._state.applied)

    def url(self, path: str) -> str:
        """The full URL of ``IDEMPOTENT_PATH`` or ``LEDGER_PATH``."""
        assert self._server is not None, "start() first"
        return f"http://127.0.0.1:{self._server.server_address[1]}{path}"

    # ------------------------------------------------------------- serving
    def _reply_for(self, path: str, body: dict[str, Any], key: str) -> Reply:
        state = self._state
        with state.lock:
            script = state.scripts.get(key)
            if script:
                return script.pop(0)
            if key in state.then:
                return state.then[key]
        if self.decide is not None:
            return self.decide(path, body)
        return OUTCOMES["hold"] if self._holding else OUTCOMES["ok"]

    def _handle(self, handler: BaseHTTPRequestHandler) -> tuple[int, str]:
        length = int(handler.headers.get("Content-Length") or 0)
        try:
            body = json.loads(handler.rfile.read(length) or b"{}")
        except ValueError:
            return 400, "body is not JSON"
        key = str(body.get("event_key", ""))
        idempotency_key = handler.headers.get("Idempotency-Key")
        path = handler.path
        if path not in (IDEMPOTENT_PATH, LEDGER_PATH) or not key:
            return 404 if path not in (IDEMPOTENT_PATH, LEDGER_PATH) else 400, "bad request"
        state = self._state
        if self.authorization and handler.headers.get("Authorization") != self.authorization:
            reply = Reply(401, "missing or wrong Authorization", apply=False)
        elif self.outage.broken(str(body.get("event_type", ""))):
            reply = Reply(503, OUTAGE_ERROR, apply=False)
        elif path == IDEMPOTENT_PATH and not idempotency_key:
            reply = Reply(400, "Idempotency-Key header required", apply=False)
        else:
            with state.lock:
                repeated = path == IDEMPOTENT_PATH and state.applied[(path, idempotency_key)] > 0
            reply = Reply(200, "ok (idempotent replay)", apply=False) if repeated else None
            reply = reply or self._reply_for(path, body, key)
        effect_key = idempotency_key if path == IDEMPOTENT_PATH else key
        with state.lock:
            if reply.apply:
                state.applied[(path, effect_key)] += 1
            state.requests.append(
                Received(
                    path=path,
                    event_key=key,
                    event_type=str(body.get("event_type", "")),
                    attempts=body.get("attempts"),
                    idempotency_key=idempotency_key,
                    status=reply.status,
                    applied=reply.apply,
                    at=time.time(),
                )
            )
            state.in_flight += 1
        try:
            if reply.delay:
                self._stopping.wait(reply.delay)
            if reply.hold:
                while not (self._release.wait(0.1) or self._stopping.is_set()):
                    pass
            if reply.hang:
                self._stopping.wait(reply.hang)
        finally:
            with state.lock:
                state.in_flight -= 1
        return reply.status, reply.message

    def start(self) -> "Downstream":
        """Listen on a free port of 127.0.0.1 in a background thread."""
        downstream = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                switch = downstream.switches.get(self.path)
                if switch is not None:
                    self._answer(200, switch.state(), switch=True)
                else:
                    self._answer(404, {"status": 404, "message": "not found"})

            def do_POST(self) -> None:
                switch = downstream.switches.get(self.path)
                if switch is not None:
                    length = int(self.headers.get("Content-Length") or 0)
                    try:
                        body = json.loads(self.rfile.read(length) or b"{}")
                    except ValueError:
                        body = None
                    if not isinstance(body, dict):
                        self._answer(400, {"error": "the body must be a JSON object"}, switch=True)
                        return
                    self._answer(*switch.control(body), switch=True)
                    return
                status, message = downstream._handle(self)
                self._answer(status, {"status": status, "message": message})

            def _answer(self, status: int, answer: dict[str, Any], switch: bool = False) -> None:
                payload = json.dumps(answer).encode()
                with contextlib.suppress(OSError):
                    self.send_response(status)
                    if switch:  # how ``switches.call`` knows it reached a switch
                        self.send_header(SWITCH_HEADER, self.path)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(payload)))
                    self.end_headers()
                    self.wfile.write(payload)

            def log_message(self, *args: object) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(
            target=self._server.serve_forever, name="downstream", daemon=True
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        """Answer whatever hangs, stop serving, close the socket."""
        self._stopping.set()
        self._release.set()
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    def __enter__(self) -> "Downstream":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def poller_settings(downstream: Downstream, **overrides: str) -> dict[str, str]:
    """The poller's ``OUTBOX_*`` settings pointing both routes at ``downstream``."""
    return {
        "OUTBOX_IDEMPOTENT_URL": downstream.url(IDEMPOTENT_PATH),
        "OUTBOX_LEDGER_URL": downstream.url(LEDGER_PATH),
        **overrides,
    }


_STATUS_IN_TEXT = re.compile(r"\bHTTP (\d{3})\b")


def simulated_faults(seed: int) -> Callable[[str, dict[str, Any]], Reply]:
    """``Downstream(decide=…)`` answering as the traffic simulator's handlers fail.

    The same fault definition as the simulated workers (``simulate.attempt_fault`` of
    ``(seed, event_key, attempts)``, ``attempts`` as the poller sends it): ``crm.upsert``
    answers 401 (invalid API key), a bounced e-mail 422, transient faults their HTTP
    status (503, 429, 502) or 503; ``invoice.sent`` takes 0.5-2 s.
    """
    from outbox_monitor.demo.simulate.traffic import attempt_fault, handler_seconds, recorded_error
    from outbox_monitor.outbox import PermanentError

    rng = random.Random(f"{seed}:n8n-downstream")

    def decide(path: str, body: dict[str, Any]) -> Reply:
        event_type, key = str(body.get("event_type", "")), str(body.get("event_key", ""))
        delay = handler_seconds(rng, event_type)
        fault = attempt_fault(seed, event_type, key, int(body.get("attempts") or 0))
        if fault is None:
            return Reply(delay=delay)
        text = recorded_error(fault)
        found = _STATUS_IN_TEXT.search(text)
        if isinstance(fault, PermanentError):
            status = int(found.group(1)) if found else 422
        else:
            status = int(found.group(1)) if found else 503
        return Reply(status, text, apply=False, delay=delay)

    return decide
