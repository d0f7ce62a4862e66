"""Dead letters: failed rows grouped by error fingerprint; replay rows or a whole group.

Errors (sample_error, fingerprint, last_error) are shown redacted (docs/security.md).
"""

import streamlit as st

from outbox_monitor.access import Role
from outbox_monitor.actions.replay import ReplaySelection
from outbox_monitor.ui import flows, format, inputs, loaders, replay_flows, state

GROUP_PARAM = "error_group"
GROUP_KEY = "dead_letters.group"
FLOW = "dead_letters.replay"
IDS_KEY = "dead_letters.ids"
IDS_GROUP_KEY = "dead_letters.ids_group"
GROUP_COLUMNS = [
    format.Column("group_id", "error group", 120),
    format.Column("event_type", "event type", 150),
    format.Column("failed", "failed", 70),
    format.Column("last_seen", "last failed", 170, unit="instant"),
    format.Column("fingerprint", "error (normalised)", 400),
    format.Column("first_seen", "first failed", unit="instant"),
    format.Column("sample_error", "sample error"),
]
ROW_COLUMNS = [  # last error before the instants: in view, wrapped, at 1440 px
    format.Column("id", "id", 80),
    format.Column("event_key", "event key", 150),
    format.Column("attempts", "attempts", 75),
    format.Column("last_error", "last error", 400),
    format.Column("processed_at", "failed at", 170, unit="instant"),
    format.Column("aggregate_type", "aggregate type"),
    format.Column("aggregate_id", "aggregate id"),
    format.Column("created_at", "created at", unit="instant"),
]

ctx = state.context()
f = ctx.filters
scope = f"event type {format.md_code(f.event_type)}" if f.event_type else "all event types"

try:
    wanted = inputs.parse_error_group(st.query_params.get(GROUP_PARAM))
except ValueError as error:
    st.warning(
        f"Ignored {format.md_code(GROUP_PARAM)} from the link: {format.md_text(error)}.",
        icon=":material/link_off:",
    )
    del st.query_params[GROUP_PARAM]
    wanted = None
# the group chosen in the picker (its state from the last run), else the one in the URL
chosen = st.session_state.get(GROUP_KEY, wanted)
loaded = loaders.dead_letters(ctx.db, event_type=f.event_type, error_group=chosen)
groups = loaded.groups
result = flows.last_result(FLOW)


def clear_event_type(group_id: str) -> None:
    st.session_state[state.EVENT_TYPE_PARAM] = ""
    st.session_state[GROUP_KEY] = group_id


def explain_missing_group(group_id: str) -> None:
    """Say why the group of the URL is not listed, keeping it in the URL when it is only
    hidden by the event-type filter (with a button that clears the filter)."""
    listed = loaders.group_event_type(ctx.db, group_id, event_type=f.event_type)
    anywhere = listed or loaders.group_event_type(ctx.db, group_id, event_type=None)
    if anywhere is None:
        st.info(
            f"Error group {format.md_code(group_id)} has no dead letters left ({scope}): "
            "replayed, pruned, or never there.",
            icon=":material/info:",
        )
        del st.query_params[GROUP_PARAM]
    elif listed is None:
        st.warning(
            f"Error group {format.md_code(group_id)} (event type "
            f"{format.md_code(anywhere)}) is outside the event-type filter "
            f"{format.md_code(f.event_type)}.",
            icon=":material/filter_alt:",
        )
        st.button(
            "Clear the event-type filter",
            key="dead_letters.clear_filter",
            on_click=clear_event_type,
            args=(group_id,),
        )
    else:
        st.info(
            f"Error group {format.md_code(group_id)} is not among the "
            f"{format.plural(len(groups), 'biggest group')} listed ({scope}); narrow the "
            "event-type filter to its event type "
            f"{format.md_code(listed)} to see it.",
            icon=":material/info:",
        )


if not groups:
    if result is not None:
        st.success(flows.describe_result(result), icon=":material/check_circle:")
    st.success(f"No dead letters ({scope}).", icon=":material/task_alt:")
    if wanted:
        explain_missing_group(wanted)
    st.stop()

listed = (
    f"; the {format.plural(len(groups), 'biggest group')} listed"
    if len(groups) < loaded.group_count
    else ""
)
st.caption(
    f"{format.plural(loaded.total, 'failed row')} in "
    f"{format.plural(loaded.group_count, 'error group')} ({scope}){listed}",
    help="Grouped by event type and normalised last error (ids, numbers and quoted values "
    "replaced; HTTP codes kept).",
)
format.grid(groups, GROUP_COLUMNS, key="dead_letters.groups")

by_id = {group["group_id"]: group for group in groups}
options = list(by_id)
group_id = st.selectbox(
    "Error group",
    options,
    index=options.index(wanted) if wanted in by_id else None,
    # no row count: the browser keeps showing the label it was picked with, so a count in it
    # would go stale as rows fail or are replayed (the table and the caption below say it)
    format_func=lambda g: f"{g} · {by_id[g]['event_type']} · {by_id[g]['fingerprint']}",
    placeholder="Choose a group to see its rows and replay them",
    key=GROUP_KEY,
)
if group_id:
    st.query_params[GROUP_PARAM] = group_id
elif wanted and wanted not in by_id:
    explain_missing_group(wanted)
elif GROUP_PARAM in st.query_params:
    del st.query_params[GROUP_PARAM]

if group_id is None:
    if result is not None:
        st.success(flows.describe_result(result), icon=":material/check_circle:")
    st.stop()

if group_id != loaded.error_group:  # chosen differently than the state said: load it
    loaded = loaders.dead_letters(ctx.db, event_type=f.event_type, error_group=group_id)
    group = loaded.group(group_id) or by_id[group_id]
else:
    group = by_id[group_id]
rows = loaded.rows
st.subheader(f"{format.md_text(group['event_type'])} · {format.md_text(group['fingerprint'])}")
st.caption(
    f"{format.rows(group['failed'])}, first failed {format.instant(group['first_seen'])}, "
    f"last {format.instant(group['last_seen'])}"
    + ("" if loaded.complete else f" · showing the newest {len(rows)}")
)
format.grid(rows, ROW_COLUMNS, key="dead_letters.rows")

if not ctx.identity.can(Role.operator):
    st.info(
        f"{format.md_code(ctx.identity.name)} is a viewer: replaying needs the operator role.",
        icon=":material/lock:",
    )
else:
    # another group, or the same group of another outbox of the fleet: nothing chosen
    if st.session_state.get(IDS_GROUP_KEY) != (ctx.settings.fleet_outbox, group_id):
        st.session_state[IDS_KEY] = []
        st.session_state[IDS_GROUP_KEY] = (ctx.settings.fleet_outbox, group_id)
    listed = [str(row["id"]) for row in rows]
    # rows chosen earlier stay choices when newer failures push them out of the list, so
    # that new failures never shrink the choice (nor drop its preview)
    pushed_out = sorted(set(st.session_state.get(IDS_KEY, [])) - set(listed), key=int, reverse=True)
    ids = st.multiselect(
        "Rows to replay",
        listed + pushed_out,
        key=IDS_KEY,
        placeholder="None chosen: replay the whole group",
    )
    selection = ReplaySelection(ids=tuple(int(i) for i in ids), error_group=group_id)
    st.caption(
        f"Replay puts {'the chosen rows' if ids else 'every row of this group'} back to "
        "pending with attempts reset; rows that are no longer failed are left alone."
    )
    flows.action_flow(
        FLOW,
        db=ctx.actions_db,
        actor=ctx.identity,
        signature=selection,
        make_preview=lambda: flows.preview_replay(ctx.db, selection),
        preview_label="Preview replay",
        noun="replay",
        sample_columns=replay_flows.SAMPLE_COLUMNS,
        details=replay_flows.preview_details,
        after_result=lambda result: replay_flows.show_outcome(ctx.db, result),
    )
