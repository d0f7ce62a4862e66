"""alerts.yml: the SLO rules and their Slack routes, validated at load (issue 3 §1, SPEC §2–3).

The file is alerts as code, in the spirit of Prometheus rules plus Alertmanager routes::

    version: 1
    defaults: {interval: 30s, for: 0s, keep_firing_for: 2m}
    routes:
      oncall: {webhook_url_env: SLACK_WEBHOOK_URL, repeat_interval: 4h, send_resolved: true}
    rules:
      - {name: backlog, metric: queue_depth, op: ">", threshold: 1000, for: 10m,
         severity: warning, route: oncall, summary: "Outbox backlog: {{ value }} rows"}

``load_rules(path)`` parses it (PyYAML's safe loader; duplicate keys, anchors and aliases
refused), refuses secrets written into it, validates it with pydantic and returns a
``RuleSet`` whose durations are seconds. Every problem is reported at once, one per line,
naming the file, the rule and the field (``alerts.yml: rules[2] "payment-failed":
threshold: expected a number or a duration, got "abc"``), as a ``RulesError``.
"""

import difflib
import json
import math
import os
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Annotated, Any
from urllib.parse import quote

import yaml
from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    PrivateAttr,
    StrictBool,
    ValidationError,
    ValidationInfo,
    field_validator,
)
from pydantic_core import PydanticCustomError

from outbox_monitor.durations import parse_duration
from outbox_monitor.errors import ConfigError
from outbox_monitor.figures import FIGURES, Figure
from outbox_monitor.units import format_value

DEFAULT_RULES_PATH = "alerts.yml"
"""The rules file looked for in the current directory when none is named."""
RULES_ENV = "OUTBOX_MONITOR_RULES"
"""Environment variable naming the rules file (overrides ``alerts.yml`` in the cwd)."""
SHIPPED_RULES_PATH = Path(__file__).resolve().parents[2] / "alerts.yml"
"""The repository's alerts.yml (SPEC §3 rules), the last fallback."""
DEFAULT_WEBHOOK_ENV = "SLACK_WEBHOOK_URL"
"""The webhook variable of a route that names neither a channel nor ``webhook_url_env``."""

DEFAULT_INTERVAL_SECONDS = 30.0
DEFAULT_FOR_SECONDS = 0.0
DEFAULT_KEEP_FIRING_FOR_SECONDS = 0.0
DEFAULT_REPEAT_INTERVAL_SECONDS = 4 * 3600.0
SUPPORTED_VERSION = 1
MAX_NAME_LENGTH = 63
MAX_TEMPLATE_LENGTH = 1000
MAX_MENTION_LENGTH = 200
MAX_NESTING = 20
"""Deepest nesting of alerts.yml (it needs 4: rules, a rule, labels, a value)."""
MAX_RULES_FILE_BYTES = 256 * 1024
"""The largest alerts.yml read (the shipped one is 2 KB; a thousand rules fit): a larger
file is refused before it is parsed, so loading stays under ≈ 0.5 s (PyYAML parses
≈ 0.5 MB a second)."""
MAX_LISTED_PROBLEMS = 100
"""Problems listed one per line; more are counted in one last line."""

OPS = (">", ">=", "<", "<=", "==", "!=")
SEVERITIES = ("critical", "warning", "info")
TEMPLATE_VARIABLES = ("value", "threshold", "event_type", "rule")


_SLUG = re.compile(rf"^[a-z0-9][a-z0-9_-]{{0,{MAX_NAME_LENGTH - 1}}}$")
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_LABEL_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_CHANNEL = re.compile(r"^#?[A-Za-z0-9][A-Za-z0-9._-]{0,79}$")
_PLACEHOLDER = re.compile(r"\{\{\s*([^{}]*?)\s*\}\}")
_TEMPLATE_SYNTAX = re.compile(r"\{\{|\}\}|\{%|%\}|\{#|#\}")

# Secret-looking values (issue 3 §1): refused anywhere in the file.
_SECRETS: tuple[tuple[re.Pattern[str], str], ...] = (
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


# ----------------------------------------------------------------- value formatting


def render_template(template: str, values: dict[str, str]) -> str:
    """Replace ``{{ name }}`` placeholders by ``values[name]``; nothing else is evaluated.

    Args:
        template: text validated at load (only ``TEMPLATE_VARIABLES`` occur).
        values: text for each variable.

    Returns:
        The rendered text. A placeholder without a value renders as ``""``.
    """
    return _PLACEHOLDER.sub(lambda match: values.get(match.group(1), ""), template)


def _shown(value: Any) -> str:
    """A YAML value inside a message: strings quoted, secrets never echoed."""
    if isinstance(value, str):
        if any(pattern.search(value) for pattern, _ in _SECRETS):
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


def _fail(kind: str, message: str) -> PydanticCustomError:
    return PydanticCustomError(kind, message)


def _to_duration(value: Any, *, example: str = "90s, 15m or 1h") -> float:
    if isinstance(value, bool) or value is None or isinstance(value, list | dict):
        raise _fail("duration", f"expected a duration such as {example}, got {_shown(value)}")
    try:
        return parse_duration(value)
    except ValueError:
        raise _fail(
            "duration", f"expected a duration such as {example}, got {_shown(value)}"
        ) from None


Duration = Annotated[float, BeforeValidator(_to_duration)]


def _positive_duration(value: Any) -> float:
    seconds = _to_duration(value)
    if seconds <= 0:
        raise _fail("duration", f"must be longer than 0s, got {_shown(value)}")
    return seconds


PositiveDuration = Annotated[float, BeforeValidator(_positive_duration)]


def _check_template(value: Any) -> str:
    if not isinstance(value, str):
        raise _fail("template", f"expected text, got {_shown(value)}")
    if len(value) > MAX_TEMPLATE_LENGTH:
        raise _fail("template", f"longer than {MAX_TEMPLATE_LENGTH} characters")
    allowed = ", ".join(f"{{{{ {name} }}}}" for name in TEMPLATE_VARIABLES)
    for match in _PLACEHOLDER.finditer(value):
        if match.group(1) not in TEMPLATE_VARIABLES:
            raise _fail(
                "template",
                f"unknown placeholder {_shown(match.group(0))}; allowed: {allowed}",
            )
    if _TEMPLATE_SYNTAX.search(_PLACEHOLDER.sub("", value)):
        raise _fail(
            "template",
            f"only plain placeholders are supported ({allowed}); no filters, expressions or blocks",
        )
    return value


def _slug(value: Any) -> str:
    if not isinstance(value, str) or not _SLUG.match(value):
        raise _fail(
            "slug",
            "expected a slug: lower-case letters, digits, - and _, starting with a letter "
            f"or digit, at most {MAX_NAME_LENGTH} characters; got {_shown(value)}",
        )
    return value


Slug = Annotated[str, BeforeValidator(_slug)]
"""A rule or route name: lower-case letters, digits, ``-`` and ``_``."""


# ----------------------------------------------------------------------- the models


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Defaults(_Model):
    """``defaults``: evaluation ``interval``, ``for`` and ``keep_firing_for``, in seconds."""

    interval: PositiveDuration = DEFAULT_INTERVAL_SECONDS
    for_: Duration = Field(DEFAULT_FOR_SECONDS, alias="for")
    keep_firing_for: Duration = DEFAULT_KEEP_FIRING_FOR_SECONDS


class Route(_Model):
    """One destination of notifications (``routes.<name>``).

    Exactly one transport: ``channel`` (bot token ``SLACK_BOT_TOKEN``, ``#name`` or a
    channel id) or ``webhook_url_env`` (name of the environment variable holding an
    incoming-webhook URL; ``SLACK_WEBHOOK_URL`` when the route names neither).
    ``mention`` (e.g. ``<!subteam^S0123>``) is sent as written, only from here.
    ``repeat_interval`` (seconds, 4 h by default) re-notifies a still-firing alert;
    ``send_resolved`` sends a message when it resolves.
    """

    channel: str | None = None
    webhook_url_env: str | None = Field(None, validate_default=True)
    mention: str | None = None
    repeat_interval: PositiveDuration = DEFAULT_REPEAT_INTERVAL_SECONDS
    send_resolved: StrictBool = True

    @field_validator("channel", mode="before")
    @classmethod
    def _check_channel(cls, value: Any) -> Any:
        if value is not None and (not isinstance(value, str) or not _CHANNEL.match(value)):
            raise _fail(
                "channel",
                f"expected a Slack channel (#alerts or a channel id), got {_shown(value)}",
            )
        return value

    @field_validator("webhook_url_env", mode="before")
    @classmethod
    def _check_webhook_url_env(cls, value: Any, info: ValidationInfo) -> Any:
        has_channel = info.data.get("channel") is not None
        if value is None:
            return None if has_channel or "channel" not in info.data else DEFAULT_WEBHOOK_ENV
        if not isinstance(value, str) or not _ENV_NAME.match(value):
            raise _fail(
                "env_name",
                "expected the name of an environment variable that holds the webhook URL "
                f"(e.g. SLACK_WEBHOOK_URL), got {_shown(value)}",
            )
        if has_channel:
            raise _fail(
                "transport",
                "give either channel (bot token transport) or webhook_url_env (incoming "
                "webhook), not both",
            )
        return value

    @field_validator("mention", mode="before")
    @classmethod
    def _check_mention(cls, value: Any) -> Any:
        if value is not None and (
            not isinstance(value, str) or "\n" in value or len(value) > MAX_MENTION_LENGTH
        ):
            raise _fail(
                "mention",
                f"expected one line of text (at most {MAX_MENTION_LENGTH} characters), "
                f"e.g. <!subteam^S0123> or <!here>; got {_shown(value)}",
            )
        return value

    @property
    def transport(self) -> str:
        """``"bot"`` (a channel) or ``"webhook"``."""
        return "bot" if self.channel else "webhook"


class Rule(_Model):
    """One SLO rule (``rules[i]``); durations in seconds.

    ``threshold`` is a float (seconds for duration metrics). ``window`` is seconds or
    ``None`` (the figure has none, or it uses the configured window). ``for_`` and
    ``keep_firing_for`` are resolved from ``defaults`` by ``load_rules``. ``by`` is
    ``()`` or ``("event_type",)``. ``event_type`` filters rows (exact, or LIKE with ``%``).
    """

    name: Slug
    metric: str
    window: float | None = Field(None, validate_default=True)
    attempts: int | None = Field(None, validate_default=True)
    event_type: str | None = None
    by: tuple[str, ...] = ()
    op: str
    threshold: float
    for_: float | None = Field(None, alias="for")
    keep_firing_for: float | None = None
    severity: str = "warning"
    labels: dict[str, str] = Field(default_factory=dict)
    summary: str | None = None
    runbook_url: str | None = None
    route: str

    @field_validator("for_", "keep_firing_for", mode="before")
    @classmethod
    def _check_durations(cls, value: Any) -> Any:
        return None if value is None else _to_duration(value)

    @field_validator("summary", "runbook_url", mode="before")
    @classmethod
    def _check_templates(cls, value: Any) -> Any:
        return None if value is None else _check_template(value)

    @field_validator("metric", mode="before")
    @classmethod
    def _check_metric(cls, value: Any) -> Any:
        if not isinstance(value, str) or value not in FIGURES:
            close = difflib.get_close_matches(str(value), FIGURES, n=1)
            hint = f'; did you mean "{close[0]}"?' if close else ""
            raise _fail(
                "metric",
                f"unknown metric {_shown(value)}{hint} (expected one of {', '.join(FIGURES)})",
            )
        return value

    @field_validator("window", mode="before")
    @classmethod
    def _check_window(cls, value: Any, info: ValidationInfo) -> Any:
        metric = FIGURES.get(info.data.get("metric", ""))
        if metric and metric.window == "none" and value is not None:
            raise _fail("window", f"{metric.metric} has no window; remove window")
        if metric and metric.window == "required" and value is None:
            raise _fail("window", f"required for {metric.metric} (e.g. window: 15m)")
        return None if value is None else _positive_duration(value)

    @field_validator("attempts", mode="before")
    @classmethod
    def _check_attempts(cls, value: Any, info: ValidationInfo) -> Any:
        metric = FIGURES.get(info.data.get("metric", ""))
        if metric and not metric.attempts and value is not None:
            raise _fail("attempts", f"only attempts_at_least takes attempts, not {metric.metric}")
        if metric and metric.attempts and value is None:
            raise _fail("attempts", "required for attempts_at_least (e.g. attempts: 5)")
        if value is not None and (isinstance(value, bool) or not isinstance(value, int)):
            raise _fail("attempts", f"expected a whole number ≥ 1, got {_shown(value)}")
        if value is not None and value < 1:
            raise _fail("attempts", f"expected a whole number ≥ 1, got {value}")
        return value

    @field_validator("event_type", mode="before")
    @classmethod
    def _check_event_type(cls, value: Any) -> Any:
        if value is not None and (not isinstance(value, str) or not value.strip()):
            raise _fail(
                "event_type",
                "expected an event type (order.paid) or a LIKE pattern with % (payment.%), "
                f"got {_shown(value)}",
            )
        return value

    @field_validator("by", mode="before")
    @classmethod
    def _check_by(cls, value: Any) -> Any:
        if value is None:
            return ()
        if not isinstance(value, list) or any(item != "event_type" for item in value):
            raise _fail(
                "by",
                f"expected [event_type] (one alert instance per event type), got {_shown(value)}"
                if not isinstance(value, list)
                else "only event_type is supported: by: [event_type]",
            )
        return tuple(dict.fromkeys(value))

    @field_validator("op", mode="before")
    @classmethod
    def _check_op(cls, value: Any) -> Any:
        if value not in OPS:
            raise _fail("op", f"expected one of {' '.join(OPS)}, got {_shown(value)}")
        return value

    @field_validator("threshold", mode="before")
    @classmethod
    def _check_threshold(cls, value: Any, info: ValidationInfo) -> Any:
        metric = FIGURES.get(info.data.get("metric", ""))
        duration_ok = metric is None or metric.is_duration
        expected = "a number or a duration" if duration_ok else "a number"
        if isinstance(value, bool) or not isinstance(value, int | float | str):
            raise _fail("threshold", f"expected {expected}, got {_shown(value)}")
        if isinstance(value, int | float):
            if not math.isfinite(value):
                raise _fail("threshold", f"expected a finite number, got {value}")
            return float(value)
        try:
            return float(value)
        except ValueError:
            pass
        if duration_ok:
            try:
                return parse_duration(value)
            except ValueError:
                pass
        elif _looks_like_duration(value):
            raise _fail(
                "threshold",
                f"expected a number ({metric.metric} is measured in {metric.unit}, "
                f"not a duration), got {_shown(value)}",
            )
        raise _fail("threshold", f"expected {expected}, got {_shown(value)}")

    @field_validator("severity", mode="before")
    @classmethod
    def _check_severity(cls, value: Any) -> Any:
        if value not in SEVERITIES:
            expected = ", ".join(SEVERITIES)
            raise _fail("severity", f"expected one of {expected}, got {_shown(value)}")
        return value

    @field_validator("labels", mode="before")
    @classmethod
    def _check_labels(cls, value: Any) -> Any:
        if not isinstance(value, dict):
            raise _fail("labels", f"expected a mapping of name: text, got {_shown(value)}")
        for key, text in value.items():
            if not isinstance(key, str) or not _LABEL_NAME.match(key):
                message = f"label name {_shown(key)}: expected letters, digits and _"
                raise _fail("labels", message)
            if not isinstance(text, str):
                raise _fail("labels", f"{key}: expected text, got {_shown(text)}")
        return value

    @field_validator("runbook_url", mode="after")
    @classmethod
    def _check_runbook_url(cls, value: str | None) -> str | None:
        if value is not None and not re.match(r"^https?://\S+$", _PLACEHOLDER.sub("x", value)):
            raise _fail(
                "url", f"expected an http:// or https:// URL without spaces, got {_shown(value)}"
            )
        return value

    @field_validator("route", mode="before")
    @classmethod
    def _check_route(cls, value: Any) -> Any:
        if not isinstance(value, str) or not value:
            raise _fail("route", f"expected the name of a route, got {_shown(value)}")
        return value

    # ------------------------------------------------------------------ conveniences

    @property
    def spec(self) -> Figure:
        """The metric's figure: its unit, window and attempts rules (``figures.FIGURES``)."""
        return FIGURES[self.metric]

    @property
    def unit(self) -> str:
        """``"seconds"``, ``"rows"`` or ``"rows/min"`` (the unit of value and threshold)."""
        return self.spec.unit

    def format(self, value: float | None) -> str:
        """A value of this rule's metric for people (``"5m 0s"``, ``"1,000"``, ``"–"``)."""
        return format_value(value, self.unit)

    @property
    def condition(self) -> str:
        """The breach condition as text, e.g. ``"> 5m 0s"`` or ``"> 1,000"``."""
        return f"{self.op} {self.format(self.threshold)}"

    def _variables(self, value: float | None, event_type: str | None) -> dict[str, str]:
        return {
            "value": self.format(value),
            "threshold": self.format(self.threshold),
            "event_type": event_type or self.event_type or "all event types",
            "rule": self.name,
        }

    def render_summary(self, value: float | None, event_type: str | None = None) -> str:
        """The rule's ``summary`` with ``{{ value }}`` etc. filled in (a default text when
        the rule has none). ``event_type``: the instance's type, else the rule's filter."""
        default = (
            f"{{{{ rule }}}}: {self.metric} is {{{{ value }}}} ({self.op} {{{{ threshold }}}})"
        )
        template = self.summary or default
        return render_template(template, self._variables(value, event_type))

    def render_runbook_url(self, event_type: str | None = None) -> str | None:
        """The rule's ``runbook_url`` with placeholders filled in, URL-quoted; ``None``
        when the rule has none."""
        if self.runbook_url is None:
            return None
        variables = {
            key: quote(text, safe="")
            for key, text in self._variables(None, event_type).items()
            if key != "value"
        }
        return render_template(self.runbook_url, variables)


class RuleSet(_Model):
    """A loaded alerts.yml: ``version``, ``defaults``, ``routes`` by name, ``rules`` in
    file order (``for_``/``keep_firing_for`` resolved). ``path`` is the file it came from."""

    version: int
    defaults: Defaults = Field(default_factory=Defaults)
    routes: dict[Slug, Route] = Field(default_factory=dict)
    rules: list[Rule]
    _path: str = PrivateAttr(default="")

    @field_validator("version", mode="before")
    @classmethod
    def _check_version(cls, value: Any) -> Any:
        if value != SUPPORTED_VERSION or isinstance(value, bool):
            raise _fail("version", f"expected {SUPPORTED_VERSION}, got {_shown(value)}")
        return value

    @property
    def path(self) -> str:
        """The file this rule set was loaded from."""
        return self._path

    def rule(self, name: str) -> Rule:
        """The rule called ``name``; raises ``KeyError`` when there is none."""
        for rule in self.rules:
            if rule.name == name:
                return rule
        raise KeyError(name)


# ----------------------------------------------------------------------- loading


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
                    None, None, f"duplicate key {_shown(key)}", key_node.start_mark
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
        for pattern, message in _SECRETS:
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
        return f"expected {plain[kind]}, got {_shown(value)}"
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
        where = f"rules[{index}]" + (f" {_shown(name)}" if isinstance(name, str) else "")
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
            path, [f"expected a mapping with version, defaults, routes, rules; got {_shown(data)}"]
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


def _looks_like_duration(text: str) -> bool:
    try:
        parse_duration(text)
    except ValueError:
        return False
    return True
