"""What the horizon's memory keeps between readings (health/horizon_memory.py): a
transaction pushed out of a reading's list keeps what earlier readings showed of it, a
transaction unseen for FORGET_AFTER is forgotten, and at most MAX_REMEMBERED are kept."""

from datetime import UTC, datetime, timedelta

from outbox_monitor.health import horizon_memory
from outbox_monitor.health.horizon_memory import (
    FROM_BEGIN,
    FROM_STATEMENT,
    HorizonMemory,
    held_since,
)

T0 = datetime(2026, 12, 2, 14, 0, tzinfo=UTC)
BEGIN = T0 - timedelta(minutes=20)


def row(pid: int, xmin: str | None, now: datetime, **more) -> dict:
    """A visible read-only session of ``horizon_sessions`` (no xid), running a statement
    begun 1 s before ``now``."""
    return {
        "pid": pid,
        "role": "batch",
        "backend_start": BEGIN,
        "xact_start": BEGIN,
        "query_start": now - timedelta(seconds=1),
        "state": "active",
        "xid": None,
        "xmin": xmin,
        "hidden": False,
        "now": now,
    } | more


def test_a_transaction_pushed_out_of_a_reading_keeps_its_per_statement_snapshots():
    memory = HorizonMemory()
    memory.observe([row(7, "100", T0)])
    memory.observe([row(7, "105", T0 + timedelta(seconds=30))])  # a new snapshot: per statement
    # ten minutes of readings listing only older holders (the list is the oldest 50)
    for minute in range(1, 11):
        memory.observe([row(8, "90", T0 + timedelta(minutes=minute), role="other")])
    back = row(7, "180", T0 + timedelta(minutes=11))
    [seen] = memory.observe([back])
    assert held_since(back, seen) == (back["query_start"], FROM_STATEMENT)


def test_a_transaction_unseen_for_forget_after_is_forgotten():
    memory = HorizonMemory()
    memory.observe([row(7, "100", T0)])
    memory.observe([row(7, "105", T0 + timedelta(seconds=30))])
    later = T0 + timedelta(seconds=30) + horizon_memory.FORGET_AFTER + timedelta(seconds=1)
    memory.observe([row(8, "90", later, role="other")])
    assert len(memory) == 1  # only pid 8
    back = row(7, "180", later + timedelta(seconds=30))
    [seen] = memory.observe([back])
    assert held_since(back, seen) == (BEGIN, FROM_BEGIN)  # one reading again: from BEGIN


def test_at_most_max_remembered_are_kept_the_newest_seen(monkeypatch):
    monkeypatch.setattr(horizon_memory, "MAX_REMEMBERED", 3)
    memory = HorizonMemory()
    for pid in range(5):
        memory.observe([row(pid, "100", T0 + timedelta(seconds=pid))])
    assert len(memory) == 3
    assert {key[0] for key in memory._seen} == {2, 3, 4}
