"""The claim advisor (issue 32 item 5): when the workers' claim sorts every due row or walks
rows it cannot hand out, the index that serves it, with its estimated effect on the claim
and its write cost, as the ``CREATE INDEX CONCURRENTLY`` to run — printed, never run.

It reads the claim's plans (``claim_plan.explain_claims``: EXPLAIN, never ANALYZE) and the
catalog, judges them with ``claim_proposals`` (pure), and, when HypoPG is installed in that
database already, measures the proposal: a hypothetical index (HypoPG keeps it in the
session's memory; nothing is built, nothing written) on a connection of its own, under the
statement timeout, and both claim statements planned again on it; the connection is closed
after, and the hypothetical index with it. Without HypoPG the proposal comes without an
estimate, saying why.

Never: ``CREATE EXTENSION``, an index built, a row of the outbox read or copied.
"""

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import psycopg
from psycopg import sql

from outbox_monitor.config.settings import DEFAULT_CLAIM_BATCH
from outbox_monitor.errors import OutboxMonitorError
from outbox_monitor.health.claim_plan import explain_claims, plan_claims
from outbox_monitor.health.claim_proposals import (
    MEASURED_EFFECT,
    MIN_SORTED_ROWS,
    PENDING_PREDICATE,
    Candidate,
    Finding,
    IndexShape,
    choose,
    claim_findings,
    index_entries,
    write_cost_text,
)
from outbox_monitor.health.claim_verdicts import STATEMENTS, judge, plan_shape
from outbox_monitor.store.db import Database
from outbox_monitor.store.indexes import index_name, retired_indexes_present
from outbox_monitor.store.partitioning import table_shape
from outbox_monitor.store.queries import compose

MAX_NAME_TRIES = 9
"""How many names (``<table>_claim_order_idx``, ``…_claim_order2_idx`` …) are tried before
giving up on a free one."""
NO_HYPOPG = (
    "HypoPG is not installed in this database, so the effect is not estimated. Its owner may "
    "install it (CREATE EXTENSION hypopg; Debian: postgresql-<version>-hypopg): the advisor "
    "then measures the proposal with a hypothetical index. It never installs it itself."
)

PARTITIONED = (
    "HypoPG does not estimate an index on a partitioned outbox: the planner does not use its "
    "hypothetical indexes on partitions when it plans the claim through the parent (measured "
    "with HypoPG 1.3.1), so the effect is not estimated."
)


@dataclass(frozen=True)
class EstimatedPlan:
    """One claim statement planned without and with the hypothetical index.

    Attributes:
        statement: a ``STATEMENTS`` key.
        cost_before, cost_after: the root's estimated total cost (planner units).
        shape_before, shape_after: ``claim_verdicts.plan_shape``.
        uses_index: the plan with it scans the hypothetical index.
    """

    statement: str
    cost_before: float
    cost_after: float
    shape_before: str
    shape_after: str
    uses_index: bool

    @property
    def label(self) -> str:
        """The statement for people (``STATEMENTS``)."""
        return STATEMENTS[self.statement]

    def as_json(self) -> dict[str, Any]:
        """``{"statement", "label", "cost_before", "cost_after", "shape_before",
        "shape_after", "uses_index"}``."""
        return {
            "statement": self.statement,
            "label": self.label,
            "cost_before": self.cost_before,
            "cost_after": self.cost_after,
            "shape_before": self.shape_before,
            "shape_after": self.shape_after,
            "uses_index": self.uses_index,
        }


@dataclass(frozen=True)
class Estimate:
    """HypoPG's measure of a proposal: both statements' plans, and the index's size."""

    plans: tuple[EstimatedPlan, ...]
    size_bytes: int
    hypopg_version: str

    def as_json(self) -> dict[str, Any]:
        """``{"plans": [EstimatedPlan.as_json …], "size_bytes", "hypopg_version"}``."""
        return {
            "plans": [plan.as_json() for plan in self.plans],
            "size_bytes": self.size_bytes,
            "hypopg_version": self.hypopg_version,
        }


@dataclass(frozen=True)
class Proposal:
    """The index to build, as statements to run by hand.

    Attributes:
        name: its name (``<table>_claim_order_idx``, a free one).
        definition: ``(created_at, available_at) WHERE status = 'pending'``.
        statements: ``CREATE INDEX CONCURRENTLY …;`` — on a partitioned outbox, ``ON
            ONLY`` each partitioned table, ``CONCURRENTLY`` each leaf and each attached.
        entries: index entries per worker write (``claim_proposals.index_entries``).
        write_cost: the write cost for people, labelled an estimate.
        estimate: HypoPG's measure, ``None`` without it.
        estimate_note: why there is no estimate (``""`` with one).
        measured: what benchmarks measured of it on the claim, its trade-off included
            (``claim_proposals.MEASURED_EFFECT``).
    """

    name: str
    definition: str
    statements: tuple[str, ...]
    entries: dict[str, int]
    write_cost: str
    estimate: Estimate | None = None
    estimate_note: str = ""
    measured: str = MEASURED_EFFECT

    def as_json(self) -> dict[str, Any]:
        """``{"name", "definition", "statements", "index_entries", "write_cost",
        "estimate" (Estimate.as_json or None), "estimate_note", "measured"}``."""
        return {
            "name": self.name,
            "definition": self.definition,
            "statements": list(self.statements),
            "index_entries": dict(self.entries),
            "write_cost": self.write_cost,
            "estimate": None if self.estimate is None else self.estimate.as_json(),
            "estimate_note": self.estimate_note,
            "measured": self.measured,
        }


@dataclass(frozen=True)
class ClaimAdvice:
    """What the advisor says of the outbox's claim (``advise_claim``).

    Attributes:
        findings: what in the claim's plans an index would serve (empty: nothing).
        proposal: the index to build, ``None`` when nothing is proposed.
        note: why nothing is proposed (``""`` with a proposal).
        retired_present: indexes init-db retired still on the table (init-db drops them).
    """

    findings: tuple[Finding, ...]
    proposal: Proposal | None
    note: str = ""
    retired_present: tuple[str, ...] = field(default_factory=tuple)

    def as_json(self) -> dict[str, Any]:
        """``{"advised" (bool), "findings": [Finding.as_json …], "proposal"
        (Proposal.as_json or None), "note", "retired_present"}``."""
        return {
            "advised": self.proposal is not None,
            "findings": [finding.as_json() for finding in self.findings],
            "proposal": None if self.proposal is None else self.proposal.as_json(),
            "note": self.note,
            "retired_present": list(self.retired_present),
        }


NOTHING_TO_PROPOSE = (
    f"no claim sorts {MIN_SORTED_ROWS:,} or more due rows nor walks rows it cannot hand out: "
    "no index to propose"
)
"""The note when no plan needs an index (a claim may still sort fewer due rows: cheap)."""


def index_shapes(db: Database) -> list[IndexShape]:
    """The indexes of the outbox table and of its partitions (query ``claim_advice_indexes``)."""
    return [
        IndexShape(
            name=row["index_name"],
            relation=row["relation"],
            columns=tuple(row["columns"]),
            predicate=row["predicate"],
            method=row["method"],
            valid=row["valid"],
        )
        for row in db.fetch_all("claim_advice_indexes", {"table_regclass": db.table_regclass})
    ]


def _columns(candidate: Candidate) -> sql.Composable:
    return sql.SQL(", ").join(sql.Identifier(column) for column in candidate.columns)


def _create(
    candidate: Candidate, name: str | None, table: sql.Identifier, *, leaf: bool
) -> sql.Composed:
    return compose(
        "claim_advice_create_index",
        concurrently=sql.SQL(" CONCURRENTLY" if leaf and name else ""),
        index=sql.SQL(" ") + sql.Identifier(name) if name else sql.SQL(""),
        only=sql.SQL("" if leaf else " ONLY"),
        table=table,
        columns=_columns(candidate),
        where=sql.SQL(f" WHERE {PENDING_PREDICATE}" if candidate.pending_only else ""),
    )


def _free_name(db: Database, schema: str, table: str, candidate: Candidate) -> tuple[str, str]:
    """The proposed index's name and its purpose: ``<table>_claim_order_idx``, else
    ``…_claim_order2_idx`` … — the first no relation of the schema has (``IF NOT EXISTS``
    would silently keep another index of that name); after ``MAX_NAME_TRIES`` the last tried
    (``CREATE INDEX`` then fails, naming it)."""
    for attempt in range(1, MAX_NAME_TRIES + 1):
        purpose = candidate.purpose if attempt == 1 else f"{candidate.purpose}{attempt}"
        name = index_name(table, purpose)
        taken = db.fetch_one(
            "claim_advice_name_taken", {"name": sql.Identifier(schema, name).as_string()}
        )
        if not taken["taken"]:
            break
    return name, purpose


def _partition_tree(db: Database) -> list[dict[str, Any]]:
    """The tables under a partitioned outbox (``partition_tree``, parents first); ``[]`` for
    an ordinary one."""
    shape = table_shape(db)
    if shape is None or not shape.partitioned:
        return []
    return db.fetch_all("partition_tree", {"table_regclass": db.table_regclass})


def build_statements(
    db: Database,
    candidate: Candidate,
    name: str,
    tree: Sequence[Mapping[str, Any]],
    *,
    purpose: str | None = None,
) -> tuple[str, ...]:
    """The statements that build ``candidate`` as ``name``: one ``CREATE INDEX CONCURRENTLY``
    on an ordinary table; on a partitioned one (``tree``: ``partition_tree``'s rows) ``ON
    ONLY`` the parent and each partitioned child, ``CONCURRENTLY`` on each leaf, each
    attached to its parent's (as init-db builds its indexes, ``store.partitioned_indexes``),
    a partition's index named ``<partition>_<purpose>_idx`` (``purpose``: the candidate's
    unless given). Names and tables through ``psycopg.sql.Identifier``."""
    schema, table = db.settings.table_parts
    if not tree:
        return (_create(candidate, name, db.table, leaf=True).as_string(),)
    statements = [_create(candidate, name, db.table, leaf=False).as_string()]
    index_of = {(schema, table): name}
    for part in tree:
        own = index_name(part["name"], purpose or candidate.purpose)
        index_of[(part["schema"], part["name"])] = own
        here = sql.Identifier(part["schema"], part["name"])
        statements.append(_create(candidate, own, here, leaf=part["leaf"]).as_string())
        parent = sql.Identifier(
            part["parent_schema"], index_of[(part["parent_schema"], part["parent_name"])]
        )
        attach = compose(
            "attach_index", parent_index=parent, child_index=sql.Identifier(part["schema"], own)
        )
        statements.append(attach.as_string())
    return tuple(statements)


def estimate(
    db: Database,
    candidate: Candidate,
    before: Mapping[str, Mapping[str, Any]],
    *,
    flow_control: bool,
    partitioned: bool = False,
    limit: int = DEFAULT_CLAIM_BATCH,
) -> tuple[Estimate | None, str]:
    """HypoPG's measure of ``candidate``: a hypothetical index on the outbox table and both
    claim statements planned again, on a connection of its own under the statement timeout,
    closed after (the hypothetical index ends with it).

    Args:
        before: the plans without it (``explain_claims``' ``plans``).
        flow_control: plan ``outbox_monitor.claim``'s statement as migration 009's.
        partitioned: the outbox is partitioned: not measured (``PARTITIONED``).

    Returns:
        ``(Estimate, "")``; ``(None, why)`` when HypoPG is not installed in the database, the
        outbox is partitioned, or the measure failed (its error named: a timeout, a missing
        privilege).
    """
    found = db.fetch_one("claim_advice_hypopg")
    if found is None:
        return None, NO_HYPOPG
    if partitioned:
        return None, PARTITIONED
    functions = {
        "create": sql.Identifier(found["schema"], "hypopg_create_index"),
        "size": sql.Identifier(found["schema"], "hypopg_relation_size"),
    }
    try:
        with db.direct_connection(statement_timeout=db.settings.statement_timeout) as conn:
            statement = _create(candidate, None, db.table, leaf=True).as_string(conn)
            row = conn.execute(
                compose("claim_advice_hypothetical_index", **functions), {"statement": statement}
            ).fetchone()

            def fetch_one(name: str, params: dict[str, Any]) -> Mapping[str, Any] | None:
                return conn.execute(db.compose(name), params).fetchone()

            after = plan_claims(fetch_one, limit=limit, flow_control=flow_control)
    except (OutboxMonitorError, psycopg.Error) as error:  # named in the advice
        reason = str(error).strip().splitlines()[0] if str(error).strip() else repr(error)
        return None, f"HypoPG's estimate failed ({type(error).__name__}: {reason})"
    plans = tuple(
        EstimatedPlan(
            statement=statement,
            cost_before=float(before[statement]["Total Cost"]),
            cost_after=float(after[statement]["Total Cost"]),
            shape_before=plan_shape(before[statement]),
            shape_after=plan_shape(after[statement]),
            uses_index=f"<{row['indexrelid']}>" in plan_shape(after[statement]),
        )
        for statement in STATEMENTS
    )
    return Estimate(plans, int(row["bytes"]), found["version"]), ""


def advise_claim(db: Database, *, limit: int = DEFAULT_CLAIM_BATCH) -> ClaimAdvice:
    """What the advisor says of the outbox's claim now.

    Plans both claim statements (``explain_claims``), finds what an index would serve
    (``claim_proposals.claim_findings``: a sort of every due row, a walk of non-pending rows
    or of rows not due), and, unless an index serves the claim already (then none is
    proposed, saying which), proposes the first ``claim_proposals.CANDIDATES`` init-db did
    not retire, under a name no relation of the schema has, measured with HypoPG when it
    is installed in that database.

    Args:
        db: the connector of the watched database (a hot standby plans as its primary).
        limit: the claim's batch (SPEC default 50).

    Returns:
        A ``ClaimAdvice``.

    Raises:
        QueryTimeout, PermissionDenied, DatabaseUnavailable and the connector's other
        errors of reading the plans and the catalog; never because of HypoPG (its failure
        is the proposal's ``estimate_note``).
    """
    explained = explain_claims(db, limit=limit)
    findings = tuple(claim_findings(explained, judge(explained, {})))
    retired = tuple(retired_indexes_present(db))
    if not findings:
        return ClaimAdvice((), None, NOTHING_TO_PROPOSE, retired)
    candidate, why = choose(index_shapes(db))
    if candidate is None:
        return ClaimAdvice(findings, None, why, retired)
    schema, table = db.settings.table_parts
    name, purpose = _free_name(db, schema, table, candidate)
    tree = _partition_tree(db)
    measured, note = estimate(
        db,
        candidate,
        explained["plans"],
        flow_control=explained["flow_control"],
        partitioned=bool(tree),
        limit=limit,
    )
    proposal = Proposal(
        name=name,
        definition=candidate.definition,
        statements=build_statements(db, candidate, name, tree, purpose=purpose),
        entries=index_entries(candidate),
        write_cost=write_cost_text(candidate, None if measured is None else measured.size_bytes),
        estimate=measured,
        estimate_note=note,
    )
    return ClaimAdvice(findings, proposal, "", retired)
