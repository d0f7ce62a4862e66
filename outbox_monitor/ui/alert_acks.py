"""The Alerts page's line of acknowledged alerts (issue 31 item 6): each firing episode
acknowledged (from Slack) says by whom and when; its repeats have stopped."""

from typing import Any

import streamlit as st

from outbox_monitor.alerts.acknowledge import list_acknowledgements
from outbox_monitor.store.db import Database
from outbox_monitor.ui import format
from outbox_monitor.ui.cache import cached, db_key


@cached
def _acknowledgements(key: str, _db: Database) -> list[dict[str, Any]]:
    return list_acknowledgements(_db)


def acknowledged_text(rows: list[dict[str, Any]]) -> str:
    """One markdown line per acknowledged episode: ``rule instance`` acknowledged by whom,
    when, from which Slack user; ``""`` without any."""
    return "\n".join(
        f"- {format.md_code(' '.join(filter(None, (row['rule'], row['instance']))))} "
        f"acknowledged by {format.md_text(row['acked_by'])} at {format.instant(row['acked_at'])}"
        + (f" (Slack user {format.md_code(row['slack_user_id'])})" if row["slack_user_id"] else "")
        for row in rows
    )


def show(db: Database) -> None:
    """An info box listing the acknowledged firing episodes of ``db``'s outbox (their repeats
    stopped); nothing when there are none."""
    text = acknowledged_text(_acknowledgements(db_key(db), db))
    if text:
        st.info(
            f"**Acknowledged** — no more repeats of these episodes:\n\n{text}",
            icon=":material/visibility:",
        )
