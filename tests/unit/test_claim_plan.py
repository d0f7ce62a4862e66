"""The claim plan's verdicts from EXPLAIN documents written by hand (issue 14 item 2)."""

import pytest

from outbox_monitor.config.settings import DEFAULT_CLAIM_PLAN_INTERVAL_SECONDS, load_settings
from outbox_monitor.errors import ConfigError
from outbox_monitor.health.claim_verdicts import (
    MIN_TABLE_ROWS,
    IndexInfo,
    cost_jumped,
    judge,
    non_pending_reasons,
    plan_shape,
)

CLAIM_IDX = IndexInfo("integration_outbox_claim_idx", "status", None)
CREATED_IDX = IndexInfo("integration_outbox_created_at_idx", "created_at", None)
PENDING_CREATED_IDX = IndexInfo("pending_created_idx", "created_at", "(status = 'pending'::text)")
INDEXES = {index.name: index for index in (CLAIM_IDX, CREATED_IDX, PENDING_CREATED_IDX)}
FILTER = "((status = 'pending'::text) AND (available_at <= now()))"


def limit_over(child: dict, cost: float = 100.0) -> dict:
    return {"Node Type": "Limit", "Total Cost": cost, "Plan Rows": 50, "Plans": [child]}


HEALTHY = limit_over(
    {
        "Node Type": "Sort",
        "Plans": [
            {
                "Node Type": "Bitmap Heap Scan",
                "Relation Name": "integration_outbox",
                "Recheck Cond": FILTER,
                "Plans": [{"Node Type": "Bitmap Index Scan", "Index Name": CLAIM_IDX.name}],
            }
        ],
    }
)
WALKS_CREATED_AT = limit_over(
    {
        "Node Type": "Index Scan",
        "Index Name": CREATED_IDX.name,
        "Relation Name": "integration_outbox",
        "Filter": FILTER,
    }
)


def test_shape_names_node_types_outermost_first_and_the_indexes():
    assert plan_shape(HEALTHY) == (
        "Limit > Sort > Bitmap Heap Scan > Bitmap Index Scan (integration_outbox_claim_idx)"
    )
    assert plan_shape(WALKS_CREATED_AT) == "Limit > Index Scan (integration_outbox_created_at_idx)"
    join = {
        "Node Type": "Nested Loop",
        "Plans": [
            {"Node Type": "Seq Scan", "Relation Name": "t"},
            {"Node Type": "Index Scan", "Index Name": "i"},
        ],
    }
    assert plan_shape(join) == "Nested Loop > [Seq Scan (t), Index Scan (i)]"


def test_an_index_led_by_status_reads_pending_rows_only():
    assert non_pending_reasons(HEALTHY, INDEXES) == []


def test_an_index_on_created_at_with_a_status_filter_walks_every_status():
    reasons = non_pending_reasons(WALKS_CREATED_AT, INDEXES)
    assert reasons == [
        "walks index integration_outbox_created_at_idx (leading column created_at), which "
        "holds rows of every status",
        f"Index Scan on integration_outbox_created_at_idx reads rows and filters them by {FILTER}",
    ]


def test_a_partial_index_of_pending_rows_is_fine_whatever_its_leading_column():
    plan = limit_over({"Node Type": "Index Scan", "Index Name": PENDING_CREATED_IDX.name})
    assert non_pending_reasons(plan, INDEXES) == []


@pytest.mark.parametrize(
    ("predicate", "pending_only"),
    [
        ("(status = 'pending'::text)", True),
        ("((status)::text = 'pending'::text)", True),  # a varchar column, as Postgres prints it
        ("((status = 'pending'::text) AND (attempts < 5))", True),
        ("(status = 'done'::text)", False),
        ("((old_status)::text = 'pending'::text)", False),
    ],
)
def test_a_partial_index_is_pending_only_by_its_printed_predicate(predicate, pending_only):
    assert IndexInfo("partial_idx", "created_at", predicate).pending_only is pending_only


def test_a_sequential_scan_reads_every_row():
    plan = limit_over(
        {
            "Node Type": "Sort",
            "Plans": [
                {"Node Type": "Seq Scan", "Relation Name": "integration_outbox", "Filter": FILTER}
            ],
        }
    )
    reasons = non_pending_reasons(plan, INDEXES)
    assert "Seq Scan reads every row of integration_outbox" in reasons
    assert any("filters them by" in reason for reason in reasons)


def test_cost_jump_is_ten_times_the_median_of_recent_costs_computed_by_hand():
    # median of 100, 120, 80, 110, 90 = 100: 1,000 jumped, 999 did not
    recent = [100.0, 120.0, 80.0, 110.0, 90.0]
    assert cost_jumped(1000.0, recent) == (100.0, True)
    assert cost_jumped(999.0, recent) == (100.0, False)
    # an even count: the mean of the two middle ones, (100 + 200) / 2 = 150
    assert cost_jumped(1500.0, [100.0, 100.0, 200.0, 300.0]) == (150.0, True)
    # fewer than 3 recorded costs: no baseline yet
    assert cost_jumped(1e9, [1.0, 1.0]) == (None, False)
    # below MIN_JUMPED_COST a 10x rise is no harm (a small table's plan)
    assert cost_jumped(60.0, [5.0, 5.0, 5.0]) == (5.0, False)
    # only the newest 12 count: 12 costs of 100 hide an older 1e6
    assert cost_jumped(1000.0, [100.0] * 12 + [1e6] * 20) == (100.0, True)


@pytest.mark.parametrize(
    ("table_rows", "walks"), [(MIN_TABLE_ROWS - 1, False), (MIN_TABLE_ROWS, True)]
)
def test_judge_calls_a_plan_degraded_only_on_a_table_big_enough(table_rows, walks):
    explained = {
        "plans": {"users_claim": WALKS_CREATED_AT, "shared_claim": HEALTHY},
        "flow_control": False,
        "indexes": INDEXES,
        "table_rows": table_rows,
    }
    health = judge(explained, {"shared_claim": [10.0, 10.0, 10.0]})
    users, shared = health.plans
    assert users.reasons and users.walks_non_pending is walks
    assert health.degraded == int(walks)
    # the shared claim's cost 100 is 10x its median 10, but under MIN_JUMPED_COST
    assert (shared.baseline_cost, shared.cost_jumped) == (10.0, False)
    assert health.cost == 100.0
    assert health.as_json()["plans"][0]["walks_non_pending"] is walks


def test_a_claim_plan_interval_that_cannot_be_read_names_its_variable(monkeypatch):
    monkeypatch.setenv("OUTBOX_MONITOR_CLAIM_PLAN_INTERVAL", "often")
    with pytest.raises(ConfigError, match="OUTBOX_MONITOR_CLAIM_PLAN_INTERVAL"):
        load_settings()
    monkeypatch.setenv("OUTBOX_MONITOR_CLAIM_PLAN_INTERVAL", "10m")
    assert load_settings().claim_plan_interval == 600
    monkeypatch.delenv("OUTBOX_MONITOR_CLAIM_PLAN_INTERVAL")
    assert load_settings().claim_plan_interval == DEFAULT_CLAIM_PLAN_INTERVAL_SECONDS == 300
