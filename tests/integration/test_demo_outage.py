"""The demo breaks and heals a downstream on demand (issue 13, "Done means"), with the
simulated workers: ``outbox-monitor demo-downstream break`` makes every order.paid call fail
with HTTP 503, the demo's breaker (demo/controls.yml) opens by itself and the shipped rule
posts one "opened" message to the demo's Slack sink; ``heal`` lets the next probe close it
and the held rows drain. (The "closed" message follows the rule's 2-minute
keep_firing_for; tests/n8n/test_n8n_outage.py checks both messages with a short one.) The
demo runs with its own rules: its banner names their ``xmin-horizon-held`` at 1 minute
(tests/integration/test_demo_forgotten_transaction.py runs it with rules of its own).
"""

import json
import re
import time
import urllib.error
import urllib.request

import psycopg
import pytest
from click.testing import CliRunner

from outbox_monitor.cli import main
from outbox_monitor.demo.downstream import IDEMPOTENT_PATH, Downstream
from outbox_monitor.demo.outage import DEFAULT_BROKEN, OUTAGE_ERROR, URL_ENV, request
from outbox_monitor.errors import OutboxMonitorError
from tests.integration.test_demo import running_demo

BROKEN = "order.paid"


def demo_downstream(url: str, *args: str) -> dict:
    """``outbox-monitor demo-downstream <args> --url URL --json``, its JSON answer."""
    result = CliRunner().invoke(
        main, ["demo-downstream", *args, "--url", url, "--json"], prog_name="outbox-monitor"
    )
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def transitions(dsn: str) -> list[tuple[str, str]]:
    with psycopg.connect(dsn) as conn:
        return conn.execute(
            "SELECT event_type_filter, transition FROM outbox_monitor.breaker_transitions"
            " ORDER BY id"
        ).fetchall()


def breaker_messages(sink: str) -> list[str]:
    with urllib.request.urlopen(f"{sink}/_sink/messages", timeout=5) as response:
        messages = json.loads(response.read())["messages"]
    return [m["text"] for m in messages if "breaker-open" in m.get("text", "")]


def wait(predicate, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, what
        time.sleep(1)


def test_breaking_the_demo_downstream_opens_its_breaker_and_healing_closes_it(tmp_path):
    with running_demo(tmp_path) as output:
        dsn = re.search(r"database\s+(postgresql://\S+)", output).group(1)
        url = re.search(r"demo-downstream break --url (\S+)", output).group(1)
        sink = re.search(r"local Slack sink (http://\S+)", output).group(1)
        assert "breakers   order.paid, payment.captured, shipment.created" in output
        assert "xmin-horizon-held alerts after 1m in the demo" in output
        assert demo_downstream(url, "status") == {"broken": []}

        assert demo_downstream(url, "break") == {"broken": [BROKEN]}
        broke = time.monotonic()
        # 90 % of ≥ 20 outcomes in 30 s: the acks before the break leave the window first
        wait(lambda: transitions(dsn), 60, "the breaker did not open")
        assert transitions(dsn) == [(BROKEN, "opened")]
        opened_after = time.monotonic() - broke
        with psycopg.connect(dsn) as conn:
            failed_by_outage = conn.execute(
                "SELECT count(*) FROM integration_outbox WHERE event_type = %s AND last_error = %s",
                (BROKEN, f"DownstreamError: {OUTAGE_ERROR}"),
            ).fetchone()[0]
        assert failed_by_outage >= 18  # met the outage: 90 % of the 20 outcomes that open it
        # the shipped rule, evaluated every 30 s in the demo
        wait(lambda: breaker_messages(sink), 45, "no breaker-open message")
        [opened] = breaker_messages(sink)
        assert f"[FIRING] breaker-open event_type={BROKEN}" in opened

        assert demo_downstream(url, "heal") == {"broken": [], "healed": [BROKEN]}
        # the next probe: after the cool-down (30 s, doubled by each failed probe)
        wait(lambda: len(transitions(dsn)) == 2, 150, "the breaker did not close")
        assert transitions(dsn) == [(BROKEN, "opened"), (BROKEN, "closed")]
        held = (
            "SELECT count(*) FROM integration_outbox WHERE event_type = %s"
            " AND status = 'pending' AND attempts = 0 AND available_at < now() - interval '5 s'"
        )

        def drained() -> bool:
            with psycopg.connect(dsn) as conn:
                return conn.execute(held, (BROKEN,)).fetchone()[0] == 0

        wait(drained, 30, "the held order.paid rows did not drain")
        print(f"\ndemo breaker opened {opened_after:.1f} s after the break")


def call(downstream: Downstream, event_type: str, key: str) -> int:
    """POST one event to the Idempotency-Key route; the HTTP status."""
    request = urllib.request.Request(
        downstream.url(IDEMPOTENT_PATH),
        data=json.dumps({"event_type": event_type, "event_key": key}).encode(),
        headers={"Idempotency-Key": key, "Content-Type": "application/json"},
        method="POST",
    )
    try:
        with urllib.request.urlopen(request, timeout=5) as response:
            return response.status
    except urllib.error.HTTPError as error:
        return error.code


def test_the_downstream_breaks_and_heals_event_types_over_its_control_route():
    with Downstream(authorization=None) as downstream:
        url = downstream.url("")
        assert request(url, "status") == []
        assert request(url, "break") == list(DEFAULT_BROKEN)
        assert request(url, "break", ("payment.%", "order.paid")) == ["order.paid", "payment.%"]
        assert [call(downstream, t, f"{t}:1") for t in ("payment.captured", "order.paid")] == [
            503,
            503,
        ]
        assert call(downstream, "shipment.created", "shipment.created:1") == 200
        [refused, _, shipped] = downstream.requests
        assert (refused.status, refused.applied) == (503, False)
        assert downstream.applied() == {(IDEMPOTENT_PATH, "shipment.created:1"): 1}
        assert shipped.applied

        assert request(url, "heal", ("order.paid",)) == ["payment.%"]
        assert call(downstream, "order.paid", "order.paid:1") == 200
        assert call(downstream, "payment.refunded", "payment.refunded:1") == 503
        assert request(url, "heal") == []
        assert call(downstream, "payment.captured", "payment.captured:1") == 200
        downstream.outage.break_(["%"])
        downstream.fix()  # a repaired downstream has no outage either
        assert request(url, "status") == []

        with pytest.raises(OutboxMonitorError, match='action must be "break" or "heal"'):
            request(url, "mend")
    with pytest.raises(OutboxMonitorError, match="cannot reach the demo's downstream") as caught:
        request(url, "status")
    assert URL_ENV in caught.value.hint
