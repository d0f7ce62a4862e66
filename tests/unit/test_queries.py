import ast
import importlib.util
import re
from pathlib import Path

import pytest
from psycopg import sql

from outbox_monitor.store.filters import EVENT_TYPE_KEY_CHARS, Where, like_escape
from outbox_monitor.store.indexes import FLOW_CONTROL_INDEX, RECOMMENDED_INDEXES
from outbox_monitor.store.queries import all_queries, compose, migration_files, parse_queries


def test_every_block_has_a_description_and_sql():
    queries = all_queries()
    assert len(queries) > 30
    for query in queries.values():
        assert query.description and query.text
        assert "-- name:" not in query.text


def test_parse_rejects_duplicates_and_missing_descriptions():
    with pytest.raises(ValueError, match="twice"):
        parse_queries("-- name: a\n-- d\nSELECT 1;\n-- name: a\n-- d\nSELECT 2;\n")
    with pytest.raises(ValueError, match="description"):
        parse_queries("-- name: a\nSELECT 1;\n")


def test_compose_puts_the_table_in_as_an_identifier():
    text = compose("queue_depth", table=sql.Identifier('we"ird', "Out Box")).as_string()
    assert '"we""ird"."Out Box"' in text
    assert "{and_filters}" not in text


def test_migrations_are_numbered_from_one():
    versions = [version for version, _, _ in migration_files()]
    assert versions == list(range(1, len(versions) + 1))


def test_the_python_names_sql_comments_cite_exist():
    # e.g. "store.indexes.FLOW_CONTROL_INDEX": a module of the package and a constant it defines
    # (migrations are applied by version number, not checksummed: a comment may be corrected)
    texts = [text for _, _, text in migration_files()]
    texts += [q.description for q in all_queries().values()]
    cited = {
        m
        for text in texts
        for m in re.findall(r"\b([a-z_]+(?:\.[a-z_]+)*)\.([A-Z][A-Z0-9_]{2,})\b", text)
    }
    assert cited
    for module, name in sorted(cited):
        source = Path(importlib.util.find_spec(f"outbox_monitor.{module}").origin).read_text()
        defined = {  # assigned in that module itself, not imported into it
            target.id
            for node in ast.parse(source).body
            if isinstance(node, ast.Assign | ast.AnnAssign)
            for target in (node.targets if isinstance(node, ast.Assign) else [node.target])
            if isinstance(target, ast.Name)
        }
        assert name in defined, f"{module}.{name}"


def test_like_escape_keeps_only_percent_as_wildcard():
    assert like_escape("order_paid.%") == "order\\_paid.%"
    assert like_escape("a\\b") == "a\\\\b"


def test_where_exact_and_pattern():
    unkeyed = Where().event_type("order.paid")
    assert unkeyed.params == {"event_type": "order.paid"}
    assert "left(" not in unkeyed.fragment.as_string()
    exact = Where(keyed=True).event_type("order.paid")
    assert "left(" not in exact.estimated_fragment.as_string()
    assert exact.params == {"event_type": "order.paid", "event_type_key": "order.paid"}
    assert "left(event_type, 200) = %(event_type_key)s" in exact.fragment.as_string()
    pattern = Where(keyed=True).event_type("order_%")
    assert pattern.params == {"event_type": "order\\_%", "event_type_key": "order\\_%"}
    assert "left(event_type, 200) LIKE %(event_type_key)s" in pattern.fragment.as_string()
    assert "event_type LIKE %(event_type)s" in pattern.fragment.as_string()
    # the index key of a type or a pattern's head longer than 200 characters: its first 200
    long = "é" * 250
    assert Where(keyed=True).event_type(long).params["event_type_key"] == "é" * 200
    assert Where(keyed=True).event_type(long + ".%").params["event_type_key"] == "é" * 200
    keyed = Where(keyed=True).event_type(long + "%").fragment.as_string()
    assert "left(event_type, 200) =" in keyed
    assert Where(keyed=True).event_type("%.paid").params == {"event_type": "%.paid"}  # no head
    assert Where().event_type("").fragment.as_string() == ""


def test_the_indexes_by_type_and_their_readers_key_on_one_prefix():
    """init-db's indexes by type, migration 024's claim and filters.Where state the same
    left(event_type, N): a planner uses an expression index only for the same expression."""
    key = f"left(event_type, {EVENT_TYPE_KEY_CHARS})"
    for index in (*RECOMMENDED_INDEXES, FLOW_CONTROL_INDEX):
        if "event_type" in compose(index.block, **_BUILD).as_string():
            assert key in compose(index.block, **_BUILD).as_string(), index.purpose
    claim = next(text for version, _, text in migration_files() if version == 24)
    assert f"left(o.event_type, {EVENT_TYPE_KEY_CHARS})" in claim
    assert key in Where(keyed=True).event_type("order.paid").fragment.as_string()


_BUILD = {
    "index": sql.Identifier("i"),
    "table": sql.Identifier("t"),
    "concurrently": sql.SQL(""),
    "only": sql.SQL(""),
}
