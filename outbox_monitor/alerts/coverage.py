"""Whose verdict a status or a badge is (issue 15 item 1, issue 30 item 4): the state of the
rules whose scope — outbox, event-type filter, window — contains what a tile or a table row
shows, each named with that scope; a rule watching other rows never gives it a bare "ok".

An event type's status label (``verdict``) comes only from a firing instance whose scope
contains the type, named with the rule that set it; otherwise it is "healthy" when a rule
covering it is ok; with no rule watching it apart, "FIRING for all types" or "ok for all
types" from the rules over all types, which hold its rows too; "no rule covers it" only when
no rule does. A tile's rules are sorted by ``relation``:
containing what it shows, watching only part of it, or other rows apart.

Pure: it reads the persisted instances (``alerts.state.list_instances``) and the loaded
rules; a rule's scope is its own (``Rule.covers``), never computed again here. A rule that
watches the whole outbox or table (``Rule.scoped`` false: the SPEC §3 backlog) gives no event
type a label of its own: ``unscoped_firing`` lists its firing instances, shown above the
table.
"""

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from outbox_monitor.alerts.rules import Rule, RuleSet
from outbox_monitor.durations import duration_label
from outbox_monitor.flow.model import matches

LABELS: dict[str, str] = {
    "failed_in_window": "failing",
    "attempts_at_least": "failing",
    "stuck_locks": "stuck",
    "processing": "stuck",
    "rows_held": "paused",
    "breaker_open": "paused",
}
"""The label a firing rule of that metric gives; every other metric of the outbox's rows
(depth, age, latency, throughput, throttled rows) gives ``BACKLOGGED``."""
BACKLOGGED = "backlogged"
SEVERITY = ("failing", "stuck", "paused", BACKLOGGED)
"""Labels from the worst; a type with several firing rules shows the worst and names all."""
HEALTHY = "healthy"
UNKNOWN = "unknown"
"""A covering rule's instance is in error (its value could not be measured)."""
ALL_FIRING = "FIRING for all types"
ALL_OK = "ok for all types"
"""A type no rule watches apart, whose rows the rules over all types contain: one of them is
firing, or none is (the tiles' words, ``ui.rule_state``)."""
UNCOVERED = "no rule covers it"
NO_RULES = "rules file invalid"


@dataclass(frozen=True)
class Verdict:
    """An event type's ``label`` (one of ``SEVERITY``, ``HEALTHY``, ``UNKNOWN``,
    ``ALL_FIRING``, ``ALL_OK``, ``UNCOVERED``, ``NO_RULES``) and ``rules``: the rules that set
    it — the firing ones (``"payment-failed"``), else the covering ones that are ok or in
    error."""

    label: str
    rules: tuple[str, ...] = ()


def label_of(metric: str) -> str:
    """The label a firing rule of ``metric`` gives (``LABELS``, else ``BACKLOGGED``)."""
    return LABELS.get(metric, BACKLOGGED)


def _contains(rule: Rule, instance: Mapping[str, Any], event_type: str) -> bool:
    """Whether the instance's scope contains the type: a ``by: [event_type]`` instance holds
    exactly its own type (its ``event_type`` label) — or, for a figure whose instances are
    the controls' filters (``breaker_open``), the types that filter matches — and a rule's
    single instance every type the rule covers (its labels name the rule's filter)."""
    if not rule.by:
        return rule.covers(event_type)
    own = (instance.get("labels") or {}).get("event_type")
    if own is None:
        return False
    # a figure whose instances are control filters (breaker_open), not event types
    return matches(own, event_type) if rule.spec.candidates else own == event_type


def _covering(rule: Rule, instances: Sequence[Mapping[str, Any]], event_type: str) -> bool:
    """Whether the rule watches the type: its scope covers it (``Rule.covers``) and, for a
    figure whose instances are the controls' filters, one of its instances matches it."""
    if not rule.covers(event_type):
        return False
    if not rule.spec.candidates:
        return True
    return any(row["rule"] == rule.name and _contains(rule, row, event_type) for row in instances)


def verdict(
    event_type: str, instances: Iterable[Mapping[str, Any]], ruleset: RuleSet | None
) -> Verdict:
    """The status of one event type from the rules' own state.

    Args:
        event_type: the type as stored.
        instances: ``alerts.state.list_instances``'s rows (rule, instance, labels, state).
        ruleset: the loaded alerts.yml; ``None`` when it is invalid (``NO_RULES``).

    Returns:
        The worst label of the firing instances whose scope contains the type, with their
        rules; else ``UNKNOWN`` when a covering rule's instance for it is in error; else
        ``HEALTHY`` with the covering rules; else, when rules over all types of the outbox's
        rows contain it (``Rule.scoped`` false; not the table's), ``ALL_FIRING`` with the
        firing ones or ``ALL_OK`` with them all; else ``UNCOVERED``. A rule whose instances
        are the controls' filters (``breaker_open``) covers only the types one of its
        instances matches: a type that no breaker watches is not "healthy" by it.
    """
    if ruleset is None:
        return Verdict(NO_RULES)
    instances = list(instances)
    rules = {rule.name: rule for rule in ruleset.rules}
    covering = [rule.name for rule in ruleset.rules if _covering(rule, instances, event_type)]
    firing: dict[str, list[str]] = {}
    errors = []
    for instance in instances:
        rule = rules.get(instance["rule"])
        if rule is None or not _contains(rule, instance, event_type):
            continue
        if instance["state"] == "firing":
            firing.setdefault(label_of(rule.metric), []).append(rule.name)
        elif instance["state"] == "error":
            errors.append(rule.name)
    for label in SEVERITY:
        if label in firing:
            names = [name for worst in SEVERITY for name in firing.get(worst, ())]
            return Verdict(label, tuple(dict.fromkeys(names)))
    if errors:
        return Verdict(UNKNOWN, tuple(dict.fromkeys(errors)))
    if covering:
        return Verdict(HEALTHY, tuple(covering))
    return _all_types(instances, ruleset)


def _all_types(instances: Sequence[Mapping[str, Any]], ruleset: RuleSet) -> Verdict:
    """The verdict of the rules over all types of the outbox's rows for a type none watches
    apart: they contain its rows too (never "no rule covers it" beside them)."""
    whole = [
        rule.name for rule in ruleset.rules if rule.spec.scope == "event_type" and not rule.scoped
    ]
    if not whole:
        return Verdict(UNCOVERED)
    firing = [row["rule"] for row in instances if row["rule"] in whole and row["state"] == "firing"]
    if firing:
        return Verdict(ALL_FIRING, tuple(dict.fromkeys(firing)))
    return Verdict(ALL_OK, tuple(whole))


def worst(verdicts: Sequence[Verdict]) -> Verdict:
    """One verdict for several event types (the folded ``other`` row): the worst label, the
    rules of every verdict with that label."""
    order = (*SEVERITY, UNKNOWN, ALL_FIRING, HEALTHY, ALL_OK, UNCOVERED, NO_RULES)
    if not verdicts:
        return Verdict(UNCOVERED)
    label = min((v.label for v in verdicts), key=order.index)
    names = [name for v in verdicts if v.label == label for name in v.rules]
    return Verdict(label, tuple(dict.fromkeys(names)))


def firing_event_types(
    instances: Iterable[Mapping[str, Any]], ruleset: RuleSet | None
) -> list[str]:
    """The event types a firing ``by: [event_type]`` instance names (ranked first in the
    table)."""
    by_rules = {rule.name for rule in ruleset.rules if rule.by} if ruleset else set()
    names = [
        (instance.get("labels") or {}).get("event_type")
        for instance in instances
        if instance["state"] == "firing" and instance["rule"] in by_rules
    ]
    return sorted({name for name in names if name})


def unscoped_firing(
    instances: Iterable[Mapping[str, Any]], ruleset: RuleSet | None
) -> list[dict[str, Any]]:
    """The firing instances of rules that label no event type (``Rule.scoped`` false: the
    whole outbox, or the table), in rule order: each instance row with its ``Rule`` under
    ``"rule_model"``."""
    if ruleset is None:
        return []
    rules = {rule.name: rule for rule in ruleset.rules if not rule.scoped}
    return [
        {**instance, "rule_model": rules[instance["rule"]]}
        for instance in instances
        if instance["state"] == "firing" and instance["rule"] in rules
    ]


# ------------------------------------------------------------- scopes, for people and tiles

CONTAINS, PART, APART = "contains", "part", "apart"
"""How a rule's scope stands to what a tile shows (``relation``): it contains all of it, it
watches only part of it (other types too perhaps, or another window), or other rows only."""
ALL_TYPES = "all types"


def scope_text(rule: Rule) -> str:
    """A rule's scope in words: ``"all types"``, ``"payment.%, per event type, over 15m"``,
    ``"the table"``, ``"all types, forecast 30m"``, ``"each breaker's filter"`` — its
    event-type filter (or all event types, the whole table, or for a figure whose instances
    are the controls' filters, ``breaker_open``, those), ``by``, its window when it has one,
    its ``predict``."""
    if rule.spec.scope == "table":
        parts = ["the table"]
    elif rule.spec.candidates is not None:  # its instances are the controls' filters
        within = f" within {rule.event_type}" if rule.event_type else ""
        return f"each breaker's filter{within}"
    else:
        parts = [rule.event_type or ALL_TYPES]
    if rule.by:
        parts.append("per event type")
    if rule.window is not None:
        parts.append(f"over {duration_label(rule.window)}")
    if rule.predict is not None:
        parts.append(f"forecast {duration_label(rule.predict)}")
    return ", ".join(parts)


def set_by(found: Verdict, ruleset: RuleSet | None) -> str:
    """The rules of a verdict, named with their scope (``scope_text``), those of one scope
    together: ``"payment-failed [payment.%, per event type, over 15m]"``, ``"backlog,
    stuck-lock [all types]; latency-slo [all types, over 1h]"``; ``"–"`` when none."""
    rules = {rule.name: rule for rule in ruleset.rules} if ruleset is not None else {}
    scopes: dict[str, list[str]] = {}
    for name in found.rules:
        scope = f" [{scope_text(rules[name])}]" if name in rules else ""
        scopes.setdefault(scope, []).append(name)
    return "; ".join(f"{', '.join(names)}{scope}" for scope, names in scopes.items()) or "–"


@dataclass(frozen=True)
class Shown:
    """What a tile shows: its ``event_type`` filter (``None``: all types; exact, or LIKE with
    ``%``, SPEC §2) and its ``window`` in seconds (``None``: the figure has none)."""

    event_type: str | None = None
    window: float | None = None


def _ends(pattern: str) -> tuple[str, str]:
    """A LIKE pattern's literal text before its first ``%`` and after its last one."""
    return pattern.split("%", 1)[0], pattern.rsplit("%", 1)[-1]


def types_relation(watched: str | None, shown: str | None) -> str:
    """How a rule's event-type filter stands to a tile's (SPEC §2: LIKE with ``%``, else
    equality; ``None``: all types).

    Returns:
        ``CONTAINS`` when every type the tile shows is one the rule watches (no filter, the
        same filter, an exact type it matches, or a pattern within a ``prefix%`` or
        ``%suffix`` one); ``APART`` when none can be (an exact type it does not match,
        patterns whose literal ends differ); else ``PART``.
    """
    if watched is None or watched == shown:
        return CONTAINS
    if shown is None:
        return PART
    if "%" not in shown:
        return CONTAINS if matches(watched, shown) else APART
    if "%" not in watched:
        return PART if matches(shown, watched) else APART
    (watched_head, watched_tail), (shown_head, shown_tail) = _ends(watched), _ends(shown)
    if watched.count("%") == 1 and (
        (watched_tail == "" and shown_head.startswith(watched_head))
        or (watched_head == "" and shown_tail.endswith(watched_tail))
    ):
        return CONTAINS
    heads = shown_head.startswith(watched_head) or watched_head.startswith(shown_head)
    tails = shown_tail.endswith(watched_tail) or watched_tail.endswith(shown_tail)
    return PART if heads and tails else APART


def rule_window(rule: Rule, default_window: float) -> float | None:
    """The seconds a rule's figure is measured over: its ``window``, else
    ``default_window`` (``OUTBOX_MONITOR_WINDOW``) for a figure whose window is optional;
    ``None`` for a figure without one."""
    if rule.spec.window == "none":
        return None
    return rule.window if rule.window is not None else default_window


def relation(rule: Rule, shown: Shown, default_window: float) -> str:
    """How a rule's scope stands to what a tile shows: ``CONTAINS``, ``PART`` or ``APART``
    (``types_relation`` of the event-type filters; a figure of the whole table contains
    every tile of it; a windowed figure over another window than the tile's is ``PART`` at
    most — a rule on 15 min of failures says nothing of 24 h of them)."""
    if rule.spec.scope == "table":
        return CONTAINS
    types = types_relation(rule.event_type, shown.event_type)
    if types == APART:
        return APART
    window = rule_window(rule, default_window)
    if window is not None and shown.window is not None and window != shown.window:
        return PART
    return types


def instance_shown(instance: Mapping[str, Any], shown: Shown) -> bool:
    """Whether a rule instance's rows are among what a tile shows: an instance of one event
    type (its ``event_type`` label) only when the tile's filter holds that type; a rule's
    single instance always (``relation`` says how its scope stands)."""
    own = (instance.get("labels") or {}).get("event_type")
    return own is None or shown.event_type is None or matches(shown.event_type, own)
