"""The Events page's payload search (AppTest, issue 15 item 6): nothing runs before Search;
containment and key-path searches in keyset pages; the index advice without an index and
none with it; an input error names its field; a viewer's search by a redacted key is refused;
an operator's is audited. Local mode: the dashboard identity is an admin (``ui-test``)."""

import json

from conftest import ACTOR
from rendered import plain

from outbox_monitor.access import Identity, Role
from outbox_monitor.ui import access as ui_access
from outbox_monitor.ui import payload_search as ui

PAGE = "events"
VIEWER = Identity("vic@example.com", Role.viewer, "proxy")
GIN = "integration_outbox_payload_gin_idx"


def found_ids(at) -> list[int]:
    return [int(i) for i in at.dataframe(key="payload_search.table").value["id"]]


def texts(at) -> str:
    kinds = ("markdown", "caption", "info", "warning", "error", "code")
    return "\n".join(plain(e.value) for kind in kinds for e in getattr(at, kind))


def search(at, *, document=None, path=None, value=None, since="1h"):
    if document is not None:
        at.text_area(key=ui.DOCUMENT).set_value(document)
    if path is not None:
        at.radio(key=ui.MODE).set_value(ui.KEY_PATH)
        at.text_input(key=ui.PATH).set_value(path)
        at.text_input(key=ui.VALUE).set_value(value)
    at.text_input(key=ui.SINCE).set_value(since)
    return at.button(key="payload_search.submit").click().run()


def captions(at) -> list[str]:
    return [c.value for c in at.caption]


def test_containment_runs_on_submit_in_keyset_pages_with_index_advice(open_page, rows, conn):
    matches = [rows.add(payload={"customer": {"id": "42"}}, created_ago=600 - n) for n in range(52)]
    rows.add(payload={"customer": {"id": "7"}}, created_ago=30)
    rows.add(payload={"customer": {"id": "42"}}, created_ago=7200)  # outside 1h

    at = open_page(PAGE)
    assert not at.exception
    assert "payload_search.table" not in [d.key for d in at.dataframe]  # runs on submit only

    at = search(at, document='{"customer": {"id": "42"}}')
    assert not at.exception
    newest_first = matches[::-1]
    assert found_ids(at) == newest_first[:50]
    shown = texts(at)
    assert "Slow on a large table: no GIN index on payload can serve this search" in shown
    assert (
        f'CREATE INDEX CONCURRENTLY "{GIN}" ON "public"."integration_outbox" '
        "USING gin (payload jsonb_path_ops);" in [c.value for c in at.code]
    )
    assert at.button(key="payload_search.newest").disabled
    # issue 30 item 8: the header counts every match known, never the page's alone
    assert any(c.startswith("More than 50 matches (1–50 shown) created from") for c in captions(at))

    at.button(key="payload_search.older").click().run()
    assert found_ids(at) == newest_first[50:]
    assert at.button(key="payload_search.older").disabled
    assert any(c.startswith("52 matches (51–52 shown) created from") for c in captions(at))
    at.button(key="payload_search.newest").click().run()
    assert found_ids(at) == newest_first[:50]

    conn.execute(f"CREATE INDEX {GIN} ON integration_outbox USING gin (payload jsonb_path_ops)")
    at = search(at, document='{"customer": {"id": "42"}}')
    assert found_ids(at) == newest_first[:50]
    assert "CREATE INDEX" not in texts(at)  # the advice is gone with the index
    assert not at.exception


def test_key_path_search_and_the_detail_of_a_match(open_page, rows):
    wanted = rows.add(payload={"order": {"status": "paid"}}, created_ago=120)
    rows.add(payload={"order": {"status": "open"}}, created_ago=60)

    at = search(open_page(PAGE), path="order.status", value="paid")

    assert not at.exception
    assert found_ids(at) == [wanted]
    assert "no index on this key path can serve this search" in texts(at)
    assert "((payload #>> '{order,status}'), created_at);" in texts(at)


def test_an_input_error_names_the_field_and_shows_no_results(open_page, rows):
    rows.add(payload={"customer": {"id": "42"}})

    at = search(open_page(PAGE), document='{"customer": ')
    assert any("Document: not valid JSON" in plain(e.value) for e in at.error)
    assert "payload_search.table" not in [d.key for d in at.dataframe]

    at = search(at, document="[1, 2]")
    assert any("Document: a JSON array is not an object" in plain(e.value) for e in at.error)
    at = search(at, document="{}", since="")
    assert any("Created since: required" in plain(e.value) for e in at.error)
    at = search(at, path="", value="1")
    assert any("Path: empty" in plain(e.value) for e in at.error)
    assert not at.exception


def test_a_viewer_is_refused_a_search_by_a_redacted_key(open_page, rows, conn, monkeypatch):
    rows.add(payload={"card_number": "4111111111111111"})
    monkeypatch.setattr(ui_access, "identity", lambda settings, paths=(): VIEWER)

    at = search(open_page(PAGE), document='{"card_number": "4111111111111111"}')

    assert not at.exception
    refusal = "vic@example.com (viewer) may not search payloads by what redaction hides"
    assert refusal in texts(at)
    assert 'key "card_number"' in texts(at)
    assert "payload_search.table" not in [d.key for d in at.dataframe]
    assert conn.execute("SELECT count(*) AS n FROM outbox_monitor.audit_log").fetchone()["n"] == 0


def test_an_operator_search_by_a_redacted_key_is_audited(open_page, rows, conn):
    card = rows.add(payload={"card_number": "4111111111111111"}, last_error="card 4111111111111111")

    at = search(open_page(PAGE), document=json.dumps({"card_number": "4111111111111111"}))

    assert not at.exception
    assert found_ids(at) == [card]
    table = at.dataframe(key="payload_search.table").value
    assert list(table["last_error"]) == ["card [redacted]"]  # results stay redacted
    [audit] = conn.execute("SELECT * FROM outbox_monitor.audit_log").fetchall()
    assert (audit["actor"], audit["action"], audit["affected_ids"]) == (
        ACTOR,
        "payload search",
        [card],
    )
    assert f"audit row {audit['id']} records it" in texts(at)
