"""The JSON Schemas of the product's YAML files (alerts.yml, a controls file, the fleet file) and
their reference pages, both from the pydantic models that load them (``alerts.rules``,
``flow.controls_file``, ``config.fleet``): one definition, three readers (the loader, an
editor through the schema, people through the page).

The schemas ship in the package (``outbox_monitor/schemas/``); the shipped YAML files name
theirs on their first line (``# yaml-language-server: $schema=…``) for editors.
"""

import json
import os
import re
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import BaseModel
from pydantic.json_schema import GenerateJsonSchema

from outbox_monitor.alerts.rules import RuleSet
from outbox_monitor.cli.markdown import code, paragraph, paragraphs, table
from outbox_monitor.config.fleet import FLEET_ENV, FleetFile
from outbox_monitor.durations import duration_label
from outbox_monitor.figures.forecast import PREDICTABLE
from outbox_monitor.figures.registry import FIGURES
from outbox_monitor.flow.controls_file import ControlsFile
from outbox_monitor.shipped import CHECKOUT_FOLDER, PACKAGE_FOLDER

SCHEMA_FOLDER = PACKAGE_FOLDER / "schemas"
"""Where the schemas ship: ``outbox_monitor/schemas/<file>.schema.json``."""
MODELINE = "# yaml-language-server: $schema="
"""The first line by which YAML editors (the YAML language server: VS Code, Neovim, …)
find a file's schema, relative to the file."""
SHIPPED_FILES = {
    "alerts": CHECKOUT_FOLDER / "alerts.yml",
    "controls": PACKAGE_FOLDER / "demo" / "controls.yml",
}
"""The shipped YAML file of a kind (where a checkout has it), whose first line names the
kind's schema (``modeline``)."""
DURATIONS = {"duration": "duration", "positive duration": "duration > 0"}
MAX_LISTED_VALUES = 8
"""A key taking more values than this (``metric``) says how many; its description names
where they are listed."""
"""The titles ``durations.duration_json_schema`` gives, as the pages say them."""


@dataclass(frozen=True)
class FileKind:
    """One YAML file of the product: its ``name`` (``alerts``: ``alerts.schema.json``,
    ``alerts-file.md``), its ``title``, its loading ``model`` and how it is used (``usage``,
    Markdown)."""

    name: str
    title: str
    model: type[BaseModel]
    usage: str

    @property
    def schema_path(self) -> Path:
        """The shipped schema."""
        return SCHEMA_FOLDER / f"{self.name}.schema.json"

    @property
    def page_name(self) -> str:
        """Its page's file name under ``docs/reference/``."""
        return f"{self.name}-file.md"


FILES = (
    FileKind(
        "alerts",
        "alerts.yml",
        RuleSet,
        "Read from `OUTBOX_MONITOR_RULES`, else `alerts.yml` in the current directory, else "
        "the shipped one; `outbox-monitor alerts validate` checks it.",
    ),
    FileKind(
        "controls",
        "The controls file",
        ControlsFile,
        "`outbox-monitor controls apply FILE` applies it (`--dry-run` shows what would change).",
    ),
    FileKind(
        "fleet",
        "The fleet file",
        FleetFile,
        f"Named by `{FLEET_ENV}`; `outbox-monitor outboxes [--check]` lists and checks it.",
    ),
)


class _Untitled(GenerateJsonSchema):
    """pydantic's JSON Schema without the titles it makes of field names (``"Keep Firing
    For"``): the description says what a key is."""

    def field_title_should_be_set(self, schema: Any) -> bool:
        return False


def file_schema(kind: FileKind) -> dict[str, Any]:
    """The JSON Schema (draft 2020-12) of one file kind.

    Returns:
        The model's schema: descriptions on one line each with Markdown code spans, each
        definition titled by where it is in the file (``rules[]``), the file titled.
    """
    schema = kind.model.model_json_schema(schema_generator=_Untitled)
    _tidy(schema)
    for path, section in _sections(schema):
        if section is not schema:
            section["title"] = path
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        **schema,
        "title": f"outbox-monitor: {kind.title}",
    }


def schema_text(kind: FileKind) -> str:
    """``file_schema`` as the shipped file holds it."""
    return json.dumps(file_schema(kind), indent=2, ensure_ascii=False) + "\n"


def _tidy(node: Any) -> None:
    """Every description on one line (paragraphs kept), RST's ``code`` as Markdown's."""
    if isinstance(node, dict):
        text = node.get("description")
        if isinstance(text, str):
            text = "\n\n".join(" ".join(p.split()) for p in re.split(r"\n\s*\n", text))
            node["description"] = text.replace("``", "`")
        for value in node.values():
            _tidy(value)
    elif isinstance(node, list):
        for value in node:
            _tidy(value)


def modeline(shipped_file: Path, kind: FileKind) -> str:
    """The first line of a shipped YAML file naming its schema, by a path relative to it.

    The same relative path serves a checkout and an installed wheel when the file and the
    schema keep their places relative to each other: ``outbox_monitor/demo/controls.yml``
    names ``../schemas/controls.schema.json``; the root's ``alerts.yml``, which the wheel
    carries as ``outbox_monitor/app/alerts.yml``, names
    ``outbox_monitor/schemas/alerts.schema.json``, which the wheel carries there too
    (pyproject.toml's package data of ``outbox_monitor.app``).

    Args:
        shipped_file: where the file is in a checkout (absolute).
        kind: its kind.

    Returns:
        ``# yaml-language-server: $schema=<path relative to the file>``.
    """
    relative = os.path.relpath(kind.schema_path, shipped_file.parent)
    return MODELINE + Path(relative).as_posix()


# ----------------------------------------------------------------------------- the pages


def _resolve(schema: dict[str, Any], root: dict[str, Any]) -> dict[str, Any]:
    ref = schema.get("$ref")
    if ref is None:
        return schema
    return root["$defs"][ref.rsplit("/", 1)[1]]


def _children(schema: dict[str, Any], path: str) -> Iterator[tuple[str, dict[str, Any]]]:
    """A key's ``schema`` and every schema inside it (its options, items and values), each
    with its path in the file (``rules[]``, ``routes.<name>``)."""
    yield path, schema
    for option in schema.get("anyOf", []):
        yield from _children(option, path)
    if isinstance(schema.get("items"), dict):
        yield from _children(schema["items"], f"{path}[]")
    for value in [
        schema.get("additionalProperties"),
        *schema.get("patternProperties", {}).values(),
    ]:
        if isinstance(value, dict):
            yield from _children(value, f"{path}.<name>")


def _sections(root: dict[str, Any]) -> Iterator[tuple[str, dict[str, Any]]]:
    """Every mapping of keys in the file, depth first in key order, with its path
    (``rules[]``, ``routes.<name>.routes[]``); the file itself has the path ``""``."""
    pending = [("", root)]
    while pending:
        path, section = pending.pop(0)
        yield path, section
        nested = []
        for key, schema in section.get("properties", {}).items():
            for where, below in _children(schema, f"{path}.{key}".lstrip(".")):
                below = _resolve(below, root)
                if below.get("properties") and below is not section:
                    nested.append((where, below))
        pending[:0] = nested


def kind_text(schema: dict[str, Any], root: dict[str, Any], path: str = "") -> str:
    """What a key takes, in words (Markdown): ``duration``, ``one of `>`, `>=` …``,
    ``whole number ≥ 1``, ``list of text``, ``mapping (`rules[]`)``."""
    schema = _resolve(schema, root) if "$ref" in schema else schema
    if schema.get("title") in DURATIONS:
        return DURATIONS[schema["title"]]
    if "const" in schema:
        return code(json.dumps(schema["const"]))
    if "enum" in schema and len(schema["enum"]) > MAX_LISTED_VALUES:
        return f"one of {len(schema['enum'])} names"
    if "enum" in schema:
        return "one of " + ", ".join(code(value) for value in schema["enum"])
    if "anyOf" in schema:
        options = [s for s in schema["anyOf"] if s.get("type") != "null"]
        if any(s.get("type") == "number" for s in options):  # a number may be whole
            options = [s for s in options if s.get("type") != "integer"]
        return " or ".join(dict.fromkeys(kind_text(s, root, path) for s in options))
    kinds = schema.get("type", [])
    kinds = [kinds] if isinstance(kinds, str) else kinds
    if "object" in kinds and schema.get("properties"):
        return f"mapping ({code(path)})"
    words = [_type_words(schema, kind, root, path) for kind in kinds if kind != "null"]
    return " or ".join(words) or "any"


def _type_words(schema: dict[str, Any], kind: str, root: dict[str, Any], path: str) -> str:
    if kind == "string" and schema.get("minLength") == 1 and "maxLength" not in schema:
        return "non-empty text"
    if kind == "string":
        return "text" + _bounds(schema, "minLength", "maxLength", " of {} characters")
    if kind in ("number", "integer"):
        noun = "number" if kind == "number" else "whole number"
        if schema.get("maximum") == sys.float_info.max:  # only finite: no bound of its own
            return "finite number"
        low = schema.get("minimum", schema.get("exclusiveMinimum"))
        strict = "exclusiveMinimum" in schema
        high = schema.get("maximum")
        if low is not None and high is not None:
            return f"{noun}, {'>' if strict else '≥'} {low:g} and ≤ {high:,}"
        if low is not None:
            return f"{noun} {'>' if strict else '≥'} {low:g}"
        return noun
    if kind == "boolean":
        return "`true` or `false`"
    if kind == "array":
        items = kind_text(schema.get("items", {}), root, f"{path}[]")
        if schema.get("minItems") == 1 and "maxItems" not in schema:
            return f"non-empty list of {items}"
        return f"list of {items}" + _bounds(schema, "minItems", "maxItems", ", {} items")
    if kind == "object":
        values = schema.get("additionalProperties")
        if isinstance(values, dict):
            return f"mapping of name to {kind_text(values, root, f'{path}.<name>')}"
        patterns = list(schema.get("patternProperties", {}).values())
        if patterns:
            return f"mapping of name to {kind_text(patterns[0], root, f'{path}.<name>')}"
        return "mapping"
    return kind


def _bounds(schema: dict[str, Any], low_key: str, high_key: str, form: str) -> str:
    low, high = schema.get(low_key), schema.get(high_key)
    if low is not None and high is not None:
        return form.format(f"{low}–{high}")
    if low:
        return form.format(f"at least {low}")
    if high is not None:
        return form.format(f"at most {high}")
    return ""


def _default_text(schema: dict[str, Any], root: dict[str, Any]) -> str:
    if "default" not in schema:
        return "optional"
    value = schema["default"]
    if value is None or value == [] or value == {}:
        return "optional"
    if kind_text(schema, root).startswith("duration") and isinstance(value, int | float):
        return code(duration_label(value))
    return code(json.dumps(value, ensure_ascii=False))


def file_page(kind: FileKind) -> str:
    """The reference page of one file kind: each mapping of the file (the top, ``rules[]``,
    ``routes.<name>``, …) with its keys — what each takes, whether it is required or its
    default, what it means — from ``file_schema``; alerts.yml's with its metrics."""
    schema = file_schema(kind)
    shipped = SHIPPED_FILES.get(kind.name)
    lines = [
        f"# {kind.title}",
        "",
        "<!-- Generated from the code by `make reference`; do not edit. -->",
        "",
        *_spaced(paragraphs(schema.get("description", ""))),
        paragraph(kind.usage),
        "",
        f"Its JSON Schema is {code(_in_checkout(kind.schema_path))}, in the installed "
        "package too. An editor with the YAML language server (VS Code's YAML extension, "
        "Neovim, …) checks a file as you type when its first line names the schema, by a path "
        "relative to the file or an absolute one"
        + (f"; the shipped {code(_in_checkout(shipped))} does:" if shipped else ":"),
        "",
        "```yaml",
        modeline(shipped, kind) if shipped else f"{MODELINE}/path/to/{kind.schema_path.name}",
        "```",
        "",
        "Where an installed package keeps them: "
        """`python -c "import outbox_monitor; print(outbox_monitor.__path__[0])"`"""
        "/schemas.",
        "",
        "Durations are seconds, or a number and a unit: `90s`, `15m`, `1h`, `30d`, `2w`.",
        "",
        "The file is read as YAML 1.2, as the editor and check-jsonschema read it: `true` "
        "and `false` are the booleans (`yes`, `no`, `on` and `off` are text), `1e3` is a "
        "number, `1:30` is text, and a whole number may be written `5` or `5.0`; a number "
        "or a boolean written as text (`'5'`, `'true'`) is refused where a number or a "
        "boolean goes, except a threshold (`'1000'`, `'2.5e3'`).",
        "",
    ]
    for path, section in _sections(schema):
        lines += [f"## {code(path) if path else 'The file'}", ""]
        if path:
            lines += _spaced(paragraphs(section.get("description", "")))
        required = set(section.get("required", []))
        rows = [
            [
                code(key),
                kind_text(value, schema, f"{path}.{key}".lstrip(".")),
                "**required**" if key in required else _default_text(value, schema),
                paragraph(value.get("description", "")),
            ]
            for key, value in section.get("properties", {}).items()
        ]
        lines += [*table(["key", "takes", "default", "meaning"], rows), ""]
    if kind.model is RuleSet:
        lines += _metrics_section()
    return "\n".join(lines)


def _in_checkout(path: Path) -> str:
    return path.relative_to(CHECKOUT_FOLDER).as_posix()


def _spaced(texts: list[str]) -> list[str]:
    return [line for text in texts for line in (text, "")]


def _metrics_section() -> list[str]:
    """alerts.yml's metrics, from the figures' registry (``figures.registry.FIGURES``)."""
    rows = [
        [
            code(name),
            figure.unit,
            {"none": "–", "optional": "optional", "required": "**required**"}[figure.window],
            "the whole table" if figure.scope == "table" else "event types",
            "yes" if name in PREDICTABLE else "–",
            paragraph(figure.help) + (" Takes `attempts`." if figure.attempts else ""),
        ]
        for name, figure in FIGURES.items()
    ]
    return [
        "## Metrics",
        "",
        "What a rule's `metric` may name. A metric of the whole table takes no `event_type` "
        "and no `by`; a metric in seconds takes a duration as `threshold`.",
        "",
        *table(["metric", "unit", "`window`", "of", "`predict`", "what it is"], rows),
        "",
    ]
