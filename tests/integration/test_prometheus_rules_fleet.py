"""deploy/prometheus/rules.yml on a real fleet (issue 16): one alert instance per outbox.

A scheduler process watches two outboxes, orders and billing (two tables of one database),
with the shipped alerts.yml; its /metrics is scraped once. Every sample of a family the rules
select becomes an input series of ``promtool test rules``, served by two scheduler replicas
(``instance`` a and b, the same values, held 15 minutes). promtool then evaluates, per
outbox, each rule's expression without its comparison (values computed by hand from the
rows inserted: orders' backlog 3 and billing's 2, never 5 nor 6) and which alerts fire,
with their ``outbox`` label and summary. Duration figures move with the clock: the test
bounds each scraped value and expects that one value, of that outbox, back.

promtool is Debian's (``make promtool`` unpacks it); without it the tests skip, loudly, and
fail under ``make test`` (``OUTBOX_MONITOR_REQUIRE_PROMTOOL``).
"""

import json
import os
import re
import shutil
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import psycopg
import pytest
import yaml

from outbox_monitor.alerts.rules_file import SHIPPED_RULES_PATH
from outbox_monitor.demo.pgcluster import free_port
from tests.alerting import LOADED_DEADLINE, REPO, wait_for
from tests.integration.test_exporter import Samples, scrape
from tests.integration.test_fleet_scheduler import FLEET, add_pending, fleet_env
from tests.integration.test_prometheus_rules import (
    RULES_PATH,
    all_rules,
    check_expression,
    load_document,
    selectors,
)

REQUIRE_ENV = "OUTBOX_MONITOR_REQUIRE_PROMTOOL"
"""Set by ``make test`` (which installs promtool first): a missing promtool fails the test."""
ORDERS_AND_BILLING = FLEET[: FLEET.index("  - name: far")]
"""test_fleet_scheduler's fleet file without far: two tables of the ORDERS_DSN database."""
EVAL_AT = "11m"  # past backlog's `for: 10m`
HELD = 15  # minutes each input series keeps its scraped value
_COMPARISON = re.compile(r"\s*(?:>=|<=|==|!=|>|<)\s*-?\d+(?:\.\d+)?\s*$")


UNPACKED = Path.home() / ".cache/outbox-monitor/prometheus-deb/usr/bin/promtool"
"""Where ``make promtool`` unpacks Debian's promtool when none is on the PATH."""


def promtool() -> str:
    """The promtool on the PATH, else ``make promtool``'s; skips (fails under
    ``REQUIRE_ENV``) when neither is there."""
    found = shutil.which("promtool") or (str(UNPACKED) if UNPACKED.exists() else None)
    if found is None:
        message = "PROMTOOL IS MISSING, THE RULES ARE NOT EVALUATED: make promtool"
        if os.environ.get(REQUIRE_ENV):
            pytest.fail(message)
        pytest.skip(message)
    return found


def insert(dsn: str, table: str, rows: str) -> None:
    """``rows``: the VALUES of (event_type, event_key, status, created ago, locked ago,
    processed ago), the ages as intervals (NULL for none)."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(
            psycopg.sql.SQL(
                "INSERT INTO {} (event_type, aggregate_type, aggregate_id, event_key, payload, "
                "status, created_at, available_at, locked_at, processed_at) "
                "SELECT t, 'a', k, k, '{{}}', s, now() - c, now() - c, now() - l, now() - p "
                "FROM (VALUES {}) AS v(t, k, s, c, l, p)"
            ).format(psycopg.sql.Identifier(table), psycopg.sql.SQL(rows))
        )


def fill(dsn: str) -> None:
    """orders: 3 due order.paid; a notification.email pending 10 min, retried in an hour (not
    due); 2 order.paid done in 4 min (P95 240 s). billing: 2 due invoice.sent; 2
    payment.captured dead-lettered 5 min ago; an invoice.sent locked 2 h (stuck); a done one
    in 30 s; an open breaker on refund.% (no rows)."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE billing_outbox (LIKE integration_outbox INCLUDING ALL)")
    add_pending(dsn, "integration_outbox", "order.paid", 3)
    add_pending(dsn, "billing_outbox", "invoice.sent", 2)
    minutes = "interval '1 minute' * "
    insert(
        dsn,
        "integration_outbox",
        f"('notification.email', 'n', 'pending', {minutes}10, NULL::interval, NULL::interval),"
        f" ('order.paid', 'd1', 'done', {minutes}5, NULL, {minutes}1),"
        f" ('order.paid', 'd2', 'done', {minutes}5, NULL, {minutes}1)",
    )
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(
            "UPDATE integration_outbox SET available_at = now() + interval '1 hour' "
            "WHERE event_type = 'notification.email'"
        )
    insert(
        dsn,
        "billing_outbox",
        f"('payment.captured', 'f1', 'failed', {minutes}6, NULL::interval, {minutes}5),"
        f" ('payment.captured', 'f2', 'failed', {minutes}6, NULL, {minutes}5),"
        f" ('invoice.sent', 's', 'processing', {minutes}130, {minutes}120, NULL),"
        " ('invoice.sent', 'd', 'done', interval '90 seconds', NULL, interval '1 minute')",
    )
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(
            "INSERT INTO outbox_monitor.controls (outbox, event_type_filter, layer, breaker,"
            " updated_by) VALUES ('billing_outbox', 'refund.%', 'ui', true, 'test');"
            "INSERT INTO outbox_monitor.control_state (outbox, event_type_filter, breaker_state,"
            " cooldown_seconds) VALUES ('billing_outbox', 'refund.%', 'open', 60)"
        )


def scheduler_firing(found: Samples) -> set[tuple[str, str, str]]:
    """``(rule, outbox, alert_instance)`` of each instance the scheduler's own evaluation of
    alerts.yml has firing (``outbox_monitor_alert_state``)."""
    return {
        (labels["rule"], labels["outbox"], labels["alert_instance"])
        for labels, state in found.get("outbox_monitor_alert_state", [])
        if labels["state"] == "firing" and state == 1
    }


def fleet_scrape(dsn: str, tmp_path: Path, webhook_url: str, alerts: int) -> Samples:
    """One /metrics of a fleet scheduler process on orders and billing, once it has sampled
    both (``outbox_monitor_sampler_lag_seconds`` of each present) and has ``alerts`` alert
    instances firing."""
    env = fleet_env(
        tmp_path,
        ORDERS_AND_BILLING,
        ORDERS_DSN=dsn,
        SLACK_WEBHOOK_URL=webhook_url,
        OUTBOX_MONITOR_SAMPLE_INTERVAL="1",
        OUTBOX_MONITOR_METRICS_CACHE="0",
    )
    env["OUTBOX_MONITOR_RULES"] = str(SHIPPED_RULES_PATH)
    port = free_port()
    command = [sys.executable, "-m", "outbox_monitor", "scheduler", "--metrics-port", str(port)]
    log = tmp_path / "scheduler.log"
    with log.open("w") as stderr:
        process = subprocess.Popen(command, cwd=REPO, env=env, stderr=stderr)

    def sampled() -> Samples | None:
        try:
            found = scrape(f"http://127.0.0.1:{port}")
        except OSError:
            return None
        lags = found.get("outbox_monitor_sampler_lag_seconds", [])
        both = {labels["outbox"] for labels, _ in lags} == {"orders", "billing"}
        return found if both and len(scheduler_firing(found)) >= alerts else None

    try:
        # the process imports, connects to both outboxes, samples and evaluates: seconds on a
        # quiet machine, more than 30 s at load average 16-21
        found = wait_for(
            lambda: process.poll() is not None or sampled(), timeout=LOADED_DEADLINE, step=0.2
        )
        process.send_signal(signal.SIGTERM)
        process.wait(timeout=LOADED_DEADLINE)
    finally:
        if process.poll() is None:  # never left running beside the next tests
            process.kill()
            process.wait()
    assert isinstance(found, dict), log.read_text()[-3000:]
    return found


def series_text(name: str, labels: dict[str, str]) -> str:
    """``name{label="value", ...}`` in promtool's series notation (Go string escapes)."""
    return name + "{" + ", ".join(f"{k}={json.dumps(v)}" for k, v in labels.items()) + "}"


def input_series(found: Samples, names: set[str]) -> list[dict[str, str]]:
    """Each scraped sample of ``names`` as two replicas' series, its value held ``HELD`` min."""
    return [
        {
            "series": series_text(name, {**labels, "instance": replica}),
            "values": f"{value!r}+0x{HELD}",
        }
        for name in sorted(names)
        for labels, value in found.get(name, [])
        for replica in ("a", "b")
    ]


def value(found: Samples, name: str, low: float, high: float, **where: str) -> float:
    """The one scraped sample of ``name`` matching ``where``, asserted in [low, high)."""
    [got] = [v for labels, v in found[name] if all(labels.get(k) == w for k, w in where.items())]
    assert low <= got < high, (name, where, got)
    return got


def minutes_seconds(seconds: float) -> str:
    """Prometheus' humanizeDuration of 60 s to 1 h: ``4m 0s`` (whole seconds)."""
    return f"{int(seconds) // 60}m {int(seconds) % 60}s"


def firing_by_hand(age: float) -> dict[str, list[tuple[dict[str, str], str]]]:
    """The alerts ``fill``'s rows fire, ``{alert: [(labels but alertname, summary)]}``;
    ``age``: the scraped oldest notification's, in seconds."""
    return {
        "notifications-late": [
            (
                {"outbox": "orders", "severity": "critical"},
                "orders: Customer notifications are late: oldest pending is "
                f"{minutes_seconds(age)} old",
            )
        ],
        "payment-failed": [
            (
                {"outbox": "billing", "event_type": "payment.captured", "severity": "critical"},
                "billing: 2 payment event(s) dead-lettered in the last 15 min",
            )
        ],
        "latency-slo": [
            (
                {"outbox": "orders", "severity": "warning"},
                "orders: P95 created→processed latency is 4m 0s (SLO 2 min)",
            )
        ],
        "stuck-lock": [
            (
                {"outbox": "billing", "severity": "warning"},
                "billing: 1 row(s) locked longer than the lock timeout or with no lock time: "
                "reap them",
            )
        ],
        "breaker-open": [
            (
                {"outbox": "billing", "event_type": "refund.%", "severity": "warning"},
                "billing: Circuit breaker open for refund.%: its rows are held until a probe "
                "succeeds",
            )
        ],
    }


def run_promtool(
    binary: str, unit: dict[str, Any], folder: Path
) -> "subprocess.CompletedProcess[str]":
    """``promtool test rules`` of the test file ``unit`` (written into ``folder``)."""
    path = folder / "rules_test.yml"
    path.write_text(yaml.safe_dump(unit, allow_unicode=True, sort_keys=False))
    return subprocess.run(
        [binary, "test", "rules", str(path)], capture_output=True, text=True, timeout=60
    )


def promtool_unit(rule_file: Path, series: list[dict[str, str]], **checks: Any) -> dict[str, Any]:
    """A ``promtool test rules`` file: ``rule_file`` evaluated every minute on ``series`` (one
    sample a minute), with ``checks`` (``promql_expr_test``, ``alert_rule_test``)."""
    return {
        "rule_files": [str(rule_file)],
        "evaluation_interval": "1m",
        "tests": [{"interval": "1m", "input_series": series, **checks}],
    }


def expr_test(expr: str, samples: dict[str, float]) -> dict[str, Any]:
    """promtool's check that ``expr`` without its comparison gives ``samples`` at ``EVAL_AT``."""
    return {
        "expr": _COMPARISON.sub("", expr),
        "eval_time": EVAL_AT,
        "exp_samples": [{"labels": labels, "value": v} for labels, v in samples.items()],
    }


def alert_test(
    alert: str, firing: list[tuple[dict[str, str], str]], at: str = EVAL_AT
) -> dict[str, Any]:
    """promtool's check that ``alert`` has exactly the instances ``firing`` (``[(labels but
    alertname, summary)]``) at ``at``."""
    return {
        "eval_time": at,
        "alertname": alert,
        "exp_alerts": [
            {"exp_labels": labels, "exp_annotations": {"summary": summary}}
            for labels, summary in firing
        ],
    }


def test_every_rule_alerts_per_outbox_on_a_fleet(dsn, slack_sink, tmp_path):
    binary = promtool()
    fill(dsn)
    found = fleet_scrape(dsn, tmp_path, slack_sink.webhook_url, alerts=5)
    rules = {rule["alert"]: rule for rule in all_rules(load_document())}
    names = {s.name for rule in rules.values() for s in selectors(rule["expr"])}
    for name in names:  # every sample the rules read is labelled by its outbox
        assert {labels.get("outbox") for labels, _ in found[name]} <= {"orders", "billing"}, name
    exposed = {name: [labels for labels, _ in samples] for name, samples in found.items()}
    assert {a: check_expression(rule["expr"], exposed) for a, rule in rules.items()} == {
        a: [] for a in rules
    }

    def each(name: str, low: float, high: float) -> dict[str, float]:
        return {
            f'{{outbox="{o}"}}': value(found, name, low, high, outbox=o)
            for o in ("orders", "billing")
        }

    age = value(found, "outbox_oldest_pending_age_seconds", 600, 660, outbox="orders",
                event_type="notification.email")  # fmt: skip
    both = {'{outbox="orders"}': 0, '{outbox="billing"}': 0}
    # each rule's expression, its comparison cut off: {labels of an outbox's series: value};
    # the durations as scraped (bounded), each outbox's own
    expected: dict[str, dict[str, float]] = {
        "notifications-late": {'{outbox="orders"}': age},  # billing has no notification
        "backlog": {'{outbox="orders"}': 3, '{outbox="billing"}': 2},
        "payment-failed": {'{outbox="billing", event_type="payment.captured"}': 2},
        "latency-slo": {'{outbox="orders"}': 240, '{outbox="billing"}': 30},
        "stuck-lock": {'{outbox="orders"}': 0, '{outbox="billing"}': 1},
        "breaker-open": {'{outbox="billing", event_type="refund.%"}': 1},
        "xmin-horizon-held": each("outbox_xmin_horizon_age_seconds", 0, 600),
        "slot-holds-horizon": both,
        "vacuum-overdue": both,
        "claim-plan-degraded": both,
        "no-claim-while-due": each("outbox_no_claim_while_due_seconds", 60, 120),
        "database-unreachable": {'{outbox="orders"}': 1, '{outbox="billing"}': 1},
        "sampler-stalled": each("outbox_monitor_sampler_lag_seconds", 0, 30),
        "alerting-stalled": both,
        "writes-failing": both,  # the writes of both outboxes' leaders succeed
    }
    assert set(expected) == set(rules)
    firing = firing_by_hand(age)
    # the scheduler's own evaluation of alerts.yml fires the same instances (SPEC §3)
    assert scheduler_firing(found) == {
        (
            alert,
            labels["outbox"],
            f"event_type={labels['event_type']}" if "event_type" in labels else "",
        )
        for alert, instances in firing.items()
        for labels, _ in instances
    }
    unit = promtool_unit(
        RULES_PATH,
        input_series(found, names),
        promql_expr_test=[expr_test(rules[a]["expr"], samples) for a, samples in expected.items()],
        alert_rule_test=[alert_test(alert, firing.get(alert, [])) for alert in rules],
    )
    result = run_promtool(binary, unit, tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr


def test_promtool_fails_a_rule_that_adds_outboxes_together(tmp_path: Any):
    """The check above has teeth: the pre-fleet backlog expression, on orders 3 and billing 2
    served by two replicas, gives one series of 5 and fails the expected per-outbox values."""
    binary = promtool()
    rules = tmp_path / "rules.yml"
    rules.write_text(
        RULES_PATH.read_text().replace(
            "sum by (outbox) (max by (outbox, event_type) (outbox_queue_depth))",
            "sum(max by (event_type) (outbox_queue_depth))",
        )
    )
    depth = {"orders": {"order.paid": 3}, "billing": {"invoice.sent": 2}}
    found: Samples = {
        "outbox_queue_depth": [
            ({"outbox": o, "event_type": t}, float(v))
            for o, by in depth.items()
            for t, v in by.items()
        ]
    }
    [backlog] = [r for r in all_rules(load_document(rules.read_text())) if r["alert"] == "backlog"]
    unit = promtool_unit(
        rules,
        input_series(found, {"outbox_queue_depth"}),
        promql_expr_test=[
            expr_test(backlog["expr"], {'{outbox="orders"}': 3, '{outbox="billing"}': 2})
        ],
    )
    result = run_promtool(binary, unit, tmp_path)
    assert result.returncode == 1
    assert "got: {} 5E+00" in result.stderr, result.stdout + result.stderr


def test_without_a_fleet_file_one_alert_without_outbox(tmp_path: Any):
    """The settings' one outbox (no fleet file) exports no ``outbox`` label: the rules give
    one instance without it, and the summary no "<outbox>: " prefix. Two replicas each
    expose 1 stuck lock of order.paid: 1, not 2."""
    binary = promtool()
    found: Samples = {"outbox_stuck_locks": [({"event_type": "order.paid"}, 1.0)]}
    summary = "1 row(s) locked longer than the lock timeout or with no lock time: reap them"
    unit = promtool_unit(
        RULES_PATH,
        input_series(found, {"outbox_stuck_locks"}),
        alert_rule_test=[alert_test("stuck-lock", [({"severity": "warning"}, summary)], "1m")],
    )
    result = run_promtool(binary, unit, tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
