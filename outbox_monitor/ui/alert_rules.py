"""The Alerts page's rules and how each stands: the rules file as loaded (and the banner
for a broken one), the "alerting is stalled" banner, one row per rule instance for the
state table, and the rules' windows that the sidebar must offer (issue 3 §4).

The instances come from ``alerts.state`` through ``alert_loaders``; nothing here writes.
"""

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from functools import lru_cache
from pathlib import Path
from typing import Any

import streamlit as st

from outbox_monitor.alerts.notification_text import held_note
from outbox_monitor.alerts.rules import Rule, RuleSet
from outbox_monitor.alerts.rules_file import RulesError, load_rules, resolve_rules_path
from outbox_monitor.alerts.stall import LeaseStatus, describe_stall
from outbox_monitor.alerts.write_health import WritesFailing, describe_writes_failing
from outbox_monitor.durations import duration_label
from outbox_monitor.ui import format
from outbox_monitor.ui.format import Column
from outbox_monitor.units import format_value

NOT_EVALUATED = "not evaluated yet"
NO_INSTANCE = "no instance"
STATE_LABELS = {
    "firing": "FIRING",
    "error": "ERROR",
    "pending": "pending",
    "inactive": "ok",
    NOT_EVALUATED: NOT_EVALUATED,
    NO_INSTANCE: "no instance (no event type with matching rows)",
}
"""How the state table writes states: the ones that page in capitals."""
VALIDATE_COMMAND = "outbox-monitor alerts validate"


# ----------------------------------------------------------------------- the rules file


@dataclass(frozen=True)
class LoadedRules:
    """The rules file the page uses: its ``path``, the ``ruleset`` when it is valid, else
    the ``error`` (a ``RulesError`` whose ``problems`` name file, rule and field)."""

    path: str
    ruleset: RuleSet | None
    error: RulesError | None = None


@lru_cache(maxsize=8)
def _load(path: str, content: bytes | None) -> LoadedRules:
    try:
        return LoadedRules(path, load_rules(path))
    except RulesError as error:
        return LoadedRules(path, None, error)


def load_ruleset(path: str | Path | None = None) -> LoadedRules:
    """Load the rules file (``rules_file.resolve_rules_path``: ``OUTBOX_MONITOR_RULES``, else
    ``./alerts.yml``, else the shipped one), again whenever its content changes.

    Returns:
        A ``LoadedRules``; never raises for a broken file (the error is in ``error``).
    """
    resolved = resolve_rules_path(path)
    try:
        content: bytes | None = resolved.read_bytes()
    except OSError:
        content = None
    return _load(str(resolved), content)


def show_rules_error(loaded: LoadedRules) -> None:
    """A red banner for an unusable rules file: every problem line (file, rule, field) and
    the command that checks the fixed file. No traceback."""
    assert loaded.error is not None
    count = len(loaded.error.problems)
    st.error(
        f"**Alert rules file invalid** — {format.md_code(loaded.path)} has "
        f"{format.plural(count, 'problem')}; no rule is shown or evaluated from it.",
        icon=":material/rule:",
    )
    st.code("\n".join(loaded.error.problems), language=None, wrap_lines=True)
    check = format.md_code(f"{VALIDATE_COMMAND} --rules {loaded.path}")
    st.info(
        f"Fix the file, then check it with {check} "
        "(it prints every problem, or a one-line summary when the file is valid); restart "
        "the scheduler to evaluate the fixed rules.",
        icon=":material/build:",
    )


def show_stall(lease: LeaseStatus, ruleset: RuleSet | None) -> None:
    """A red "Alerting is stalled" banner when no evaluation completed for more than 3
    intervals (``alerts.stall.describe_stall``); nothing otherwise or without rules.

    Args:
        lease: ``alert_loaders.evaluator_lease``.
        ruleset: the loaded rules (their interval sets the threshold), or ``None``.
    """
    text = None if ruleset is None else describe_stall(lease, ruleset.defaults.interval)
    if text:
        st.error(
            f"**Alerting is stalled** — {format.md_text(text)}",
            icon=":material/notifications_off:",
        )


def show_writes_failing(reading: WritesFailing) -> None:
    """A red "The scheduler cannot write" banner while a scheduler's writes fail
    (``alerts.write_health.describe_writes_failing``); nothing otherwise.

    Args:
        reading: ``alert_loaders.writes_failing``.
    """
    text = describe_writes_failing(reading)
    if text:
        st.error(
            f"**The scheduler cannot write** — {format.md_text(text)}",
            icon=":material/edit_off:",
        )


# ----------------------------------------------------------------------- rule instances


def describe_metric(rule: Rule) -> str:
    """The figure a rule watches: ``"failed_in_window 15m · payment.% · by event_type"``,
    ``"queue_depth · forecast 15m ahead"`` for a ``predict`` rule (its value is the forecast)."""
    parts = [rule.metric + (f" {format.duration_label(rule.window)}" if rule.window else "")]
    if rule.attempts is not None:
        parts[0] += f" ≥ {rule.attempts}"
    if rule.event_type:
        parts.append(rule.event_type)
    if rule.by:
        parts.append("by " + ", ".join(rule.by))
    if rule.predict is not None:
        parts.append(f"forecast {format.duration_label(rule.predict)} ahead")
    return " · ".join(parts)


def describe_outboxes(rule: Rule) -> str:
    """The outboxes of a fleet a rule applies to (``Rule.outboxes``, ``alerts.outbox_scope``):
    ``"all"`` without a selector, the names (``"orders, billing"``), or the labels that must
    all match (``"team=payments"``)."""
    selector = rule.outboxes
    if selector is None:
        return "all"
    if isinstance(selector, tuple):
        return ", ".join(selector)
    return ", ".join(f"{name}={value}" for name, value in selector.items())


def _since(row: Mapping[str, Any], now: datetime | None) -> str:
    """When the instance entered its state (firing/pending since, else its last
    transition), with how long ago."""
    state = row.get("state")
    instant = {
        "firing": row.get("firing_since"),
        "pending": row.get("pending_since"),
    }.get(state) or row.get("changed_at")
    if instant is None:
        return format.NO_VALUE
    text = format.instant(instant)
    if now is not None and now >= instant:
        text += f" ({format.duration((now - instant).total_seconds())} ago)"
    return text


def state_rows(
    ruleset: RuleSet | None,
    instances: Sequence[Mapping[str, Any]],
    now: datetime | None,
    outbox: str = "",
) -> list[dict[str, Any]]:
    """One row per rule instance for the state table, rules in file order.

    Args:
        ruleset: the loaded rules (``None`` when the file is invalid: instances only).
        instances: ``alerts.state.list_instances`` rows.
        now: the database clock, for "(3m ago)".
        outbox: the shown outbox's alert key (``Database.alert_outbox``): with a fleet file
            (not ``""``) each row also says which outboxes its rule applies to.

    Returns:
        Dicts with rule, outboxes (with a fleet file only: ``describe_outboxes``, ``–`` for a
        rule not in the file), instance (``"all"`` for a rule without ``by``), state (label with
        icon; a firing instance back within its threshold says that keep_firing_for holds
        it, ``held_note``), value and condition (in the rule's unit), since (when the
        instance entered its state: firing_since / pending_since, else its last transition),
        metric, for,
        keep_firing_for, severity, route, last_evaluated, error. A rule of the file the
        evaluator has no state for gets one row: "not evaluated yet", or for a ``by`` rule
        "no instance" (no event type has rows its figure counts); an instance of a
        rule no longer in the file (or of the database-unreachable alert) is listed after
        the file's rules with metric "(not in the rules file)".
    """
    rules = {rule.name: rule for rule in ruleset.rules} if ruleset else {}
    by_rule: dict[str, list[Mapping[str, Any]]] = {}
    for row in instances:
        by_rule.setdefault(row["rule"], []).append(row)
    names = list(rules) + [name for name in by_rule if name not in rules]
    table = []
    for name in names:
        rule = rules.get(name)
        empty = NO_INSTANCE if rule and rule.by else NOT_EVALUATED
        for row in by_rule.get(name) or [{"rule": name, "instance": "", "state": empty}]:
            unit = rule.unit if rule else "rows"
            state = row.get("state") or empty
            since = _since(row, now)
            threshold = rule.threshold if rule else row.get("threshold")
            op = rule.op if rule else ""
            label = STATE_LABELS.get(state, state)
            held = (
                held_note(rule.keep_firing_for, state, row.get("cleared_since"), now)
                if rule
                else ""
            )
            applies = describe_outboxes(rule) if rule else format.NO_VALUE
            table.append(
                {
                    "rule": name,
                    **({"outboxes": applies} if outbox else {}),
                    "instance": row.get("instance") or "all",
                    "state": f"{label} ({held})" if held else label,
                    "value": format_value(row.get("value"), unit),
                    "condition": f"{op} {format_value(threshold, unit)}".strip()
                    if threshold is not None
                    else format.NO_VALUE,
                    "since": since,
                    "metric": describe_metric(rule) if rule else "(not in the rules file)",
                    "for": format.duration_label(rule.for_) if rule else format.NO_VALUE,
                    "keep_firing_for": format.duration_label(rule.keep_firing_for)
                    if rule
                    else format.NO_VALUE,
                    "severity": rule.severity if rule else format.NO_VALUE,
                    "route": rule.route if rule else format.NO_VALUE,
                    "last_evaluated": format.instant(row.get("last_evaluated_at")),
                    "error": row.get("error") or "",
                }
            )
    return table


_DETAIL_COLUMNS = [
    Column("metric", "figure"),
    Column("for", "for"),
    Column("keep_firing_for", "keep firing for"),
    Column("route", "route"),
    Column("last_evaluated", "last evaluated"),
    Column("error", "evaluation error"),
]


def state_columns(fleet: bool) -> list[Column]:
    """The state table's columns (``format.grid``) for ``state_rows(…, outbox)``: with a
    fleet file (``fleet``: its ``outbox`` is not ``""``) the outboxes a rule applies to are
    shown second and its condition moves to a chosen row's detail, with the rule's figure,
    timings, route, last evaluation and error."""
    shown = [
        Column("rule", "rule", 140),
        *([Column("outboxes", "outboxes", 120)] if fleet else []),
        Column("instance", "instance", 160, help="The event type or labels of a rule with `by`."),
        Column("state", "state", 120),
        Column("value", "value", 90, help="The rule's figure at its last evaluation, in its unit."),
        *([] if fleet else [Column("condition", "condition", 100)]),
        Column("since", "since", 245, help="When the instance entered its state."),
        Column("severity", "severity", 70 if fleet else 75),
    ]
    return shown + ([Column("condition", "condition")] if fleet else []) + _DETAIL_COLUMNS


def focus_rows(
    rows: Sequence[Mapping[str, Any]], rule: str | None, instance: str | None
) -> list[Mapping[str, Any]]:
    """The state table's rows of one rule (and instance: ``""`` or ``"all"`` for a rule
    without ``by``), as a link from the Overview's firing alerts asks
    (``?rule=…&instance=…``); every row when ``rule`` is ``None``."""
    if not rule:
        return list(rows)
    wanted = None if instance is None else (instance or "all")
    return [
        row for row in rows if row["rule"] == rule and (wanted is None or row["instance"] == wanted)
    ]


def state_counts(instances: Sequence[Mapping[str, Any]]) -> dict[str, int]:
    """How many instances are firing, pending, in error and ok (``inactive``)."""
    counts = dict.fromkeys(("firing", "pending", "error", "inactive"), 0)
    for row in instances:
        counts[row["state"]] = counts.get(row["state"], 0) + 1
    return counts


def latest_evaluation(instances: Sequence[Mapping[str, Any]]) -> datetime | None:
    """The newest ``last_evaluated_at`` of any instance (``None``: never evaluated)."""
    times = [row["last_evaluated_at"] for row in instances if row.get("last_evaluated_at")]
    return max(times) if times else None


def rule_windows(ruleset: RuleSet | None) -> list[str]:
    """The windows of the rules as the dashboard URL writes them (``"15m"``), sorted: the
    sidebar's window choices must offer each, or a link from Slack falls back to the
    default window."""
    if ruleset is None:
        return []
    seconds = sorted({rule.window for rule in ruleset.rules if rule.window})
    return [duration_label(value) for value in seconds]
