"""Read replicas: whether a DSN is a hot standby, its replay lag, and the scheduler's start-up
check that every write goes to a primary (issue 14 item 4).

``OUTBOX_MONITOR_DSN`` may point at a streaming hot standby: every figure is a read, so the
dashboard, ``status`` and the scheduler's measurements can all be served by it. What the
product writes cannot: the scheduler writes through ``OUTBOX_MONITOR_PRIMARY_DSN`` (its
lease, samples, alert state, notifications, automatic reap and prune) and operator actions
through ``OUTBOX_MONITOR_ACTIONS_DSN``.

The replay lag (``replica_status``, query ``replica_status``) is 0 on a primary, and 0 on a
standby that has replayed everything it received (``pg_last_wal_receive_lsn() =
pg_last_wal_replay_lsn()``) while its WAL receiver streams, so an idle primary does not look
like lag (a standby cut off from its primary — no WAL receiver, or one not streaming — has
replayed all it received too, yet falls behind: it is not 0; a role without
``pg_read_all_stats`` cannot see the receiver's status, and it then counts as streaming);
otherwise it is ``now() - pg_last_xact_replay_timestamp()``, the age of the newest transaction
the standby shows. It is unknown (``None``) on a standby that has received WAL but replayed no
transaction since it started.
"""

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from outbox_monitor.durations import format_duration
from outbox_monitor.errors import ConfigError
from outbox_monitor.store.db import Database
from outbox_monitor.store.db_errors import (
    PRIMARY_DSN_SETTING,
    READ_DSN_SETTING,
    describe_target,
)

MAX_LAG_SETTING = "OUTBOX_MONITOR_MAX_REPLICA_LAG"


@dataclass(frozen=True)
class ReplicaStatus:
    """What one server says about its recovery, as read by ``replica_status``.

    ``in_recovery``: it is a hot standby (``pg_is_in_recovery()``); ``lag_seconds``: the
    replay lag (0.0 on a primary; ``None``: unknown, see the module docstring);
    ``receive_lsn``/``replay_lsn``: the WAL positions received and replayed (``None`` on a
    primary; ``receive_lsn`` also when no WAL was streamed); ``replayed_at``: the commit
    time of the newest replayed transaction (aware, primary's clock), or ``None``;
    ``target``: where the DSN points (``user@host:port/dbname``, no password).
    """

    in_recovery: bool
    lag_seconds: float | None
    target: str
    receive_lsn: str | None = None
    replay_lsn: str | None = None
    replayed_at: datetime | None = None

    def exceeds(self, max_lag: float) -> bool:
        """Whether figures read here are too stale to evaluate rules on: a standby whose
        lag is over ``max_lag`` seconds, or unknown. ``False`` on a primary."""
        return self.in_recovery and (self.lag_seconds is None or self.lag_seconds > max_lag)

    def describe(self) -> str:
        """For people: ``"hot standby user@h:5433/app, replay lag 2.5s"`` (no period)."""
        if not self.in_recovery:
            return f"primary {self.target}"
        lag = "unknown" if self.lag_seconds is None else format_duration(self.lag_seconds)
        return f"hot standby {self.target}, replay lag {lag}"

    def as_json(self) -> dict[str, Any]:
        """The ``replica`` object of ``status --json``: ``{"in_recovery": bool,
        "lag_seconds": float | None}`` (seconds; ``null`` when unknown)."""
        return {"in_recovery": self.in_recovery, "lag_seconds": self.lag_seconds}


def lag_text(reading: ReplicaStatus) -> str:
    """The replay lag for people: ``"1m 15s"`` (``format_duration``), or ``"an unknown
    time"``."""
    if reading.lag_seconds is None:
        return "an unknown time"
    return format_duration(reading.lag_seconds)


def skip_reason(reading: ReplicaStatus, max_lag: float) -> str:
    """Why the scheduler evaluates no rule, one line: ``rules not evaluated: replica lags
    1m 15s (user@h:5433/app; more than OUTBOX_MONITOR_MAX_REPLICA_LAG 1m 0s)``."""
    return (
        f"rules not evaluated: replica lags {lag_text(reading)} ({reading.target}; more "
        f"than {MAX_LAG_SETTING} {format_duration(max_lag)})"
    )


def replica_status(db: Database) -> ReplicaStatus:
    """Read whether ``db``'s server is a hot standby and its replay lag (one round trip,
    no table read; any login may run it).

    Returns:
        A ``ReplicaStatus``; ``lag_seconds`` in seconds (float).

    Raises:
        DatabaseUnavailable and the connector's other errors.
    """
    row = db.fetch_one("replica_status")
    return ReplicaStatus(
        in_recovery=bool(row["in_recovery"]),
        lag_seconds=None if row["lag_seconds"] is None else float(row["lag_seconds"]),
        target=describe_target(db.settings.dsn),
        receive_lsn=row["receive_lsn"],
        replay_lsn=row["replay_lsn"],
        replayed_at=row["replayed_at"],
    )


def refuse_standby(
    db: Database, *, setting: str, fallback_of: str | None = None, needs: str
) -> ReplicaStatus:
    """Refuse a Database that must write when its server is a hot standby.

    Args:
        db: the Database that will write.
        setting: the setting (or option) to point at the primary, named first.
        fallback_of: the setting ``db`` fell back to because ``setting`` is unset (the
            message then says so), or ``None``.
        needs: what needs the primary, for the message (``"operator actions"``).

    Returns:
        ``db``'s ``ReplicaStatus`` (not in recovery).

    Raises:
        ConfigError: ``db``'s server is in recovery; the message starts with ``setting``.
        DatabaseUnavailable and the connector's other errors.
    """
    found = replica_status(db)
    if not found.in_recovery:
        return found
    where = (
        f"not set, and {fallback_of} ({found.target}) is" if fallback_of else f"{found.target} is"
    )
    raise ConfigError(
        f"{setting}: {where} a hot standby in recovery, which accepts no writes: {needs} "
        "need the primary",
        hint=f"Set {setting} to the primary (after a failover: the new one); "
        f"{READ_DSN_SETTING} may stay on the standby for the figures.",
    )


def check_write_target(read: Database, primary: Database) -> ReplicaStatus:
    """The scheduler's start-up check: refuse to run when its writes would go to a standby.

    Args:
        read: the Database of the figures (``OUTBOX_MONITOR_DSN``; a standby is fine).
        primary: the Database of the scheduler's writes (``Database(settings,
            purpose="primary")``, or ``read`` itself when no primary DSN is set).

    Returns:
        The read server's ``ReplicaStatus`` (logged by the caller).

    Raises:
        ConfigError: naming ``OUTBOX_MONITOR_PRIMARY_DSN``: the read DSN is a standby and
            no primary DSN is set, or the primary DSN itself is a standby. The process
            must stop at start (exit 2), not try to write to a read-only server.
        DatabaseUnavailable and the connector's other errors.
    """
    found = replica_status(read)
    same = primary is read or primary.settings.dsn == read.settings.dsn
    refuse_standby(
        primary,
        setting=PRIMARY_DSN_SETTING,
        fallback_of=READ_DSN_SETTING if same else None,
        needs="the scheduler's lease, samples, alert state and notifications",
    )
    return found
