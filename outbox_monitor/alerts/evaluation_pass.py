"""One evaluation pass's records: what it observed of an instance, what it carries from rule
to rule (its id and instant, the active silences, offenders fetched once), and its report.
"""

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any


@dataclass(frozen=True)
class InstanceReport:
    """One instance after a pass: state, value, the transitions taken (``"pending→firing"``)
    and the notification kinds queued (``"firing"``, ``"repeat"``; suppressed ones too)."""

    rule: str
    instance: str
    state: str
    value: float | None
    breached: bool | None
    transitions: tuple[str, ...] = ()
    notifications: tuple[str, ...] = ()
    silenced: bool = False
    error: str | None = None
    inhibited_by: str | None = None
    """The firing alert that inhibits it (``inhibition.Source.name``), else ``None``."""


@dataclass
class EvaluationReport:
    """The result of one pass: ``evaluation_id`` shared by its rows, ``evaluated_at`` (the
    clock), ``duration_seconds`` (wall time of the pass), every instance, and the seconds
    each rule's measurement took."""

    evaluation_id: str
    evaluated_at: datetime
    duration_seconds: float = 0.0
    instances: list[InstanceReport] = field(default_factory=list)
    rule_seconds: dict[str, float] = field(default_factory=dict)

    @property
    def transitions(self) -> list[tuple[str, str, str]]:
        """``(rule, instance, "from→to")`` of every transition of the pass."""
        return [(i.rule, i.instance, t) for i in self.instances for t in i.transitions]

    def instance(self, rule: str, instance: str = "") -> InstanceReport:
        """The report of one instance; ``KeyError`` when the pass did not touch it."""
        for item in self.instances:
            if item.rule == rule and item.instance == instance:
                return item
        raise KeyError((rule, instance))


@dataclass(frozen=True)
class Observation:
    """What a pass saw of one instance: breached or not, its value and labels; ``error``
    when its rule could not be measured, ``vanished`` when no longer reported; ``forecast``
    a ``predict`` rule's ``forecast.Forecast``."""

    breached: bool
    value: float | None
    labels: dict[str, str]
    error: str | None = None
    vanished: bool = False
    forecast: Any = None


@dataclass
class EvaluationPass:
    """What a pass carries from rule to rule: its id and instant, the active silences, the
    offenders fetched so far (``notification_queue.cached_offenders``), the evidence of
    what is wrong once read (``figures.diagnosis.Evidence`` under ``"evidence"``: the
    messages of several event types' alerts read it once) and the alerts that may inhibit
    (``inhibition.PassInhibitions``, set by the evaluator)."""

    evaluation_id: str
    now: datetime
    silences: list[dict[str, Any]]
    offenders: dict[tuple[str, str | None], list[dict[str, Any]]] = field(default_factory=dict)
    diagnoses: dict[str, Any] = field(default_factory=dict)
    inhibitions: Any = None
