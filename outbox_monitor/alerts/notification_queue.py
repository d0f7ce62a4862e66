"""Queue an alert instance's notification: its payload (the design contract: summary,
value, offenders, runbook, dashboard path, …) and its row, written in the evaluator's
transaction under its ``dedupe_key`` (a row already there is not written again).
"""

import logging
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

import psycopg
from psycopg.types.json import Jsonb

from outbox_monitor.alerts import measure
from outbox_monitor.alerts.evaluation_pass import EvaluationPass, Observation
from outbox_monitor.alerts.links import (
    dashboard_path,
    instance_event_type,
    pause_path,
    timeline_path,
)
from outbox_monitor.alerts.outbox_scope import link_outbox, scope_payload, scoped_instance
from outbox_monitor.alerts.rules import Rule
from outbox_monitor.alerts.state_machine import (
    ERROR,
    ERROR_KIND,
    FIRING_KIND,
    REPEAT_KIND,
    RESOLVED_KIND,
    InstanceState,
    dedupe_key,
)
from outbox_monitor.errors import DatabaseUnavailable
from outbox_monitor.figures.diagnosis import line_for, line_in, read_evidence
from outbox_monitor.figures.registry import FIGURES
from outbox_monitor.flow.held import held_note
from outbox_monitor.store.db import Database
from outbox_monitor.store.filters import ExactEventType

# Logged as the evaluator, as before this module was split from it (log lines unchanged).
log = logging.getLogger("outbox_monitor.alerts.evaluate")

PAUSE_LINKED = ("failed_in_window", "breaker_open")
"""Alerts whose message links to the Controls page's pause form for their event type."""


def cached_offenders(
    db: Database, rule: Rule, event_type: str | None, context: EvaluationPass
) -> list[dict[str, Any]]:
    """``measure.offenders`` of a rule (for a ``by`` instance: of its event type), once
    per pass; a failure only leaves the message without offenders."""
    cache_key = (rule.name, event_type if rule.by else None)
    if cache_key not in context.offenders:
        try:
            found = measure.offenders(db, rule, event_type=cache_key[1])
        except DatabaseUnavailable:
            raise
        except Exception as error:
            log.warning("rule %s: no offenders for the message: %s", rule.name, error)
            found = []
        context.offenders[cache_key] = list(found)
    return context.offenders[cache_key]


def queue_notification(
    db: Database,
    conn: psycopg.Connection,
    rule: Rule,
    instance: str,
    kind: str,
    seq: int,
    observation: Observation,
    context: EvaluationPass,
    *,
    silenced: bool,
    routes: Mapping[str, bool],
    state: InstanceState,
    previous: InstanceState,
    repeat: int | None = None,
    figures_db: Database | None = None,
    episode: int | None = None,
    inhibited_by: str | None = None,
) -> int | None:
    """Insert the ``kind`` notification of an instance's episode ``seq`` (``repeat``: the
    repeat's number) with its payload, one row per route (one delivery per receiver), in
    ``conn``'s transaction (a connection of ``db``). The payload's figures (offenders, rows
    held) are read through ``figures_db`` (default ``db``). ``routes``: where it goes
    (``outbox_scope.routes_for`` of its labels), each route with whether its row is
    ``suppressed`` (else pending). The first route's row has the dedupe key
    (``state_machine.dedupe_key``), each further route's ``<route>@<dedupe key>`` (its
    own row, retried and ordered on its own). With a fleet file the row and payload carry the
    outbox (``db.alert_outbox``), the payload's dashboard paths ``?outbox=``, and the row's
    instance and dedupe key are scoped by it (``outbox_scope.scoped_instance``).
    ``instance``: the instance's key as the rule knows it (``""``, ``event_type=…``).
    ``episode``: the id of the transition that started the episode, put in the payload as
    ``episode`` (``message_key.row_message_key``); ``None``: an episode older than it.
    ``inhibited_by``: the firing alert that inhibits it (``inhibition.Source.name``), put
    in the payload as ``inhibited_by`` (the reason of its suppressed rows).

    Returns:
        The first route's row id (else the first row inserted); ``None`` when every row's
        dedupe key was already there.
    """
    figures = figures_db or db
    payload = _payload(figures, rule, instance, kind, seq, observation, context, state, previous)
    payload = scope_payload(payload, db.alert_outbox)
    stored = scoped_instance(db.alert_outbox, instance)
    if repeat is not None:
        payload["repeat"] = repeat
    if episode is not None:
        payload["episode"] = episode
    if inhibited_by is not None:
        payload["inhibited_by"] = inhibited_by
    key = dedupe_key(rule.name, stored, seq, kind, repeat)
    inserted = []
    for index, (route, suppressed) in enumerate(routes.items()):
        row = conn.execute(
            db.compose("notification_insert"),
            {
                "outbox": db.alert_outbox,
                "dedupe_key": key if index == 0 else f"{route}@{key}",
                "rule": rule.name,
                "instance": stored,
                "kind": kind,
                "route": route,
                "evaluation_id": context.evaluation_id,
                "payload": Jsonb(payload),
                "silenced": silenced,
                "status": "suppressed" if suppressed else "pending",
                "now": context.now,
            },
        ).fetchone()
        if row is not None:
            inserted.append(row["id"])
    return inserted[0] if inserted else None


def _payload(
    db: Database,
    rule: Rule,
    instance: str,
    kind: str,
    seq: int,
    observation: Observation,
    context: EvaluationPass,
    state: InstanceState,
    previous: InstanceState,
) -> dict[str, Any]:
    labels = observation.labels
    event_type = instance_event_type(rule, instance, labels)
    offenders = (
        cached_offenders(db, rule, event_type, context)
        if kind in (FIRING_KIND, REPEAT_KIND)
        else []
    )
    group = _single_error_group(offenders)
    if kind == RESOLVED_KIND:
        since = previous.firing_since or previous.pending_since or context.now
    elif kind == ERROR_KIND:
        since = context.now
    else:
        since = state.pending_since or state.firing_since or context.now
    payload: dict[str, Any] = {
        "rule": rule.name,
        "instance": instance,
        "severity": rule.severity,
        "summary": rule.render_summary(observation.value, event_type),
        "metric": rule.metric,
        "op": rule.op,
        "threshold": rule.threshold,
        "value": observation.value,
        "unit": rule.unit,
        "since": since.isoformat(),
        "labels": labels,
        "offenders": offenders,
        "runbook_url": rule.render_runbook_url(event_type),
        # the steps, as the rule had them when it fired (a resolve needs none)
        "runbook": list(rule.runbook_steps) if kind != RESOLVED_KIND else [],
        "dashboard_path": dashboard_path(rule, event_type, group),
        # around the breach's start (what changed before it); a resolve or an evaluation
        # error around now (what ended it)
        "timeline_path": timeline_path(
            since if kind in (FIRING_KIND, REPEAT_KIND) else context.now
        ),
        "kind": kind,
        "firing_seq": seq,
        "evaluated_at": context.now.isoformat(),
        "keep_firing_for": rule.keep_firing_for,
    }
    if observation.forecast is not None:
        payload["forecast"] = observation.forecast.as_payload()
        if rule.summary is None:
            payload["summary"] = f"{rule.name}: forecast: {observation.forecast.text}"
    if kind in (FIRING_KIND, REPEAT_KIND):
        payload.update(_flow_notes(db, rule, event_type))
        if event_type and (rule.by or "%" not in event_type):
            payload.update(_diagnosis(db, event_type, state.firing_since or context.now, context))
    if kind == ERROR_KIND:
        payload["error"] = observation.error
        payload["summary"] = (
            f"{rule.name}: cannot be evaluated: "
            + ((observation.error or "").splitlines() or [""])[0]
        )
        payload["previous_state"] = previous.state
    if kind == RESOLVED_KIND:
        payload["resolved_at"] = context.now.isoformat()
        if previous.state == ERROR:
            payload["summary"] = f"{rule.name}: evaluation works again"
            payload["error"] = previous.error
        else:
            payload["summary"] = _resolved_summary(rule, previous, observation)
    return payload


def _resolved_summary(rule: Rule, previous: InstanceState, observation: Observation) -> str:
    """A resolve's summary: what the figure was at the last check while it fired (the
    message shows its value now). The rule's ``summary`` describes the breach and asks for
    action, which a resolve must not repeat with the value now ("held for 0.0s: vacuum
    cannot remove…")."""
    parts = []
    if observation.vanished:
        parts.append("No longer reported")
    if measure.breached(rule, previous.value):
        parts.append(
            f"{rule.metric} was {rule.format(previous.value)} at the last check while firing"
        )
    return "; ".join(parts)


def _flow_notes(db: Database, rule: Rule, event_type: str | None) -> dict[str, Any]:
    """SPEC §5 in a firing message: the rows of an alert about pending rows that a pause or
    breaker holds (``held_rows``, ``held_by``: an intended pause should not look like an
    outage), and for failure and breaker alerts the Controls page's pre-filled pause
    (``pause_path``), as failure alerts carry a replay link."""
    notes: dict[str, Any] = {}
    if "pending" in FIGURES[rule.metric].instances.open:
        scope = ExactEventType(event_type) if event_type and rule.by else event_type
        rows, by = held_note(db, scope)
        if rows:
            notes.update(held_rows=rows, held_by=by)
    if event_type and rule.metric in PAUSE_LINKED:
        notes["pause_path"] = pause_path(event_type, reason=f"alert {rule.name}")
    return notes


def _diagnosis(
    db: Database, event_type: str, since: datetime, context: EvaluationPass
) -> dict[str, Any]:
    """What is wrong with the alert's one event type (the line the Overview's headline
    shows): from the pass's evidence, read once (``diagnosis.read_evidence`` of every type,
    ``diagnosis.line_in``), else of that type alone (``diagnosis.line_for``: a type folded
    into ``other``); as ``{"diagnosis": [parts]}`` with its paths to ``db``'s outbox
    (``?outbox=`` with a fleet file); ``{}`` — logged — when it cannot be read."""
    try:
        if "evidence" not in context.diagnoses:
            context.diagnoses["evidence"] = read_evidence(db)
        found = line_in(context.diagnoses["evidence"], event_type, firing_since=since)
        if found is None:
            found = line_for(db, event_type, firing_since=since)
    except DatabaseUnavailable:
        raise
    except Exception as error:  # as for offenders: the message goes out without the line
        log.warning("alert on %s: no diagnosis for the message: %s", event_type, error)
        return {}
    if found is None:
        return {}
    parts = found.as_payload()
    for part in parts:
        part["path"] = link_outbox(part["path"], db.alert_outbox)
    return {"diagnosis": parts}


def _single_error_group(offenders: Sequence[dict[str, Any]]) -> str | None:
    groups = {o.get("group_id") for o in offenders if o.get("kind") == "error_group"} - {None}
    return groups.pop() if len(groups) == 1 else None
