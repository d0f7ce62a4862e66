"""Every known failure as a banner with its fix: ``st.error`` + ``st.info`` + ``st.stop``.

Pages never show a traceback for an ``OutboxMonitorError``: database unreachable, table
missing, columns missing, statement timeout, schema not initialised, permission denied,
invalid configuration.

During a database outage a page does not try to connect at every run: after a failed
attempt, the runs of the next ``OUTBOX_MONITOR_OUTAGE_RETRY`` seconds (default 30; a live
fragment's refreshes, a click, another page) show the same banner at once, so runs never
queue up behind connection attempts that time out. Then one run tries again; a "Retry now"
button tries at once.

Any other exception of a page or a live fragment is shown as a short "Unexpected error"
with an error id, never a traceback or a server path; the log line with the traceback
carries the same id (``show_unexpected``).

When ``OUTBOX_MONITOR_DSN`` is a hot standby, every page says so with its replay lag, live
(``replica_banner``), and whether operator actions are refused there.
"""

import logging
import secrets
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import NoReturn

import streamlit as st

from outbox_monitor.config.settings import DEFAULT_OUTAGE_RETRY_SECONDS
from outbox_monitor.errors import (
    AccessDenied,
    ActionInterrupted,
    ActionRefused,
    ColumnsMissing,
    ConfigError,
    DatabaseUnavailable,
    LoginRefused,
    OutboxMonitorError,
    PartitioningUnsupported,
    PermissionDenied,
    QueryTimeout,
    ReadOnlyDatabase,
    SchemaNotInitialised,
    TableMissing,
)
from outbox_monitor.store.db import Database
from outbox_monitor.store.db_errors import ACTIONS_DSN_SETTING
from outbox_monitor.store.standby import MAX_LAG_SETTING, ReplicaStatus, lag_text
from outbox_monitor.ui import format, loaders

TITLES: dict[type[OutboxMonitorError], str] = {
    DatabaseUnavailable: "Database unreachable",
    LoginRefused: "Database login refused",
    TableMissing: "Outbox table missing",
    ColumnsMissing: "Outbox table columns missing or mistyped",
    PartitioningUnsupported: "Outbox table partitioned in an unsupported way",
    QueryTimeout: "Statement timeout",
    SchemaNotInitialised: "Schema not initialised",
    PermissionDenied: "Permission denied",
    ReadOnlyDatabase: "Read-only database",
    ConfigError: "Invalid configuration",
    ActionRefused: "Action refused",
    ActionInterrupted: "Action stopped part-way",
    AccessDenied: "Not allowed",
}
_OUTAGE = "_outbox_monitor.outage"
log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Outage:
    """The last failed connection of this browser session: the error, when it happened
    (``monotonic``, for the retry delay; ``at``, aware UTC, for people) and the retry delay
    then in force (``OUTBOX_MONITOR_OUTAGE_RETRY``, seconds)."""

    error: DatabaseUnavailable
    monotonic: float
    at: datetime
    retry_seconds: float = DEFAULT_OUTAGE_RETRY_SECONDS

    @property
    def retry_in(self) -> float:
        """Seconds until a run tries to connect again (0 when it may now)."""
        return max(0.0, self.retry_seconds - (time.monotonic() - self.monotonic))


def title_of(error: OutboxMonitorError) -> str:
    """The banner title of an error: its own class's, else the nearest parent's."""
    for cls in type(error).__mro__:
        if cls in TITLES:
            return TITLES[cls]
    return "outbox-monitor error"


def message_of(error: OutboxMonitorError) -> str:
    """The error's message without its hint (``str(error)`` appends the hint)."""
    return str(error.args[0]) if error.args else type(error).__name__


def recent_outage() -> Outage | None:
    """This session's failed connection of the last ``OUTBOX_MONITOR_OUTAGE_RETRY`` seconds,
    if any."""
    outage = st.session_state.get(_OUTAGE)
    if isinstance(outage, Outage) and outage.retry_in > 0:
        return outage
    return None


def forget_outage() -> None:
    """Let the next run connect at once (the "Retry now" button; any successful run)."""
    st.session_state.pop(_OUTAGE, None)


def _remember_outage(error: DatabaseUnavailable) -> Outage:
    # ui.state imports this module: its settings (valid: a connection was tried) at call time
    from outbox_monitor.ui.state import settings

    outage = Outage(error, time.monotonic(), datetime.now(UTC), settings().outage_retry)
    st.session_state[_OUTAGE] = outage
    return outage


def show(error: OutboxMonitorError, *, stop: bool = True, retry_key: str | None = None) -> None:
    """Show ``error`` as a red banner with its hint (the fix) below, then stop the run.

    The message is shown literally (it may quote the database or the input); the hint is
    the package's own markdown.

    Args:
        error: any ``OutboxMonitorError``.
        stop: ``False`` to keep rendering (e.g. a refused action inside a working page).
        retry_key: for ``DatabaseUnavailable``, the key of a "Retry now" button (unique on
            the page); ``None`` shows no button.
    """
    st.error(
        f"**{title_of(error)}** — {format.md_text(message_of(error))}", icon=":material/error:"
    )
    if error.hint:
        st.info(error.hint, icon=":material/build:")
    outage = st.session_state.get(_OUTAGE)
    if isinstance(error, DatabaseUnavailable) and isinstance(outage, Outage):
        st.caption(
            f"Last attempt failed at {format.instant(outage.at)}; the page tries again by "
            f"itself in {format.duration(outage.retry_in)}."
        )
        if retry_key is not None:
            st.button("Retry now", key=retry_key, on_click=forget_outage)
            _rerun_when_due(outage.retry_seconds)
    if stop:
        st.stop()


def _rerun_when_due(retry_seconds: float) -> None:
    """Under a page's outage banner: rerun the page once the retry delay (``retry_seconds``)
    has passed, so a page opened during an outage recovers by itself like its live figures."""

    @st.fragment(run_every=retry_seconds)
    def rerun_when_due() -> None:
        if recent_outage() is None:
            st.rerun(scope="app")

    rerun_when_due()


def stop_on_config_error(error: ConfigError) -> NoReturn:
    """Show invalid settings as the dashboard's only page (no page is listed: the sign-in
    mode itself may be what is invalid) and stop the run."""

    def body() -> None:
        show(error)

    st.navigation([st.Page(body, title="outbox-monitor", url_path="config")], position="hidden")
    body()
    st.stop()


def show_unexpected(error: Exception) -> NoReturn:
    """Show an error the package did not expect as a short message with a new error id,
    log its traceback under that id (ERROR, logger ``outbox_monitor.ui.banners``), and
    stop the run. Nothing of the error itself reaches the page: its text may carry server
    paths, SQL or data."""
    error_id = secrets.token_hex(4)
    log.error(
        "unexpected error %s on the dashboard: %s", error_id, type(error).__name__, exc_info=error
    )
    st.error(
        f"**Unexpected error** — this part of the page could not be shown (error id `{error_id}`).",
        icon=":material/error:",
    )
    st.info(
        "Reload the page to try again. If it happens again, give the error id to whoever "
        "runs the dashboard: its log has the details under that id.",
        icon=":material/build:",
    )
    st.stop()


@contextmanager
def guarded(*, wait_out_outage: bool = False, retry_key: str | None = None) -> Iterator[None]:
    """Run a block; an ``OutboxMonitorError`` raised in it becomes a banner and stops the
    run (or the fragment run); any other exception becomes ``show_unexpected``'s message
    with an error id. Streamlit's own rerun/stop pass (they are not ``Exception``).

    Args:
        wait_out_outage: skip the block and show the last failure again while this
            session's last connection failed less than ``OUTBOX_MONITOR_OUTAGE_RETRY`` ago (use it
            where a block would connect first: a page, a live fragment).
        retry_key: key of the "Retry now" button shown with a ``DatabaseUnavailable``.
    """
    if wait_out_outage:
        outage = recent_outage()
        if outage is not None:
            show(outage.error, retry_key=retry_key)
    try:
        yield
    except DatabaseUnavailable as error:
        _remember_outage(error)
        show(error, retry_key=retry_key)
    except OutboxMonitorError as error:
        forget_outage()  # the database answered
        show(error)
    except Exception as error:
        show_unexpected(error)
    else:
        forget_outage()


def describe_replica(
    reading: ReplicaStatus, *, max_lag: float, actions: ReplicaStatus | None
) -> tuple[str, str] | None:
    """The read-replica banner's level and markdown, or ``None`` on a primary.

    Args:
        reading: the read DSN's ``ReplicaStatus``.
        max_lag: ``OUTBOX_MONITOR_MAX_REPLICA_LAG`` in seconds.
        actions: the actions DSN's ``ReplicaStatus`` (``reading`` when it is the same
            database), or ``None`` when it could not be read.

    Returns:
        ``("info" | "warning", text)``: ``warning`` when the lag is over ``max_lag`` (or
        unknown) — no rule is evaluated then —, else ``info``.
    """
    if not reading.in_recovery:
        return None
    target = format.md_code(reading.target)
    limit = f"{format.md_code(MAX_LAG_SETTING)} ({format.duration(max_lag)})"
    if reading.exceeds(max_lag):
        level = "warning"
        text = (
            f"**Read replica lagging** — these figures come from the hot standby {target}, "
            f"whose replay lags **{lag_text(reading)}**: they are that old. While the lag is "
            f"over {limit}, the scheduler evaluates no alert rule and alerts that instead."
        )
    else:
        level = "info"
        text = (
            f"**Read replica** — these figures come from the hot standby {target}, replay "
            f"lag **{lag_text(reading)}** (alert rules are evaluated while it stays under "
            f"{limit})."
        )
    if actions is not None and actions.in_recovery:
        text += (
            f" Operator actions are refused here: {format.md_code(ACTIONS_DSN_SETTING)} "
            + ("is a hot standby too" if actions is not reading else "is not set")
            + "; set it to the primary."
        )
    return level, text


def replica_banner(db: Database, actions_db: Database, *, max_lag: float, refresh: float) -> None:
    """On every page (``dashboard.py``): the read-replica banner (``describe_replica``),
    refreshed every ``refresh`` seconds like the live figures; nothing on a primary. A
    database error shows nothing here: the page itself reports it, and while it waits out an
    outage (``recent_outage``) the banner does not connect either."""

    @st.fragment(run_every=refresh)
    def live() -> None:
        if recent_outage() is not None:
            return  # the page waits out the outage: no connection attempt per refresh here
        try:
            reading = loaders.replica_status(db)
        except DatabaseUnavailable as error:
            _remember_outage(error)
            return
        except OutboxMonitorError:
            return
        try:
            actions = reading if actions_db is db else loaders.replica_status(actions_db)
        except OutboxMonitorError:
            actions = None
        found = describe_replica(reading, max_lag=max_lag, actions=actions)
        if found is not None:
            level, text = found
            show_level = st.warning if level == "warning" else st.info
            show_level(text, icon=":material/dns:")

    live()
