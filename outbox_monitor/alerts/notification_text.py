"""One notification's text in a Slack message: its section (mrkdwn: rule, instance, value
vs threshold, since, offenders, labels, runbook) and its plain-text fallback line, read from
the notification row and its payload; everything escaped and clipped per part.
"""

import json
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from outbox_monitor import units
from outbox_monitor.alerts.mrkdwn import (
    clip,
    clip_mrkdwn,
    escape_mrkdwn,
    link,
    plain,
    slack_date,
)
from outbox_monitor.durations import duration_label, format_duration

MAX_SECTION_CHARS = 3000
MAX_SUMMARY_CHARS = 500
MAX_ERROR_CHARS = 600
MAX_OFFENDERS = 5
MAX_OFFENDER_CHARS = 160
MAX_LABELS_CHARS = 300
MAX_FALLBACK_LINE_CHARS = 300
MAX_STEP_CHARS = 600

KIND_LABELS = {
    "firing": ("🔥", "FIRING"),
    "repeat": ("🔁", "STILL FIRING"),
    "resolved": ("✅", "RESOLVED"),
    "error": ("⚠️", "EVALUATION ERROR"),
    "test": ("🧪", "TEST"),
}
IMPLIED_LABELS = frozenset({"event_type", "rule", "severity"})
"""Labels already shown on the line (instance, rule, severity) and left out of "Labels"."""


def format_value(value: object, unit: object) -> str:
    """``units.format_value`` as Slack messages write it: ``None`` → ``"no value"``."""
    return units.format_value(value, unit, none="no value")


def _since(payload: Mapping[str, Any], now: datetime | None) -> str:
    return instant_text(payload.get("since"), now, slack=True)


def instant_text(raw: object, now: datetime | None, *, slack: bool = False) -> str:
    """An instant (``datetime`` or ISO text) for people: ``"2026-03-02 10:18:00 UTC (40s
    ago)"`` (the "ago" when ``now`` is given and later); ``""`` for none; text that is no
    instant is shown clipped (and escaped) as it is.

    Args:
        raw: the instant.
        now: the clock of the "ago".
        slack: write the instant as Slack's date formatting (``mrkdwn.slack_date``: each
            reader's own time zone, the UTC text as its fallback) — mrkdwn, for a message.
    """
    if not raw:
        return ""
    try:
        since = raw if isinstance(raw, datetime) else datetime.fromisoformat(str(raw))
    except ValueError:
        return plain(raw, 40)
    since = since if since.tzinfo else since.replace(tzinfo=UTC)
    text = slack_date(since) if slack else since.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
    if now is not None and now >= since:
        text += f" ({format_duration((now - since).total_seconds())} ago)"
    return text


def _held_now(row: Mapping[str, Any], payload: Mapping[str, Any], now: datetime | None) -> str:
    """``held_note`` of a firing line whose episode is still the instance's (the sender's
    rows carry the instance's state now: ``instance_state``, ``instance_cleared_since``,
    ``instance_firing_seq``); ``""`` for a later episode or a row without them."""
    if row.get("instance_firing_seq") != payload.get("firing_seq"):
        return ""
    return held_note(
        payload.get("keep_firing_for"),
        row.get("instance_state"),
        row.get("instance_cleared_since"),
        now,
        slack=True,
    )


def held_note(
    keep_firing_for: float | None,
    state: object,
    cleared_since: object,
    now: datetime | None,
    *,
    slack: bool = False,
) -> str:
    """Why a firing instance whose figure is back within its threshold still fires:
    ``"held by keep_firing_for 10m: clear since 2026-03-02 10:18:00 UTC (2m 25s ago)"`` (it
    resolves once clear for ``keep_firing_for``, SPEC's alert states); ``""`` unless
    ``state`` is ``"firing"`` with a ``cleared_since``.

    Args:
        keep_firing_for: the rule's ``keep_firing_for`` in seconds (``None`` → 0s).
        state: the instance's state (``alert_instances.state``).
        cleared_since: when its figure came back within the threshold (``datetime`` or ISO
            text), ``None`` while breached.
        now: the evaluator's (database) clock, for the "ago".
        slack: the instant as Slack's date formatting (``instant_text``), for a message.
    """
    if state != "firing" or not cleared_since:
        return ""
    keep = duration_label(keep_firing_for or 0)
    since = instant_text(cleared_since, now, slack=slack)
    return f"held by keep_firing_for {keep}: clear since {since}"


# ---------------------------------------------------------------------------- rows


def row_payload(row: Mapping[str, Any]) -> dict[str, Any]:
    """A row's ``payload`` as a dict (JSON text is parsed; text that is not JSON is the
    summary); ``{}`` when it has none."""
    payload = row.get("payload") or {}
    if isinstance(payload, str):
        try:
            payload = json.loads(payload)
        except ValueError:
            payload = {"summary": payload}
    return dict(payload) if isinstance(payload, Mapping) else {}


def row_kind(row: Mapping[str, Any]) -> str:
    """A row's kind (``KIND_LABELS``), from the row or its payload; ``"firing"`` else."""
    kind = str(row.get("kind") or row_payload(row).get("kind") or "firing")
    return kind if kind in KIND_LABELS else "firing"


def row_rule(row: Mapping[str, Any]) -> str:
    """A row's rule name, from the row or its payload; ``"alert"`` else."""
    return str(row.get("rule") or row_payload(row).get("rule") or "alert")


def _offender_text(offender: object, unit: object) -> str:
    """One offender of the payload (``measure.offenders`` shape, or any dict), escaped."""
    if not isinstance(offender, Mapping):
        return plain(offender, MAX_OFFENDER_CHARS)
    label_keys = ("event_type", "group", "error_group", "group_id", "label", "name", "key")
    detail_keys = ("sample_error", "last_error", "error", "example", "command")
    label = next((offender[k] for k in label_keys if offender.get(k) not in (None, "")), None)
    detail = next((offender[k] for k in detail_keys if offender.get(k)), None)
    if offender.get("failed") is not None:
        count = f"{format_value(offender['failed'], 'rows')} failed"
    elif offender.get("value") is not None:
        count = format_value(offender["value"], unit)
    elif offender.get("count") is not None:
        count = format_value(offender["count"], "rows")
    else:
        count = None
    if label is None and count is None and detail is None:
        label = ", ".join(f"{k}={v}" for k, v in offender.items())
    text = " — ".join(str(part) for part in (label, count) if part is not None)
    if detail is not None:
        text += f': "{" ".join(str(detail).split())}"'
    return plain(text, MAX_OFFENDER_CHARS)


def _offender_lines(offenders: object, unit: object) -> list[str]:
    """ "Top offenders" (event types), "Error groups", "Held by" (the xmin horizon's
    holders, each with the command that ends it) and "Rows due" (in all, then by event type:
    the workers' liveness) lines, at most 5 entries each."""
    if not isinstance(offenders, list | tuple) or not offenders:
        return []
    kinds: dict[str, list[Any]] = {"error_group": [], "holder": [], "due": []}
    others: list[Any] = []
    for offender in offenders:
        kind = offender.get("kind") if isinstance(offender, Mapping) else None
        kinds.get(str(kind), others).append(offender)
    lines = []
    for title, found in (
        ("Top offenders", others),
        ("Error groups", kinds["error_group"]),
        ("Held by", kinds["holder"]),
        ("Rows due", kinds["due"]),
    ):
        if found:
            shown = " · ".join(_offender_text(o, unit) for o in found[:MAX_OFFENDERS])
            lines.append(f"*{title}:* {shown}")
    return lines


def _instance_text(row: Mapping[str, Any], payload: Mapping[str, Any]) -> str:
    instance = row.get("instance")
    if instance is None:
        labels = payload.get("labels") or {}
        instance = labels.get("event_type", "") if isinstance(labels, Mapping) else ""
    return str(instance or "")


def _value_label(payload: Mapping[str, Any], label: str) -> str:
    """``"Value"``, or for a ``predict`` rule ``"Forecast in 15m"`` (its value is the
    forecast at now + ``predict``)."""
    forecast = payload.get("forecast")
    if not isinstance(forecast, Mapping) or forecast.get("horizon_seconds") is None:
        return label
    return f"Forecast in {duration_label(float(forecast['horizon_seconds']))}"


def _forecast_line(payload: Mapping[str, Any]) -> list[str]:
    """A ``predict`` rule's forecast sentence, unless its summary already says it."""
    forecast = payload.get("forecast")
    if not isinstance(forecast, Mapping) or not forecast.get("text"):
        return []
    if str(forecast["text"]) in str(payload.get("summary") or ""):
        return []
    return [f"*Forecast:* {plain(forecast['text'], MAX_SUMMARY_CHARS)}"]


def _has_figure(payload: Mapping[str, Any], source: Mapping[str, Any]) -> bool:
    """Whether a message has a value or a threshold to show: the scheduler's own alerts
    posted straight to Slack (``outage.direct_row``: database unreachable, writes failing)
    have neither, and their resolve said "no value now vs threshold no value (?)"."""
    return source.get("value") is not None or payload.get("threshold") is not None


def section_text(
    row: Mapping[str, Any],
    *,
    kind: str,
    now: datetime | None,
    resolved_payload: Mapping[str, Any] | None = None,
) -> str:
    """The mrkdwn of one instance's section (everything escaped, clipped per part)."""
    payload = row_payload(row)
    emoji = KIND_LABELS[kind][0]
    title = f"{emoji} *{plain(row_rule(row), 120)}*"
    instance = _instance_text(row, payload)
    if instance:
        title += f" · `{plain(instance.replace('`', chr(39)), 200)}`"
    severity = payload.get("severity")
    if severity and kind != "resolved":
        title += f" · {plain(severity, 30)}"
    if kind == "resolved":
        title += " · resolved"
    lines = [title]
    source = resolved_payload if resolved_payload is not None else payload
    if source.get("summary"):
        lines.append(plain(source["summary"], MAX_SUMMARY_CHARS))
    unit = payload.get("unit")
    op = escape_mrkdwn(clip(str(payload.get("op") or ""), 4))
    threshold = format_value(payload.get("threshold"), unit)
    value = format_value(source.get("value"), unit)
    since = _since(payload, now)
    if kind == "error":
        error = payload.get("error") or row.get("error") or "the rule's query failed"
        lines.append(f"*Error:* {plain(error, MAX_ERROR_CHARS)}")
    elif kind == "test":
        pass
    elif kind == "resolved" or resolved_payload is not None:
        if _has_figure(payload, source):
            label = _value_label(source, "Value now")
            figure = f"*{label}* {escape_mrkdwn(value)} vs threshold {escape_mrkdwn(threshold)}"
            lines.append(figure + (f" ({op})" if op else ""))
        if since:
            lines.append(f"Was firing since {since}")
    else:
        label = _value_label(payload, "Value")
        figure = f"*{label}* {escape_mrkdwn(value)} vs threshold {escape_mrkdwn(threshold)}"
        lines.append(figure + (f" ({op})" if op else "") + (f" · since {since}" if since else ""))
    lines.extend(_forecast_line(source))
    if kind in ("firing", "repeat") and resolved_payload is None:
        held = _held_now(row, payload, now)
        if held:  # mrkdwn already: a duration and a date token
            lines.append(f"Back within the threshold, {held}")
    if kind in ("firing", "repeat", "error") and resolved_payload is None:
        lines.extend(_offender_lines(payload.get("offenders"), unit))
        if payload.get("held_rows"):
            held_by = ", ".join(str(b) for b in payload.get("held_by") or [])
            held = f"*{format_value(payload['held_rows'], 'rows')} held* by flow control"
            lines.append(plain(held + (f" ({held_by})" if held_by else ""), MAX_LABELS_CHARS))
    labels = payload.get("labels")
    if isinstance(labels, Mapping) and labels:
        pairs = ", ".join(f"{k}={v}" for k, v in labels.items() if k not in IMPLIED_LABELS)
        if pairs:
            lines.append(f"_Labels:_ {plain(pairs, MAX_LABELS_CHARS)}")
    runbook = link(payload.get("runbook_url"), "Runbook")
    if runbook:
        lines.append(runbook)
    return clip_mrkdwn("\n".join(lines), MAX_SECTION_CHARS)


def runbook_section(rule: object, steps: object) -> str:
    """The mrkdwn of a rule's runbook in a message: ``📋 *Runbook · rule*`` and its numbered
    steps (a payload's ``runbook``, ``Rule.runbook_steps``), each escaped
    (``mrkdwn.escape_mrkdwn``: no step can ping or disguise a link) and clipped to
    ``MAX_STEP_CHARS``, the whole to a section; ``""`` without steps."""
    if not isinstance(steps, list | tuple):
        return ""
    lines = [
        f"{number}. {plain(step, MAX_STEP_CHARS)}"
        for number, step in enumerate((s for s in steps if str(s or "").strip()), 1)
    ]
    if not lines:
        return ""
    title = f"📋 *Runbook · {plain(rule, 120)}*"
    return clip_mrkdwn("\n".join([title, *lines]), MAX_SECTION_CHARS)


def _holder_lines(offenders: object) -> list[str]:
    """The plain-text lines of the xmin horizon's holders among ``offenders`` (at most 5):
    ``"Held by session pid 4242 (nightly-report, idle in transaction, role app) for 12m 3s;
    end it with: SELECT pg_terminate_backend(4242);"``, each escaped and clipped."""
    if not isinstance(offenders, list | tuple):
        return []
    holders = [o for o in offenders if isinstance(o, Mapping) and o.get("kind") == "holder"]
    lines = []
    for holder in holders[:MAX_OFFENDERS]:
        text = f"Held by {holder.get('label')}"
        if holder.get("value") is not None:
            text += f" for {format_value(holder['value'], 'seconds')}"
        if holder.get("command"):
            text += f"; end it with: {holder['command']}"
        lines.append(plain(text, MAX_FALLBACK_LINE_CHARS))
    return lines


def _due_line(offenders: object) -> list[str]:
    """The plain-text line of the due rows among ``offenders`` (the workers' liveness):
    ``"Rows due: 3 in all (order.paid 2, mail.sent 1)"``, escaped and clipped; none when
    there are none."""
    if not isinstance(offenders, list | tuple):
        return []
    due = [o for o in offenders if isinstance(o, Mapping) and o.get("kind") == "due"]
    total = [o for o in due if not o.get("event_type")]
    if not total:
        return []
    text = f"Rows due: {format_value(total[0].get('count'), 'rows')} in all"
    types = [
        f"{o['event_type']} {format_value(o.get('count'), 'rows')}"
        for o in due
        if o.get("event_type")
    ]
    if types:
        text += f" ({', '.join(types[:MAX_OFFENDERS])})"
    return [plain(text, MAX_FALLBACK_LINE_CHARS)]


def fallback_line(
    row: Mapping[str, Any], kind: str, resolved_payload: Mapping[str, Any] | None = None
) -> str:
    """One row's text in the plain-text fallback (what notifications and screen readers
    show), escaped and clipped: ``[KIND] rule instance (severity): value vs threshold (op) —
    summary``; a resolve's value is the value now (``resolved_payload``'s when a thread
    update shows the original row as resolved); a firing or repeat message adds a line per
    holder of the xmin horizon (its application, pid, age and the command that ends it) and
    one of the rows due (the workers' liveness)."""
    payload = row_payload(row)
    source = resolved_payload if resolved_payload is not None else payload
    _, label = KIND_LABELS[kind]
    instance = _instance_text(row, payload)
    text = f"[{label}] {row_rule(row)}" + (f" {instance}" if instance else "")
    if payload.get("severity") and kind != "resolved":
        text += f" ({payload['severity']})"
    unit = payload.get("unit")
    if kind == "error":
        text += f": {payload.get('error') or 'evaluation error'}"
    elif kind != "test" and _has_figure(payload, source):
        value = format_value(source.get("value"), unit)
        now = " now" if kind == "resolved" else ""
        threshold = format_value(payload.get("threshold"), unit)
        text += f": {value}{now} vs threshold {threshold} ({payload.get('op') or '?'})"
    if source.get("summary"):
        text += f" — {source['summary']}"
    lines = [plain(text, MAX_FALLBACK_LINE_CHARS)]
    if kind in ("firing", "repeat"):
        lines.extend(_holder_lines(payload.get("offenders")))
        lines.extend(_due_line(payload.get("offenders")))
    return "\n".join(lines)
