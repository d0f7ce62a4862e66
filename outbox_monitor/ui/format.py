"""How the dashboard writes figures: durations, counts, plurals, rates, instants, sizes,
tables, and values from the URL, the database or the rules inside markdown (shown literally).
"""

import re
from collections.abc import Iterable, Sequence
from datetime import UTC, datetime
from typing import Any

import pandas as pd
import streamlit as st

from outbox_monitor.durations import duration_label as duration_label  # re-exported for pages
from outbox_monitor.durations import format_duration
from outbox_monitor.figures.estimates import Count
from outbox_monitor.units import format_bytes
from outbox_monitor.units import per_minute as per_minute  # re-exported for pages

NO_VALUE = "–"
ID_COLUMNS = ("id", "max_id")
ID_LIST_COLUMNS = ("ids", "first_ids")
LONG_TEXT_COLUMNS = ("last_error", "sample_error", "fingerprint", "filter", "metric", "query")
"""Columns whose values run long: drawn wide (``column_config``), wrapped in taller rows when
a value needs more than one line (``row_height``); a page shows a chosen row's full text
below its table (``row_detail``)."""
ONE_LINE_CHARS = 50
"""Characters a ``LONG_TEXT_COLUMNS`` cell (400 px wide) shows on one line of the grid."""
WRAPPED_ROW_HEIGHT = 104
"""Pixels per row of a table holding a longer value: above Streamlit's 64 px the grid wraps
text cells, and 104 px hold five lines of its 14 px text: a 200-character error (the lists
read ``left(last_error, 200)``) in a 400 px column needs four."""

# Every ASCII punctuation character may be backslash-escaped in CommonMark; escaping all of
# them leaves no emphasis, code span, link, autolink, HTML, math ($), directive (:red[…]),
# heading or list syntax in the text.
_MARKDOWN_PUNCTUATION = re.compile(r"([!-/:-@\[-`{-~])")
# What Streamlit rewrites inside text after parsing, escaped or not: typographic arrows and
# signs between spaces ("a -> b" → "a → b", "--" → "—", ">=" → "≥"), :shortcodes: (emoji,
# the Streamlit logo) and GFM's literal autolinks (https://…, www.…, e-mail addresses). Such
# a token is shown as a code span, which nothing rewrites.
_REWRITTEN_IN_TEXT = re.compile(
    r"(?<!\S)(?:<->|->|<-|--|>=|<=|~=)(?!\S)"
    r"|:[\w+-][\w+-]*:"
    r"|(?i:https?://|www\.|mailto:|xmpp:)\S*"
    r"|[\w.+-]+@[\w-]+(?:\.[\w-]+)+\S*"
)
# Streamlit replaces this in the markdown source before parsing, even inside code spans.
_REWRITTEN_IN_SOURCE = ":material/"
_BACKTICK_RUNS = re.compile(r"`+")


def _one_line(value: object) -> str:
    return " ".join(str(value).splitlines())


def md_text(value: object) -> str:
    """A value from the URL, the database or the rules, for inline use in markdown
    (``st.markdown``, ``st.caption``, ``st.error``, ``st.subheader``, widget labels…),
    shown literally: ``[x](y)``, ``**``, backticks, ``<b>``, ``$math$``, ``:red[x]``,
    ``:smile:``, ``->`` and ``https://…`` all read as typed (the last three in code font).

    Line breaks become spaces (the value stays inline). ``None`` is written ``"None"``:
    callers substitute ``NO_VALUE`` first when that is meant.
    """
    text = _one_line(value)
    parts, last = [], 0
    for match in _REWRITTEN_IN_TEXT.finditer(text):
        parts.append(_MARKDOWN_PUNCTUATION.sub(r"\\\1", text[last : match.start()]))
        parts.append(md_code(match.group()))
        last = match.end()
    parts.append(_MARKDOWN_PUNCTUATION.sub(r"\\\1", text[last:]))
    return "".join(parts)


def md_code(value: object) -> str:
    """A value as an inline code span in markdown, shown literally whatever it holds
    (backticks included): for event types, keys, group ids, aggregate ids, actor names,
    paths. Line breaks become spaces; an empty value is written ``""``; a value holding
    ``:material/`` (which Streamlit rewrites even in code spans) falls back to ``md_text``.
    """
    text = _one_line(value)
    if not text:
        return md_text('""')
    if _REWRITTEN_IN_SOURCE in text:
        return md_text(text)
    fence = "`" * (max((len(run) for run in _BACKTICK_RUNS.findall(text)), default=0) + 1)
    # CommonMark strips one space from each end of a code span that begins and ends with
    # one, and a backtick at an end would merge with the fence: pad in both cases.
    if text[0] == "`" or text[-1] == "`" or (text[0] == " " and text[-1] == " "):
        text = f" {text} "
    return f"{fence}{text}{fence}"


def plural(count: int | float, noun: str, plural_noun: str | None = None) -> str:
    """A count with its noun, in the singular only for exactly one: ``plural(1, "failed
    row")`` → ``"1 failed row"``, ``plural(1234, "error group")`` → ``"1,234 error
    groups"``, ``plural(2, "batch", "batches")`` → ``"2 batches"``.

    Args:
        count: the number (thousands separators added).
        noun: the singular; the plural adds ``s`` unless ``plural_noun`` is given.
    """
    return f"{count:,} {inflect(count, noun, plural_noun)}"


def rows_shown(before: int, shown: int, matching: int, cap: int, noun: str) -> str:
    """A page's header over every matching row, not the page (issue 30 item 8): ``"Events
    51–100 of 1,234"``, ``"Events 1–50 of more than 10,000"`` (``matching`` counted up to
    ``cap`` + 1 only), ``"No events"``.

    Args:
        before: rows on the pages before this one.
        shown: rows on this page.
        matching: rows matching on every page, counted up to ``cap`` + 1.
        cap: the count's cap.
        noun: the rows' noun in the singular (``"event"``).
    """
    nouns = inflect(2, noun).capitalize()
    if not shown:
        return f"No {inflect(2, noun)}"
    total = f"more than {cap:,}" if matching > cap else f"{max(matching, before + shown):,}"
    return f"{nouns} {before + 1:,}–{before + shown:,} of {total}"


def inflect(count: int | float, singular: str, plural_form: str | None = None) -> str:
    """The word that goes with ``count`` (the number not included): ``inflect(1, "row")``
    → ``"row"``, ``inflect(3, "was", "were")`` → ``"were"``; for text like
    ``"**3** rows"`` or ``"1 was no longer failed"``. ``plural`` is built on it."""
    return singular if count == 1 else (plural_form or f"{singular}s")


def duration(seconds: float | None) -> str:
    """A duration for people (``"42s"``, ``"1h 30m"``); ``None`` → ``"–"``."""
    return format_duration(seconds)


def count(value: int | float | None) -> str:
    """A count with thousands separators (``"1,234"``); ``None`` → ``"–"``."""
    return NO_VALUE if value is None else f"{value:,.0f}"


def rows(value: int) -> str:
    """A number of rows with its noun: ``"1 row"``, ``"1,234 rows"``."""
    return plural(value, "row")


def approximate(value: int | float) -> str:
    """A large number to two significant digits: ``"6.9 M"``, ``"300 k"``, ``"12 k"``;
    under 1,000 as it is (``"950"``)."""
    if value < 1000:
        return f"{value:,.0f}"
    rounded = float(f"{value:.2g}")
    size, unit = next(step for step in ((1e9, "bn"), (1e6, "M"), (1e3, "k")) if rounded >= step[0])
    return f"{rounded / size:g} {unit}"


def estimated(count: Count) -> str:
    """A count that may be an estimate (SPEC §2: only the dashboard estimates, labelled):
    exact ``"1,234"``; estimated ``"≈ 6.9 M (estimate)"``."""
    return f"{count.value:,}" if count.exact else f"≈ {approximate(count.value)} (estimate)"


def bold_rows(count: Count) -> str:
    """A count of rows in markdown, the number in bold: ``"**1,234** rows"``, ``"**1** row"``,
    ``"**≈ 6.9 M** rows (estimate)"``."""
    if count.exact:
        return f"**{count.value:,}** {inflect(count.value, 'row')}"
    return f"**≈ {approximate(count.value)}** rows (estimate)"


def estimated_rows(count: Count) -> str:
    """``estimated`` with the noun: ``"1 row"``, ``"1,234 rows"``,
    ``"≈ 6.9 M rows (estimate)"``."""
    if count.exact:
        return rows(count.value)
    return f"≈ {approximate(count.value)} rows (estimate)"


def instant(value: datetime | str | None) -> str:
    """An instant in UTC, ``"2026-11-29 23:45:14 UTC"``; accepts ISO-8601 text."""
    if value is None:
        return NO_VALUE
    if isinstance(value, str):
        value = datetime.fromisoformat(value)
    return value.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def size(num_bytes: int | None) -> str:
    """A size in bytes for people: ``"900 B"``, ``"256.0 KiB"``, ``"3.4 MiB"``,
    ``"5.0 GiB"`` (``units.format_bytes``)."""
    return format_bytes(num_bytes)


def table(
    rows: Iterable[dict[str, Any]],
    columns: Sequence[str] | None = None,
    *,
    durations: Sequence[str] = (),
    instants: Sequence[str] = (),
) -> pd.DataFrame:
    """Rows as a DataFrame for ``st.dataframe``.

    Id columns become strings (ids may exceed 2^53, which JavaScript numbers cannot hold);
    columns named in ``durations`` (seconds) become readable text, named without their
    ``_seconds`` suffix (a missing one, as an orphan's lock age, shows as ``–``); columns
    named in ``instants`` become ``instant`` text. A missing value of a text column shows
    as ``–`` (``NO_VALUE``), never as Streamlit's "None".

    Args:
        rows: dict rows, e.g. from a loader.
        columns: the columns to keep, in order (default: all, as given).
        durations: columns holding seconds.
        instants: columns holding instants (``datetime``, ISO text or ``None``).
    """
    frame = pd.DataFrame(list(rows), columns=list(columns) if columns else None)
    for column in frame.columns:
        if column in instants:
            frame[column] = [instant(None if pd.isna(v) else v) for v in frame[column]]
        if column in ID_COLUMNS or column.endswith("_id"):
            frame[column] = frame[column].map(lambda v: NO_VALUE if v is None else str(v))
        if column in ID_LIST_COLUMNS:
            frame[column] = frame[column].map(lambda v: ", ".join(str(i) for i in v or ()))
        if column in durations:  # a missing duration (NULL, NaN in a float column) → "–"
            frame[column] = frame[column].map(lambda v: duration(None if pd.isna(v) else v))
        values = frame[column].dropna()
        if len(values) < len(frame) and values.map(lambda v: isinstance(v, str)).all():
            frame[column] = frame[column].map(lambda v: NO_VALUE if pd.isna(v) else v)
    return frame.rename(columns={c: c.removesuffix("_seconds") for c in durations})


def column_config(frame: pd.DataFrame) -> dict[str, Any]:
    """``st.dataframe``'s ``column_config`` for ``frame``: ``LONG_TEXT_COLUMNS`` wide, with a
    hint that a chosen row shows its full text; instants as ``2026-11-29 23:45:14 UTC``
    (UTC, no ``+00:00`` tail), so that the key columns stay readable at 1440 px."""
    config: dict[str, Any] = {}
    for column in frame.columns:
        if column in LONG_TEXT_COLUMNS:
            config[column] = st.column_config.TextColumn(
                width="large", help=f"Select a row to read its full {column}."
            )
        elif isinstance(frame[column].dtype, pd.DatetimeTZDtype):
            config[column] = st.column_config.DatetimeColumn(
                format="YYYY-MM-DD HH:mm:ss [UTC]", timezone="UTC"
            )
    return config


def row_height(frame: pd.DataFrame) -> int | None:
    """``st.dataframe``'s ``row_height`` for ``frame``: ``WRAPPED_ROW_HEIGHT`` when a
    ``LONG_TEXT_COLUMNS`` value is longer than ``ONE_LINE_CHARS`` (its cell then wraps,
    readable in full without a click), else ``None`` (Streamlit's one-line rows)."""
    for column in LONG_TEXT_COLUMNS:
        if column in frame.columns and any(
            isinstance(value, str) and len(value) > ONE_LINE_CHARS for value in frame[column]
        ):
            return WRAPPED_ROW_HEIGHT
    return None


def row_detail(rows: Sequence[dict[str, Any]], selection: Any) -> None:
    """Below a table drawn with ``on_select``: the chosen row's ``LONG_TEXT_COLUMNS`` in
    full (``st.code``, wrapped), which the table's cells cut off.

    Args:
        rows: the rows the table shows, in its order (``selection`` indexes them).
        selection: ``st.dataframe``'s return value (``.selection.rows``).
    """
    chosen = [rows[i] for i in selection.selection.rows if i < len(rows)]
    for row in chosen:
        for column in LONG_TEXT_COLUMNS:
            if row.get(column) not in (None, ""):
                st.caption(f"Row {row.get('id', '')} · full {column}")
                st.code(str(row[column]), language=None, wrap_lines=True)
