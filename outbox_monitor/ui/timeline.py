"""The Timeline page's section (issue 15 item 5): the incident timeline of the sidebar's
window — or of that window centred on the link's ``at`` instant (an alert's "Timeline"
link, ``alerts.links.timeline_path``) — as a chart with one lane per kind and a table,
with every source that could not be read named above them."""

from collections.abc import Sequence
from dataclasses import asdict
from datetime import UTC, datetime, timedelta

import altair as alt
import pandas as pd
import streamlit as st

from outbox_monitor.access import Role
from outbox_monitor.alerts import timeline
from outbox_monitor.alerts.links import TIMELINE_AT_PARAM
from outbox_monitor.store.db import Database
from outbox_monitor.ui import alert_rules, charts, format, loaders
from outbox_monitor.ui.cache import cached, db_key
from outbox_monitor.ui.state import PageContext

SOURCE_NAMES = {
    timeline.ALERT: "Alert transitions",
    timeline.ACTION: "Operator actions (audit log)",
    timeline.ERROR_GROUP: "Error groups first seen",
    timeline.BREAKER: "Breaker transitions",
}
KIND_COLORS = ["#e45756", "#4c78a8", "#f58518", "#54a24b"]
"""One colour per kind, in ``timeline.KINDS`` order."""
CHART_HEIGHT = 200
TABLE_COLUMNS = [
    format.Column("at", "at", 170, unit="instant"),
    format.Column("kind", "kind", 110),
    format.Column("title", "what changed", 290),
    format.Column("detail", "detail", 300),
    format.Column("link", "open", 60, link="open"),
]
"""The table's columns (``format.grid``): a detail too long for its cell wraps, and shows
in full with a chosen row."""


def parse_at(value: str | None) -> datetime | None:
    """The ``at`` URL parameter as an aware instant (``2026-12-02T14:02:07Z``; an instant
    without offset is UTC); ``None`` when absent or empty.

    Raises:
        ValueError: not an ISO 8601 instant, said in words.
    """
    if not value:
        return None
    try:
        instant = datetime.fromisoformat(value.strip())
    except ValueError:
        raise ValueError("not an ISO 8601 instant (e.g. 2026-12-02T14:02:07Z)") from None
    return instant if instant.tzinfo else instant.replace(tzinfo=UTC)


def time_range(now: datetime, window: float, at: datetime | None) -> tuple[datetime, datetime]:
    """The range shown: the last ``window`` seconds before ``now``, or ``window`` seconds
    centred on ``at`` (half before it — what led to it — and half after).

    Raises:
        ValueError: the range around ``at`` leaves the calendar (before year 1 or after
            9999), said in words.
    """
    if at is None:
        return now - timedelta(seconds=window), now
    half = timedelta(seconds=window / 2)
    try:
        return at - half, at + half
    except OverflowError:
        raise ValueError("the window around it falls outside years 1 to 9999") from None


@cached
def _timeline(
    key: str, _db: Database, since: datetime, until: datetime, full_audit: bool
) -> timeline.Timeline:
    rules = alert_rules.load_ruleset().ruleset
    return timeline.read_timeline(
        _db,
        since=since,
        until=until,
        redactor=loaders.redactor(_db),
        full_audit=full_audit,
        units={rule.name: rule.unit for rule in rules.rules} if rules else None,
    )


def chart(entries: Sequence[timeline.TimelineEntry], since: datetime, until: datetime, at):
    """One point per entry on a time axis spanning ``since``–``until``, one lane per kind,
    the title and detail in its tooltip; a dashed rule at ``at`` when given."""
    frame = pd.DataFrame(
        [asdict(e) for e in entries], columns=["at", "kind", "title", "detail", "link"]
    )
    frame["at"] = pd.to_datetime(frame["at"], utc=True)
    frame[charts.TOOLTIP_TIME] = frame["at"].dt.strftime(charts.TOOLTIP_TIME_FORMAT)
    bounds = pd.Series(pd.to_datetime([since, until], utc=True))
    x = alt.X(
        "at:T",
        title=None,
        # ISO text: Vega-Lite reads it as the instant (a number in ms gives an empty axis)
        scale=alt.Scale(type="utc", domain=[t.isoformat() for t in bounds]),
        axis=alt.Axis(format=charts.time_format(bounds), values=charts.time_ticks(bounds)),
    )
    kinds = list(timeline.KINDS)
    points = (
        alt.Chart(frame)
        .mark_point(filled=True, size=90, opacity=0.85)
        .encode(
            x=x,
            y=alt.Y("kind:N", title=None, sort=kinds, scale=alt.Scale(domain=kinds)),
            color=alt.Color(
                "kind:N", scale=alt.Scale(domain=kinds, range=KIND_COLORS), legend=None
            ),
            tooltip=[f"{charts.TOOLTIP_TIME}:N", "kind:N", "title:N", "detail:N"],
        )
    )
    layers = [points]
    if at is not None:
        marker = pd.DataFrame({"at": [pd.Timestamp(at).tz_convert(UTC)]})
        layers.append(alt.Chart(marker).mark_rule(strokeDash=[4, 4], color="#888").encode(x=x))
    return alt.layer(*layers).properties(height=CHART_HEIGHT)


def section(ctx: PageContext) -> None:
    """The timeline of the sidebar's window (or around the link's ``at``): the sources
    that failed, the chart and the table, newest first.

    Raises:
        DatabaseUnavailable: as ``timeline.read_timeline`` (shown by ``banners.guarded``).
    """
    given = st.query_params.get(TIMELINE_AT_PARAM)
    now = loaders.database_now(ctx.db).replace(microsecond=0)
    try:
        at = parse_at(given)
        since, until = time_range(now, ctx.filters.window, at)
    except ValueError as error:
        st.warning(
            f"Ignored {format.md_code(f'{TIMELINE_AT_PARAM}={given[:60]}')} from the link: "
            f"{error}; showing the last {ctx.filters.window_label}.",
            icon=":material/link_off:",
        )
        at = None
        since, until = time_range(now, ctx.filters.window, at)
    full_audit = ctx.identity.can(Role.operator)
    found = _timeline(db_key(ctx.db), ctx.db, since, until, full_audit)
    where = (
        f"around {format.instant(at)} (±{format.duration_label(ctx.filters.window / 2)})"
        if at is not None
        else f"the last {ctx.filters.window_label}"
    )
    st.caption(
        f"{format.instant(since)} – {format.instant(until)}: {where}, newest first · all event "
        "types",
        help="The event-type filter does not apply. Shown: alert transitions that page "
        "(firing, evaluation error, resolved), audited changes, error groups first seen, "
        "breaker transitions.",
    )
    if at is not None and st.button(
        f"Show the last {ctx.filters.window_label} instead", key="timeline.now"
    ):
        st.query_params.pop(TIMELINE_AT_PARAM, None)
        st.rerun()
    for failure in found.failures:
        st.warning(
            f"**{SOURCE_NAMES[failure.kind]} not shown**: could not be read — "
            f"{format.md_text(failure.reason)}. The other sources are below.",
            icon=":material/error:",
        )
    for note in found.notes:
        st.info(format.md_text(note[:1].upper() + note[1:]) + ".", icon=":material/info:")
    if found.more:
        names = ", ".join(SOURCE_NAMES[kind].lower() for kind in found.more)
        st.caption(
            f"Only the newest {len(found.entries):,} changes are shown; the range holds more "
            f"({names}): choose a shorter window."
        )
    if not found.entries:
        st.caption("Nothing changed in this range.")
        return
    st.altair_chart(chart(found.entries, since, until, at), width="stretch")
    if not full_audit:
        st.caption("Operator actions show their event type only; operators see their filter.")
    rows = [
        {**asdict(entry), "link": entry.link.lstrip("/") if entry.link else None}
        for entry in found.entries
    ]
    format.grid(rows, TABLE_COLUMNS, key="timeline.table")
