"""Parsing what people type into the dashboard's inputs."""

from datetime import datetime

from outbox_monitor.durations import parse_instant


def parse_time(text: str | None, now: datetime | None) -> datetime | None:
    """A time bound typed as a duration back from ``now`` (``2h``) or ISO-8601.

    Args:
        text: the input's value; empty or blank means "no bound".
        now: the database clock (SPEC §2: "now" is the database's); needed unless
            ``text`` is empty.

    Returns:
        An aware ``datetime``, or ``None`` for an empty input.

    Raises:
        ValueError: neither a duration nor an ISO-8601 time; the message says what is
            accepted.
    """
    if not text or not text.strip():
        return None
    return parse_instant(text.strip(), now=now)


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
