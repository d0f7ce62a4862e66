"""Inhibition (issue 31 item 4): which firing alert, if any, inhibits an instance's
notifications, with Alertmanager's semantics (``inhibit_rules``).

An instance (the *target*) is inhibited while some *source* fires such that, for one entry
of alerts.yml's ``inhibit`` (``inhibit_model.InhibitRule``):

- the source's labels satisfy ``source_matchers`` and the target's ``target_matchers``
  (``silences.matches``: equality, LIKE with ``%``);
- every ``equal`` label is present on both sides with the same value (a label missing on
  either side never matches);
- the source is not the target itself, and its severity is at least the target's
  (``warning`` never inhibits ``critical``).

The sources of an evaluation pass (``PassInhibitions``): the outbox's rule instances firing
at its start, kept current as the pass moves each one (the rules that may inhibit are
evaluated first, ``sources_first``), and the scheduler's own outbox-level alerts while they
fire — ``alerting-stalled`` (its error notification whose resolve is not queued yet) and
``database-unreachable`` (this process's outage, in its memory: ``outage.DatabaseHealth``) —
labelled ``rule``, ``severity: critical`` and the outbox's labels (``outbox=<key>`` with a
fleet file). The sources are one outbox's: an alert of another outbox never inhibits.

An inhibited instance keeps its state machine; the evaluator writes its notifications
suppressed, except a resolve of an episode that was notified (``evaluate``).
"""

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from outbox_monitor.alerts.inhibit_model import InhibitRule
from outbox_monitor.alerts.outbox_scope import unscoped_instance, with_scope
from outbox_monitor.alerts.own_alerts import open_alerts
from outbox_monitor.alerts.rules import Rule
from outbox_monitor.alerts.silences import matches
from outbox_monitor.store.db import Database

SEVERITY_RANK = {"info": 1, "warning": 2, "critical": 3}
"""Severities in order: a source inhibits only targets of at most its own severity."""
STALLED = "alerting-stalled"
"""``stall.RULE_NAME`` (``inhibit_model.OWN_SOURCES``)."""
OWN_SEVERITY = "critical"


@dataclass(frozen=True)
class Source:
    """A firing alert that may inhibit others: its rule, instance key (as the rule knows
    it: ``""``, ``event_type=…``; the process or table of an own alert) and labels."""

    rule: str
    instance: str
    labels: Mapping[str, str]

    @property
    def name(self) -> str:
        """How the dashboard and a suppressed notification name it:
        ``breaker-open event_type=order.paid``, ``backlog``."""
        return f"{self.rule} {self.instance}" if self.instance else self.rule


def own_labels(rule: str, scope: Mapping[str, str]) -> dict[str, str]:
    """The labels of one of the scheduler's own alerts: ``rule``, ``severity: critical``
    and the outbox's (``scope``: ``outbox_scope.scope_labels``; none without a fleet file)."""
    return with_scope({"rule": rule, "severity": OWN_SEVERITY}, scope)


def _rank(labels: Mapping[str, str]) -> int:
    return SEVERITY_RANK.get(labels.get("severity", ""), 0)


def _shares(entry: InhibitRule, source: Source, labels: Mapping[str, str]) -> bool:
    """Whether a source matching ``entry``'s ``source_matchers`` may inhibit a target of
    ``labels`` matching its ``target_matchers``: every ``equal`` label present on both
    sides with one value, the source's severity at least the target's."""
    return all(
        name in labels and name in source.labels and labels[name] == source.labels[name]
        for name in entry.equal
    ) and _rank(source.labels) >= _rank(labels)


def inhibitor(
    entries: Sequence[InhibitRule],
    sources: Iterable[Source],
    rule: str,
    instance: str,
    labels: Mapping[str, str],
) -> Source | None:
    """The first of ``sources`` that inhibits the instance ``(rule, instance)`` of
    ``labels`` by one of ``entries`` (in file order, then the sources' order): both sides'
    matchers, ``_shares``, and never the instance itself. ``None``: not inhibited."""
    keyed = {(source.rule, source.instance): source for source in sources}
    return PassInhibitions(entries, keyed).inhibitor(rule, instance, labels)


def may_inhibit(rule: Rule, entries: Sequence[InhibitRule]) -> bool:
    """Whether an instance of ``rule`` may match some entry's ``source_matchers``, judged
    from the labels every instance of it has (``rule``, ``severity``, its ``labels``);
    a matcher on another label (``event_type``, ``outbox``) may match."""
    known = {**rule.labels, "rule": rule.name, "severity": rule.severity}
    return any(
        all(
            matches({name: value}, known)
            for name, value in entry.source_matchers.items()
            if name in known
        )
        for entry in entries
    )


def sources_first(rules: Sequence[Rule], entries: Sequence[InhibitRule]) -> list[Rule]:
    """``rules`` with those that may inhibit (``may_inhibit``) first, each part in file
    order: a breaker that opens in the same pass as its type's backlog crosses inhibits it
    at once. Unchanged without ``entries``."""
    if not entries:
        return list(rules)
    return sorted(rules, key=lambda rule: not may_inhibit(rule, entries))


@dataclass
class PassInhibitions:
    """The inhibitions of one evaluation pass of one outbox (see the module docstring).

    Build it with ``read``; ``inhibitor`` answers for an instance, ``observe`` keeps the
    rule instances' sources current as the pass moves them.
    """

    entries: Sequence[InhibitRule]
    sources: dict[tuple[str, str], Source] = field(default_factory=dict)
    marks: dict[tuple[str, str], str] = field(default_factory=dict)
    """``alert_instances.inhibited_by`` as stored, by (rule, instance): written only when
    it changes (``remark``)."""
    _matching: dict[int, list[Source]] = field(default_factory=dict, repr=False)
    """Each entry's sources matching its ``source_matchers``, by entry index (found once,
    forgotten when the sources change: a pass asks for every instance)."""

    @classmethod
    def read(
        cls,
        db: Database,
        entries: Sequence[InhibitRule],
        rules: Sequence[Rule],
        scope: Mapping[str, str],
        own_sources: Callable[[], Iterable[tuple[str, str]]] | None = None,
    ) -> "PassInhibitions":
        """The sources at a pass's start: ``db``'s outbox's instances of ``rules`` firing
        now (``alert_instances_firing``), its open ``alerting-stalled`` alert, and the own
        alerts ``own_sources`` names (``(rule, instance)`` pairs: ``database-unreachable``
        from ``outage.DatabaseHealth.firing_sources``), and the marks stored (``marks``).
        Without ``entries`` only the marks are read (those left by a removed entry).

        Raises:
            DatabaseUnavailable and the connector's errors.
        """
        outbox = db.alert_outbox
        found = cls(entries, marks=_marks(db, active_only=False))
        if not entries:
            return found
        rows = db.fetch_all(
            "alert_instances_firing", {"outbox": outbox, "rules": [rule.name for rule in rules]}
        )
        for row in rows:
            instance = unscoped_instance(outbox, row["instance"])
            found.sources[(row["rule"], instance)] = Source(
                row["rule"], instance, dict(row["labels"] or {})
            )
        own = [(STALLED, db.table_name)] if open_alerts(db, STALLED, db.table_name) else []
        for rule, instance in [*own, *(own_sources() if own_sources else ())]:
            found.sources[(rule, instance)] = Source(rule, instance, own_labels(rule, scope))
        return found

    def inhibitor(self, rule: str, instance: str, labels: Mapping[str, str]) -> Source | None:
        """What inhibits the instance now: the first of the pass's sources matching an
        entry's ``source_matchers``, for the first entry whose ``target_matchers`` the
        instance's ``labels`` match, that ``_shares`` with it and is not the instance itself;
        ``None`` when none (module ``inhibitor``)."""
        for index, entry in enumerate(self.entries):
            if not matches(entry.target_matchers, labels):
                continue
            if index not in self._matching:
                self._matching[index] = [
                    source
                    for source in self.sources.values()
                    if matches(entry.source_matchers, source.labels)
                ]
            for source in self._matching[index]:
                if (source.rule, source.instance) != (rule, instance) and _shares(
                    entry, source, labels
                ):
                    return source
        return None

    def remark(self, rule: str, instance: str, mark: str | None) -> bool:
        """Note the instance's mark now (a source's name, ``None``: not inhibited); whether
        it differs from the one stored, so that it must be written."""
        key = (rule, instance)
        changed = self.marks.get(key) != mark
        if mark is None:
            self.marks.pop(key, None)
        else:
            self.marks[key] = mark
        return changed

    def observe(self, rule: str, instance: str, labels: Mapping[str, str], firing: bool) -> None:
        """The pass moved an instance: a source while ``firing``, else no longer one."""
        if not self.entries:
            return
        key, before = (rule, instance), self.sources.get((rule, instance))
        if firing:
            self.sources[key] = Source(rule, instance, dict(labels))
        else:
            self.sources.pop(key, None)
        if before != self.sources.get(key):
            self._matching.clear()


def inhibited_instances(db: Database) -> dict[tuple[str, str], str]:
    """What inhibits each instance of ``db``'s outbox now, as the last pass found
    (``alert_instances.inhibited_by``, migration 027): ``{(rule, instance): source name}``,
    the instance as the rule knows it (``""``, ``event_type=…``); only inhibited ones.

    Raises:
        DatabaseUnavailable and the connector's errors.
    """
    return _marks(db, active_only=True)


def _marks(db: Database, *, active_only: bool) -> dict[tuple[str, str], str]:
    """``alert_instances.inhibited_by`` of ``db``'s outbox by (rule, instance as the rule
    knows it); ``active_only``: not of an inactive instance (a removed rule's retired
    instance keeps its last mark)."""
    outbox = db.alert_outbox
    rows = db.fetch_all("alert_instances_inhibited", {"outbox": outbox})
    return {
        (row["rule"], unscoped_instance(outbox, row["instance"])): row["inhibited_by"]
        for row in rows
        if not (active_only and row["state"] == "inactive")
    }
