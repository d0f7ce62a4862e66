"""The audited writers of one outbox table (issue 29 item 2, SPEC §4, docs/security.md).

The operator login changes an outbox only through functions ``init-db`` creates for that
table, in the ``outbox_monitor`` schema: each runs as its owner (SECURITY DEFINER,
``search_path`` pinned to ``pg_catalog, pg_temp``, every object schema-qualified), has the
table written into its body — never a table parameter, which would lend the owner's rights
on any table the owner has (migration 007 fixed exactly that once) — and writes its audit
row through the internal ``outbox_monitor.record_audit`` in the same transaction, with the
database login (``session_user``) and the client address. ``--print-grants`` grants them to
the operator role only.

Names: ``<kind>__<schema>__<table>`` (``reap__public__integration_outbox``), quoted as
written. Postgres cuts identifiers at 63 bytes, and a ``_`` of a part beside the ``__``
separator could make two tables' names meet (``public._x`` and ``public_.x`` both gave
``reap__public___x`` before this rule: a replay of one table's row changed the other's), so a
name longer than 63 bytes, or of a schema or table holding ``__`` or starting or ending with
``_``, is ``<kind>__<the start of schema__table>__<12 hex of md5(schema.table)>``, 63 bytes at
most: the rule of the worker functions (migration 032). So is a table named by 12 hex digits,
whose plain name could be a long table's hashed one. Each function's comment names its
table; init-db moves an earlier release's writer of the table to its new name, grants kept.
"""

import hashlib
import re

from psycopg import sql

from outbox_monitor.config.settings import Settings
from outbox_monitor.store.queries import compose

MAX_IDENTIFIER_BYTES = 63
HASH_CHARS = 12
KINDS = (
    "reap",
    "replay",
    "prune",
    "note",
    "refused",
    "silence",
    "expire_silence",
    "controls",
    "acknowledge",
)
"""``reap``, ``replay``, ``prune``: the SPEC §4 actions, their guard inside their statement;
``note``: the audit row of a read (a payload reveal, an operator's payload search);
``refused``: the rate-limited row of an action the dashboard refused (issue 29 item 5);
``silence``, ``expire_silence``: an alert silence created or ended (silences are the
database's; the audit row is this outbox's); ``controls``: a change of the table's flow
controls (SPEC §5: pause, resume, limit, breaker, clear, a controls file applied);
``acknowledge``: an alert episode acknowledged (from Slack, ``alerts.acknowledge``)."""
SIGNATURES = {
    "reap": "uuid, text, jsonb, bigint[], double precision, integer, boolean",
    "replay": "uuid, text, jsonb, bigint[], timestamptz, bigint, double precision, boolean",
    "prune": "uuid, text, jsonb, bigint[], text, double precision, boolean",
    "note": "uuid, text, text, jsonb, bigint[]",
    "refused": "text, text",
    "silence": "text, jsonb, timestamptz, timestamptz, text, jsonb",
    "expire_silence": "text, bigint, timestamptz",
    "controls": "uuid, text, text, jsonb, jsonb",
    "acknowledge": "text, bigint, text, text, text, text, jsonb",
}
"""Each kind's argument types, as ``GRANT … ON FUNCTION name(types)`` needs them."""


MEETS_THE_SEAM = re.compile(r"__|^_|_\.|\._|_$|\.[0-9a-f]{12}$")
"""A ``schema.table`` whose plain writer names another table could share: a part holding
``__`` or starting or ending with ``_`` (migration 032's rule), or a table named by 12 hex
digits, whose plain name a long table's hashed name (``<the start of it>__<12 hex>``) could be
(attack33: ``replay__<41 bytes of a long schema>__<hex>`` was both)."""


def writer_name(kind: str, schema: str, table: str) -> str:
    """The name (in schema ``outbox_monitor``) of one audited writer of ``schema.table``.

    Args:
        kind: one of ``KINDS``.
        schema, table: the outbox table's parts, as written (case kept).

    Returns:
        ``<kind>__<schema>__<table>``, or, when that is over 63 bytes (UTF-8) or the schema
        or table holds ``__`` or starts or ends with ``_``, or the table is 12 hex digits
        (``MEETS_THE_SEAM``), the start of it cut on a character boundary followed by ``__``
        and the first 12 hex digits of ``md5("schema.table")``: at most 63 bytes.

    Raises:
        ValueError: an unknown ``kind``.
    """
    if kind not in KINDS:
        raise ValueError(f"unknown audited writer {kind!r}, expected one of {KINDS}")
    plain = f"{kind}__{schema}__{table}"
    if len(plain.encode()) <= MAX_IDENTIFIER_BYTES and not MEETS_THE_SEAM.search(
        f"{schema}.{table}"
    ):
        return plain
    digest = hashlib.md5(f"{schema}.{table}".encode()).hexdigest()[:HASH_CHARS]
    room = MAX_IDENTIFIER_BYTES - len(digest) - 2
    head = plain.encode()[:room].decode(errors="ignore")
    return f"{head}__{digest}"


def earlier_writer_name(kind: str, schema: str, table: str) -> str:
    """The name releases before migration 032's rule gave the writer: ``writer_name``
    except for a part starting or ending with ``_``, or a table of 12 hex digits (and no
    ``__``), which was plain."""
    plain = f"{kind}__{schema}__{table}"
    if len(plain.encode()) <= MAX_IDENTIFIER_BYTES and "__" not in schema + "\0" + table:
        return plain
    return writer_name(kind, schema, table)


def writer(settings: Settings, kind: str) -> sql.Identifier:
    """The schema-qualified identifier of one audited writer of ``settings.table``."""
    return sql.Identifier("outbox_monitor", writer_name(kind, *settings.table_parts))


def writer_privileges(settings: Settings, statement: str, role: sql.Composable) -> sql.Composed:
    """One statement per audited writer of ``settings.table``, a line each, for
    ``--print-grants``.

    Args:
        settings: for the outbox table.
        statement: ``"GRANT EXECUTE ON FUNCTION {} TO {};"`` or a ``REVOKE … FROM``: its
            first ``{}`` is the function with its argument types, its second ``role``.
        role: the role (``sql.Identifier``) or ``sql.SQL("PUBLIC")``.
    """
    return sql.SQL("\n").join(
        sql.SQL(statement).format(
            sql.Composed([writer(settings, kind), sql.SQL(f"({SIGNATURES[kind]})")]), role
        )
        for kind in KINDS
    )


def create_writers(conn, settings: Settings) -> None:
    """Create (or replace) the audited writers of ``settings.table`` in the caller's
    transaction, owned by the connected role (init-db's: the owner of the table and of the
    schema), EXECUTE revoked from PUBLIC.

    Raises:
        psycopg.Error: the role may not create functions in ``outbox_monitor``.
    """
    table_name = ".".join(settings.table_parts)
    table = sql.Identifier(*settings.table_parts)
    fragments: dict[str, sql.Composable] = {
        "table": table,
        "table_name": sql.Literal(table_name),
        "regclass": sql.Literal(table.as_string()),
    }
    for kind in KINDS:
        fragments[kind] = writer(settings, kind)
        fragments[f"{kind}_comment"] = sql.Literal(_comment(kind, table_name))
    conn.execute(compose("audited_writers", **fragments))
    _move_earlier_writers(conn, settings)


def _comment(kind: str, table_name: str) -> str:
    return f"Audited {kind} of {table_name} (init-db; store/audited_writers.py)."


def _move_earlier_writers(conn, settings: Settings) -> None:
    """Where an earlier release named this table's writers otherwise (a part starting or
    ending with ``_``, a table of 12 hex digits): grant the new writers to whoever may run
    the earlier ones (with the grant option they had; never PUBLIC), then drop those — only
    the ones whose comment names this table (the name another table may have taken over, as
    the collision did, is that table's to move)."""
    table_name = ".".join(settings.table_parts)
    for kind in KINDS:
        earlier = earlier_writer_name(kind, *settings.table_parts)
        if earlier == writer_name(kind, *settings.table_parts):
            continue
        signature = sql.Composed(
            [sql.Identifier("outbox_monitor", earlier), sql.SQL(f"({SIGNATURES[kind]})")]
        )
        found = conn.execute(
            compose("earlier_writer_grantees"),
            {"signature": signature.as_string(conn), "comment": _comment(kind, table_name)},
        ).fetchone()
        if found is None:
            continue
        for role in found["grantees"]:
            conn.execute(
                compose(
                    "grant_audited_writer",
                    writer=sql.Composed([writer(settings, kind), sql.SQL(f"({SIGNATURES[kind]})")]),
                    role=sql.Identifier(role),
                    option=sql.SQL(" WITH GRANT OPTION" if role in found["grantable"] else ""),
                )
            )
        conn.execute(compose("drop_earlier_writer", writer=signature))
