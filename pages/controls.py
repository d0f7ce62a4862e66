"""Controls: pause, limit or break the flow of an event type (SPEC §5) — what holds rows
now, every change previewed, role-checked and audited. Linked pre-filled from alerts:
``/controls?event_type=crm.%25&action=pause``."""

import streamlit as st

from outbox_monitor.ui import control_flow, controls, format, state

DEFAULT_RATIO = 0.9
DEFAULT_MIN_ATTEMPTS = 20

ctx = state.context()
found = controls.view(ctx.db)
refusal = controls.refusal(ctx.identity)
linked = controls.prefill_from_link()

st.markdown(controls.held_summary(found))
controls.held_rows_read_note(found)
if refusal:
    st.warning(refusal, icon=":material/lock:")
if linked:
    st.info(
        f"Pre-filled from the link: pause {format.md_code(linked)}. Preview, then confirm.",
        icon=":material/link:",
    )
controls.about(ctx.identity.name)

st.subheader("Event types")
scope = ctx.filters.event_type
st.caption(
    "With pending or processing rows now"
    + (f", matching {format.md_code(scope)} (sidebar filter)" if scope else "")
)
event_rows = controls.event_type_rows(found, scope)
if event_rows:
    format.grid(event_rows, controls.EVENT_TYPE_COLUMNS, key="controls.event_types")
else:
    st.caption("No pending or processing rows.")

st.subheader("Controls in force")
if found.controls:
    format.grid(controls.control_rows(found), controls.CONTROL_COLUMNS, key="controls.in_force")
    for control in found.controls:
        if control.layer == "file":
            st.caption(
                f"{format.md_code(control.event_type_filter)} is {controls.FILE_OWNED}: "
                "read-only here; an operator's change to it is an override that expires."
            )
else:
    st.caption("No controls: every due row is handed out.")

pause, limits, breaker = st.tabs(["Pause / resume", "Limits", "Circuit breaker"])
disabled = bool(refusal)
change_flow = control_flow.flows_for(ctx, found, refusal)

with pause:
    pattern = controls.filter_input(controls.PAUSE_FILTER_KEY, disabled=disabled)
    controls.current_settings(found, pattern)
    columns = st.columns(3)
    for_text = columns[0].text_input(
        "For", key="controls.pause.for", placeholder="30m (empty: until resumed)", disabled=disabled
    )
    until_text = columns[1].text_input(
        "Or until",
        key="controls.pause.until",
        placeholder="2026-11-29T10:00:00Z",
        disabled=disabled,
    )
    reason = columns[2].text_input(
        "Reason", key=controls.PAUSE_REASON_KEY, placeholder="CRM API down", disabled=disabled
    )
    silence = controls.silence_offer(pattern, disabled=disabled)
    try:
        request = control_flow.pause_request(
            pattern, for_text, until_text, reason, found.now, silence
        )
    except ValueError as error:
        st.error(format.md_text(error), icon=":material/error:")
        request = None
    change_flow("controls.pause", request=request, noun="pause")
    st.divider()
    change_flow("controls.resume", request=control_flow.resume_request(pattern), noun="resume")

with limits:
    pattern = controls.filter_input("controls.limit.filter", disabled=disabled)
    controls.current_settings(found, pattern)
    st.caption("An empty field removes that limit.")
    columns = st.columns(3)
    concurrency = columns[0].number_input(
        "At most N processing",
        min_value=1,
        value=None,
        step=1,
        key="controls.limit.concurrency",
        disabled=disabled,
    )
    rate = columns[1].number_input(
        "Rate (rows/s)", min_value=0.001, value=None, key="controls.limit.rate", disabled=disabled
    )
    burst = columns[2].number_input(
        "Burst (rows at once)",
        min_value=1,
        value=None,
        step=1,
        key="controls.limit.burst",
        disabled=disabled,
        help="Default: one second's worth of rows.",
    )
    override = controls.override_input("controls.limit.override", found, pattern, disabled=disabled)
    change_flow(
        "controls.limit",
        request=control_flow.limit_request(pattern, concurrency, rate, burst, override),
        noun="limits",
    )

with breaker:
    pattern = controls.filter_input("controls.breaker.filter", disabled=disabled)
    controls.current_settings(found, pattern)
    enabled = st.toggle(
        "Circuit breaker on", value=True, key="controls.breaker.on", disabled=disabled
    )
    columns = st.columns(4)
    window = columns[0].text_input(
        "Window", value="60s", key="controls.breaker.window", disabled=disabled
    )
    min_attempts = columns[1].number_input(
        "Min outcomes",
        min_value=1,
        value=DEFAULT_MIN_ATTEMPTS,
        step=1,
        key="controls.breaker.min_attempts",
        disabled=disabled,
    )
    ratio = columns[2].number_input(
        "Failure ratio",
        min_value=0.01,
        max_value=1.0,
        value=DEFAULT_RATIO,
        key="controls.breaker.ratio",
        disabled=disabled,
    )
    cooldown = columns[3].text_input(
        "Cool-down", value="30s", key="controls.breaker.cooldown", disabled=disabled
    )
    override = controls.override_input(
        "controls.breaker.override", found, pattern, disabled=disabled
    )
    try:
        request = control_flow.breaker_request(
            pattern, enabled, window, min_attempts, ratio, cooldown, override
        )
    except ValueError as error:
        st.error(format.md_text(error), icon=":material/error:")
        request = None
    change_flow("controls.breaker", request=request, noun="breaker")

st.subheader("Breaker transitions")
transitions = controls.transition_rows(found)
if transitions:
    format.grid(transitions, controls.TRANSITION_COLUMNS, key="controls.transitions")
else:
    st.caption("No breaker has opened yet.")
