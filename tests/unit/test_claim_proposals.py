"""The claim advisor's judgement (issue 32 item 5), pure: what in a claim plan an index would
serve, which indexes serve the claim already, that a retired index is never proposed, and the
write cost of the proposal, on plans and indexes written by hand."""

import pytest

from outbox_monitor.health.claim_proposals import (
    CANDIDATES,
    CLAIM_ORDER,
    MIN_SORTED_ROWS,
    Candidate,
    IndexShape,
    choose,
    index_entries,
    plan_findings,
    retired_as,
    write_cost_text,
)
from outbox_monitor.health.claim_verdicts import MIN_TABLE_ROWS
from outbox_monitor.store.indexes import RETIRED_INDEXES


def sorted_claim(rows: float, kind: str = "Sort", key: str = "created_at") -> dict:
    """Limit > Sort > Bitmap Heap Scan > Bitmap Index Scan of the users' claim index, as
    EXPLAIN (FORMAT JSON) gives it with a backlog of ``rows`` due rows."""
    scan = {
        "Node Type": "Bitmap Heap Scan",
        "Relation Name": "integration_outbox",
        "Plan Rows": rows,
        "Plans": [
            {
                "Node Type": "Bitmap Index Scan",
                "Index Name": "integration_outbox_claim_idx",
                "Plan Rows": rows,
            }
        ],
    }
    sort = {"Node Type": kind, "Sort Key": [key], "Plan Rows": rows, "Plans": [scan]}
    return {"Node Type": "Limit", "Plan Rows": 50, "Plans": [sort]}


def walk(condition: str) -> dict:
    return {
        "Node Type": "Limit",
        "Plan Rows": 50,
        "Plans": [
            {
                "Node Type": "Index Scan",
                "Index Name": "pending_by_created_idx",
                "Relation Name": "integration_outbox",
                "Plan Rows": 900,
                "Filter": condition,
            }
        ],
    }


def test_a_sort_of_every_due_row_is_found_from_its_threshold_on():
    [found] = plan_findings("users_claim", sorted_claim(200_000), table_rows=1_000_000)
    assert found.kind == "sorts_due_rows"
    assert found.text == (
        "sorts every due row (≈ 200,000 by the planner's estimate) by created_at to hand out "
        "one batch"
    )
    assert plan_findings("users_claim", sorted_claim(MIN_SORTED_ROWS), table_rows=10**6)
    assert plan_findings("users_claim", sorted_claim(MIN_SORTED_ROWS - 1), table_rows=10**6) == []
    # an incremental sort reads the rows in order already; a sort by another key is not ours
    assert (
        plan_findings("shared_claim", sorted_claim(200_000, "Incremental Sort"), table_rows=1) == []
    )
    assert plan_findings("users_claim", sorted_claim(200_000, key="id"), table_rows=10**6) == []


def test_a_walk_of_rows_not_due_is_found_on_a_table_of_size():
    condition = "(available_at <= now())"
    [found] = plan_findings("users_claim", walk(condition), table_rows=MIN_TABLE_ROWS)
    assert found.kind == "walks_not_due"
    assert found.text == (
        "reads pending rows that are not due from the table through pending_by_created_idx "
        "and filters them by (available_at <= now())"
    )
    assert plan_findings("users_claim", walk(condition), table_rows=MIN_TABLE_ROWS - 1) == []
    assert plan_findings("users_claim", walk("(event_type = 'x'::text)"), table_rows=10**6) == []


def test_the_claim_health_verdict_is_carried_with_its_reasons():
    reasons = ("walks index t_created_at_idx (leading column created_at), which holds rows",)
    [found] = plan_findings(
        "users_claim", walk("x"), table_rows=10**6, walks_non_pending=True, reasons=reasons
    )
    assert (found.kind, found.text) == ("walks_non_pending", reasons[0])


@pytest.mark.parametrize(
    ("columns", "predicate", "serves"),
    [
        (("created_at", "available_at"), "(status = 'pending'::text)", True),
        (("created_at", "available_at"), "((status)::text = 'pending'::text)", True),  # varchar
        (("created_at", "id", "available_at"), "(status = 'pending'::text)", True),
        (("status", "created_at", "available_at"), None, True),
        (("created_at",), "(status = 'pending'::text)", False),  # reads the rows in backoff
        (("status", "created_at"), None, False),
        (("status", "available_at", "created_at"), None, False),  # the users' claim index
        (("created_at",), None, False),  # every row: the retired walk
        (("available_at", "created_at"), "(status = 'pending'::text)", False),
        (("created_at",), "((status = 'pending'::text) AND (event_type = 'x'::text))", False),
        (("created_at",), "((status = 'pending'::text) OR (status = 'done'::text))", False),
        ((None, "created_at"), "(status = 'pending'::text)", False),  # an expression first
    ],
)
def test_which_indexes_serve_the_claim(columns, predicate, serves):
    assert IndexShape("i", "integration_outbox", columns, predicate).serves_claim is serves


def test_an_invalid_or_non_btree_index_serves_nothing():
    pending = "(status = 'pending'::text)"
    columns = ("created_at", "available_at")
    assert not IndexShape("i", "t", columns, pending, valid=False).serves_claim
    assert not IndexShape("i", "t", columns, pending, method="brin").serves_claim


def test_an_index_that_serves_already_means_no_proposal_naming_it():
    mine = IndexShape(
        "my_claim_idx", "integration_outbox", ("status", "created_at", "available_at")
    )
    users = IndexShape("claim_idx", "integration_outbox", ("status", "available_at", "created_at"))
    candidate, why = choose([users, mine])
    assert candidate is None
    assert why.startswith("my_claim_idx already serves the claim's order")
    assert choose([users]) == (CLAIM_ORDER, "")


@pytest.mark.parametrize("purpose", list(RETIRED_INDEXES))
def test_a_retired_index_is_never_proposed(purpose):
    columns = tuple(RETIRED_INDEXES[purpose].columns)
    # finished (issue 32) has the keys of status_processed_at, retired before it: named first
    first = next(p for p, r in RETIRED_INDEXES.items() if tuple(r.columns) == columns)
    for pending_only in (False, True):
        retired = Candidate(columns, pending_only, "again")
        assert retired_as(retired) == first
        # listed first, it is passed over for the next candidate
        assert choose([], candidates=(retired, CLAIM_ORDER)) == (CLAIM_ORDER, "")
        candidate, why = choose([], candidates=(retired,))
        assert candidate is None
        assert why == f"no index to propose: {retired.definition} (init-db retired it: {first})"


def test_the_shipped_candidates_are_not_retired():
    assert CANDIDATES == (CLAIM_ORDER,)
    assert retired_as(CLAIM_ORDER) is None
    assert CLAIM_ORDER.definition == "(created_at, available_at) WHERE status = 'pending'"


def test_the_write_cost_is_an_entry_where_the_row_enters_the_predicate():
    assert index_entries(CLAIM_ORDER) == {
        "publish": 1,
        "claim": 0,
        "ack": 0,
        "retry": 1,
        "dead-letter": 0,
    }
    every_row = Candidate(("created_at", "available_at"), False, "x")
    assert set(index_entries(every_row).values()) == {1}
    text = write_cost_text(CLAIM_ORDER, 3 * 1_048_576)
    assert text.startswith(
        "Estimate (HypoPG cannot measure writes): one more index entry per publish and retry; "
        "none per claim, ack or dead-letter (the row leaves the index's predicate); about "
        "3.0 MB on disk (HypoPG's estimate). Measured for this index"
    )
    assert "MB" not in write_cost_text(CLAIM_ORDER, None)
