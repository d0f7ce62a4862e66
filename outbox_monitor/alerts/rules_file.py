"""Reading alerts.yml: ``load_rules(path)`` parses it (PyYAML's safe loader reading YAML 1.2;
anchors and aliases refused, at most ``MAX_RULES_FILE_BYTES``), refuses secrets written into
it, validates it with the model of ``alerts.rules`` and returns a ``RuleSet`` whose durations
are seconds. Every problem is reported at once, one per line, naming the file, the rule and
the field (``alerts.yml: rules[2] "payment-failed": threshold: expected a number or a
duration, got "abc"``), as a ``RulesError``. ``resolve_rules_path`` finds the file.
"""

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from pydantic import (
    BaseModel,
    ValidationError,
)

from outbox_monitor.alerts.inhibit_model import InhibitRule, inhibit_problems
from outbox_monitor.alerts.route_model import Route, RouteBranch
from outbox_monitor.alerts.rule_values import SECRET_PATTERNS, quoted
from outbox_monitor.alerts.rules import Defaults, Rule, RuleSet
from outbox_monitor.config.fleet import Fleet
from outbox_monitor.config.yaml_files import YamlProblem, describe, dotted, read_yaml
from outbox_monitor.errors import ConfigError
from outbox_monitor.shipped import shipped_folder

DEFAULT_RULES_PATH = "alerts.yml"
"""The rules file looked for in the current directory when none is named."""
RULES_ENV = "OUTBOX_MONITOR_RULES"
"""Environment variable naming the rules file (overrides ``alerts.yml`` in the cwd)."""
SHIPPED_RULES_PATH = shipped_folder() / "alerts.yml"
"""The shipped alerts.yml (SPEC §3 rules; the checkout's root, or the installed wheel's
``outbox_monitor/app``), the last fallback."""
MAX_RULES_FILE_BYTES = 256 * 1024
"""The largest alerts.yml read (the shipped one is 2 KB; a thousand rules fit): a larger
file is refused before it is parsed, so loading stays under ≈ 0.5 s (PyYAML parses
≈ 0.5 MB a second)."""
MAX_LISTED_PROBLEMS = 100
"""Problems listed one per line; more are counted in one last line."""


class RulesError(ConfigError):
    """alerts.yml cannot be used. ``str(error)`` lists every problem, one per line, each
    ``<file>: <where>: <field>: <message>``; ``problems`` holds those lines."""

    hint = (
        "Fix the rules file, then check it with `outbox-monitor alerts validate` "
        "(alerts.yml format: see the shipped alerts.yml and SPEC §2–3)."
    )

    def __init__(self, path: str | Path, problems: list[str]) -> None:
        self.path = str(path)
        self.problems = [f"{self.path}: {problem}" for problem in problems]
        super().__init__("\n".join(self.problems))


def _walk(value: Any, loc: tuple = ()) -> Iterator[tuple[tuple, str]]:
    if isinstance(value, dict):
        for key, item in value.items():
            yield from _walk(item, (*loc, key))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            yield from _walk(item, (*loc, index))
    elif isinstance(value, str):
        yield loc, value


def _secret_problems(data: Any) -> list[tuple[tuple, str]]:
    found = []
    for loc, text in _walk(data):
        for pattern, message in SECRET_PATTERNS:
            if pattern.search(text):
                found.append((loc, message))
                break
    return found


_MODELS: dict[str, type[BaseModel]] = {
    "defaults": Defaults,
    "routes": Route,
    "rules": Rule,
    "inhibit": InhibitRule,
}


def _allowed_keys(loc: tuple) -> list[str]:
    model = RuleSet if len(loc) == 1 else _MODELS.get(loc[0], RuleSet)
    if len(loc) > 4 and loc[0] == "routes" and loc[2] == "routes":
        model = RouteBranch
    return [field.alias or name for name, field in model.model_fields.items()]


def _describe(error: dict[str, Any]) -> str:
    return describe(error, _allowed_keys(error["loc"]))


def _where(loc: tuple, data: Any) -> str:
    """``rules[2] "payment-failed": threshold``, ``routes.oncall.channel``, ``defaults.for``."""
    if not loc:
        return ""
    head, rest = loc[0], loc[1:]
    if head == "rules" and rest and isinstance(rest[0], int):
        index, rest = rest[0], rest[1:]
        name = None
        rules = data.get("rules") if isinstance(data, dict) else None
        if isinstance(rules, list) and index < len(rules) and isinstance(rules[index], dict):
            name = rules[index].get("name")
        where = f"rules[{index}]" + (f" {quoted(name)}" if isinstance(name, str) else "")
        return where + (f": {dotted(rest)}" if rest else "")
    return dotted(loc)


def _order(loc: tuple, data: Any) -> tuple:
    sections = ["version", "defaults", "routes", "rules", "inhibit"]
    head = loc[0] if loc else ""
    rank = sections.index(head) if head in sections else -1
    second = 0
    if len(loc) > 1:
        if isinstance(loc[1], int):
            second = loc[1]
        elif isinstance(data, dict) and isinstance(data.get(head), dict):
            keys = list(data[head])
            second = keys.index(loc[1]) if loc[1] in keys else 0
    return (rank, second)


def _branch_problems(routes: Any) -> list[tuple[tuple, str]]:
    """Each route's ``routes`` (label-matched branches) name a route defined under
    ``routes``, not the route itself, and one without branches of its own (one level)."""
    problems: list[tuple[tuple, str]] = []
    if not isinstance(routes, dict):
        return problems
    for name, route in routes.items():
        branches = route.get("routes") if isinstance(route, dict) else None
        for index, branch in enumerate(branches if isinstance(branches, list) else []):
            target = branch.get("route") if isinstance(branch, dict) else None
            if not isinstance(target, str) or not target:
                continue
            loc = ("routes", name, "routes", index, "route")
            if target not in routes:
                known = ", ".join(routes)
                problems.append((loc, f'unknown route "{target}" (routes: {known})'))
            elif target == name:
                problems.append((loc, f'"{target}" is this route itself; name another route'))
            elif isinstance(routes[target], dict) and routes[target].get("routes"):
                problems.append(
                    (
                        loc,
                        f'route "{target}" has routes of its own; a branch leads to a route '
                        "without routes (one level)",
                    )
                )
    return problems


def _outbox_problems(rules: list[Any], fleet: Fleet | None) -> list[tuple[tuple, str]]:
    """A rule's ``outboxes`` names outboxes of the fleet file, or its labels match at least one
    of them, when there is a file (a selector matching none would silence the rule)."""
    if fleet is None or fleet.path is None:
        return []
    problems: list[tuple[tuple, str]] = []
    outboxes = fleet.in_file
    names = [outbox.name for outbox in outboxes]
    for index, rule in enumerate(rules):
        selector = rule.get("outboxes") if isinstance(rule, dict) else None
        if isinstance(selector, dict) and all(isinstance(v, str) for v in selector.values()):
            if not any(
                all(outbox.labels.get(k) == v for k, v in selector.items()) for outbox in outboxes
            ):
                wanted = ", ".join(f"{k}={v}" for k, v in selector.items())
                problems.append(
                    (
                        ("rules", index, "outboxes"),
                        f"no outbox of {fleet.path} has the labels {wanted} (the rule would "
                        "never evaluate; name outboxes in a list, e.g. "
                        f"[{', '.join(names[:2])}], or use labels they have)",
                    )
                )
            continue
        if not isinstance(selector, list):
            continue
        for name in selector:
            if isinstance(name, str) and name not in names:
                problems.append(
                    (
                        ("rules", index, "outboxes"),
                        f'unknown outbox "{name}" ({fleet.path} lists {", ".join(names)})',
                    )
                )
    return problems


def _reference_problems(data: dict[str, Any], fleet: Fleet | None) -> list[tuple[tuple, str]]:
    """Checks across entries, made on the raw data so they show with every other problem:
    unique rule names, each rule's route defined under ``routes``, each route branch's
    route (``_branch_problems``), and the outboxes rules name (``_outbox_problems``)."""
    rules, routes = data.get("rules"), data.get("routes")
    problems = _branch_problems(routes)
    if not isinstance(rules, list):
        return problems
    problems.extend(_outbox_problems(rules, fleet))
    first_index: dict[str, int] = {}
    for index, rule in enumerate(rules):
        if not isinstance(rule, dict):
            continue
        name = rule.get("name")
        if isinstance(name, str):
            if name in first_index:
                problems.append(
                    (
                        ("rules", index, "name"),
                        f'duplicate rule name "{name}" (also rules[{first_index[name]}]); '
                        "rule names must be unique",
                    )
                )
            else:
                first_index[name] = index
        route = rule.get("route")
        if isinstance(route, str) and route and (routes is None or isinstance(routes, dict)):
            defined = list(routes or {})
            if route not in defined:
                known = ", ".join(defined) if defined else "none defined"
                problems.append(
                    (("rules", index, "route"), f'unknown route "{route}" (routes: {known})')
                )
    return problems


def load_rules(path: str | Path, fleet: Fleet | None = None) -> RuleSet:
    """Load and validate an alerts.yml (issue 3 §1).

    Args:
        path: the rules file.
        fleet: the outboxes the rules run on: with a fleet file (``fleet.path``) a rule's
            ``outboxes`` naming an outbox it does not list is a problem; without one
            (``None``, or a fleet of one from the ``OUTBOX_MONITOR_*`` settings) names are
            not checked, and a rule naming outboxes applies only to one named ``default``.

    Returns:
        A ``RuleSet``: durations in seconds, each rule's ``for_``/``keep_firing_for``
        resolved from ``defaults``, ``path`` set.

    Raises:
        RulesError: the file is unreadable, larger than ``MAX_RULES_FILE_BYTES``, not
            YAML or holds an anchor, an alias or
            nesting deeper than ``MAX_NESTING`` (the line is named), holds a
            secret-looking value, or breaks the schema; every problem at once, one per
            line: ``<file>: rules[<i>] "<name>": <field>: <message>``,
            ``<file>: routes.<name>.<field>: …`` or ``<file>: defaults.<field>: …``;
            past ``MAX_LISTED_PROBLEMS`` lines, one more counts the rest.
    """
    try:
        data = read_yaml(
            path,
            what="rules file",
            max_bytes=MAX_RULES_FILE_BYTES,
            size_note="(MAX_RULES_FILE_BYTES; alerts.yml needs a few KB): is it the right file?",
        )
    except YamlProblem as problem:
        raise RulesError(path, problem.problems) from None
    if data is None:
        raise RulesError(path, ["the file is empty; expected version, defaults, routes, rules"])
    if not isinstance(data, dict):
        raise RulesError(
            path,
            [f"expected a mapping with version, defaults, routes, rules; got {quoted(data)}"],
        )

    problems: list[tuple[tuple, str]] = _secret_problems(data)
    secret_locs = {loc for loc, _ in problems}
    ruleset: RuleSet | None = None
    try:
        ruleset = RuleSet.model_validate(data)
    except ValidationError as error:
        for item in error.errors():
            loc = tuple(item["loc"])
            if not any(loc[: len(secret)] == secret for secret in secret_locs):
                problems.append((loc, _describe(item)))
    problems.extend(_reference_problems(data, fleet))
    problems.extend(inhibit_problems(data))
    if problems:
        ranked = sorted(enumerate(problems), key=lambda p: (*_order(p[1][0], data), p[0]))
        lines = list(
            dict.fromkeys(  # de-duplicated, in order
                f"{where}: {message}" if (where := _where(loc, data)) else message
                for _, (loc, message) in ranked
            )
        )
        if len(lines) > MAX_LISTED_PROBLEMS:
            more = len(lines) - MAX_LISTED_PROBLEMS
            lines[MAX_LISTED_PROBLEMS:] = [
                f"… and {more:,} more problems (fix the first {MAX_LISTED_PROBLEMS} and "
                "validate again)"
            ]
        raise RulesError(path, lines)

    assert ruleset is not None
    resolved = [
        rule.model_copy(
            update={
                "for_": ruleset.defaults.for_ if rule.for_ is None else rule.for_,
                "keep_firing_for": ruleset.defaults.keep_firing_for
                if rule.keep_firing_for is None
                else rule.keep_firing_for,
            }
        )
        for rule in ruleset.rules
    ]
    result = ruleset.model_copy(update={"rules": resolved})
    result._path = str(path)
    return result


def resolve_rules_path(path: str | Path | None = None) -> Path:
    """The rules file to use: ``path`` if given, else ``$OUTBOX_MONITOR_RULES``, else
    ``alerts.yml`` in the current directory, else the shipped alerts.yml
    (``SHIPPED_RULES_PATH``).

    Returns:
        A path (it may not exist when named explicitly; ``load_rules`` then says so).
    """
    if path:
        return Path(path)
    if os.environ.get(RULES_ENV):
        return Path(os.environ[RULES_ENV])
    local = Path(DEFAULT_RULES_PATH)
    if local.is_file():
        return local
    return SHIPPED_RULES_PATH
