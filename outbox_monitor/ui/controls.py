"""The Controls page's reads and texts (SPEC §5): the controls in force, every event type with
rows waiting, breaker transitions — read together in one cached load — as table rows; who
may change them; the pause form pre-filled from a link (``alerts.links.pause_link``).

The changes themselves go through ``ui.control_flow`` (preview → confirm → apply).
"""

from dataclasses import dataclass
from datetime import datetime
from typing import Any

import streamlit as st

from outbox_monitor.access import Identity, Role
from outbox_monitor.alerts.links import PAUSE_ACTION
from outbox_monitor.alerts.pause_silences import Tripped, rules_a_pause_trips
from outbox_monitor.browse.events import database_now
from outbox_monitor.flow import controls as flow
from outbox_monitor.flow.controls import BYPASS_NOTE, HELD_ROWS_READ_NOTE, Control
from outbox_monitor.flow.event_types import EventTypeFlow, event_type_flows, pending_by_event_type
from outbox_monitor.flow.model import describe, matches
from outbox_monitor.store.db import Database
from outbox_monitor.ui import format, inputs, loaders
from outbox_monitor.ui.alert_rules import load_ruleset
from outbox_monitor.ui.cache import cached, db_key
from outbox_monitor.ui.format import Column

PAUSE_FILTER_KEY = "controls.pause.filter"
PAUSE_REASON_KEY = "controls.pause.reason"
_PREFILLED = "controls.prefilled"
FILE_OWNED = "owned by the controls file"
BREAKER_WORDS = {"closed": "closed", "open": "open", "half_open": "half-open", None: "off"}


@dataclass(frozen=True)
class ControlsView:
    """What the page shows, read in one load so that its numbers agree: the ``controls`` in
    force, the ``event_types`` with rows waiting, the newest breaker ``transitions`` and the
    database clock ``now``."""

    controls: list[Control]
    event_types: list[EventTypeFlow]
    transitions: list[dict[str, Any]]
    now: datetime
    claims_read_held_rows: bool

    def control(self, event_type_filter: str) -> Control | None:
        """The control in force for exactly that filter, if any."""
        return next((c for c in self.controls if c.event_type_filter == event_type_filter), None)

    def file_owned(self, event_type_filter: str) -> bool:
        """Whether the controls file owns the filter (its control, or an override of it)."""
        found = self.control(event_type_filter)
        return found is not None and (found.layer == "file" or found.file_settings is not None)


@cached
def _view(key: str, _db: Database) -> ControlsView:
    with _db.session():
        found = flow.controls(_db)
        pending = pending_by_event_type(_db)
        return ControlsView(
            controls=found,
            event_types=event_type_flows(pending, found),
            transitions=flow.recent_transitions(_db, limit=20),
            now=database_now(_db),
            claims_read_held_rows=flow.claims_read_held_rows(_db),
        )


def view(db: Database) -> ControlsView:
    """The controls, event types, breaker transitions and whether claims read held rows
    (cached, ``cache.cached``)."""
    return _view(db_key(db), db)


def clear_after_change() -> None:
    """Forget what a control change makes stale: this page's view and the audit log."""
    _view.clear()
    loaders.clear_audit()


def refusal(identity: Identity) -> str | None:
    """Why ``identity`` may not change controls (shown by the disabled forms), or ``None``.
    ``flow.controls.change`` refuses on the server side as well."""
    if identity.can(Role.operator):
        return None
    return (
        f"Viewing only: changing controls needs the operator role, and "
        f"{format.md_code(identity.name)} is a {identity.role.name}."
    )


def event_type_rows(found: ControlsView, event_type: str | None) -> list[dict[str, Any]]:
    """The event-type table: one row per event type with rows waiting (of the sidebar
    filter ``event_type``, ``None`` for all)."""
    return [
        {
            "event_type": t.event_type,
            "state": t.state,
            "due": t.due,
            "held": t.held,
            "pending": t.pending,
            "processing": t.processing,
            "controls": ", ".join(t.controls),
        }
        for t in found.event_types
        if event_type is None or matches(event_type, t.event_type)
    ]


def held_summary(found: ControlsView) -> str:
    """Markdown: the due rows held now, all event types and per type:
    ``"**4** due rows held now: crm.contact 3, crm.deal 1."``."""
    held = [t for t in found.event_types if t.held]
    if not held:
        return "No due row is held now."
    total = sum(t.held for t in held)
    each = ", ".join(f"{format.md_code(t.event_type)} {t.held:,}" for t in held)
    return f"**{total:,}** due {format.inflect(total, 'row')} held now: {each}."


def flow_note(figures: dict[str, Any]) -> str | None:
    """The overview's line on flow control, from ``status`` figures (SPEC §5): rows held per
    event type, rows throttled, breakers open; ``None`` when nothing is held or limited."""
    held = figures.get("rows_held_by_event_type") or {}
    throttled, breakers = figures.get("rows_throttled") or 0, figures.get("breakers_open") or 0
    if not (held or throttled or breakers):
        return None
    parts = []
    if held:
        total = sum(held.values())
        each = ", ".join(f"{format.md_code(t)} {n:,}" for t, n in held.items())
        parts.append(f"**{total:,}** due {format.inflect(total, 'row')} held ({each})")
    if throttled:
        parts.append(f"**{throttled:,}** throttled by a limit")
    if breakers:
        parts.append(f"**{breakers}** circuit {format.inflect(breakers, 'breaker')} open")
    return "Flow control: " + "; ".join(parts) + ". They count in queue depth and oldest age."


EVENT_TYPE_COLUMNS = [
    Column("event_type", "event type", 220),
    Column("state", "state", 140),
    Column("due", "due", 70, help="Pending rows due now."),
    Column("held", "held", 70, help="Due rows a control hands out none of now."),
    Column("pending", "pending", 80, help="Every pending row, due or in backoff."),
    Column("processing", "processing", 90),
    Column("controls", "controls", 250, help="The filters of the controls that match it."),
]
"""The event-type table's columns (``format.grid``)."""


def owner(control: Control) -> str:
    """Who set the control: the controls file, an operator's override of it, an operator."""
    if control.layer == "file":
        return f"{FILE_OWNED} (read-only here)"
    if control.file_settings is not None:
        return "operator, overriding the controls file"
    return f"operator ({control.updated_by})"


def next_probe(control: Control) -> str:
    """When a breaker's next probe goes out, shortly: ``"in 1m 30s"``, ``"at the next
    claim"`` (due, or a half-open breaker's probe not yet handed out), ``"handed out"``;
    ``"–"`` for a breaker closed or off (``Control.breaker_note`` says it in full)."""
    if control.breaker_state == "half_open":
        return "at the next claim" if control.probe_at is None else "handed out"
    if control.breaker_state != "open" or control.next_probe_at is None:
        return format.NO_VALUE
    seconds = control.next_probe_in_seconds or 0.0
    return f"in {format.duration(seconds)}" if seconds > 0 else "at the next claim"


def control_rows(found: ControlsView) -> list[dict[str, Any]]:
    """The controls table: state, the next probe of an open breaker, rows held and
    throttled, settings in words, reason, owner; the breaker in full (an open one's
    cool-down now and next probe, as ``Control.breaker_note``), an override's expiry, drift
    from the file (``the file says …``) and the last change for a chosen row's detail."""
    return [
        {
            "filter": c.event_type_filter,
            "state": c.state,
            "next probe": next_probe(c),
            "rows_held": c.rows_held,
            "throttled": c.throttled,
            "settings": describe(c.settings, now=c.now),
            "reason": c.settings.pause_reason or "",
            "owner": owner(c),
            "breaker": c.breaker_note or BREAKER_WORDS.get(c.breaker_state, str(c.breaker_state)),
            "override_expires": format.instant(c.expires_at) if c.expires_at else "",
            "drift": f"the file says: {describe(c.file_settings)}" if c.file_settings else "",
            "updated": f"{format.instant(c.updated_at)} by {c.updated_by}",
        }
        for c in found.controls
    ]


CONTROL_COLUMNS = [
    Column("filter", "event type filter", 130),
    Column("state", "state", 130),
    Column("next probe", "next probe", 100, help="When an open breaker lets one row through."),
    Column("rows_held", "rows held", 80),
    Column("throttled", "throttled", 80, help="Due rows beyond a limit's grant now."),
    Column("settings", "settings", 190),
    Column("reason", "reason", 110),
    Column("owner", "owner", 120),
    Column("breaker", "breaker"),
    Column("override_expires", "override expires"),
    Column("drift", "drift from the controls file"),
    Column("updated", "last change"),
]
"""The controls table's columns (``format.grid``): the breaker in full, an override's expiry,
drift and the last change show with a chosen row's detail."""


def transition_rows(found: ControlsView) -> list[dict[str, Any]]:
    """The breaker transitions table, newest first: outcomes and failures of the window
    that opened a breaker (``–`` for a close), its cool-down in words."""
    return [
        {
            "at": t["at"],
            "filter": t["event_type_filter"],
            "transition": t["transition"],
            "outcomes": t["outcomes"],
            "failures": t["failures"],
            "cooldown": t["cooldown_seconds"],
        }
        for t in found.transitions
    ]


TRANSITION_COLUMNS = [
    Column("at", "at", 170, unit="instant"),
    Column("filter", "event type filter", 200),
    Column("transition", "transition", 110),
    Column("outcomes", "outcomes", 100, help="Outcomes in the window that opened it."),
    Column("failures", "failures", 100, help="Failed outcomes among them."),
    Column("cooldown", "cool-down", 110, unit="seconds"),
]
"""The breaker transitions table's columns (``format.grid``)."""


def prefill_from_link() -> str | None:
    """Pre-fill the pause form from ``?event_type=…&action=pause[&reason=…]`` (once per
    link and session, so typing over it sticks); returns the linked filter, if any.

    Call before the pause form's inputs are rendered.
    """
    params = st.query_params
    if params.get("action") != PAUSE_ACTION:
        return None
    try:
        linked = inputs.parse_text(params.get("event_type"), what="the linked event type")
        reason = inputs.parse_text(params.get("reason"), what="the linked reason")
    except ValueError:
        return None
    if not linked:
        return None
    if st.session_state.get(_PREFILLED) != (linked, reason):
        st.session_state[_PREFILLED] = (linked, reason)
        st.session_state[PAUSE_FILTER_KEY] = linked
        if reason:
            st.session_state[PAUSE_REASON_KEY] = reason
    return linked


def filter_input(key: str, *, disabled: bool) -> str | None:
    """A text input for an event-type filter; ``None`` (with the reason shown) when empty
    or unusable."""
    text = st.text_input(
        "Event type or pattern",
        key=key,
        placeholder="crm.contact or crm.%",
        help="An exact event type, or a LIKE pattern with % (in which _ and \\ are literal).",
        disabled=disabled,
    )
    try:
        value = inputs.parse_text(text, what="the filter")
    except ValueError as error:
        st.error(format.md_text(error), icon=":material/error:")
        return None
    return value.strip() if value and value.strip() else None


def current_settings(found: ControlsView, event_type_filter: str | None) -> None:
    """A caption: the filter's control now (or none), and whether the file owns it."""
    if not event_type_filter:
        return
    control = found.control(event_type_filter)
    now = describe(control.settings) if control else "no control of its own"
    text = f"{format.md_code(event_type_filter)} now: {format.md_text(now)}."
    if found.file_owned(event_type_filter):
        text += f" It is {FILE_OWNED}: a change here is an override that expires."
    st.caption(text)


def about(actor: str) -> None:
    """What controls do and whom they bind (SPEC §5), in a closed expander: the page opens
    with its data, the definitions one click away. ``actor``: who a change is audited as."""
    with st.expander("What controls do", icon=":material/help:"):
        st.markdown(
            "Stop the bleeding: a pause holds an event type's due rows (they stay pending and "
            "keep their attempts), a limit caps how many are handed out, a circuit breaker "
            "pauses by itself when the downstream fails. Every change shows the rows it "
            f"matches first and is audited as {format.md_code(actor)}."
        )
        st.info(format.md_text(BYPASS_NOTE), icon=":material/alt_route:")


def held_rows_read_note(found: ControlsView) -> None:
    """While controls exist on a table without the flow-control index, the warning that every
    claim reads every held row (``flow.claims_read_held_rows``), with the command to fix it."""
    if found.controls and found.claims_read_held_rows:
        st.warning(format.md_text(HELD_ROWS_READ_NOTE), icon=":material/speed:")


def override_input(
    key: str, found: ControlsView, event_type_filter: str | None, *, disabled: bool
) -> float | None:
    """On a filter the controls file owns, how long the override lasts (``1h``), in
    seconds; ``None`` elsewhere or when unusable (the reason shown)."""
    if not event_type_filter or not found.file_owned(event_type_filter):
        return None
    text = st.text_input(
        "Override lasts",
        value="1h",
        key=key,
        disabled=disabled,
        help="Then the controls file's settings are in force again.",
    )
    try:
        return inputs.parse_seconds(text)
    except ValueError as error:
        st.error(f"Override lasts: {format.md_text(error)}", icon=":material/error:")
        return None


def silence_offer(event_type_filter: str | None, *, disabled: bool) -> tuple[Tripped, ...]:
    """The pause form's offer to silence the alert rules a pause of the filter will trip
    (backlog, oldest age of those types) until resumed: a checkbox naming them (silencing
    is the operator's choice: a backlog alert may also catch a real outage). Returns the
    rules to silence."""
    if not event_type_filter:
        return ()
    loaded = load_ruleset()
    if loaded.ruleset is None:
        st.caption("The alert rules file is invalid: no rule to silence (see Alerts).")
        return ()
    tripped = tuple(rules_a_pause_trips(loaded.ruleset, event_type_filter))
    if not tripped:
        st.caption("No alert rule watches the pending rows of these types.")
        return ()
    names = ", ".join(format.md_code(item.rule.name) for item in tripped)
    chosen = st.checkbox(
        f"Silence the rules this pause will trip until resumed: {names}",
        value=False,
        key="controls.pause.silence",
        disabled=disabled,
        help="One silence per rule (only the paused types for a per-event-type rule), ending "
        "with the pause, or after a day at most; resuming ends them.",
    )
    return tripped if chosen else ()
