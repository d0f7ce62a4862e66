"""The injectable clock of the evaluator and the sender (tests fast-forward it)."""

from collections.abc import Callable
from datetime import UTC, datetime

Clock = Callable[[], datetime]
"""A zero-argument callable returning an aware UTC ``datetime``."""


def system_clock() -> datetime:
    """The host's current time, aware, in UTC."""
    return datetime.now(UTC)
