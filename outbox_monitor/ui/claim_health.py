"""The Health page's "Claim health" section (issue 14 item 2): the workers' claim as Postgres
plans it now, what is wrong with it, its recorded cost over the window and the workers'
real claim and ack times from ``pg_stat_statements`` when readable.

``section(db, window=…)`` renders it; its reads are one cached load (``cache.cached``) of
``health.claim_plan`` and ``health.statements``, which EXPLAIN (never run) the claim.
"""

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import altair as alt
import pandas as pd
import streamlit as st

from outbox_monitor.health.claim_plan import claim_health, plan_series
from outbox_monitor.health.claim_verdicts import COST_JUMP_FACTOR, ClaimHealth
from outbox_monitor.health.statements import WorkerStatements, worker_statements
from outbox_monitor.store.db import Database
from outbox_monitor.ui import charts, format
from outbox_monitor.ui.cache import cached, db_key
from outbox_monitor.ui.format import Column
from outbox_monitor.units import per_minute

PLAN_COLUMNS = [
    Column("statement", "statement", 220),
    Column("verdict", "verdict", 100),
    Column("shape", "plan shape", 380),
    Column("estimated cost", "estimated cost", 120),
    Column("estimated rows", "estimated rows", 120),
]
"""The plans table's columns (``format.grid``)."""
CHANGE_COLUMNS = [
    Column("recorded at", "recorded at", 170),
    Column("statement", "statement", 220),
    Column("shape", "plan shape", 380),
    Column("walks non-pending rows", "walks non-pending rows", 170),
]
"""The recorded shape changes' columns (``format.grid``)."""
STATEMENT_COLUMNS = [
    Column("statement", "statement", 220),
    Column("calls", "calls", 120),
    Column("mean", "mean", 120),
    Column("max", "max", 120),
    Column("recent mean", "recent mean", 120),
]
"""The workers' statements table's columns (``format.grid``)."""
FIX = (
    "Make sure the users' claim index `(status, available_at, created_at)` exists and is "
    "valid; drop an index over every row that the claim walks (`DROP INDEX CONCURRENTLY "
    "<name>` — check first that nothing else needs it); then `ANALYZE` the table. "
    "Nothing here changes your database."
)


@dataclass(frozen=True)
class ClaimView:
    """What the section shows, read in one load: the plans now (``health``), the workers'
    statements (``statements``) and the plans recorded over the window (``recorded``)."""

    health: ClaimHealth
    statements: WorkerStatements
    recorded: list[dict[str, Any]]
    shape_changes: list[dict[str, Any]]


@cached
def _view(key: str, _db: Database, window: float) -> ClaimView:
    with _db.session():
        series = plan_series(_db, window=window)
        return ClaimView(
            health=claim_health(_db),
            statements=worker_statements(_db),
            recorded=series.rows,
            shape_changes=series.shape_changes(),
        )


def view(db: Database, *, window: float) -> ClaimView:
    """The section's data (cached, ``cache.cached``)."""
    return _view(db_key(db), db, window)


def plan_rows(health: ClaimHealth) -> list[dict[str, Any]]:
    """The plans table: one row per statement."""
    return [
        {
            "statement": plan.label,
            "verdict": "degraded" if plan.degraded else "ok",
            "shape": plan.shape,
            "estimated cost": round(plan.total_cost, 2),
            "estimated rows": round(plan.plan_rows),
        }
        for plan in health.plans
    ]


def statement_rows(found: WorkerStatements) -> list[dict[str, Any]]:
    """The workers' statements table: calls per minute, mean, max and the mean since the
    scheduler's last reading, in milliseconds."""

    def ms(value: float | None) -> str:
        return "–" if value is None else f"{value:,.2f} ms"

    return [
        {
            "statement": cost.label,
            "calls": per_minute(cost.calls_per_minute),
            "mean": ms(cost.mean_exec_ms),
            "max": ms(cost.max_exec_ms),
            "recent mean": ms(cost.interval_mean_exec_ms),
        }
        for cost in found.costs
    ]


def cost_chart(recorded: Sequence[Mapping[str, Any]]) -> alt.Chart:
    """The recorded estimated cost per statement over time (points where a plan walked
    non-pending rows are filled)."""
    frame = pd.DataFrame(
        list(recorded), columns=["sampled_at", "statement", "total_cost", "walks_non_pending"]
    )
    return (
        alt.Chart(frame)
        .mark_line(point=True)
        .encode(
            x=alt.X(
                "sampled_at:T",
                title=None,
                scale=alt.Scale(type="utc"),
                axis=alt.Axis(
                    format=charts.time_format(frame["sampled_at"]),
                    values=charts.time_ticks(frame["sampled_at"]),
                ),
            ),
            y=alt.Y("total_cost:Q", title="estimated cost"),
            color=alt.Color("statement:N", title=None, legend=alt.Legend(orient="bottom")),
            tooltip=["statement:N", "total_cost:Q", "walks_non_pending:N"],
        )
        .properties(height=charts.HEIGHT)
    )


def _verdicts(health: ClaimHealth) -> None:
    walking = [plan for plan in health.plans if plan.walks_non_pending]
    jumped = [plan for plan in health.plans if plan.cost_jumped]
    for plan in walking:
        reasons = "; ".join(plan.reasons)
        st.error(
            f"The claim's plan walks rows that are not pending — {format.md_text(plan.label)}: "
            f"{format.md_code(plan.shape)}. It {format.md_text(reasons)}. Every claim reads "
            "the done history before it finds due rows (8 ms became 3 s in our benchmark).",
            icon=":material/warning:",
        )
    if walking:
        st.info(FIX, icon=":material/build:")
    for plan in jumped:
        st.warning(
            f"The estimated cost of {format.md_text(plan.label)} jumped to "
            f"{plan.total_cost:,.0f}, at least {COST_JUMP_FACTOR:g}× its recent median "
            f"({plan.baseline_cost:,.0f}): {format.md_code(plan.shape)}.",
            icon=":material/trending_up:",
        )
    if not walking and not jumped:
        small = [plan for plan in health.plans if plan.reasons]
        source = (
            "rows by the planner's statistics"
            if health.table_analyzed
            else "live rows by the statistics, not analyzed yet"
        )
        note = (
            f" (the table holds {format.count(health.table_rows)} {source}: too few for the "
            "scan to matter)"
            if small
            else ""
        )
        st.success(
            f"The claim reads pending rows only and its cost is steady{note}.",
            icon=":material/check_circle:",
        )


def section(db: Database, *, window: float, window_label: str) -> None:
    """Render "Claim health": verdicts, the plans now, their recorded cost over the window
    (``window`` seconds, named ``window_label``), shape changes and the workers'
    ``pg_stat_statements`` costs (or why they are not shown)."""
    found = view(db, window=window)
    st.subheader("Claim health")
    _verdicts(found.health)
    format.grid(plan_rows(found.health), PLAN_COLUMNS, key="health.claim_plans")
    st.caption(
        "The workers' claim as Postgres plans it now",
        help="EXPLAIN, never run: the SPEC §1 SQL users write and `outbox_monitor.claim()`. "
        "A plan that walks an index over every row, filters by status or scans the table "
        "reads rows it cannot hand out.",
    )
    st.markdown(f"**Recorded estimated cost, last {window_label}**")
    if found.recorded:
        st.altair_chart(cost_chart(found.recorded), width="stretch")
        changes = [
            {
                "recorded at": format.instant(row["sampled_at"]),
                "statement": row["statement"],
                "shape": row["shape"],
                "walks non-pending rows": "yes" if row["walks_non_pending"] else "no",
            }
            for row in found.shape_changes
        ]
        st.caption("Plan shapes as recorded, each change once:")
        format.grid(changes, CHANGE_COLUMNS, key="health.plan_changes")
    else:
        st.caption(
            "No plan recorded in this window: the scheduler records one every "
            "OUTBOX_MONITOR_CLAIM_PLAN_INTERVAL (default 5 min)."
        )
    st.markdown("**The workers' claim and ack (pg_stat_statements)**")
    if not found.statements.available:
        st.info(found.statements.note or "", icon=":material/info:")
    elif found.statements.costs:
        format.grid(statement_rows(found.statements), STATEMENT_COLUMNS, key="health.statements")
        st.caption(
            "Mean and max since the counters' last reset; calls per minute and recent mean "
            "since the scheduler's last reading."
        )
    else:
        st.caption("No claim or ack statement of this outbox in pg_stat_statements yet.")
