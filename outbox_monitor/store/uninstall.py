"""Uninstall (issue 17 item 5): what outbox-monitor added to a database — its schema and the
indexes init-db created on the outbox table — previewed, then dropped; never a users' table,
index or row (docs/deploy.md, "Uninstalling")."""

import logging
from dataclasses import dataclass, field

import psycopg
from psycopg import sql

from outbox_monitor.errors import ActionRefused
from outbox_monitor.store.db import Database, lock_timeout
from outbox_monitor.store.indexes import (
    FLOW_CONTROL_INDEX,
    RECOMMENDED_INDEXES,
    retired_indexes_present,
)
from outbox_monitor.store.queries import compose

# the logger keeps its name from before the move into a package (log filters use it)
log = logging.getLogger("outbox_monitor.uninstall")

DROP_LOCK_TIMEOUT_SECONDS = 5.0
"""How long each DROP waits for its lock before giving up (the workers never queue longer)."""


@dataclass
class UninstallPlan:
    """What ``uninstall`` would drop (or, returned by it, dropped).

    - ``tables``: the ``outbox_monitor`` schema's tables and their size in bytes, largest
      first (empty and ``schema`` false when the schema is absent);
    - ``functions``: how many functions the schema holds (the workers' claim, ack, fail …);
    - ``indexes``: the outbox table's indexes init-db created (recommended ones carrying its
      comment, retired ones of earlier releases), names without schema;
    - ``partitioned``: those of them that are partitioned indexes (no CONCURRENTLY);
    - ``blockers``: objects outside the schema depending on it (a user's view …): uninstall
      refuses while there is one, since ``DROP SCHEMA … CASCADE`` would take them along.
    """

    schema: bool = False
    tables: dict[str, int] = field(default_factory=dict)
    functions: int = 0
    indexes: list[str] = field(default_factory=list)
    partitioned: set[str] = field(default_factory=set)
    blockers: list[str] = field(default_factory=list)

    @property
    def empty(self) -> bool:
        """Nothing of outbox-monitor's is left to drop."""
        return not self.schema and not self.indexes


def plan_uninstall(db: Database) -> UninstallPlan:
    """Read what ``uninstall`` would drop (reads only, under the statement timeout).

    Raises:
        DatabaseUnavailable, PermissionDenied, QueryTimeout: from the connector.
    """
    _, table = db.settings.table_parts
    plan = UninstallPlan()
    plan.tables = {
        row["table_name"]: row["bytes"] for row in db.fetch_all("uninstall_schema_tables", {})
    }
    plan.schema = bool(plan.tables)
    retired = []
    if plan.schema:
        plan.functions = db.fetch_one("uninstall_schema_functions", {})["functions"]
        plan.blockers = [row["object"] for row in db.fetch_all("uninstall_outside_dependents", {})]
        if "schema_migrations" in plan.tables:
            retired = retired_indexes_present(db)
    names = [index.name(table) for index in (*RECOMMENDED_INDEXES, FLOW_CONTROL_INDEX)]
    params = {"table": db.table.as_string(), "names": names + retired}
    for row in db.fetch_all("uninstall_indexes", params):
        if row["created_by_init_db"] or row["index_name"] in retired:
            plan.indexes.append(row["index_name"])
            if row["partitioned"]:
                plan.partitioned.add(row["index_name"])
    return plan


def uninstall(db: Database, plan: UninstallPlan, *, actor: str) -> UninstallPlan:
    """Drop what ``plan`` lists: each index (``DROP INDEX CONCURRENTLY``; a partitioned one
    with ``DROP INDEX`` in a transaction), then the schema (``DROP SCHEMA outbox_monitor
    CASCADE``), each under a lock timeout of ``DROP_LOCK_TIMEOUT_SECONDS``. The audit log
    goes with the schema, so the uninstall is logged (a WARNING line naming ``actor`` and
    what was dropped) rather than audited.

    Returns:
        The plan of what was dropped (the schema's tables as they were).

    Raises:
        ActionRefused: objects outside the schema depend on it (``plan.blockers``), named;
            nothing is dropped.
        ActionRefused: a lock timeout (a long transaction holds the table or the schema);
            what was dropped before it is logged.
        DatabaseUnavailable, PermissionDenied: from the connector.
    """
    if plan.blockers:
        raise ActionRefused(
            "objects outside the outbox_monitor schema depend on it: " + "; ".join(plan.blockers),
            hint="Drop or change them first (DROP SCHEMA … CASCADE would drop them too); "
            "nothing was dropped.",
        )
    schema, _ = db.settings.table_parts
    dropped: list[str] = []
    with db.direct_connection(statement_timeout=None) as conn:
        try:
            with lock_timeout(conn, DROP_LOCK_TIMEOUT_SECONDS):
                for name in plan.indexes:
                    index = sql.Identifier(schema, name)
                    if name in plan.partitioned:
                        with conn.transaction():
                            conn.execute(compose("uninstall_drop_partitioned_index", index=index))
                    else:
                        conn.execute(compose("drop_index", index=index))
                    dropped.append(name)
                if plan.schema:
                    with conn.transaction():
                        conn.execute(compose("uninstall_drop_schema"))
        except psycopg.errors.LockNotAvailable:
            log.warning(
                "uninstall by %s stopped by a lock timeout after dropping %s",
                actor,
                ", ".join(dropped) or "nothing",
            )
            raise ActionRefused(
                f"lock timeout ({DROP_LOCK_TIMEOUT_SECONDS:g} s): a long transaction holds the "
                f"outbox table or the outbox_monitor schema; dropped so far: "
                f"{', '.join(dropped) or 'nothing'}",
                hint="Stop the workers and the scheduler, end the long transaction, run "
                "uninstall again (it drops only what is left).",
            ) from None
    log.warning(
        "uninstall by %s: dropped %s on %s",
        actor,
        "; ".join(describe_plan(plan)),
        db.table_name,
    )
    return plan


def describe_plan(plan: UninstallPlan) -> list[str]:
    """One line per thing ``plan`` drops, for the preview and the log line."""
    lines = []
    if plan.schema:
        lines.append(
            f"schema outbox_monitor: {len(plan.tables)} table(s) "
            f"({', '.join(plan.tables)}), {plan.functions} function(s)"
        )
    lines += [f"index {name}" for name in plan.indexes]
    return lines
