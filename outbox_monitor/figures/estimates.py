"""Counts the dashboard may estimate: exact up to a cap, the planner's estimate above (SPEC §2).

SPEC §2: every figure of ``status --json`` and of alert evaluation is exact; only the
dashboard may show an estimate, for very large ``done``/``failed`` totals, labelled as such.
Counting a million dead letters or done rows exactly reads every one of them (0.7–2.1 s at
10 M rows: benchmarks/RESULTS.md), so the dashboard counts them only up to ``cap + 1``
(served by the recommended partial indexes: ≈ 1.3–4 ms for 10,001 entries) and, above the cap,
asks the planner how many rows the same statement would return (``actions`` previews with a
``count_cap``; ``metrics.attempts_histogram_capped`` samples instead). Only the dashboard
passes a cap: ``status --json``, alerts, the sampler and the CLI count every row.
"""

import json
from dataclasses import dataclass
from typing import Any

from psycopg import sql

from outbox_monitor.store.db import Database
from outbox_monitor.store.filters import Where

DASHBOARD_COUNT_CAP = 10_000
"""Rows the dashboard counts exactly; above, it shows an estimate, labelled. Counting
10,001 entries of a recommended index takes ≈ 1.3–4 ms (benchmarks/estimates.py)."""


@dataclass(frozen=True)
class Count:
    """A number of rows: exact, or (``exact`` false) an estimate above the cap it was
    counted to, never below ``cap + 1`` (that many rows were counted); ``ui.format``
    writes the estimate ``"≈ 6.9 M (estimate)"``."""

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
