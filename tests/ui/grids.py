"""What a table drawn by ``format.grid`` must be at 1440 px (issue 30 items 5 and 6), read in
AppTest from each grid's own ``column_config``, ``column_order``, ``row_height`` and data.

The rule of "fits": the widths of the columns a grid shows and of its row-selection checkbox
column (every table lets a row be chosen) sum to at most ``format.GRID_WIDTH_PX``, the main
area's width at 1440 px with the sidebar open (the Chromium test measures it); every key
column is shown, not hidden, at an explicit width, its header on one line of it; a column
holding a value longer than one line of it is at least ``MIN_WRAPPED_PX`` wide (never
"small"), its rows wrap (``row_height`` at least ``format.WRAPPED_ROW_HEIGHT``), its row
chosen shows it in full. "Human": no header holds ``_``, no cell shows "None" (a missing
value reads ``–``), no cell is raw JSON."""

import json
import textwrap
from dataclasses import dataclass

import pandas as pd

from outbox_monitor.ui import format

NAMED_WIDTHS = {"small": 75, "medium": 200, "large": 400}
"""Streamlit's named column widths, in pixels (``st.column_config.Column``'s docs)."""
MIN_WRAPPED_PX = 100
"""The narrowest column that may hold a value needing more than one line."""


@dataclass(frozen=True)
class Grid:
    """One ``st.dataframe`` as AppTest holds it."""

    key: str | None
    frame: pd.DataFrame
    config: dict
    order: list[str]
    row_height: int
    selectable: bool
    placeholder: str

    @property
    def shown(self) -> list[str]:
        """The columns drawn: ``column_order`` (or all), less those configured hidden."""
        names = self.order or list(self.frame.columns)
        return [n for n in names if not (self.config.get(n) or {}).get("hidden")]

    def label(self, name: str) -> str:
        return (self.config.get(name) or {}).get("label") or name

    def width(self, name: str) -> int | None:
        width = (self.config.get(name) or {}).get("width")
        return NAMED_WIDTHS.get(width, width) if width is not None else None

    def kind(self, name: str) -> str | None:
        return ((self.config.get(name) or {}).get("type_config") or {}).get("type")


def grids(at) -> dict[str | None, Grid]:
    """Every table of the page run, by its widget key."""
    found = {}
    for element in at.dataframe:
        proto = element.proto
        found[element.key] = Grid(
            key=element.key,
            frame=element.value,
            config=json.loads(proto.columns or "{}"),
            order=list(proto.column_order),
            row_height=proto.row_height,
            selectable=bool(proto.selection_mode),
            placeholder=proto.placeholder,
        )
    return found


def lines(text: str, width: int) -> int:
    """The lines ``text`` needs in a column ``width`` pixels wide (the grid's padding off),
    wrapped at spaces, ``format.CHAR_PX`` a character."""
    per_line = max(int((width - format.CELL_PADDING_PX) // format.CHAR_PX), 1)
    return max(len(textwrap.wrap(text, per_line)), 1)


def assert_fits(grid: Grid, keys: list[str]) -> None:
    """``grid`` shows the ``keys`` (labels) and fits at 1440 px, as the module says."""
    shown = grid.shown
    labels = [grid.label(name) for name in shown]
    missing = [key for key in keys if key not in labels]
    assert not missing, f"{grid.key}: key columns {missing} not shown among {labels}"
    widths = {name: grid.width(name) for name in shown}
    unsized = [grid.label(n) for n, w in widths.items() if not w]
    assert not unsized, f"{grid.key}: columns without a width: {unsized}"
    cut = [
        label for label, name in zip(labels, shown, strict=True) if lines(label, widths[name]) > 1
    ]
    assert not cut, f"{grid.key}: headers wider than their columns: {cut}"
    assert grid.selectable, f"{grid.key}: no row may be chosen (its detail, its values in full)"
    total = sum(widths.values()) + format.ROW_MARKER_PX
    assert total <= format.GRID_WIDTH_PX, f"{grid.key}: {total} px of columns, {widths}"
    for name in shown:
        if grid.kind(name) in ("link", "line_chart"):
            continue
        texts = [v for v in grid.frame[name] if isinstance(v, str)]
        longest = max((lines(t, widths[name]) for t in texts), default=1)
        if longest > 1:
            what = f"{grid.key}: {grid.label(name)!r} holds a value of {longest} lines"
            assert widths[name] >= MIN_WRAPPED_PX, f"{what} in {widths[name]} px"
            assert grid.row_height >= format.WRAPPED_ROW_HEIGHT, f"{what}, rows not wrapped"


def assert_human(grid: Grid) -> None:
    """Headers in words; no cell shows "None" (a missing value reads ``–``: a text cell holds
    it, a gap in numbers or links is drawn with the grid's placeholder) and none is raw JSON."""
    labels = [grid.label(name) for name in grid.shown]
    assert not [label for label in labels if "_" in label], f"{grid.key}: headers {labels}"
    for name in grid.frame.columns:
        for value in grid.frame[name]:
            where = f"{grid.key}: {grid.label(name)!r} holds {value!r}"
            if pd.api.types.is_scalar(value) and pd.isna(value):
                assert grid.placeholder == format.NO_VALUE, f"{where}, drawn as None"
            if isinstance(value, str):
                assert value != "None", where
                assert not value.lstrip().startswith(("{", "[")) and '{"' not in value, where


def assert_page_tables(at, keys: dict[str, list[str]]) -> dict[str | None, Grid]:
    """Every table of the page fits and is human; the tables named in ``keys`` (widget key →
    key column labels) are there, showing those columns. Returns the page's grids."""
    found = grids(at)
    absent = [key for key in keys if key not in found]
    assert not absent, f"tables {absent} not drawn; the page has {list(found)}"
    for key, grid in found.items():
        assert_fits(grid, keys.get(key, []))
        assert_human(grid)
    return found
