"""Health page, "Claim advice" (issue 32 item 5) in AppTest: on an outbox whose claim sorts
every due row (200,000 done rows, 20,000 due) the page proposes the index as the statement to
copy, without an estimate while HypoPG is not installed, with HypoPG's plans once the test has
installed it; once the index is built nothing is proposed."""

import psycopg
import pytest
import streamlit as st
from rendered import plain

from tests.claim_health import install_hypopg

PAGE = "health"
STATEMENT = (
    'CREATE INDEX CONCURRENTLY "integration_outbox_claim_order_idx" ON "public".'
    '"integration_outbox" ("created_at", "available_at") WHERE status = \'pending\';'
)


@pytest.fixture
def dsn(sorted_claim_dsn: str) -> str:
    """This module's pages read an outbox whose claim sorts every due row."""
    return sorted_claim_dsn


def texts(at) -> str:
    kinds = ("markdown", "caption", "success", "info", "warning", "error")
    return "\n".join(plain(e.value) for kind in kinds for e in getattr(at, kind))


def estimate_table(at) -> list[dict]:
    frames = [d.value for d in at.dataframe if d.key == "health.claim_advice"]
    return frames[0].to_dict("records") if frames else []


def test_the_page_proposes_the_index_then_estimates_it_then_says_nothing(open_page, dsn):
    at = open_page(PAGE)
    assert not at.exception
    [warning] = [plain(w.value) for w in at.warning if "An index would serve" in w.value]
    assert "users' claim (SPEC §1 SQL) sorts every due row (≈ " in warning
    assert "Proposed: (created_at, available_at) WHERE status = 'pending'." in warning
    assert [c.value for c in at.code] == [STATEMENT]
    shown = texts(at)
    assert "Effect on the claim: not estimated. HypoPG is not installed in this database" in shown
    assert "outbox-monitor never builds an index, never installs an extension" in shown
    assert (
        "Write cost — Estimate (HypoPG cannot measure writes): one more index entry per "
        "publish and retry"
    ) in shown
    assert "The trade-off: in a retry storm, where rows in backoff are older" in shown
    assert estimate_table(at) == []

    with psycopg.connect(dsn, autocommit=True) as conn:
        install_hypopg(conn)
        st.cache_data.clear()
        at = open_page(PAGE)
        assert not at.exception
        rows = estimate_table(at)
        assert [row["statement"] for row in rows] == [
            "users' claim (SPEC §1 SQL)",
            "outbox_monitor.claim()",
        ]
        for row in rows:
            now = float(row["cost now"].replace(",", ""))
            assert float(row["cost with"].replace(",", "")) < now / 10
            assert row["plan with"].startswith("Limit > Index Scan (<")
        assert "Estimated with HypoPG 1.3" in texts(at)

        conn.execute(STATEMENT)  # the person runs it
        conn.execute("ANALYZE integration_outbox")
    st.cache_data.clear()
    at = open_page(PAGE)
    assert not [w for w in at.warning if "An index would serve" in w.value]
    assert not at.code
    assert (
        "Nothing to propose: no claim sorts 10,000 or more due rows nor walks rows it cannot "
        "hand out: no index to propose." in texts(at)
    )
