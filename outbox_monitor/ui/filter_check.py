"""The sidebar's event-type filter checked against the event types that exist (issue 30 item
7): a filter that matches none of them — a LIKE pattern matching no type, an exact type never
seen — says so above every page (its figures and lists are then of no rows, not a healthy
type), with the closest known types to switch to in one click.

The known types are ``loaders.known_event_types``: the planner's statistics of the
``event_type`` column, the backlog's types, the dead letters' types and the last hour's
samples — read without scanning the outbox's history.
"""

import difflib
from collections.abc import Sequence

import streamlit as st

from outbox_monitor.flow.model import matches
from outbox_monitor.store.db import Database
from outbox_monitor.store.filters import EVENT_TYPE_KEY_CHARS
from outbox_monitor.ui import format, loaders
from outbox_monitor.ui.state import EVENT_TYPE_PARAM

SUGGESTIONS = 3
"""Closest known types offered, at most."""
SIMILARITY = 0.7
"""``difflib``'s ratio a known type must reach to be offered (0–1)."""
LISTED = 5
"""Known types listed when none is close."""


def matches_none(event_filter: str, known: Sequence[str]) -> bool:
    """Whether the filter (exact, or LIKE with ``%``: ``flow.model.matches``, as the SQL
    filter) matches none of the ``known`` event types."""
    return not any(matches(event_filter, event_type) for event_type in known)


def closest(event_filter: str, known: Sequence[str], n: int = SUGGESTIONS) -> list[str]:
    """The known event types closest to the filter (``difflib.get_close_matches``, case
    ignored), at most ``n``, closest first. A LIKE pattern is compared with the patterns of
    the known types' prefixes too (``notification.%`` for ``notification.email``), and
    those are offered as patterns."""
    candidates = list(known)
    if "%" in event_filter:
        prefixes = {
            event_type.rsplit(".", 1)[0] + ".%" for event_type in known if "." in event_type
        }
        candidates += sorted(prefixes - set(known))
    lowered = {candidate.lower(): candidate for candidate in candidates}
    found = difflib.get_close_matches(event_filter.lower(), list(lowered), n=n, cutoff=SIMILARITY)
    return [lowered[text] for text in found]


def _use(event_type: str) -> None:
    st.session_state[EVENT_TYPE_PARAM] = event_type


def show(db: Database, event_filter: str | None) -> None:
    """A warning above the page when the sidebar's event-type filter matches no known event
    type (``matches_none`` over ``loaders.known_event_types``): what was looked at, the
    closest known types (``closest``) each with a button that sets the filter to it, or a
    few known types when none is close. Nothing without a filter, when it matches one, or
    when it is longer than ``EVENT_TYPE_KEY_CHARS`` (the dead letters' types are known by
    their first characters).

    Raises:
        The connector's errors (shown by the page's ``banners.guarded``).
    """
    if not event_filter or len(event_filter) > EVENT_TYPE_KEY_CHARS:
        return  # a longer type: the dead letters' types are known by their first characters
    known = loaders.known_event_types(db)
    if not matches_none(event_filter, known):
        return
    near = closest(event_filter, known)
    if near:
        hint = "Did you mean " + " or ".join(format.md_code(name) for name in near) + "?"
    elif known:
        listed = ", ".join(format.md_code(name) for name in known[:LISTED])
        more = f" and {len(known) - LISTED} more" if len(known) > LISTED else ""
        hint = f"Known event types: {listed}{more}."
    else:
        hint = "No event type is known yet: the outbox has no rows waiting and no statistics."
    st.warning(
        f"**No event type matches {format.md_code(event_filter)}**: the figures and lists "
        "below are of no rows (looked at: rows waiting now, dead letters, the planner's "
        f"statistics of `event_type` and the last hour's samples). {hint}",
        icon=":material/filter_alt_off:",
    )
    if near:
        columns = st.columns(len(near) + 2)
        for column, name in zip(columns, near, strict=False):
            column.button(
                f"Show {format.md_text(name)}",
                key=f"filter_check.use.{name}",
                on_click=_use,
                args=(name,),
                icon=":material/filter_alt:",
            )
