"""Dead letters: failed rows grouped by error fingerprint; replay rows or a whole group."""

import streamlit as st

from outbox_monitor.actions import ReplaySelection
from outbox_monitor.ui import flows, format, loaders, state

GROUP_PARAM = "error_group"
FLOW = "dead_letters.replay"
GROUP_COLUMNS = [
    "group_id",
    "event_type",
    "failed",
    "first_seen",
    "last_seen",
    "fingerprint",
    "sample_error",
]
ROW_COLUMNS = [
    "id",
    "event_key",
    "aggregate_type",
    "aggregate_id",
    "attempts",
    "created_at",
    "processed_at",
    "last_error",
]
SAMPLE_COLUMNS = ["id", "event_type", "event_key", "attempts", "processed_at", "last_error"]

ctx = state.context()
f = ctx.filters
st.title("Dead letters")
scope = f"event type `{f.event_type}`" if f.event_type else "all event types"

groups = loaders.error_groups(ctx.db, event_type=f.event_type)
result = flows.last_result(FLOW)
if not groups:
    if result is not None:
        st.success(flows.describe_result(result), icon=":material/check_circle:")
    st.success(f"No dead letters ({scope}).", icon=":material/task_alt:")
    st.stop()

total = sum(group["failed"] for group in groups)
st.caption(
    f"{total:,} failed rows in {len(groups)} error groups ({scope}), grouped by event type "
    "and normalised last_error (ids, numbers and quoted values replaced; HTTP codes kept)."
)
st.dataframe(format.table(groups, GROUP_COLUMNS), hide_index=True, width="stretch")

by_id = {group["group_id"]: group for group in groups}
wanted = st.query_params.get(GROUP_PARAM)
options = list(by_id)
group_id = st.selectbox(
    "Error group",
    options,
    index=options.index(wanted) if wanted in by_id else None,
    format_func=lambda g: (
        f"{g} · {by_id[g]['event_type']} · {by_id[g]['failed']:,} rows · {by_id[g]['fingerprint']}"
    ),
    placeholder="Choose a group to see its rows and replay them",
    key="dead_letters.group",
)
if group_id:
    st.query_params[GROUP_PARAM] = group_id
elif GROUP_PARAM in st.query_params:
    if wanted and wanted not in by_id:
        st.info(
            f"Error group `{wanted}` has no dead letters left ({scope}).", icon=":material/info:"
        )
    del st.query_params[GROUP_PARAM]

if group_id is None:
    if result is not None:
        st.success(flows.describe_result(result), icon=":material/check_circle:")
    st.stop()

group = by_id[group_id]
rows = loaders.failed_rows(ctx.db, error_group=group_id, event_type=f.event_type)
st.subheader(f"{group['event_type']} · {group['fingerprint']}")
st.caption(
    f"{group['failed']:,} rows, first failed {format.instant(group['first_seen'])}, "
    f"last {format.instant(group['last_seen'])}"
    + (f" · showing the newest {len(rows)}" if len(rows) < group["failed"] else "")
)
st.dataframe(format.table(rows, ROW_COLUMNS), hide_index=True, width="stretch")

chosen = st.multiselect(
    "Rows to replay",
    [str(row["id"]) for row in rows],
    key="dead_letters.ids",
    placeholder="None chosen: replay the whole group",
)
selection = ReplaySelection(ids=tuple(int(i) for i in chosen), error_group=group_id)
st.caption(
    f"Replay puts {'the chosen rows' if chosen else 'every row of this group'} back to "
    "pending with attempts reset; rows that are no longer failed are left alone."
)
flows.action_flow(
    FLOW,
    db=ctx.db,
    actor=ctx.actor,
    signature=selection,
    make_preview=lambda: loaders.preview_replay(ctx.db, selection),
    preview_label="Preview replay",
    noun="replay",
    sample_columns=SAMPLE_COLUMNS,
)
