"""Parsing what people type into the dashboard's inputs (and what links put in the URL).

Every parser raises ``ValueError`` with a message meant for people, never ``OverflowError``
or another exception: a page shows the message inline next to the input and goes on.
"""

import re
from datetime import UTC, datetime

from outbox_monitor.durations import parse_duration, parse_instant

_DURATION_LIKE = re.compile(r"^\d+(?:\.\d+)?\s*[smhdw]?$")
_ERROR_GROUP = re.compile(r"^[0-9a-fA-F]{12}$")
MAX_TEXT_LENGTH = 1000
"""Longest text filter accepted, in characters (event types, keys and ids are far shorter;
a longer one is a pasted mistake or an attack, and would cost the database for nothing)."""


def parse_text(text: str | None, *, what: str) -> str | None:
    """A text filter (event type, event key, aggregate id) as Postgres text can hold it.

    Args:
        text: the input's or the URL parameter's value; blank means "no filter".
        what: the input's name for the message (``"the event type"``).

    Returns:
        The text stripped, or ``None`` for an empty input.

    Raises:
        ValueError: a NUL character (U+0000: Postgres text cannot carry it), an unpaired
            surrogate (not encodable as UTF-8), or more than ``MAX_TEXT_LENGTH``
            characters. The message never repeats the value (it may be unprintable).
    """
    if text is None or not text.strip():
        return None
    value = text.strip()
    if "\x00" in value:
        raise ValueError(
            f"{what} contains a NUL character (U+0000), which Postgres text cannot hold"
        )
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as error:
        raise ValueError(
            f"{what} contains an unpaired surrogate (U+{ord(value[error.start]):04X}), "
            "which is not valid Unicode text"
        ) from None
    if len(value) > MAX_TEXT_LENGTH:
        raise ValueError(
            f"{what} is {len(value):,} characters long; a filter takes at most {MAX_TEXT_LENGTH:,}"
        )
    return value


def parse_error_group(text: str | None) -> str | None:
    """An error group id (SPEC §2: the first 12 hex digits of an md5), lower-cased.

    Returns:
        The id, or ``None`` for an empty input.

    Raises:
        ValueError: anything but 12 hex digits.
    """
    if text is None or not text.strip():
        return None
    value = text.strip()
    if not _ERROR_GROUP.match(value):
        raise ValueError("an error group id is 12 hex digits (see the Dead letters page)")
    return value.lower()


def parse_time(text: str | None, now: datetime | None) -> datetime | None:
    """A time bound typed as a duration back from ``now`` (``2h``) or ISO-8601.

    Args:
        text: the input's value; empty or blank means "no bound".
        now: the database clock (SPEC §2: "now" is the database's); needed unless
            ``text`` is empty.

    Returns:
        An aware ``datetime`` in UTC, or ``None`` for an empty input.

    Raises:
        ValueError: neither a duration nor an ISO-8601 time, or a time out of the
            representable range (``9999999d`` ago, before year 1); the message says what
            is accepted.
    """
    if not text or not text.strip():
        return None
    value = text.strip()
    if _DURATION_LIKE.match(value):
        parse_seconds(value)  # a duration refused as such (too long) says why
    try:
        return parse_instant(value, now=now).astimezone(UTC)
    except OverflowError:
        raise ValueError(
            f"{value!r} lies outside the dates that can be shown (years 1 to 9999); "
            "give a shorter duration (2h, 30d) or an ISO-8601 time"
        ) from None


def parse_seconds(text: str | None) -> float | None:
    """A duration typed or linked as text (``90s``, ``15m``, ``1h``, ``2d``), in seconds.

    Returns:
        The seconds, or ``None`` for an empty input.

    Raises:
        ValueError: not a duration, or too large to be a number of seconds.
    """
    if text is None or not str(text).strip():
        return None
    try:
        seconds = parse_duration(str(text).strip())
    except OverflowError:
        raise ValueError(f"the duration {text!r} is too large") from None
    if seconds != seconds or seconds == float("inf"):  # nan, inf ("1e400" never matches)
        raise ValueError(f"the duration {text!r} is too large")
    return seconds


def parse_id(text: str | None) -> int | None:
    """An event id typed as decimal digits (any bigint, exact beyond 2^53).

    Returns:
        The id, or ``None`` for an empty input.

    Raises:
        ValueError: not a whole number in the bigint range.
    """
    if not text or not text.strip():
        return None
    value = text.strip()
    if not value.isdigit() or int(value) > 2**63 - 1:
        raise ValueError(f"an event id is a whole number up to 2^63-1, got {value!r}")
    return int(value)
