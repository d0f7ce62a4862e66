"""The claim advisor's judgement (issue 32 item 5), pure: what in the claim's plan an index
would serve, the index that serves it, whether the table has one already or init-db retired
it, and what it would cost the workers' writes (``health.claim_advice`` reads and measures).

The claim (SPEC §1, and ``outbox_monitor.claim``'s candidate selection) is
``WHERE status = 'pending' AND available_at <= now() ORDER BY created_at LIMIT n``. The users'
``(status, available_at, created_at)`` index bounds it to the due rows but in
``available_at`` order: with a backlog, Postgres reads every due row and sorts them all to
hand out ``n`` (200 k due rows: an external merge sort, benchmarks/RESULTS.md). The index
that serves it is derived from the statement: its ``ORDER BY`` column first (``created_at``:
the rows come in the claim's order, no sort), its range column second (``available_at``:
a row in backoff is skipped inside the index, its table row never read), its equality as
the predicate (``status = 'pending'``: done history, processing and dead letters are not in
it). The scan stops after ``n`` due rows.
"""

import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from outbox_monitor.health.claim_verdicts import (
    MIN_TABLE_ROWS,
    STATEMENTS,
    ClaimHealth,
    conjuncts,
    pending_partial,
)
from outbox_monitor.store.indexes import RETIRED_INDEXES

MIN_SORTED_ROWS = 10_000
"""A claim plan that sorts at least this many rows (the planner's estimate of the due rows)
is advised an index: below it the sort is a top-N heapsort in memory, cheap."""
ORDER_COLUMN = "created_at"
"""The claim's ``ORDER BY`` column (SPEC §1)."""
DUE_COLUMN = "available_at"
"""The claim's range column: ``available_at <= now()`` (SPEC §1)."""
PENDING_PREDICATE = "status = 'pending'"
"""The claim's equality, the proposed index's predicate, as written in the statement."""
WRITES = (
    ("publish", "pending"),
    ("claim", "processing"),
    ("ack", "done"),
    ("retry", "pending"),
    ("dead-letter", "failed"),
)
"""The workers' writes (SPEC §1) and the status each leaves its row in."""
MEASURED_EFFECT = (
    "Measured (benchmarks/claim.py --advised, 1 M rows, two runs, benchmarks/RESULTS.md): a "
    "50-row claim behind 200,000 due rows went from 161–239 ms to 2.3–3.5 ms, behind 50,000 "
    "from 69 to 2.2 ms. The trade-off: in a retry storm, where rows in backoff are older than "
    "the due ones, the claim walks their index entries — 1,000 due behind 200,000 in backoff "
    "took 2.0–2.6× as long (users' claim, 10–19 ms) and 2.3–4.1× (outbox_monitor.claim())."
)
"""What benchmarks/RESULTS.md measured of ``CLAIM_ORDER`` on the claim (time, not cost)."""
MEASURED_WRITE_COST = (
    "Measured for this index (benchmarks/claim.py --advised, 1 M rows, on a machine at load "
    "average 7–11): publish, ack and retry within the rounds' noise — round-by-round medians "
    "×0.72–1.31 of their time without it, no 95 % interval wholly above 1.05."
)
"""What benchmarks/RESULTS.md measured of ``CLAIM_ORDER``'s write cost."""
_SORTS = ("Sort",)
_WALKS = ("Index Scan", "Index Only Scan")


@dataclass(frozen=True)
class IndexShape:
    """One index of the outbox table (or of a partition) as the advisor compares it.

    Attributes:
        name: its name.
        relation: the table (or partition) it indexes.
        columns: its key columns in order (``None`` for an expression).
        predicate: its ``WHERE`` clause as Postgres prints it (``None``: not partial).
        method: its access method (``btree``, ``gin`` …).
        valid: false for an index an interrupted ``CREATE INDEX CONCURRENTLY`` left.
    """

    name: str
    relation: str
    columns: tuple[str | None, ...]
    predicate: str | None = None
    method: str = "btree"
    valid: bool = True

    @property
    def pending_only(self) -> bool:
        """Partial on ``status = 'pending'`` (the whole predicate or one AND-ed term)."""
        return pending_partial(self.predicate)

    @property
    def serves_claim(self) -> bool:
        """A valid btree that hands out due pending rows in the claim's order: after its
        leading ``status`` (the claim's equality) or on pending rows only, its next key
        column is ``ORDER_COLUMN`` and ``DUE_COLUMN`` is a later key column (a row in
        backoff is skipped inside the index), with no other partial condition. ``(created_at)
        WHERE status = 'pending'`` alone does not: it reads every row in backoff from the
        table."""
        if not (self.valid and self.method == "btree"):
            return False
        columns = list(self.columns)
        if columns[:1] == ["status"]:
            columns = columns[1:]
        elif not self.pending_only:
            return False
        if self.predicate is not None and len(conjuncts(self.predicate)) > 1:
            return False  # a further condition the claim does not state
        return columns[:1] == [ORDER_COLUMN] and DUE_COLUMN in columns[1:]


@dataclass(frozen=True)
class Candidate:
    """An index the advisor may propose: its key columns, whether it is partial on
    ``PENDING_PREDICATE``, and its name's purpose (``<table>_<purpose>_idx``)."""

    columns: tuple[str, ...]
    pending_only: bool
    purpose: str

    @property
    def definition(self) -> str:
        """``(created_at, available_at) WHERE status = 'pending'``."""
        where = f" WHERE {PENDING_PREDICATE}" if self.pending_only else ""
        return f"({', '.join(self.columns)}){where}"


CLAIM_ORDER = Candidate((ORDER_COLUMN, DUE_COLUMN), True, "claim_order")
"""The index that serves the claim (module docstring)."""
CANDIDATES: tuple[Candidate, ...] = (CLAIM_ORDER,)
"""What the advisor may propose, best first."""


@dataclass(frozen=True)
class Finding:
    """What in one claim statement's plan an index would serve.

    Attributes:
        statement: a ``STATEMENTS`` key.
        kind: ``"sorts_due_rows"``, ``"walks_non_pending"`` or ``"walks_not_due"``.
        text: the finding for people.
    """

    statement: str
    kind: str
    text: str

    def as_json(self) -> dict[str, str]:
        """``{"statement", "label", "kind", "text"}``."""
        return {
            "statement": self.statement,
            "label": STATEMENTS[self.statement],
            "kind": self.kind,
            "text": self.text,
        }


def _nodes(node: Mapping[str, Any]) -> Iterator[Mapping[str, Any]]:
    yield node
    for child in node.get("Plans", ()):
        yield from _nodes(child)


def _mentions(text: Any, column: str) -> bool:
    return re.search(rf"\b{re.escape(column)}\b", str(text or "")) is not None


def plan_findings(
    statement: str,
    root: Mapping[str, Any],
    *,
    table_rows: int,
    walks_non_pending: bool = False,
    reasons: Sequence[str] = (),
) -> list[Finding]:
    """What an index would serve in one claim plan (``EXPLAIN (FORMAT JSON)``'s root node).

    - ``sorts_due_rows``: a Sort by ``created_at`` of at least ``MIN_SORTED_ROWS`` rows by
      the planner's estimate (every due row, to hand out a batch);
    - ``walks_non_pending``: the claim-health verdict (``ClaimPlan.walks_non_pending``,
      ``reasons`` its sentences);
    - ``walks_not_due``: an index scan whose ``Filter`` tests ``available_at``: pending rows
      in backoff are read from the table and thrown away (on a table of at least
      ``MIN_TABLE_ROWS`` rows).

    Returns:
        The findings in that order, without repeats; empty for a plan the index would not
        improve.
    """
    found: list[Finding] = []
    for node in _nodes(root):
        kind = node.get("Node Type")
        rows = float(node.get("Plan Rows", 0))
        keys = " ".join(str(key) for key in node.get("Sort Key", ()))
        if kind in _SORTS and _mentions(keys, ORDER_COLUMN) and rows >= MIN_SORTED_ROWS:
            found.append(
                Finding(
                    statement,
                    "sorts_due_rows",
                    f"sorts every due row (≈ {rows:,.0f} by the planner's estimate) by "
                    f"{ORDER_COLUMN} to hand out one batch",
                )
            )
    if walks_non_pending:
        found.append(Finding(statement, "walks_non_pending", "; ".join(reasons)))
    if table_rows >= MIN_TABLE_ROWS:
        for node in _nodes(root):
            condition = node.get("Filter")
            if node.get("Node Type") in _WALKS and _mentions(condition, DUE_COLUMN):
                found.append(
                    Finding(
                        statement,
                        "walks_not_due",
                        f"reads pending rows that are not due from the table through "
                        f"{node.get('Index Name')} and filters them by {condition}",
                    )
                )
    return list(dict.fromkeys(found))


def claim_findings(explained: Mapping[str, Any], health: ClaimHealth) -> list[Finding]:
    """``plan_findings`` of both claim statements (``claim_plan.explain_claims``'s plans,
    judged as ``health``), in ``STATEMENTS``' order."""
    found: list[Finding] = []
    for plan in health.plans:
        found += plan_findings(
            plan.statement,
            explained["plans"][plan.statement],
            table_rows=health.table_rows,
            walks_non_pending=plan.walks_non_pending,
            reasons=plan.reasons,
        )
    return found


def retired_as(candidate: Candidate) -> str | None:
    """The ``RETIRED_INDEXES`` purpose whose key columns ``candidate`` has, whatever the
    predicates (a retired index's harm is in its keys: a walk in ``created_at`` order, a
    read of every pending row, a whole event type refused), else ``None``. init-db dropped
    that index: it is never proposed again."""
    for purpose, retired in RETIRED_INDEXES.items():
        if tuple(retired.columns) == candidate.columns:
            return purpose
    return None


def serving_indexes(indexes: Sequence[IndexShape]) -> list[IndexShape]:
    """The indexes that serve the claim already (``IndexShape.serves_claim``)."""
    return [index for index in indexes if index.serves_claim]


def choose(
    indexes: Sequence[IndexShape], candidates: Sequence[Candidate] = CANDIDATES
) -> tuple[Candidate | None, str]:
    """The candidate to propose, or why none is.

    Args:
        indexes: the table's indexes (``claim_advice.index_shapes``).
        candidates: best first (``CANDIDATES``).

    Returns:
        ``(candidate, "")``: the first candidate that init-db did not retire, when no index
        serves the claim already; else ``(None, why)``.
    """
    serving = serving_indexes(indexes)
    if serving:
        names = ", ".join(index.name for index in serving)
        return None, (
            f"{names} already serves the claim's order; if the plan still sorts, the "
            "planner's statistics expect few due rows among the pending ones: ANALYZE the table"
        )
    retired = []
    for candidate in candidates:
        purpose = retired_as(candidate)
        if purpose is None:
            return candidate, ""
        retired.append(f"{candidate.definition} (init-db retired it: {purpose})")
    return None, "no index to propose: " + "; ".join(retired)


def index_entries(candidate: Candidate) -> dict[str, int]:
    """Index entries each worker write adds to ``candidate`` (``WRITES``): one where the
    write leaves its row in the index (every write of an index over every row; of a
    pending-only index, publish and retry), none where the row leaves it — an estimate of
    the write cost that needs no measuring (a new row version is indexed only when it
    satisfies the predicate; the users' claim index already keys on ``status``, so none of
    these updates was a HOT update before)."""
    return {
        write: int(not candidate.pending_only or status == "pending") for write, status in WRITES
    }


def _listed(words: Sequence[str], last: str) -> str:
    return words[0] if len(words) == 1 else f"{', '.join(words[:-1])} {last} {words[-1]}"


def write_cost_text(candidate: Candidate, size_bytes: int | None) -> str:
    """The estimated write cost for people: the entries per write (``index_entries``), the
    index's size when HypoPG estimated it, and what benchmarks measured of its kind."""
    entries = index_entries(candidate)
    adds = [write for write, count in entries.items() if count]
    spares = [write for write, count in entries.items() if not count]
    text = "Estimate (HypoPG cannot measure writes): one more index entry per "
    text += _listed(adds, "and")
    if spares:
        text += f"; none per {_listed(spares, 'or')} (the row leaves the index's predicate)"
    if size_bytes is not None:
        text += f"; about {size_bytes / 1_048_576:,.1f} MB on disk (HypoPG's estimate)"
    return f"{text}. {MEASURED_WRITE_COST}" if candidate.pending_only else f"{text}."
