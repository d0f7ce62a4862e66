"""Rows that fill every table of the dashboard (issue 30 items 5 and 6), for the AppTest and
the Chromium checks that the tables fit at 1440 px and show values for people; and each
table's key columns, by the label a person reads. Import as ``from tests.tables_rows import …``.
"""

from pathlib import Path

import yaml

from outbox_monitor.access import Identity, Role
from outbox_monitor.alerts.evaluate import Evaluator
from outbox_monitor.alerts.rules_file import load_rules
from tests import timeline_rows
from tests.flow import open_breaker
from tests.integration.test_by_event_type import RULES
from tests.integration.test_by_event_type import seed as seed_event_types

OPERATOR = Identity("oncall@example.com", Role.operator, "cli")
WORKER = "n8n-worker-7"
LONG_ERROR = (
    "HTTP 502 from https://payments.example.com/v2/charges: upstream connect error or "
    "disconnect/reset before headers. reset reason: connection termination; retried 3 "
    "times over 45 s by worker-7 on queue#1"
)
"""200 characters: as long as the lists read (``left(last_error, 200)``)."""
KEYS = {
    "overview": {
        "overview.by_type": [
            "event type",
            "status",
            "flow control",
            "queue depth",
            "retrying",
            "trend (15m)",
            "oldest pending",
            "stuck",
            "failed",
        ]
    },
    "events": {
        "events.table": ["id", "event type", "status", "attempts", "last error", "created at"]
    },
    "dead_letters": {
        "dead_letters.groups": ["error group", "event type", "failed", "last failed"],
        "dead_letters.rows": ["id", "attempts", "last error", "failed at"],
    },
    "alerts": {
        "alerts.state": ["rule", "instance", "state", "value", "condition", "since"],
        "alerts.notifications": ["created", "kind", "rule", "instance", "delivery"],
        "alerts.transitions": ["at", "rule", "instance", "change", "value"],
    },
    "controls": {
        "controls.event_types": ["event type", "state", "due", "held"],
        "controls.in_force": [
            "event type filter",
            "state",
            "next probe",
            "rows held",
            "settings",
            "reason",
            "owner",
        ],
        "controls.transitions": ["at", "event type filter", "transition", "cool-down"],
    },
    "health": {
        "health.holders": ["kind", "name", "state", "held for", "command that ends it"],
        "health.indexes": ["index", "size"],
        "health.claim_plans": ["statement", "verdict", "plan shape"],
    },
    "workers": {"workers.workers": ["worker", "rows in hand", "stuck", "last claim"]},
    "timeline": {"timeline.table": ["at", "kind", "what changed", "detail"]},
    "actions": {
        "actions.audit": ["at", "actor", "action", "rows", "filter"],
        "actions.reap.sample": ["id", "event type", "lock age", "locked at"],
    },
}
"""Per page (its path), each table's widget key → the labels of its key columns: those the
issue found cut at 1440 px, and what a person reads a row by."""


def write_rules(tmp_path: Path) -> Path:
    """The by-event-type tests' rules (a per-type rule, a rule on a pattern, one on the whole
    outbox) as alerts.yml in ``tmp_path``; its path."""
    path = tmp_path / "alerts.yml"
    path.write_text(yaml.safe_dump(RULES))
    return path


def seed_every_table(conn, db, rows, rules_path: Path) -> None:
    """Rows for every table: four event types (one paused, one failing, a stuck lock), the
    timeline's changes (alert transitions, audit rows, a breaker opened and closed — its
    outcomes and cool-down empty), a worker holding a row, a dead letter with a 200-character
    error, an open breaker on ``crm.%`` with its next probe, the rules evaluated once
    (states, transitions, notifications)."""
    seed_event_types(rows, conn)
    timeline_rows.seed(conn, db, rows)
    rows.add(event_type="crm.contact", status="processing", locked_by=WORKER, locked_ago=20)
    rows.add_failed(event_type="payment.captured", last_error=LONG_ERROR)
    open_breaker(db, conn, "crm.%", OPERATOR)
    Evaluator(db, load_rules(rules_path)).run_once()
