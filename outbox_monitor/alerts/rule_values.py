"""The values of alerts.yml's fields: durations, rule and route names and message templates
checked (errors that name what is wrong) and a template rendered. Secret-looking text, a
value quoted for a problem line and the durations, values of the controls file too, are
``config.yaml_files``' (``SECRET_PATTERNS``, ``quoted``, ``fail``, ``Duration``,
``PositiveDuration``), imported here under their old names.

``alerts.rules`` builds its pydantic models from these; ``alerts.rules_file`` refuses secrets
and quotes values with them.
"""

import re
from typing import Annotated, Any

from pydantic import BeforeValidator, WithJsonSchema

from outbox_monitor.config.yaml_files import DURATION_SCHEMA as DURATION_SCHEMA
from outbox_monitor.config.yaml_files import POSITIVE_DURATION_SCHEMA as POSITIVE_DURATION_SCHEMA
from outbox_monitor.config.yaml_files import SECRET_PATTERNS as SECRET_PATTERNS
from outbox_monitor.config.yaml_files import Duration as Duration
from outbox_monitor.config.yaml_files import PositiveDuration as PositiveDuration
from outbox_monitor.config.yaml_files import fail, quoted
from outbox_monitor.config.yaml_files import positive_duration as positive_duration
from outbox_monitor.config.yaml_files import to_duration as to_duration
from outbox_monitor.durations import parse_duration

MAX_NAME_LENGTH = 63
MAX_TEMPLATE_LENGTH = 1000
MAX_RUNBOOK_LENGTH = 2000
"""A rule's ``runbook`` steps, at most this many characters (what one Slack section holds
beside its markup, escaped)."""
TEMPLATE_VARIABLES = ("value", "threshold", "event_type", "rule")


_SLUG = re.compile(rf"^[a-z0-9][a-z0-9_-]{{0,{MAX_NAME_LENGTH - 1}}}$")
PLACEHOLDER = re.compile(r"\{\{\s*([^{}]*?)\s*\}\}")
_TEMPLATE_SYNTAX = re.compile(r"\{\{|\}\}|\{%|%\}|\{#|#\}")


# ----------------------------------------------------------------- value formatting


def render_template(template: str, values: dict[str, str]) -> str:
    """Replace ``{{ name }}`` placeholders by ``values[name]``; nothing else is evaluated.

    Args:
        template: text validated at load (only ``TEMPLATE_VARIABLES`` occur).
        values: text for each variable.

    Returns:
        The rendered text. A placeholder without a value renders as ``""``.
    """
    return PLACEHOLDER.sub(lambda match: values.get(match.group(1), ""), template)


def or_null(schema: dict[str, Any]) -> WithJsonSchema:
    """The JSON Schema of a field that may also be left empty (``null``): ``schema`` or null
    (for an optional field whose own validator checks its value)."""
    return WithJsonSchema({"anyOf": [schema, {"type": "null"}]})


def check_template(value: Any) -> str:
    """A message template: text with only ``{{ name }}`` placeholders of ``TEMPLATE_VARIABLES``."""
    if not isinstance(value, str):
        raise fail("template", f"expected text, got {quoted(value)}")
    if len(value) > MAX_TEMPLATE_LENGTH:
        raise fail("template", f"longer than {MAX_TEMPLATE_LENGTH} characters")
    allowed = ", ".join(f"{{{{ {name} }}}}" for name in TEMPLATE_VARIABLES)
    for match in PLACEHOLDER.finditer(value):
        if match.group(1) not in TEMPLATE_VARIABLES:
            raise fail(
                "template",
                f"unknown placeholder {quoted(match.group(0))}; allowed: {allowed}",
            )
    if _TEMPLATE_SYNTAX.search(PLACEHOLDER.sub("", value)):
        raise fail(
            "template",
            f"only plain placeholders are supported ({allowed}); no filters, expressions or blocks",
        )
    return value


def check_runbook(value: Any) -> str:
    """A rule's runbook: static text (no ``{{ }}`` placeholder: nothing is filled in), not
    blank, at most ``MAX_RUNBOOK_LENGTH`` characters; ``fail`` otherwise."""
    if not isinstance(value, str):
        raise fail("runbook", f"expected text (numbered steps), got {quoted(value)}")
    if not value.strip():
        raise fail("runbook", "expected numbered steps, got empty text")
    if len(value) > MAX_RUNBOOK_LENGTH:
        raise fail(
            "runbook",
            f"{len(value):,} characters, at most {MAX_RUNBOOK_LENGTH:,}: keep the steps short "
            "and put the long story behind runbook_url",
        )
    if _TEMPLATE_SYNTAX.search(value):
        raise fail(
            "runbook",
            "static text: nothing in it is filled in, so {{ }}, {% %} and {# #} are refused",
        )
    return value


RUNBOOK_SCHEMA = {
    "type": "string",
    "maxLength": MAX_RUNBOOK_LENGTH,
    "pattern": r"\S",
    "not": {"pattern": _TEMPLATE_SYNTAX.pattern},
}
"""A runbook: text with a character that is not a space, at most 2,000 characters, no
template syntax (``check_runbook``)."""


def _slug(value: Any) -> str:
    if not isinstance(value, str) or not _SLUG.match(value):
        raise fail(
            "slug",
            "expected a slug: lower-case letters, digits, - and _, starting with a letter "
            f"or digit, at most {MAX_NAME_LENGTH} characters; got {quoted(value)}",
        )
    return value


SLUG_SCHEMA = {"type": "string", "pattern": _SLUG.pattern}
Slug = Annotated[str, BeforeValidator(_slug), WithJsonSchema(SLUG_SCHEMA)]
"""A rule or route name: lower-case letters, digits, ``-`` and ``_``."""


def looks_like_duration(text: str) -> bool:
    """Whether ``text`` parses as a duration (``15m``)."""
    try:
        parse_duration(text)
    except ValueError:
        return False
    return True


LABEL_KEY = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,62}$")
"""A label's name (matchers, selectors, a route's ``group_by``)."""


ROUTE_NAME_SCHEMA = {"type": "string", "minLength": 1}
"""What ``check_route_name`` accepts, as JSON Schema."""
TEMPLATE_SCHEMA = {"type": "string", "maxLength": MAX_TEMPLATE_LENGTH}
"""A message template as JSON Schema (its placeholders are ``check_template``'s to check)."""


def check_route_name(value: Any) -> str:
    """A rule's or route branch's ``route``: a non-empty name (``rules_file`` checks that it
    is defined), or a ``PydanticCustomError`` saying what it got."""
    if not isinstance(value, str) or not value:
        raise fail("route", f"expected the name of a route, got {quoted(value)}")
    return value


LABEL_MAP_SCHEMA = {
    "type": "object",
    "minProperties": 1,
    "propertyNames": {"pattern": LABEL_KEY.pattern},
    "additionalProperties": {"type": "string", "minLength": 1},
}
"""What ``check_label_map`` accepts, as JSON Schema."""


def check_label_map(field: str, value: Any, *, example: str) -> dict[str, str]:
    """A non-empty mapping of label name → text (a rule's ``outboxes`` selector, a route's
    ``matchers``), or a ``PydanticCustomError`` naming ``field`` and what is wrong."""
    if not isinstance(value, dict) or not value:
        expected = f"expected a mapping of label: value, e.g. {example}"
        raise fail(field, f"{expected}; got {quoted(value)}")
    for key, text in value.items():
        if not isinstance(key, str) or not LABEL_KEY.match(key):
            raise fail(field, f"label name {quoted(key)}: expected letters, digits and _")
        if not isinstance(text, str) or not text:
            raise fail(field, f"{key}: expected text, got {quoted(text)}")
    return dict(value)


OUTBOX_SELECTOR_SCHEMA = {
    "anyOf": [
        {"type": "array", "minItems": 1, "items": SLUG_SCHEMA},
        LABEL_MAP_SCHEMA,
        {"type": "null"},
    ]
}
"""What ``check_outbox_selector`` accepts, as JSON Schema."""


def check_outbox_selector(value: Any) -> tuple[str, ...] | dict[str, str] | None:
    """A rule's ``outboxes``: ``None`` (every outbox), a list of outbox names (``[orders,
    billing]``) or a mapping of labels that must all match (``{team: payments}``).

    Raises:
        PydanticCustomError: an empty list or mapping, a name that is not an outbox name
            (lower-case letters, digits, ``-`` and ``_``), a label value that is not text.
    """
    if value is None:
        return None
    if isinstance(value, list):
        if not value:
            raise fail("outboxes", "expected at least one outbox name (or leave outboxes out)")
        for name in value:
            if not isinstance(name, str) or not _SLUG.match(name):
                raise fail(
                    "outboxes",
                    f"{quoted(name)} is not an outbox name (lower-case letters, digits, - and _)",
                )
        return tuple(dict.fromkeys(value))
    return check_label_map(
        "outboxes", value, example="{team: payments}, or a list of names: [orders, billing]"
    )
