"""The claim plan's verdicts, from EXPLAIN documents and recorded costs (pure: no database): its
shape, why it walks non-pending rows, whether its cost jumped (``health.claim_plan``)."""

import re
import statistics
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

STATEMENTS = {
    "users_claim": "users' claim (SPEC §1 SQL)",
    "shared_claim": "outbox_monitor.claim()",
}
"""The statements whose plans are recorded, with their labels, in display order."""
COST_JUMP_FACTOR = 10.0
"""A cost at least this many times the baseline (the median of recent recorded costs) jumped."""
COST_BASELINE_SAMPLES = 12
"""How many of the newest recorded costs of a statement make its baseline."""
MIN_BASELINE_SAMPLES = 3
"""Fewer recorded costs than this: no baseline yet, so no jump."""
MIN_JUMPED_COST = 1000.0
"""A cost under this (planner units) never counts as jumped: small tables' plans are cheap
whatever their shape, and going from 5 to 60 is no harm."""
MIN_TABLE_ROWS = 10_000
"""A table with fewer rows than this (``pg_class.reltuples``, partitions summed) is read
whole cheaply: its plan is shown but never called degraded."""
_INDEX_SCANS = ("Index Scan", "Index Only Scan", "Bitmap Index Scan")
_PENDING_TERM = re.compile(r"\(?status\)?(?:::[\w ]+)? = 'pending'::[\w .\"]+")
"""A predicate's test of ``status = 'pending'`` as Postgres prints it for a ``text`` column
(``status = 'pending'::text``) or one it casts, such as ``varchar``
(``(status)::text = 'pending'::text``); the whole of one AND-ed term."""


def _top_level(text: str) -> tuple[list[str], bool]:
    """``text`` split at its `` AND ``s outside parentheses and quoted literals, and whether
    one pair of parentheses encloses all of it."""
    parts, start, depth, quoted, enclosed = [], 0, 0, False, text.startswith("(")
    position = 0
    while position < len(text):
        char = text[position]
        if char == "'":
            quoted = not quoted  # a doubled '' toggles twice
        elif not quoted and char in "()":
            depth += 1 if char == "(" else -1
            enclosed = enclosed and not (depth == 0 and position < len(text) - 1)
        elif not quoted and depth == 0 and text.startswith(" AND ", position):
            parts.append(text[start:position])
            start = position = position + len(" AND ")
            continue
        position += 1
    parts.append(text[start:])
    return parts, enclosed and len(parts) == 1


def conjuncts(predicate: str) -> list[str]:
    """The AND-ed terms of an index predicate as Postgres prints it (``((a) AND (b))`` → ``a``,
    ``b``), without their enclosing parentheses; a predicate joined by OR or negated is one
    term (so ``status = 'pending' OR …`` confines nothing)."""
    pending, terms = [predicate.strip()], []
    while pending:
        parts, enclosed = _top_level(pending.pop())
        if enclosed:
            pending.append(parts[0][1:-1].strip())
        elif len(parts) > 1:
            pending.extend(part.strip() for part in parts)
        else:
            terms.append(parts[0])
    return terms


def pending_partial(predicate: str | None) -> bool:
    """Whether an index predicate (as Postgres prints it) keeps pending rows only: it is
    ``status = 'pending'``, as a whole or as one of its AND-ed terms (``conjuncts``)."""
    return any(_PENDING_TERM.fullmatch(term) for term in conjuncts(predicate or ""))


@dataclass(frozen=True)
class IndexInfo:
    """One valid index of the outbox table (or of one of its partitions).

    Attributes:
        name: the index's name, as EXPLAIN's ``Index Name`` shows it.
        leading_column: its first key column (``None`` for an expression).
        predicate: its ``WHERE`` clause as Postgres prints it (``None``: not partial).
        relation: the name of the table (or partition) it indexes, as EXPLAIN's
            ``Relation Name`` shows it (``None`` when unknown).
    """

    name: str
    leading_column: str | None
    predicate: str | None
    relation: str | None = None

    @property
    def pending_only(self) -> bool:
        """Whether it holds pending rows only: led by ``status`` (the claim's condition
        bounds the walk to pending rows) or partial on ``status = 'pending'`` as a whole
        predicate or one of its AND-ed terms (not a predicate that merely mentions it:
        ``status = 'pending' OR status = 'done'`` holds the done history)."""
        return self.leading_column == "status" or pending_partial(self.predicate)


@dataclass(frozen=True)
class ClaimPlan:
    """The plan of one claim statement now, and its verdicts.

    Attributes:
        statement: ``"users_claim"`` or ``"shared_claim"`` (``STATEMENTS``).
        shape: the plan in short (``plan_shape``), e.g. ``"Limit > Index Scan
            (integration_outbox_created_at_idx)"``.
        total_cost: the root node's estimated total cost (planner units).
        plan_rows: the root node's estimated rows.
        reasons: why the plan reads rows of other statuses (``non_pending_reasons``);
            empty when it does not. Listed even on a small table.
        walks_non_pending: ``reasons`` on a table of at least ``MIN_TABLE_ROWS`` rows, from
            a node reading a relation (the table, or one partition) of at least that many.
        baseline_cost: the median of the newest recorded costs, ``None`` with fewer than
            ``MIN_BASELINE_SAMPLES`` of them.
        cost_jumped: ``total_cost`` jumped above the baseline (``cost_jumped``).
        flow_control: planned as migration 009's candidate selection (controls exist).
    """

    statement: str
    shape: str
    total_cost: float
    plan_rows: float
    reasons: tuple[str, ...] = ()
    walks_non_pending: bool = False
    baseline_cost: float | None = None
    cost_jumped: bool = False
    flow_control: bool = False

    @property
    def label(self) -> str:
        """The statement for people (``STATEMENTS``)."""
        label = STATEMENTS[self.statement]
        return f"{label}, with flow control" if self.flow_control else label

    @property
    def degraded(self) -> bool:
        """It walks non-pending rows or its cost jumped."""
        return self.walks_non_pending or self.cost_jumped

    def as_json(self) -> dict[str, Any]:
        """``{"statement", "label", "shape", "total_cost", "plan_rows", "walks_non_pending",
        "reasons" (list), "baseline_cost" (or ``None``), "cost_jumped", "degraded"}``."""
        return {
            "statement": self.statement,
            "label": self.label,
            "shape": self.shape,
            "total_cost": self.total_cost,
            "plan_rows": self.plan_rows,
            "walks_non_pending": self.walks_non_pending,
            "reasons": list(self.reasons),
            "baseline_cost": self.baseline_cost,
            "cost_jumped": self.cost_jumped,
            "degraded": self.degraded,
        }


@dataclass(frozen=True)
class ClaimHealth:
    """Both claim statements planned now (``claim_health``).

    Attributes:
        plans: one ``ClaimPlan`` per ``STATEMENTS`` key, in its order.
        table_rows: the planner's row count of the table (``reltuples``, partitions
            summed; before the first ANALYZE, the live rows the statistics count).
        table_analyzed: false while the table (or a partition) was never analyzed: then
            ``table_rows`` is the statistics' count, not the planner's.
    """

    plans: tuple[ClaimPlan, ...]
    table_rows: int = 0
    table_analyzed: bool = True

    @property
    def degraded(self) -> int:
        """1 when a plan walks non-pending rows or its cost jumped, else 0 (the figure
        ``claim_plan_degraded``)."""
        return int(any(plan.degraded for plan in self.plans))

    @property
    def cost(self) -> float:
        """The highest estimated total cost of the plans (the figure ``claim_plan_cost``)."""
        return max((plan.total_cost for plan in self.plans), default=0.0)

    def as_json(self) -> dict[str, Any]:
        """``{"degraded" (0/1), "cost", "table_rows", "table_analyzed", "plans":
        [ClaimPlan.as_json, …]}``."""
        return {
            "degraded": self.degraded,
            "cost": self.cost,
            "table_rows": self.table_rows,
            "table_analyzed": self.table_analyzed,
            "plans": [plan.as_json() for plan in self.plans],
        }


def _nodes(node: Mapping[str, Any]) -> Iterator[Mapping[str, Any]]:
    yield node
    for child in node.get("Plans", ()):
        yield from _nodes(child)


def _node_label(node: Mapping[str, Any]) -> str:
    kind = str(node.get("Node Type", "?"))
    if node.get("Index Name"):
        return f"{kind} ({node['Index Name']})"
    if kind == "Seq Scan" and node.get("Relation Name"):
        return f"{kind} ({node['Relation Name']})"
    return kind


def plan_shape(node: Mapping[str, Any]) -> str:
    """A plan in one line: node types outermost first, joined by ``" > "``; an index scan
    names its index, a sequential scan its table; several children are listed in brackets.

    Args:
        node: a plan node of ``EXPLAIN (FORMAT JSON)`` (``document[0]["Plan"]``).

    Returns:
        e.g. ``"Limit > Index Scan (integration_outbox_created_at_idx)"``, ``"Limit > Sort >
        Bitmap Heap Scan > Bitmap Index Scan (…_status_available_at_created_at_idx)"``.
    """
    children = node.get("Plans", ())
    label = _node_label(node)
    if not children:
        return label
    if len(children) == 1:
        return f"{label} > {plan_shape(children[0])}"
    return f"{label} > [{', '.join(plan_shape(child) for child in children)}]"


def non_pending_reasons(
    node: Mapping[str, Any],
    indexes: Mapping[str, IndexInfo],
    relation_rows: Mapping[str, int] | None = None,
) -> list[str]:
    """Why a claim plan reads rows of other statuses than ``pending``, one sentence each.

    - an Index Scan, Index Only Scan or Bitmap Index Scan of an index that is not
      ``IndexInfo.pending_only`` (an index not in ``indexes`` is not judged);
    - any node whose ``Filter`` mentions ``status``: rows are read, then thrown away;
    - a Seq Scan: every row is read.

    Args:
        node: the root plan node (``EXPLAIN (FORMAT JSON)``'s ``[0]["Plan"]``).
        indexes: the table's indexes by name (``table_indexes``).
        relation_rows: when given, the planner's row count of the table and of each of its
            partitions by name (``relation_rows``): a node reading a relation of fewer than
            ``MIN_TABLE_ROWS`` rows gives no reason (an empty future or default partition is
            read whole cheaply; its scan is no walk of the history).

    Returns:
        Sentences in plan order, without repeats; empty for a plan that reads pending rows
        only.
    """
    reasons: list[str] = []
    for each in _nodes(node):
        kind = each.get("Node Type")
        index = indexes.get(str(each.get("Index Name")))
        if relation_rows is not None:
            relation = each.get("Relation Name") or (index.relation if index else None)
            if relation in relation_rows and relation_rows[relation] < MIN_TABLE_ROWS:
                continue
        if kind in _INDEX_SCANS and index is not None and not index.pending_only:
            leading = index.leading_column or "an expression"
            reasons.append(
                f"walks index {index.name} (leading column {leading}), which holds rows of "
                f"every status"
            )
        condition = str(each.get("Filter") or "")
        if "status" in condition:
            where = each.get("Index Name") or each.get("Relation Name") or kind
            reasons.append(f"{kind} on {where} reads rows and filters them by {condition}")
        if kind == "Seq Scan":
            reasons.append(f"Seq Scan reads every row of {each.get('Relation Name', 'the table')}")
    return list(dict.fromkeys(reasons))


def cost_jumped(cost: float, recent: Sequence[float]) -> tuple[float | None, bool]:
    """The baseline of a statement's cost and whether ``cost`` jumped above it.

    Args:
        cost: the estimated total cost now.
        recent: the newest recorded costs of the same statement (up to
            ``COST_BASELINE_SAMPLES`` are used, newest first).

    Returns:
        ``(baseline, jumped)``: the median of ``recent`` (``None`` with fewer than
        ``MIN_BASELINE_SAMPLES``), and whether ``cost ≥ COST_JUMP_FACTOR × baseline`` and
        ``cost ≥ MIN_JUMPED_COST``.
    """
    window = list(recent)[:COST_BASELINE_SAMPLES]
    if len(window) < MIN_BASELINE_SAMPLES:
        return None, False
    baseline = float(statistics.median(window))
    return baseline, cost >= MIN_JUMPED_COST and cost >= COST_JUMP_FACTOR * baseline


def judge(explained: Mapping[str, Any], history: Mapping[str, Sequence[float]]) -> ClaimHealth:
    """The verdicts of plans (``explain_claims``) against recorded costs (``recent_costs``).

    Pure: no database. Returns a ``ClaimHealth`` with one ``ClaimPlan`` per statement.
    """
    table_rows = int(explained["table_rows"])
    plans = []
    for statement in STATEMENTS:
        root = explained["plans"][statement]
        reasons = tuple(non_pending_reasons(root, explained["indexes"]))
        relation_rows = explained.get("relation_rows")
        harmful = (
            reasons
            if relation_rows is None
            else non_pending_reasons(root, explained["indexes"], relation_rows)
        )
        cost = float(root["Total Cost"])
        baseline, jumped = cost_jumped(cost, history.get(statement, ()))
        plans.append(
            ClaimPlan(
                statement=statement,
                shape=plan_shape(root),
                total_cost=cost,
                plan_rows=float(root["Plan Rows"]),
                reasons=reasons,
                walks_non_pending=bool(harmful) and table_rows >= MIN_TABLE_ROWS,
                baseline_cost=baseline,
                cost_jumped=jumped,
                flow_control=statement == "shared_claim" and bool(explained["flow_control"]),
            )
        )
    return ClaimHealth(tuple(plans), table_rows, bool(explained.get("table_analyzed", True)))
