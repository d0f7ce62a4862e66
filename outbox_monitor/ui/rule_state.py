"""The Overview's alerting (issue 15 item 3): each tile's badge as the state its rules were
left in by the evaluator — never a judgement of the tile's own figure, which may be scoped
differently from the rule (a tile over all event types, the rule over ``notification.%``) —
and the lines of an instance that the badges and the firing alerts (``ui.firing_alerts``) say.

Everything comes from ``outbox_monitor.alert_instances`` (``alert_loaders.alert_instances``)
and the evaluator lease: when no scheduler evaluates (stalled, or never started), the badges
say so instead of showing stale states.
"""

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from outbox_monitor.alerts.notification_text import held_note
from outbox_monitor.alerts.rules import Rule, RuleSet
from outbox_monitor.alerts.stall import LeaseStatus, describe_stall
from outbox_monitor.ui import format
from outbox_monitor.units import format_value

# Worst first: the state a badge shows when a figure's rules disagree.
SEVERITY = ("firing", "error", "pending", "inactive")
COLORS = {"firing": "red", "error": "orange", "pending": "orange", "inactive": "green"}
LABELS = {"firing": "FIRING", "error": "ERROR", "pending": "pending", "inactive": "ok"}
NEVER_EVALUATED = "no scheduler has evaluated the rules yet"
RULE_PARAM, INSTANCE_PARAM = "rule", "instance"
"""The Alerts page's URL parameters that focus its state table on one rule instance."""


@dataclass(frozen=True)
class Badge:
    """A tile's badge: ``text`` under the value (short: the state and the rule, so that it
    fits the tile), ``color`` of ``st.metric(delta_color=…)``, ``line`` (the rule's scope,
    value vs condition, or why there is no state: a caption under the tile) and ``detail``
    (one line per rule, for the tile's help)."""

    text: str
    color: str
    line: str
    detail: str


def alerting_down(lease: LeaseStatus, ruleset: RuleSet | None) -> str | None:
    """Why the persisted states cannot be trusted now, or ``None`` when a scheduler
    evaluates: no scheduler ever took the lease, or alerting is stalled
    (``alerts.stall.describe_stall``: no evaluation for 3 intervals)."""
    if ruleset is None:
        return None
    if not lease.exists:
        return (
            f"{NEVER_EVALUATED}: start `outbox-monitor scheduler` "
            "(or `outbox-monitor dashboard --with-scheduler`)"
        )
    return describe_stall(lease, ruleset.defaults.interval)


def _scope(rule: Rule) -> str:
    parts = []
    if rule.event_type:
        parts.append(rule.event_type)
    if rule.by:
        parts.append("per event type")
    if rule.predict is not None:
        parts.append(f"forecast {format.duration_label(rule.predict)}")
    return f" [{', '.join(parts)}]" if parts else ""


def _ago(instant: datetime | None, now: datetime | None) -> str:
    if instant is None or now is None:
        return ""
    return format.duration(max(0.0, (now - instant).total_seconds()))


def held_open(rule: Rule, row: Mapping[str, Any], now: datetime | None) -> str:
    """``"held by keep_firing_for 2m: clear since … (40s ago)"`` for a firing instance whose
    condition has cleared (``held_note``); ``"pending 2m of for 10m"`` for a pending one;
    else ``""``."""
    if row.get("state") == "pending" and row.get("pending_since") is not None:
        wait = format.duration_label(rule.for_ or 0)
        return f"pending {_ago(row['pending_since'], now)} of for {wait}"
    return held_note(rule.keep_firing_for, row.get("state"), row.get("cleared_since"), now)


def instance_line(rule: Rule, row: Mapping[str, Any], now: datetime | None) -> str:
    """One instance for people: ``"backlog [per event type] order.paid: 1,200 vs > 1,000"``
    with, when firing but clear, that keep_firing_for holds it open (``held_open``), and
    when pending, for how long of its ``for``."""
    instance = str(row.get("instance") or "").removeprefix("event_type=")
    value = format_value(row.get("value"), rule.unit)
    text = f"{rule.name}{_scope(rule)}{' ' + instance if instance else ''}: {value}"
    text += f" vs {rule.condition}"
    if row.get("state") == "error":
        text = f"{rule.name}: cannot be evaluated"
    held = held_open(rule, row, now)
    return f"{text} ({held})" if held else text


def badge(
    metric: str,
    ruleset: RuleSet | None,
    instances: Sequence[Mapping[str, Any]],
    *,
    down: str | None,
    now: datetime | None,
) -> Badge:
    """The badge of a tile showing ``metric``: the worst state of the rules on that metric
    (firing, error, pending, ok), each as its evaluator left it, scoped like the rule.

    Args:
        metric: the tile's ``alerts.yml`` metric.
        ruleset: the loaded rules; ``None`` when the file is invalid.
        instances: ``alerts.state.list_instances`` rows.
        down: ``alerting_down``'s reason, or ``None``.
        now: the database clock (for "clear for 40s").

    Returns:
        ``"no rule"`` (gray; line "No rule covers this figure.") when none watches it; a
        gray ``"state unknown"`` when the file is invalid or alerting is down (the line says
        which); ``"not evaluated yet"`` for a rule without state; ``"ok · payment-failed"``
        with the line ``"payment-failed [payment.%, per event type]: no instance"`` for a
        ``by`` rule with no instance.
    """
    if ruleset is None:
        return Badge("state unknown", "gray", "Rules file invalid: see above.", "")
    rules = [rule for rule in ruleset.rules if rule.metric == metric]
    if not rules:
        return Badge(
            "no rule",
            "gray",
            "No rule covers this figure.",
            f"No rule of {ruleset.path or 'the rules file'} watches {metric}.",
        )
    if down is not None:
        return Badge("state unknown", "gray", "Alerting is not running: see above.", down)
    found: list[tuple[int, str, str, str]] = []  # (rank, state, rule, line) per rule
    for rule in rules:
        rows = [row for row in instances if row["rule"] == rule.name]
        if not rows:
            state = "inactive" if rule.by else "not evaluated yet"
            line = f"{rule.name}{_scope(rule)}" + (": no instance" if rule.by else "")
            rank = SEVERITY.index(state) if rule.by else len(SEVERITY)
            found.append((rank, state, rule.name, line))
            continue
        worst = min(rows, key=lambda row: SEVERITY.index(row["state"]))
        same = sum(1 for row in rows if row["state"] == worst["state"])
        line = instance_line(rule, worst, now)
        if same > 1 and worst["state"] != "inactive":
            line = f"{rule.name}{_scope(rule)}: {same} instances"
        found.append((SEVERITY.index(worst["state"]), worst["state"], rule.name, line))
    found.sort(key=lambda item: item[0])
    _, state, name, line = found[0]
    detail = "\n".join(f"{LABELS.get(s, s)} · {text}" for _, s, _, text in found)
    return Badge(f"{LABELS.get(state, state)} · {name}", COLORS.get(state, "gray"), line, detail)
