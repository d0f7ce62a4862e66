"""Claim health against partial indexes whose predicate mentions ``status = 'pending'`` but
does not confine them to pending rows: the claim walking one walks the done history, and the
verdict says so (it used to take any predicate mentioning it for pending-only)."""

import psycopg
import pytest

from outbox_monitor.config.settings import load_settings
from outbox_monitor.health.claim_plan import claim_health
from outbox_monitor.store.db import Database


def _plans(dsn, *statements):
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("DROP INDEX integration_outbox_claim_idx")
        for statement in statements:
            conn.execute(statement)
        conn.execute("ANALYZE integration_outbox")
    with Database(load_settings(dsn=dsn)) as db:
        return claim_health(db)


@pytest.mark.parametrize(
    "index",
    [
        "CREATE INDEX odd_idx ON integration_outbox (created_at, status) "
        "WHERE status = 'pending' OR status = 'done'",
        "CREATE INDEX odd_idx ON integration_outbox (created_at) "
        "WHERE status = 'pending' OR status = 'done'",
        "CREATE INDEX odd_idx ON integration_outbox (created_at, status) "
        "WHERE NOT (status = 'pending') OR true",
    ],
)
def test_an_index_holding_done_rows_is_degraded(history_dsn, index):
    """The index holds every done row; with ``status`` as its second column the claim tests
    it in the index (an Index Cond, no Filter), so only the index's predicate can tell."""
    health = _plans(history_dsn, index)
    assert health.degraded == 1, health.as_json()
    for plan in health.plans:
        assert plan.shape == "Limit > Index Scan (odd_idx)", plan.shape
        assert plan.walks_non_pending
        assert any("walks index odd_idx" in reason for reason in plan.reasons), plan.reasons


@pytest.mark.parametrize(
    "predicate",
    ["status = 'pending' AND available_at IS NOT NULL", "(status = 'pending')"],
)
def test_a_pending_conjunct_keeps_the_index_pending_only(history_dsn, predicate):
    """``status = 'pending'`` as one of the predicate's AND-ed terms confines the index to
    pending rows: not degraded."""
    health = _plans(
        history_dsn,
        f"CREATE INDEX pending_due_idx ON integration_outbox (available_at, created_at) "
        f"WHERE {predicate}",
    )
    for plan in health.plans:
        assert "pending_due_idx" in plan.shape, plan.shape
        assert plan.reasons == () and not plan.walks_non_pending
    assert health.degraded == 0
