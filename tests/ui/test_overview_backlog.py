"""The Overview reads the backlog's rows once a refresh (issue 32 item 3): its tiles, its table
by event type and the workers' liveness come from one pass (``backlog.backlog_pass``), with
the figures computed by hand from the inserted rows."""

import pytest

from outbox_monitor.store.db import Database

HEAP_READS = {"backlog_pass", "retrying", "stuck_locks", "attempts_at_least", "processing"}
"""Named queries that read backlog rows' heap tuples (``attempts``, ``locked_at``)."""


def seed(rows) -> None:
    """order.paid: 3 due (600, 300, 60 s ago), 1 processing locked 20 min ago (stuck);
    payment.captured: 1 retry (attempts 2) waiting in backoff for 5 more minutes;
    mail.sent: 1 retry (attempts 1) due since 30 s."""
    for ago in (600, 300, 60):
        rows.add(event_type="order.paid", created_ago=ago)
    rows.add(event_type="order.paid", status="processing", created_ago=1300, locked_ago=1200)
    rows.add(event_type="payment.captured", created_ago=900, available_ago=-300, attempts=2)
    rows.add(event_type="mail.sent", created_ago=120, available_ago=30, attempts=1)


@pytest.fixture
def statements(monkeypatch) -> list[str]:
    """The named queries every ``Database`` of this process runs, in order."""
    names: list[str] = []
    for method in ("fetch_one", "fetch_all"):
        original = getattr(Database, method)

        def recording(self, name, *args, _original=original, **kwargs):
            names.append(name)
            return _original(self, name, *args, **kwargs)

        monkeypatch.setattr(Database, method, recording)
    return names


def test_one_pass_over_the_backlog_serves_tiles_table_and_workers(open_page, rows, statements):
    seed(rows)

    at = open_page("overview")

    assert not at.exception
    assert [name for name in statements if name in HEAP_READS] == ["backlog_pass"]
    shown = {m.label: m.value for m in at.metric}
    assert shown["Queue depth"] == "4"  # 3 order.paid + 1 mail.sent due
    assert shown["Stuck locks"] == "1"
    assert shown["Retrying"] == "2"  # payment.captured and mail.sent, attempts > 0
    (frame,) = [d.value for d in at.dataframe if "depth trend" in d.value.columns]
    table = {row["event type"]: row for row in frame.to_dict("records")}
    # most troubled first: the stuck lock, then depth
    assert list(table) == ["order.paid", "mail.sent", "payment.captured"]
    assert [table[name]["retrying"] for name in table] == [0, 1, 1]
