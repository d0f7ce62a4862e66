"""Who holds the xmin horizon of the monitored database, for how long, and how to end it.

VACUUM removes a dead tuple only when no transaction may still see it: the oldest
``backend_xmin``/``backend_xid`` of the database's sessions, its prepared transactions, and
the ``xmin`` of every replication slot bound it (the horizon). One forgotten holder and the
rows the workers ack stay in the table and its indexes as dead tuples, and every claim reads
them. Each ``Holder`` names what it is, how long it has held the horizon, and the command
that ends it — shown to a person, never run by the product.

How long a session has held it is counted from its transaction's start unless readings
remembered for the same ``Database`` show its snapshots are per statement
(``horizon_memory``: one reading cannot tell READ COMMITTED from REPEATABLE READ).

A role without ``pg_read_all_stats`` (``pg_monitor`` holds it; ``init-db --print-grants``
grants it) sees another role's sessions only as pid, role, application and xids: their
start, state and query are hidden, and ``Horizon`` says so. Such a session counts from the
first reading that showed its current xid (a lower bound, from the second reading on), so
the ``xmin_horizon_age`` figure still grows while one stays open.
"""

from dataclasses import asdict, dataclass, field
from datetime import datetime
from typing import Any

from outbox_monitor.health.horizon_memory import FROM_XID, held_since, memory_of
from outbox_monitor.privacy.redaction import redactor_for
from outbox_monitor.store.db import Database

SESSION = "session"
PREPARED = "prepared transaction"
SLOT = "replication slot"
SESSIONS_LIMIT = 50
"""Sessions listed at most (oldest xid first): on a busy server every running query holds the
horizon for its milliseconds."""
GRANT_HINT = "grant pg_monitor to {role} (`outbox-monitor init-db --print-grants`)"
"""How to see what is hidden; ``{role}`` is the monitor's login."""
IDLE_IN_TRANSACTION = ("idle in transaction", "idle in transaction (aborted)")


@dataclass(frozen=True)
class Holder:
    """One session, prepared transaction or replication slot that holds (or may hold) the
    horizon.

    Attributes:
        kind: ``SESSION``, ``PREPARED`` or ``SLOT``.
        name: ``"pid 4242"``, the prepared transaction's gid, or the slot's name.
        holds_horizon: it holds this database's xmin horizon (a session's xid or xmin, a
            prepared transaction, a slot's ``xmin``); false for a session idle in a
            transaction without a snapshot or xid, and a slot with only ``catalog_xmin``
            (it holds back vacuum of the system catalogs only) or none.
        held_seconds: how long it has held it — a session's transaction age (or its
            statement's, its snapshots known to be per statement; a hidden session's age
            since first seen, a lower bound), a prepared transaction's age since PREPARE;
            ``None`` when unknown (a slot: PostgreSQL keeps no time for its xmin; a hidden
            session's first reading). A session holding nothing: how long its transaction
            has been open.
        xid_age: transactions since its xid or xmin (``age()``), or the slot's; ``None``
            when it has none.
        since: when it began holding (the transaction's start, the PREPARE), or ``None``.
        application, role, client, state: what the statistics views say (``None`` where
            absent or hidden); a slot's ``state`` is ``"active"`` or ``"inactive"``.
        query: a session's last statement, redacted (``OUTBOX_MONITOR_REDACT_*``) and cut
            at 1,000 characters; ``None`` when hidden.
        hidden: another role's session this role may not see in full.
        command: what ends it, to copy and run by hand (``None`` when it cannot be given:
            an active slot's consumer must stop first).
        advice: what the command does, or what to do instead.
        retained_wal_bytes: WAL a slot keeps from its ``restart_lsn`` (``None`` otherwise).
        held_from: how a session's ``held_seconds`` is counted (``horizon_memory.FROM_*``:
            from its transaction's start, isolation unknown from one reading; from its
            statement's; from when first seen, hidden); ``None`` for other holders.
    """

    kind: str
    name: str
    holds_horizon: bool
    held_seconds: float | None
    xid_age: int | None
    since: datetime | None = None
    application: str | None = None
    role: str | None = None
    client: str | None = None
    state: str | None = None
    query: str | None = None
    hidden: bool = False
    command: str | None = None
    advice: str = ""
    retained_wal_bytes: int | None = None
    held_from: str | None = None

    @property
    def summary(self) -> str:
        """One line naming it: ``"session pid 4242 (forgotten-report, idle in transaction,
        role app)"``, ``"prepared transaction 'tx-9'"``, ``"replication slot 'standby_1'
        (physical slot, inactive, xid age 1,234)"``."""
        quoted = f"'{self.name}'" if self.kind in (PREPARED, SLOT) else self.name
        name = f"{self.kind} {quoted}"
        details = [d for d in (self.application, self.state) if d]
        if self.role:
            details.append(f"role {self.role}")
        if self.hidden:
            details.append("details hidden")
        if self.held_seconds is None and self.xid_age is not None:
            details.append(f"xid age {self.xid_age:,}")
        if self.held_from and self.held_from != FROM_XID:
            details.append(f"held since {self.held_from}")
        return f"{name} ({', '.join(details)})" if details else name

    def as_json(self) -> dict[str, Any]:
        """The holder as JSON-ready values (``since`` as ISO-8601 text), with its
        ``summary``."""
        values = asdict(self)
        values["since"] = self.since.isoformat() if self.since else None
        values["summary"] = self.summary
        return values


@dataclass(frozen=True)
class Horizon:
    """Every holder of the horizon found now, and what this role could not see.

    Attributes:
        holders: sessions, prepared transactions and slots; those holding the horizon
            longest first (``None`` ages last, then by xid age).
        sees_all: the role sees every session in full (``pg_read_all_stats``).
        role: the monitor's login.
        hidden_sessions: sessions of this database the role sees only in part.
    """

    holders: list[Holder] = field(default_factory=list)
    sees_all: bool = True
    role: str = ""
    hidden_sessions: int = 0

    @property
    def age_seconds(self) -> float:
        """How long the horizon has been held: the longest ``held_seconds`` of the holders
        that hold it (0 when none does; holders of unknown age — slots, a hidden session on
        its first reading — cannot count: ``hidden_note`` and their ``xid_age`` say so)."""
        ages = [h.held_seconds for h in self.holding if h.held_seconds is not None]
        return max(ages, default=0.0)

    @property
    def holding(self) -> list[Holder]:
        """The holders that hold this database's horizon now."""
        return [h for h in self.holders if h.holds_horizon]

    @property
    def inactive_slots_holding(self) -> int:
        """Replication slots holding the horizon with no consumer connected (a standby gone
        away): no time is kept for them, so a rule watches how long this stays above 0."""
        return sum(1 for h in self.holding if h.kind == SLOT and h.state == "inactive")

    @property
    def oldest(self) -> Holder | None:
        """The holder holding it longest (of known age), else the one with the oldest xid;
        ``None`` when nothing holds it."""
        return self.holding[0] if self.holding else None

    @property
    def hidden_note(self) -> str | None:
        """What this role cannot see and how to see it; ``None`` when it sees everything."""
        if self.sees_all or not self.hidden_sessions:
            return None
        return (
            f"{self.hidden_sessions} session(s) of other roles are hidden: their start, state "
            f"and query. One holding the horizon counts only from when this monitor first saw "
            f"it (a lower bound). To see them, " + GRANT_HINT.format(role=self.role)
        )


def horizon(db: Database, *, limit: int = SESSIONS_LIMIT) -> Horizon:
    """Every holder of the xmin horizon of the monitored database now.

    Args:
        limit: sessions listed at most (the oldest xids).

    Returns:
        A ``Horizon``: ``sessions``, ``prepared_transactions`` and ``replication_slots``
        together, longest held first.

    Raises:
        The connector's errors.
    """
    with db.session():
        seen = db.fetch_one("horizon_visibility")
        found = sessions(db, limit=limit) + prepared_transactions(db) + replication_slots(db)
    found.sort(key=_longest_first)
    return Horizon(found, seen["sees_all"], seen["role"], seen["hidden_sessions"])


def _longest_first(holder: Holder) -> tuple[bool, float, int]:
    return (
        not holder.holds_horizon,
        -(holder.held_seconds if holder.held_seconds is not None else -1.0),
        -(holder.xid_age or 0),
    )


def xmin_horizon_age(db: Database) -> float:
    """Seconds the xmin horizon has been held by its oldest holder of known age, 0 when
    nothing holds it (``Horizon.age_seconds``): the ``xmin_horizon_age`` figure."""
    return horizon(db).age_seconds


def inactive_slots_holding_horizon(db: Database) -> int:
    """Inactive replication slots holding the xmin horizon (``Horizon.inactive_slots_holding``):
    the ``inactive_slots_holding_horizon`` figure."""
    return horizon(db).inactive_slots_holding


def sessions(db: Database, *, limit: int = SESSIONS_LIMIT) -> list[Holder]:
    """Sessions holding the horizon or idle in a transaction (named query
    ``horizon_sessions``), each with ``SELECT pg_terminate_backend(<pid>);``; their queries
    redacted; each held since ``horizon_memory.held_since``, the reading recorded in
    ``db``'s memory (``memory_of``).

    Raises:
        The connector's errors.
    """
    redactor = redactor_for(db.settings)
    rows = db.fetch_all("horizon_sessions", {"limit": limit})
    found = []
    for row, seen in zip(rows, memory_of(db).observe(rows), strict=True):
        holds = row["xid"] is not None or row["xmin"] is not None
        since, held_from = held_since(row, seen)
        found.append(
            Holder(
                SESSION,
                f"pid {row['pid']}",
                holds,
                _seconds(row["now"], since),
                row["xid_age"],
                since=since,
                application=row["application"] or None,
                role=row["role"],
                client=row["client"],
                state=row["state"],
                query=redactor.redact_text(row["query"]),
                hidden=row["hidden"],
                command=row["command"],
                advice=_session_advice(row["state"], holds, row["hidden"]),
                held_from=held_from,
            )
        )
    return found


def _seconds(now: datetime, since: datetime | None) -> float | None:
    return max(0.0, (now - since).total_seconds()) if since is not None else None


def _session_advice(state: str | None, holds: bool, hidden: bool) -> str:
    if not holds:
        return (
            "holds no horizon (no snapshot, no transaction id) but keeps its locks; ending it "
            "rolls its transaction back"
        )
    ends = "ends the session and rolls its transaction back"
    if state in IDLE_IN_TRANSACTION:
        return f"{ends}; idle_in_transaction_session_timeout ends such sessions by itself"
    if hidden:
        return f"{ends} (its state and query are hidden: grant pg_monitor)"
    return f"{ends} (pg_cancel_backend(pid) only cancels the current statement)"


def prepared_transactions(db: Database) -> list[Holder]:
    """Prepared transactions of this database (named query ``horizon_prepared_transactions``),
    each with ``ROLLBACK PREPARED '<gid>';``.

    Raises:
        The connector's errors.
    """
    return [
        Holder(
            PREPARED,
            row["gid"],
            True,
            row["held_seconds"],
            row["xid_age"],
            since=row["since"],
            role=row["role"],
            command=row["command"],
            advice="rolls it back, in this database, as its owner or a superuser "
            "(COMMIT PREPARED instead if its transaction must take effect)",
        )
        for row in db.fetch_all("horizon_prepared_transactions")
    ]


def replication_slots(db: Database) -> list[Holder]:
    """Replication slots (named query ``horizon_replication_slots``), each with
    ``SELECT pg_drop_replication_slot('<name>');`` unless a consumer is connected.

    Raises:
        The connector's errors.
    """
    found = []
    for row in db.fetch_all("horizon_replication_slots"):
        holds = row["xmin"] is not None
        found.append(
            Holder(
                SLOT,
                row["slot"],
                holds,
                None,
                row["xid_age"] if holds else row["catalog_xid_age"],
                application=f"{row['type']} slot"
                + (f" of database {row['database']}" if row["database"] else ""),
                state="active" if row["active"] else "inactive",
                command=row["command"],
                advice=_slot_advice(row, holds),
                retained_wal_bytes=row["retained_wal_bytes"],
            )
        )
    return found


def _slot_advice(row: dict[str, Any], holds: bool) -> str:
    if holds:
        what = "holds back vacuum in every database (a standby's hot_standby_feedback)"
    elif row["catalog_xmin"] is not None:
        what = "holds back vacuum of the system catalogs only, not of the outbox"
    else:
        what = "holds no horizon"
    if row["active"]:
        return f"{what}; its consumer (pid {row['active_pid']}) is connected: stop it first"
    return f"{what}; it keeps WAL: drop it if no standby or consumer will come back for it"
