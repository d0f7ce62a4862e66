"""The Alerts page's helpers: the rules file as loaded, one row per rule instance, silence
inputs, what happened to each notification, and the "send test alert" outcome (issue 3 §4).

Data comes from ``alerts.state`` / ``alerts.silences`` through the cached loaders; nothing
here writes to the database except through ``loaders.create_silence`` / ``expire_silence``
and ``send_test_alert`` (the test message's notification row, ``route_check.send_test``).
"""

import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from functools import lru_cache
from pathlib import Path
from typing import Any

import streamlit as st

from outbox_monitor.access import Identity, Role, require
from outbox_monitor.alerts.route_check import send_test
from outbox_monitor.alerts.rules import SEVERITIES, Rule, RuleSet
from outbox_monitor.alerts.rules_file import RulesError, load_rules, resolve_rules_path
from outbox_monitor.alerts.slack import TransportConfigError, transport_for_route
from outbox_monitor.alerts.stall import LeaseStatus, describe_stall
from outbox_monitor.db import Database
from outbox_monitor.durations import duration_label, parse_duration
from outbox_monitor.ui import format
from outbox_monitor.units import format_value

_DURATION_LIKE = re.compile(r"^\d+(?:\.\d+)?\s*[smhdw]?$")
ANY = "(any)"
"""The "no matcher" choice of the silence form's selectboxes."""
NOT_EVALUATED = "not evaluated yet"
NO_INSTANCE = "no instance"
STATE_LABELS = {
    "firing": "FIRING",
    "error": "ERROR",
    "pending": "pending",
    "inactive": "ok",
    NOT_EVALUATED: NOT_EVALUATED,
    NO_INSTANCE: "no instance (no event type with matching rows)",
}
"""How the state table writes states: the ones that page in capitals."""
VALIDATE_COMMAND = "outbox-monitor alerts validate"


# ----------------------------------------------------------------------- the rules file


@dataclass(frozen=True)
class LoadedRules:
    """The rules file the page uses: its ``path``, the ``ruleset`` when it is valid, else
    the ``error`` (a ``RulesError`` whose ``problems`` name file, rule and field)."""

    path: str
    ruleset: RuleSet | None
    error: RulesError | None = None


@lru_cache(maxsize=8)
def _load(path: str, content: bytes | None) -> LoadedRules:
    try:
        return LoadedRules(path, load_rules(path))
    except RulesError as error:
        return LoadedRules(path, None, error)


def load_ruleset(path: str | Path | None = None) -> LoadedRules:
    """Load the rules file (``rules_file.resolve_rules_path``: ``OUTBOX_MONITOR_RULES``, else
    ``./alerts.yml``, else the shipped one), again whenever its content changes.

    Returns:
        A ``LoadedRules``; never raises for a broken file (the error is in ``error``).
    """
    resolved = resolve_rules_path(path)
    try:
        content: bytes | None = resolved.read_bytes()
    except OSError:
        content = None
    return _load(str(resolved), content)


def show_rules_error(loaded: LoadedRules) -> None:
    """A red banner for an unusable rules file: every problem line (file, rule, field) and
    the command that checks the fixed file. No traceback."""
    assert loaded.error is not None
    count = len(loaded.error.problems)
    st.error(
        f"**Alert rules file invalid** — {format.md_code(loaded.path)} has "
        f"{format.plural(count, 'problem')}; no rule is shown or evaluated from it.",
        icon=":material/rule:",
    )
    st.code("\n".join(loaded.error.problems), language=None, wrap_lines=True)
    check = format.md_code(f"{VALIDATE_COMMAND} --rules {loaded.path}")
    st.info(
        f"Fix the file, then check it with {check} "
        "(it prints every problem, or a one-line summary when the file is valid); restart "
        "the scheduler to evaluate the fixed rules.",
        icon=":material/build:",
    )


def show_stall(lease: LeaseStatus, ruleset: RuleSet | None) -> None:
    """A red "Alerting is stalled" banner when no evaluation completed for more than 3
    intervals (``alerts.stall.describe_stall``); nothing otherwise or without rules.

    Args:
        lease: ``loaders.evaluator_lease``.
        ruleset: the loaded rules (their interval sets the threshold), or ``None``.
    """
    text = None if ruleset is None else describe_stall(lease, ruleset.defaults.interval)
    if text:
        st.error(
            f"**Alerting is stalled** — {format.md_text(text)}",
            icon=":material/notifications_off:",
        )


# ----------------------------------------------------------------------- rule instances


def describe_metric(rule: Rule) -> str:
    """The figure a rule watches: ``"failed_in_window 15m · payment.% · by event_type"``."""
    parts = [rule.metric + (f" {format.duration_label(rule.window)}" if rule.window else "")]
    if rule.attempts is not None:
        parts[0] += f" ≥ {rule.attempts}"
    if rule.event_type:
        parts.append(rule.event_type)
    if rule.by:
        parts.append("by " + ", ".join(rule.by))
    return " · ".join(parts)


def _since(row: Mapping[str, Any], now: datetime | None) -> str:
    """When the instance entered its state (firing/pending since, else its last
    transition), with how long ago."""
    state = row.get("state")
    instant = {
        "firing": row.get("firing_since"),
        "pending": row.get("pending_since"),
    }.get(state) or row.get("changed_at")
    if instant is None:
        return format.NO_VALUE
    text = format.instant(instant)
    if now is not None and now >= instant:
        text += f" ({format.duration((now - instant).total_seconds())} ago)"
    return text


def state_rows(
    ruleset: RuleSet | None, instances: Sequence[Mapping[str, Any]], now: datetime | None
) -> list[dict[str, Any]]:
    """One row per rule instance for the state table, rules in file order.

    Args:
        ruleset: the loaded rules (``None`` when the file is invalid: instances only).
        instances: ``alerts.state.list_instances`` rows.
        now: the database clock, for "(3m ago)".

    Returns:
        Dicts with rule, instance (``"all"`` for a rule without ``by``), state (label with
        icon), value and condition (in the rule's unit), since (when the instance entered
        its state: firing_since / pending_since, else its last transition), metric, for,
        keep_firing_for, severity, route, last_evaluated, error. A rule of the file the
        evaluator has no state for gets one row: "not evaluated yet", or for a ``by`` rule
        "no instance" (no event type has rows its figure counts); an instance of a
        rule no longer in the file (or of the database-unreachable alert) is listed after
        the file's rules with metric "(not in the rules file)".
    """
    rules = {rule.name: rule for rule in ruleset.rules} if ruleset else {}
    by_rule: dict[str, list[Mapping[str, Any]]] = {}
    for row in instances:
        by_rule.setdefault(row["rule"], []).append(row)
    names = list(rules) + [name for name in by_rule if name not in rules]
    table = []
    for name in names:
        rule = rules.get(name)
        empty = NO_INSTANCE if rule and rule.by else NOT_EVALUATED
        for row in by_rule.get(name) or [{"rule": name, "instance": "", "state": empty}]:
            unit = rule.unit if rule else "rows"
            state = row.get("state") or empty
            since = _since(row, now)
            threshold = rule.threshold if rule else row.get("threshold")
            op = rule.op if rule else ""
            table.append(
                {
                    "rule": name,
                    "instance": row.get("instance") or "all",
                    "state": STATE_LABELS.get(state, state),
                    "value": format_value(row.get("value"), unit),
                    "condition": f"{op} {format_value(threshold, unit)}".strip()
                    if threshold is not None
                    else format.NO_VALUE,
                    "since": since,
                    "metric": describe_metric(rule) if rule else "(not in the rules file)",
                    "for": format.duration_label(rule.for_) if rule else format.NO_VALUE,
                    "keep_firing_for": format.duration_label(rule.keep_firing_for)
                    if rule
                    else format.NO_VALUE,
                    "severity": rule.severity if rule else format.NO_VALUE,
                    "route": rule.route if rule else format.NO_VALUE,
                    "last_evaluated": format.instant(row.get("last_evaluated_at")),
                    "error": row.get("error") or "",
                }
            )
    return table


def state_counts(instances: Sequence[Mapping[str, Any]]) -> dict[str, int]:
    """How many instances are firing, pending, in error and ok (``inactive``)."""
    counts = dict.fromkeys(("firing", "pending", "error", "inactive"), 0)
    for row in instances:
        counts[row["state"]] = counts.get(row["state"], 0) + 1
    return counts


def latest_evaluation(instances: Sequence[Mapping[str, Any]]) -> datetime | None:
    """The newest ``last_evaluated_at`` of any instance (``None``: never evaluated)."""
    times = [row["last_evaluated_at"] for row in instances if row.get("last_evaluated_at")]
    return max(times) if times else None


# ----------------------------------------------------------------------- history


def labels_text(labels: Mapping[str, Any] | None) -> str:
    """``{"rule": "x", "event_type": "y"}`` → ``"rule=x, event_type=y"``."""
    return ", ".join(f"{key}={value}" for key, value in (labels or {}).items())


def transition_rows(transitions: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """``alerts.state.list_transitions`` rows for the table: at, rule, instance, change
    (``"pending → firing"``), kind, value (as stored, in the rule's unit) and detail."""
    return [
        {
            "at": format.instant(row["at"]),
            "rule": row["rule"],
            "instance": row["instance"] or "all",
            "change": f"{row['from_state']} → {row['to_state']}",
            "kind": row["kind"],
            "value": row["value"],
            "detail": row["detail"] or "",
        }
        for row in transitions
    ]


def delivery(row: Mapping[str, Any]) -> str:
    """What happened to one notification, in a sentence of markdown (what Slack or the
    sender recorded — channel, ts, error — shown literally).

    ``sent`` → when and where; ``suppressed`` → why it was not posted (silenced, or the
    reason the sender recorded); ``pending`` → waiting, or retrying after a failure with
    the next try; ``failed`` → the last error.
    """
    status, attempts = row.get("status"), row.get("attempts") or 0
    tries = format.plural(attempts, "attempt")
    error = format.md_text(row["last_error"]) if row.get("last_error") else None
    if status == "sent":
        where = (
            f" to {format.md_code(row['slack_channel'])} (ts {format.md_code(row['slack_ts'])})"
            if row.get("slack_ts")
            else ""
        )
        text = f"Posted{where} at {format.instant(row.get('sent_at'))} after {tries}."
        return text + (f" Note: {error}" if error else "")
    if status == "suppressed":
        if row.get("silenced"):
            return "Not posted: a silence matched this alert. Below is what would have been posted."
        reason = error or "nobody was told this alert fired, or its route does not send resolves"
        return f"Not posted ({reason}). Below is what would have been posted."
    if status == "failed":
        return f"Failed for good after {tries}: {error or 'no error recorded'}."
    if attempts:
        status_code = f" (HTTP {row['last_status']})" if row.get("last_status") else ""
        return (
            f"Not posted yet: {tries} failed{status_code}: {error or 'no error recorded'}; "
            f"next try at {format.instant(row.get('available_at'))}."
        )
    return (
        f"Waiting to be posted by the sender (due {format.instant(row.get('available_at'))}). "
        "Below is what it will post."
    )


def notification_rows(notifications: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """``alerts.state.list_notifications`` rows for the table: id, created, kind, rule,
    instance, route, status, silenced, attempts, last HTTP status, last error, sent."""
    return [
        {
            "id": row["id"],
            "created": format.instant(row["created_at"]),
            "kind": row["kind"],
            "rule": row["rule"],
            "instance": row["instance"] or "all",
            "route": row["route"],
            "status": row["status"],
            "silenced": bool(row["silenced"]),
            "attempts": row["attempts"],
            "last_status": row["last_status"],
            "last_error": row["last_error"] or "",
            "sent": format.instant(row["sent_at"]),
        }
        for row in notifications
    ]


def as_shown_in_slack(text: str | None) -> str | None:
    """A message's plain text as Slack displays it: the mrkdwn escapes (``&amp;``,
    ``&lt;``, ``&gt;``) turned back into the characters (shown as text, never as markup)."""
    if text is None:
        return None
    return text.replace("&lt;", "<").replace("&gt;", ">").replace("&amp;", "&")


def notification_label(row: Mapping[str, Any]) -> str:
    """One notification in a picker: ``"#12 · firing · payment-failed · event_type=… · sent"``."""
    parts = [f"#{row['id']}", row["kind"], row["rule"]]
    if row.get("instance"):
        parts.append(row["instance"])
    parts.append(row["status"] + (" (silenced)" if row.get("silenced") else ""))
    return " · ".join(parts)


# ----------------------------------------------------------------------- silences


def silence_matchers(rule: str | None, severity: str | None, event_type: str | None) -> dict:
    """The matchers of the silence form: the chosen rule, severity and event type (exact,
    or LIKE with ``%``); ``ANY``, ``None`` and blank are left out."""
    chosen = {"rule": rule, "severity": severity, "event_type": event_type}
    return {
        key: value.strip()
        for key, value in chosen.items()
        if value is not None and value.strip() and value != ANY
    }


def parse_until(text: str | None, now: datetime) -> datetime:
    """When a silence ends, typed as a duration from now (``2h``, ``30m``, ``1d``) or an
    ISO-8601 time (without a zone: UTC).

    Args:
        text: the input.
        now: the database clock.

    Returns:
        An aware datetime (may lie in the past: ``create_silence`` refuses it).

    Raises:
        ValueError: empty, a zero or too long duration, a time out of the years 1–9999, or
            neither a duration nor an ISO time; the message says what is accepted.
    """
    value = (text or "").strip()
    if not value:
        raise ValueError("say until when: a duration from now (2h, 30m, 1d) or a date and time")
    try:
        seconds = parse_duration(value)
    except ValueError as error:
        if _DURATION_LIKE.match(value):  # a duration, refused as such (too long)
            raise ValueError(str(error)) from None
    else:
        if seconds <= 0:
            raise ValueError(f"a silence must last longer than 0s, got {value!r}")
        try:
            return now + timedelta(seconds=seconds)
        except OverflowError:
            raise ValueError(f"{value!r} from now lies past the year 9999") from None
    try:
        instant = datetime.fromisoformat(value)
    except ValueError:
        raise ValueError(
            "expected a duration from now (2h, 30m, 1d) or an ISO-8601 time "
            f"(2026-12-01T09:00:00Z), got {value!r}"
        ) from None
    try:
        return (instant if instant.tzinfo else instant.replace(tzinfo=UTC)).astimezone(UTC)
    except OverflowError:
        raise ValueError(f"{value!r} lies outside the years 1 to 9999") from None


def rule_choices(ruleset: RuleSet | None, instances: Sequence[Mapping[str, Any]]) -> list[str]:
    """Rule names a silence can match: ``ANY``, the file's rules, then other rules that have
    state (e.g. ``database-unreachable``)."""
    names = [rule.name for rule in ruleset.rules] if ruleset else []
    names += sorted({row["rule"] for row in instances} - set(names))
    return [ANY, *names]


SEVERITY_CHOICES = [ANY, *SEVERITIES]


def silence_text(row: Mapping[str, Any], now: datetime | None) -> str:
    """A silence in one markdown line: matchers, until when (and how long from now), who
    (matchers and author shown literally)."""
    matchers = " ".join(
        format.md_code(f"{key}={value}") for key, value in (row.get("matchers") or {}).items()
    )
    until = format.instant(row["ends_at"])
    if now is not None and row["ends_at"] > now:
        until += f" (in {format.duration((row['ends_at'] - now).total_seconds())})"
    return f"**#{row['id']}** {matchers} — until {until} · by {format.md_code(row['created_by'])}"


def ended_silence_rows(silences: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Silences no longer in force, for the history table."""
    return [
        {
            "id": row["id"],
            "matchers": labels_text(row["matchers"]),
            "starts_at": format.instant(row["starts_at"]),
            "ends_at": format.instant(row["ends_at"]),
            "expired_at": format.instant(row["expired_at"]),
            "created_by": row["created_by"],
            "comment": row["comment"],
        }
        for row in silences
        if not row["active"]
    ]


# ----------------------------------------------------------------------- test alert


@dataclass(frozen=True)
class Destination:
    """Where a route posts (``text``, safe to show), or ``missing``: the configuration error
    naming the variable to set."""

    text: str | None
    missing: TransportConfigError | None = None


def route_destination(
    ruleset: RuleSet, route_name: str, env: Mapping[str, str] | None = None
) -> Destination:
    """Where a route's messages would go from this process, without posting anything."""
    route = ruleset.routes[route_name]
    try:
        transport = transport_for_route(route_name, route, os.environ if env is None else env)
    except TransportConfigError as error:
        return Destination(None, error)
    return Destination(transport.describe())


@dataclass(frozen=True)
class SendOutcome:
    """The result of the test button: ``level`` ``"success"``, ``"error"`` (Slack refused
    or unreachable) or ``"warning"`` (not configured), the ``message`` and the ``hint``."""

    level: str
    message: str
    hint: str = ""


def send_test_alert(
    db: Database,
    ruleset: RuleSet,
    route_name: str,
    identity: Identity,
    env: Mapping[str, str] | None = None,
) -> SendOutcome:
    """Post ``outbox-monitor alerts test``'s message through one route now, and record it
    in the notification table (``route_check.send_test``) so the Notifications tab lists it.

    Args:
        db: the operator's connector (``PageContext.actions_db``): it writes the row.
        ruleset, route_name: the route to post through.
        identity: who clicked; posting into the alert channel needs the operator role.
        env: the Slack variables (default ``os.environ``).

    Returns:
        A ``SendOutcome``; a missing Slack variable is a ``warning`` whose message and
        hint name the variable to set; a message posted but not recorded is a
        ``warning`` saying why. Never raises for Slack or configuration problems.

    Raises:
        AccessDenied: ``identity`` is not an operator.
    """
    require(identity, Role.operator, "post test alerts")
    try:
        results = send_test(db, ruleset, route_name, requested_by=identity.name, env=env)
    except TransportConfigError as error:
        return SendOutcome("warning", str(error.args[0]), error.hint)
    outcome = results[route_name]
    if "notification_id" in outcome:
        recorded = f" Listed under Notifications as #{outcome['notification_id']}."
    else:
        recorded = (
            " It could not be recorded in the notification table, so the Notifications tab "
            f"does not list it: {outcome['record_error']}"
        )
    if outcome["ok"]:
        where = outcome["destination"]
        if outcome.get("ts"):
            where += f" (channel {outcome['channel']}, ts {outcome['ts']})"
        return SendOutcome(
            "success" if "notification_id" in outcome else "warning",
            f"Test message of route {route_name} posted to {where}.{recorded}",
        )
    status = f" (HTTP {outcome['status']})" if outcome.get("status") else ""
    return SendOutcome(
        "error",
        f"Test message of route {route_name} to {outcome['destination']} failed{status}: "
        f"{outcome['error']}{recorded}",
        "Check the webhook URL or bot token and the channel, then try again.",
    )


def rule_windows(ruleset: RuleSet | None) -> list[str]:
    """The windows of the rules as the dashboard URL writes them (``"15m"``), sorted: the
    sidebar's window choices must offer each, or a link from Slack falls back to the
    default window."""
    if ruleset is None:
        return []
    seconds = sorted({rule.window for rule in ruleset.rules if rule.window})
    return [duration_label(value) for value in seconds]
