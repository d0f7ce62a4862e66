"""Counts the dashboard may estimate: exact up to a cap, the planner's estimate above (SPEC §2).

SPEC §2: every figure of ``status --json`` and of alert evaluation is exact; only the
dashboard may show an estimate, for very large ``done``/``failed`` totals, labelled as such.
Counting a few million dead letters or done rows exactly reads every one of them (1.2–2 s at
10 M rows: benchmarks/RESULTS.md), so the dashboard counts them only up to ``cap + 1``
(served by the recommended partial indexes: ≈ 2–4 ms for 10,001 entries) and, above the cap,
asks the planner how many rows the same statement would return. ``metrics`` (``status``,
alerts, the CLI) never uses this module without a cap given by the dashboard.
"""

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from psycopg import sql

from outbox_monitor.db import Database
from outbox_monitor.filters import Where

DASHBOARD_COUNT_CAP = 10_000
"""Rows the dashboard counts exactly; above, it shows an estimate, labelled. Counting
10,001 entries of a recommended index takes ≈ 2–4 ms (benchmarks/estimates.py)."""


@dataclass(frozen=True)
class Count:
    """A number of rows: exact, or (``exact`` false) an estimate above the cap it was
    counted to, never below ``cap + 1`` (that many rows were counted)."""

    value: int
    exact: bool = True


def planner_rows(db: Database, rows: sql.Composable, params: dict[str, Any]) -> int:
    """The planner's estimate of how many rows the read statement ``rows`` returns.

    ``EXPLAIN (FORMAT JSON)`` plans the statement without running it (≈ 0.2–1 ms). The
    estimate honours every condition with its bound value (an event-type filter, a cutoff)
    through the column statistics of the table's last ANALYZE, scaled to the table's
    current size; it assumes the conditions independent (e.g. an event type as likely to
    fail as any other).

    Args:
        rows: a composed read statement (``db.compose(...)``), no trailing semicolon.
        params: its ``%(named)s`` parameters.

    Returns:
        Rows, rounded, at least 0.

    Raises:
        The errors of ``Database.fetch_one``.
    """
    document = db.fetch_one("count_estimate", params, rows=rows)["QUERY PLAN"]
    plan = json.loads(document) if isinstance(document, str) else document
    return max(round(plan[0]["Plan"]["Plan Rows"]), 0)


def cap_count(counted: int, cap: int, estimate: Callable[[], int]) -> Count:
    """The count to show from a count made up to ``cap + 1``: exact at or below ``cap``,
    else ``estimate()`` (called only then), raised to ``cap + 1`` if it is lower."""
    if counted <= cap:
        return Count(counted)
    return Count(max(estimate(), cap + 1), exact=False)


def count_up_to(
    db: Database, name: str, *, cap: int, where: Where, params: dict[str, Any] | None = None
) -> int:
    """How many rows the named row statement returns, counted up to ``cap + 1`` only.

    Args:
        name: a block of ``sql/queries.sql`` that selects the rows to count (e.g.
            ``dead_letter_rows``), with an ``{and_filters}`` placeholder.
        cap: count at most ``cap + 1`` rows.
        where: the filter (``Where().event_type(...)``).
        params: the block's other parameters.

    Returns:
        The number of rows, at most ``cap + 1`` (which means "more than ``cap``").

    Raises:
        The errors of ``Database.fetch_one``.
    """
    values = {**(params or {}), **where.params, "cap": cap}
    rows = db.compose(name, and_filters=where.fragment)
    return db.fetch_one("count_capped", values, rows=rows)["value"]


def count_rows(
    db: Database, name: str, *, cap: int, where: Where, params: dict[str, Any] | None = None
) -> Count:
    """How many rows the named row statement returns: exact up to ``cap``, else estimated.

    Args:
        name: a block of ``sql/queries.sql`` that selects the rows to count (e.g.
            ``dead_letter_rows``), with an ``{and_filters}`` placeholder.
        cap: count exactly up to this many rows (``DASHBOARD_COUNT_CAP`` on the dashboard).
        where: the filter (``Where().event_type(...)``).
        params: the block's other parameters.

    Returns:
        A ``Count``: exact when at most ``cap`` rows match, else the planner's estimate
        (``planner_rows``), never below ``cap + 1``.

    Raises:
        The errors of ``Database.fetch_one``.
    """
    counted = count_up_to(db, name, cap=cap, where=where, params=params)
    values = {**(params or {}), **where.params}
    rows = db.compose(name, and_filters=where.fragment)
    return cap_count(counted, cap, lambda: planner_rows(db, rows, values))
