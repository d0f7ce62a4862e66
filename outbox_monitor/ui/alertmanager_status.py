"""The Alerts page's banner of the Alertmanagers that refuse alerts (issue 31 item 1): one red
line per URL in an open ``alertmanager-unreachable`` episode
(``alerts.alertmanager_health.open_episodes``, read by ``alert_loaders.alertmanager_down``)."""

from collections.abc import Sequence
from typing import Any

import streamlit as st

from outbox_monitor.ui import format


def show_unreachable(episodes: Sequence[dict[str, Any]]) -> None:
    """A red banner per Alertmanager URL that refuses alerts; nothing when none does.

    Args:
        episodes: ``[{"url", "since", "error"}]`` (``alert_loaders.alertmanager_down``).
    """
    for episode in episodes:
        st.error(
            f"**Alertmanager {format.md_code(episode['url'])} refuses alerts**: "
            f"{format.md_text(episode['error'] or '')}; alerted at "
            f"{format.instant(episode['since'])}. "
            "Its alerts there end 4 evaluation intervals after the last post that worked; "
            "the scheduler retries every few seconds (`/healthz`, "
            "`outbox_monitor_alertmanager_post_failures_total`).",
            icon=":material/notifications_off:",
        )
