"""Alerting across a fleet of outboxes (issue 16 item 3): which outboxes a rule selects, the
labels an outbox gives its alert instances, the route a notification takes by its labels, and
the ``?outbox=`` of a message's dashboard links.

An outbox's alert state is keyed by ``Database.alert_outbox`` (its name in the fleet file;
``""`` without one, so a fleet of one keeps the keys and labels it had before fleets): the
``outbox`` column of its rows (migration 017), and its stored instance keys
(``scoped_instance``), so that its dedupe keys differ from another outbox's of the database.
"""

from collections.abc import Mapping
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit

from outbox_monitor.alerts.rules import Rule, RuleSet
from outbox_monitor.alerts.silences import OUTBOX_MATCHER, matches
from outbox_monitor.config.fleet import SINGLE, Outbox

OUTBOX_LABEL = OUTBOX_MATCHER
"""The label (and dashboard query parameter) naming an instance's outbox."""
LINKED_PATHS = ("dashboard_path", "timeline_path", "pause_path")
"""The payload's dashboard paths, which carry ``?outbox=NAME`` with a fleet file."""


def scoped_instance(key: str, instance: str) -> str:
    """The instance key stored for an outbox's instance: ``instance`` itself without a fleet
    file; else scoped by the outbox, as a label set: ``outbox=orders`` for ``""``,
    ``outbox=orders,event_type=order.paid`` for ``event_type=order.paid``."""
    if not key:
        return instance
    scope = f"{OUTBOX_LABEL}={key}"
    return f"{scope},{instance}" if instance else scope


def unscoped_instance(key: str, stored: str) -> str:
    """The instance key of a stored one (``scoped_instance``'s inverse): ``event_type=…``
    or ``""``, as the rules and pages know it."""
    scope = f"{OUTBOX_LABEL}={key}"
    if not key or not stored.startswith(scope):
        return stored
    return stored.removeprefix(scope).removeprefix(",")


def outbox_name(outbox: Outbox | None, key: str) -> str:
    """The outbox's name for rule selection: ``outbox.name``, else the alert key, else
    ``fleet.SINGLE`` (the single outbox of the ``OUTBOX_MONITOR_*`` settings)."""
    return outbox.name if outbox is not None else key or SINGLE


def rule_selects(rule: Rule, outbox: Outbox | None, key: str = "") -> bool:
    """Whether ``rule`` applies to the outbox: no ``outboxes`` (every one), its name in
    the list, or every label of the mapping equal to the outbox's (``None``: the single
    outbox named ``default``, without labels)."""
    selector = rule.outboxes
    if selector is None:
        return True
    if isinstance(selector, tuple):
        return outbox_name(outbox, key) in selector
    labels = outbox.labels if outbox is not None else {}
    return all(labels.get(name) == value for name, value in selector.items())


def selected_rules(ruleset: RuleSet, outbox: Outbox | None, key: str = "") -> list[Rule]:
    """The rules of ``ruleset`` that apply to the outbox, in file order."""
    return [rule for rule in ruleset.rules if rule_selects(rule, outbox, key)]


def scope_labels(outbox: Outbox | None, key: str) -> dict[str, str]:
    """The labels the outbox adds to its instances: with a fleet file (``key`` not ``""``)
    its labels and ``outbox=<key>``; without one none (today's labels)."""
    if not key:
        return {}
    labels = dict(outbox.labels) if outbox is not None else {}
    return {**labels, OUTBOX_LABEL: key}


def with_scope(labels: Mapping[str, str], scope: Mapping[str, str]) -> dict[str, str]:
    """An instance's labels with its outbox's: the outbox's labels give way to the rule's
    and the measurement's, the ``outbox`` label to none."""
    merged = {**scope, **labels}
    if OUTBOX_LABEL in scope:
        merged[OUTBOX_LABEL] = scope[OUTBOX_LABEL]
    return merged


def routes_for(ruleset: RuleSet, name: str, labels: Mapping[str, str]) -> list[str]:
    """The routes a notification of the rule's route ``name`` takes, in order, each once:
    its ``routes`` whose matchers ``labels`` satisfy (``silences.matches``: equality, LIKE
    with ``%``), up to and including the first matching branch without ``continue``
    (Alertmanager's routing); ``[name]`` when none matches."""
    route = ruleset.routes.get(name)
    found: list[str] = []
    for branch in route.routes if route is not None else ():
        if matches(branch.matchers, labels):
            found.append(branch.route)
            if not branch.continue_:
                break
    return list(dict.fromkeys(found)) or [name]


def link_outbox(path: str | None, key: str) -> str | None:
    """A dashboard path with ``outbox=<key>`` in its query, so a click opens that outbox
    (``/dead_letters?event_type=a`` → ``/dead_letters?event_type=a&outbox=orders``);
    unchanged without a fleet file (``key`` ``""``) or a path."""
    if not key or not path:
        return path
    parts = urlsplit(path)
    query = [(k, v) for k, v in parse_qsl(parts.query, keep_blank_values=True) if k != OUTBOX_LABEL]
    query.append((OUTBOX_LABEL, key))
    return f"{parts.path or '/'}?{urlencode(query)}"


def scope_payload(payload: dict[str, Any], key: str) -> dict[str, Any]:
    """A notification payload of the outbox ``key``: its ``outbox`` named and its dashboard
    paths (``LINKED_PATHS``) carrying ``?outbox=``; unchanged without a fleet file."""
    if not key:
        return payload
    payload[OUTBOX_LABEL] = key
    for field in LINKED_PATHS:
        if payload.get(field):
            payload[field] = link_outbox(payload[field], key)
    return payload
