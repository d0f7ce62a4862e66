"""Reading the product's YAML files (alerts.yml, the controls file, the fleet file) strictly
and saying exactly what is wrong: PyYAML's safe loader reading YAML 1.2 (as the editors and
check-jsonschema that check a file against its JSON Schema do), refusing duplicate keys,
anchors, aliases and deep nesting; a size limit checked before parsing; pydantic errors in
plain words; secret-looking text recognised (``SECRET_PATTERNS``), a value quoted for a
problem line, never a secret (``quoted``), and the durations of alerts.yml and the controls
file (``Duration``, ``PositiveDuration``: pydantic types whose errors say what is wrong,
``fail``).

Callers turn a ``YamlProblem`` into their own error class (``RulesError``, ``ControlsError``),
which prefixes the file's path to each problem.
"""

import difflib
import json
import os
import re
from pathlib import Path
from typing import Annotated, Any, ClassVar

import yaml
from pydantic import BeforeValidator, WithJsonSchema
from pydantic_core import PydanticCustomError

from outbox_monitor.durations import duration_json_schema, parse_duration

MAX_NESTING = 20
"""Deepest nesting accepted (alerts.yml needs 4: rules, a rule, labels, a value)."""

# Secret-looking values (issue 3 §1): refused anywhere in the file.
SECRET_PATTERNS: tuple[tuple[re.Pattern[str], str], ...] = (
    (
        re.compile(r"hooks\.slack(?:-gov)?\.com/(?:services|workflows|triggers)/", re.I),
        "looks like a Slack webhook URL; secrets do not belong in alerts.yml: put the URL "
        "in an environment variable and name it with the route's webhook_url_env",
    ),
    (
        re.compile(r"\bxox[abprs]-[A-Za-z0-9-]{4,}|\bxapp-\d-[A-Za-z0-9-]{4,}"),
        "looks like a Slack token; secrets do not belong in alerts.yml: put it in the "
        "SLACK_BOT_TOKEN environment variable",
    ),
    (
        re.compile(r"\b[a-z][a-z0-9+.-]*://[^/\s:@]+:[^/\s@]+@", re.I),
        "looks like a URL or DSN with a password; secrets do not belong in alerts.yml: "
        "put it in an environment variable",
    ),
    (
        re.compile(r"\bpassword\s*=\s*\S", re.I),
        "looks like a connection string with a password; secrets do not belong in "
        "alerts.yml: put it in an environment variable",
    ),
)


def quoted(value: Any) -> str:
    """A YAML value inside a message: strings quoted, secrets never echoed."""
    if isinstance(value, str):
        if any(pattern.search(value) for pattern, _ in SECRET_PATTERNS):
            return '"<redacted secret>"'
        text = value if len(value) <= 60 else value[:57] + "..."
        return json.dumps(text, ensure_ascii=False)
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, dict):
        return "a mapping"
    if isinstance(value, list):
        return "a list"
    return str(value)


def fail(kind: str, message: str) -> PydanticCustomError:
    """The validation error of one field: its ``kind`` and the ``message`` people read."""
    return PydanticCustomError(kind, message)


def to_duration(value: Any, *, example: str = "90s, 15m or 1h") -> float:
    """A duration (``90s``, ``15m``, a number of seconds) in seconds; ``fail`` otherwise."""
    if isinstance(value, bool) or value is None or isinstance(value, list | dict):
        raise fail("duration", f"expected a duration such as {example}, got {quoted(value)}")
    try:
        return parse_duration(value)
    except ValueError:
        raise fail(
            "duration", f"expected a duration such as {example}, got {quoted(value)}"
        ) from None


DURATION_SCHEMA = duration_json_schema()
Duration = Annotated[float, BeforeValidator(to_duration), WithJsonSchema(DURATION_SCHEMA)]


def positive_duration(value: Any) -> float:
    """``to_duration``, refusing ``0s`` and less."""
    seconds = to_duration(value)
    if seconds <= 0:
        raise fail("duration", f"must be longer than 0s, got {quoted(value)}")
    return seconds


POSITIVE_DURATION_SCHEMA = duration_json_schema(positive=True)
PositiveDuration = Annotated[
    float, BeforeValidator(positive_duration), WithJsonSchema(POSITIVE_DURATION_SCHEMA)
]


class YamlProblem(Exception):
    """The file cannot be used; ``problems`` holds one line each, without the path."""

    def __init__(self, problems: list[str]) -> None:
        self.problems = problems
        super().__init__("\n".join(problems))


class _Refused(yaml.MarkedYAMLError):
    """Valid YAML that the product's files do not accept (an anchor, an alias, deep nesting)."""


_CORE_SCHEMA = {
    "null": ("~nN", r"~|null|Null|NULL|"),  # and the empty value
    "bool": ("tTfF", r"true|True|TRUE|false|False|FALSE"),
    "int": ("-+0123456789", r"[-+]?[0-9]+|0o[0-7]+|0x[0-9a-fA-F]+"),
    "float": (
        "-+.0123456789",
        r"[-+]?(?:\.[0-9]+|[0-9]+(?:\.[0-9]*)?)(?:[eE][-+]?[0-9]+)?|[-+]?\.(?:inf|Inf|INF)"
        r"|\.(?:nan|NaN|NAN)",
    ),
}
"""The plain scalars YAML 1.2's core schema reads as other than text (tag: first characters,
pattern), int before float: ``1e3`` is a number, ``yes``, ``no``, ``on``, ``off``, ``1:30``
and ``2024-01-01`` are text, ``017`` is 17. PyYAML's own resolvers are YAML 1.1's."""


def _core_resolvers(loader_or_dumper: type) -> None:
    """Give a PyYAML loader or dumper class the resolvers of YAML 1.2's core schema (besides
    any it has already)."""
    for tag, (first, pattern) in _CORE_SCHEMA.items():
        regexp = re.compile(f"^(?:{pattern})$")
        first_characters = [*first, ""] if tag == "null" else list(first)
        loader_or_dumper.add_implicit_resolver(f"tag:yaml.org,2002:{tag}", regexp, first_characters)


class _CoreLoader(yaml.SafeLoader):
    """PyYAML's safe loader reading YAML 1.2 (core schema): only ``_CORE_SCHEMA``'s plain
    scalars are other than text (``<<`` is a key like any other: no merge keys)."""

    yaml_implicit_resolvers: ClassVar[dict] = {}  # none of YAML 1.1's

    def construct_yaml_int(self, node: yaml.ScalarNode) -> int:
        # YAML 1.1's constructor reads 017 as octal (15); YAML 1.2 as decimal
        text = self.construct_scalar(node)
        try:
            return (
                int(text[2:], 8 if text[1] == "o" else 16)
                if text[:2] in ("0o", "0x")
                else int(text)
            )
        except ValueError:
            raise yaml.constructor.ConstructorError(
                None, None, f"not a whole number: {quoted(text)}", node.start_mark
            ) from None


_core_resolvers(_CoreLoader)
_CoreLoader.add_constructor("tag:yaml.org,2002:int", _CoreLoader.construct_yaml_int)


class _Dumper(yaml.SafeDumper):
    """PyYAML's safe dumper quoting any text YAML 1.1 or 1.2 reads as another type (``yes``,
    ``1e3``), so that the product's loader and every other reader read it back as text."""


_core_resolvers(_Dumper)


def dump_yaml(document: Any) -> str:
    """``document`` (plain data: mappings, lists, text, numbers, booleans, ``None``) as YAML
    text that ``read_yaml`` reads back as it is, keys in their order."""
    return yaml.dump(document, Dumper=_Dumper, sort_keys=False, allow_unicode=True)


class StrictLoader(_CoreLoader):
    """PyYAML's safe loader reading YAML 1.2 (``_CoreLoader``), refusing duplicate keys (a
    silent "last one wins" hides typos), anchors and aliases (``&name``/``*name``/``<<:
    *name``: a recursive alias or a "billion laughs" expansion would hang or crash every
    reader of the file, and no file of ours needs reuse, as Alertmanager's config has no
    anchors either), and nesting deeper than ``MAX_NESTING``. ``what`` names the file kind in
    messages ("rules file")."""

    what = "file"

    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        self._depth = 0

    def compose_node(self, parent: yaml.Node | None, index: Any) -> yaml.Node:
        event = self.peek_event()
        refusal = f"YAML anchors and aliases are not allowed in a {self.what}; write the value out"
        if isinstance(event, yaml.AliasEvent):
            raise _Refused(None, None, f"alias *{event.anchor}: {refusal}", event.start_mark)
        if event.anchor is not None:
            raise _Refused(None, None, f"anchor &{event.anchor}: {refusal}", event.start_mark)
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


StrictLoader.add_constructor(
    yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, StrictLoader.construct_mapping
)


def read_yaml(path: str | Path, *, what: str, max_bytes: int, size_note: str) -> Any:
    """Read and parse one YAML file strictly.

    Args:
        path: the file.
        what: its kind in messages ("rules file", "controls file").
        max_bytes: the largest file read; a larger one is refused before parsing.
        size_note: what follows the limit in that refusal (its name, what is normal).

    Returns:
        The parsed document (``None`` for an empty file).

    Raises:
        YamlProblem: unreadable, too large, not UTF-8, not YAML, or refused by
            ``StrictLoader`` — the line and column named.
    """
    try:
        with Path(path).open("rb") as file:
            raw = file.read(max_bytes + 1)
            size = max(len(raw), os.fstat(file.fileno()).st_size)
    except OSError as error:
        raise YamlProblem([f"cannot read the {what}: {error.strerror or error}"]) from None
    if size > max_bytes:
        raise YamlProblem(
            [f"the {what} is {size:,} bytes, over the limit of {max_bytes:,} bytes {size_note}"]
        )
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise YamlProblem([f"cannot read the {what}: not UTF-8 text"]) from None
    return parse_yaml(text, what=what)


def parse_yaml(text: str, *, what: str = "file") -> Any:
    """Parse one YAML document strictly (``StrictLoader``: YAML 1.2, no duplicate keys,
    anchors, aliases or deep nesting), as ``read_yaml`` reads a file.

    Args:
        text: the document.
        what: its kind in messages ("rules file").

    Returns:
        The parsed document (``None`` for an empty one).

    Raises:
        YamlProblem: not YAML, or refused by ``StrictLoader`` — the line and column named.
    """
    loader = type("Loader", (StrictLoader,), {"what": what})
    try:
        # a SafeLoader subclass: safe_load semantics, no arbitrary objects
        return yaml.load(text, Loader=loader)
    except _Refused as error:
        mark = error.problem_mark
        raise YamlProblem(
            [f"line {mark.line + 1}, column {mark.column + 1}: {error.problem}"]
        ) from None
    except yaml.MarkedYAMLError as error:
        mark = error.problem_mark or error.context_mark
        where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark else ""
        problem = error.problem or error.context or "unreadable"
        if error.context and error.problem and error.context_mark:
            line, column = error.context_mark.line + 1, error.context_mark.column + 1
            problem += f" ({error.context} at line {line}, column {column})"
        raise YamlProblem([f"{where}invalid YAML: {problem}"]) from None
    except yaml.YAMLError as error:
        raise YamlProblem([f"invalid YAML: {error}"]) from None


_PLAIN = {
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


def describe(error: dict[str, Any], allowed: list[str]) -> str:
    """One pydantic error (an item of ``ValidationError.errors()``) in plain words.

    Args:
        error: the error item (``type``, ``loc``, ``msg``, ``input``).
        allowed: the keys allowed where it occurred (for "unknown key; did you mean …").
    """
    kind, value = error["type"], error.get("input")
    if kind == "missing":
        return "required"
    if kind == "extra_forbidden":
        close = difflib.get_close_matches(str(error["loc"][-1]), allowed, n=1)
        hint = f'; did you mean "{close[0]}"?' if close else ""
        return f"unknown key{hint} (allowed: {', '.join(allowed)})"
    if kind in _PLAIN:
        return f"expected {_PLAIN[kind]}, got {quoted(value)}"
    return error["msg"].removeprefix("Value error, ")


def dotted(loc: tuple) -> str:
    """A pydantic location as ``a.b[2].c`` (dict-key markers dropped)."""
    text = ""
    for part in loc:
        if isinstance(part, int):
            text += f"[{part}]"
        elif part == "[key]":
            continue
        else:
            text += f".{part}" if text else str(part)
    return text
