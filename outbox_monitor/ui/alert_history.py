"""The Alerts page's history: state transitions and notifications as table rows, and what
happened to each notification (posted, suppressed, pending, failed) with the text Slack
shows (issue 3 §4).

The rows come from ``alerts.state`` through ``alert_loaders``; nothing here writes.
"""

from collections.abc import Mapping, Sequence
from typing import Any

from outbox_monitor.ui import format
from outbox_monitor.ui.format import Column
from outbox_monitor.units import format_value


def transition_rows(
    transitions: Sequence[Mapping[str, Any]], units: Mapping[str, str] | None = None
) -> list[dict[str, Any]]:
    """``alerts.state.list_transitions`` rows for the table: at, rule, instance, change
    (``"pending → firing"``), kind, value and detail.

    Args:
        transitions: the rows, newest first.
        units: rule name → its figure's unit (``Rule.unit``): the value is written in it
            (``units.format_value``: ``"14m 37s"``, not ``876.719``); a rule no longer in the
            file writes its value as a bare number.
    """
    units = units or {}
    return [
        {
            "at": format.instant(row["at"]),
            "rule": row["rule"],
            "instance": row["instance"] or "all",
            "change": f"{row['from_state']} → {row['to_state']}",
            "kind": row["kind"],
            "value": format_value(row["value"], units.get(row["rule"])),
            "detail": row["detail"] or "",
        }
        for row in transitions
    ]


TRANSITION_COLUMNS = [
    Column("at", "at", 170),
    Column("rule", "rule", 150),
    Column("instance", "instance", 170, help="The event type or labels of a rule with `by`."),
    Column("change", "change", 150),
    Column("value", "value", 100, help="The rule's figure, in its unit, when it changed."),
    Column("detail", "detail", 170),
    Column("kind", "kind"),
]
"""The transitions table's columns (``format.grid``)."""


def delivery(row: Mapping[str, Any]) -> str:
    """What happened to one notification, in a sentence of markdown (what Slack or the
    sender recorded — channel, ts, error — shown literally).

    ``sent`` → when and where; ``suppressed`` → why it was not posted (silenced, inhibited
    by the alert its payload's ``inhibited_by`` names, or the reason the sender recorded);
    ``pending`` → waiting, or retrying after a failure with the next try; ``failed`` → the
    last error.
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
        if (row.get("payload") or {}).get("inhibited_by"):
            source = format.md_code(row["payload"]["inhibited_by"])
            return (
                f"Not posted: inhibited by {source}, firing. Below is what would have been posted."
            )
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


NOTIFICATION_COLUMNS = [
    Column("id", "id", 60),
    Column("created", "created", 170),
    Column("kind", "kind", 80, help="firing, resolved, repeat, error or test"),
    Column("rule", "rule", 150),
    Column("instance", "instance", 170),
    Column("status", "delivery", 90, help="pending, sent, suppressed or failed"),
    Column("last_error", "last error", 220),
    Column("route", "route"),
    Column("silenced", "silenced"),
    Column("attempts", "attempts"),
    Column("last_status", "last HTTP status"),
    Column("sent", "sent"),
]
"""The notifications table's columns (``format.grid``)."""


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
