"""Issue 10 item 5: error text Postgres cannot hold never strands a batch.

Postgres ``text`` cannot carry U+0000 and UTF-8 cannot carry a lone surrogate, so each
client cleans error text before binding it: the Python API (``outbox.fail``) and the
shipped n8n poller ("Record failure", run here with ``node``). And one row's bookkeeping
failure never touches another row of the batch.
"""

import json
import logging
import re
import subprocess

import psycopg

from outbox_monitor import outbox
from outbox_monitor.demo.n8n_install import SHIPPED_FOLDER
from outbox_monitor.errors import clean_error

WORKER = "worker-a@host/wf-1"
FFFD = "\ufffd"


def test_a_batch_with_nul_and_lone_surrogate_errors_is_fully_recorded(conn, rows):
    nul = rows.add(event_type="crm.upsert", created_ago=30)
    lone = rows.add(event_type="invoice.sent", created_ago=20)
    ok = rows.add(event_type="order.paid", created_ago=10)

    def handler(row):
        if row["event_type"] == "crm.upsert":
            raise RuntimeError("x\x00y")
        if row["event_type"] == "invoice.sent":
            raise RuntimeError("\ud800")

    counts = outbox.process_batch(conn, WORKER, handler)

    assert counts == {
        "claimed": 3,
        "acked": 1,
        "retried": 2,
        "dead_lettered": 0,
        "lost": 0,
        "unrecorded": 0,
    }
    got = {i: rows.get(i) for i in (nul, lone, ok)}
    assert [(got[i]["status"], got[i]["attempts"], got[i]["last_error"]) for i in got] == [
        ("pending", 1, "RuntimeError: x\ufffdy"),
        ("pending", 1, "RuntimeError: \ufffd"),
        ("done", 0, None),
    ]
    assert all(got[i]["locked_at"] is None and got[i]["locked_by"] is None for i in got)


def test_fail_cuts_at_2000_characters_on_a_code_point_boundary(conn, rows):
    row_id = rows.add()
    outbox.claim(conn, WORKER)
    # 1,999 ASCII characters, then a surrogate pair (one emoji as two UTF-16 halves, as a
    # JSON decoder may hand it over), then more: the 2000th character is the whole emoji
    error = "a" * 1999 + "\ud83d\ude00" + "tail\x00"
    assert outbox.retry(conn, row_id, WORKER, error) == "pending"
    stored = rows.get(row_id)["last_error"]
    assert stored == "a" * 1999 + "\U0001f600"
    assert len(stored) == 2000


def test_clean_error_replaces_nul_and_lone_surrogates_and_keeps_pairs():
    assert clean_error("a\x00b\udc80c\ud800") == f"a{FFFD}b{FFFD}c{FFFD}"
    assert clean_error("\ud83d\ude00") == "\U0001f600"
    assert clean_error("é" * 2500) == "é" * 2000


def test_one_rows_bookkeeping_failure_leaves_only_that_row_for_the_reaper(conn, rows, caplog):
    first = rows.add(created_ago=30)
    broken = rows.add(created_ago=20)
    last = rows.add(created_ago=10)
    # a database error on the ack of one row only (a trigger, as a user's audit trigger
    # might raise): that row stays claimed, the others are acked
    conn.execute(
        "CREATE FUNCTION refuse() RETURNS trigger LANGUAGE plpgsql AS "
        "$$ BEGIN RAISE EXCEPTION 'refused by trigger'; END $$"
    )
    conn.execute(
        f"CREATE TRIGGER refuse BEFORE UPDATE ON integration_outbox FOR EACH ROW "
        f"WHEN (NEW.status = 'done' AND NEW.id = {broken}) EXECUTE FUNCTION refuse()"
    )
    with caplog.at_level(logging.ERROR, logger="outbox_monitor.outbox"):
        counts = outbox.process_batch(conn, WORKER, lambda row: None)

    assert counts == {
        "claimed": 3,
        "acked": 2,
        "retried": 0,
        "dead_lettered": 0,
        "lost": 0,
        "unrecorded": 1,
    }
    assert [rows.get(i)["status"] for i in (first, broken, last)] == [
        "done",
        "processing",
        "done",
    ]
    assert rows.get(broken)["locked_by"] == WORKER
    logged = [r for r in caplog.records if r.name == "outbox_monitor.outbox"]
    assert len(logged) == 1 and f"row {broken} " in logged[0].getMessage()
    assert "refused by trigger" in logged[0].getMessage()


def test_one_rows_failure_inside_a_caller_transaction_spares_the_others(dsn, rows):
    """On a connection in a transaction, each row's transition runs in its own savepoint."""
    ids = [rows.add(created_ago=30 - i) for i in range(3)]
    rows.conn.execute(
        "CREATE FUNCTION refuse() RETURNS trigger LANGUAGE plpgsql AS "
        "$$ BEGIN RAISE EXCEPTION 'refused by trigger'; END $$"
    )
    rows.conn.execute(
        f"CREATE TRIGGER refuse BEFORE UPDATE ON integration_outbox FOR EACH ROW "
        f"WHEN (NEW.status = 'done' AND NEW.id = {ids[0]}) EXECUTE FUNCTION refuse()"
    )
    with psycopg.connect(dsn) as conn:
        counts = outbox.process_batch(conn, WORKER, lambda row: None)
        conn.commit()
    assert (counts["acked"], counts["unrecorded"]) == (2, 1)
    assert [rows.get(i)["status"] for i in ids] == ["processing", "done", "done"]


# ------------------------------------------------------------------ the n8n poller


def _record_failure_parameters(item: dict, settings: dict) -> list:
    """The "Record failure" node's parameter expression, run by ``node`` on one item.

    The expression is plain JavaScript between ``={{`` and ``}}``; ``$json`` is the item
    and ``$('Settings').first().json`` the Settings node's output, as n8n provides them.
    """
    workflow = json.loads((SHIPPED_FOLDER / "workflows" / "outbox-poller.json").read_text())
    node = next(n for n in workflow["nodes"] if n["name"] == "Record failure")
    expression = node["parameters"]["options"]["queryReplacement"]
    assert expression.startswith("={{") and expression.endswith("}}")
    script = (
        "const input = JSON.parse(require('fs').readFileSync(0, 'utf8'));\n"
        "const $json = input.item;\n"
        "const $ = name => ({ first: () => ({ json: input.settings }) });\n"
        f"process.stdout.write(JSON.stringify({expression[3:-2]}));\n"
    )
    done = subprocess.run(
        ["node", "-e", script],
        input=json.dumps({"item": item, "settings": settings}),
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    return json.loads(done.stdout)


def test_the_n8n_poller_cleans_error_text_before_binding_it(conn, rows):
    settings = {
        "table": "public.integration_outbox",
        "ledger_table": "public.integration_idempotency",
        "max_attempts": 10,
        "permanent_statuses": "",
    }
    ids = [rows.add(created_ago=30 - i) for i in range(3)]
    worker = "n8n:wf-OutboxPoller0001:exec-1"
    outbox.claim(conn, worker)
    errors = {
        ids[0]: "HTTP 500 from POST http://api: x\x00y",
        ids[1]: "HTTP 502 from POST http://api: \ud800 and \udc00",
        # 1,999 characters then an emoji (two UTF-16 units in JavaScript), then more
        ids[2]: "b" * 1999 + "\U0001f600" + "c" * 10,
    }
    bound = {
        row_id: _record_failure_parameters(
            {"id": str(row_id), "worker": worker, "error": text, "status_code": 500}, settings
        )
        for row_id, text in errors.items()
    }
    assert [bound[i][3] for i in ids] == [
        f"HTTP 500 from POST http://api: x{FFFD}y",
        f"HTTP 502 from POST http://api: {FFFD} and {FFFD}",
        "b" * 1999 + "\U0001f600",
    ]
    # and Postgres takes them through the node's own query
    workflow = json.loads((SHIPPED_FOLDER / "workflows" / "outbox-poller.json").read_text())
    query = next(n for n in workflow["nodes"] if n["name"] == "Record failure")["parameters"][
        "query"
    ]
    for row_id in ids:
        params = {f"p{n + 1}": value for n, value in enumerate(bound[row_id])}
        conn.execute(re.sub(r"\$(\d+)", r"%(p\1)s", query), params)
    assert [rows.get(i)["last_error"] for i in ids] == [bound[i][3] for i in ids]
    assert [rows.get(i)["status"] for i in ids] == ["pending"] * 3


class UnreadableError(RuntimeError):
    """An exception whose text cannot be read: its ``__str__`` raises."""

    def __str__(self) -> str:
        raise ValueError("no text")


class UnreadablePermanentError(outbox.PermanentError):
    """A permanent failure whose ``__str__`` returns no ``str`` (``str()`` raises)."""

    def __str__(self):
        return None


def test_an_exception_whose_text_cannot_be_read_is_recorded_by_its_type(conn, rows, caplog):
    """Before: ``str(error)`` raised inside the bookkeeping, so the row stayed
    ``processing`` until a reap charged it an attempt."""
    ok = rows.add(event_type="order.paid", created_ago=30)
    transient = rows.add(event_type="crm.upsert", created_ago=20)
    permanent = rows.add(event_type="invoice.sent", created_ago=10)

    def handler(row):
        if row["event_type"] == "crm.upsert":
            raise UnreadableError()
        if row["event_type"] == "invoice.sent":
            raise UnreadablePermanentError()

    with caplog.at_level(logging.ERROR, logger="outbox_monitor.outbox"):
        counts = outbox.process_batch(conn, WORKER, handler)

    assert counts == {
        "claimed": 3,
        "acked": 1,
        "retried": 1,
        "dead_lettered": 1,
        "lost": 0,
        "unrecorded": 0,
    }
    got = [rows.get(i) for i in (ok, transient, permanent)]
    assert [(g["status"], g["attempts"], g["last_error"]) for g in got] == [
        ("done", 0, None),
        ("pending", 1, "UnreadableError (its message could not be read: ValueError: no text)"),
        (
            "failed",
            1,
            "UnreadablePermanentError (its message could not be read: TypeError: "
            "__str__ returned non-string (type NoneType))",
        ),
    ]
    assert all(g["locked_at"] is None and g["locked_by"] is None for g in got)
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]
