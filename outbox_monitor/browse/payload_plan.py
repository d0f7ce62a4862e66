"""The plan of a payload search (issue 15 item 6): EXPLAIN (never ANALYZE) one page, whether
a payload index serves it, and when none can, the exact ``CREATE INDEX CONCURRENTLY`` that
would (shown, never run; the statements are ``queries.sql``'s ``payload_index_*`` blocks).

A containment search (``payload @> …``) is served by a GIN index on ``payload``
(``jsonb_ops`` or ``jsonb_path_ops``); a key-path search (``payload #>> path = value``) by a
btree whose leading key is that path's expression. Without one, Postgres tests the payload of
every row it scans: the outbox has no index on ``created_at`` over every row (init-db retired
it: the workers' claim would walk it), so the time range only filters.
"""

import json
import re
from dataclasses import dataclass
from typing import Any

from psycopg import sql

from outbox_monitor.browse.payload_search import DEFAULT_PAGE_SIZE, PayloadSearch, timed_out
from outbox_monitor.errors import QueryTimeout
from outbox_monitor.store.db import Database
from outbox_monitor.store.indexes import index_name
from outbox_monitor.store.partitioning import table_shape

_ARRAY_SPECIAL = re.compile(r'[{},"\\\s]')
_NOT_NAME = re.compile(r"[^a-z0-9]+")


@dataclass(frozen=True)
class SearchPlan:
    """The plan of a search (EXPLAIN, never run): ``shape`` (its scan nodes), ``index`` (the
    payload index it uses, else ``None``), ``usable`` (payload indexes that could serve it),
    ``estimated_rows`` (matches the planner expects), ``table_rows`` (the planner's row
    count of the table), ``advice`` (the ``CREATE INDEX CONCURRENTLY`` that would serve it
    when no index can; shown, never run) and ``partitioned``."""

    shape: str
    index: str | None
    usable: tuple[str, ...]
    estimated_rows: int
    table_rows: int
    advice: str | None
    partitioned: bool = False

    @property
    def slow(self) -> bool:
        """No payload index serves the search: each payload of the scanned rows is tested."""
        return self.index is None


def _sql_literal(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def text_array(path: tuple[str, ...]) -> str:
    """``path`` as Postgres prints a ``text[]`` (``{customer,id}``; elements quoted when
    empty, ``NULL`` or holding ``{},"\\`` or white space), as ``array_out`` does."""

    def element(segment: str) -> str:
        if segment == "" or segment.upper() == "NULL" or _ARRAY_SPECIAL.search(segment):
            return '"' + segment.replace("\\", "\\\\").replace('"', '\\"') + '"'
        return segment

    return "{" + ",".join(element(s) for s in path) + "}"


def _path_expression(path: tuple[str, ...]) -> str:
    """The key path's expression as ``pg_get_indexdef`` prints an index on it."""
    return f"(payload #>> {_sql_literal(text_array(path))}::text[])"


def _advice(db: Database, search: PayloadSearch) -> str:
    table = db.settings.table_parts[1]
    if search.document is not None:
        name = index_name(table, "payload_gin")
        statement = db.compose("payload_index_containment", index=sql.Identifier(name))
    else:
        joined = "_".join(search.path or ())
        purpose = "payload_" + (_NOT_NAME.sub("_", joined.lower()).strip("_")[:40] or "path")
        name = index_name(table, purpose)
        statement = db.compose(
            "payload_index_path",
            index=sql.Identifier(name),
            path=sql.SQL(_sql_literal(text_array(search.path or ()))),
        )
    return statement.as_string()


def _scans(node: dict[str, Any]) -> list[dict[str, Any]]:
    """The plan nodes that read a table or an index, depth first."""
    found, stack = [], [node]
    while stack:
        current = stack.pop()
        if "Relation Name" in current or "Index Name" in current:
            found.append(current)
        stack.extend(reversed(current.get("Plans", [])))
    return found


def explain_search(
    db: Database, search: PayloadSearch, *, limit: int = DEFAULT_PAGE_SIZE
) -> SearchPlan:
    """Plan one page of ``search`` (EXPLAIN (FORMAT JSON), never ANALYZE: nothing is read)
    and judge it: which payload index serves it, else the index that would.

    A containment search is served by a GIN index on ``payload`` (``jsonb_ops`` or
    ``jsonb_path_ops``); a key-path search by a btree whose leading key is that path's
    ``#>>`` expression. Without one, Postgres tests the payload of every row it scans.
    Call ``payload_search.check_access`` first: the planner's estimates come from the
    statistics of the values searched.

    Returns:
        A ``SearchPlan``; ``advice`` is set when no valid index could serve the search.

    Raises:
        PayloadSearchTimeout: even planning hit the statement timeout.
        DatabaseUnavailable, PermissionDenied: from the connector.
    """
    where = search.where()
    params = {**where.params, "since": search.since, "until": search.until, "limit": limit + 1}
    statement = db.compose("payload_search_page", and_filters=where.fragment)
    try:
        with db.session():
            document = db.fetch_one("count_estimate", params, rows=statement)["QUERY PLAN"]
            indexes = db.fetch_all("payload_search_indexes", {"table_regclass": db.table_regclass})
            rows = db.fetch_one("claim_plan_table_rows", {"table_regclass": db.table_regclass})
            shape = table_shape(db)
    except QueryTimeout as error:
        raise timed_out(db, search, None) from error
    root = (json.loads(document) if isinstance(document, str) else document)[0]["Plan"]
    if search.document is not None:
        usable = [i for i in indexes if i["method"] == "gin" and i["leading_key"] == "payload"]
    else:
        expression = _path_expression(search.path or ())
        usable = [i for i in indexes if i["method"] == "btree" and i["leading_key"] == expression]
    names = tuple(dict.fromkeys(i["index_name"] for i in usable))
    scans = _scans(root)
    used = next((s["Index Name"] for s in scans if s.get("Index Name") in names), None)
    return SearchPlan(
        shape=" + ".join(dict.fromkeys(s["Node Type"] for s in scans)) or root["Node Type"],
        index=used,
        usable=names,
        estimated_rows=max(round(root["Plan Rows"]), 0),
        table_rows=int(rows["table_rows"]) if rows else 0,
        advice=None if names else _advice(db, search),
        partitioned=bool(shape and shape.partitioned),
    )


def describe_plan(plan: SearchPlan, search: PayloadSearch, table: str) -> str:
    """The plan in one paragraph: what serves the search, or why it is slow."""
    if plan.index is not None:
        return (
            f"Served by the index {plan.index} ({plan.shape}); the planner expects "
            f"≈ {plan.estimated_rows:,} rows for this page."
        )
    if plan.usable:
        return (
            f"The index {plan.usable[0]} could serve this search, but the planner chose "
            f"{plan.shape} for these values (cheaper by its estimate: a small table, or many "
            "rows matching): expect it to read the whole time range."
        )
    what = "GIN index on payload" if search.kind == "containment" else "index on this key path"
    if "Seq Scan" in plan.shape:
        count = f"≈ {plan.table_rows:,} by the planner's count; " if plan.table_rows else ""
        read = (
            f"every row of {table} ({count}{plan.shape}) and tests each payload: the time "
            "range only filters them, since no index on created_at covers every row (the "
            "workers' claim would walk one)"
        )
    else:
        read = f"the rows of the time range ({plan.shape}) and tests each payload"
    return f"Slow on a large table: no {what} can serve this search, so Postgres reads {read}."


def describe_advice(plan: SearchPlan) -> str:
    """What to know before running ``plan.advice`` (empty when there is none)."""
    if plan.advice is None:
        return ""
    text = (
        "Shown, never run. CONCURRENTLY does not block the workers' writes while it builds, "
        "but afterwards every publish and every claim, ack or retry of a row writes its "
        "entries too: benchmark it against the claim (benchmarks/claim.py) first."
    )
    if plan.partitioned:
        text += (
            " On a partitioned outbox CONCURRENTLY cannot build it on the parent: CREATE INDEX "
            "… ON ONLY the parent, CONCURRENTLY on each partition, then ALTER INDEX … ATTACH "
            "PARTITION, as init-db does."
        )
    return text
