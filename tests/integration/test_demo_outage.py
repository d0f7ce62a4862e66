"""The demo breaks and heals a downstream on demand (issue 13, "Done means"), with the
simulated workers: ``outbox-monitor demo-downstream break`` makes every order.paid call fail
with HTTP 503, the demo's breaker (demo/controls.yml) opens by itself and the shipped rule
posts one "opened" message to the demo's Slack sink; ``heal`` lets the next probe close it
and the held rows drain. (The "closed" message follows the rule's 2-minute
keep_firing_for; tests/n8n/test_n8n_outage.py checks both messages with a short one.) The
demo runs with its rules evaluated every ``INTERVAL`` (``shortened_demo_rules``) and its
breakers' cool-down at ``COOLDOWN`` (``shorten_breakers``): both otherwise the demo's.
"""

import json
import re
import time
import urllib.error
import urllib.request
from pathlib import Path

import psycopg
import pytest
import yaml
from click.testing import CliRunner

from outbox_monitor.alerts.rules_file import RULES_ENV, load_rules
from outbox_monitor.cli import main
from outbox_monitor.demo.downstream import IDEMPOTENT_PATH, Downstream
from outbox_monitor.demo.lifecycle import DEMO_CONTROLS
from outbox_monitor.demo.outage import DEFAULT_BROKEN, OUTAGE_ERROR, URL_ENV, request
from outbox_monitor.demo.rules import use_demo_rules
from outbox_monitor.errors import OutboxMonitorError
from outbox_monitor.flow.controls_file import load_controls
from tests.alerting import wait_for
from tests.integration.test_demo import running_demo

BROKEN = "order.paid"
INTERVAL = "2s"
"""How often the tests' copies of the demo's rules are evaluated (the demo's: 30 s)."""
COOLDOWN = 5
"""The demo's breakers' cool-down in seconds as the tests apply it (the demo's controls.yml:
30 s): a healed downstream's next probe comes sooner (each failed probe doubles it)."""


def demo_rules_copy(tmp_path: Path) -> Path:
    """Where ``shortened_demo_rules`` keeps the demo's own rules, unchanged: the file
    ``use_demo_rules`` writes, as ``outbox-monitor demo`` does."""
    return tmp_path / "demo" / "demo-alerts.yml"


def shortened_demo_rules(
    tmp_path: Path,
    monkeypatch,
    changes: dict[str, dict],
    *,
    alertmanager: bool = True,
    drill: bool = True,
) -> Path:
    """The demo's rules (``use_demo_rules``, as ``outbox-monitor demo`` writes them with its
    local Slack sink) evaluated every ``INTERVAL`` and with ``changes`` (rule name → fields of
    the rules file) made to their rules, written to a file of the test's; the rules are
    otherwise the demo's (asserted). ``alertmanager``: whether the demo runs one; ``drill``:
    with the paging drill's (the demo of one outbox; a fleet's has none).

    Raises:
        KeyError: ``changes`` names a rule the demo's rules do not have (a misspelt name
            would otherwise leave the rule as it is, unnoticed)."""
    monkeypatch.delenv(RULES_ENV, raising=False)
    monkeypatch.chdir(tmp_path)  # no ./alerts.yml: the shipped rules are the demo's start
    folder = demo_rules_copy(tmp_path).parent
    folder.mkdir()
    written = use_demo_rules(folder, drill=drill, channel="#alerts", alertmanager=alertmanager)
    assert demo_rules_copy(tmp_path).is_file()
    assert written == "1m"
    monkeypatch.delenv(RULES_ENV)  # use_demo_rules pointed this process at its copy
    document = yaml.safe_load(demo_rules_copy(tmp_path).read_text())
    document["defaults"]["interval"] = INTERVAL
    names = [rule["name"] for rule in document["rules"]]
    unknown = sorted(set(changes) - set(names))
    if unknown:
        raise KeyError(
            f"no rule {', '.join(unknown)} in the demo's rules (they are {', '.join(names)})"
        )
    for rule in document["rules"]:
        rule.update(changes.get(rule["name"], {}))
    path = tmp_path / "shortened-alerts.yml"
    path.write_text(yaml.safe_dump(document, sort_keys=False, allow_unicode=True))
    demo, ours = load_rules(demo_rules_copy(tmp_path)), load_rules(path)
    assert ours.routes == demo.routes and ours.inhibit == demo.inhibit
    assert ours.defaults.interval < demo.defaults.interval
    for mine, theirs in zip(ours.rules, demo.rules, strict=True):
        if mine.name in changes:
            update = {field: getattr(theirs, field) for field in changes[mine.name]}
            assert all(getattr(mine, field) < value for field, value in update.items())
            mine = mine.model_copy(update=update)
        assert mine == theirs, mine.name
    return path


def test_a_change_to_a_rule_the_demo_does_not_have_is_refused(tmp_path, monkeypatch):
    with pytest.raises(KeyError, match="no rule backlog-by-typ in the demo's rules"):
        shortened_demo_rules(tmp_path, monkeypatch, {"backlog-by-typ": {"threshold": 50}})


def shorten_breakers(dsn: str, folder: Path) -> None:
    """Apply the demo's controls file with its breakers' cool-down at ``COOLDOWN`` to the
    running demo's database, as an operator applies a controls file (``outbox-monitor
    controls apply``); the controls are otherwise the demo's (asserted)."""
    document = yaml.safe_load(DEMO_CONTROLS.read_text())
    for control in document["controls"]:
        control["breaker"]["cooldown"] = f"{COOLDOWN}s"
    path = folder / "demo-controls.yml"
    path.write_text(yaml.safe_dump(document, sort_keys=False))
    demo, ours = load_controls(DEMO_CONTROLS), load_controls(path)
    assert list(ours) == list(demo)
    for name, control in ours.items():
        assert demo[name].breaker_cooldown_seconds > COOLDOWN, name
        assert control == demo[name].with_changes(breaker_cooldown_seconds=COOLDOWN), name
    result = CliRunner().invoke(
        main, ["controls", "apply", str(path), "--dsn", dsn, "--json"], prog_name="outbox-monitor"
    )
    assert result.exit_code == 0, result.output
    assert sorted(json.loads(result.stdout)["written"]) == sorted(demo), result.output


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
    """Poll ``predicate`` (a query of the demo's database or sink) every 0.25 s until it is
    true; fail saying ``what`` after ``timeout`` seconds."""
    assert wait_for(predicate, timeout=timeout, step=0.25), what


def test_breaking_the_demo_downstream_opens_its_breaker_and_healing_closes_it(
    tmp_path, monkeypatch
):
    rules = shortened_demo_rules(tmp_path, monkeypatch, {}, alertmanager=False)
    with running_demo(tmp_path, environment={RULES_ENV: str(rules)}) as output:
        dsn = re.search(r"database\s+(postgresql://\S+)", output).group(1)
        url = re.search(r"demo-downstream break --url (\S+)", output).group(1)
        sink = re.search(r"local Slack sink (http://\S+)", output).group(1)
        assert "breakers   order.paid, payment.captured, shipment.created" in output
        assert demo_downstream(url, "status") == {"broken": []}
        shorten_breakers(dsn, tmp_path)

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
        # the shipped rule, evaluated every INTERVAL (every 30 s in the demo)
        wait(lambda: breaker_messages(sink), 45, "no breaker-open message")
        [opened] = breaker_messages(sink)
        assert f"[FIRING] breaker-open event_type={BROKEN}" in opened

        assert demo_downstream(url, "heal") == {"broken": [], "healed": [BROKEN]}
        # the next probe: after the cool-down (COOLDOWN s, doubled by each failed probe)
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
