"""How the dashboard writes figures: durations, counts, plurals, rates, instants, sizes,
tables, and values from the URL, the database or the rules inside markdown (shown literally).
"""

import math
import numbers
import re
import textwrap
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import numpy as np
import pandas as pd
import streamlit as st

from outbox_monitor.durations import duration_label as duration_label  # re-exported for pages
from outbox_monitor.durations import format_duration
from outbox_monitor.figures.estimates import Count
from outbox_monitor.units import format_bytes, format_value
from outbox_monitor.units import per_minute as per_minute  # re-exported for pages

NO_VALUE = "–"
ID_COLUMNS = ("id", "max_id")
ID_LIST_COLUMNS = ("ids", "first_ids")
LINK = "link"
"""``table``'s unit of a column of relative links (``Column.link``), left as they are."""

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


def _missing(value: object) -> bool:
    """Whether a cell holds no value (``None``, NaN, NaT); a list (a sparkline) never."""
    return value is None or (pd.api.types.is_scalar(value) and bool(pd.isna(value)))


def _is_number(value: object) -> bool:
    return isinstance(value, numbers.Number) and not isinstance(value, bool | np.bool_)


def table(
    rows: Iterable[dict[str, Any]],
    columns: Sequence[str] | None = None,
    *,
    units: Mapping[str, str] | None = None,
) -> pd.DataFrame:
    """Rows as a DataFrame for ``st.dataframe`` (``grid`` draws it), every value for people.

    Id columns become strings (ids may exceed 2^53, which JavaScript numbers cannot hold); a
    column given a unit in ``units`` is written in it
    (``units.format_value``: ``"seconds"`` → ``"4m 12s"``, ``"rows/min"`` → ``"1.50/min"``,
    ``"bytes"`` → ``"3.4 MiB"``; ``"instant"`` → ``instant`` text; ``LINK``: links, left as
    they are). A missing value shows as ``–`` (``NO_VALUE``), never as Streamlit's "None": in
    a text column as that text; in a column of numbers, of links or of instants as a gap that
    ``grid`` draws as ``–`` (whole numbers beside a gap stay whole: ``20``, not ``20.0``).

    Args:
        rows: dict rows, e.g. from a loader.
        columns: the columns to keep, in order (default: all, as given).
        units: column → unit of its values (``format_value``'s, or ``"instant"``).
    """
    units = units or {}
    frame = pd.DataFrame(list(rows), columns=list(columns) if columns else None)
    for column in frame.columns:
        unit = units.get(column)
        if unit == LINK:
            continue  # a row without a link: a gap, drawn as "–"
        if column in ID_COLUMNS or column.endswith("_id"):
            frame[column] = frame[column].map(lambda v: NO_VALUE if _missing(v) else str(v))
        elif column in ID_LIST_COLUMNS:
            frame[column] = frame[column].map(lambda v: ", ".join(str(i) for i in v or ()))
        elif unit == "instant":
            frame[column] = [instant(None if _missing(v) else v) for v in frame[column]]
        elif unit is not None:
            frame[column] = [format_value(None if _missing(v) else v, unit) for v in frame[column]]
        values = [v for v in frame[column] if not _missing(v)]
        if len(values) < len(frame):
            if all(isinstance(v, str) for v in values):
                frame[column] = [NO_VALUE if _missing(v) else v for v in frame[column]]
            elif all(_is_number(v) and float(v).is_integer() for v in values):
                frame[column] = pd.array(
                    [None if _missing(v) else int(v) for v in frame[column]], dtype="Int64"
                )
    return frame


GRID_WIDTH_PX = 980
"""The width of a table in the main area at 1440 px with the sidebar open (layout "wide"):
the columns ``grid`` shows must fit in it, so that no key column needs a horizontal scroll.
Measured in Chromium (``tests/browser/test_tables_fit_browser.py`` checks it)."""
ROW_MARKER_PX = 35
"""The checkbox column a table drawn with row selection adds on its left."""
CHAR_PX = 6.5
"""The width of a character of the grid's 14 px text, rounded up (its mean over an error
message measured 6.3 px in Chromium; an instant, ``2026-12-04 01:02:03 UTC``, 143 px): a value
longer than its column's width over this (less ``CELL_PADDING_PX``) is cut on one line."""
CELL_PADDING_PX = 17
"""A cell's padding, both sides (8.5 px a side)."""
WRAPPED_ROW_HEIGHT = 104
"""The fewest pixels per row of a table holding a value longer than its column: above
Streamlit's 64 px the grid wraps text cells, and 104 px hold five lines of its 14 px text (a
200-character error, as the lists read ``left(last_error, 200)``, in a 400 px column needs
four); a value needing more lines gets them, up to ``MAX_WRAPPED_LINES``."""
LINE_PX = 14 * 1.4
"""A wrapped line of the grid's 14 px text."""
MAX_WRAPPED_LINES = 8
"""The most lines a row grows to; a longer value shows in full with the chosen row."""


@dataclass(frozen=True)
class Column:
    """One column of a table drawn by ``grid``.

    Attributes:
        name: the row's key.
        label: the header, in words (no ``snake_case``).
        width: pixels in the grid; ``0`` for a secondary column, left out of the grid and
            shown with a chosen row's detail. The widths of a table's shown columns sum to at
            most ``GRID_WIDTH_PX``.
        unit: what its values are written in (``table``'s ``units``: ``"seconds"``,
            ``"rows"``, ``"rows/min"``, ``"bytes"``, ``"fraction"``, ``"instant"``), or
            ``None`` for values shown as they are.
        help: the header's tooltip: what the column means.
        link: a link column's text (its values are relative links).
        chart: a sparkline of each row's list of numbers.
    """

    name: str
    label: str
    width: int = 0
    unit: str | None = None
    help: str | None = None
    link: str | None = None
    chart: bool = False


def _lines(value: object, width: float) -> int:
    """The lines a text value needs in a column ``width`` pixels wide, wrapped at spaces as
    the grid wraps it (a word longer than a line is broken)."""
    per_line = max(int((width - CELL_PADDING_PX) // CHAR_PX), 1)
    return max(len(textwrap.wrap(str(value), per_line)), 1)


def _most_lines(frame: pd.DataFrame, column: Column) -> int:
    """The most lines a value of a shown text column needs (1: every value fits one line)."""
    if column.link or column.chart or not column.width or column.name not in frame:
        return 1
    return max(
        (_lines(v, column.width) for v in frame[column.name] if isinstance(v, str)), default=1
    )


def row_height(
    frame: pd.DataFrame, columns: Sequence[Column], most: Mapping[str, int] | None = None
) -> int | None:
    """``st.dataframe``'s ``row_height`` for ``frame`` drawn with ``columns``: ``None`` (one
    line, Streamlit's rows) when every shown value fits its column, else tall enough for
    the longest one's lines (at least ``WRAPPED_ROW_HEIGHT``, at most ``MAX_WRAPPED_LINES``
    lines), so that its cell wraps and reads in full without a click. ``most``: each
    column's ``_most_lines`` when the caller counted them (``grid``)."""
    most = most if most is not None else {c.name: _most_lines(frame, c) for c in columns}
    lines = max((most[column.name] for column in columns), default=1)
    if lines <= 1:
        return None
    return max(WRAPPED_ROW_HEIGHT, math.ceil(min(lines, MAX_WRAPPED_LINES) * LINE_PX + 6))


def grid_config(
    frame: pd.DataFrame, columns: Sequence[Column], most: Mapping[str, int] | None = None
) -> dict[str, Any]:
    """``st.dataframe``'s ``column_config`` of the shown ``columns``: each labelled in words,
    at its width, with its tooltip; links and sparklines as such, a column whose values are
    cut with a tooltip saying where they show in full. ``most``: as ``row_height``'s."""
    most = most if most is not None else {c.name: _most_lines(frame, c) for c in columns}
    config: dict[str, Any] = {}
    for column in columns:
        if not column.width:
            continue
        options = {"width": column.width, "help": column.help}
        if column.link:
            config[column.name] = st.column_config.LinkColumn(
                column.label, display_text=column.link, **options
            )
        elif column.chart:
            config[column.name] = st.column_config.LineChartColumn(column.label, **options)
        else:
            if most[column.name] > 1:
                options["help"] = " ".join(
                    filter(None, [column.help, "Select a row to read it in full."])
                )
            config[column.name] = st.column_config.Column(column.label, **options)
    return config


def grid(
    rows: Sequence[Mapping[str, Any]],
    columns: Sequence[Column],
    *,
    key: str,
    detail: bool = True,
) -> Any:
    """Draw ``rows`` as a table whose key columns fit the main area at 1440 px: the shown
    ``columns`` (``width`` > 0) in words at their widths, values for people (``table``),
    cells wrapped in taller rows when a value is longer than its column; the secondary
    columns (``width`` 0) and every value in full in a chosen row's detail below. Every table
    lets one row be chosen (its checkbox column, ``ROW_MARKER_PX``), and a missing value
    reads ``–``.

    Args:
        rows: dict rows holding each column's ``name``.
        columns: the table's columns, shown and secondary, in order.
        key: the table's widget key (unique on its page; its container's CSS class is
            ``st-key-<key>``).
        detail: show a chosen row's detail (``row_detail``) below the table; ``False`` when
            the caller shows the chosen row itself (the Events list opens the event).

    Returns:
        ``st.dataframe``'s value: ``.selection.rows`` indexes ``rows``.
    """
    frame = table(
        rows,
        [c.name for c in columns],
        units={c.name: LINK if c.link else c.unit for c in columns if c.unit or c.link},
    )
    shown = [c for c in columns if c.width]
    most = {c.name: _most_lines(frame, c) for c in shown}  # once: both below read them
    height = row_height(frame, shown, most)
    picked = st.dataframe(
        frame,
        hide_index=True,
        width="stretch",
        column_config=grid_config(frame, shown, most),
        column_order=[c.name for c in shown],
        row_height=height,
        on_select="rerun",
        placeholder=NO_VALUE,
        selection_mode="single-row",
        key=key,
    )
    if detail:
        row_detail(frame, columns, picked)
    return picked


def row_detail(frame: pd.DataFrame, columns: Sequence[Column], selection: Any) -> None:
    """Below a ``grid``: the chosen row in an expander, every column by its label — the
    secondary ones the grid leaves out, a link as a link — and each value the grid cuts in
    full (``st.code``, wrapped), under ``"Row <id> · full <label>"``.

    Args:
        frame: the table the grid shows (``table``'s values for people).
        columns: its columns.
        selection: ``st.dataframe``'s return value (``.selection.rows``).
    """
    for index in selection.selection.rows:
        if index >= len(frame):
            continue
        row = frame.iloc[index]
        name = row["id"] if "id" in frame else row[columns[0].name]
        with st.expander(f"Row {md_text(name)}", expanded=True, icon=":material/table_rows:"):
            lines, full = [], []
            for column in columns:
                value = row[column.name]
                if column.chart or _missing(value) or value in ("", NO_VALUE):
                    continue
                if column.link:  # a relative link of ours (``[a-z_]+?query``): opened here
                    lines.append(f"- [{md_text(column.link)}]({value})")
                    continue
                if isinstance(value, bool | np.bool_):
                    value = "yes" if value else "no"
                if isinstance(value, str) and _lines(value, column.width or GRID_WIDTH_PX) > 1:
                    full.append((column.label, value))
                else:
                    lines.append(f"- **{md_text(column.label)}**: {md_text(value)}")
            st.markdown("\n".join(lines))
            for label, value in full:
                st.caption(f"Row {md_text(name)} · full {md_text(label)}")
                st.code(value, language=None, wrap_lines=True)
