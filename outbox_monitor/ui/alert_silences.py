"""The Alerts page's silences: the form's choices and matchers, "until" typed as a duration
or a time, and silences as text and table rows (issue 3 §4).

Silences are read, created and expired through ``alert_loaders`` (``silences``,
``create_silence``, ``expire_silence``); nothing here writes.
"""

import re
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

from outbox_monitor.alerts.rules import SEVERITIES, RuleSet
from outbox_monitor.durations import parse_duration
from outbox_monitor.ui import format
from outbox_monitor.ui.format import Column

_DURATION_LIKE = re.compile(r"^\d+(?:\.\d+)?\s*[smhdw]?$")
ANY = "(any)"
"""The "no matcher" choice of the silence form's selectboxes."""


def labels_text(labels: Mapping[str, Any] | None) -> str:
    """``{"rule": "x", "event_type": "y"}`` → ``"rule=x, event_type=y"``."""
    return ", ".join(f"{key}={value}" for key, value in (labels or {}).items())


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


def totals(silences: Sequence[Mapping[str, Any]]) -> tuple[int, int]:
    """``(in force, ended)``: every silence of the outbox, listed or not (``list_silences``'
    totals), for the headers (issue 30 item 8)."""
    if not silences:
        return 0, 0
    active = silences[0]["active_total"]
    return active, silences[0]["silences_total"] - active


def heading(label: str, total: int, listed: int) -> str:
    """A silences header over every silence: ``"Expired or ended (205; the newest 197
    listed)"``, or ``"Active silences (3)"`` when all are listed."""
    more = f"; the newest {listed:,} listed" if listed < total else ""
    return f"{label} ({total:,}{more})"


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


ENDED_COLUMNS = [
    Column("id", "id", 60),
    Column("matchers", "matchers", 260),
    Column("ends_at", "ends", 170),
    Column("expired_at", "expired", 170),
    Column("created_by", "created by", 130),
    Column("comment", "comment", 150),
    Column("starts_at", "starts"),
]
"""The ended silences table's columns (``format.grid``)."""
