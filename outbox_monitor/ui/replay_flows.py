"""The dashboard's replay parts beyond the generic flow (issue 13 items 4 and 5): what a
replay preview adds (order-safe counts, the drip's length, a re-failed last replay), the
outcome of a replay run followed by its run id, the recent replay runs, and the replay of
one event from its detail on the Events page.

Outcomes are read afresh at every run (never cached): they change while workers retry.
"""

from typing import Any

import streamlit as st

from outbox_monitor.access import Identity, Role
from outbox_monitor.actions.preview import Preview
from outbox_monitor.actions.replay import ReplaySelection
from outbox_monitor.actions.replay_outcomes import (
    ReplayOutcome,
    group_text,
    recent_replay_runs,
    replay_outcome,
)
from outbox_monitor.actions.run import ActionResult
from outbox_monitor.store.db import Database
from outbox_monitor.ui import flows, format

SAMPLE_COLUMNS = [
    format.Column("id", "id", 80),
    format.Column("event_type", "event type", 160),
    format.Column("event_key", "event key", 150),
    format.Column("attempts", "attempts", 75),
    format.Column("processed_at", "failed at", 170, unit="instant"),
    format.Column("last_error", "last error", 280),
]
"""A replay preview's sample rows (``format.grid``)."""
GROUP_COLUMNS = [
    format.Column("group_id", "error group", 120),
    format.Column("event_type", "event type", 180),
    format.Column("rows", "rows", 70),
    format.Column("sample_error", "sample error", 400),
]
"""The error groups a replay's rows failed again with (``format.grid``)."""
RUN_COLUMNS = [
    format.Column("at", "at", 170, unit="instant"),
    format.Column("actor", "actor", 140),
    format.Column("replayed", "replayed", 80),
    *(format.Column(status, status, 85) for status in ("done", "failed", "pending", "processing")),
    format.Column("failed again with", "failed again with", 210),
    format.Column("gone", "gone (pruned)"),
    format.Column("run_id", "run id"),
]
"""The recent replay runs' columns (``format.grid``)."""
RECENT_RUNS = 5


def preview_details(preview: Preview) -> None:
    """Render a replay preview's details: the rows whose aggregate has a later done event
    per event type (and whether they are excluded), how long a drip lasts (matched / R
    seconds), and a warning when the group's last replay re-failed entirely."""
    details = preview.details
    superseded = details.get("superseded") or {}
    if superseded:
        excluded = preview.filter.get("exclude_superseded")
        st.warning(
            f"Order-safe: {format.rows(sum(superseded.values()))} selected "
            f"{format.inflect(sum(superseded.values()), 'has', 'have')} a later **done** "
            "event on the same aggregate; replaying would apply an older state after a newer "
            "one — "
            + ("they are **excluded** from this replay." if excluded else "they are included.")
            + " By event type: "
            + ", ".join(f"{format.md_code(k)} {v:,}" for k, v in superseded.items()),
            icon=":material/swap_vert:",
        )
    seconds = details.get("drip_seconds")
    if seconds is not None:
        st.info(
            f"Drip at {preview.filter['rate_per_second']:g} rows/s: the rows fall due one "
            f"after another, oldest first, over {seconds:,g} s"
            + (f" ({format.duration(seconds)})." if seconds >= 60 else "."),
            icon=":material/water_drop:",
        )
    if details.get("last_replay_refailed"):
        text = details["last_replay_refailed"]
        st.error(format.md_text(text[0].upper() + text[1:]), icon=":material/replay:")


def outcome_text(outcome: ReplayOutcome) -> str:
    """The outcome as one line of Markdown (its text escaped)."""
    return format.md_text(outcome.summary())


def show_outcome(db: Database, result: ActionResult) -> None:
    """Under a replay's result: where its rows are now (read at every run), with a
    refresh button and the re-failed error groups."""
    if result.action != "replay" or not result.changed:
        return
    outcome = replay_outcome(db, result.run_id)
    box = st.warning if outcome.failed else st.info
    box(
        ("Outcome so far: " if not outcome.settled else "Outcome: ") + outcome_text(outcome),
        icon=":material/monitoring:",
    )
    if outcome.failed_groups:
        format.grid(outcome.failed_groups, GROUP_COLUMNS, key=f"outcome.{result.run_id}.groups")
    st.button("Refresh outcome", key=f"outcome.{result.run_id}.refresh")


def recent_runs(db: Database) -> None:
    """The newest replay runs and where their rows are now (a table)."""
    runs = recent_replay_runs(db, limit=RECENT_RUNS)
    if not runs:
        st.caption("No replay yet.")
        return
    table: list[dict[str, Any]] = []
    for run in runs:
        outcome = replay_outcome(db, run["run_id"])
        table.append(
            {
                "at": run["at"],
                "actor": run["actor"],
                "replayed": outcome.replayed,
                **outcome.counts(),
                "failed again with": "; ".join(group_text(g) for g in outcome.failed_groups),
                "run_id": run["run_id"],
            }
        )
    format.grid(table, RUN_COLUMNS, key="replay.recent_runs")


def replay_event(
    *, db: Database, actions_db: Database, identity: Identity, event: dict[str, Any]
) -> None:
    """The Events page's replay of one failed event: the preview → confirm flow of
    ``flows.action_flow`` on that id alone (audited like every replay), its outcome after.
    A viewer sees the button disabled with why; nothing shows for an event not failed."""
    key = f"events.replay.{event['id']}"  # a result stays with its event
    if event["status"] != "failed" and flows.last_result(key) is None:
        return
    st.markdown("**Replay this event**")
    flows.action_flow(
        key,
        db=actions_db,
        actor=identity,
        signature=("replay-one", event["id"]),
        make_preview=lambda: flows.preview_replay(db, ReplaySelection(ids=(event["id"],))),
        preview_label="Preview replay of this event",
        noun="replay",
        sample_columns=SAMPLE_COLUMNS,
        details=preview_details,
        after_result=lambda result: show_outcome(db, result),
        refused=None
        if identity.can(Role.operator)
        else f"{format.md_code(identity.name)} is a viewer: replaying needs the operator role.",
    )
