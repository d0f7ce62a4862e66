"""The dashboard's read cache: ``st.cache_data`` with a TTL below the shortest refresh, and
the key of a database.

Each cached loader (``loaders``, ``alert_loaders``) takes the ``Database`` first; the cache
key is the database's settings plus the other arguments, so two databases never share an
entry.
"""

import streamlit as st

from outbox_monitor.store.db import Database
from outbox_monitor.ui.state import MIN_REFRESH_SECONDS

CACHE_TTL_SECONDS = MIN_REFRESH_SECONDS - 1
"""Below the shortest refresh, so every live refresh of the Overview reads fresh figures."""

cached = st.cache_data(ttl=CACHE_TTL_SECONDS, show_spinner=False)
"""The decorator of every cached loader (``st.cache_data``, ``CACHE_TTL_SECONDS``)."""


def db_key(db: Database) -> str:
    """The cache key of a database: its settings, and the fleet outbox they are of (not a
    field of theirs: ``Settings.fleet_outbox`` keys the alert state read through them)."""
    return f"{db.alert_outbox}|{db.settings.model_dump_json()}"
