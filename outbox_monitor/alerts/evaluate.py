"""The alert state machine: evaluate every rule, persist each instance's state, queue notifications.

One pass (``Evaluator.run_once``) measures every rule (``measure.measure``) and moves each
rule instance (issue 3 §2)::

    inactive ──breached──▶ pending ──breached for `for`──▶ firing ──clear for
       ▲   (for = 0: straight to firing)  │ cleared                │ `keep_firing_for`
       └──────────── silently ◀───────────┘        resolved ◀──────┘

- ``firing`` while breached again clears ``cleared_since``; a value flapping around the
  threshold never clears for ``keep_firing_for`` and so fires and resolves once.
- An instance the measurement no longer reports (its event type vanished) is not breached.
- A rule whose measurement raises (statement timeout, a missing column, …) puts its
  instance ``""`` into ``error`` (one ``error`` notification per episode); the next pass
  that measures it resolves the error, then evaluates afresh. Other rules carry on. A
  lost database (``DatabaseUnavailable``) is not a rule error: the pass stops and raises.
- A *firing episode* is numbered by ``firing_seq``: entering ``firing`` starts one, and so
  does entering ``error`` from ``inactive``/``pending``. ``firing`` → ``error`` stays in
  the episode (its error and its final resolve thread under the firing message).

Every transition, its ``alert_transitions`` row and its notification row (``firing``,
``resolved``, ``error``; ``repeat`` every route ``repeat_interval`` while still breached)
are written in ONE transaction that holds the instance's row lock, so a crash, a restart or
a second evaluator can neither lose nor duplicate a notification. A notification's
``dedupe_key`` is ``rule|instance|firing_seq|kind`` (``…|repeat-<n>`` for repeats; the
instance as stored: scoped by a fleet file's outbox, ``outbox_scope.scoped_instance``).
Each episode also has an id, the one of the transition that started it (kept in
``alert_instances.episode_id`` while it lasts, carried in every notification's payload as
``episode``): the Slack message's key is made of it (``message_key``). An acknowledged
episode (``alerts.acknowledge``, a Slack button) queues no more repeats.

A route of ``type: alertmanager`` queues no notification: its alerts are posted from the
instances' state by ``alerts.alertmanager``.

Suppressed (``status='suppressed'``, never sent): a silenced instance (``silenced=true``);
an inhibited one (``alerts.inhibition``: a firing alert explains it; the payload's
``inhibited_by`` names it, kept in ``alert_instances.inhibited_by`` for the dashboard) —
but never the resolve of an episode that was notified; a resolve of a route with
``send_resolved: false``; a resolve of an episode whose every notification was silenced or
inhibited (nobody was told it fired). Once neither holds, a firing episode nobody was told of
is notified at the next pass (a ``repeat``).

The notification rows are ``notification_queue``'s; the instances of rules no longer in the
file are ``removed_rules``'s; a pass's records and report are ``evaluation_pass``'s.
"""

import logging
import time
import uuid
from collections.abc import Callable
from dataclasses import replace
from datetime import datetime
from typing import Any

import psycopg
from psycopg.types.json import Jsonb

from outbox_monitor.alerts import measure, silences
from outbox_monitor.alerts.acknowledge import episode_acknowledged
from outbox_monitor.alerts.clock import Clock, system_clock
from outbox_monitor.alerts.evaluation_pass import (
    EvaluationPass,
    EvaluationReport,
    InstanceReport,
    Observation,
)
from outbox_monitor.alerts.inhibition import PassInhibitions, sources_first
from outbox_monitor.alerts.links import instance_event_type, instance_labels
from outbox_monitor.alerts.notification_queue import cached_offenders, queue_notification
from outbox_monitor.alerts.outbox_scope import (
    routes_for,
    scope_labels,
    scoped_instance,
    selected_rules,
    unscoped_instance,
    with_scope,
)
from outbox_monitor.alerts.removed_rules import retire_removed_rules
from outbox_monitor.alerts.route_model import ALERTMANAGER
from outbox_monitor.alerts.rules import Rule, RuleSet
from outbox_monitor.alerts.state_machine import (
    ERROR_KIND,
    FIRING,
    FIRING_KIND,
    INACTIVE,
    REPEAT_KIND,
    RESOLVED_KIND,
    InstanceState,
    advance,
    dedupe_key,
    held,
)
from outbox_monitor.config.fleet import Outbox
from outbox_monitor.errors import DatabaseUnavailable, OutboxMonitorError, clean_error
from outbox_monitor.store.db import Database

log = logging.getLogger(__name__)


def _error_text(error: BaseException) -> str:
    """An evaluation error for people: the package's own message (with its hint), else
    the exception's type and text (``UndefinedColumn: column "locked_at" does not exist``),
    as ``clean_error`` makes it (storable, at most 2,000 characters)."""
    text = str(error).strip()
    if not isinstance(error, OutboxMonitorError):
        text = f"{type(error).__name__}: {text}" if text else type(error).__name__
    return clean_error(text)


# ------------------------------------------------------------------------ evaluator


class Evaluator:
    """Evaluates a ``RuleSet`` against the database and persists every instance's state.

    Args:
        db: the connector of alert state, silences and notifications (the scheduler's
            writes: ``OUTBOX_MONITOR_PRIMARY_DSN``).
        ruleset: the loaded alerts.yml.
        clock: the instant of each pass (tests pass a fake clock; ``for``,
            ``keep_firing_for`` and ``repeat_interval`` are measured on it).
        fence: called first in each write transaction (``Leadership.fence``: raises
            ``LeadershipLost`` once the lease was taken over, and the pass stops).
        figures_db: the connector the rules' figures and offenders are measured through
            (``OUTBOX_MONITOR_DSN``, possibly a hot standby); default ``db``.
        outbox: the fleet's outbox evaluated (issue 16 item 3): only the rules selecting
            it are evaluated (``outbox_scope.rule_selects``; ``None``: the single outbox
            named ``default``). The state is keyed by ``db.alert_outbox``; with a fleet file
            the instances' labels carry ``outbox`` and the outbox's labels, which routes
            may match (``outbox_scope.routes_for``).
        own_sources: the scheduler's own alerts firing in this process, as ``(rule,
            instance)`` pairs, that may inhibit (``outage.DatabaseHealth.firing_sources``);
            ``None``: none beside ``alerting-stalled``, read from the database.
    """

    def __init__(
        self,
        db: Database,
        ruleset: RuleSet,
        *,
        clock: Clock = system_clock,
        fence: Callable[[psycopg.Connection], None] | None = None,
        figures_db: Database | None = None,
        outbox: Outbox | None = None,
        own_sources: Callable[[], list[tuple[str, str]]] | None = None,
    ) -> None:
        self.db = db
        self.own_sources = own_sources
        self.outbox = outbox
        self.scope = scope_labels(outbox, db.alert_outbox)
        self.figures_db = figures_db or db
        self.ruleset = ruleset
        self.clock = clock
        self.fence = fence

    def run_once(self) -> EvaluationReport:
        """Evaluate every rule once (issue 3 §2).

        Returns:
            An ``EvaluationReport`` (duration in seconds of wall time).

        Raises:
            DatabaseUnavailable: the database was lost during the pass; the instances
                done so far are committed, the rest wait for the next pass.
            LeadershipLost: from ``fence``: another scheduler took the lease over.
        """
        started = time.perf_counter()
        now = self.clock()
        report = EvaluationReport(evaluation_id=str(uuid.uuid4()), evaluated_at=now)
        context = EvaluationPass(report.evaluation_id, now, silences.active_silences(self.db, now))
        rules = selected_rules(self.ruleset, self.outbox, self.db.alert_outbox)
        inhibit = self.ruleset.inhibit
        context.inhibitions = PassInhibitions.read(
            self.db, inhibit, rules, self.scope, self.own_sources
        )
        for rule in sources_first(rules, inhibit):
            rule_started = time.perf_counter()
            report.instances.extend(self._evaluate_rule(rule, context))
            report.rule_seconds[rule.name] = time.perf_counter() - rule_started
        report.instances.extend(retire_removed_rules(self.db, rules, context, self._fence))
        report.duration_seconds = time.perf_counter() - started
        return report

    # --------------------------------------------------------------- per rule

    def _evaluate_rule(self, rule: Rule, context: EvaluationPass) -> list[InstanceReport]:
        try:
            measurements = measure.measure(self.figures_db, rule)
        except DatabaseUnavailable:
            raise
        except Exception as error:  # a rule error never stops the other rules
            text = _error_text(error)
            log.warning("rule %s: evaluation failed: %s", rule.name, text.splitlines()[0])
            observation = Observation(False, None, self._labels(rule, None), error=text)
            return [self._apply(rule, "", observation, context)]
        reports = []
        seen = set()
        outbox = self.db.alert_outbox
        for item in measurements:
            seen.add(scoped_instance(outbox, item.instance))
            observation = Observation(
                item.breached,
                item.value,
                self._labels(rule, item.labels),
                forecast=item.forecast,
            )
            reports.append(self._apply(rule, item.instance, observation, context))
        known = self.db.fetch_all("alert_instances_of_rule", {"outbox": outbox, "rule": rule.name})
        for row in known:
            if row["instance"] in seen or row["state"] == INACTIVE:
                continue
            instance = unscoped_instance(outbox, row["instance"])
            measured = (
                {"event_type": instance.removeprefix("event_type=")}
                if instance.startswith("event_type=")
                else None
            )
            observation = Observation(False, None, self._labels(rule, measured), vanished=True)
            reports.append(self._apply(rule, instance, observation, context))
        return reports

    def _apply(
        self, rule: Rule, instance: str, observation: Observation, context: EvaluationPass
    ) -> InstanceReport:
        params = self._timing(rule)
        # an alertmanager route's alerts are posted from the state (``alerts.alertmanager``):
        # only the other routes queue notifications
        route_names = [
            name
            for name in routes_for(self.ruleset, rule.route, observation.labels)
            if getattr(self.ruleset.routes.get(name), "type", None) != ALERTMANAGER
        ]
        queues = bool(route_names)
        # the first one's repeat_interval times repeats
        route = self.ruleset.routes.get(route_names[0]) if queues else None
        stored = scoped_instance(self.db.alert_outbox, instance)
        key = {"outbox": self.db.alert_outbox, "rule": rule.name, "instance": stored}
        # A look without the lock: fetch the offenders before the transaction when a firing
        # or repeat message may be queued (the locked step below is the one that counts).
        peek = self.db.fetch_one("alert_instance_lock", key)
        before = InstanceState() if peek is None else InstanceState.from_row(peek)
        if (
            queues
            and observation.error is None
            and _may_notify_firing(before, observation.breached, context.now, params, route)
        ):
            cached_offenders(
                self.figures_db,
                rule,
                instance_event_type(rule, instance, observation.labels),
                context,
            )

        labels = observation.labels
        silenced = bool(silences.silenced_by(context.silences, labels))
        # the product's own receivers only: an alertmanager route's Alertmanager inhibits
        source = context.inhibitions.inhibitor(rule.name, instance, labels) if queues else None
        muted = silenced or source is not None
        with self.db.transaction() as conn:
            self._fence(conn)
            conn.execute(self.db.compose("alert_instance_ensure"), {**key, "labels": Jsonb(labels)})
            locked = conn.execute(self.db.compose("alert_instance_lock"), key).fetchone()
            current, episode = InstanceState.from_row(locked), locked["episode_id"]
            new, steps = advance(
                current,
                now=context.now,
                breached=observation.breached,
                value=observation.value,
                error=observation.error,
                **params,
            )
            kinds: list[str] = []
            for step in steps:
                transition = conn.execute(
                    self.db.compose("alert_transition_insert"),
                    {
                        **key,
                        "from_state": step.from_state,
                        "to_state": step.to_state,
                        "value": observation.value,
                        "at": context.now,
                        "detail": step.detail
                        + (" (no longer reported)" if observation.vanished else ""),
                    },
                ).fetchone()
                if step.kind in (FIRING_KIND, ERROR_KIND) and step.seq != current.firing_seq:
                    episode = transition["id"]  # this transition starts the episode
                if step.kind is None or not queues:
                    continue
                told = current.last_notified_at is not None
                # a resolve of an episode people were told of is sent even while inhibited
                inhibited = source is not None and step.kind != RESOLVED_KIND
                suppressed = {
                    name: silenced
                    or inhibited
                    or (step.kind == RESOLVED_KIND and not (told and _sends_resolved(self, name)))
                    for name in route_names
                }
                sent = queue_notification(
                    self.db,
                    conn,
                    rule,
                    instance,
                    step.kind,
                    step.seq,
                    observation,
                    context,
                    silenced=silenced,
                    routes=suppressed,
                    state=new,
                    previous=current,
                    figures_db=self.figures_db,
                    episode=episode,
                    inhibited_by=source.name if inhibited else None,
                )
                if sent is not None:
                    kinds.append(step.kind)
                    if not muted and step.kind != RESOLVED_KIND:
                        new = replace(new, last_notified_at=context.now)
            if (
                queues
                and new.state == FIRING
                and not steps
                and observation.breached
                and not muted
                and route is not None
                and (
                    new.last_notified_at is None
                    or held(new.last_notified_at, context.now, route.repeat_interval)
                )
                and not episode_acknowledged(self.db, conn, episode)
            ):
                prefix = dedupe_key(rule.name, stored, new.firing_seq, "")
                repeats = conn.execute(
                    self.db.compose("notification_count_repeats"), {**key, "prefix": prefix}
                ).fetchone()["repeats"]
                if (
                    queue_notification(
                        self.db,
                        conn,
                        rule,
                        instance,
                        REPEAT_KIND,
                        new.firing_seq,
                        observation,
                        context,
                        silenced=False,
                        routes=dict.fromkeys(route_names, False),
                        state=new,
                        previous=current,
                        repeat=repeats + 1,
                        figures_db=self.figures_db,
                        episode=episode,
                    )
                    is not None
                ):
                    kinds.append(REPEAT_KIND)
                    new = replace(new, last_notified_at=context.now)
            conn.execute(
                self.db.compose("alert_instance_update"),
                {
                    **key,
                    "labels": Jsonb(labels),
                    "state": new.state,
                    "value": new.value,
                    "threshold": rule.threshold,
                    "pending_since": new.pending_since,
                    "firing_since": new.firing_since,
                    "cleared_since": new.cleared_since,
                    "last_evaluated_at": new.last_evaluated_at,
                    "last_notified_at": new.last_notified_at,
                    "firing_seq": new.firing_seq,
                    "error": new.error,
                    "episode_id": episode,
                },
            )
            marked = source.name if source is not None and new.state != INACTIVE else None
            if context.inhibitions.remark(rule.name, instance, marked):
                conn.execute(
                    self.db.compose("alert_instance_inhibit"), {**key, "inhibited_by": marked}
                )
        context.inhibitions.observe(rule.name, instance, labels, new.state == FIRING)
        return InstanceReport(
            rule=rule.name,
            instance=instance,
            state=new.state,
            value=new.value,
            breached=None if observation.error else observation.breached,
            transitions=tuple(f"{s.from_state}→{s.to_state}" for s in steps),
            notifications=tuple(kinds),
            silenced=silenced,
            error=new.error,
            inhibited_by=marked,
        )

    def _labels(self, rule: Rule, measured: dict[str, str] | None) -> dict[str, str]:
        """An instance's labels (``links.instance_labels``) with its outbox's
        (``outbox_scope.with_scope``: none without a fleet file)."""
        return with_scope(instance_labels(rule, measured), self.scope)

    def _fence(self, conn: psycopg.Connection) -> None:
        if self.fence is not None:
            self.fence(conn)

    def _timing(self, rule: Rule) -> dict[str, float]:
        defaults = self.ruleset.defaults
        return {
            "for_": defaults.for_ if rule.for_ is None else rule.for_,
            "keep_firing_for": (
                defaults.keep_firing_for if rule.keep_firing_for is None else rule.keep_firing_for
            ),
        }


def _sends_resolved(evaluator: Evaluator, name: str) -> bool:
    """Whether the route ``name`` sends resolves (an unknown route: yes, the sender fails
    its row naming it). A grouped route's resolves are queued whatever ``send_resolved``
    says: its group must learn of them (``alerts.grouping`` suppresses them there)."""
    route = evaluator.ruleset.routes.get(name)
    return route is None or route.send_resolved or bool(route.group_by)


def _may_notify_firing(
    state: InstanceState,
    breached: bool,
    now: datetime,
    params: dict[str, float],
    route: Any,
) -> bool:
    """Whether a pass may queue a firing or repeat message for this instance (a cheap
    guess made before the row lock, to fetch the offenders outside the transaction)."""
    if not breached:
        return False
    if state.state != FIRING:
        _, steps = advance(state, now=now, breached=True, value=None, **params)
        return any(step.kind == FIRING_KIND for step in steps)
    return route is not None and (
        state.last_notified_at is None or held(state.last_notified_at, now, route.repeat_interval)
    )
