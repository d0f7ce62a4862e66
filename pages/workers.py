"""Workers: the fleet's liveness ("no claim for N min while rows are due") and each worker as
the outbox sees it (issue 15 item 7), refreshed live. Layout only: ``ui.workers`` reads and
renders."""

import streamlit as st

from outbox_monitor.ui import banners, format, state, workers

ctx = state.context()


@st.fragment(run_every=ctx.filters.refresh)
def live_workers() -> None:
    with banners.guarded(wait_out_outage=True):
        f = state.filters()
        found = workers.view(ctx.db)
        st.caption(
            f"Refreshes every {format.duration_label(f.refresh)} · whatever the event-type filter",
            help="From the outbox's due, processing and newest finished rows, and what the "
            "sampler saw in each worker's hand.",
        )
        workers.liveness_section(found)
        workers.workers_section(found)


live_workers()
