"""The Overview's alerting (issue 15 item 3): each tile's badge as the state its rules were
left in by the evaluator — never a judgement of the tile's own figure — from the rules whose
scope contains what the tile shows, each named with its scope ("FIRING for all types: 89",
"ok for payment.% over 15m only"; ``alerts.coverage.relation``, issue 30 item 4), and the
lines of an instance that the badges and the firing alerts (``ui.firing_alerts``) say.

Everything comes from ``outbox_monitor.alert_instances`` (``alert_loaders.alert_instances``)
and the evaluator lease: when no scheduler evaluates (stalled, or never started), the badges
say so instead of showing stale states.
"""

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from outbox_monitor.alerts import coverage
from outbox_monitor.alerts.notification_text import held_note
from outbox_monitor.alerts.outbox_scope import selected_rules
from outbox_monitor.alerts.rules import Rule, RuleSet
from outbox_monitor.alerts.stall import LeaseStatus, describe_stall
from outbox_monitor.store.db import Database
from outbox_monitor.ui import format, state
from outbox_monitor.units import format_value

# Worst first: the state a badge shows when a figure's rules disagree.
SEVERITY = ("firing", "error", "pending", "inactive")
COLORS = {"firing": "red", "error": "orange", "pending": "orange", "inactive": "green"}
LABELS = {"firing": "FIRING", "error": "ERROR", "pending": "pending", "inactive": "ok"}
NEVER_EVALUATED = "no scheduler has evaluated the rules yet"
NO_RULE = "no rule watches this"
"""A tile's badge when no rule's scope contains what it shows (``coverage.relation``)."""
RULE_PARAM, INSTANCE_PARAM = "rule", "instance"
"""The Alerts page's URL parameters that focus its state table on one rule instance."""


@dataclass(frozen=True)
class Badge:
    """A tile's badge: ``text`` under the value (short: the state and whose scope it is, so
    that it fits the tile), ``color`` of ``st.metric(delta_color=…)``, ``line`` (the rule's
    scope, value vs condition, or why there is no state: a caption under the tile) and
    ``detail`` (one line per rule, for the tile's help)."""

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


def for_outbox(ruleset: RuleSet | None, db: Database) -> RuleSet | None:
    """The rules of ``ruleset`` that apply to the outbox of ``db`` (``outbox_scope``'s
    ``selected_rules``: a rule's ``outboxes`` by name or labels of the fleet file), so that a
    badge, a status or a firing alert never speaks of a rule scoped to another outbox.
    ``None`` stays ``None`` (the file is invalid)."""
    if ruleset is None:
        return None
    key = db.alert_outbox
    outbox = state.fleet().get(key) if key else None
    rules = selected_rules(ruleset, outbox, key)
    if len(rules) == len(ruleset.rules):
        return ruleset
    return ruleset.model_copy(update={"rules": rules})


def _scope(rule: Rule) -> str:
    return f" [{coverage.scope_text(rule)}]"


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
    """One instance for people: ``"backlog [all types, per event type] order.paid: 1,200 vs >
    1,000"`` (its scope: ``coverage.scope_text``) with, when firing but clear, that
    keep_firing_for holds it open (``held_open``), and when pending, for how long of its
    ``for``."""
    instance = str(row.get("instance") or "").removeprefix("event_type=")
    value = format_value(row.get("value"), rule.unit)
    text = f"{rule.name}{_scope(rule)}{' ' + instance if instance else ''}: {value}"
    text += f" vs {rule.condition}"
    if row.get("state") == "error":
        text = f"{rule.name}: cannot be evaluated"
    held = held_open(rule, row, now)
    return f"{text} ({held})" if held else text


@dataclass(frozen=True)
class _Said:
    """What one rule (``name``) says of a tile: its ``rank`` (``SEVERITY``'s index; after
    them, not evaluated yet), ``state``, ``relation`` to the tile (``coverage.CONTAINS`` or
    ``PART``), ``short`` (the badge's words: ``"FIRING for all types: 89"``) and ``line``
    (the caption: the rule, its scope, value vs condition)."""

    name: str
    rank: int
    state: str
    relation: str
    short: str
    line: str


def _short(
    rule: Rule,
    state: str,
    rows: Sequence[Mapping[str, Any]],
    related: str,
    shown: coverage.Shown,
    default_window: float,
) -> str:
    """``"FIRING for all types: 89"``, ``"ok for payment.% over 15m only"``, ``"FIRING for
    order.paid: 3"`` (one ``by`` instance, or the tile's one type), ``"FIRING for 2 event
    types"``, ``"ok for each payment.% type"``: the value only when the words name the one
    instance it is of, and it has one."""
    one = len(rows) == 1
    exact = shown.event_type if shown.event_type and "%" not in shown.event_type else None
    if rule.spec.scope == "table":
        words = "the table"
    elif not rule.by:
        words = rule.event_type or coverage.ALL_TYPES
    elif exact is not None and related == coverage.CONTAINS:
        words = exact  # its one instance the tile shows, if any
    elif rows and state != "inactive":
        label = (rows[0].get("labels") or {}).get("event_type")
        words = str(label) if one else format.plural(len(rows), "event type")
    else:
        one = False  # its instances are ok: none speaks for the rest
        words = f"each {rule.event_type} type" if rule.event_type else "each type"
    window = coverage.rule_window(rule, default_window)
    if window is not None and window != shown.window:
        words += f" over {format.duration_label(window)}"
    if related == coverage.PART:
        words += " only"
    known = one and state != "error" and rows[0].get("value") is not None
    value = f": {rule.format(rows[0]['value'])}" if known else ""
    return f"{LABELS.get(state, state)} for {words}{value}"


def _said(
    rule: Rule,
    instances: Sequence[Mapping[str, Any]],
    related: str,
    shown: coverage.Shown,
    default_window: float,
    now: datetime | None,
) -> _Said:
    """What a rule containing or watching part of a tile says of it: its worst instance
    among those whose rows the tile shows (``coverage.instance_shown``)."""
    rows = [
        row for row in instances if row["rule"] == rule.name and coverage.instance_shown(row, shown)
    ]
    if not rows:
        state = "inactive" if rule.by else "not evaluated yet"
        line = f"{rule.name}{_scope(rule)}" + (": no instance" if rule.by else "")
        rank = SEVERITY.index(state) if rule.by else len(SEVERITY)
        short = _short(rule, state, [], related, shown, default_window)
        return _Said(rule.name, rank, state, related, short, line)
    worst = min(rows, key=lambda row: SEVERITY.index(row["state"]))
    same = [row for row in rows if row["state"] == worst["state"]]
    line = instance_line(rule, worst, now)
    if len(same) > 1 and worst["state"] != "inactive":
        line = f"{rule.name}{_scope(rule)}: {len(same)} instances"
    short = _short(rule, worst["state"], same, related, shown, default_window)
    return _Said(rule.name, SEVERITY.index(worst["state"]), worst["state"], related, short, line)


def badge(
    metric: str,
    ruleset: RuleSet | None,
    instances: Sequence[Mapping[str, Any]],
    *,
    down: str | None,
    now: datetime | None,
    event_type: str | None = None,
    window: float | None = None,
    default_window: float,
) -> Badge:
    """The badge of a tile showing ``metric``: the state of the rules on that metric whose
    scope contains what the tile shows, each as its evaluator left it and named with its
    scope (``coverage.relation``; issue 30 item 4).

    Args:
        metric: the tile's ``alerts.yml`` metric.
        ruleset: the loaded rules; ``None`` when the file is invalid.
        instances: ``alerts.state.list_instances`` rows.
        down: ``alerting_down``'s reason, or ``None``.
        now: the database clock (for "clear for 40s").
        event_type: the tile's event-type filter (``None``: all types).
        window: the seconds of the tile's figure (``None``: it has no window).
        default_window: seconds a rule without ``window`` measures a windowed figure over
            (``OUTBOX_MONITOR_WINDOW``).

    Returns:
        The worst state of the rules containing the tile — ``"FIRING for all types: 89"``
        with the caption ``"stuck-lock [all types]: 89 vs > 0"``, ``"ok for all types: 2"``,
        ``"not evaluated yet for all types"`` — unless a rule watching only part of it is
        firing, pending or in error, which then heads it, saying so (``"FIRING for
        payment.% over 15m only: 3"``). ``"no rule watches this"`` (gray) when no rule
        contains it: a rule watching part of it that is ok is in the caption (``"No rule
        watches all of this; payment-failed: ok for each payment.% type over 15m only"``),
        never the badge. A gray ``"state unknown"`` when the file is invalid or alerting is
        down (the line says which).
    """
    if ruleset is None:
        return Badge("state unknown", "gray", "Rules file invalid: see above.", "")
    shown = coverage.Shown(event_type, window)
    rules = [rule for rule in ruleset.rules if rule.metric == metric]
    related = {rule.name: coverage.relation(rule, shown, default_window) for rule in rules}
    apart = [
        f"watches other rows · {rule.name} [{coverage.scope_text(rule)}]"
        for rule in rules
        if related[rule.name] == coverage.APART
    ]
    watching = [rule for rule in rules if related[rule.name] != coverage.APART]
    if not watching:
        return Badge(
            NO_RULE,
            "gray",
            "No rule watches this figure.",
            "\n".join(apart) or f"No rule of {ruleset.path or 'the rules file'} watches {metric}.",
        )
    if down is not None:
        return Badge("state unknown", "gray", "Alerting is not running: see above.", down)
    said = [
        _said(rule, instances, related[rule.name], shown, default_window, now) for rule in watching
    ]
    detail = "\n".join([*(f"{s.short} · {s.line}" for s in said), *apart])
    heads = [
        s
        for s in said
        if s.relation == coverage.CONTAINS or s.state in ("firing", "error", "pending")
    ]
    if not heads:
        parts = "; ".join(f"{s.name}: {s.short}" for s in said)
        return Badge(NO_RULE, "gray", f"No rule watches all of this; {parts}", detail)
    head = min(heads, key=lambda s: (s.rank, s.relation != coverage.CONTAINS))
    return Badge(head.short, COLORS.get(head.state, "gray"), head.line, detail)
