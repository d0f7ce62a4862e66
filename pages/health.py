"""Health: who holds the xmin horizon and the command that ends each holder, the outbox
table's dead tuples and vacuums, its sizes and their growth, the claim's plan (issue 14) and
the index that would serve it (issue 32), refreshed live.

Each table-health section is a function of ``ui.health`` taking the one cached reading; a
further health concern adds its own section (from its own ``ui`` module, like
``ui.claim_health``) to ``live_health`` below."""

import streamlit as st

from outbox_monitor.ui import banners, claim_advice, claim_health, format, health, loaders, state

ctx = state.context()


@st.fragment(run_every=ctx.filters.refresh)
def live_health() -> None:
    with banners.guarded(wait_out_outage=True):
        f = state.filters()
        found = health.load(ctx.db)
        samples = loaders.samples(ctx.db, window=f.window)
        st.caption(
            f"Refreshes every {format.duration_label(f.refresh)} · "
            f"charts over the last {f.window_label} of samples",
            help="From PostgreSQL's statistics views and catalog: nothing here reads a row of "
            "the outbox.",
        )
        health.hidden_warnings(found)
        health.horizon_section(found)
        health.table_section(found, samples)
        health.size_section(found, samples)
        claim_health.section(ctx.db, window=f.window, window_label=f.window_label)
        claim_advice.section(ctx.db)


live_health()
