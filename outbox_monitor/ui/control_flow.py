"""Preview → confirm → apply for a control change (SPEC §5), the way ``ui.flows`` does it for
row actions (whose ``Preview`` of rows to change does not fit a change of settings).

The preview is what the change's filter matches now: due rows per event type
(``flow.controls.preview_hold``), and, on a filter the controls file owns, that the change is
an override that expires. It is kept in ``st.session_state`` with the request it was made
for; a different request drops it. The confirm button records the preview in a callback;
the next run applies it through ``flow.controls.change`` (role-checked and audited there)
if the request is unchanged, else says so. A refused change (``AccessDenied``,
``ActionRefused`` naming the field, a database error) is shown inside the flow.
"""

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from functools import partial
from typing import Any

import streamlit as st

from outbox_monitor.access import Identity
from outbox_monitor.alerts.pause_silences import (
    Tripped,
    end_pause_silences,
    silence_for_pause,
)
from outbox_monitor.browse.events import database_now
from outbox_monitor.errors import OutboxMonitorError
from outbox_monitor.flow import controls as flow
from outbox_monitor.flow.model import (
    DEFAULT_OVERRIDE_SECONDS,
    ControlSettings,
    default_burst,
    describe,
)
from outbox_monitor.store.db import Database
from outbox_monitor.ui import banners, controls, format, inputs
from outbox_monitor.ui.alert_loaders import clear_silences
from outbox_monitor.ui.state import PageContext

log = logging.getLogger(__name__)
SILENCED_KEY = "controls.silenced"
"""Where the silences of the last pause or resume wait to be shown with its result."""
PREVIEW_COLUMNS = [
    format.Column("event_type", "event type", 300),
    format.Column("due_rows", "due rows it matches now", 200),
]
"""The preview table's columns (``format.grid``)."""

DONE = {
    "pause": "Paused",
    "resume": "Resumed",
    "limit": "Limits set on",
    "breaker": "Breaker set on",
}


@dataclass(frozen=True)
class ControlRequest:
    """One change as a form describes it (``flow.controls.change``'s arguments).

    ``pause_for``: seconds from the database clock at apply time for ``paused_until`` (a
    pause "for 30m" lasts 30 minutes from the confirm, not from the preview). ``silence``:
    the alert rules a pause silences until resumed (``alerts.pause_silences``).
    """

    event_type_filter: str
    action: str
    changes: dict[str, Any] = field(default_factory=dict)
    override_seconds: float | None = None
    pause_for: float | None = None
    silence: tuple[Tripped, ...] = ()

    def resolved(self, db: Database) -> dict[str, Any]:
        """The changes with ``pause_for`` turned into ``paused_until``."""
        if self.pause_for is None:
            return dict(self.changes)
        return {
            **self.changes,
            "paused_until": database_now(db) + timedelta(seconds=self.pause_for),
        }


def _checked(changes: dict[str, Any]) -> dict[str, Any]:
    """``changes`` if the model accepts them (``ValueError`` naming the field, before any
    preview); the change validates them again against the settings in force."""
    ControlSettings().with_changes(**changes)
    return changes


def pause_request(
    event_type_filter: str | None,
    for_text: str | None,
    until_text: str | None,
    reason: str | None,
    now: datetime,
    silence: tuple[Tripped, ...] = (),
) -> ControlRequest | None:
    """The pause form's request: for a duration (``30m``), or until an instant, or until
    resumed, silencing the rules in ``silence`` until resumed; ``None`` without a filter.

    Raises:
        ValueError: both or an unusable duration or instant, an instant not in the future.
    """
    if not event_type_filter:
        return None
    pause_for = inputs.parse_seconds(for_text)
    until = inputs.parse_time(until_text, now)
    if pause_for is not None and until is not None:
        raise ValueError("give For or Until, not both")
    if pause_for is not None and pause_for <= 0:
        raise ValueError("For: a pause lasts longer than 0s")
    if until is not None and until <= now:
        raise ValueError(f"Until: {until_text!r} is not in the future (For takes a duration)")
    text = inputs.parse_text(reason, what="the reason")
    changes = {"paused": True, "paused_until": until, "pause_reason": (text or "").strip() or None}
    return ControlRequest(
        event_type_filter, "pause", _checked(changes), pause_for=pause_for, silence=silence
    )


def resume_request(event_type_filter: str | None) -> ControlRequest | None:
    """The resume button's request (its limits and breaker stay); ``None`` without a filter."""
    if not event_type_filter:
        return None
    changes = {"paused": False, "paused_until": None, "pause_reason": None}
    return ControlRequest(event_type_filter, "resume", changes)


def limit_request(
    event_type_filter: str | None,
    concurrency: float | None,
    rate: float | None,
    burst: float | None,
    override_seconds: float | None,
) -> ControlRequest | None:
    """The limits form's request; an empty field removes that limit; the burst defaults to
    one second's worth of rows. ``None`` without a filter.

    Raises:
        ValueError: a burst without a rate.
    """
    if not event_type_filter:
        return None
    if burst and not rate:
        raise ValueError("Burst goes with a rate")
    changes = {
        "concurrency_limit": int(concurrency) if concurrency else None,
        "rate_per_second": float(rate) if rate else None,
        "burst": (int(burst) if burst else default_burst(rate)) if rate else None,
    }
    return ControlRequest(event_type_filter, "limit", _checked(changes), override_seconds)


def breaker_request(
    event_type_filter: str | None,
    enabled: bool,
    window_text: str | None,
    min_attempts: float,
    ratio: float,
    cooldown_text: str | None,
    override_seconds: float | None,
) -> ControlRequest | None:
    """The breaker form's request: on with its settings, or off. ``None`` without a filter.

    Raises:
        ValueError: an unusable duration, or a setting the model refuses (named).
    """
    if not event_type_filter:
        return None
    changes: dict[str, Any] = {"breaker": enabled}
    if enabled:
        changes.update(
            breaker_window_seconds=inputs.parse_seconds(window_text) or 60.0,
            breaker_min_attempts=int(min_attempts),
            breaker_ratio=float(ratio),
            breaker_cooldown_seconds=inputs.parse_seconds(cooldown_text) or 30.0,
        )
    return ControlRequest(event_type_filter, "breaker", _checked(changes), override_seconds)


@dataclass(frozen=True)
class HoldPreview:
    """A request and the due rows per event type its filter matched when previewed, on the
    fleet's ``outbox`` (its name; ``""`` without a fleet file)."""

    request: ControlRequest
    held: dict[str, int]
    file_owned: bool
    outbox: str = ""


def change_flow(
    key: str,
    *,
    db: Database,
    actions_db: Database,
    actor: Identity,
    request: ControlRequest | None,
    found: controls.ControlsView,
    refusal: str | None,
    noun: str,
) -> None:
    """Render the preview and confirm buttons of one change and apply it when confirmed.

    Args:
        key: unique name of the flow on the page (widget and session keys derive from it).
        db, actions_db: the Database of reads (the preview) and of actions (the change).
        actor: who changes; ``flow.controls.change`` checks the operator role again.
        request: the form's change, ``None`` while the form cannot make one (the reason
            is shown by the form).
        found: the page's ``ControlsView`` (whether the controls file owns the filter).
        refusal: why ``actor`` may not change controls: buttons disabled, reason shown.
        noun: what the buttons name: ``"pause"`` → ``"Preview pause"``, ``"Confirm pause"``.
    """
    preview_key, result_key, confirm_key = f"{key}.preview", f"{key}.result", f"{key}.confirmed"
    outbox = actions_db.settings.fleet_outbox  # a preview of another outbox is never confirmed
    stored: HoldPreview | None = st.session_state.get(preview_key)
    if stored is not None and (stored.request, stored.outbox) != (request, outbox):
        del st.session_state[preview_key]
        stored = None
    confirmed: HoldPreview | None = st.session_state.pop(confirm_key, None)
    if confirmed is not None:
        if (confirmed.request, confirmed.outbox) == (request, outbox):
            _apply(key, actions_db, confirmed.request, actor=actor)  # reruns unless refused
            stored = None
        else:
            st.warning(
                f"Not applied: the form changed after the preview of "
                f"{format.md_code(confirmed.request.event_type_filter)}. Nothing was changed: "
                "preview again.",
                icon=":material/published_with_changes:",
            )
            log.warning(
                "%s by %s not applied: the form changed after its preview", noun, actor.name
            )
    if st.button(
        f"Preview {noun}", key=f"{key}.preview_button", disabled=request is None or bool(refusal)
    ):
        assert request is not None
        held = flow.preview_hold(db, request.event_type_filter)
        stored = HoldPreview(request, held, found.file_owned(request.event_type_filter), outbox)
        st.session_state[preview_key] = stored
        st.session_state.pop(result_key, None)
    _show_result(st.session_state.get(result_key), actor)
    if stored is None:
        return
    _show_preview(stored, found)
    st.button(
        f"Confirm {noun} of {format.md_code(stored.request.event_type_filter)}",
        key=f"{key}.confirm",
        type="primary",
        disabled=bool(refusal),
        on_click=_confirm,
        args=(confirm_key, stored),
    )


def flows_for(
    ctx: PageContext, found: controls.ControlsView, refusal: str | None
) -> Callable[..., None]:
    """``change_flow`` bound to the page's databases, actor, view and refusal:
    ``flows_for(ctx, found, refusal)("controls.pause", request=…, noun="pause")``."""
    return partial(
        change_flow,
        db=ctx.db,
        actions_db=ctx.actions_db,
        actor=ctx.identity,
        found=found,
        refusal=refusal,
    )


def _show_preview(stored: HoldPreview, found: controls.ControlsView) -> None:
    request = stored.request
    total = sum(stored.held.values())
    name = format.md_code(request.event_type_filter)
    if total:
        st.markdown(
            f"{name} matches **{total:,}** due {format.inflect(total, 'row')} now, of "
            f"{format.plural(len(stored.held), 'event type')}:"
        )
        format.grid(
            [{"event_type": t, "due_rows": n} for t, n in stored.held.items()],
            PREVIEW_COLUMNS,
            key=f"controls.{request.action}.preview_table",
        )
    else:
        st.markdown(f"{name} matches no due row now.")
    if request.action == "pause":
        st.caption("A pause holds these rows: they stay pending and keep their attempts.")
    if stored.file_owned:
        lasts = request.pause_for or request.override_seconds or DEFAULT_OVERRIDE_SECONDS
        until = request.changes.get("paused_until")
        end = format.instant(until) if until else f"{format.duration(lasts)} after the confirm"
        st.warning(
            f"{name} is {controls.FILE_OWNED}: this change is an override that expires "
            f"({end}); then the file's settings are in force again. Re-applying the file "
            "does not clear it.",
            icon=":material/schedule:",
        )


def _confirm(confirm_key: str, stored: HoldPreview) -> None:
    """The confirm button's callback: remember the preview it named for the next run."""
    st.session_state[confirm_key] = stored


def _apply(key: str, db: Database, request: ControlRequest, *, actor: Identity) -> None:
    """Apply a confirmed request, keep its result and rerun; or show why it was refused."""
    st.session_state.pop(f"{key}.preview", None)
    try:
        result = flow.change(
            db,
            request.event_type_filter,
            actor=actor,
            action=request.action,
            changes=request.resolved(db),
            override_seconds=request.override_seconds,
        )
        _silences(db, request, result, actor)
    except OutboxMonitorError as error:
        st.session_state.pop(f"{key}.result", None)
        banners.show(error, stop=False)
        return
    finally:
        controls.clear_after_change()
    st.session_state[f"{key}.result"] = result
    st.rerun()


def _silences(
    db: Database, request: ControlRequest, result: flow.ControlChange, actor: Identity
) -> None:
    """A pause's silences of the rules it trips, until resumed; a resume ends them."""
    now = database_now(db)
    if request.action == "pause" and request.silence:
        until = result.pause_ends
        ids = silence_for_pause(
            db, list(request.silence), request.event_type_filter, until=until, now=now, actor=actor
        )
        names = ", ".join(item.rule.name for item in request.silence)
        st.session_state[SILENCED_KEY] = f"Silenced until resumed: {names} ({len(ids)} silences)."
    elif request.action == "resume":
        ended = end_pause_silences(db, request.event_type_filter, now=now, actor=actor)
        if ended:
            st.session_state[SILENCED_KEY] = f"Ended the pause's {len(ended)} silences."
    clear_silences()


def _show_result(result: flow.ControlChange | None, actor: Identity) -> None:
    if result is None:
        return
    name = format.md_code(result.event_type_filter)
    done = DONE.get(result.action, result.action.capitalize())
    text = f"{done} {name}: now {format.md_text(describe(result.after))}."
    if not result.changed:
        text = f"{name} was already so: nothing changed (audited)."
    st.success(text, icon=":material/check_circle:")
    if result.barrier_note:
        st.warning(format.md_text(result.barrier_note), icon=":material/warning:")
    parts = [f"audited as {format.md_code(actor.name)}"]
    if result.expires_at is not None:
        parts.insert(
            0,
            f"an override of the controls file until {format.instant(result.expires_at)}",
        )
    st.caption(" · ".join(parts))
    silenced = st.session_state.pop(SILENCED_KEY, None)
    if silenced:
        st.caption(silenced)
