"""The PagerDuty event and the signed webhook's body and signature of a notification row,
computed by hand: keys within 255 characters whatever the instance holds (an event type of
100 kB), the severity map, the signature over ``timestamp.message_id.body``."""

import hashlib
import hmac
import re
from pathlib import Path

import yaml

from outbox_monitor.alerts.message_key import alert_key, message_key
from outbox_monitor.alerts.pagerduty import event
from outbox_monitor.alerts.rules_file import load_rules
from outbox_monitor.alerts.signed_webhook import body, signature

HUGE = "order." + "x" * 100_000


def row(kind: str = "firing", severity: str = "warning", event_type: str = HUGE) -> dict:
    return {
        "rule": "backlog",
        "instance": f"event_type={event_type}",
        "kind": kind,
        "outbox": "orders",
        "dedupe_key": f"backlog|event_type={event_type}|3|{kind}",
        "payload": {
            "summary": "s" * 5000,
            "severity": severity,
            "metric": "queue_depth",
            "labels": {"event_type": event_type},
            "episode": 42,
            "dashboard_path": "/overview?event_type=order.paid",
            "runbook_url": "https://runbooks.example/backlog",
            "outbox": "orders",
        },
    }


def test_a_pagerduty_event_fits_its_limits_for_a_100_kb_event_type():
    sent = event(row(), "KEY", "https://monitor.example.com")
    key = alert_key("orders", "backlog", f"event_type={HUGE}", 42)
    assert sent["dedup_key"] == key and len(key) == 68
    payload = sent["payload"]
    assert len(payload["summary"]) == 1024 and len(payload["component"]) == 255
    assert (payload["source"], payload["group"], payload["class"]) == (
        "orders",
        "orders",
        "queue_depth",
    )
    assert len(payload["custom_details"]["instance"]) == 2000
    assert sent["links"] == [
        {
            "href": "https://monitor.example.com/overview?event_type=order.paid",
            "text": "Dashboard",
        },
        {"href": "https://runbooks.example/backlog", "text": "Runbook"},
    ]


def test_severities_map_to_pagerduty_and_a_resolve_carries_only_the_key():
    assert event(row(severity="critical"), "K", "http://d")["payload"]["severity"] == "critical"
    assert event(row(severity="info"), "K", "http://d")["payload"]["severity"] == "info"
    assert event(row(kind="error"), "K", "http://d")["payload"]["severity"] == "error"
    resolve = event(row(kind="resolved"), "K", "http://d")
    assert resolve == {
        "routing_key": "K",
        "event_action": "resolve",
        "dedup_key": alert_key("orders", "backlog", f"event_type={HUGE}", 42),
    }


def test_the_webhook_message_id_is_the_message_key_and_the_signature_covers_it():
    document = body(row(kind="resolved"), route="hook", dashboard_url="http://d")
    expected = message_key("orders", "backlog", f"event_type={HUGE}", 42, "resolved")
    assert document["message_id"] == expected and len(expected) <= 255
    assert document["status"] == "resolved" and document["route"] == "hook"
    raw = b'{"a":1}'
    by_hand = hmac.new(b"secret", b"1700000000.om1-x:firing." + raw, hashlib.sha256).hexdigest()
    assert signature("secret", "1700000000", "om1-x:firing", raw) == f"v1={by_hand}"


def test_every_alerts_yml_example_of_the_receivers_page_loads(tmp_path):
    text = (Path(__file__).resolve().parents[2] / "docs" / "receivers.md").read_text()
    examples = re.findall(r"```yaml\n(.*?)```", text, re.S)
    types = set()
    for number, example in enumerate(examples):
        document = {"version": 1, **yaml.safe_load(example)}
        first = next(iter(document["routes"]))
        document.setdefault(
            "rules",
            [{"name": "x", "metric": "queue_depth", "op": ">", "threshold": 1, "route": first}],
        )
        path = tmp_path / f"alerts-{number}.yml"
        path.write_text(yaml.safe_dump(document))
        types |= {route.type for route in load_rules(path).routes.values()}
    assert len(examples) == 5 and types == {"slack", "pagerduty", "webhook"}
