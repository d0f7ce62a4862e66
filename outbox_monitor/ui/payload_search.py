"""The Events page's payload search (issue 15 item 6): the form, the plan's verdict with its
index advice, and keyset pages of matches, their errors redacted.

Nothing here reads the database while the page renders: the search runs when the form is
submitted (a callback: access check, EXPLAIN, the first page) and when a page button is
pressed; the results stay in the session until the next search.
"""

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime

import streamlit as st

from outbox_monitor.browse.payload_plan import (
    SearchPlan,
    describe_advice,
    describe_plan,
    explain_search,
)
from outbox_monitor.browse.payload_search import (
    Cursor,
    PayloadSearch,
    SearchInputError,
    SearchPage,
    check_access,
    payload_search,
    search_payloads,
)
from outbox_monitor.errors import OutboxMonitorError
from outbox_monitor.privacy.redaction import ERROR_HEAD_CHARS
from outbox_monitor.ui import banners, format, inputs, loaders
from outbox_monitor.ui.state import PageContext

PAGE_SIZE = 50
CONTAINS = "JSON containment"
KEY_PATH = "Key path equals"
MODE = "payload_search.mode"
DOCUMENT = "payload_search.document"
PATH = "payload_search.path"
VALUE = "payload_search.value"
SINCE = "payload_search.since"
UNTIL = "payload_search.until"
RESULTS = "payload_search.results"
INPUT_ERROR = "payload_search.input_error"
DEFAULT_SINCE = "1h"


@dataclass
class _Results:
    """The session's last search, on the fleet's ``outbox`` (``""`` without a fleet file): its
    plan, the keyset cursors of the pages after the first, the page shown, or the error that
    stopped it."""

    search: PayloadSearch
    outbox: str = ""
    plan: SearchPlan | None = None
    cursors: list[Cursor] = field(default_factory=list)
    page: SearchPage | None = None
    error: OutboxMonitorError | None = None


def _time(text: str | None, now: datetime, name: str) -> datetime | None:
    try:
        return inputs.parse_time(text, now)
    except ValueError as error:
        raise SearchInputError(name, str(error)) from None


def _fetch(ctx: PageContext, results: _Results) -> None:
    """Read the page at the last cursor into ``results`` (or the error that stopped it)."""
    try:
        results.page = search_payloads(
            ctx.db,
            results.search,
            identity=ctx.identity,
            redactor=loaders.redactor(ctx.db),
            actions_db=ctx.actions_db,
            before=results.cursors[-1] if results.cursors else None,
            limit=PAGE_SIZE,
            advice=results.plan.advice if results.plan else None,
        )
        results.error = None
    except OutboxMonitorError as error:
        results.page, results.error = None, error
    if results.page is not None and results.page.audit_id is not None:
        loaders.clear_audit()


def _submit(ctx: PageContext) -> None:
    """The form's callback: validate, check access, plan, read the first page."""
    state = st.session_state
    state.pop(RESULTS, None)
    state.pop(INPUT_ERROR, None)
    containment = state.get(MODE, CONTAINS) == CONTAINS
    try:
        now = loaders.database_now(ctx.db)
        since = _time(state.get(SINCE), now, "created since")
        until = _time(state.get(UNTIL), now, "created until") or now
        search = payload_search(
            since=since,
            until=until,
            document=(state.get(DOCUMENT) or "") if containment else None,
            path=None if containment else (state.get(PATH) or ""),
            value=state.get(VALUE),
            event_type=ctx.filters.event_type,
        )
    except (SearchInputError, OutboxMonitorError) as error:  # or no database clock
        state[INPUT_ERROR] = error
        return
    results = _Results(search, ctx.settings.fleet_outbox)
    state[RESULTS] = results
    try:
        check_access(search, loaders.redactor(ctx.db), ctx.identity)
        results.plan = explain_search(ctx.db, search, limit=PAGE_SIZE)
    except OutboxMonitorError as error:
        results.error = error
        return
    _fetch(ctx, results)


def _older(ctx: PageContext) -> None:
    results: _Results = st.session_state[RESULTS]
    if results.page is not None and results.page.next_cursor is not None:
        results.cursors.append(results.page.next_cursor)
        _fetch(ctx, results)


def _newest(ctx: PageContext) -> None:
    results: _Results = st.session_state[RESULTS]
    results.cursors.clear()
    _fetch(ctx, results)


def _form(ctx: PageContext) -> None:
    with st.form("payload_search.form"):
        st.radio("Match", (CONTAINS, KEY_PATH), key=MODE, horizontal=True)
        st.text_area(
            "JSON document",
            key=DOCUMENT,
            placeholder='{"customer": {"id": "42"}}',
            help="Rows whose payload contains this JSON object (payload @> document): every "
            "key and value given must be there; arrays match by their elements.",
        )
        columns = st.columns(2)
        columns[0].text_input(
            "Key path",
            key=PATH,
            placeholder="customer.id",
            help="Keys separated by dots (a number is an array index: items.0.sku), or a "
            'JSON array for keys holding dots: ["a.b", "c"].',
        )
        columns[1].text_input(
            "Value",
            key=VALUE,
            placeholder="42",
            help="Compared with the path's value as text (payload #>> path = value): a "
            "string without quotes, a number as written, true or false.",
        )
        columns = st.columns(2)
        columns[0].text_input(
            "Created since", value=DEFAULT_SINCE, key=SINCE, placeholder="1h, 30m or ISO 8601"
        )
        columns[1].text_input("Created until", key=UNTIL, placeholder="empty = now")
        st.form_submit_button(
            "Search payloads",
            key="payload_search.submit",
            on_click=_submit,
            args=(ctx,),
            icon=":material/manage_search:",
        )


def _plan(results: _Results, table: str) -> None:
    plan = results.plan
    if plan is None:
        return
    text = format.md_text(describe_plan(plan, results.search, table))
    if not plan.slow:
        st.caption(text)
        return
    st.warning(text, icon=":material/speed:")
    if plan.advice is not None:
        st.markdown("The index that would serve it:")
        st.code(plan.advice, language="sql", wrap_lines=True)
        st.caption(format.md_text(describe_advice(plan)))


def section(ctx: PageContext, columns: Sequence[format.Column]) -> int | None:
    """Render the payload search: the form, then the last search's plan and page.

    Args:
        ctx: the page's context (the read and actions Databases, who is looking, the
            sidebar's event type, which the search also applies).
        columns: the list columns to show (the Events list's).

    Returns:
        The id of the match selected in the results, else ``None``.
    """
    st.subheader("Payload search")
    st.caption(
        "By JSON containment or a key path's value, within a created_at range, newest first. "
        "It runs when you press Search; the plan is checked first. Event type: "
        f"{format.md_code(ctx.filters.event_type) if ctx.filters.event_type else 'all'}."
    )
    _form(ctx)
    problem = st.session_state.get(INPUT_ERROR)
    if isinstance(problem, SearchInputError):
        st.error(
            format.md_text(str(problem)[:1].upper() + str(problem)[1:]), icon=":material/error:"
        )
    elif isinstance(problem, OutboxMonitorError):
        banners.show(problem, stop=False)
    results: _Results | None = st.session_state.get(RESULTS)
    if results is None or problem is not None or results.outbox != ctx.settings.fleet_outbox:
        return None  # no search yet, or one of the outbox chosen before this one
    _plan(results, ctx.db.table_name)
    if results.error is not None:
        banners.show(results.error, stop=False)
        return None
    page = results.page
    if page is None:
        return None
    if page.audit_id is not None:
        st.caption(
            f"This search names what redaction hides: audit row {page.audit_id} records it "
            f"with your name ({format.md_code(ctx.identity.name)})."
        )
    shown = loaders.redactor(ctx.db).redact_rows(page.rows, head=ERROR_HEAD_CHARS)
    search = results.search
    st.caption(
        f"{matches_header(len(results.cursors) * PAGE_SIZE, len(shown), page.has_older)} "
        f"created from {format.instant(search.since)} to {format.instant(search.until)}, "
        f"newest first · page {len(results.cursors) + 1}"
    )
    selection = format.grid(shown, columns, key="payload_search.table", detail=False)
    buttons = st.columns([1, 1, 6])
    buttons[0].button(
        "Newest",
        key="payload_search.newest",
        on_click=_newest,
        args=(ctx,),
        disabled=not results.cursors,
        width="stretch",
    )
    buttons[1].button(
        "Older",
        key="payload_search.older",
        on_click=_older,
        args=(ctx,),
        disabled=page.next_cursor is None,
        width="stretch",
    )
    chosen = [i for i in selection.selection.rows if i < len(shown)]
    return shown[chosen[0]]["id"] if chosen else None


def matches_header(before: int, shown: int, more: bool) -> str:
    """The page's count over every match, never the page's alone (issue 30 item 8): the total
    once the last page is reached (``"2 matches"``, ``"55 matches (51–55 shown)"``), else
    what is known of it (``"More than 50 matches (1–50 shown)"``): the search reads the range
    a page at a time, and counting every match would read the whole range.

    Args:
        before: matches on the pages before this one.
        shown: matches on this page.
        more: an older page exists.
    """
    seen = before + shown
    total = (
        f"More than {format.plural(seen, 'match', 'matches')}"
        if more
        else format.plural(seen, "match", "matches")
    )
    return total if not (before or more) else f"{total} ({before + 1:,}–{seen:,} shown)"
