"""Payload search on a real Postgres (issue 15 item 6): containment and key-path equality in
keyset pages, the time bound, the plan's index advice with and without the index, the
statement timeout, malformed input and the privacy guard (refused to a viewer, audited for
an operator)."""

import json

import pytest

from outbox_monitor.access import Identity, Role
from outbox_monitor.browse.payload_plan import explain_search
from outbox_monitor.browse.payload_search import (
    PayloadSearchTimeout,
    SearchInputError,
    payload_search,
    search_payloads,
)
from outbox_monitor.errors import AccessDenied, QueryTimeout
from outbox_monitor.privacy.redaction import redactor_for
from outbox_monitor.store.db import Database

OPERATOR = Identity("olga@example.com", Role.operator, "oidc")
VIEWER = Identity("vic@example.com", Role.viewer, "oidc")
GIN_ADVICE = (
    'CREATE INDEX CONCURRENTLY "integration_outbox_payload_gin_idx" '
    'ON "public"."integration_outbox" USING gin (payload jsonb_path_ops);'
)
PATH_ADVICE = (
    'CREATE INDEX CONCURRENTLY "integration_outbox_payload_customer_id_idx" '
    'ON "public"."integration_outbox" ((payload #>> \'{customer,id}\'), created_at);'
)


def ids(page) -> list[int]:
    return [row["id"] for row in page.rows]


def pages(db, search, *, identity=VIEWER, limit=2):
    """Every page of ``search``, following the keyset cursor."""
    found, before = [], None
    while True:
        page = search_payloads(
            db,
            search,
            identity=identity,
            redactor=redactor_for(db.settings),
            before=before,
            limit=limit,
        )
        found.append(ids(page))
        before = page.next_cursor
        if before is None:
            return found


def test_containment_in_two_keyset_pages_within_the_time_range(db, rows):
    wanted = {"customer": {"id": "42"}}
    a = rows.add(payload={"customer": {"id": "42"}, "n": 1}, created_ago=500)
    b1 = rows.add(payload={"customer": {"id": "42", "tier": "gold"}}, created_ago=400)
    b2 = rows.add(payload={"customer": {"id": "42"}, "items": [1]}, created_ago=400)
    rows.add(payload={"customer": {"id": "7"}}, created_ago=300)  # another customer
    rows.add(payload={"customer": {"id": 42}}, created_ago=250)  # a number, not the string
    d = rows.add(payload={"customer": {"id": "42"}}, created_ago=200)
    rows.add(payload=wanted, created_ago=5000)  # before since
    rows.add(payload=wanted, created_ago=-60)  # at/after until
    rows.add(payload=wanted, created_ago=0)  # created_at = until: the bound is exclusive

    search = payload_search(since=rows.at(1000), until=rows.t0, document=json.dumps(wanted))

    # newest first by (created_at, id): d (200 s), b2 then b1 (both 400 s: the higher id
    # first, split across the page boundary), a (500 s)
    assert pages(db, search) == [[d, b2], [b1, a]]
    assert pages(db, search, limit=4) == [[d, b2, b1, a]]
    narrow = payload_search(since=rows.at(450), until=rows.at(300), document=json.dumps(wanted))
    assert pages(db, narrow) == [[b2, b1]]


def test_key_path_equality_in_keyset_pages(db, rows):
    text = rows.add(payload={"customer": {"id": "42"}}, created_ago=300)
    number = rows.add(payload={"customer": {"id": 42}}, created_ago=200)  # #>> prints 42
    rows.add(payload={"customer": {"id": "421"}}, created_ago=150)
    rows.add(payload={"customer": "42"}, created_ago=120)  # another path
    deep = rows.add(payload={"customer": {"id": "42"}}, created_ago=100)
    sku = rows.add(payload={"items": [{"sku": "x-1"}, {"sku": "y"}]}, created_ago=50)
    rows.add(payload={"items": [{"sku": "y"}, {"sku": "x-1"}]}, created_ago=40)  # index 1

    search = payload_search(since=rows.at(3600), until=rows.t0, path="customer.id", value="42")
    assert pages(db, search) == [[deep, number], [text]]

    items = payload_search(since=rows.at(3600), until=rows.t0, path="items.0.sku", value="x-1")
    assert pages(db, items) == [[sku]]
    dotted = payload_search(
        since=rows.at(3600), until=rows.t0, path='["items", "0", "sku"]', value="x-1"
    )
    assert pages(db, dotted) == [[sku]]


def test_index_advice_without_a_gin_index_and_none_with_it(db, rows, conn):
    rows.conn.execute(
        """INSERT INTO integration_outbox (event_type, aggregate_type, aggregate_id, event_key,
               payload, created_at)
           SELECT 'order.paid', 'order', g::text, 'bulk:' || g,
                  jsonb_build_object('customer', jsonb_build_object('id', g::text)),
                  now() - g * interval '1 second'
           FROM generate_series(1, 5000) AS g"""
    )
    conn.execute("ANALYZE integration_outbox")
    search = payload_search(
        since=rows.at(86400), until=rows.t0, document='{"customer": {"id": "17"}}'
    )

    plan = explain_search(db, search)
    assert plan.advice == GIN_ADVICE
    assert plan.index is None and plan.usable == ()
    assert "Seq Scan" in plan.shape
    assert plan.table_rows == 5000

    conn.execute(plan.advice)  # as the page shows it, by hand
    conn.execute("ANALYZE integration_outbox")
    plan = explain_search(db, search)
    assert plan.advice is None
    assert plan.usable == ("integration_outbox_payload_gin_idx",)
    assert plan.index == "integration_outbox_payload_gin_idx"  # 1 row in 5000: the GIN wins

    path = payload_search(since=rows.at(86400), until=rows.t0, path="customer.id", value="17")
    plan = explain_search(db, path)  # a GIN index cannot serve #>>
    assert plan.advice == PATH_ADVICE
    conn.execute(plan.advice)
    conn.execute("ANALYZE integration_outbox")
    plan = explain_search(db, path)
    assert plan.advice is None
    assert plan.index == "integration_outbox_payload_customer_id_idx"
    [only] = pages(db, path)
    assert len(only) == 1


def test_the_advice_quotes_a_path_postgres_prints_with_quotes(db, rows, conn):
    """Keys with a space, a quote, a brace and the word NULL: the index the advice builds is
    the one the plan then recognises (pg_get_indexdef prints the path as array_out does)."""
    path = json.dumps(["a b", 'x"y', "{z}", "null", "it's"])
    search = payload_search(since=rows.at(60), until=rows.t0, path=path, value="v")

    advice = explain_search(db, search).advice
    conn.execute(advice)

    assert explain_search(db, search).advice is None


def test_a_statement_timeout_says_what_timed_out_and_what_to_do(db, rows, conn, settings):
    rows.conn.execute(
        """INSERT INTO integration_outbox (event_type, aggregate_type, aggregate_id, event_key,
               payload, created_at)
           SELECT 'order.paid', 'order', g::text, 'bulk:' || g,
                  jsonb_build_object('customer', jsonb_build_object('id', g::text),
                                     'note', repeat('x', 200)),
                  now() - (g % 3600) * interval '1 second'
           FROM generate_series(1, 100000) AS g"""
    )
    conn.execute("ANALYZE integration_outbox")
    search = payload_search(
        since=rows.at(7200), until=rows.t0, document='{"customer": {"id": "no such"}}'
    )
    plan = explain_search(db, search)  # planned under the normal timeout
    tiny = settings.model_copy(update={"statement_timeout": 0.001})  # 1 ms

    with Database(tiny) as hurried, pytest.raises(PayloadSearchTimeout) as raised:
        search_payloads(
            hurried, search, identity=VIEWER, redactor=redactor_for(tiny), advice=plan.advice
        )

    error = raised.value
    assert isinstance(error, QueryTimeout)
    message = str(error.args[0])
    assert message.startswith("the containment search of payloads created from ")
    assert "cancelled after the statement timeout (0.001 s)" in message
    assert "no result, which is not the same as no match" in message
    assert error.hint.startswith("Narrow the time range, or add the index that would serve it:")
    assert GIN_ADVICE in error.hint


@pytest.mark.parametrize(
    ("inputs", "expected"),
    [
        ({"document": '{"customer": '}, "document: not valid JSON (Expecting value at line 1"),
        ({"document": "[1, 2]"}, "document: a JSON array is not an object"),
        ({"document": '"paid"'}, "document: a JSON string is not an object"),
        ({"document": '{"amount": NaN}'}, "document: NaN is not JSON"),
        ({"document": '{"a": "\\u0000"}'}, "document: contains a NUL character"),
        ({"document": '{"a": 1e131072}'}, "document: the number 1e131072 is out of jsonb's range"),
        (
            {"document": '{"a": 1.5e-16383}'},
            "document: the number 1.5e-16383 is out of jsonb's range",
        ),
        ({"document": '{"a": "' + "x" * 10_000 + '"}'}, "document: 10,009 characters"),
        ({"document": '{"a": ' + "[" * 40 + "]" * 40 + "}"}, "document: nested 41 levels"),
        ({"document": "[" * 5000 + "]" * 5000}, "document: nested deeper than 32"),
        ({}, "document: give a JSON document, or a key path and a value"),
        ({"document": "  "}, "document: empty: type a JSON object"),
        ({"path": " ", "value": "1"}, "path: empty: type the keys to follow"),
        ({"path": "customer..id", "value": "1"}, "path: has an empty segment"),
        ({"path": "[1, 2]", "value": "1"}, "path: a JSON array path holds strings only"),
        ({"path": ".".join("k" * 33), "value": "1"}, "path: 33 segments; at most 32"),
        ({"path": "customer.id", "value": ""}, "value: empty"),
        ({"path": "customer.id", "value": "v" * 1001}, "value: 1,001 characters"),
    ],
)
def test_malformed_input_names_the_field(rows, inputs, expected):
    with pytest.raises(SearchInputError) as raised:
        payload_search(since=rows.at(60), until=rows.t0, **inputs)
    assert str(raised.value).startswith(expected), str(raised.value)


def test_a_time_range_is_required(rows):
    with pytest.raises(SearchInputError, match=r"^created since: required"):
        payload_search(since=None, until=rows.t0, document="{}")
    with pytest.raises(SearchInputError, match=r"^created since: must be before created until"):
        payload_search(since=rows.t0, until=rows.at(60), document="{}")


@pytest.mark.parametrize(
    ("inputs", "named"),
    [
        ({"document": '{"card_number": "4111111111111111"}'}, 'key "card_number"'),
        ({"document": '{"customer": {"cards": [{"x": 1}]}}'}, 'key "cards"'),
        ({"document": '{"note": "paid with 4111-1111-1111-1111"}'}, "a value redaction hides"),
        ({"document": '{"contact": "a@b.co"}'}, "a value redaction hides"),
        ({"path": "customer.Email", "value": "a@b.co"}, 'key "Email"'),
        ({"path": "items.0.token", "value": "t"}, 'key "token"'),
        ({"path": "customer", "value": '{"Email": "a@b.co"}'}, "a value redaction hides"),
    ],
)
def test_a_viewer_cannot_search_by_what_redaction_hides(db, rows, conn, inputs, named):
    rows.add(payload={"card_number": "4111111111111111", "customer": {"Email": "a@b.co"}})
    search = payload_search(since=rows.at(3600), until=rows.t0, **inputs)

    with pytest.raises(AccessDenied) as raised:
        search_payloads(db, search, identity=VIEWER, redactor=redactor_for(db.settings))

    message = str(raised.value)
    assert message.startswith("vic@example.com (viewer) may not search payloads by what ")
    assert named in message and "needs the operator role" in message
    assert not any(raw in message for raw in ("4111", "a@b.co"))
    assert conn.execute("SELECT count(*) AS n FROM outbox_monitor.audit_log").fetchone()["n"] == 0


def test_an_operator_search_by_a_redacted_key_is_audited(db, rows, conn):
    card = rows.add(payload={"card_number": "4111111111111111"}, created_ago=100)
    rows.add(payload={"card_number": "5500000000000004"}, created_ago=50)
    plain = rows.add(payload={"customer": {"id": "42"}}, created_ago=10)
    search = payload_search(
        since=rows.at(3600), until=rows.t0, document='{"card_number": "4111111111111111"}'
    )

    page = search_payloads(db, search, identity=OPERATOR, redactor=redactor_for(db.settings))

    assert ids(page) == [card]
    [audit] = conn.execute("SELECT * FROM outbox_monitor.audit_log").fetchall()
    assert page.audit_id == audit["id"]
    assert (audit["actor"], audit["action"], audit["affected_ids"]) == (
        "olga@example.com",
        "payload search",
        [card],
    )
    assert audit["filter"]["kind"] == "containment"
    # the key matches card* and the number is a Luhn-valid card: both are named, not shown
    assert audit["filter"]["touches"] == ['key "card_number"', "a value redaction hides"]
    assert "4111" not in json.dumps(audit["filter"])  # the keys, never the values

    harmless = payload_search(
        since=rows.at(3600), until=rows.t0, document='{"customer": {"id": "42"}}'
    )
    viewed = search_payloads(db, harmless, identity=VIEWER, redactor=redactor_for(db.settings))
    assert ids(viewed) == [plain] and viewed.audit_id is None
    assert conn.execute("SELECT count(*) AS n FROM outbox_monitor.audit_log").fetchone()["n"] == 1
