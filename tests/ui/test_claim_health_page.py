"""Health page, "Claim health" section (issue 14 item 2): the harmful ``(created_at)`` index on
an outbox with a done history and a backlog shows the plan warning; dropping it clears it;
recorded plans are charted; pg_stat_statements' absence is said plainly."""

import pytest
import streamlit as st
from rendered import plain

from outbox_monitor.config.settings import load_settings
from outbox_monitor.health.claim_plan import record_claim_plans
from outbox_monitor.health.statements import NOT_INSTALLED
from outbox_monitor.store.db import Database
from tests.claim_health import HARMFUL_INDEX, create_harmful_index, drop_harmful_index

PAGE = "health"


@pytest.fixture
def dsn(history_dsn: str) -> str:
    """This module's pages read the outbox with a done history and a backlog."""
    return history_dsn


def texts(at) -> str:
    kinds = ("markdown", "caption", "success", "info", "warning", "error")
    return "\n".join(plain(e.value) for kind in kinds for e in getattr(at, kind))


def successes(at) -> str:
    return "\n".join(plain(s.value) for s in at.success)


def test_the_plan_warning_appears_with_the_harmful_index_and_clears_without(open_page, dsn):
    at = open_page(PAGE)
    assert not at.exception
    # the table's health first (issue 14 item 1), then the claim's
    assert [s.value for s in at.subheader] == [
        "xmin horizon",
        "Dead tuples and vacuum",
        "Size",
        "Claim health",
    ]
    assert not at.error
    assert "The claim reads pending rows only" in successes(at)
    assert NOT_INSTALLED in texts(at)
    assert "No plan recorded in this window" in texts(at)

    create_harmful_index(dsn)
    with Database(load_settings(dsn=dsn)) as db:
        record_claim_plans(db)
    st.cache_data.clear()
    at = open_page(PAGE)
    assert not at.exception
    errors = [plain(e.value) for e in at.error]
    assert len(errors) == 2  # the users' claim and outbox_monitor.claim()
    assert "The claim's plan walks rows that are not pending" in errors[0]
    assert f"Limit > Index Scan ({HARMFUL_INDEX})" in errors[0]
    assert "leading column created_at" in errors[0]
    assert "DROP INDEX CONCURRENTLY" in "\n".join(plain(i.value) for i in at.info)
    (plans,) = [d.value for d in at.dataframe if "verdict" in d.value.columns]
    assert list(plans["verdict"]) == ["degraded", "degraded"]
    assert at.get("vega_lite_chart"), "the recorded cost is charted"

    drop_harmful_index(dsn)
    st.cache_data.clear()
    at = open_page(PAGE)
    assert not at.error
    assert "The claim reads pending rows only" in successes(at)
    (plans,) = [d.value for d in at.dataframe if "verdict" in d.value.columns]
    assert list(plans["verdict"]) == ["ok", "ok"]
    (changes,) = [d.value for d in at.dataframe if "recorded at" in d.value.columns]
    assert len(changes) == 2  # what was recorded while it walked the history
