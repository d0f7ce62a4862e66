"""The Alerts page's word on receivers that keep failing (issue 31 item 1: never silent): a
red banner per failing route of alerts.yml — which, since when, its messages waiting and
the last error — from ``alerts.receiver_health``, read through the cache."""

from datetime import UTC, datetime

import streamlit as st

from outbox_monitor.alerts.receiver_health import FAILING_ATTEMPTS, ReceiverHealth, read_health
from outbox_monitor.alerts.rules import RuleSet
from outbox_monitor.store.db import Database
from outbox_monitor.ui import format
from outbox_monitor.ui.cache import cached, db_key


@cached
def _health(key: str, path: str, _db: Database, _ruleset: RuleSet) -> list[ReceiverHealth]:
    return read_health(_db, _ruleset, datetime.now(UTC))


def failing_text(receiver: ReceiverHealth) -> str:
    """What the banner says of one failing receiver (Markdown, values escaped)."""
    if receiver.attempts >= FAILING_ATTEMPTS:
        why = (
            f"{format.plural(receiver.undelivered, 'message')} waiting, the oldest tried "
            f"{receiver.attempts} times"
            + (f" since {format.instant(receiver.failing_since)}" if receiver.failing_since else "")
        )
    else:
        why = "its last message was refused for good (not retried)"
    error = format.md_text(receiver.last_error or "none recorded")
    return (
        f"**Receiver {format.md_code(receiver.route)} ({receiver.type}) keeps failing** — "
        f"{why}. Last error: {error}. The other receivers are told (`receiver-failing`)."
    )


def show_failing(db: Database, ruleset: RuleSet | None) -> None:
    """A red banner per receiver that keeps failing; nothing when all deliver or without
    rules.

    Args:
        db: the page's Database (the notification outbox of its outbox).
        ruleset: the loaded rules, or ``None``.
    """
    if ruleset is None:
        return
    for receiver in _health(db_key(db), ruleset.path, db, ruleset):
        if receiver.failing:
            st.error(failing_text(receiver), icon=":material/cell_tower:")
