"""Every known failure as a banner with its fix: ``st.error`` + ``st.info`` + ``st.stop``.

Pages never show a traceback for an ``OutboxMonitorError``: database unreachable, table
missing, columns missing, statement timeout, schema not initialised, permission denied,
invalid configuration.
"""

from collections.abc import Iterator
from contextlib import contextmanager

import streamlit as st

from outbox_monitor.errors import (
    ActionRefused,
    ColumnsMissing,
    ConfigError,
    DatabaseUnavailable,
    OutboxMonitorError,
    PermissionDenied,
    QueryTimeout,
    SchemaNotInitialised,
    TableMissing,
)

TITLES: dict[type[OutboxMonitorError], str] = {
    DatabaseUnavailable: "Database unreachable",
    TableMissing: "Outbox table missing",
    ColumnsMissing: "Outbox table columns missing",
    QueryTimeout: "Statement timeout",
    SchemaNotInitialised: "Schema not initialised",
    PermissionDenied: "Permission denied",
    ConfigError: "Invalid configuration",
    ActionRefused: "Action refused",
}


def title_of(error: OutboxMonitorError) -> str:
    """The banner title of an error: its own class's, else the nearest parent's."""
    for cls in type(error).__mro__:
        if cls in TITLES:
            return TITLES[cls]
    return "outbox-monitor error"


def message_of(error: OutboxMonitorError) -> str:
    """The error's message without its hint (``str(error)`` appends the hint)."""
    return str(error.args[0]) if error.args else type(error).__name__


def show(error: OutboxMonitorError, *, stop: bool = True) -> None:
    """Show ``error`` as a red banner with its hint (the fix) below, then stop the run.

    Args:
        error: any ``OutboxMonitorError``.
        stop: ``False`` to keep rendering (e.g. a refused action inside a working page).
    """
    st.error(f"**{title_of(error)}** — {message_of(error)}", icon=":material/error:")
    if error.hint:
        st.info(error.hint, icon=":material/build:")
    if stop:
        st.stop()


@contextmanager
def guarded() -> Iterator[None]:
    """Run a block; an ``OutboxMonitorError`` raised in it becomes a banner and stops the
    run (or the fragment run). Other exceptions, and Streamlit's own rerun/stop, pass."""
    try:
        yield
    except OutboxMonitorError as error:
        show(error)
