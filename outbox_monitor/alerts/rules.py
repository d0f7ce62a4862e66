"""alerts.yml's model: the SLO rules and their Slack routes, validated (issue 3 §1, SPEC §2–3).

The file is alerts as code, in the spirit of Prometheus rules plus Alertmanager routes::

    version: 1
    defaults: {interval: 30s, for: 0s, keep_firing_for: 2m}
    routes:
      oncall: {webhook_url_env: SLACK_WEBHOOK_URL, repeat_interval: 4h, send_resolved: true}
    rules:
      - {name: backlog, metric: queue_depth, op: ">", threshold: 1000, for: 10m,
         severity: warning, route: oncall, summary: "Outbox backlog: {{ value }} rows"}

This module is the model: pydantic classes whose validators name the field and what is wrong
(``threshold: expected a number or a duration, got "abc"``), and a ``RuleSet`` whose
durations are seconds; the checks of single values (durations, names, templates) are
``alerts.rule_values``. Reading the file (YAML, secrets, every problem with its rule and line)
is ``alerts.rules_file``.
"""

import difflib
import math
import re
import sys
from typing import Annotated, Any, Literal, get_args
from urllib.parse import quote

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    PrivateAttr,
    ValidationInfo,
    WithJsonSchema,
    field_validator,
)

from outbox_monitor.alerts.inhibit_model import InhibitRule
from outbox_monitor.alerts.route_model import ALERTMANAGER, Route
from outbox_monitor.alerts.rule_values import (
    DURATION_SCHEMA,
    OUTBOX_SELECTOR_SCHEMA,
    PLACEHOLDER,
    POSITIVE_DURATION_SCHEMA,
    ROUTE_NAME_SCHEMA,
    RUNBOOK_SCHEMA,
    TEMPLATE_SCHEMA,
    Duration,
    PositiveDuration,
    Slug,
    check_outbox_selector,
    check_route_name,
    check_runbook,
    check_template,
    fail,
    looks_like_duration,
    or_null,
    positive_duration,
    quoted,
    render_template,
    to_duration,
)
from outbox_monitor.durations import DURATION_PATTERN, parse_duration
from outbox_monitor.figures.figure_model import Figure
from outbox_monitor.figures.forecast import PREDICTABLE, TYPE_SAMPLED
from outbox_monitor.figures.registry import FIGURES
from outbox_monitor.flow.model import matches
from outbox_monitor.units import format_value

DEFAULT_INTERVAL_SECONDS = 30.0
DEFAULT_FOR_SECONDS = 0.0
DEFAULT_KEEP_FIRING_FOR_SECONDS = 0.0
SUPPORTED_VERSION = 1
Op = Literal[">", ">=", "<", "<=", "==", "!="]
OPS: tuple[str, ...] = get_args(Op)
Severity = Literal["critical", "warning", "info"]
SEVERITIES: tuple[str, ...] = get_args(Severity)

_LABEL_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_STEP_NUMBER = re.compile(r"^\s*\d+[.)]\s+")
_NUMBER = r"^\s*[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]+)?\s*$"
"""A number written as text (``"1000"``, ``"2.5e3"``), as JSON Schema: what a threshold's
text may be besides a duration."""
_NUMBER_TEXT = {"type": "string", "pattern": _NUMBER}
_FINITE = {"type": "number", "minimum": -sys.float_info.max, "maximum": sys.float_info.max}
"""A finite number (YAML's ``.inf`` is over the largest)."""
THRESHOLD_SCHEMA = {
    "anyOf": [_FINITE, _NUMBER_TEXT, {"type": "string", "pattern": DURATION_PATTERN}]
}
"""A threshold: a number, or a duration for a metric in seconds (``_check_threshold``)."""


# ----------------------------------------------------------------------- the models


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, use_attribute_docstrings=True)


class Defaults(_Model):
    """What every rule uses unless it says otherwise."""

    interval: PositiveDuration = DEFAULT_INTERVAL_SECONDS
    """How often the scheduler evaluates every rule."""
    for_: Duration = Field(DEFAULT_FOR_SECONDS, alias="for")
    """How long a rule's condition must hold before its alert fires (pending until then)."""
    keep_firing_for: Duration = DEFAULT_KEEP_FIRING_FOR_SECONDS
    """How long an alert keeps firing after its condition healed (hysteresis: a condition
    that flaps does not resolve and fire again)."""


def _metric_conditions(schema: dict[str, Any]) -> None:
    """Add to a rule's JSON Schema the checks that depend on its metric (``Rule``'s
    ``_check_window``, ``_check_attempts``, ``_check_threshold``, ``_check_predict`` and
    ``_check_not_table_wide``), as ``if``/``then`` conditions an editor flags as the loader
    does."""

    def metrics(test: Any) -> list[str]:
        return [name for name, figure in FIGURES.items() if test(figure)]

    null: dict[str, Any] = {"type": "null"}
    present = {"not": null}
    then = [
        (metrics(lambda f: f.window == "none"), {"properties": {"window": null}}),
        (
            metrics(lambda f: f.window == "required"),
            {"required": ["window"], "properties": {"window": present}},
        ),
        (
            metrics(lambda f: f.attempts),
            {"required": ["attempts"], "properties": {"attempts": present}},
        ),
        (metrics(lambda f: not f.attempts), {"properties": {"attempts": null}}),
        (
            metrics(lambda f: not f.is_duration),
            {"properties": {"threshold": {"anyOf": [_FINITE, _NUMBER_TEXT]}}},
        ),
        (
            metrics(lambda f: f.scope == "table"),
            {"properties": {"event_type": null, "by": {"anyOf": [null, {"maxItems": 0}]}}},
        ),
    ]
    schema["allOf"] = [
        {"if": {"required": ["metric"], "properties": {"metric": {"enum": names}}}, "then": rule}
        for names, rule in then
        if names
    ] + [
        {
            "if": {"required": ["predict"], "properties": {"predict": present}},
            "then": {
                "properties": {
                    "metric": {"enum": list(PREDICTABLE)},
                    "op": {"enum": [op for op in OPS if op not in ("==", "!=")]},
                }
            },
        }
    ]


def steps_of(runbook: str | None) -> tuple[str, ...]:
    """A ``runbook``'s steps, each one line without its number: a line starting with ``1.``
    or ``1)`` starts a step, a blank line ends one, any other line continues the step above
    (joined with a space); ``()`` for ``None`` or blank text. A rule's (``Rule.runbook_steps``)
    and the scheduler's own alerts' (``own_runbooks``)."""
    steps: list[list[str]] = []
    open_step = False
    for line in (runbook or "").splitlines():
        text = line.strip()
        if not text:
            open_step = False
            continue
        if _STEP_NUMBER.match(line) or not open_step:
            steps.append([])
            open_step = True
        steps[-1].append(_STEP_NUMBER.sub("", line).strip())
    return tuple(" ".join(parts) for parts in steps)


class Rule(_Model):
    """One SLO rule: a metric compared with a threshold, and where its alerts go."""

    model_config = ConfigDict(json_schema_extra=_metric_conditions)

    # Developers: durations are seconds once loaded; ``for_`` and ``keep_firing_for`` are
    # resolved from ``defaults`` by ``rules_file.load_rules``; ``by`` is ``()`` or
    # ``("event_type",)``; ``outboxes`` is ``None``, a tuple of names or a mapping of labels.
    name: Slug
    """The rule's name, unique in the file: it names the alert in Slack, on the Alerts page
    and in ``/metrics``."""
    metric: Annotated[str, WithJsonSchema({"type": "string", "enum": list(FIGURES)})]
    """The figure watched, by its name in SPEC §2 (the reference of alerts.yml lists each
    with its unit and window)."""
    window: Annotated[float | None, or_null(POSITIVE_DURATION_SCHEMA)] = Field(
        None, validate_default=True
    )
    """The window of a windowed metric (``failed_in_window`` needs one; the latencies and
    throughputs default to ``OUTBOX_MONITOR_WINDOW``); refused on a metric without one."""
    attempts: Annotated[int | None, or_null({"type": "integer", "minimum": 1})] = Field(
        None, validate_default=True
    )
    """For ``attempts_at_least`` only, and required there: count rows with at least this
    many attempts."""
    event_type: Annotated[str | None, or_null({"type": "string", "pattern": r"\S"})] = None
    """Only rows of this event type: exact, or a LIKE pattern with ``%`` (``payment.%``).
    Refused on a metric of the whole table."""
    by: Annotated[
        tuple[str, ...],
        or_null({"type": "array", "items": {"const": "event_type"}}),
    ] = ()
    """``[event_type]``: one alert instance per event type (each measured for exactly that
    type) instead of one for all rows. Refused on a metric of the whole table."""
    op: Op
    """How the value is compared with ``threshold``; the rule is breached when
    ``value op threshold`` holds."""
    threshold: Annotated[float, WithJsonSchema(THRESHOLD_SCHEMA)]
    """A number in the metric's unit; for a metric in seconds a duration too (``5m``)."""
    predict: Annotated[float | None, or_null(POSITIVE_DURATION_SCHEMA)] = None
    """Watch the metric's forecast instead of its value now: the least-squares trend of the
    samples of the last ``predict``, extrapolated as far ahead. Only ``queue_depth``,
    ``pending_total``, ``scheduled_retries`` and ``oldest_pending_age``, with ``op`` ``>``,
    ``>=``, ``<`` or ``<=``."""
    for_: Annotated[float | None, or_null(DURATION_SCHEMA)] = Field(None, alias="for")
    """How long the condition must hold before the alert fires; ``defaults.for`` when left
    out."""
    keep_firing_for: Annotated[float | None, or_null(DURATION_SCHEMA)] = None
    """How long the alert keeps firing after the condition healed;
    ``defaults.keep_firing_for`` when left out."""
    severity: Severity = "warning"
    """Shown in the message and the dashboard, a label routes may match."""
    labels: dict[str, str] = Field(
        default_factory=dict, json_schema_extra={"propertyNames": {"pattern": _LABEL_NAME.pattern}}
    )
    """Labels of the rule's alerts (name: text), which routes may match."""
    summary: Annotated[str | None, or_null(TEMPLATE_SCHEMA)] = None
    """The message's text, with the placeholders ``{{ value }}``, ``{{ threshold }}``,
    ``{{ event_type }}`` and ``{{ rule }}`` (nothing else is evaluated)."""
    runbook_url: Annotated[
        str | None,
        or_null({**TEMPLATE_SCHEMA, "pattern": r"^https?://(?:\{\{\s*[^{}]*?\s*\}\}|\S)+$"}),
    ] = None
    """An http(s) link in the message; the same placeholders as ``summary``, URL-quoted."""
    runbook: Annotated[str | None, or_null(RUNBOOK_SCHEMA)] = None
    """What the on-call engineer does, as numbered steps (``1. Open …``, one step per
    number; a line that is not numbered continues the step above): which page to open,
    which figure to read, which action to take and its CLI command. Static text of at most
    2,000 characters (no placeholders); shown in the Slack message (escaped), on the
    Overview's alert card, on the Alerts page, and on the docs' "When paged" page, generated
    from the shipped rules."""
    route: Annotated[str, WithJsonSchema(ROUTE_NAME_SCHEMA)]
    """The name of a route of ``routes``: where the alerts go."""
    outboxes: Annotated[
        tuple[str, ...] | dict[str, str] | None, WithJsonSchema(OUTBOX_SELECTOR_SCHEMA)
    ] = None
    """With a fleet file: the outboxes the rule applies to, a list of names
    (``[orders, billing]``) or labels they must all have (``{team: payments}``); left out,
    every outbox."""

    @field_validator("outboxes", mode="before")
    @classmethod
    def _check_outboxes(cls, value: Any) -> Any:
        return check_outbox_selector(value)

    @field_validator("for_", "keep_firing_for", mode="before")
    @classmethod
    def _check_durations(cls, value: Any) -> Any:
        return None if value is None else to_duration(value)

    @field_validator("summary", "runbook_url", mode="before")
    @classmethod
    def _check_templates(cls, value: Any) -> Any:
        return None if value is None else check_template(value)

    @field_validator("runbook", mode="before")
    @classmethod
    def _check_runbook(cls, value: Any) -> Any:
        return None if value is None else check_runbook(value)

    @field_validator("metric", mode="before")
    @classmethod
    def _check_metric(cls, value: Any) -> Any:
        if not isinstance(value, str) or value not in FIGURES:
            close = difflib.get_close_matches(str(value), FIGURES, n=1)
            hint = f'; did you mean "{close[0]}"?' if close else ""
            raise fail(
                "metric",
                f"unknown metric {quoted(value)}{hint} (expected one of {', '.join(FIGURES)})",
            )
        return value

    @field_validator("window", mode="before")
    @classmethod
    def _check_window(cls, value: Any, info: ValidationInfo) -> Any:
        metric = FIGURES.get(info.data.get("metric", ""))
        if metric and metric.window == "none" and value is not None:
            raise fail("window", f"{metric.metric} has no window; remove window")
        if metric and metric.window == "required" and value is None:
            raise fail("window", f"required for {metric.metric} (e.g. window: 15m)")
        return None if value is None else positive_duration(value)

    @field_validator("attempts", mode="before")
    @classmethod
    def _check_attempts(cls, value: Any, info: ValidationInfo) -> Any:
        metric = FIGURES.get(info.data.get("metric", ""))
        if metric and not metric.attempts and value is not None:
            raise fail("attempts", f"only attempts_at_least takes attempts, not {metric.metric}")
        if metric and metric.attempts and value is None:
            raise fail("attempts", "required for attempts_at_least (e.g. attempts: 5)")
        if isinstance(value, float) and value.is_integer():
            value = int(value)  # 5.0, as JSON Schema's integer
        if value is not None and (isinstance(value, bool) or not isinstance(value, int)):
            raise fail("attempts", f"expected a whole number ≥ 1, got {quoted(value)}")
        if value is not None and value < 1:
            raise fail("attempts", f"expected a whole number ≥ 1, got {value}")
        return value

    @field_validator("event_type", mode="before")
    @classmethod
    def _check_event_type(cls, value: Any, info: ValidationInfo) -> Any:
        _check_not_table_wide("event_type", value, info)
        if value is not None and (not isinstance(value, str) or not value.strip()):
            raise fail(
                "event_type",
                "expected an event type (order.paid) or a LIKE pattern with % (payment.%), "
                f"got {quoted(value)}",
            )
        return value

    @field_validator("by", mode="before")
    @classmethod
    def _check_by(cls, value: Any, info: ValidationInfo) -> Any:
        _check_not_table_wide("by", value, info)
        if value is None:
            return ()
        if not isinstance(value, list) or any(item != "event_type" for item in value):
            raise fail(
                "by",
                f"expected [event_type] (one alert instance per event type), got {quoted(value)}"
                if not isinstance(value, list)
                else "only event_type is supported: by: [event_type]",
            )
        return tuple(dict.fromkeys(value))

    @field_validator("op", mode="before")
    @classmethod
    def _check_op(cls, value: Any) -> Any:
        if value not in OPS:
            raise fail("op", f"expected one of {' '.join(OPS)}, got {quoted(value)}")
        return value

    @field_validator("threshold", mode="before")
    @classmethod
    def _check_threshold(cls, value: Any, info: ValidationInfo) -> Any:
        metric = FIGURES.get(info.data.get("metric", ""))
        duration_ok = metric is None or metric.is_duration
        expected = "a number or a duration" if duration_ok else "a number"
        if isinstance(value, bool) or not isinstance(value, int | float | str):
            raise fail("threshold", f"expected {expected}, got {quoted(value)}")
        if isinstance(value, int | float):
            if not math.isfinite(value):
                raise fail("threshold", f"expected a finite number, got {value}")
            return float(value)
        if re.match(_NUMBER, value):  # as the schema's pattern: no "1_000", "inf" or "nan"
            number = float(value)
            if not math.isfinite(number):
                raise fail("threshold", f"expected a finite number, got {quoted(value)}")
            return number
        if duration_ok:
            try:
                return parse_duration(value)
            except ValueError:
                pass
        elif looks_like_duration(value):
            raise fail(
                "threshold",
                f"expected a number ({metric.metric} is measured in {metric.unit}, "
                f"not a duration), got {quoted(value)}",
            )
        raise fail("threshold", f"expected {expected}, got {quoted(value)}")

    @field_validator("predict", mode="before")
    @classmethod
    def _check_predict(cls, value: Any, info: ValidationInfo) -> Any:
        if value is None:
            return None
        metric = info.data.get("metric")
        if metric is not None and metric not in PREDICTABLE:
            raise fail(
                "predict",
                f"{metric} cannot be forecast; predict works on {', '.join(PREDICTABLE)}",
            )
        event_type, by = info.data.get("event_type"), info.data.get("by")
        if (event_type or by) and metric is not None and metric not in TYPE_SAMPLED:
            raise fail(
                "predict",
                f"{metric} is not sampled per event type; a rule with event_type or by may "
                f"forecast {', '.join(TYPE_SAMPLED)}; remove event_type and by, or predict",
            )
        if event_type and "%" in event_type and not by:
            raise fail(
                "predict",
                "a LIKE pattern's total cannot be forecast: the per-type samples keep the top "
                "event types and fold the rest into other; name one event type, or add "
                "by: [event_type] for a forecast per type",
            )
        if info.data.get("op") in ("==", "!="):
            raise fail(
                "predict",
                f"a forecast alerts when its trend crosses the threshold (op >, >=, < or <=); "
                f"with op {quoted(info.data['op'])} the rule would never fire",
            )
        return positive_duration(value)

    @field_validator("severity", mode="before")
    @classmethod
    def _check_severity(cls, value: Any) -> Any:
        if value not in SEVERITIES:
            expected = ", ".join(SEVERITIES)
            raise fail("severity", f"expected one of {expected}, got {quoted(value)}")
        return value

    @field_validator("labels", mode="before")
    @classmethod
    def _check_labels(cls, value: Any) -> Any:
        if not isinstance(value, dict):
            raise fail("labels", f"expected a mapping of name: text, got {quoted(value)}")
        for key, text in value.items():
            if not isinstance(key, str) or not _LABEL_NAME.match(key):
                message = f"label name {quoted(key)}: expected letters, digits and _"
                raise fail("labels", message)
            if not isinstance(text, str):
                raise fail("labels", f"{key}: expected text, got {quoted(text)}")
        return value

    @field_validator("runbook_url", mode="after")
    @classmethod
    def _check_runbook_url(cls, value: str | None) -> str | None:
        if value is not None and not re.match(r"^https?://\S+$", PLACEHOLDER.sub("x", value)):
            raise fail(
                "url",
                f"expected an http:// or https:// URL without spaces, got {quoted(value)}",
            )
        return value

    @field_validator("route", mode="before")
    @classmethod
    def _check_route(cls, value: Any) -> Any:
        return check_route_name(value)

    # ------------------------------------------------------------------ conveniences

    @property
    def spec(self) -> Figure:
        """The metric's figure: its unit, window and attempts rules
        (``figures.registry.FIGURES``)."""
        return FIGURES[self.metric]

    @property
    def unit(self) -> str:
        """``"seconds"``, ``"rows"`` or ``"rows/min"`` (the unit of value and threshold)."""
        return self.spec.unit

    @property
    def scoped(self) -> bool:
        """Whether the rule watches event types apart (an ``event_type`` filter or ``by``),
        rather than the whole outbox (the SPEC §3 backlog) or the table (its health)."""
        return self.spec.scope == "event_type" and bool(self.event_type or self.by)

    def covers(self, event_type: str) -> bool:
        """Whether ``event_type`` is within the rule's scope: its ``event_type`` filter
        matches it (SPEC §2: LIKE with ``%``, else equality — ``flow.model.matches``, what
        the SQL filter computes), or it has ``by`` and no filter (every type). An unscoped
        rule covers no single type."""
        if not self.scoped:
            return False
        return self.event_type is None or matches(self.event_type, event_type)

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

    @property
    def runbook_steps(self) -> tuple[str, ...]:
        """The ``runbook``'s steps (``steps_of``); ``()`` without a runbook."""
        return steps_of(self.runbook)

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


def _check_not_table_wide(field: str, value: Any, info: ValidationInfo) -> None:
    """Refuse ``field`` (``event_type``, ``by``) on a metric of the whole table (a figure with
    ``scope="table"``: the table's health, the claim's plan), which no event type divides."""
    metric = FIGURES.get(info.data.get("metric", ""))
    if metric and metric.scope == "table" and value not in (None, [], ()):
        raise fail(
            field,
            f"{metric.metric} describes the whole outbox table, not event types; remove {field}",
        )


class RuleSet(_Model):
    """alerts.yml: the SLO rules the scheduler evaluates, and the routes of their alerts."""

    # Developers: a loaded file (``rules_file.load_rules``) has its rules in file order,
    # ``for_``/``keep_firing_for`` resolved; ``path`` is the file it came from.
    version: Annotated[int, WithJsonSchema({"const": SUPPORTED_VERSION})]
    """The file's format: 1."""
    defaults: Defaults = Field(default_factory=Defaults)
    """Settings every rule uses unless it gives its own."""
    routes: dict[Slug, Route] = Field(
        default_factory=dict, json_schema_extra={"additionalProperties": False}
    )
    """Where alerts go, by route name (a slug that rules name in ``route``)."""
    rules: list[Rule]
    """The rules, evaluated in this order (a rule that may inhibit others first)."""
    inhibit: tuple[InhibitRule, ...] = ()
    """Inhibitions: while an alert matching an entry's ``source_matchers`` fires, the
    notifications of the alerts it explains are suppressed (Alertmanager's
    ``inhibit_rules``; see the docs' Alerts page, "Inhibition")."""
    _path: str = PrivateAttr(default="")

    @field_validator("version", mode="before")
    @classmethod
    def _check_version(cls, value: Any) -> Any:
        if value != SUPPORTED_VERSION or isinstance(value, bool):
            raise fail("version", f"expected {SUPPORTED_VERSION}, got {quoted(value)}")
        return value

    @property
    def path(self) -> str:
        """The file this rule set was loaded from."""
        return self._path

    @property
    def message_routes(self) -> list[str]:
        """The routes that take messages (every route but ``type: alertmanager``, whose
        alerts are posted from the state): the scheduler's own alerts go to these."""
        return [name for name, route in self.routes.items() if route.type != ALERTMANAGER]

    def rule(self, name: str) -> Rule:
        """The rule called ``name``; raises ``KeyError`` when there is none."""
        for rule in self.rules:
            if rule.name == name:
                return rule
        raise KeyError(name)
