"""Parse and format the durations users type (``90s``, ``15m``, ``1h``, ``30d``)."""

import re
from datetime import UTC, datetime, timedelta
from typing import Any

_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}
MAX_DURATION_SECONDS = 100 * 365.25 * 86400
"""Durations beyond 100 years are refused: no window or retention needs them, and Postgres
timestamps (and Python datetimes) overflow on far larger ones."""
_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([smhdw]?)\s*$")
DURATION_PATTERN = _DURATION.pattern
"""A duration written as text (``parse_duration``), as a regular expression that is valid in
JSON Schema's ECMA-262 dialect too."""


def duration_json_schema(*, positive: bool = False, minimum: float = 0) -> dict[str, Any]:
    """The JSON Schema of a duration as ``parse_duration`` reads it, for the schemas of the
    product's YAML files (``cli.file_reference``).

    Args:
        positive: refuse zero too (``0s``, ``0``), as ``config.yaml_files.positive_duration``.
        minimum: the fewest seconds a number may give (text is not bounded).

    Returns:
        A schema titled ``duration`` (``positive duration``): a number of seconds (≥ 0, or
        > 0; at most 100 years) or text such as ``90s`` (``DURATION_PATTERN``).
    """
    bound = "exclusiveMinimum" if positive else "minimum"
    number = {"type": "number", bound: minimum, "maximum": MAX_DURATION_SECONDS}
    text: dict[str, Any] = {"type": "string", "pattern": DURATION_PATTERN}
    if positive:  # some digit of the number is not 0
        text = {"type": "string", "allOf": [{"pattern": DURATION_PATTERN}, {"pattern": "[1-9]"}]}
    return {
        "title": "positive duration" if positive else "duration",
        "anyOf": [number, text],
    }


def parse_duration(text: str | float | int) -> float:
    """Parse a duration into seconds.

    Args:
        text: ``"90s"``, ``"15m"``, ``"1h"``, ``"30d"``, ``"2w"``, or a bare number of
            seconds (``"45"``, ``45``, ``4.5``).

    Returns:
        The duration in seconds (float, > 0 not required: ``"0s"`` is 0.0).

    Raises:
        ValueError: the text is not a non-negative number with an optional unit, or it
            exceeds ``MAX_DURATION_SECONDS`` (100 years); the message says what is accepted.
    """
    if isinstance(text, int | float) and not isinstance(text, bool):
        if text < 0:
            raise ValueError(f"expected a non-negative duration, got {text!r}")
        seconds = float(text)
    else:
        match = _DURATION.match(str(text))
        if not match:
            raise ValueError(f"expected a duration such as 90s, 15m, 1h or 30d, got {text!r}")
        seconds = float(match.group(1)) * _UNITS[match.group(2) or "s"]
    if seconds > MAX_DURATION_SECONDS:
        raise ValueError(f"{text!r} is longer than 100 years; expected a duration such as 30d")
    return seconds


def parse_instant(text: str, now: datetime | None = None) -> datetime:
    """Parse a point in time given as a duration back from now or as ISO-8601.

    Args:
        text: ``"2h"`` (two hours ago) or ``"2026-11-29T10:00:00+00:00"``; an ISO
            value without a zone is taken as UTC.
        now: the reference instant for relative values (default: the host's UTC now;
            callers that need the database clock pass it).

    Returns:
        An aware ``datetime``.

    Raises:
        ValueError: neither a duration nor an ISO-8601 timestamp.
    """
    try:
        seconds = parse_duration(text)
    except ValueError:
        if _DURATION.match(text):
            raise  # a duration, only out of range: keep its own message
    else:
        return (now or datetime.now(UTC)) - timedelta(seconds=seconds)
    try:
        instant = datetime.fromisoformat(text)
    except ValueError:
        raise ValueError(
            f"expected a duration back from now (2h, 30m) or an ISO-8601 time, got {text!r}"
        ) from None
    return instant if instant.tzinfo else instant.replace(tzinfo=UTC)


def format_duration(seconds: float | None) -> str:
    """Format seconds for people: ``None`` → ``"–"``, 42.3 → ``"42s"``, 5400 → ``"1h 30m"``.

    Args:
        seconds: a duration in seconds, or ``None`` for "no value".

    Returns:
        The largest unit and the next one (``"2h 0m"``); under 10 s, one decimal.
    """
    if seconds is None:
        return "–"
    if seconds < 10:
        return f"{seconds:.1f}s"
    remaining = round(seconds)
    units = (("d", 86400), ("h", 3600), ("m", 60), ("s", 1))
    largest = next(index for index, (_, size) in enumerate(units) if remaining >= size)
    parts = []
    for unit, size in units[largest : largest + 2]:
        value, remaining = divmod(remaining, size)
        parts.append(f"{value}{unit}")
    return " ".join(parts)


def clock_label(at: datetime, now: datetime | None = None) -> str:
    """An instant as people read it at a glance: ``"14:05 UTC"`` on ``now``'s UTC day,
    ``"2026-12-05 14:05 UTC"`` on another day or without ``now``."""
    shown = at.astimezone(UTC)
    same_day = now is not None and shown.date() == now.astimezone(UTC).date()
    return shown.strftime("%H:%M UTC" if same_day else "%Y-%m-%d %H:%M UTC")


def until_label(until: datetime, now: datetime | None = None) -> str:
    """When something ends, for people: ``"14:05 UTC (in 23m 0s)"``; on another day
    ``"2026-12-05 14:05 UTC (in 1d 2h)"``; already past ``"14:05 UTC (2m 0s ago)"``;
    without ``now`` (the clock unknown) the instant alone (``clock_label``)."""
    shown = clock_label(until, now)
    if now is None:
        return shown
    seconds = (until - now).total_seconds()
    if seconds >= 0:
        return f"{shown} (in {format_duration(seconds)})"
    return f"{shown} ({format_duration(-seconds)} ago)"


def duration_label(seconds: float) -> str:
    """The shortest exact label of a duration, as settings, rules, dashboard URLs and
    Prometheus labels write it: 45 → ``"45s"``, 300 → ``"5m"``, 5400 → ``"90m"``, 86400 →
    ``"24h"`` (hours up to a day), 172800 → ``"2d"``, 90.5 → ``"90.5s"``.

    Args:
        seconds: a duration in seconds.

    Returns:
        A label that ``parse_duration`` reads back to ``seconds``.
    """
    if seconds > 86400 and seconds % 86400 == 0:
        return f"{seconds / 86400:g}d"
    for unit, size in (("h", 3600), ("m", 60)):
        if seconds >= size and seconds % size == 0:
            return f"{seconds / size:g}{unit}"
    return f"{seconds:g}s"
