"""The workers' real cost of claim and ack, from ``pg_stat_statements`` when it is there
(issue 14 item 2): calls per minute, mean and max execution time. Optional: without the
extension, without it preloaded, or without the right to read other roles' statements, the
answer says so in one sentence and nothing fails.

Which statements count (top-level statements of this database only; with
``pg_stat_statements.track = all`` the statements inside the shared functions are not
counted twice):

- ``shared_claim`` / ``shared_ack``: calls of ``outbox_monitor.claim(`` / ``outbox_monitor.ack(``
  (n8n workflows, the Python API), whatever table they name;
- ``users_claim``: the users' own claim SQL (SPEC §1): ``FOR UPDATE SKIP LOCKED`` naming the
  outbox table (as a word: ``integration_outbox``, quoted or schema-qualified);
- ``users_ack``: the users' own ack SQL: an ``UPDATE`` of the outbox table that sets
  ``processed_at = now()`` and does not touch ``attempts`` (a dead-letter sets
  ``processed_at`` too, but counts an attempt; ``pg_stat_statements`` has replaced every
  constant, ``'done'`` and ``NULL`` alike, by ``$n``).

Statements of the product's schema other than those calls are never the users'. Figures are
cumulative since ``pg_stat_statements_reset()`` (mean and max), except calls per minute,
the difference of the calls between the reading now and the newest one the scheduler
recorded (``outbox_monitor.claim_statement_samples``, migration 011); ``None`` before a
recording, or when the counters were reset in between.
"""

import re
from dataclasses import dataclass, field
from typing import Any

from psycopg import errors as pg_errors
from psycopg import sql

from outbox_monitor.store.db import Database

KINDS = {
    "shared_claim": "outbox_monitor.claim() calls",
    "users_claim": "users' claim SQL",
    "shared_ack": "outbox_monitor.ack() calls",
    "users_ack": "users' ack SQL",
}
"""The kinds of statement with their labels, in display order."""
MIN_SERVER_VERSION = 140000
"""``pg_stat_statements.toplevel`` (PostgreSQL 14) tells a worker's statement from the
statements inside the shared functions."""
NOT_INSTALLED = (
    "pg_stat_statements not installed in this database: the workers' real claim and ack "
    "times are not shown (CREATE EXTENSION pg_stat_statements, with it in "
    "shared_preload_libraries, shows them)"
)
NOT_LOADED = (
    "pg_stat_statements is installed but not loaded: add it to shared_preload_libraries "
    "and restart PostgreSQL to see the workers' claim and ack times"
)
NOT_READABLE = (
    "pg_stat_statements is installed but this login cannot read other roles' statements: "
    "grant it pg_read_all_stats to see the workers' claim and ack times"
)
TOO_OLD = "pg_stat_statements needs PostgreSQL 14 or later here (its toplevel column)"


@dataclass(frozen=True)
class StatementCost:
    """One kind of statement in ``pg_stat_statements``, its entries summed.

    Attributes:
        kind: a ``KINDS`` key.
        calls: calls since the counters' reset.
        total_exec_ms: their execution time, milliseconds.
        max_exec_ms: the slowest call's, milliseconds.
        statements: how many ``pg_stat_statements`` entries were summed.
        calls_per_minute: calls per minute since the newest recorded reading (``None``:
            none, or the counters were reset since).
        interval_mean_exec_ms: mean execution time of the calls since that reading
            (``None`` when there were none or no reading).
    """

    kind: str
    calls: int
    total_exec_ms: float
    max_exec_ms: float
    statements: int = 1
    calls_per_minute: float | None = None
    interval_mean_exec_ms: float | None = None

    @property
    def label(self) -> str:
        """The kind for people (``KINDS``)."""
        return KINDS[self.kind]

    @property
    def mean_exec_ms(self) -> float | None:
        """Mean execution time since the reset, milliseconds (``None`` without calls)."""
        return self.total_exec_ms / self.calls if self.calls else None

    def as_json(self) -> dict[str, Any]:
        """``{"kind", "label", "calls", "calls_per_minute", "mean_exec_ms",
        "interval_mean_exec_ms", "max_exec_ms", "statements"}`` (times in milliseconds)."""
        return {
            "kind": self.kind,
            "label": self.label,
            "calls": self.calls,
            "calls_per_minute": self.calls_per_minute,
            "mean_exec_ms": self.mean_exec_ms,
            "interval_mean_exec_ms": self.interval_mean_exec_ms,
            "max_exec_ms": self.max_exec_ms,
            "statements": self.statements,
        }


@dataclass(frozen=True)
class WorkerStatements:
    """What ``pg_stat_statements`` says of the workers' claim and ack.

    Attributes:
        available: it was read.
        note: why not (``NOT_INSTALLED``, ``NOT_LOADED``, ``NOT_READABLE``, ``TOO_OLD``);
            ``None`` when ``available``.
        costs: one ``StatementCost`` per kind found, in ``KINDS`` order (kinds nobody ran
            are absent).
    """

    available: bool
    note: str | None = None
    costs: tuple[StatementCost, ...] = field(default_factory=tuple)

    def as_json(self) -> dict[str, Any]:
        """``{"available", "note", "kinds": [StatementCost.as_json, …]}``."""
        return {
            "available": self.available,
            "note": self.note,
            "kinds": [cost.as_json() for cost in self.costs],
        }


def _patterns(db: Database) -> dict[str, str]:
    """The parameters of ``claim_statements_read``: LIKE patterns of the shared functions'
    calls, and regular expressions (PostgreSQL's, case-insensitive) of the users' SQL."""
    _, table = db.settings.table_parts
    name = rf'(\m|"){re.escape(table)}(\M|")'
    return {
        "shared_claim": "%outbox_monitor.claim(%",
        "shared_ack": "%outbox_monitor.ack(%",
        "own_schema": "%outbox_monitor.%",
        "table_pattern": name,
        "users_claim": r"for\s+update\s+skip\s+locked",
        "users_ack": rf"^\s*update\s+\S*{name}.*\mprocessed_at\s*=\s*now\(\)",
        # a dead-letter also sets processed_at, but counts an attempt (SPEC §1)
        "not_ack": r"\mattempts\M",
    }


def read_statements(db: Database) -> WorkerStatements:
    """Read ``pg_stat_statements`` now, without calls per minute.

    Returns:
        ``WorkerStatements(available=False, note=…)`` when the extension is not installed
        in this database, not preloaded, not readable by this login (no
        ``pg_read_all_stats``) or the server is older than 14; else the costs by kind.

    Raises:
        The connector's errors other than those (``DatabaseUnavailable``, ``QueryTimeout``).
    """
    with db.session():
        found = db.fetch_one("claim_statements_extension")
        if found is None:
            return WorkerStatements(False, NOT_INSTALLED)
        if found["server_version"] < MIN_SERVER_VERSION:
            return WorkerStatements(False, TOO_OLD)
        if not found["readable"]:
            return WorkerStatements(False, NOT_READABLE)
        view = sql.Identifier(found["schema"], "pg_stat_statements")
        try:
            rows = db.fetch_all("claim_statements_read", _patterns(db), statements=view)
        except pg_errors.ObjectNotInPrerequisiteState:
            return WorkerStatements(False, NOT_LOADED)
        except pg_errors.InsufficientPrivilege:  # never mapped: the view is the extension's
            return WorkerStatements(False, NOT_READABLE)
    by_kind = {row["kind"]: row for row in rows}
    return WorkerStatements(
        True,
        None,
        tuple(
            StatementCost(
                kind,
                int(row["calls"]),
                float(row["total_exec_ms"]),
                float(row["max_exec_ms"]),
                int(row["statements"]),
            )
            for kind in KINDS
            if (row := by_kind.get(kind)) is not None
        ),
    )


def _with_rates(found: WorkerStatements, previous: dict[str, dict[str, Any]]) -> WorkerStatements:
    costs = []
    for cost in found.costs:
        before = previous.get(cost.kind)
        rate = interval_mean = None
        if before is not None and cost.calls >= before["calls"] and before["age_seconds"] > 0:
            calls = cost.calls - int(before["calls"])
            rate = calls / (float(before["age_seconds"]) / 60.0)
            if calls > 0:
                interval_mean = (cost.total_exec_ms - float(before["total_exec_ms"])) / calls
        costs.append(
            StatementCost(
                cost.kind,
                cost.calls,
                cost.total_exec_ms,
                cost.max_exec_ms,
                cost.statements,
                rate,
                interval_mean,
            )
        )
    return WorkerStatements(found.available, found.note, tuple(costs))


def previous_readings(db: Database) -> dict[str, dict[str, Any]]:
    """The newest recorded reading of each kind: ``{kind: {"calls", "total_exec_ms",
    "age_seconds"}}`` (query ``claim_statements_previous``)."""
    rows = db.fetch_all("claim_statements_previous", {"table_name": db.table_name})
    return {row["kind"]: row for row in rows}


def worker_statements(db: Database, *, history: Database | None = None) -> WorkerStatements:
    """``read_statements`` with calls per minute since the newest recorded reading.

    Args:
        db: the watched database.
        history: where the scheduler records its readings (its primary); default ``db``.
    """
    found = read_statements(db)
    if not found.available:
        return found
    return _with_rates(found, previous_readings(history or db))


def record_statements(db: Database, *, primary: Database | None = None) -> WorkerStatements:
    """Read ``pg_stat_statements`` (``worker_statements``) and record the reading of each
    kind found through ``primary`` (default ``db``); nothing is recorded when it is not
    available.

    Returns:
        The reading, with calls per minute since the previous recording.
    """
    writes = primary or db
    found = worker_statements(db, history=writes)
    if found.costs:
        with writes.transaction() as conn:
            for cost in found.costs:
                conn.execute(
                    writes.compose("claim_statement_insert"),
                    {
                        "table_name": db.table_name,
                        "kind": cost.kind,
                        "calls": cost.calls,
                        "total_exec_ms": cost.total_exec_ms,
                    },
                )
    return found
