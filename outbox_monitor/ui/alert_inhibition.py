"""The Alerts page's mark of inhibited instances (issue 31 item 4): each state row that a
firing alert inhibits says so and by what, and a caption above the table lists them."""

from collections.abc import Mapping, Sequence
from typing import Any

import streamlit as st

from outbox_monitor.alerts.inhibition import inhibited_instances
from outbox_monitor.store.db import Database
from outbox_monitor.ui import format
from outbox_monitor.ui.cache import cached, db_key

ALL = "all"
"""How the state table writes the instance of a rule without ``by`` (``alert_rules``)."""


@cached
def _inhibited(key: str, _db: Database) -> dict[tuple[str, str], str]:
    return inhibited_instances(_db)


def marked(rows: Sequence[Mapping[str, Any]], db: Database) -> list[dict[str, Any]]:
    """The state table's rows (``alert_rules.state_rows``) with each inhibited instance's
    ``state`` followed by ``· inhibited by <alert>`` (``inhibition.inhibited_instances``,
    cached); a caption above the table lists them when there are any.

    Raises:
        DatabaseUnavailable and the connector's errors (the page's ``banners.guarded``).
    """
    found = {
        (rule, instance or ALL): source
        for (rule, instance), source in _inhibited(db_key(db), db).items()
    }
    shown = []
    listed = []
    for row in rows:
        source = found.get((row["rule"], row["instance"]))
        if source is None:
            shown.append(dict(row))
            continue
        shown.append({**row, "state": f"{row['state']} · inhibited by {source}"})
        name = row["rule"] if row["instance"] == ALL else f"{row['rule']} {row['instance']}"
        listed.append(f"{format.md_code(name)} by {format.md_code(source)}")
    if listed:
        st.caption(
            f"Inhibited ({len(listed)}): " + "; ".join(listed),
            help="An inhibited alert changes state as any other, but its notifications "
            "through slack, pagerduty and webhook routes are suppressed while the alert that "
            "inhibits it fires (alerts.yml's `inhibit`); a resolve of one that was sent is "
            "always sent. A `type: alertmanager` route is not affected.",
        )
    return shown
