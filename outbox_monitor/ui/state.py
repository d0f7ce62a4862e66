"""Dashboard state: settings, the one Database of the process, the shared sidebar filters.

The sidebar filters (event type, window, refresh) are widgets bound to URL query parameters
(``bind="query-params"``), both ways: ``…/dead_letters?event_type=order.paid&window=6h``
opens that page pre-filtered, and changing a filter updates the URL.
"""

import os
import runpy
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from functools import lru_cache

import streamlit as st
from streamlit.runtime.scriptrunner import get_script_run_ctx

from outbox_monitor.access import Identity
from outbox_monitor.config.fleet import Fleet, load_fleet
from outbox_monitor.config.settings import Settings, load_settings
from outbox_monitor.durations import parse_duration
from outbox_monitor.logs import escape_controls
from outbox_monitor.store.db import Database
from outbox_monitor.store.schema import check_outbox_table
from outbox_monitor.ui import access, deep_link, format, inputs

OUTBOX_PARAM = "outbox"
EVENT_TYPE_PARAM = "event_type"
WINDOW_PARAM = "window"
REFRESH_PARAM = "refresh"
WINDOW_CHOICES = ("15m", "1h", "6h", "24h")
REFRESH_CHOICES = ("5s", "10s", "30s", "1m")
MIN_REFRESH_SECONDS = 5.0
IGNORED_SHOWN = 80
"""An ignored URL parameter's value is shown up to this many characters."""
"""Live tiles refresh at most this often; the loaders' cache TTL stays below it."""
_TABLE_CHECKED = "_outbox_monitor.table_checked"
_run = threading.local()


@dataclass(frozen=True)
class Filters:
    """The shared sidebar filters: ``event_type`` (``None`` = all; exact or LIKE with ``%``),
    ``window`` and ``refresh`` in seconds, and the window as its label (``"1h"``)."""

    event_type: str | None
    window: float
    window_label: str
    refresh: float


@dataclass(frozen=True)
class PageContext:
    """What every page needs: settings, the Database of reads, the Database of actions
    (``OUTBOX_MONITOR_ACTIONS_DSN``; the same pool when unset), the filters and who is
    looking (``identity``, checked again by every action function)."""

    settings: Settings
    db: Database
    actions_db: Database
    filters: Filters
    identity: Identity


def settings() -> Settings:
    """The settings from the environment (``OUTBOX_MONITOR_*``), validated once per
    distinct environment (every run reads them twice; validating takes milliseconds).

    Raises:
        ConfigError: an invalid variable, named in the message (never cached).
    """
    return _settings_of(tuple(sorted(os.environ.items())))


@lru_cache(maxsize=4)
def _settings_of(environment: tuple[tuple[str, str], ...]) -> Settings:
    return load_settings()


def fleet() -> Fleet:
    """The outboxes this dashboard shows (``fleet.load_fleet``: ``OUTBOX_MONITOR_OUTBOXES``, or
    the settings' one outbox), read once per distinct environment.

    Raises:
        ConfigError: an invalid setting or fleet file (``FleetError``: outbox and field named).
    """
    return _fleet_of(tuple(sorted(os.environ.items())))


@lru_cache(maxsize=4)
def _fleet_of(environment: tuple[tuple[str, str], ...]) -> Fleet:
    return load_fleet(settings())


def outbox_settings(*, linked: bool = False) -> Settings:
    """The settings of the outbox chosen in the sidebar (``?outbox=NAME``; ``default_outbox``
    when none or an unknown one is chosen — the sidebar says so), or of the only one.

    Args:
        linked: the URL's outbox first, when it names one (before the sidebar is drawn: a
            link just followed has not set the sidebar's choice yet).
    """
    outboxes = fleet()
    choices = [st.session_state.get(OUTBOX_PARAM)]
    if linked:
        choices.insert(0, st.query_params.get(OUTBOX_PARAM))
    for chosen in choices:
        if chosen in outboxes.names:
            return outboxes.get(chosen).settings
    return outboxes.get(default_outbox()).settings


def offered_outboxes() -> list[str]:
    """The sidebar's outboxes: those this session may view (``access.may_view``; every one in
    local mode), and the one the URL names (its pages then say there is no role there)."""
    linked = st.query_params.get(OUTBOX_PARAM)
    return [
        outbox.name
        for outbox in fleet().outboxes
        if outbox.name == linked or access.may_view(outbox.settings)
    ]


def default_outbox() -> str:
    """The outbox shown when none is chosen: the fleet's first this session may view
    (``access.first_viewable``: a fleet file may map roles per outbox), else its first."""
    viewable = access.first_viewable(fleet())
    return viewable.name if viewable is not None else fleet().names[0]


def _role_mapping(current: Settings) -> tuple:
    return current.admins, current.operators, current.viewers


def _name_of(current: Settings) -> str:
    return next((o.name for o in fleet().outboxes if o.settings == current), current.table)


def _close(db: Database) -> None:
    db.close()


@st.cache_resource(show_spinner=False, on_release=_close)
def _open_database(key: str, _settings: Settings) -> Database:
    return Database(_settings)


def database(current: Settings) -> Database:
    """The process's one ``Database`` (pool) for these settings, made on first use.

    Settings that differ (another DSN or table) get their own; ``st.cache_resource.clear()``
    closes every pool.
    """
    return _open_database(current.model_dump_json(), current)


def actions_database(current: Settings) -> Database:
    """The ``Database`` of operator actions: ``OUTBOX_MONITOR_ACTIONS_DSN``, else the read
    DSN (then it is the same pool as ``database``)."""
    return database(current.model_copy(update={"dsn": current.actions_target}))


def check_table_once(db: Database) -> None:
    """Check the outbox table (``schema.check_outbox_table``) once per browser session.

    A failed check is repeated on the next run, so a fixed table is picked up at once.

    Raises:
        TableMissing, ColumnsMissing, SchemaNotInitialised, DatabaseUnavailable,
        QueryTimeout: as ``check_outbox_table``.
    """
    key = db.settings.model_dump_json()
    if st.session_state.get(_TABLE_CHECKED) == key:
        return
    check_outbox_table(db)
    st.session_state[_TABLE_CHECKED] = key


def _choices(
    standard: tuple[str, ...], default_seconds: float, extra: tuple[str, ...] = ()
) -> tuple[list[str], str]:
    labels = list(standard)
    for label in extra:
        if all(parse_duration(label) != parse_duration(known) for known in labels):
            labels.append(label)
    labels.sort(key=parse_duration)
    default = format.duration_label(default_seconds)
    matching = [label for label in labels if parse_duration(label) == default_seconds]
    if matching:
        return labels, matching[0]
    labels.append(default)
    labels.sort(key=parse_duration)
    return labels, default


_PAGE = "_outbox_monitor.page"


def _follow_link(page: str, choices: dict[str, Sequence[str] | None]) -> None:
    """On arriving at another page, let the link's query parameters win over the filters
    this session had (``st.page_link(query_params=…)`` keeps the session: a bound widget would
    otherwise keep its old value and drop the link's): each of ``choices`` present in the
    URL, and one of its choices (``None``: any text), is set before its widget is drawn."""
    if st.session_state.get(_PAGE) == page:
        return
    st.session_state[_PAGE] = page
    for name, allowed in choices.items():
        value = st.query_params.get(name)
        if value is not None and (allowed is None or value in allowed):
            st.session_state[name] = value


def sidebar(
    default_window: float,
    default_refresh: float,
    extra_windows: tuple[str, ...] = (),
    *,
    page: str = "",
) -> Filters | None:
    """Render the shared sidebar filters and return their values.

    Args:
        default_window: seconds, from the settings (shown when the URL has no ``window``).
        default_refresh: seconds, from the settings; raised to ``MIN_REFRESH_SECONDS``.
        extra_windows: more window choices (``"30m"``), e.g. every window of the alert
            rules, so that a link from a Slack alert opens with its window.
        page: the page being drawn (its ``url_path``): on arriving at another one, the
            link's filters win (``_follow_link``).

    Returns:
        The current ``Filters``, or ``None`` when the event type cannot be used (NUL,
        unpaired surrogate, too long: see ``inputs.parse_text``); the reason is then shown
        under the input.
    """
    windows, window_default = _choices(WINDOW_CHOICES, default_window, extra_windows)
    refreshes, refresh_default = _choices(
        REFRESH_CHOICES, max(default_refresh, MIN_REFRESH_SECONDS)
    )
    names, outbox_default = offered_outboxes(), default_outbox()
    _follow_link(
        page,
        {
            EVENT_TYPE_PARAM: None,
            WINDOW_PARAM: windows,
            REFRESH_PARAM: refreshes,
            OUTBOX_PARAM: names,
        },
    )
    ignored = [
        (name, value, labels, default)
        for name, labels, default in (
            (WINDOW_PARAM, windows, window_default),
            (REFRESH_PARAM, refreshes, refresh_default),
            (OUTBOX_PARAM, names, outbox_default),
        )
        if (value := st.query_params.get(name)) is not None and value not in labels
    ]
    with st.sidebar:
        if len(fleet().outboxes) > 1:
            # no default: a bound widget leaves its default out of the URL, and the outbox is
            # in every URL (a copied link opens the same one, whatever the file's order)
            if st.session_state.get(OUTBOX_PARAM) not in names:
                st.session_state[OUTBOX_PARAM] = outbox_default
            st.selectbox(
                "Outbox",
                names,
                index=None,
                key=OUTBOX_PARAM,
                bind="query-params",
                help="The outbox every page shows and acts on (the fleet file's "
                "OUTBOX_MONITOR_OUTBOXES).",
            )
        st.text_input(
            "Event type",
            key=EVENT_TYPE_PARAM,
            bind="query-params",
            placeholder="all (e.g. order.paid or payment.%)",
            help="An exact event type, or a LIKE pattern with % (in which _ and \\ are "
            "literal). Applies to every figure, list and action.",
        )
        st.selectbox(
            "Window",
            windows,
            index=windows.index(window_default),
            key=WINDOW_PARAM,
            bind="query-params",
            help="Latency, throughput and failure figures count rows processed in this window.",
        )
        st.selectbox(
            "Refresh every",
            refreshes,
            index=refreshes.index(refresh_default),
            key=REFRESH_PARAM,
            bind="query-params",
            help="How often the live figures of the Overview reload.",
        )
        for name, value, labels, default in ignored:
            warn_ignored_param(name, value, labels, st.session_state.get(name) or default)
        try:
            return filters()
        except ValueError as error:
            st.error(format.md_text(_sentence(error)), icon=":material/error:")
            return None


def warn_ignored_param(name: str, value: str, choices: list[str], used: str) -> None:
    """A small warning that a URL parameter was ignored: ``?window=abc`` → Ignored
    ``window=abc`` from the link: not one of 15m, 1h, 6h, 24h; showing ``1h``. The value is
    shown with its control characters escaped, cut at ``IGNORED_SHOWN`` characters."""
    shown = escape_controls(value)
    if len(shown) > IGNORED_SHOWN:
        shown = shown[: IGNORED_SHOWN - 1] + "…"
    st.warning(
        f"Ignored {format.md_code(f'{name}={shown}')} from the link: not one of "
        f"{', '.join(choices)}; showing {format.md_code(used)}.",
        icon=":material/link_off:",
    )


def filters() -> Filters:
    """The current sidebar filters, read from the session (also inside fragment reruns).

    Raises:
        ValueError: the event type cannot be held by Postgres (``inputs.parse_text``).
    """
    event_type = inputs.parse_text(
        st.session_state.get(EVENT_TYPE_PARAM), what="the event-type filter"
    )
    window_label = st.session_state.get(WINDOW_PARAM) or "1h"
    refresh_label = st.session_state.get(REFRESH_PARAM) or "10s"
    return Filters(
        event_type=event_type,
        window=parse_duration(window_label),
        window_label=window_label,
        refresh=max(parse_duration(refresh_label), MIN_REFRESH_SECONDS),
    )


def _sentence(error: ValueError) -> str:
    text = str(error)
    return text[:1].upper() + text[1:]


@contextmanager
def dashboard_run(identity: Identity, mapped_by: Settings | None = None) -> Iterator[None]:
    """Mark the block (``page.run()`` in dashboard.py) as a page run through dashboard.py,
    by ``identity`` (found by ``ui.access.identity`` with the role mapping of ``mapped_by``,
    default the process's settings)."""
    _run.active = True
    _run.identity = identity
    _run.mapping = _role_mapping(mapped_by or settings())
    try:
        yield
    finally:
        _run.active = False
        _run.identity = None


def ensure_dashboard_run() -> None:
    """Run dashboard.py in place when Streamlit started a page without it, then stop.

    Streamlit decides once per process, before its first script run, whether the app uses
    the legacy ``pages/`` folder discovery; with our ``pages/`` folder present, that first
    run (and every run until ``st.navigation`` is called) executes the page of the URL
    directly — no sidebar, no table check. Running the entry point here, in the same run,
    calls ``st.navigation`` (which ends that mode) and renders this page through it, with
    the run's widget events (a button click) intact. AppTest starts every run that way.
    """
    if getattr(_run, "active", False):
        return
    ctx = get_script_run_ctx()
    if ctx is None:
        return
    runpy.run_path(ctx.main_script_path, run_name="__main__")
    st.stop()


def context() -> PageContext:
    """Settings, Databases, filters and identity for the page being rendered; every page
    calls it first (it makes sure the page runs through dashboard.py, see
    ``ensure_dashboard_run``, where the identity was found). The identity's role is its
    role on the chosen outbox (``ui.access.for_outbox``: a fleet file may map roles per
    outbox), which every action function checks again; without one the page stops.

    An event-type filter that Postgres cannot hold stops the page with the reason (the
    sidebar shows it under the input too): no figure, list or action runs on it.

    Raises:
        ConfigError: invalid settings (shown as a banner by ``banners.guarded``).
    """
    ensure_dashboard_run()
    current = outbox_settings()
    try:
        chosen = filters()
    except ValueError as error:
        st.error(
            f"{format.md_text(_sentence(error))}: change it in the sidebar to see this page.",
            icon=":material/filter_alt_off:",
        )
        st.stop()
    identity = _run.identity
    if _role_mapping(current) != _run.mapping:  # the outbox maps roles of its own
        identity = access.for_outbox(identity, current)
    if identity is None:
        st.error(
            f"{format.md_code(_run.identity.name)} has no role on the outbox "
            f"{format.md_code(_name_of(current))}: choose another outbox in the sidebar, or ask "
            "an admin to add you to its access in the fleet file.",
            icon=":material/lock:",
        )
        st.stop()
    return PageContext(current, database(current), actions_database(current), chosen, identity)


def open_overview(
    overview: st.Page, pages: Sequence[st.Page], *, fleet: st.Page | None = None
) -> None:
    """Switch the dashboard's root ``/`` to the Overview's own URL ``/overview``, its query
    kept (``/?window=1h`` → ``/overview?window=1h``): the root is only the default page
    Streamlit needs, the Overview has an address of its own (issue 15 item 8). Right after
    an OIDC sign-in (whose callback lands on ``/``), to the page and query the sign-in
    started from instead (``deep_link.recall``).

    Args:
        overview: the Overview's ``st.Page``.
        pages: the pages this identity may open.
        fleet: the Fleet page of a fleet of several outboxes: the landing page then, unless
            the URL names an outbox (``/?outbox=billing`` opens billing's Overview).

    Raises:
        Streamlit's rerun signal (``st.switch_page``): nothing after the call runs.
    """
    linked = deep_link.recall(pages)
    if linked is not None:
        st.switch_page(linked[0], query_params=linked[1])
    query = {key: st.query_params.get_all(key) for key in st.query_params}
    landing = fleet if fleet is not None and OUTBOX_PARAM not in query else overview
    # a parameter bound to a sidebar widget (the outbox chosen on a page the new outbox's
    # role does not list: Streamlit falls back to the root) follows its widget by itself;
    # setting it would raise
    kept = {key: value for key, value in query.items() if key not in st.session_state}
    st.switch_page(landing, query_params=kept)
