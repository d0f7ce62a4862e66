"""Events: search the outbox (by key, aggregate or payload), page through it by keyset, open
one event and its aggregate.

Payloads and errors are shown redacted (docs/security.md); an operator may reveal one
event's raw payload, and each reveal is audited.
"""

import streamlit as st

from outbox_monitor.access import Role
from outbox_monitor.browse.events import DEFAULT_MAX_PAYLOAD_BYTES, STATUSES
from outbox_monitor.errors import OutboxMonitorError
from outbox_monitor.ui import banners, format, inputs, loaders, payload_search, replay_flows, state

PAGE_SIZE = 50
ANY_STATUS = "any"
CURSOR = "events.cursor"
SIGNATURE = "events.signature"
REVEALED = "events.revealed"
REVEAL_ERROR = "events.reveal_error"
LIST_COLUMNS = [  # last error before the wide keys: in view, wrapped, at 1440 px
    format.Column("id", "id", 70),
    format.Column("event_type", "event type", 140),
    format.Column("status", "status", 85),
    format.Column("attempts", "attempts", 75),
    format.Column("last_error", "last error", 280),
    format.Column("event_key", "event key", 125),
    format.Column("created_at", "created at", 170, unit="instant"),
    format.Column("aggregate_type", "aggregate type"),
    format.Column("aggregate_id", "aggregate id"),
    format.Column("processed_at", "processed at", unit="instant"),
    format.Column("locked_by", "locked by"),
]
# the event detail's fields and its aggregate's timeline
FIELD_COLUMNS = [format.Column("field", "field", 200), format.Column("value", "value", 600)]
TIMELINE_COLUMNS = [
    format.Column("", "this", 45, help="The event shown above."),
    format.Column("id", "id", 80),
    format.Column("created_at", "created at", 170, unit="instant"),
    format.Column("event_type", "event type", 150),
    format.Column("status", "status", 85),
    format.Column("attempts", "attempts", 75),
    format.Column("last_error", "last error", 280),
    format.Column("processed_at", "processed at", unit="instant"),
]

ctx = state.context()
f = ctx.filters

search = st.columns(3)
event_key = search[0].text_input("Event key", key="event_key", bind="query-params")
aggregate_type = search[1].text_input("Aggregate type", key="aggregate_type", bind="query-params")
aggregate_id = search[2].text_input("Aggregate id", key="aggregate_id", bind="query-params")
search = st.columns(3)
status = search[0].selectbox("Status", [ANY_STATUS, *STATUSES], key="status", bind="query-params")
since_text = search[1].text_input(
    "Created since",
    key="since",
    bind="query-params",
    placeholder="2h, 30m or 2026-11-29T10:00:00Z",
)
until_text = search[2].text_input(
    "Created until", key="until", bind="query-params", placeholder="empty = now"
)
st.caption(
    f"Event type: {format.md_code(f.event_type) if f.event_type else 'all'} (sidebar filter)."
)

now = loaders.database_now(ctx.db) if (since_text or until_text) else None
try:
    since = inputs.parse_time(since_text, now)
    until = inputs.parse_time(until_text, now)
except ValueError as error:
    # no list for a range that cannot be read; the event detail below still works
    st.error(f"Time range: {format.md_text(error)}", icon=":material/error:")
    since = until = None
    searchable = False
else:
    searchable = True
texts = {}
for name, label, text in (
    ("event_key", "Event key", event_key),
    ("aggregate_type", "Aggregate type", aggregate_type),
    ("aggregate_id", "Aggregate id", aggregate_id),
):
    try:
        texts[name] = inputs.parse_text(text, what=f"the {label.lower()}")
    except ValueError as error:  # no list for a filter Postgres cannot hold
        st.error(f"{label}: {format.md_text(error)}", icon=":material/error:")
        searchable = False


def show_older(last_id: int) -> None:
    st.session_state[CURSOR] = [*st.session_state[CURSOR], last_id]


def show_newest() -> None:
    st.session_state[CURSOR] = []


page_rows: list[dict] = []
selection = None
if searchable:
    filters = {
        **texts,
        "event_type": f.event_type,
        "status": None if status in (None, ANY_STATUS) else status,
        "since": since,
        "until": until,
    }
    # the typed text, not the parsed times: "2h" must not reset the pages at every rerun
    signature = (
        ctx.settings.fleet_outbox,  # another outbox of the fleet: its own newest page
        *sorted((k, str(v)) for k, v in filters.items() if k not in ("since", "until")),
        since_text,
        until_text,
    )
    if st.session_state.get(SIGNATURE) != signature:
        st.session_state[SIGNATURE] = signature
        st.session_state[CURSOR] = []
    cursor: list[int] = st.session_state[CURSOR]

    # one row more than shown tells whether an older page exists
    fetched = loaders.redacted_events_page(
        ctx.db, **filters, before_id=cursor[-1] if cursor else None, limit=PAGE_SIZE + 1
    )
    page_rows, has_older = fetched[:PAGE_SIZE], len(fetched) > PAGE_SIZE

    position = f"page {len(cursor) + 1}" + (" (newest)" if not cursor else "")
    matching = loaders.matching_events(ctx.db, **filters)
    shown = format.rows_shown(
        len(cursor) * PAGE_SIZE, len(page_rows), matching, loaders.count_cap(), "event"
    )
    st.caption(f"{shown}, newest id first · {position}")
    selection = format.grid(page_rows, LIST_COLUMNS, key="events.table", detail=False)
    buttons = st.columns([1, 1, 2, 4])
    buttons[0].button(
        "Newest", key="events.newest", on_click=show_newest, disabled=not cursor, width="stretch"
    )
    buttons[1].button(
        "Older",
        key="events.older",
        on_click=show_older,
        args=(page_rows[-1]["id"] if page_rows else 0,),
        disabled=not has_older,
        width="stretch",
    )
    page_filters = {**filters, "before_id": cursor[-1] if cursor else None, "limit": PAGE_SIZE}
    buttons[2].download_button(
        "Download CSV",
        data=lambda: loaders.events_csv(ctx.db, **page_filters),
        file_name="events.csv",
        mime="text/csv",
        key="events.csv",
        disabled=not page_rows,
        icon=":material/download:",
        help="The events of this page with their payloads, redacted.",
        width="stretch",
    )

st.divider()
found_id = payload_search.section(ctx, LIST_COLUMNS)

st.divider()
st.subheader("Event detail")
typed_id = st.text_input(
    "Event id",
    key="id",
    bind="query-params",
    help="Select a row above, or type an id (…/events?id=123 links here).",
)
selected_rows = [i for i in (selection.selection.rows if selection else []) if i < len(page_rows)]
try:
    if selected_rows:
        detail_id = page_rows[selected_rows[0]]["id"]
    else:
        detail_id = found_id if found_id is not None else inputs.parse_id(typed_id)
except ValueError as error:
    st.error(format.md_text(error), icon=":material/error:")
    st.stop()
if detail_id is None:
    st.caption("Select an event to see its payload, error, timestamps and aggregate timeline.")
    st.stop()

detail = loaders.redacted_event(ctx.db, detail_id)
if detail is None:
    st.warning(f"No event with id {detail_id}.", icon=":material/search_off:")
    st.stop()

st.markdown(
    f"**{detail['id']}** · {format.md_code(detail['event_type'])} · status "
    f"**{format.md_text(detail['status'])}** · attempts **{detail['attempts']}**"
)
fields = {
    "event key": detail["event_key"],
    "aggregate": f"{detail['aggregate_type']} {detail['aggregate_id']}",
    "created at": format.instant(detail["created_at"]),
    "available at": format.instant(detail["available_at"]),
    "locked at": format.instant(detail["locked_at"]),
    "locked by": detail["locked_by"] or format.NO_VALUE,
    "processed at": format.instant(detail["processed_at"]),
    "payload size": format.size(detail["payload_bytes"]),
}
format.grid(
    [{"field": k, "value": v} for k, v in fields.items()], FIELD_COLUMNS, key="events.fields"
)
replay_flows.replay_event(db=ctx.db, actions_db=ctx.actions_db, identity=ctx.identity, event=detail)


def hide_raw() -> None:
    st.session_state.pop(REVEALED, None)


def reveal(event_id: int) -> None:
    """Read the raw payload (audited) before the run that shows it."""
    try:
        found = loaders.reveal_payload(ctx.actions_db, event_id, ctx.identity)
    except OutboxMonitorError as error:
        st.session_state[REVEAL_ERROR] = error
    else:
        if found is not None:
            st.session_state[REVEALED] = (ctx.settings.fleet_outbox, found)


outbox_revealed, revealed = st.session_state.get(REVEALED, (None, None))
# a reveal shows one event only, of the outbox it was made on
if revealed is not None and (revealed.id, outbox_revealed) != (
    detail_id,
    ctx.settings.fleet_outbox,
):
    hide_raw()
    revealed = None
refused = st.session_state.pop(REVEAL_ERROR, None)
if refused is not None:
    banners.show(refused, stop=False)
if loaders.redactor(ctx.db).enabled:
    if revealed is not None:
        st.button("Hide raw payload", key="events.hide", on_click=hide_raw)
        st.caption(
            f"Raw payload and last_error, revealed to {format.md_code(revealed.actor)} "
            f"(audit row {revealed.audit_id})."
        )
    elif ctx.identity.can(Role.operator):
        st.button(
            "Reveal raw payload",
            key="events.reveal",
            on_click=reveal,
            args=(detail_id,),
            icon=":material/visibility:",
            help="Shows this event's payload and last_error unredacted; the audit log "
            "records each reveal with your name.",
        )
    else:
        st.caption("Payload and last_error are redacted; an operator can reveal them.")

last_error = revealed.last_error if revealed is not None else detail["last_error"]
if last_error:
    st.markdown("**last_error**")
    st.code(last_error, language=None, wrap_lines=True)

st.markdown("**payload**")
if revealed is not None:
    pretty = revealed.payload_pretty
    head = None if pretty is not None else revealed.payload[:DEFAULT_MAX_PAYLOAD_BYTES]
    payload_bytes = revealed.payload_bytes
else:
    pretty, head, payload_bytes = (
        detail["payload_pretty"],
        detail["payload_head"],
        detail["payload_bytes"],
    )
if pretty is None:
    st.warning(
        f"The payload is {format.size(payload_bytes)}, past the 256 KiB shown "
        "here: below are its first 262,144 characters, unformatted. Download it whole.",
        icon=":material/content_cut:",
    )
    st.code(head, language="json", wrap_lines=True)
    raw = revealed.payload if revealed is not None else None
    st.download_button(
        f"Download full payload ({format.size(payload_bytes)}"
        + (", raw)" if raw is not None else ", redacted)"),
        data=raw if raw is not None else lambda: loaders.redacted_payload(ctx.db, detail_id) or "",
        file_name=f"event-{detail_id}-payload.json",
        mime="application/json",
        key="events.download",
    )
else:
    st.code(pretty, language="json")

st.subheader(
    f"Timeline of {format.md_text(detail['aggregate_type'])} "
    f"{format.md_text(detail['aggregate_id'])}"
)
timeline = loaders.redacted_timeline(ctx.db, detail["aggregate_type"], detail["aggregate_id"])
format.grid(
    [{"": "▶" if row["id"] == detail_id else "", **row} for row in timeline],
    TIMELINE_COLUMNS,
    key="events.aggregate_timeline",
)
