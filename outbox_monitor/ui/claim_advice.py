"""The Health page's "Claim advice" section (issue 32 item 5): when the workers' claim sorts
every due row or walks rows it cannot hand out, the index that serves it, its estimated
effect on the claim (HypoPG, when installed in the database) and its write cost — the
``CREATE INDEX CONCURRENTLY`` shown to copy, never run.

``section(db)`` renders it from one cached load of ``health.claim_advice.advise_claim``.
"""

from typing import Any

import streamlit as st

from outbox_monitor.health.claim_advice import ClaimAdvice, Proposal, advise_claim
from outbox_monitor.store.db import Database
from outbox_monitor.ui import format
from outbox_monitor.ui.cache import cached, db_key
from outbox_monitor.ui.format import Column

ESTIMATE_COLUMNS = [
    Column("statement", "statement", 220),
    Column("cost now", "estimated cost now", 140),
    Column("cost with", "with the index", 140),
    Column("plan with", "plan with the index", 420),
]
"""The estimate's table (``format.grid``)."""


@cached
def _advice(key: str, _db: Database) -> ClaimAdvice:
    return advise_claim(_db)


def advice(db: Database) -> ClaimAdvice:
    """The section's data (cached, ``cache.cached``)."""
    return _advice(db_key(db), db)


def estimate_rows(proposal: Proposal) -> list[dict[str, Any]]:
    """The estimate's table: each claim statement's cost now and with the hypothetical
    index, and its plan with it; empty without an estimate."""
    if proposal.estimate is None:
        return []
    return [
        {
            "statement": plan.label,
            "cost now": f"{plan.cost_before:,.2f}",
            "cost with": f"{plan.cost_after:,.2f}",
            "plan with": plan.shape_after
            if plan.uses_index
            else f"{plan.shape_after} (the planner would not use it)",
        }
        for plan in proposal.estimate.plans
    ]


def section(db: Database) -> None:
    """Render "Claim advice": what in the claim's plan an index would serve, the proposed
    index as the statement to run, its estimated effect and write cost — or that there is
    nothing to propose, and why."""
    found = advice(db)
    st.markdown("**Claim advice**")
    for name in found.retired_present:
        st.info(
            f"The index {format.md_code(name)} that init-db retired is still on the table: "
            "init-db drops it.",
            icon=":material/info:",
        )
    proposal = found.proposal
    if proposal is None:
        st.caption(f"Nothing to propose: {format.md_text(found.note)}.")
        return
    said = "; ".join(
        f"{format.md_text(finding.as_json()['label'])} {format.md_text(finding.text)}"
        for finding in found.findings
    )
    st.warning(
        f"An index would serve the workers' claim: {said}. Proposed: "
        f"{format.md_code(proposal.definition)}.",
        icon=":material/build:",
    )
    st.code("\n".join(proposal.statements), language="sql")
    st.caption(
        "Run it yourself, outside a transaction (CONCURRENTLY does not block the workers): "
        "outbox-monitor never builds an index, never installs an extension."
    )
    if proposal.estimate is None:
        st.caption(f"Effect on the claim: not estimated. {format.md_text(proposal.estimate_note)}")
    else:
        format.grid(estimate_rows(proposal), ESTIMATE_COLUMNS, key="health.claim_advice")
        st.caption(
            f"Estimated with HypoPG {format.md_text(proposal.estimate.hypopg_version)}'s "
            "hypothetical index (planner cost units, not time; nothing built)."
        )
    st.caption(format.md_text(proposal.measured))
    st.caption(f"Write cost — {format.md_text(proposal.write_cost)}")
