"""``outbox-monitor replay --rate / --exclude-superseded / --watch`` (issue 13 items 4, 5)."""

import json
import threading

import psycopg
import pytest
from click.testing import CliRunner

from outbox_monitor.cli import main, replay_cli


@pytest.fixture
def replay(dsn, monkeypatch):
    """``replay(*args)`` runs ``outbox-monitor replay --yes *args`` as ``cli-tester``."""
    monkeypatch.setenv("OUTBOX_MONITOR_DSN", dsn)
    monkeypatch.setenv("OUTBOX_MONITOR_ACTOR", "cli-tester")
    monkeypatch.setattr(replay_cli, "WATCH_INTERVAL_SECONDS", 0.1)
    return lambda *args: CliRunner().invoke(
        main, ["replay", "--yes", *args], catch_exceptions=False, prog_name="outbox-monitor"
    )


def test_rate_drips_and_the_preview_says_how_long(replay, rows):
    ids = [rows.add_failed(created_ago=age) for age in (30, 20, 10)]
    result = replay("--event-type", "order.paid", "--rate", "2", "--batch-size", "1")
    assert result.exit_code == 0, result.output
    assert "drip: 3 row(s) at 2 rows/s, due over 1.5 s" in result.stdout
    due = [rows.get(row_id)["available_at"] for row_id in ids]
    assert [(at - due[0]).total_seconds() for at in due] == [0, 0.5, 1.0]

    rows.add_failed()
    as_json = json.loads(replay("--event-type", "order.paid", "--rate", "4", "--json").stdout)
    assert (as_json["filter"]["rate_per_second"], as_json["details"]["drip_seconds"]) == (4, 0.25)
    assert replay("--event-type", "%", "--rate", "0").exit_code == 2


def test_exclude_superseded_leaves_out_rows_with_a_later_done_event(replay, rows):
    stale = rows.add_failed(created_ago=300, aggregate=("order", "1"))
    rows.add(
        event_type="order.shipped",
        status="done",
        created_ago=200,
        processed_ago=100,
        aggregate=("order", "1"),
    )
    fresh = rows.add_failed(created_ago=300, aggregate=("order", "2"))
    dry = replay("--event-type", "order.%", "--dry-run")
    assert "order-safe: 1 selected row(s) have a later done event" in dry.stdout
    assert "  order.paid: 1" in dry.stdout
    result = json.loads(replay("--event-type", "order.%", "--exclude-superseded", "--json").stdout)
    assert (result["matched"], result["ids"]) == (1, [str(fresh)])
    assert result["details"]["superseded"] == {"order.paid": 1}
    assert rows.get(stale)["status"] == "failed"


@pytest.fixture
def first_look(monkeypatch) -> threading.Event:
    """Set once ``--watch`` has read the replay's outcome a first time (the real
    ``watch_outcome``, its ``on_change`` seen on the way)."""
    seen = threading.Event()
    watch_outcome = replay_cli.watch_outcome

    def watch(db, run_id, *, on_change=None, **kwargs):
        def changed(outcome):
            if on_change is not None:
                on_change(outcome)
            seen.set()

        return watch_outcome(db, run_id, on_change=changed, **kwargs)

    monkeypatch.setattr(replay_cli, "watch_outcome", watch)
    return seen


def _worker(dsn, ids, first_look: threading.Event):
    """Once the watch has seen the replayed rows: ack the first row, and dead-letter the
    others again with a 401 (as workers would, however long the replay took)."""

    def work():
        assert first_look.wait(60), "the watch never read the replay's outcome"
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute("UPDATE integration_outbox SET status = 'done' WHERE id = %s", (ids[0],))
            conn.execute(
                "UPDATE integration_outbox SET status = 'failed', last_error = 'HTTP 401 bad "
                "key' WHERE id = ANY(%s)",
                (ids[1:],),
            )

    thread = threading.Thread(target=work)
    thread.start()
    return thread


def test_watch_prints_counts_until_settled(replay, rows, dsn, first_look):
    ids = [rows.add_failed() for _ in range(3)]
    worker = _worker(dsn, ids, first_look)
    result = replay("--event-type", "order.paid", "--watch", "--watch-timeout", "60s")
    worker.join()
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert "  3 replayed: 0 done, 0 failed again, 3 pending, 0 processing" in lines
    settled = [line for line in lines if line.startswith("settled: ")]
    assert settled and settled[0].startswith(
        "settled: 3 replayed: 1 done, 2 failed again, 0 pending, 0 processing · failed again with "
    )
    assert "(order.paid, 2 rows): HTTP 401 bad key" in settled[0]


def test_watch_json_is_one_final_object(replay, rows, dsn, first_look):
    ids = [rows.add_failed() for _ in range(2)]
    worker = _worker(dsn, ids, first_look)
    result = json.loads(
        replay(
            "--id", str(ids[0]), "--id", str(ids[1]), "--watch", "--watch-timeout", "60s", "--json"
        ).stdout
    )
    worker.join()
    assert result["settled"] is True
    outcome = result["outcome"]
    assert (outcome["replayed"], outcome["done"], outcome["failed"], outcome["pending"]) == (
        2,
        1,
        1,
        0,
    )
    assert [g["rows"] for g in outcome["failed_groups"]] == [1]


def test_watch_stops_at_its_timeout(replay, rows):
    rows.add_failed()
    result = json.loads(
        replay("--event-type", "%", "--watch", "--watch-timeout", "1s", "--json").stdout
    )
    assert (result["settled"], result["outcome"]["pending"]) == (False, 1)
