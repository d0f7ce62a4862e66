"""A control's settings (SPEC §5): pause, concurrency limit, rate limit, circuit breaker.

``ControlSettings`` is what one row of ``outbox_monitor.controls`` holds besides its key and
layer; it validates what the table's checks would refuse, naming the field, so that the CLI,
the page and a controls file all say the same thing about the same mistake.
"""

import math
import re
from datetime import datetime
from typing import Any, Self

from pydantic import BaseModel, ConfigDict, Field, model_validator

from outbox_monitor.durations import format_duration, until_label

MAX_COOLDOWN_SECONDS = 900.0
"""A breaker's cool-down doubles after each failed probe, up to 15 min (SPEC §5)."""

MAX_LIMIT = 1_000_000
"""The largest concurrency limit, rate (rows/s) and burst: far above any outbox's throughput
(SPEC §1), and within the columns' ranges."""

MAX_FILTER_CHARS = 1000
MAX_FILTER_BYTES = 2000
"""A filter is a key of the controls' unique index (outbox, filter, layer): a btree entry holds
at most 2,704 bytes, so 1,000 characters of 4 bytes each were refused by the database."""
"""The longest event-type filter of a control."""

DEFAULT_OVERRIDE_SECONDS = 3600.0
"""How long an operator's change to a control that a controls file owns lasts, unless it
says (``--for``, a pause's ``until``): then the file's settings are in force again."""


class ControlSettings(BaseModel):
    """The settings of one control (SPEC §5); durations in seconds, rates in rows/s.

    A control with nothing set (``is_empty``) is no control: writing it deletes the row.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    paused: bool = False
    paused_until: datetime | None = None
    pause_reason: str | None = Field(default=None, max_length=500)
    concurrency_limit: int | None = Field(default=None, ge=1, le=MAX_LIMIT)
    rate_per_second: float | None = Field(default=None, gt=0, le=MAX_LIMIT, allow_inf_nan=False)
    burst: int | None = Field(default=None, ge=1, le=MAX_LIMIT)
    breaker: bool = False
    breaker_window_seconds: float = Field(default=60.0, gt=0, allow_inf_nan=False)
    breaker_min_attempts: int = Field(default=20, ge=1)
    breaker_ratio: float = Field(default=0.9, gt=0, le=1)
    breaker_cooldown_seconds: float = Field(default=30.0, gt=0, le=MAX_COOLDOWN_SECONDS)
    probe_timeout_seconds: float = Field(default=900.0, gt=0, allow_inf_nan=False)

    @model_validator(mode="after")
    def _consistent(self) -> Self:
        if (self.rate_per_second is None) != (self.burst is None):
            raise ValueError(
                "rate_per_second and burst go together: a rate needs a burst of at least 1 "
                "(the rows handed out at once after a quiet spell)"
            )
        if not self.paused and (self.paused_until is not None or self.pause_reason):
            raise ValueError("paused_until and pause_reason describe a pause: set paused")
        return self

    @property
    def is_empty(self) -> bool:
        """No pause, no limit, no breaker: nothing for the claim to obey."""
        return not (self.paused or self.concurrency_limit or self.rate_per_second or self.breaker)

    def with_changes(self, **changes: Any) -> "ControlSettings":
        """A validated copy with ``changes`` applied (``ValueError`` naming the field)."""
        return ControlSettings.model_validate({**self.model_dump(), **changes})


SETTING_FIELDS = tuple(ControlSettings.model_fields)
"""The columns of a control row that hold settings, in the table's order."""


def default_burst(rate_per_second: float) -> int:
    """The burst when only a rate is given: one second's worth of rows, at least 1."""
    return min(MAX_LIMIT, max(1, math.ceil(rate_per_second)))


def check_filter(event_type_filter: str) -> str:
    """A control's event-type filter (SPEC §2), returned unchanged.

    Raises:
        ValueError: empty, longer than ``MAX_FILTER_CHARS`` or ``MAX_FILTER_BYTES``, or
            holding a NUL or another control character (Postgres text cannot hold a NUL).
    """
    if not event_type_filter:
        raise ValueError("a control needs an event type or a pattern with %")
    if len(event_type_filter) > MAX_FILTER_CHARS:
        raise ValueError(f"an event-type filter has at most {MAX_FILTER_CHARS} characters")
    if (size := len(event_type_filter.encode("utf-8", "surrogatepass"))) > MAX_FILTER_BYTES:
        raise ValueError(
            f"an event-type filter has at most {MAX_FILTER_BYTES:,} bytes in UTF-8 (this one "
            f"{size:,}: {len(event_type_filter)} characters of up to 4 bytes each)"
        )
    if any(ord(ch) < 32 or 0xD800 <= ord(ch) <= 0xDFFF for ch in event_type_filter):
        raise ValueError("an event-type filter cannot hold control characters")
    return event_type_filter


def like_regex(event_type_filter: str) -> re.Pattern[str]:
    """SPEC §2's filter as a Python regex: with ``%`` a LIKE pattern where ``_`` and ``\\``
    are literal, else equality — what ``outbox_monitor.type_matches`` computes in SQL."""
    if "%" not in event_type_filter:
        return re.compile(re.escape(event_type_filter) + r"\Z", re.S)
    parts = (re.escape(part) for part in event_type_filter.split("%"))
    return re.compile(".*".join(parts) + r"\Z", re.S)


def matches(event_type_filter: str, event_type: str) -> bool:
    """Whether ``event_type`` matches the filter (``like_regex``)."""
    return like_regex(event_type_filter).match(event_type) is not None


def describe(settings: ControlSettings | None, *, now: datetime | None = None) -> str:
    """A control's settings in words, as the CLI and the Controls page show them:
    ``"paused until 2026-11-29 10:00 UTC; at most 3 processing"``; with ``now`` (the
    database clock) the end of a pause as ``durations.until_label`` says it, ``"paused until
    10:00 UTC (in 23m 0s)"``; no control → ``"no control (rows flow freely)"``."""
    if settings is None or settings.is_empty:
        return "no control (rows flow freely)"
    parts = []
    if settings.paused:
        until = settings.paused_until
        parts.append(f"paused until {until_label(until, now)}" if until else "paused")
    if settings.concurrency_limit:
        parts.append(f"at most {settings.concurrency_limit} processing")
    if settings.rate_per_second:
        parts.append(f"{settings.rate_per_second:g} rows/s (burst {settings.burst})")
    if settings.breaker:
        parts.append(
            f"breaker at {settings.breaker_ratio:.0%} of ≥ {settings.breaker_min_attempts} "
            f"outcomes in {format_duration(settings.breaker_window_seconds)}, cool-down "
            f"{format_duration(settings.breaker_cooldown_seconds)}"
        )
    return "; ".join(parts)
