"""A preview made on one outbox of a fleet is never applied to another (issue 16 item 6): the
sidebar's outbox is part of every action's selection, so switching outbox drops the preview."""

import json
import os

import psycopg

from outbox_monitor.privacy.value_detectors import REDACTED
from tests.integration.test_fleet_cli import two_outboxes
from tests.ui.test_dead_letters_page import TIMEOUTS, seed
from tests.ui.test_payload_search_page import found_ids, search

DAY = 86400


def done_rows(dsn: str, count: int) -> list[int]:
    with psycopg.connect(dsn, autocommit=True) as conn:
        return [
            r[0]
            for r in conn.execute(
                "INSERT INTO integration_outbox (event_type, aggregate_type, aggregate_id,"
                " event_key, payload, status, attempts, created_at, processed_at)"
                " SELECT 'invoice.sent', 'invoice', g::text, 'k' || g, '{}', 'done', 1,"
                " now() - interval '41 days', now() - interval '40 days'"
                " FROM generate_series(1, %s) AS g RETURNING id",
                (count,),
            ).fetchall()
        ]


def left(dsn: str) -> tuple[int, int]:
    with psycopg.connect(dsn) as conn:
        rows = conn.execute("SELECT count(*) FROM integration_outbox").fetchone()[0]
        audited = conn.execute("SELECT count(*) FROM outbox_monitor.audit_log").fetchone()[0]
        return rows, audited


def test_a_prune_previewed_on_one_outbox_is_not_confirmed_on_another(
    open_page, environment, dsn, make_dsn, tmp_path
):
    two_outboxes(dsn, make_dsn, environment, tmp_path)  # orders, then billing
    billing = os.environ["BILLING_DSN"]
    done_rows(dsn, 2)  # orders: 2 rows past the 30-day retention
    done_rows(billing, 5)  # billing: 5, ids 1..5 (its own database)

    at = open_page("actions", outbox="orders")
    at.button(key="actions.prune.preview_button").click().run()
    assert any("**2** rows would be deleted" in m.value for m in at.markdown)

    at.selectbox(key="outbox").select("billing").run()  # orders' preview must go
    assert not any("**2** rows would be deleted" in m.value for m in at.markdown)
    assert not [b for b in at.button if b.key == "actions.prune.confirm"]
    assert left(dsn) == (2, 0) and left(billing) == (5, 0)

    at.button(key="actions.prune.preview_button").click().run()  # billing's own preview
    assert any("**5** rows would be deleted" in m.value for m in at.markdown)
    at.button(key="actions.prune.confirm").click().run()

    assert not at.exception
    assert left(dsn) == (2, 0)  # orders untouched, nothing audited there
    assert left(billing) == (0, 1)  # 5 rows deleted in one batch: one audit row


def controls_and_audit(dsn: str) -> tuple[list[str], list[str]]:
    with psycopg.connect(dsn) as conn:
        filters = conn.execute("SELECT event_type_filter FROM outbox_monitor.controls")
        actions = conn.execute("SELECT action FROM outbox_monitor.audit_log ORDER BY id")
        return [r[0] for r in filters.fetchall()], [r[0] for r in actions.fetchall()]


def test_a_pause_previewed_on_one_outbox_is_not_confirmed_on_another(
    open_page, environment, dsn, make_dsn, tmp_path
):
    two_outboxes(dsn, make_dsn, environment, tmp_path)
    billing = os.environ["BILLING_DSN"]

    at = open_page("controls", outbox="orders")
    at.text_input(key="controls.pause.filter").set_value("invoice.%").run()
    at.button(key="controls.pause.preview_button").click().run()
    assert [b for b in at.button if b.key == "controls.pause.confirm"]

    at.selectbox(key="outbox").select("billing").run()  # orders' preview must go
    assert not [b for b in at.button if b.key == "controls.pause.confirm"]
    assert controls_and_audit(billing) == ([], [])

    at.button(key="controls.pause.preview_button").click().run()  # billing's own preview
    at.button(key="controls.pause.confirm").click().run()

    assert not at.exception
    assert controls_and_audit(dsn) == ([], [])
    assert controls_and_audit(billing) == (["invoice.%"], ["pause"])


def test_a_payload_revealed_on_one_outbox_is_not_shown_on_another(
    open_page, environment, dsn, make_dsn, tmp_path, rows
):
    two_outboxes(dsn, make_dsn, environment, tmp_path)
    billing = os.environ["BILLING_DSN"]
    orders_id = rows.add(payload={"token": "orders-secret"})
    with psycopg.connect(billing, autocommit=True) as conn:  # billing's event of the same id
        conn.execute(
            "INSERT INTO integration_outbox (id, event_type, aggregate_type, aggregate_id,"
            " event_key, payload) VALUES (%s, 'invoice.sent', 'invoice', '1', 'k1',"
            ' \'{"token": "billing-secret"}\')',
            (orders_id,),
        )

    at = open_page("events", outbox="orders", id=str(orders_id))
    at.button(key="events.reveal").click().run()
    assert {"token": "orders-secret"} in [
        json.loads(c.value) for c in at.code if c.language == "json"
    ]

    at.selectbox(key="outbox").select("billing").run()

    assert not at.exception
    shown = [json.loads(c.value) for c in at.code if c.language == "json"]
    assert shown == [{"token": REDACTED}]  # billing's event, redacted: no reveal of orders'
    assert controls_and_audit(billing)[1] == []
    assert controls_and_audit(dsn)[1] == ["reveal"]


def test_payload_search_results_of_one_outbox_are_not_listed_on_another(
    open_page, environment, dsn, make_dsn, tmp_path, rows
):
    two_outboxes(dsn, make_dsn, environment, tmp_path)
    found = rows.add(payload={"customer": {"id": "42"}})  # in orders only

    at = open_page("events", outbox="orders")
    at = search(at, document='{"customer": {"id": "42"}}')
    assert found_ids(at) == [found]

    at.selectbox(key="outbox").select("billing").run()

    assert not at.exception
    assert "payload_search.table" not in [d.key for d in at.dataframe]  # search billing anew


def test_the_events_list_of_another_outbox_starts_at_its_newest_page(
    open_page, environment, dsn, make_dsn, tmp_path, rows
):
    two_outboxes(dsn, make_dsn, environment, tmp_path)
    for _ in range(55):  # orders: ids 1..55, pages 55..6 and 5..1
        rows.add()
    with psycopg.connect(os.environ["BILLING_DSN"], autocommit=True) as conn:
        conn.execute(  # billing: ids 100..102, above orders' page-2 cursor (id 6)
            "INSERT INTO integration_outbox (id, event_type, aggregate_type, aggregate_id,"
            " event_key, payload) SELECT g, 'invoice.sent', 'invoice', g::text, 'k' || g, '{}'"
            " FROM generate_series(100, 102) AS g"
        )

    at = open_page("events", outbox="orders")
    at.button(key="events.older").click().run()
    assert any(
        c.value.startswith("Events 51–55 of 55, newest id first · page 2") for c in at.caption
    )

    at.selectbox(key="outbox").select("billing").run()

    assert not at.exception
    assert any(c.value == "Events 1–3 of 3, newest id first · page 1 (newest)" for c in at.caption)
    assert [int(i) for i in at.dataframe(key="events.table").value["id"]] == [102, 101, 100]


def test_dead_letters_chosen_on_one_outbox_are_not_chosen_on_another(
    open_page, environment, dsn, make_dsn, tmp_path, rows
):
    two_outboxes(dsn, make_dsn, environment, tmp_path)
    ids = seed(rows)[TIMEOUTS]  # orders: the group's 3 rows
    with psycopg.connect(os.environ["BILLING_DSN"], autocommit=True) as conn:
        conn.execute(  # billing: the same group, rows of the same ids (its own sequence)
            "INSERT INTO integration_outbox (event_type, aggregate_type, aggregate_id,"
            " event_key, payload, status, attempts, processed_at, last_error) SELECT"
            " 'order.paid', 'order', g::text, 'k' || g, '{}', 'failed', 10,"
            " now() - interval '100 seconds', 'timeout after 5000 ms'"
            " FROM generate_series(1, 3) AS g"
        )
    assert ids == [1, 2, 3]

    at = open_page("dead_letters", outbox="orders", error_group=TIMEOUTS)
    at.multiselect(key="dead_letters.ids").set_value([str(ids[0]), str(ids[2])]).run()
    at.selectbox(key="outbox").select("billing").run()

    assert not at.exception
    assert at.multiselect(key="dead_letters.ids").value == []  # billing's rows: none chosen
