"""Reading alerts.yml: ``load_rules(path)`` parses it (PyYAML's safe loader; duplicate keys,
anchors and aliases refused, at most ``MAX_RULES_FILE_BYTES``), refuses secrets written into
it, validates it with the model of ``alerts.rules`` and returns a ``RuleSet`` whose durations
are seconds. Every problem is reported at once, one per line, naming the file, the rule and
the field (``alerts.yml: rules[2] "payment-failed": threshold: expected a number or a
duration, got "abc"``), as a ``RulesError``. ``resolve_rules_path`` finds the file.
"""

import difflib
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import yaml
from pydantic import (
    BaseModel,
    ValidationError,
)

from outbox_monitor.alerts.rule_values import SECRET_PATTERNS, quoted
from outbox_monitor.alerts.rules import Defaults, Route, Rule, RuleSet
from outbox_monitor.errors import ConfigError

DEFAULT_RULES_PATH = "alerts.yml"
"""The rules file looked for in the current directory when none is named."""
RULES_ENV = "OUTBOX_MONITOR_RULES"
"""Environment variable naming the rules file (overrides ``alerts.yml`` in the cwd)."""
SHIPPED_RULES_PATH = Path(__file__).resolve().parents[2] / "alerts.yml"
"""The repository's alerts.yml (SPEC §3 rules), the last fallback."""
MAX_NESTING = 20
"""Deepest nesting of alerts.yml (it needs 4: rules, a rule, labels, a value)."""
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


class _Refused(yaml.MarkedYAMLError):
    """Valid YAML that alerts.yml does not accept (an anchor, an alias, absurd nesting)."""


class _RulesLoader(yaml.SafeLoader):
    """PyYAML's safe loader, refusing duplicate keys (a silent "last one wins" hides
    typos), anchors and aliases (``&name``/``*name``/``<<: *name``: a recursive alias or a
    "billion laughs" expansion would hang or crash every reader of the file, and alerts.yml
    needs no reuse: ``defaults`` covers it, as Alertmanager's config has no anchors either),
    and nesting deeper than ``MAX_NESTING``."""

    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        self._depth = 0

    def compose_node(self, parent: yaml.Node | None, index: Any) -> yaml.Node:
        event = self.peek_event()
        if isinstance(event, yaml.AliasEvent):
            raise _Refused(None, None, f"alias *{event.anchor}: {_NO_ANCHORS}", event.start_mark)
        if event.anchor is not None:
            raise _Refused(None, None, f"anchor &{event.anchor}: {_NO_ANCHORS}", event.start_mark)
        if self._depth >= MAX_NESTING:
            raise _Refused(None, None, f"nested deeper than {MAX_NESTING} levels", event.start_mark)
        self._depth += 1
        try:
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict:
        seen: set[Any] = set()
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=deep)
            if isinstance(key, list | dict):
                continue  # unhashable: the base class reports it
            if key in seen:
                raise yaml.constructor.ConstructorError(
                    None, None, f"duplicate key {quoted(key)}", key_node.start_mark
                )
            seen.add(key)
        return super().construct_mapping(node, deep=deep)


_NO_ANCHORS = "YAML anchors and aliases are not allowed in a rules file; write the value out"
_RulesLoader.add_constructor(
    yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _RulesLoader.construct_mapping
)


def _parse_yaml(path: str | Path, text: str) -> Any:
    try:
        # _RulesLoader is a SafeLoader subclass: safe_load semantics, no arbitrary objects
        return yaml.load(text, Loader=_RulesLoader)
    except _Refused as error:
        mark = error.problem_mark
        raise RulesError(
            path, [f"line {mark.line + 1}, column {mark.column + 1}: {error.problem}"]
        ) from None
    except yaml.MarkedYAMLError as error:
        mark = error.problem_mark or error.context_mark
        where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark else ""
        problem = error.problem or error.context or "unreadable"
        if error.context and error.problem and error.context_mark:
            line, column = error.context_mark.line + 1, error.context_mark.column + 1
            problem += f" ({error.context} at line {line}, column {column})"
        raise RulesError(path, [f"{where}invalid YAML: {problem}"]) from None
    except yaml.YAMLError as error:
        raise RulesError(path, [f"invalid YAML: {error}"]) from None


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


_MODELS: dict[str, type[BaseModel]] = {"defaults": Defaults, "routes": Route, "rules": Rule}


def _allowed_keys(loc: tuple) -> list[str]:
    model = RuleSet if len(loc) == 1 else _MODELS.get(loc[0], RuleSet)
    return [field.alias or name for name, field in model.model_fields.items()]


def _describe(error: dict[str, Any]) -> str:
    kind, value = error["type"], error.get("input")
    if kind == "missing":
        return "required"
    if kind == "extra_forbidden":
        allowed = _allowed_keys(error["loc"])
        close = difflib.get_close_matches(str(error["loc"][-1]), allowed, n=1)
        hint = f'; did you mean "{close[0]}"?' if close else ""
        return f"unknown key{hint} (allowed: {', '.join(allowed)})"
    plain = {
        "string_type": "text",
        "int_type": "a whole number",
        "int_parsing": "a whole number",
        "int_from_float": "a whole number",
        "float_type": "a number",
        "float_parsing": "a number",
        "bool_type": "true or false",
        "dict_type": "a mapping (key: value)",
        "model_type": "a mapping (key: value)",
        "model_attributes_type": "a mapping (key: value)",
        "list_type": "a list",
        "tuple_type": "a list",
    }
    if kind in plain:
        return f"expected {plain[kind]}, got {quoted(value)}"
    message = error["msg"]
    return message.removeprefix("Value error, ")


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
        return where + (f": {_dotted(rest)}" if rest else "")
    return _dotted(loc)


def _dotted(loc: tuple) -> str:
    text = ""
    for part in loc:
        if isinstance(part, int):
            text += f"[{part}]"
        elif part == "[key]":
            continue
        else:
            text += f".{part}" if text else str(part)
    return text


def _order(loc: tuple, data: Any) -> tuple:
    sections = ["version", "defaults", "routes", "rules"]
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


def _reference_problems(data: dict[str, Any]) -> list[tuple[tuple, str]]:
    """Checks across entries, made on the raw data so they show with every other problem:
    unique rule names, and each rule's route defined under ``routes``."""
    problems: list[tuple[tuple, str]] = []
    rules, routes = data.get("rules"), data.get("routes")
    if not isinstance(rules, list):
        return problems
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


def load_rules(path: str | Path) -> RuleSet:
    """Load and validate an alerts.yml (issue 3 §1).

    Args:
        path: the rules file.

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
        with Path(path).open("rb") as file:
            raw = file.read(MAX_RULES_FILE_BYTES + 1)
            size = max(len(raw), os.fstat(file.fileno()).st_size)
    except OSError as error:
        raise RulesError(path, [f"cannot read the rules file: {error.strerror or error}"]) from None
    if size > MAX_RULES_FILE_BYTES:
        raise RulesError(
            path,
            [
                f"the rules file is {size:,} bytes, over the limit of "
                f"{MAX_RULES_FILE_BYTES:,} bytes (MAX_RULES_FILE_BYTES; alerts.yml needs a "
                "few KB): is it the right file?"
            ],
        )
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise RulesError(path, ["cannot read the rules file: not UTF-8 text"]) from None
    data = _parse_yaml(path, text)
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
    problems.extend(_reference_problems(data))
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
    ``alerts.yml`` in the current directory, else the repository's shipped alerts.yml.

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
