"""outbox-monitor dashboard: the page list, the shared sidebar, the start-up table check.

Run with ``outbox-monitor dashboard`` (127.0.0.1, and the sign-in checks of
``serve.check_exposure``). The only caller
of ``st.navigation`` for the pages (``ui.access`` and ``ui.banners`` list only their own
stand-alone page); every page is listed here, under the least role that opens it.
Filters live in the URL:
``…/dead_letters?event_type=order.paid&window=6h`` opens that page pre-filtered.
"""

import streamlit as st

from outbox_monitor.access import Role
from outbox_monitor.errors import ConfigError
from outbox_monitor.logs import configure_logging
from outbox_monitor.ui import (
    access,
    alert_rules,
    banners,
    deep_link,
    filter_check,
    format,
    state,
    static_assets,
    typed_paths,
)

configure_logging()  # once per process: one line per record, outbox text escaped
st.set_page_config(page_title="outbox-monitor", page_icon=":material/outbox:", layout="wide")
static_assets.recover_failed_stylesheets()  # a stylesheet lost under load is fetched again

# Each page under the least role that may open it (docs/security.md). A comment, not a
# docstring: Streamlit's magic would write a bare string literal onto every page.
# Streamlit serves its default page at "/" only (its url_path answers "Page not found"), so
# the Overview is an ordinary page at /overview and the default page at "/" only sends
# there, its query kept (state.open_overview).
OVERVIEW = st.Page(
    "pages/overview.py", title="Overview", url_path="overview", icon=":material/monitoring:"
)
# every outbox of a fleet file in one table, each row linking into its Overview; the landing
# page of a fleet of several (a fleet of one has no such page)
FLEET = st.Page("pages/fleet.py", title="Fleet", url_path="fleet", icon=":material/hub:")
PAGES = {
    Role.viewer: [
        st.Page(
            lambda: state.open_overview(OVERVIEW, allowed, fleet=FLEET if several else None),
            title="Overview",
            url_path="",
            default=True,
            visibility="hidden",
        ),
        FLEET,
        OVERVIEW,
        st.Page("pages/events.py", title="Events", url_path="events", icon=":material/list:"),
        st.Page(
            "pages/dead_letters.py",
            title="Dead letters",
            url_path="dead_letters",
            icon=":material/report:",
        ),
        st.Page(
            "pages/alerts.py", title="Alerts", url_path="alerts", icon=":material/notifications:"
        ),
        # viewers see what holds rows; the forms are disabled for them (operator changes)
        st.Page("pages/controls.py", title="Controls", url_path="controls", icon=":material/tune:"),
        # commands to end a horizon holder are shown, never run: a viewer may read them
        st.Page(
            "pages/health.py", title="Health", url_path="health", icon=":material/monitor_heart:"
        ),
        # each locked_by with its rows in hand; no row's payload is shown
        st.Page(
            "pages/workers.py", title="Workers", url_path="workers", icon=":material/engineering:"
        ),
        # what changed when: alert transitions, audited changes (their filter for operators
        # only), error groups first seen, breaker transitions; Slack alerts link here
        st.Page(
            "pages/timeline.py", title="Timeline", url_path="timeline", icon=":material/timeline:"
        ),
    ],
    Role.operator: [
        st.Page("pages/actions.py", title="Actions", url_path="actions", icon=":material/build:"),
    ],
}

try:
    settings = state.settings()
    state.fleet()  # a fleet file that cannot be used stops here, named like a setting
except ConfigError as error:
    # Without valid settings the sign-in mode is unknown: show the error and nothing else.
    banners.stop_on_config_error(error)
several = len(state.fleet().outboxes) > 1
if not several:
    PAGES[Role.viewer].remove(FLEET)
# the role on the outbox of the URL, else on the first the person may view (a fleet file may
# map roles per outbox); every page's context checks it again for the outbox it reads
# (state.context)
linked = access.admitting(state.fleet(), state.outbox_settings(linked=True))
identity = access.identity(linked, [p.url_path for pages in PAGES.values() for p in pages])
allowed = access.pages_for(identity, PAGES)
# a path typed as /dead-letters or /Overview: a hidden page under it sends on to the page
typed = typed_paths.typed_path_page(allowed, PAGES)
page = st.navigation([*allowed, typed] if typed else allowed)
if page.url_path == "" or page is typed:
    page.run()  # the root (off to /overview) or a typed path, before anything is drawn
deep_link.forget()  # a link kept through the sign-in was followed: the browser drops it
chosen = state.sidebar(
    settings.window,
    settings.refresh,
    tuple(alert_rules.rule_windows(alert_rules.load_ruleset().ruleset)),
    page=page.url_path,
)

# The title is the dashboard's, so that it stays above a banner (database down, table
# missing) whatever failed; pages start below it.
st.title(page.title)
access.sidebar_account(identity)
with banners.guarded(wait_out_outage=True, retry_key="dashboard.retry"):
    # the Fleet page reads every outbox itself: one that is down degrades only its row
    if page.url_path != FLEET.url_path:
        outbox = state.outbox_settings()
        db = state.database(outbox)
        st.sidebar.caption(f"Outbox {format.md_code(db.table_name)}")
        state.check_table_once(db)
        banners.replica_banner(
            db,
            state.actions_database(outbox),
            max_lag=settings.max_replica_lag,
            refresh=chosen.refresh if chosen else max(settings.refresh, state.MIN_REFRESH_SECONDS),
        )
        # a filter naming no event type says so, with the closest known ones (issue 30 item 7)
        filter_check.show(db, chosen.event_type if chosen else None)
    with state.dashboard_run(identity, linked):
        page.run()
