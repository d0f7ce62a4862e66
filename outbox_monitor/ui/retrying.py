"""The Overview's retrying (issue 30 item 1): the tile of SPEC §2 ``retrying``, the retry
error groups beside it — what a failing downstream answers before anything is
dead-lettered —, and the chart of retrying and scheduled retries over time from the samples.

The groups come from ``error_grouping.retry_groups``: the counts of migration 026, read as
one row per group, counted again by this read when ``RETRY_GROUPS_MAX_AGE_SECONDS`` old (the
scheduler's sampler counts them every interval, so with a scheduler the page only reads
them); their header counts every group and row matching the filter, not the listed ones
(issue 30 item 8), and says how long ago they were counted.
"""

from collections.abc import Callable, Mapping, Sequence
from datetime import datetime
from typing import Any

import streamlit as st

from outbox_monitor.figures import error_grouping
from outbox_monitor.figures.error_grouping import RetryGroups
from outbox_monitor.store.db import Database
from outbox_monitor.ui import charts, format
from outbox_monitor.ui.cache import cached, db_key
from outbox_monitor.ui.event_types import type_link
from outbox_monitor.ui.format import Column
from outbox_monitor.ui.rule_state import Badge
from outbox_monitor.ui.state import MIN_REFRESH_SECONDS, Filters

GROUPS_SHOWN = 10
"""Retry error groups the Overview lists, biggest first (the header counts them all)."""
HELP = (
    "Pending rows with attempts > 0 (SPEC §2 retrying): a failure sent them back to wait for "
    "another try, in backoff or due again. During a downstream outage these are the failures, "
    "long before any row is dead-lettered."
)
SAMPLED = {"retrying": "retrying (attempts > 0)", "scheduled_retries": "waiting in backoff"}
"""The samples' columns the chart draws, with their legend labels: retrying and scheduled
retries (pending rows not yet due: retries in backoff, and any row published for later)."""
COLUMNS = [
    Column("event type", "event type", 150),
    Column("rows retrying", "rows retrying", 105),
    Column("due now", "due now", 65, help="Of the group's rows, those due for their next try."),
    Column("sample_error", "sample error", 400, help="The last_error of the group's newest row."),
    Column("events", "events", 60, link="events"),
]
"""The retry error groups' columns (``format.grid``): all shown, within 1440 px."""


@cached
def _groups(key: str, _db: Database, event_type: str | None, limit: int) -> RetryGroups:
    return error_grouping.retry_groups(_db, event_type=event_type, limit=limit)


def load_groups(db: Database, f: Filters, *, limit: int = GROUPS_SHOWN) -> RetryGroups:
    """The retry error groups of the sidebar's event-type filter (cached,
    ``error_grouping.retry_groups``): at most ``limit`` listed, with the totals of all."""
    return _groups(db_key(db), db, f.event_type, limit)


def _all_types(db: Database) -> RetryGroups:
    """The retry error groups of every event type, for their total (``retrying_total``):
    from the counts (one row per group, not a pass over the backlog)."""
    return _groups(db_key(db), db, None, 1)


def section(
    db: Database,
    f: Filters,
    figures: Mapping[str, Any],
    *,
    tile: Callable[[Any, str, str, Badge | None, str], None],
    badge: Badge | None,
) -> None:
    """One row of the Overview: the Retrying tile, then the retry error groups.

    Args:
        db: the page's Database.
        f: the sidebar's filters (event-type filter, window for the links).
        figures: ``loaders.status``'s value (its ``retrying`` is the filter's).
        tile: the page's tile drawer ``(column, label, value, badge, help)``.
        badge: the rules' state on ``retrying`` (``rule_state.badge``).
    """
    left, right = st.columns([1, 3])
    tile(left, "Retrying", format.count(figures["retrying"]), badge, HELP)
    if f.event_type:
        every = _all_types(db)
        ago = counted_ago(every, figures.get("now"))
        left.caption(
            f"{format.md_code(f.event_type)} only; "
            f"{format.count(every.retrying_total)} retrying in all event types"
            + (f" when {ago}." if ago else ".")
        )
    with right:
        groups_table(load_groups(db, f), f, now=figures.get("now"))


def header(loaded: RetryGroups, f: Filters, *, now: datetime | str | None = None) -> str:
    """The groups' header: every row and group matching the filter, how many are listed
    when not all are, and how long ago they were counted when ``now`` (the database's clock)
    is given ("1,204 rows retrying in 31 error groups (all event types); the 10 biggest
    listed; counted 40s ago.")."""
    scope = format.md_code(f.event_type) if f.event_type else "all event types"
    text = (
        f"**{format.plural(loaded.retrying_total, 'row')} retrying** in "
        f"{format.plural(loaded.groups_total, 'retry error group')} ({scope})"
    )
    if loaded.groups_total > len(loaded.groups):
        text += f"; the {len(loaded.groups)} biggest listed"
    ago = counted_ago(loaded, now)
    return text + (f"; {ago}." if ago else ".")


def counted_ago(loaded: RetryGroups, now: datetime | str | None) -> str | None:
    """``"counted 40s ago"`` when an earlier call counted the groups at least
    ``MIN_REFRESH_SECONDS`` before ``now`` (the database's clock, a datetime or its ISO
    text); ``None`` when this read counted them, they were computed live, they are younger
    (as good as live) or ``now`` is not given."""
    if not (loaded.counted_at and now):
        return None
    now = datetime.fromisoformat(now) if isinstance(now, str) else now
    age = (now - loaded.counted_at).total_seconds()
    return f"counted {format.duration(round(age))} ago" if age >= MIN_REFRESH_SECONDS else None


def group_rows(loaded: RetryGroups, f: Filters) -> list[dict[str, Any]]:
    """The table's rows: per group its event type, rows retrying, due now, sample error and
    a link to the Events page filtered to that type (none for a type holding ``%``)."""
    return [
        {
            "event type": group["event_type"],
            "rows retrying": group["retrying"],
            "due now": group["due_now"],
            "sample_error": group["sample_error"],
            "events": type_link("events", group["event_type"], f),
        }
        for group in loaded.groups
    ]


def groups_table(loaded: RetryGroups, f: Filters, *, now: datetime | str | None = None) -> None:
    """The retry error groups, biggest first, under their header (``header``); a line when
    none (with the counts' age, ``counted_ago``, when taken earlier)."""
    st.markdown("**Retry error groups**")
    if loaded.groups:
        st.caption(header(loaded, f, now=now))
    else:
        scope = f" of {format.md_code(f.event_type)}" if f.event_type else ""
        ago = counted_ago(loaded, now)
        st.caption(
            f"No row{scope} was retrying when the groups were {ago}."
            if ago
            else f"No row{scope} is retrying: no failure is waiting for another try."
        )
    if loaded.recount_failed:
        st.caption(f"Counting them again failed: {loaded.recount_failed}")
    if not loaded.groups:
        return
    format.grid(group_rows(loaded, f), COLUMNS, key="overview.retry_groups")
    if not loaded.cached:
        st.caption(
            "Computed from every retrying row (this login may not refresh their cache: "
            "run `outbox-monitor init-db --print-grants` again)."
        )


def chart(samples: Sequence[Mapping[str, Any]]) -> None:
    """Retrying and scheduled retries over time, from the samples (``metrics.samples_series``)."""
    st.subheader("Retrying over time")
    if not any(sample.get(column) is not None for sample in samples for column in SAMPLED):
        st.caption(
            "No samples of retrying yet — `outbox-monitor scheduler` records them every few "
            "seconds."
        )
        return
    st.altair_chart(charts.sampled_lines(samples, SAMPLED, "rows"), width="stretch")
