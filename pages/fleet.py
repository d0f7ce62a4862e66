"""Fleet: one row per outbox of the fleet file that the person has a role on — status,
headline figures, firing alerts, whether its database answered — each linking into that
outbox's Overview; refreshed live. Layout only: ``ui.fleet`` reads (every outbox at once,
each under short timeouts) and renders."""

import streamlit as st

from outbox_monitor.ui import fleet, format, state

ctx = state.context()


@st.fragment(run_every=ctx.filters.refresh)
def live_fleet() -> None:
    f = state.filters()
    outboxes = fleet.visible(state.fleet(), ctx.identity)
    found = fleet.rows(outboxes, window=f.window)
    down = sum(1 for row in found if not row.reachable)
    st.caption(
        f"{format.plural(len(found), 'outbox', 'outboxes')} · window {f.window_label} · "
        f"refreshes every {format.duration_label(f.refresh)} · whatever the event-type filter"
        + (f" · {down} unreachable" if down else "")
    )
    st.markdown(fleet.table(found, f.window_label), unsafe_allow_html=True)


live_fleet()
