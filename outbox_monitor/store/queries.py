"""Load the named SQL blocks of ``sql/queries.sql`` once and compose them safely."""

import re
from dataclasses import dataclass
from functools import cache
from importlib import resources

from psycopg import sql

_BLOCK_START = re.compile(r"^-- name: (\w+)\s*$", re.MULTILINE)


@dataclass(frozen=True)
class NamedQuery:
    """One block of ``queries.sql``: its name, one-line description and SQL text."""

    name: str
    description: str
    text: str


def parse_queries(source: str) -> dict[str, NamedQuery]:
    """Split a ``.sql`` file into named blocks.

    Args:
        source: text in which each block starts with ``-- name: <name>``, then one
            ``-- <description>`` line, then the statement(s) up to the next block.

    Returns:
        ``{name: NamedQuery}`` in file order.

    Raises:
        ValueError: a name appears twice or a block has no description or no SQL.
    """
    starts = list(_BLOCK_START.finditer(source))
    blocks: dict[str, NamedQuery] = {}
    for index, match in enumerate(starts):
        end = starts[index + 1].start() if index + 1 < len(starts) else len(source)
        body = source[match.end() : end].strip("\n")
        first, _, rest = body.partition("\n")
        name = match.group(1)
        if not first.startswith("-- ") or not rest.strip():
            raise ValueError(f"query {name!r}: needs a '-- description' line and SQL")
        if name in blocks:
            raise ValueError(f"query {name!r} is defined twice")
        text = re.split(r"\n\s*\n-- =+", rest)[0].strip()
        blocks[name] = NamedQuery(name, first[3:].strip(), text)
    return blocks


@cache
def all_queries() -> dict[str, NamedQuery]:
    """Every named query of the package, parsed once per process."""
    source = resources.files("outbox_monitor.store").joinpath("sql/queries.sql").read_text("utf-8")
    return parse_queries(source)


def compose(name: str, **fragments: sql.Composable) -> sql.Composed:
    """Build the statement of one named query.

    Args:
        name: a block name of ``sql/queries.sql``.
        **fragments: values for its ``{placeholders}`` — ``sql.Identifier`` for tables
            and indexes, ``sql.SQL``/``sql.Composed`` for filter fragments. A query's
            ``{and_filters}`` defaults to nothing.

    Returns:
        A ``psycopg.sql.Composed`` ready for ``cursor.execute`` with named params.

    Raises:
        KeyError: unknown query name or a placeholder left without a fragment.
    """
    fragments.setdefault("and_filters", sql.SQL(""))
    return sql.SQL(all_queries()[name].text).format(**fragments)


def migration_files() -> list[tuple[int, str, str]]:
    """The migrations of the ``outbox_monitor`` schema, oldest first.

    Returns:
        ``[(version, name, sql_text), ...]`` from ``sql/migrations/NNN_name.sql``.
    """
    folder = resources.files("outbox_monitor.store").joinpath("sql/migrations")
    found = []
    for entry in folder.iterdir():
        match = re.match(r"^(\d+)_(\w+)\.sql$", entry.name)
        if match:
            found.append((int(match.group(1)), match.group(2), entry.read_text("utf-8")))
    return sorted(found)
