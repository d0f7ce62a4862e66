"""The incident timeline's range reads are index ranges (migration 015): with many error
groups and breaker transitions of the table, the range of instants is an index condition of
the read (not a filter over every row of the table), for the product's own tables only."""

import json
from datetime import timedelta
from typing import Any

import pytest
from psycopg import sql

from outbox_monitor.store.queries import compose

MANY = 20_000
"""Error groups and breaker transitions inserted, one a minute back from a fixed now (≈ 14
days)."""


def plan_nodes(plan: dict[str, Any]) -> list[dict[str, Any]]:
    """Every node of an EXPLAIN (FORMAT JSON) plan, the root first."""
    return [plan, *(node for child in plan.get("Plans", []) for node in plan_nodes(child))]


def explain(conn, name: str, params: dict[str, Any]) -> list[dict[str, Any]]:
    statement = sql.SQL("EXPLAIN (FORMAT JSON) ") + compose(name)
    found = conn.execute(statement, params).fetchone()["QUERY PLAN"]
    return plan_nodes((found if isinstance(found, list) else json.loads(found))[0]["Plan"])


@pytest.mark.parametrize(
    ("query", "relation", "instant"),
    [
        ("timeline_error_groups", "error_groups", "first_seen"),
        ("timeline_breaker_transitions", "breaker_transitions", "at"),
    ],
)
def test_a_timeline_range_is_an_index_range(db, conn, query, relation, instant):
    now = conn.execute("SELECT now() AS now").fetchone()["now"]
    conn.execute(
        """INSERT INTO outbox_monitor.error_groups (table_oid, event_type, fingerprint_md5,
               group_id, fingerprint, failed, first_seen, last_seen, sample_id, generation)
           SELECT 'integration_outbox'::regclass, 'type.' || g %% 50, md5(g::text)::uuid,
                  left(md5(g::text), 12), 'error <n>', 1, %(now)s - g * interval '1 minute',
                  %(now)s, g, 1
           FROM generate_series(1, %(many)s) AS g""",
        {"many": MANY, "now": now},
    )
    conn.execute(
        """INSERT INTO outbox_monitor.breaker_transitions (outbox, event_type_filter,
               transition, at, outcomes, failures, cooldown_seconds)
           SELECT 'integration_outbox'::regclass, 'order.%%',
                  CASE WHEN g %% 2 = 0 THEN 'opened' ELSE 'closed' END,
                  %(now)s - g * interval '1 minute', 20, 19, 30
           FROM generate_series(1, %(many)s) AS g""",
        {"many": MANY, "now": now},
    )
    conn.execute("ANALYZE outbox_monitor.error_groups, outbox_monitor.breaker_transitions")
    params = {
        "since": now - timedelta(hours=1),
        "until": now,
        "limit": 501,
        "table_regclass": db.table_name,
    }
    nodes = [n for n in explain(conn, query, params) if n.get("Relation Name") == relation]
    assert len(nodes) == 1, nodes
    (node,) = nodes
    assert node["Node Type"] in {"Index Scan", "Bitmap Index Scan", "Index Only Scan"}, node
    assert instant in node.get("Index Cond", ""), node
    found = conn.execute(compose(query), params).fetchall()
    assert len(found) == 60  # one a minute back from now: minutes 1 … 60 within the hour
