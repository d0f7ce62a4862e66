"""Claim health (issue 14 item 2): how Postgres plans the workers' claim, and when that plan
has degraded.

A claim dies of its plan before it dies of volume: with a ``(created_at)`` index over every
row, the planner may walk the whole history in ``created_at`` order and filter out the done
rows, and the same 50-row claim goes from 8 ms to 3 s (benchmarks/RESULTS.md, "Claim with
the indexes of the release before issue 11"). This module EXPLAINs — plans, never runs:
no ``ANALYZE`` — the claim's inner selection as workers run it, without ``FOR UPDATE`` so
that the read role may plan it (EXPLAIN of the function call itself would show only a
function scan):

- ``users_claim``: the SPEC §1 SELECT as users write it;
- ``shared_claim``: ``outbox_monitor.claim``'s candidate selection — migration 001's
  statement while no flow control names the table, else migration 009's first round
  (nothing taken or blocked yet).

For each it keeps the plan's shape (node types and index names), the estimated total cost
(the planner's units, not time) and rows, and two verdicts:

- **walks non-pending rows**: a scan of an index whose leading column is not ``status``
  (unless its predicate keeps pending rows only), a scan whose ``Filter`` tests ``status``
  (rows of other statuses are read and thrown away), or a sequential scan — on a table of
  at least ``MIN_TABLE_ROWS`` rows by the planner's statistics (a small table is read
  whole cheaply, and a new one has no statistics yet);
- **cost jumped**: the estimated cost is at least ``COST_JUMP_FACTOR`` times the median of
  the newest ``COST_BASELINE_SAMPLES`` recorded costs of the same statement (with at least
  ``MIN_BASELINE_SAMPLES`` of them) and at least ``MIN_JUMPED_COST``. A jump that lasts
  becomes the new baseline after about half the baseline's samples.

The scheduler's ``claim_plan`` job (``jobs.add_claim_plan_job``) records both statements
every ``OUTBOX_MONITOR_CLAIM_PLAN_INTERVAL`` into ``outbox_monitor.claim_plans`` (migration
011), with the workers' statement costs from ``pg_stat_statements`` when it is readable
(``health.statements``), and prunes both past ``OUTBOX_MONITOR_SAMPLE_RETENTION``. The
figures ``claim_plan_degraded`` and ``claim_plan_cost`` (``figures.registry.FIGURES``), ``status
--json``'s ``health.claim_plan`` and the Health page plan afresh and compare with what was
recorded. This module plans, records and reads back; the shape and the verdicts are
``health.claim_verdicts``'s (pure).
"""

import json
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC
from typing import Any

from outbox_monitor.config.settings import DEFAULT_CLAIM_BATCH
from outbox_monitor.health.claim_verdicts import (
    COST_BASELINE_SAMPLES,
    STATEMENTS,
    ClaimHealth,
    IndexInfo,
    cost_jumped,
    judge,
)
from outbox_monitor.health.statements import record_statements, worker_statements
from outbox_monitor.store.db import Database

log = logging.getLogger(__name__)


def table_indexes(db: Database) -> dict[str, IndexInfo]:
    """The valid indexes of the outbox table and of its partitions, by name (query
    ``claim_plan_indexes``)."""
    rows = db.fetch_all("claim_plan_indexes", {"table_regclass": db.table_regclass})
    return {
        row["index_name"]: IndexInfo(
            row["index_name"], row["leading_column"], row["predicate"], row.get("relation")
        )
        for row in rows
    }


def _root(document: Any) -> Mapping[str, Any]:
    plan = json.loads(document) if isinstance(document, str) else document
    return plan[0]["Plan"]


def plan_claims(
    fetch_one: Callable[[str, dict[str, Any]], Mapping[str, Any] | None],
    *,
    limit: int = DEFAULT_CLAIM_BATCH,
    flow_control: bool = False,
) -> dict[str, Mapping[str, Any]]:
    """EXPLAIN (FORMAT JSON; never ANALYZE) both claim statements through ``fetch_one``.

    Args:
        fetch_one: runs a named query with its parameters and returns its first row
            (``Database.fetch_one``, or the same on one connection of the caller's: the claim
            advisor plans on the connection that holds its hypothetical index).
        limit: the claim's batch (SPEC default 50).
        flow_control: plan ``outbox_monitor.claim``'s statement as migration 009's.

    Returns:
        ``{statement: root plan node}`` for each ``STATEMENTS`` key.
    """
    users = fetch_one("claim_plan_users_claim", {"limit": limit})
    if flow_control:
        shared = fetch_one(
            "claim_plan_shared_claim_controlled",
            {"limit": limit, "taken": [], "blocked_exact": [], "blocked_like": []},
        )
    else:
        shared = fetch_one("claim_plan_shared_claim", {"limit": limit})
    return {"users_claim": _root(users["QUERY PLAN"]), "shared_claim": _root(shared["QUERY PLAN"])}


def explain_claims(db: Database, *, limit: int = DEFAULT_CLAIM_BATCH) -> dict[str, Any]:
    """EXPLAIN (FORMAT JSON; never ANALYZE) both claim statements now.

    Args:
        limit: the claim's batch (SPEC default 50).

    Returns:
        ``{"plans": {statement: root plan node}, "flow_control": bool,
        "indexes": table_indexes, "table_rows": int, "table_analyzed": bool,
        "relation_rows": {name: int}}``.

    Raises:
        QueryTimeout (``statement_timeout``), SchemaNotInitialised, PermissionDenied and
        the connector's other errors.
    """
    with db.session():
        controlled = db.fetch_one("claim_plan_has_controls", {"table_regclass": db.table_regclass})
        flow_control = bool(controlled and controlled["controlled"])
        plans = plan_claims(db.fetch_one, limit=limit, flow_control=flow_control)
        indexes = table_indexes(db)
        size = db.fetch_one("claim_plan_table_rows", {"table_regclass": db.table_regclass})
        relations = db.fetch_all("claim_plan_relation_rows", {"table_regclass": db.table_regclass})
    return {
        "plans": plans,
        "flow_control": flow_control,
        "indexes": indexes,
        "table_rows": int(size["table_rows"]) if size else 0,
        "table_analyzed": bool(size["analyzed"]) if size else True,
        "relation_rows": {row["relation"]: int(row["table_rows"]) for row in relations},
    }


def recent_costs(db: Database) -> dict[str, list[float]]:
    """The newest ``COST_BASELINE_SAMPLES`` recorded costs of each statement of this table,
    newest first (query ``claim_plans_recent_costs``); empty lists before the first record."""
    rows = db.fetch_all(
        "claim_plans_recent_costs",
        {
            "table_name": db.table_name,
            "statements": list(STATEMENTS),
            "limit": COST_BASELINE_SAMPLES,
        },
    )
    return {row["statement"]: [float(cost) for cost in row["costs"]] for row in rows}


def claim_health(db: Database, *, history: Database | None = None) -> ClaimHealth:
    """Both claim statements planned now, judged against the recorded costs.

    Args:
        db: the connector of the watched database (the plans).
        history: where the scheduler records plans (its primary); default ``db``.

    Returns:
        The ``ClaimHealth``: ``degraded`` and ``cost`` are the figures
        ``claim_plan_degraded`` and ``claim_plan_cost``.

    Raises:
        QueryTimeout, SchemaNotInitialised (no ``claim_plans`` table: run ``init-db``),
        PermissionDenied and the connector's other errors.
    """
    explained = explain_claims(db)
    return judge(explained, recent_costs(history or db))


def claim_plan_status(db: Database) -> dict[str, Any]:
    """``status --json``'s ``health.claim_plan``: ``ClaimHealth.as_json`` plus
    ``"statements"`` (``health.statements.WorkerStatements.as_json``: the workers' claim and
    ack costs from ``pg_stat_statements``, or why they are not shown).

    Raises:
        The errors of ``claim_health``; never because of ``pg_stat_statements``.
    """
    found = claim_health(db).as_json()
    found["statements"] = worker_statements(db).as_json()
    return found


def record_claim_plans(db: Database, *, primary: Database | None = None) -> dict[str, Any]:
    """The claim-health job: plan both statements, record them, record the workers'
    statement costs when ``pg_stat_statements`` is readable, prune past the retention.

    Plans are read through ``db`` (a hot standby plans like its primary) and judged against
    the costs recorded through ``primary``; a degraded plan is logged as a warning.

    Args:
        db: the connector of the watched database.
        primary: where the scheduler writes (``OUTBOX_MONITOR_PRIMARY_DSN``); default ``db``.

    Returns:
        ``{"sampled_at" (datetime), "health" (ClaimHealth), "statements"
        (WorkerStatements), "pruned" (rows deleted by the retention)}``.

    Raises:
        QueryTimeout, DatabaseUnavailable, SchemaNotInitialised (migration 011 not applied:
        run ``init-db``) and the connector's other errors; nothing is recorded then.
    """
    writes = primary or db
    health = claim_health(db, history=writes)
    sampled_at = None
    with writes.transaction() as conn:
        for plan in health.plans:
            sampled_at = conn.execute(
                writes.compose("claim_plan_insert"),
                {
                    "table_name": db.table_name,
                    "statement": plan.statement,
                    "shape": plan.shape,
                    "total_cost": plan.total_cost,
                    "plan_rows": plan.plan_rows,
                    "walks_non_pending": plan.walks_non_pending,
                    "reasons": list(plan.reasons),
                },
            ).fetchone()["sampled_at"]
    statements = record_statements(db, primary=writes)
    pruned = writes.fetch_one(
        "claim_plans_prune",
        {"table_name": db.table_name, "retention": db.settings.sample_retention},
    )["pruned"]
    for plan in health.plans:
        if plan.degraded:
            log.warning(
                "claim plan of %s degraded: %s: %s (cost %.0f%s)",
                db.table_name,
                plan.label,
                plan.shape,
                plan.total_cost,
                "" if plan.baseline_cost is None else f", baseline {plan.baseline_cost:.0f}",
            )
    return {"sampled_at": sampled_at, "health": health, "statements": statements, "pruned": pruned}


@dataclass(frozen=True)
class PlanSeries:
    """Recorded plans of a table over a window (the Health page's chart and table).

    Attributes:
        rows: ``[{"sampled_at", "statement", "shape", "total_cost", "plan_rows",
            "walks_non_pending", "reasons"}, …]``, oldest first.
    """

    rows: list[dict[str, Any]] = field(default_factory=list)

    def shape_changes(self) -> list[dict[str, Any]]:
        """The rows where a statement's shape differs from its previous recorded one (the
        first of each statement included), oldest first."""
        last: dict[str, str] = {}
        changes = []
        for row in self.rows:
            if last.get(row["statement"]) != row["shape"]:
                changes.append(row)
                last[row["statement"]] = row["shape"]
        return changes


def plan_series(db: Database, *, window: float) -> PlanSeries:
    """Recorded plans of this table over the last ``window`` seconds (query
    ``claim_plans_series``)."""
    return PlanSeries(
        db.fetch_all("claim_plans_series", {"table_name": db.table_name, "window": window})
    )


RECORDED_PLANS_FRESH = 3
"""A recorded claim plan older than this many ``OUTBOX_MONITOR_CLAIM_PLAN_INTERVAL``s is not
taken for the plan now (the scheduler stopped recording)."""


def recorded_degradation(db: Database) -> str | None:
    """What the newest recorded plans say of the claim, without planning it again (query
    ``claim_plans_latest``: the plans of the last ``RECORDED_PLANS_FRESH`` claim-plan
    intervals, judged as ``claim_health`` judges them: it walks non-pending rows, or its cost
    jumped over the costs recorded before it, ``claim_verdicts.cost_jumped``).

    Returns:
        ``"outbox_monitor.claim() walks non-pending rows, recorded 02:31 UTC"``,
        ``"users' claim (SPEC §1 SQL) cost jumped 12×, recorded …"`` — the first degraded
        statement in ``STATEMENTS``' order — or ``None`` when none is degraded or recorded.

    Raises:
        The connector's errors; ``SchemaNotInitialised`` without migration 011.
    """
    rows = db.fetch_all(
        "claim_plans_latest",
        {
            "table_name": db.table_name,
            "statements": list(STATEMENTS),
            "limit": COST_BASELINE_SAMPLES,
            "within": RECORDED_PLANS_FRESH * db.settings.claim_plan_interval,
        },
    )
    for row in sorted(rows, key=lambda r: list(STATEMENTS).index(r["statement"])):
        recorded = row["sampled_at"].astimezone(UTC).strftime("recorded %H:%M UTC")
        baseline, jumped = cost_jumped(row["total_cost"], row["earlier_costs"])
        if row["walks_non_pending"]:
            return f"{STATEMENTS[row['statement']]} walks non-pending rows, {recorded}"
        if jumped and baseline:
            times = row["total_cost"] / baseline
            return f"{STATEMENTS[row['statement']]} cost jumped {times:.0f}×, {recorded}"
    return None
