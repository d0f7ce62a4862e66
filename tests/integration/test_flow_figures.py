"""The flow-control figures (SPEC §5, issue 13 item 3): rows held and throttled per event
type and control, in ``status --json``, the figure registry and ``/metrics``, on hand-built
rows: crm.contact 3 due, crm.deal 2 due (+1 in backoff), order.paid 4 due."""

from outbox_monitor.access import Identity, Role
from outbox_monitor.figures import metrics
from outbox_monitor.figures.registry import FIGURES
from outbox_monitor.flow import controls as flow
from tests.integration.test_exporter import by, running_exporter, scrape

OPERATOR = Identity("oncall@example.com", Role.operator, "cli")


def seed(db, rows) -> None:
    for _ in range(3):
        rows.add(event_type="crm.contact")
    for _ in range(2):
        rows.add(event_type="crm.deal")
    rows.add(event_type="crm.deal", available_ago=-600)  # in backoff: not due, not held
    for _ in range(4):
        rows.add(event_type="order.paid")
    flow.pause(db, "crm.%", actor=OPERATOR, reason="CRM down")
    flow.change(db, "order.paid", actor=OPERATOR, action="limit", changes={"concurrency_limit": 1})


def test_status_has_the_rows_held_and_throttled(db, rows):
    seed(db, rows)
    figures = metrics.status(db)
    assert figures["rows_held"] == 5
    assert figures["rows_held_by_event_type"] == {"crm.contact": 3, "crm.deal": 2}
    # order.paid: limit 1, nothing processing -> grant 1 of 4 due: 3 throttled
    assert (figures["rows_throttled"], figures["rows_throttled_by_control"]) == (
        3,
        {"order.paid": 3},
    )
    assert figures["queue_depth"] == 9  # held rows still count as due (SPEC §5)
    crm = metrics.status(db, event_type="crm.deal")
    assert (crm["rows_held"], crm["rows_throttled"]) == (2, 0)


def test_the_registry_measures_them_per_filter(db, rows):
    seed(db, rows)
    assert FIGURES["rows_held"].measure(db, None, "crm.%", 0) == 5
    assert FIGURES["rows_held"].measure(db, None, "order.paid", 0) == 0
    assert FIGURES["rows_throttled"].measure(db, None, "order.%", 0) == 3


def test_no_control_no_rows_held(db, rows):
    rows.add(event_type="crm.contact")
    figures = metrics.status(db)
    assert (figures["rows_held"], figures["rows_held_by_event_type"]) == (0, {})


def test_metrics_has_them_by_event_type_and_control(db, rows):
    seed(db, rows)
    with running_exporter(db) as run:
        found = scrape(run.url)
    assert by(found, "outbox_rows_held", "event_type", control="crm.%") == {
        "crm.contact": 3.0,
        "crm.deal": 2.0,
    }
    assert by(found, "outbox_rows_throttled", "control") == {"order.paid": 3.0}
