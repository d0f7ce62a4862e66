"""outbox-monitor dashboard: the page list, the shared sidebar, the start-up table check.

Run with ``streamlit run dashboard.py`` (or ``outbox-monitor dashboard``). The only caller
of ``st.navigation``; every page is listed here. Filters live in the URL:
``…/dead_letters?event_type=order.paid&window=6h`` opens that page pre-filtered.
"""

import streamlit as st

from outbox_monitor.config import DEFAULT_REFRESH_SECONDS, DEFAULT_WINDOW_SECONDS
from outbox_monitor.errors import ConfigError
from outbox_monitor.ui import alerts, banners, format, state

st.set_page_config(page_title="outbox-monitor", page_icon=":material/outbox:", layout="wide")

PAGES = [
    st.Page(
        "pages/overview.py",
        title="Overview",
        url_path="overview",
        icon=":material/monitoring:",
        default=True,
    ),
    st.Page("pages/events.py", title="Events", url_path="events", icon=":material/list:"),
    st.Page(
        "pages/dead_letters.py",
        title="Dead letters",
        url_path="dead_letters",
        icon=":material/report:",
    ),
    st.Page("pages/actions.py", title="Actions", url_path="actions", icon=":material/build:"),
    st.Page("pages/alerts.py", title="Alerts", url_path="alerts", icon=":material/notifications:"),
]
page = st.navigation(PAGES)

try:
    settings = state.settings()
except ConfigError:
    settings = None
state.sidebar(
    settings.window if settings else DEFAULT_WINDOW_SECONDS,
    settings.refresh if settings else DEFAULT_REFRESH_SECONDS,
    tuple(alerts.rule_windows(alerts.load_ruleset().ruleset)),
)

# The title is the dashboard's, so that it stays above a banner (database down, table
# missing) whatever failed; pages start below it.
st.title(page.title)
with banners.guarded(wait_out_outage=True, retry_key="dashboard.retry"):
    settings = state.settings()
    db = state.database(settings)
    st.sidebar.caption(
        f"Outbox {format.md_code(db.table_name)} · acting as "
        f"{format.md_code(state.actor(settings))}"
    )
    state.check_table_once(db)
    with state.dashboard_run():
        page.run()
