"""How the dashboard writes figures: durations, counts, rates, instants, sizes, tables."""

from collections.abc import Iterable, Sequence
from datetime import UTC, datetime
from typing import Any

import pandas as pd

from outbox_monitor.durations import format_duration

NO_VALUE = "–"
ID_COLUMNS = ("id", "max_id")
ID_LIST_COLUMNS = ("ids", "first_ids")
_UNITS = (("d", 86400), ("h", 3600), ("m", 60), ("s", 1))


def duration(seconds: float | None) -> str:
    """A duration for people (``"42s"``, ``"1h 30m"``); ``None`` → ``"–"``."""
    return format_duration(seconds)


def short_duration(seconds: float) -> str:
    """The shortest exact label of a duration: 300 → ``"5m"``, 5400 → ``"90m"``, 86400 →
    ``"24h"`` (hours up to a day), 45 → ``"45s"``. Parses back with ``parse_duration``."""
    if seconds > 0 and seconds % 86400 == 0 and seconds > 86400:
        return f"{seconds / 86400:g}d"
    for unit, size in _UNITS[1:]:
        if seconds >= size and seconds % size == 0:
            return f"{seconds / size:g}{unit}"
    return f"{seconds:g}s"


def count(value: int | float | None) -> str:
    """A count with thousands separators (``"1,234"``); ``None`` → ``"–"``."""
    return NO_VALUE if value is None else f"{value:,.0f}"


def rows(value: int) -> str:
    """A number of rows with its noun: ``"1 row"``, ``"1,234 rows"``."""
    return f"{value:,} row" if value == 1 else f"{value:,} rows"


def per_minute(value: float | None) -> str:
    """A rate per minute: ``"0.08/min"``, ``"12.5/min"``, ``"1,234/min"``."""
    if value is None:
        return NO_VALUE
    if value >= 100:
        return f"{value:,.0f}/min"
    if value >= 10:
        return f"{value:.1f}/min"
    return f"{value:.2f}/min"


def instant(value: datetime | str | None) -> str:
    """An instant in UTC, ``"2026-11-29 23:45:14 UTC"``; accepts ISO-8601 text."""
    if value is None:
        return NO_VALUE
    if isinstance(value, str):
        value = datetime.fromisoformat(value)
    return value.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def size(num_bytes: int | None) -> str:
    """A size in bytes for people: ``"900 B"``, ``"256.0 KiB"``, ``"3.4 MiB"``."""
    if num_bytes is None:
        return NO_VALUE
    if num_bytes < 1024:
        return f"{num_bytes} B"
    if num_bytes < 1024 * 1024:
        return f"{num_bytes / 1024:.1f} KiB"
    return f"{num_bytes / 1024 / 1024:.1f} MiB"


def table(
    rows: Iterable[dict[str, Any]],
    columns: Sequence[str] | None = None,
    *,
    durations: Sequence[str] = (),
) -> pd.DataFrame:
    """Rows as a DataFrame for ``st.dataframe``.

    Id columns become strings (ids may exceed 2^53, which JavaScript numbers cannot hold);
    columns named in ``durations`` (seconds) become readable text, named without their
    ``_seconds`` suffix.

    Args:
        rows: dict rows, e.g. from a loader.
        columns: the columns to keep, in order (default: all, as given).
        durations: columns holding seconds.
    """
    frame = pd.DataFrame(list(rows), columns=list(columns) if columns else None)
    for column in frame.columns:
        if column in ID_COLUMNS or column.endswith("_id"):
            frame[column] = frame[column].map(lambda v: NO_VALUE if v is None else str(v))
        if column in ID_LIST_COLUMNS:
            frame[column] = frame[column].map(lambda v: ", ".join(str(i) for i in v or ()))
        if column in durations:
            frame[column] = frame[column].map(duration)
    return frame.rename(columns={c: c.removesuffix("_seconds") for c in durations})
