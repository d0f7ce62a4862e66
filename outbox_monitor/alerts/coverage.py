"""What the alert rules say of one event type (issue 15 item 1): its status label comes only
from a firing instance whose scope contains the type, named with the rule that set it;
otherwise it is "healthy" when a rule covering it is ok, or "no rule covers it".

Pure: it reads the persisted instances (``alerts.state.list_instances``) and the loaded
rules; a rule's scope is its own (``Rule.covers``), never computed again here. A rule that
watches the whole outbox or table (``Rule.scoped`` false: the SPEC §3 backlog) labels no
event type: ``unscoped_firing`` lists its firing instances, shown above the table.
"""

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from outbox_monitor.alerts.rules import Rule, RuleSet
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
UNCOVERED = "no rule covers it"
NO_RULES = "rules file invalid"


@dataclass(frozen=True)
class Verdict:
    """An event type's ``label`` (one of ``SEVERITY``, ``HEALTHY``, ``UNKNOWN``,
    ``UNCOVERED``, ``NO_RULES``) and ``rules``: the rules that set it — the firing ones
    (``"payment-failed"``), else the covering ones that are ok or in error."""

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
        ``HEALTHY`` with the covering rules; else ``UNCOVERED``.
    """
    if ruleset is None:
        return Verdict(NO_RULES)
    rules = {rule.name: rule for rule in ruleset.rules}
    covering = [rule.name for rule in ruleset.rules if rule.covers(event_type)]
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
    return Verdict(HEALTHY, tuple(covering)) if covering else Verdict(UNCOVERED)


def worst(verdicts: Sequence[Verdict]) -> Verdict:
    """One verdict for several event types (the folded ``other`` row): the worst label, the
    rules of every verdict with that label."""
    order = (*SEVERITY, UNKNOWN, HEALTHY, UNCOVERED, NO_RULES)
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
