"""Timeline: what changed in the window — alert transitions, operator actions, error groups
first seen, breaker transitions — on one time axis; an alert's "Timeline" link opens it
around the alert's time (``?at=…``)."""

import streamlit as st

from outbox_monitor.alerts.links import TIMELINE_AT_PARAM
from outbox_monitor.ui import banners, state, timeline

ctx = state.context()


@st.fragment(run_every=None if st.query_params.get(TIMELINE_AT_PARAM) else ctx.filters.refresh)
def live_timeline() -> None:
    with banners.guarded(wait_out_outage=True):
        timeline.section(ctx)


live_timeline()
