"""alerts.yml's ``inhibit``: while an alert fires, mute the notifications of others it
explains (Alertmanager's ``inhibit_rules``), validated with the entry and field named.

One entry::

    inhibit:
      - source_matchers: {rule: breaker-open}
        target_matchers: {event_type: "%"}
        equal: [event_type]

reads "while an instance matching ``source_matchers`` fires, an instance matching
``target_matchers`` whose ``equal`` labels have the same values is inhibited". The matching
is ``alerts.inhibition``'s; this module is the model and the checks across the file (a
``rule`` matcher naming no rule).
"""

import re
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, WithJsonSchema, field_validator

from outbox_monitor.alerts.rule_values import LABEL_MAP_SCHEMA, check_label_map, fail, quoted

OWN_SOURCES = ("database-unreachable", "alerting-stalled")
"""The scheduler's own alerts an entry's ``source_matchers`` may name (``outage.RULE_NAME``,
``stall.RULE_NAME``): labelled ``rule``, ``severity: critical`` and, with a fleet file,
``outbox``."""
_LABEL_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


class InhibitRule(BaseModel):
    """One inhibition: while an alert matching ``source_matchers`` fires, the notifications
    of the alerts matching ``target_matchers`` that share its ``equal`` labels are
    suppressed (they still change state and show on the dashboard, marked with what
    inhibits them). An alert never inhibits itself, a source of lower severity never
    inhibits a target of higher (``warning`` never mutes ``critical``), and a resolve of an
    alert that was notified is always sent. A ``type: alertmanager`` route is not affected
    (Alertmanager inhibits by its own ``inhibit_rules``)."""

    model_config = ConfigDict(extra="forbid", frozen=True, use_attribute_docstrings=True)

    source_matchers: Annotated[dict[str, str], WithJsonSchema(LABEL_MAP_SCHEMA)]
    """Label: value, every one of which a firing alert must have to inhibit (a value with
    ``%`` is a LIKE pattern, as in silences and route matchers). Labels: ``rule``,
    ``severity``, ``event_type``, the rule's ``labels``; with a fleet file ``outbox`` and
    the outbox's labels. The scheduler's own ``database-unreachable`` and
    ``alerting-stalled`` are sources too (``rule``, ``severity: critical``, ``outbox``)."""
    target_matchers: Annotated[dict[str, str], WithJsonSchema(LABEL_MAP_SCHEMA)]
    """Label: value, every one of which an alert must have to be inhibited (as
    ``source_matchers``)."""
    equal: Annotated[
        tuple[str, ...],
        WithJsonSchema(
            {
                "type": "array",
                "items": {"type": "string", "pattern": _LABEL_NAME.pattern},
            }
        ),
    ] = Field(default_factory=tuple)
    """Label names that source and target must both have, with the same value (a label
    missing on either side never matches: one event type's breaker cannot mute the whole
    outbox's backlog)."""

    @field_validator("source_matchers", "target_matchers", mode="before")
    @classmethod
    def _check_matchers(cls, value: Any, info: Any) -> Any:
        return check_label_map(info.field_name, value, example="{rule: breaker-open}")

    @field_validator("equal", mode="before")
    @classmethod
    def _check_equal(cls, value: Any) -> Any:
        if not isinstance(value, list):
            expected = "expected a list of label names, e.g. [event_type]"
            raise fail("equal", f"{expected}; got {quoted(value)}")
        for name in value:
            if not isinstance(name, str) or not _LABEL_NAME.match(name):
                raise fail("equal", f"label name {quoted(name)}: expected letters, digits and _")
        twice = [name for index, name in enumerate(value) if name in value[:index]]
        if twice:
            raise fail("equal", f"label {quoted(twice[0])} named twice")
        return tuple(value)


def inhibit_problems(data: Any) -> list[tuple[tuple, str]]:
    """Checks of ``inhibit`` across the file (raw data, so they show with every other
    problem): a ``rule`` matcher without ``%`` names a rule of the file — in
    ``source_matchers`` also one of ``OWN_SOURCES`` —, else it would never match.

    Returns:
        ``[(location, message)]`` as ``rules_file.load_rules`` reports them.
    """
    if not isinstance(data, dict) or not isinstance(data.get("inhibit"), list):
        return []
    rules = data.get("rules")
    names = [r.get("name") for r in rules if isinstance(r, dict)] if isinstance(rules, list) else []
    problems: list[tuple[tuple, str]] = []
    for index, entry in enumerate(data["inhibit"]):
        for field in ("source_matchers", "target_matchers"):
            matchers = entry.get(field) if isinstance(entry, dict) else None
            wanted = matchers.get("rule") if isinstance(matchers, dict) else None
            if not isinstance(wanted, str) or "%" in wanted:
                continue
            known = [*names, *OWN_SOURCES] if field == "source_matchers" else names
            if wanted not in known:
                problems.append(
                    (
                        ("inhibit", index, field),
                        f"rule: unknown rule {quoted(wanted)} (rules: "
                        f"{', '.join(map(str, known))}); the entry would never match",
                    )
                )
    return problems
