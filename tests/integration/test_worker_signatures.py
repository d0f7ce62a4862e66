"""Issue 17 item 5: a new version's migrations never stop running workers.

A worker (the Python API, the n8n workflows) calls the shared SQL functions by name and
argument list. A migration that dropped one, changed its arguments, its defaults or its
result type, or added an overload (an ambiguous call) would break every worker still
running the old code: each one must be replaced in place (``CREATE OR REPLACE``) with the
same signature — and the same object: a DROP and CREATE would change its oid, and a
worker's prepared statement (n8n's) or cached plan would then fail. The migrations are
applied one at a time, and ``pg_proc`` is read after each step.
"""

import re
from pathlib import Path

import psycopg
from psycopg import sql

from outbox_monitor.store.queries import all_queries, compose, migration_files

REPO = Path(__file__).resolve().parents[2]
CALL = re.compile(r"outbox_monitor\.(\w+)\s*\(")
SIGNATURES = """
SELECT p.proname AS name, p.oid::bigint AS oid,
       pg_get_function_arguments(p.oid) AS arguments,
       pg_get_function_result(p.oid) AS result
FROM pg_proc p
WHERE p.pronamespace = 'outbox_monitor'::regnamespace AND p.proname = ANY(%s)
ORDER BY 1, 2
"""


def worker_functions() -> set[str]:
    """The shared functions the workers call: in the Python API's statements (the
    ``claim``, ``ack``, ``ack_many`` and ``fail`` blocks of queries.sql) and in the n8n
    workflows."""
    blocks = all_queries()
    texts = [blocks[name].text for name in ("claim", "ack", "ack_many", "fail")]
    texts += [path.read_text() for path in (REPO / "n8n" / "workflows").glob("*.json")]
    return {name for text in texts for name in CALL.findall(text)}


def test_the_workers_call_claim_ack_and_fail():
    assert worker_functions() == {"claim", "ack", "ack_many", "fail"}


def test_every_worker_function_keeps_its_signature_across_all_migrations(empty_dsn):
    names = sorted(worker_functions())
    first: dict[str, list[tuple[int, str, str]]] = {}
    with psycopg.connect(empty_dsn, autocommit=True) as conn:
        conn.execute(compose("create_monitor_schema"))
        for version, name, text in migration_files():
            conn.execute(sql.SQL(text))
            now: dict[str, list[tuple[int, str, str]]] = {}
            for function, oid, arguments, result in conn.execute(SIGNATURES, (names,)):
                now.setdefault(function, []).append((oid, arguments, result))
            for function, signature in first.items():
                assert now.get(function) == signature, (
                    f"migration {version:03d}_{name} changed outbox_monitor.{function}: "
                    f"{signature} became {now.get(function)}"
                )
            first = {**now, **first}
    assert set(first) == set(names), "a worker calls a function no migration creates"
    assert first["claim"][0][1] == "p_table regclass, p_worker text, p_limit integer DEFAULT 50"
    assert first["ack"][0][1:] == ("p_table regclass, p_id bigint, p_worker text", "boolean")
    assert first["ack_many"][0][1:] == (
        "p_table regclass, p_ids bigint[], p_worker text",
        "bigint[]",
    )
    assert all(len(signature) == 1 for signature in first.values()), first
