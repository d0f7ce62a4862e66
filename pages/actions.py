"""Actions: reap stuck locks, replay by filter, prune old rows — each previewed — and the
audit log of everything done."""

import streamlit as st

from outbox_monitor.actions.preview import Preview
from outbox_monitor.actions.replay import ReplaySelection
from outbox_monitor.ui import flows, format, inputs, loaders, replay_flows, state

DAY = 86400.0
DEFAULT_DONE_DAYS = 30
DEFAULT_FAILED_DAYS = 90
# Retention ages up to 100 years (longer ones overflow timestamps and mean "never"). A
# comment: Streamlit's magic would write a bare string onto the page.
MAX_DAYS = 36500

ctx = state.context()
f = ctx.filters
scope = f"event type {format.md_code(f.event_type)}" if f.event_type else "all event types"
st.caption(
    f"Acting on {scope} (the sidebar filter) as {format.md_code(ctx.identity.name)}",
    help="Every action shows a preview first and is audited; it applies to what the preview "
    "matched and only to rows that still qualify when it runs.",
)

reap, replay, prune, audit = st.tabs(["Reap stuck locks", "Replay by filter", "Prune", "Audit log"])

with reap:
    st.caption(
        "Processing rows locked longer than the lock timeout "
        f"({format.duration_label(ctx.settings.lock_timeout)}) or with no lock time",
        help="Their worker crashed or hung (a row with no lock time is an orphan). A reap puts "
        "them back to pending and counts one attempt; a row reaching the maximum "
        f"({ctx.settings.max_attempts}) is dead-lettered instead.",
    )
    flows.action_flow(
        "actions.reap",
        db=ctx.actions_db,
        actor=ctx.identity,
        signature=("reap", f.event_type),
        make_preview=lambda: flows.preview_reap(ctx.db, event_type=f.event_type),
        preview_label="Refresh stuck locks",
        noun="reap",
        sample_columns=flows.REAP_SAMPLE_COLUMNS,
        auto_preview=True,
    )
    st.markdown("**The automatic reaper's next run**")
    st.caption(
        f"The scheduler's reaper ({'on' if ctx.settings.auto_reap else 'off'}: "
        "`OUTBOX_MONITOR_AUTO_REAP`) takes at most "
        f"{format.plural(ctx.settings.auto_reap_max_rows, 'row')} and "
        f"{ctx.settings.auto_reap_max_share * 100:g} % of the stuck rows per run, the oldest "
        "locks first (every event type), and leaves the rest for its next run. What the "
        "sampler saw of each holder is shown as evidence, never a veto. Confirming here runs "
        "one such run by hand."
    )
    flows.action_flow(
        "actions.auto_reap",
        db=ctx.actions_db,
        actor=ctx.identity,
        signature=("auto_reap",),
        make_preview=lambda: flows.preview_auto_reap(ctx.db),
        preview_label="Preview the automatic reaper's next run",
        noun="budgeted reap",
        sample_columns=flows.REAP_SAMPLE_COLUMNS,
        details=flows.budget_lines,
    )

with replay:
    st.caption(
        f"Failed rows of {scope} back to pending, attempts reset",
        help="The sidebar filter chooses the event types (`%` means every event type); "
        "optionally one error group, and rows failed within a time range.",
    )
    columns = st.columns(3)
    error_group = columns[0].text_input(
        "Error group", key="actions.error_group", placeholder="12 hex digits (Dead letters)"
    )
    since_text = columns[1].text_input(
        "Failed since", key="actions.since", placeholder="24h or 2026-11-29T10:00:00Z"
    )
    until_text = columns[2].text_input(
        "Failed until", key="actions.until", placeholder="empty = now"
    )
    columns = st.columns(2)
    rate = columns[0].number_input(
        "Drip rate (rows/s, 0 = all due at once)",
        min_value=0.0,
        max_value=100_000.0,
        value=0.0,
        step=1.0,
        key="actions.rate",
        help="The rows fall due one after another, oldest first, at this rate (SPEC §5); "
        "a hard cap on the workers' rate needs a rate-limit control.",
    )
    exclude_superseded = columns[1].checkbox(
        "Exclude rows superseded by a later done event",
        key="actions.exclude_superseded",
        help="Leave out rows whose aggregate already has a later event with status done "
        "(order-safe replay): replaying them would apply an older state after a newer one.",
    )
    try:
        group = inputs.parse_error_group(error_group)
    except ValueError as error:
        st.error(f"Error group: {format.md_text(error)}", icon=":material/error:")
        group = None
        usable = False
    else:
        usable = True
    try:
        now = loaders.database_now(ctx.db)
        selection = ReplaySelection(
            event_type=f.event_type,
            error_group=group,
            since=inputs.parse_time(since_text, now),
            until=inputs.parse_time(until_text, now),
            exclude_superseded=exclude_superseded,
        )
    except ValueError as error:
        st.error(f"Time range: {format.md_text(error)}", icon=":material/error:")
    else:
        if usable:
            flows.action_flow(
                "actions.replay",
                db=ctx.actions_db,
                actor=ctx.identity,
                # the typed text, not the parsed times: "24h" means 24 h before the preview
                signature=(
                    "replay",
                    f.event_type,
                    error_group,
                    since_text,
                    until_text,
                    rate,
                    exclude_superseded,
                ),
                make_preview=lambda: flows.preview_replay(ctx.db, selection, rate=rate or None),
                preview_label="Preview replay",
                noun="replay",
                sample_columns=replay_flows.SAMPLE_COLUMNS,
                details=replay_flows.preview_details,
                after_result=lambda result: replay_flows.show_outcome(ctx.db, result),
            )
    st.markdown("**Recent replays and where their rows are now**")
    replay_flows.recent_runs(ctx.db)

with prune:
    st.caption(
        "Delete done and failed rows processed long ago",
        help="In batches of 5,000 (one transaction and one audit row each). Pending and "
        "processing rows are never touched.",
    )
    columns = st.columns(2)
    prune_done = columns[0].checkbox("Delete done rows", value=True, key="actions.prune_done")
    done_days = columns[0].number_input(
        "… processed more than N days ago",
        min_value=1,
        max_value=MAX_DAYS,
        value=DEFAULT_DONE_DAYS,
        step=1,
        key="actions.done_days",
        disabled=not prune_done,
    )
    prune_failed = columns[1].checkbox("Delete failed rows", value=True, key="actions.prune_failed")
    failed_days = columns[1].number_input(
        "… failed more than M days ago",
        min_value=1,
        max_value=MAX_DAYS,
        value=DEFAULT_FAILED_DAYS,
        step=1,
        key="actions.failed_days",
        disabled=not prune_failed,
    )
    done_age = done_days * DAY if prune_done else None
    failed_age = failed_days * DAY if prune_failed else None
    detach = st.checkbox(
        "Detach whole partitions",
        value=True,
        key="actions.prune_detach",
        help="On an outbox partitioned by created_at: a partition whose every row is past "
        "retention is detached and dropped whole (checked again before and after, audited) "
        "instead of deleted row by row.",
    )

    def prune_counts(preview: Preview) -> None:
        ages = {"done": done_days, "failed": failed_days}
        st.markdown(
            " · ".join(
                f"{part.params['status']}: {format.bold_rows(part.count)} older than "
                f"{format.plural(ages[part.params['status']], 'day')}"
                for part in preview.parts
            )
        )
        lines = flows.partition_lines(preview)
        if lines:
            st.markdown(lines[0] + "\n\n" + "\n".join(f"- {line}" for line in lines[1:]))

    flows.action_flow(
        "actions.prune",
        db=ctx.actions_db,
        actor=ctx.identity,
        signature=("prune", done_age, failed_age, f.event_type, detach),
        make_preview=lambda: flows.preview_prune(
            ctx.db,
            done_older_than=done_age,
            failed_older_than=failed_age,
            event_type=f.event_type,
            detach_partitions=detach,
        ),
        preview_label="Preview prune",
        noun="prune",
        sample_columns=flows.PRUNE_SAMPLE_COLUMNS,
        details=prune_counts,
    )

with audit:
    entries = loaders.audit(ctx.db)
    if entries:
        format.grid(flows.audit_rows(entries), flows.AUDIT_COLUMNS, key="actions.audit")
    else:
        st.caption("No action has been taken yet.")
