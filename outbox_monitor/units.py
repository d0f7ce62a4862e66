"""How figures are written for people, by unit, the same on the dashboard, in Slack and on
the CLI: rates (``per_minute``) and any rule value or threshold (``format_value``); and the
users' free text as the key of our own history (``bounded_key``), and the one label of the
event types past the top N (``OTHER``)."""

import hashlib

from outbox_monitor.durations import format_duration

NO_VALUE = "–"
OTHER = "other"
"""The ``event_type`` label of every event type past the top N: ``/metrics``' bounded labels,
the Overview's and the samples' rows per event type, the rules' instances."""
MAX_KEY_CHARS = 200
"""Longest ``event_type`` or ``locked_by`` kept whole in our history tables, whose primary
keys hold them (a btree entry holds at most 2,704 bytes)."""


def bounded_key(text: str) -> str:
    """``text`` as a key of ``outbox_monitor.event_type_samples`` or ``workers_seen``:
    itself up to ``MAX_KEY_CHARS`` characters, else its head, ``…`` and 8 hex digits of its
    md5 (``MAX_KEY_CHARS`` in all: two long texts sharing a head stay apart). The users'
    table takes any length of ``event_type`` and ``locked_by``; one too long for a btree
    entry made every sample of the pass fail."""
    if len(text) <= MAX_KEY_CHARS:
        return text
    digest = hashlib.md5(text.encode("utf-8", "surrogatepass")).hexdigest()[:8]
    return f"{text[: MAX_KEY_CHARS - 9]}…{digest}"


def per_minute(value: float | None) -> str:
    """A rate per minute: ``0.0833`` → ``"0.08/min"``, ``12.345`` → ``"12.3/min"``,
    ``1234.4`` → ``"1,234/min"``; ``None`` → ``"–"``.

    Args:
        value: rows per minute, or ``None`` for "no value".

    Returns:
        Two decimals under 10, one under 100, none from 100 (thousands separated).
    """
    if value is None:
        return NO_VALUE
    if value >= 100:
        return f"{value:,.0f}/min"
    if value >= 10:
        return f"{value:.1f}/min"
    return f"{value:.2f}/min"


def format_bytes(num_bytes: float | None) -> str:
    """A size for people, in powers of 1,024: ``900`` → ``"900 B"``, ``300_012`` →
    ``"293.0 KiB"``, ``5 * 2**30`` → ``"5.0 GiB"``; ``None`` → ``"–"``."""
    if num_bytes is None:
        return NO_VALUE
    if num_bytes < 1024:
        return f"{num_bytes:.0f} B"
    size = float(num_bytes)
    for unit in ("KiB", "MiB", "GiB", "TiB"):
        size /= 1024
        if size < 1024 or unit == "TiB":
            break
    return f"{size:.1f} {unit}"


def format_value(value: object, unit: object, *, none: str = NO_VALUE) -> str:
    """A figure's value (or a rule's threshold) for people, by its unit.

    Args:
        value: a number, or ``None`` for "no value" (written ``none``).
        unit: ``"seconds"`` (``format_duration``: ``"1h 30m"``), ``"rows"`` (``"1,234"``,
            ``"2.50"`` when not whole), ``"rows/min"`` (``per_minute``: ``"12.5/min"``),
            ``"bytes"`` (``format_bytes``: ``"3.4 MiB"``), ``"fraction"`` (0–1 as a
            percentage: ``"62.5 %"``), or anything else (``"%g"``).
        none: the text of ``None`` (``"–"``; Slack messages say ``"no value"``).

    Returns:
        A short, unescaped string; a value that is not a number is returned as its text, cut
        to 40 characters.
    """
    if value is None:
        return none
    try:
        number = float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        text = str(value)
        return text if len(text) <= 40 else text[:39] + "…"
    if unit == "seconds":
        return format_duration(number)
    if unit == "rows":
        return f"{number:,.0f}" if number.is_integer() else f"{number:,.2f}"
    if unit == "rows/min":
        return per_minute(number)
    if unit == "bytes":
        return format_bytes(number)
    if unit == "fraction":
        return f"{number * 100:.1f} %"
    return f"{number:g}"
