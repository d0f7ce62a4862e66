"""The Fleet page's reads and table (issue 16 item 2): every outbox's row from
``fleet_figures.measure_fleet``, cached like the other loaders, on pools kept for the
process (``FleetConnections``: a few connections per database, none kept once idle)."""

import html
from dataclasses import replace
from urllib.parse import urlencode

import streamlit as st

from outbox_monitor.access import Identity
from outbox_monitor.config.fleet import Fleet
from outbox_monitor.figures.fleet_figures import FleetConnections, OutboxRow, measure_fleet
from outbox_monitor.ui import access, format, headline
from outbox_monitor.ui.cache import cached
from outbox_monitor.ui.state import OUTBOX_PARAM, WINDOW_PARAM

STATUS_TEXT = {
    "ok": "no alert firing",
    "firing": ":red[alert firing]",
    "error": ":orange[error]",
    "unreachable": ":red[unreachable]",
}
"""Each ``OutboxRow.status`` as the table shows it: what it is — whether an alert fires —
never a green "ok" beside figures no rule watches (issue 30 item 4); ``NO_ALERT_STATE`` when
the database keeps no alert state."""
NO_ALERT_STATE = "no alert state"


def _close(connections: FleetConnections) -> None:
    connections.close()


@st.cache_resource(show_spinner=False, on_release=_close)
def _connections() -> FleetConnections:
    return FleetConnections()


@cached
def _rows(key: str, _fleet: Fleet, window: float) -> list[OutboxRow]:
    return measure_fleet(_fleet, _connections(), window=window)


def rows(fleet: Fleet, *, window: float) -> list[OutboxRow]:
    """``fleet_figures.measure_fleet`` of ``fleet`` over ``window`` seconds, cached for
    ``cache.CACHE_TTL_SECONDS`` (keyed by every outbox's name and settings)."""
    key = "\n".join(f"{o.name} {o.settings.model_dump_json()}" for o in fleet.outboxes)
    return _rows(key, fleet, window)


def visible(fleet: Fleet, identity: Identity) -> Fleet:
    """The outboxes of ``fleet`` on which ``identity`` has a role (``access.for_outbox``: a
    fleet file may map roles per outbox); the page neither measures nor shows the others."""
    return replace(
        fleet,
        outboxes=tuple(o for o in fleet.outboxes if access.for_outbox(identity, o.settings)),
    )


def overview_link(name: str, window_label: str) -> str:
    """The relative link of an outbox's Overview, with the window: ``overview?outbox=billing&
    window=1h`` (what a Slack link carries, so it opens the same way)."""
    return "overview?" + urlencode({OUTBOX_PARAM: name, WINDOW_PARAM: window_label})


def _cell(value: str) -> str:
    return value if value else format.NO_VALUE


def what_is_wrong(row: OutboxRow) -> str:
    """A row's "What is wrong" cell: its most troubled event type's line (the Overview's
    headline, links opening that outbox) and how many more types are troubled; that nothing
    is; or why it could not be read."""
    if row.diagnosis is None:
        return f"not read: {format.md_text(row.diagnosis_problem)}" if row.diagnosis_problem else ""
    if not row.diagnosis.lines:
        return "nothing wrong"
    more = len(row.diagnosis.lines) - 1
    tail = f" (+{format.plural(more, 'more event type')})" if more else ""
    return headline.line_html(row.diagnosis.lines[0], outbox=row.name) + tail


def table(found: list[OutboxRow], window_label: str) -> str:
    """The rows as one markdown table (drawn with ``unsafe_allow_html``: every value but the
    outbox's name and link is escaped by ``format.md_text``, ``<`` included): each outbox's
    name links into its Overview in the same tab; its
    status, what is wrong (``what_is_wrong``), queue depth, oldest pending age, P95 latency
    and dead letters of the window, firing alerts, and whether its database answered (with
    why not)."""
    lines = [
        "| Outbox | Status | What is wrong | Queue depth | Oldest pending "
        f"| P95 latency ({window_label}) | Failed ({window_label}) "
        "| Firing alerts | Database | Labels |",
        "|---|---|---|--:|--:|--:|--:|--:|---|---|",
    ]
    for row in found:
        firing = format.count(row.firing_alerts)
        if row.firing_alerts is not None and row.alert_errors:
            firing += f" (+{row.alert_errors} in error)"
        reached = "reachable" if row.reachable else "unreachable"
        if row.problem:
            reached += f": {format.md_text(row.problem)}"
        labels = ", ".join(
            f"{format.md_text(k)}={format.md_text(v)}" for k, v in row.labels.items()
        )
        measured = row.status in ("ok", "firing")
        cells = [
            # same tab (a markdown link would open a new one); the name is [a-z0-9_-] only
            f'<a href="{html.escape(overview_link(row.name, window_label))}" '
            f'target="_self">{row.name}</a>',
            NO_ALERT_STATE
            if row.status == "ok" and row.firing_alerts is None
            else STATUS_TEXT[row.status],
            what_is_wrong(row),
            format.count(row.queue_depth) if measured else "",
            format.duration(row.oldest_pending_age) if measured else "",
            format.duration(row.latency_p95) if measured else "",
            format.count(row.failed_in_window) if measured else "",
            firing if measured else "",
            reached,
            labels,
        ]
        lines.append("| " + " | ".join(_cell(c) for c in cells) + " |")
    return "\n".join(lines)
