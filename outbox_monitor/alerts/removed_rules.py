"""Instances of rules removed from the rules file (or that no longer select the outbox): each
one still active goes back to inactive; a firing or error episode gets its resolved
notification (route and payload of its first row; sent only when somebody was told it fired).
"""

from collections.abc import Callable, Sequence

import psycopg
from psycopg.types.json import Jsonb

from outbox_monitor.alerts.evaluation_pass import EvaluationPass, InstanceReport
from outbox_monitor.alerts.rules import Rule
from outbox_monitor.alerts.state_machine import (
    ERROR,
    ERROR_KIND,
    FIRING,
    FIRING_KIND,
    INACTIVE,
    RESOLVED_KIND,
    InstanceState,
    dedupe_key,
)
from outbox_monitor.store.db import Database


def retire_removed_rules(
    db: Database,
    rules: Sequence[Rule],
    context: EvaluationPass,
    fence: Callable[[psycopg.Connection], None],
) -> list[InstanceReport]:
    """Instances of ``db``'s outbox (``Database.alert_outbox``) left active by rules that
    are no longer among ``rules`` (the rules of the file that select the outbox): back to
    inactive; a firing/error episode gets its resolved row (route and payload of its first
    row)."""
    names = [rule.name for rule in rules]
    reports = []
    found = db.fetch_all(
        "alert_instances_of_removed_rules", {"outbox": db.alert_outbox, "rules": names}
    )
    for row in found:
        reports.append(_retire(db, row["rule"], row["instance"], context, fence))
    return reports


def _retire(
    db: Database,
    rule: str,
    instance: str,
    context: EvaluationPass,
    fence: Callable[[psycopg.Connection], None],
) -> InstanceReport:
    key = {"outbox": db.alert_outbox, "rule": rule, "instance": instance}
    kinds: list[str] = []
    with db.transaction() as conn:
        fence(conn)
        row = conn.execute(db.compose("alert_instance_lock"), key).fetchone()
        current, labels, episode = InstanceState.from_row(row), row["labels"], row["episode_id"]
        if current.state == INACTIVE:
            return InstanceReport(rule, instance, INACTIVE, current.value, None)
        detail = "rule removed from the rules file"
        conn.execute(
            db.compose("alert_transition_insert"),
            {
                **key,
                "from_state": current.state,
                "to_state": INACTIVE,
                "value": None,
                "at": context.now,
                "detail": detail,
            },
        )
        if current.state in (FIRING, ERROR):
            first = None
            for kind in (FIRING_KIND, ERROR_KIND):
                first = (
                    first
                    or conn.execute(
                        db.compose("notification_by_key"),
                        {
                            "outbox": key["outbox"],
                            "dedupe_key": dedupe_key(rule, instance, current.firing_seq, kind),
                        },
                    ).fetchone()
                )
            if first is not None:
                payload = {
                    **first["payload"],
                    "kind": RESOLVED_KIND,
                    "resolved_at": context.now.isoformat(),
                    "summary": f"{rule}: resolved (rule removed from the rules file)",
                }
                told = current.last_notified_at is not None
                row = conn.execute(
                    db.compose("notification_insert"),
                    {
                        "dedupe_key": dedupe_key(rule, instance, current.firing_seq, RESOLVED_KIND),
                        **key,
                        "kind": RESOLVED_KIND,
                        "route": first["route"],
                        "evaluation_id": context.evaluation_id,
                        "payload": Jsonb(payload),
                        "silenced": False,
                        "status": "pending" if told else "suppressed",
                        "now": context.now,
                    },
                ).fetchone()
                if row is not None:
                    kinds.append(RESOLVED_KIND)
        conn.execute(
            db.compose("alert_instance_update"),
            {
                **key,
                "labels": Jsonb(labels),
                "state": INACTIVE,
                "value": None,
                "threshold": None,
                "pending_since": None,
                "firing_since": None,
                "cleared_since": None,
                "last_evaluated_at": context.now,
                "last_notified_at": current.last_notified_at,
                "firing_seq": current.firing_seq,
                "error": None,
                "episode_id": episode,
            },
        )
    return InstanceReport(
        rule,
        instance,
        INACTIVE,
        None,
        None,
        transitions=(f"{current.state}→{INACTIVE}",),
        notifications=tuple(kinds),
    )
