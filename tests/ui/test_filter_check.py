"""The sidebar's event-type filter naming no event type (issue 30 item 7): every page says so
above its content — a green "No dead letters" for a type that does not exist was the bug —
and offers the closest known type, which one click applies."""

from rendered import plain

from outbox_monitor.ui.filter_check import closest, matches_none

PAGES = (
    "overview",
    "events",
    "dead_letters",
    "alerts",
    "controls",
    "health",
    "workers",
    "timeline",
)
KNOWN = ["notification.email", "order.paid"]


def notices(at) -> list[str]:
    return [plain(w.value) for w in at.warning if "No event type matches" in plain(w.value)]


def seed(rows) -> None:
    rows.add(event_type="notification.email")
    rows.add(event_type="order.paid", status="processing", locked_ago=5)


def test_a_filter_matching_no_known_type_says_so_on_every_page(open_page, rows):
    seed(rows)
    for page in PAGES:
        at = open_page(page, event_type="nope.%")
        assert not at.exception, page
        [notice] = notices(at)
        assert notice.startswith(
            "**No event type matches nope.%**: the figures and lists below are of no rows"
        ), page
        assert "Known event types: notification.email, order.paid." in notice, page


def test_a_close_type_is_offered_and_one_click_applies_it(open_page, rows):
    seed(rows)
    at = open_page("dead_letters", event_type="order.payd")  # an exact type never seen
    [notice] = notices(at)
    assert notice.endswith("Did you mean order.paid?")
    at.button(key="filter_check.use.order.paid").click().run()
    assert not notices(at)
    assert at.query_params["event_type"] == "order.paid"

    pattern = open_page("events", event_type="notifcation.%")  # a LIKE pattern, misspelt
    [notice] = notices(pattern)
    assert notice.endswith("Did you mean notification.% or notification.email?")


def test_a_filter_matching_a_known_type_says_nothing(open_page, rows):
    seed(rows)
    for event_filter in ("order.paid", "order.%", "%.email", "%"):
        assert not notices(open_page("dead_letters", event_type=event_filter)), event_filter


def test_closest_compares_case_blind_and_offers_prefix_patterns_for_a_pattern():
    assert matches_none("nope.%", KNOWN) and not matches_none("ORDER.%", ["ORDER.paid"])
    assert closest("Order.Paid", KNOWN) == ["order.paid"]
    # the pattern of the prefix first (ratio 0.96), then the type (0.77)
    assert closest("notifcation.%", KNOWN) == ["notification.%", "notification.email"]
    assert closest("zzz", KNOWN) == []
