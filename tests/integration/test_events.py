"""outbox_monitor.browse.events on real rows: filters, keyset pages, payload limits, big ids,
timelines."""

import hashlib
import json
from datetime import timedelta

import pytest

from outbox_monitor.browse import events
from outbox_monitor.browse.events import EventFilter

KIB = 1024


def ids(found: list[dict]) -> list[int]:
    return [row["id"] for row in found]


def group_id(event_type: str, normalised_error: str) -> str:
    """SPEC §2 group id computed by hand: md5(event_type || ':' || normalised)[:12]."""
    return hashlib.md5(f"{event_type}:{normalised_error}".encode()).hexdigest()[:12]


def test_newest_first_in_keyset_pages(db, rows):
    added = [rows.add(created_ago=100 - n) for n in range(5)]

    first = events.list_events(db, limit=2)
    second = events.list_events(db, EventFilter(before_id=first[-1]["id"]), limit=2)
    third = events.list_events(db, EventFilter(before_id=second[-1]["id"]), limit=2)

    assert ids(first) == [added[4], added[3]]
    assert ids(second) == [added[2], added[1]]
    assert ids(third) == [added[0]]  # fewer than the limit: no older page
    assert events.list_events(db, EventFilter(before_id=added[0]), limit=2) == []


def test_list_never_selects_payload_and_cuts_last_error(db, rows):
    row_id = rows.add(status="failed", processed_ago=5, last_error="E" * 2500, payload={"a": 1})

    (row,) = events.list_events(db)

    assert row["id"] == row_id
    assert "payload" not in row
    # SPEC §1's cap; the tables cut it to 200 after redaction (test_redaction_page.py)
    assert row["last_error"] == "E" * 2000
    assert set(row) == {
        "id",
        "event_type",
        "aggregate_type",
        "aggregate_id",
        "event_key",
        "status",
        "attempts",
        "available_at",
        "locked_at",
        "locked_by",
        "last_error",
        "created_at",
        "processed_at",
    }


def test_each_filter_alone_and_combined(db, rows):
    paid = rows.add(event_type="order.paid", aggregate=("order", "42"), event_key="k-paid")
    shipped = rows.add(
        event_type="order.shipped", aggregate=("order", "42"), status="done", processed_ago=1
    )
    crm = rows.add(event_type="crm_sync", aggregate=("customer", "42"), status="failed")
    lookalike = rows.add(event_type="crmXsync", aggregate=("customer", "7"))

    def found(**filters):
        return sorted(ids(events.list_events(db, EventFilter(**filters))))

    assert found(event_key="k-paid") == [paid]
    assert found(event_key="missing") == []
    assert found(event_type="order.paid") == [paid]
    assert found(event_type="order.%") == [paid, shipped]
    # "_" is literal in a pattern (SPEC §2): crm_% must not match crmXsync.
    assert found(event_type="crm_%") == [crm]
    assert found(event_type="crm_sync") == [crm]
    assert found(aggregate_type="order", aggregate_id="42") == [paid, shipped]
    assert found(aggregate_id="42") == [paid, shipped, crm]
    assert found(aggregate_type="customer") == [crm, lookalike]
    assert found(status="done") == [shipped]
    assert found(status="pending") == [paid, lookalike]
    assert found(event_type="order.%", status="pending") == [paid]
    assert found(aggregate_id="42", status="failed", event_type="crm%") == [crm]


def test_created_at_range_since_inclusive_until_exclusive(db, rows):
    three = rows.add(created_ago=3 * 3600)
    two = rows.add(created_ago=2 * 3600)
    one = rows.add(created_ago=3600)

    def found(since_ago=None, until_ago=None):
        return sorted(
            ids(
                events.list_events(
                    db, EventFilter(since=rows.at(since_ago), until=rows.at(until_ago))
                )
            )
        )

    assert found(since_ago=2.5 * 3600, until_ago=0.5 * 3600) == [two, one]
    assert found(since_ago=2 * 3600) == [two, one]  # since is inclusive
    assert found(until_ago=3600) == [three, two]  # until is exclusive
    assert found(until_ago=4 * 3600) == []


def test_bad_status_and_limit_are_refused(db):
    with pytest.raises(ValueError, match="status must be one of"):
        events.list_events(db, EventFilter(status="dead"))
    with pytest.raises(ValueError, match="limit must be between 1 and 1000"):
        events.list_events(db, limit=0)


def test_detail_has_every_field_and_pretty_payload(db, rows):
    payload = {"order": 42, "lines": [{"sku": "A-1", "qty": 2}], "note": "é"}
    row_id = rows.add(
        status="failed",
        created_ago=120,
        processed_ago=60,
        attempts=3,
        last_error="HTTP 500 " + "x" * 300,
        aggregate=("order", "42"),
        payload=payload,
        event_key="order.paid:42",
    )

    detail = events.get_event(db, row_id)

    assert detail["id"] == row_id
    assert detail["event_key"] == "order.paid:42"
    assert detail["attempts"] == 3
    assert detail["last_error"] == "HTTP 500 " + "x" * 300  # whole, not cut
    assert detail["created_at"] == rows.at(120)
    assert detail["processed_at"] == rows.at(60)
    assert detail["available_at"] == rows.at(120)
    assert detail["locked_at"] is None
    assert detail["payload_truncated"] is False
    assert detail["payload_head"] is None
    assert json.loads(detail["payload_pretty"]) == payload
    assert "\n    " in detail["payload_pretty"]  # indented by jsonb_pretty
    # jsonb orders keys by length, then bytewise.
    compact = '{"note": "é", "lines": [{"qty": 2, "sku": "A-1"}], "order": 42}'
    assert events.event_payload(db, row_id) == compact
    assert detail["payload_bytes"] == len(compact.encode())


def test_payload_past_256_kib_is_truncated_with_size_and_full_download(db, rows):
    # {"b": "xx…x"} is 9 bytes of JSON around the string: 262,144 bytes exactly at the limit.
    at_limit = rows.add(payload={"b": "x" * (256 * KIB - 9)})
    past_limit = rows.add(payload={"b": "y" * (256 * KIB - 8)})

    kept = events.get_event(db, at_limit)
    cut = events.get_event(db, past_limit)

    assert kept["payload_bytes"] == 256 * KIB
    assert kept["payload_truncated"] is False
    assert json.loads(kept["payload_pretty"]) == {"b": "x" * (256 * KIB - 9)}
    assert cut["payload_bytes"] == 256 * KIB + 1
    assert cut["payload_truncated"] is True
    assert cut["payload_pretty"] is None
    full = '{"b": "' + "y" * (256 * KIB - 8) + '"}'
    assert cut["payload_head"] == full[: 256 * KIB]
    assert events.event_payload(db, past_limit) == full


def test_payload_limit_is_a_parameter(db, rows):
    row_id = rows.add(payload={"k": "v"})  # {"k": "v"} is 10 bytes

    assert events.get_event(db, row_id, max_payload_bytes=10)["payload_truncated"] is False
    small = events.get_event(db, row_id, max_payload_bytes=9)
    assert small["payload_truncated"] is True
    assert small["payload_head"] == '{"k": "v"'


def test_unknown_id_gives_none(db, rows):
    rows.add()
    assert events.get_event(db, 999_999) is None
    assert events.event_payload(db, 999_999) is None


def test_ids_beyond_2_pow_53_are_exact(db, rows):
    low = rows.add(id=2**53 + 1, status="failed", last_error="boom")
    mid = rows.add(id=2**53 + 2)
    high = rows.add(id=2**62 + 7)

    assert ids(events.list_events(db)) == [high, mid, low]
    assert ids(events.list_events(db, EventFilter(before_id=2**53 + 2))) == [low]
    assert ids(events.list_events(db, EventFilter(before_id=2**62 + 7), limit=1)) == [mid]
    assert events.get_event(db, 2**53 + 1)["id"] == 2**53 + 1
    assert events.get_event(db, 2**53) is None  # a float round-trip would have found 2^53+1
    assert ids(events.list_failed(db)) == [2**53 + 1]


def test_aggregate_timeline_in_created_order_of_that_aggregate_only(db, rows):
    # ids in insertion order, created_at in another order: the timeline follows created_at.
    late = rows.add(aggregate=("order", "42"), created_ago=10, event_type="order.shipped")
    early = rows.add(aggregate=("order", "42"), created_ago=300, event_type="order.created")
    middle = rows.add(aggregate=("order", "42"), created_ago=60, status="done", processed_ago=50)
    tie_a = rows.add(aggregate=("order", "42"), created_ago=30)
    tie_b = rows.add(aggregate=("order", "42"), created_ago=30)
    rows.add(aggregate=("order", "43"), created_ago=100)
    rows.add(aggregate=("invoice", "42"), created_ago=100)

    timeline = events.aggregate_timeline(db, "order", "42")

    assert ids(timeline) == [early, middle, tie_a, tie_b, late]
    assert timeline[1]["status"] == "done"
    assert timeline[1]["processed_at"] == rows.at(50)
    assert "payload" not in timeline[0]
    assert ids(events.aggregate_timeline(db, "order", "42", limit=2)) == [early, middle]
    assert events.aggregate_timeline(db, "order", "nope") == []


def test_failed_rows_of_one_error_group(db, rows):
    a = rows.add(status="failed", processed_ago=50, last_error="timeout after 5000 ms")
    b = rows.add(status="failed", processed_ago=40, last_error="timeout after 12000 ms")
    unauthorised = rows.add(status="failed", processed_ago=30, last_error="HTTP 401 bad key")
    other_type = rows.add(
        event_type="invoice.sent", status="failed", processed_ago=20, last_error="HTTP 401 bad key"
    )
    rows.add(status="pending", last_error="timeout after 7000 ms")  # not dead-lettered

    timeouts = group_id("order.paid", "timeout after <n> ms")
    listed = events.list_failed(db, error_group=timeouts)

    assert ids(listed) == [b, a]
    assert {row["group_id"] for row in listed} == {timeouts}
    assert listed[0]["processed_at"] == rows.at(40)
    assert "payload" not in listed[0]
    assert ids(events.list_failed(db, error_group=group_id("order.paid", "HTTP 401 bad key"))) == [
        unauthorised
    ]
    assert ids(events.list_failed(db)) == [other_type, unauthorised, b, a]
    assert ids(events.list_failed(db, event_type="invoice.%")) == [other_type]
    assert ids(events.list_failed(db, limit=1)) == [other_type]
    assert events.list_failed(db, error_group="000000000000") == []


def test_database_now_is_the_server_clock(db, rows):
    now = events.database_now(db)
    assert rows.t0 <= now < rows.t0 + timedelta(minutes=1)
