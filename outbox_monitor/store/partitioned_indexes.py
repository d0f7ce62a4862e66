"""Recommended indexes on a partitioned outbox: ON ONLY, CONCURRENTLY per partition, ATTACH."""

import psycopg
from psycopg import sql

from outbox_monitor.store.db import Database, lock_timeout
from outbox_monitor.store.indexes import RecommendedIndex, build_index, index_name, present_indexes
from outbox_monitor.store.queries import compose

PARTITION_DDL_LOCK_TIMEOUT_SECONDS = 2.0
"""How long init-db's DDL on a partitioned outbox waits for its lock: ``CREATE INDEX … ON ONLY``
the parent (a SHARE lock, which the workers' writes queue behind while it waits) and the
``ATTACH`` of each partition's index. It then gives up, and the index is reported unfinished
(``InitReport.unfinished_indexes``): run init-db again."""


def create_partitioned_index(db: Database, conn, index: RecommendedIndex) -> str | None:
    """Build ``index`` on a partitioned outbox without holding up its writes: ``ON ONLY`` each
    partitioned table of the tree, ``CONCURRENTLY`` on each leaf, each partition's index
    attached to its parent's as soon as it is built (the parent's becomes valid with the
    last). What an earlier run left is reused: an index attached already, a valid index of
    the partition's name (attached now), an invalid one (dropped and built again).

    Returns:
        ``None`` when the index is valid on the outbox, else why it is not (a lock timeout,
        a partition's invalid index); a next run goes on from there.
    """
    schema, table = db.settings.table_parts
    root = index.name(table)
    index_of = {(schema, table): root}
    try:
        with lock_timeout(conn, PARTITION_DDL_LOCK_TIMEOUT_SECONDS):
            conn.execute(build_index(index, root, db.table, leaf=False))
        tree = conn.execute(compose("partition_tree"), {"table_regclass": db.table_regclass})
        for part in tree.fetchall():
            here = (part["schema"], part["name"])
            parent = sql.Identifier(
                part["parent_schema"], index_of[(part["parent_schema"], part["parent_name"])]
            )
            own = index_name(part["name"], index.purpose)
            state = conn.execute(
                compose("partition_index"),
                {
                    "parent_index": parent.as_string(conn),
                    "partition": sql.Identifier(*here).as_string(conn),
                    "name": own,
                },
            ).fetchone()
            if state["attached"] is not None:
                index_of[here] = state["attached"]
                if state["attached_valid"] or not part["leaf"]:
                    continue
                return (
                    f"the index {state['attached']} of partition {'.'.join(here)} is invalid: "
                    "drop it (DROP INDEX CONCURRENTLY) and run init-db again"
                )
            index_of[here] = own
            if not part["leaf"]:
                with lock_timeout(conn, PARTITION_DDL_LOCK_TIMEOUT_SECONDS):
                    conn.execute(build_index(index, own, sql.Identifier(*here), leaf=False))
            else:
                if state["named_valid"] is False:  # an interrupted CONCURRENTLY build
                    conn.execute(compose("drop_index", index=sql.Identifier(part["schema"], own)))
                conn.execute(build_index(index, own, sql.Identifier(*here), leaf=True))
            with lock_timeout(conn, PARTITION_DDL_LOCK_TIMEOUT_SECONDS):
                conn.execute(
                    compose(
                        "attach_index",
                        parent_index=parent,
                        child_index=sql.Identifier(part["schema"], own),
                    )
                )
    except psycopg.errors.LockNotAvailable:
        return (
            f"lock timeout ({PARTITION_DDL_LOCK_TIMEOUT_SECONDS:g} s): a long transaction or "
            "another DDL holds the table; run init-db again to finish it"
        )
    if root not in present_indexes(db, conn):
        return "not valid yet: a partition's index is missing; run init-db again"
    return None
