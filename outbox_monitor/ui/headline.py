"""The Overview's headline (issue 30 item 2): what is wrong, first on the page — one line per
troubled event type (``figures.diagnosis``), each clause a link (the type's Controls, its
Events filtered, its dead letters' group, Workers, Health), or one line saying nothing is.

Cheap: it reads what the Overview read already — ``loaders.status`` (the workers' liveness,
the xmin horizon), the by-event-type table (``event_types.load``: rows, flows, controls,
samples), the alert instances, the dead letters' error groups of the troubled types
(``loaders.overview_error_groups``, brought current at most once a minute) — and, cached,
only the retry error groups of the troubled types with retrying rows and the newest recorded
claim plan (an index step). No full-table scan.
"""

import html
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

import streamlit as st

from outbox_monitor.alerts.outbox_scope import link_outbox
from outbox_monitor.errors import OutboxMonitorError, SchemaNotInitialised
from outbox_monitor.figures import diagnosis, error_grouping
from outbox_monitor.health.claim_plan import recorded_degradation
from outbox_monitor.store.db import Database
from outbox_monitor.store.filters import ExactEventType
from outbox_monitor.ui import format, loaders, slo
from outbox_monitor.ui.cache import cached, db_key
from outbox_monitor.ui.state import Filters

LINE_ICON = ":material/error:"
"""Opens each line of the headline (a troubled event type): data, not a definition."""


@cached
def _retry_groups(key: str, _db: Database, event_type: str) -> list[dict[str, Any]]:
    return error_grouping.retry_error_groups(_db, event_type=ExactEventType(event_type))


@cached
def _claim(key: str, _db: Database) -> str | None:
    try:
        return recorded_degradation(_db)
    except SchemaNotInitialised:
        return None  # no claim plans recorded without init-db: the Health page says so


def evidence(
    db: Database,
    figures: Mapping[str, Any],
    table: Mapping[str, Any],
    instances: Sequence[Mapping[str, Any]] | None,
    *,
    now: datetime,
) -> diagnosis.Evidence:
    """The diagnosis' evidence from the Overview's reads.

    Args:
        db: the page's Database.
        figures: ``loaders.status``'s value (``workers``, ``health``).
        table: ``event_types.load``'s value (``rows``, ``flow``, ``controls``, ``trends``,
            ``window_seconds``).
        instances: the alert instances (``None``: their states are unknown, none counts).
        now: the database clock.
    """
    flows = table["flow"]
    firing = diagnosis.firing_since_by_type(instances or [])
    limit = slo.OLDEST_PENDING_AGE.limit
    found = diagnosis.troubled(
        table["rows"], flows, list(firing), workers=figures["workers"], oldest_pending_slo=limit
    )

    def dead_letter_groups(name: str) -> list[dict[str, Any]]:
        # a name holding % would be a LIKE pattern there
        if "%" in name:
            return []
        return loaders.overview_error_groups(db, event_type=name)

    retry_groups, error_groups = diagnosis.read_groups(
        found, lambda name: _retry_groups(db_key(db), db, name), dead_letter_groups
    )
    health = figures["health"]
    holding = [h for h in health["xmin_horizon_holders"] if h["holds_horizon"]]
    return diagnosis.Evidence(
        now=now,
        window_seconds=table["window_seconds"],
        rows=table["rows"],
        flows=flows,
        controls=table["controls"],
        trends=table["trends"],
        workers=figures["workers"],
        horizon_age=health["xmin_horizon_age_seconds"],
        horizon_holder=holding[0]["summary"] if holding else None,
        claim=_claim(db_key(db), db),
        firing=firing,
        retry_groups=retry_groups,
        error_groups=error_groups,
        oldest_pending_slo=limit,
        horizon_held=slo.XMIN_HORIZON_AGE.limit,
    )


def line_html(line: diagnosis.Line, *, outbox: str = "") -> str:
    """A line as markdown with inline HTML (``st.markdown(unsafe_allow_html=True)``): every
    text escaped (``format.md_text``), the event type in code, the error emphasised, each
    linked part an ``<a target="_self">`` (same tab, as the Fleet page's links); with
    ``outbox`` (a fleet's outbox name) each link opens that outbox (``?outbox=``)."""
    shown = []
    for part in line.parts:
        text = format.md_text(part.text)
        if part.kind == "event_type":
            text = f"<code>{text}</code>"
        elif part.kind == "error":
            text = f"<em>{text}</em>"
        if part.path:
            target = link_outbox(part.path, outbox) or part.path
            text = f'<a href="{html.escape(target)}" target="_self">{text}</a>'
        shown.append(text)
    return "".join(shown)


def show(
    slot: Any,
    db: Database,
    f: Filters,
    figures: Mapping[str, Any],
    table: Mapping[str, Any],
    instances: Sequence[Mapping[str, Any]] | None,
    *,
    now: datetime,
) -> None:
    """Draw the headline into ``slot`` (a container made first on the page): a line per
    troubled event type, or that nothing is wrong; a read that fails says so there.

    Args:
        slot: ``st.container()`` made before the tiles.
        db, figures, table, instances, now: as ``evidence``.
        f: the sidebar's filters (the scope said with "nothing wrong").
    """
    with slot:
        try:
            found = diagnosis.diagnose(evidence(db, figures, table, instances, now=now))
        except OutboxMonitorError as error:
            st.warning(
                f"**What is wrong** could not be read: {format.md_text(error)}",
                icon=":material/help:",
            )
            return
        if not found.lines:
            scope = f"{format.md_code(f.event_type)}: " if f.event_type else ""
            # our own words (the window and SLO labels are ours too): no escaping needed
            st.success(scope + found.nothing_wrong, icon=":material/check_circle:")
            return
        with st.container(border=True):
            for line in found.lines:
                st.markdown(LINE_ICON + " " + line_html(line), unsafe_allow_html=True)
