"""The dashboard over a fleet of outboxes (issue 16 item 2, first part): the sidebar chooses
the outbox, it is in the URL (a link opens the right one), and every page reads that outbox's
database."""

import psycopg
from rendered import plain

from tests.integration.test_fleet_cli import TWO as FLEET


def queue_depth(at) -> str:
    (value,) = [m.value for m in at.metric if m.label == "Queue depth"]
    return value


def test_each_outbox_of_the_fleet_by_its_url(open_page, environment, dsn, make_dsn, rows, tmp_path):
    billing = make_dsn()
    environment.setenv("ORDERS_DSN", dsn)
    environment.setenv("BILLING_DSN", billing)
    path = tmp_path / "outboxes.yml"
    path.write_text(FLEET)
    environment.setenv("OUTBOX_MONITOR_OUTBOXES", str(path))
    rows.add(created_ago=60)  # orders: 1 due
    with psycopg.connect(billing, autocommit=True) as conn:  # billing: 3 due
        conn.execute(
            "INSERT INTO integration_outbox (event_type, aggregate_type, aggregate_id, event_key,"
            " payload) SELECT 'invoice.sent', 'invoice', g::text, 'k' || g, '{}'"
            " FROM generate_series(1, 3) AS g"
        )

    first = open_page("overview")
    chosen = open_page("overview", outbox="billing")
    unknown = open_page("overview", outbox="shipping")

    assert not first.exception and not chosen.exception
    assert first.selectbox(key="outbox").options == ["orders", "billing"]
    assert queue_depth(first) == "1"  # the file's first outbox
    assert queue_depth(chosen) == "3"
    assert queue_depth(unknown) == "1"
    assert any("Ignored outbox=shipping from the link" in plain(w.value) for w in unknown.warning)
    switched = first.selectbox(key="outbox").select("billing").run()
    assert queue_depth(switched) == "3"
    # a hostile value is shown escaped and cut at 80: the override as 6 characters, then 73 x
    hostile = open_page("overview", outbox="\u202e" + "x" * 5000)
    (warning,) = [plain(w.value) for w in hostile.warning]
    assert warning.startswith("Ignored outbox=\\u202e" + "x" * 73 + "… from the link"), warning
    assert queue_depth(hostile) == "1"


def test_a_fleet_file_that_cannot_be_used_stops_the_dashboard(open_page, environment, tmp_path):
    path = tmp_path / "outboxes.yml"
    path.write_text(FLEET)
    environment.setenv("OUTBOX_MONITOR_OUTBOXES", str(path))  # ORDERS_DSN is not set

    at = open_page("overview")

    assert not at.metric
    assert any(
        'outbox "orders" (outboxes[0]), dsn_env: the environment variable ORDERS_DSN is not set'
        in plain(e.value)
        for e in at.error
    )


def test_one_outbox_has_no_selector(open_page, environment, rows):
    rows.add(created_ago=60)
    at = open_page("overview")
    assert not [s for s in at.selectbox if s.label == "Outbox"]
    assert queue_depth(at) == "1"


def test_an_in_app_link_carries_its_filters_to_the_next_page(open_page, environment, rows):
    rows.add_failed(event_type="order.paid")
    rows.add_failed(event_type="invoice.sent")
    at = open_page("overview")
    assert at.text_input(key="event_type").value in (None, "")

    # what st.page_link(query_params=…) does: same session, another page, the link's query
    at.query_params.update({"event_type": "order.paid", "window": "6h"})
    at.switch_page("pages/dead_letters.py").run()

    assert not at.exception
    assert at.text_input(key="event_type").value == "order.paid"
    assert at.selectbox(key="window").value == "6h"
    assert not at.warning  # no "value set via the Session State API" warning
    assert any("order.paid" in c.value and "invoice.sent" not in c.value for c in at.caption)
