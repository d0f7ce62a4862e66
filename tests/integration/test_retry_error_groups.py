"""SPEC §2 retry error groups from the cache and counts of migrations 025 and 026 (issue 30
item 1): after every kind of change — a new failure, an error that changed, a row acked,
dead-lettered or replayed — the groups counted equal hand-computed ones and those of the
live statement (every retrying row normalised now), a count normalises only the rows that
changed, and a reader within the maximum age reads the last counts without counting."""

import hashlib
import logging
from concurrent.futures import ThreadPoolExecutor

import psycopg
import pytest
from psycopg import sql

from outbox_monitor import outbox
from outbox_monitor.config.settings import load_settings
from outbox_monitor.errors import QueryTimeout
from outbox_monitor.figures import diagnosis, error_grouping, metrics
from outbox_monitor.privacy.redaction import redactor_for
from outbox_monitor.service.sampler import record_sample
from outbox_monitor.store.db import Database
from outbox_monitor.store.filters import Where
from tests.alerting import wait_for

AUTH = "HTTP 401 invalid API key for account <n>"
UPSTREAM = "HTTP 500 upstream <str> failed"
TIMEOUT = "timeout after <n> ms calling <str>"


def group_id(event_type: str, fingerprint: str) -> str:
    """SPEC §2: the first 12 hex digits of md5(event_type || ':' || normalised)."""
    return hashlib.md5(f"{event_type}:{fingerprint}".encode()).hexdigest()[:12]


def live(db: Database, event_type: str | None = None) -> list[dict]:
    """The live statement's groups (every retrying row normalised now), without totals."""
    where = Where().event_type(event_type)
    found = db.fetch_all(
        "retry_error_groups", {"limit": 20, **where.params}, and_filters=where.fragment
    )
    groups = [{key: row[key] for key in error_grouping.RETRY_GROUP_KEYS} for row in found]
    return redactor_for(db.settings).redact_rows(groups, ("fingerprint", "sample_error"))


def counts(db: Database, event_type: str | None = None) -> dict[str, tuple[int, int]]:
    """{group_id: (retrying, due_now)} of the cached groups, after checking that every field
    equals the live statement's and that the totals add up."""
    loaded = error_grouping.retry_groups(db, event_type=event_type, max_age=0)
    assert loaded.cached
    assert loaded.groups == live(db, event_type)
    assert loaded.groups_total == len(loaded.groups)
    assert loaded.retrying_total == metrics.retrying(db, event_type=event_type)
    return {g["group_id"]: (g["retrying"], g["due_now"]) for g in loaded.groups}


def retrying(rows, event_type: str, error: str, *, due_in: float = 60, attempts: int = 1) -> int:
    """A pending row after ``attempts`` failures, due in ``due_in`` seconds."""
    return rows.add(
        event_type=event_type,
        status="pending",
        attempts=attempts,
        created_ago=600,
        available_ago=-due_in,
        last_error=error,
    )


def make_due(conn, row_id: int) -> None:
    """The row's backoff is over (the clock moved on): the only due row, so the next claim
    takes it."""
    conn.execute(
        "UPDATE integration_outbox SET available_at = now() - interval '1 second' WHERE id = %s",
        (row_id,),
    )


def claim_only(conn, row_id: int) -> None:
    (claimed,) = outbox.claim(conn, "w1")
    assert claimed["id"] == row_id


def cached_ids(conn) -> set[int]:
    return {row["id"] for row in conn.execute("SELECT id FROM outbox_monitor.retry_fingerprints")}


def test_each_change_is_counted_exactly_and_only_changed_rows_are_normalised(db, rows, conn):
    a1 = retrying(rows, "crm.upsert", "HTTP 401 invalid API key for account 12345")
    retrying(rows, "crm.upsert", "HTTP 401 invalid API key for account 67890", due_in=30)
    b1 = retrying(rows, "crm.upsert", "HTTP 500 upstream 'svc-a' failed", due_in=120)
    c1 = retrying(rows, "order.paid", "timeout after 3000 ms calling 'erp'", due_in=300)
    fresh = rows.add(event_type="crm.upsert", created_ago=30)  # never tried: not retrying
    rows.add(
        event_type="crm.upsert",
        status="failed",
        attempts=10,
        processed_ago=5,
        last_error="HTTP 401 invalid API key for account 1",
    )  # a dead letter: not retrying
    auth, upstream = group_id("crm.upsert", AUTH), group_id("crm.upsert", UPSTREAM)
    order = group_id("order.paid", TIMEOUT)

    assert error_grouping.refresh_retry_error_groups(db) == 4  # the four retrying rows
    assert error_grouping.refresh_retry_error_groups(db) == 0  # nothing changed
    assert counts(db) == {auth: (2, 0), upstream: (1, 0), order: (1, 0)}
    assert counts(db, event_type="order.%") == {order: (1, 0)}

    # a new failure: the fresh row (the only due one) fails once
    claim_only(conn, fresh)
    assert outbox.fail(conn, fresh, "w1", "HTTP 500 upstream 'svc-b' failed") == "pending"
    assert error_grouping.refresh_retry_error_groups(db) == 1
    assert counts(db) == {auth: (2, 0), upstream: (2, 0), order: (1, 0)}

    # an error that changed: a1 fails again with another error (attempts 2)
    make_due(conn, a1)
    claim_only(conn, a1)
    assert outbox.fail(conn, a1, "w1", "timeout after 5000 ms calling 'crm'") == "pending"
    crm_timeout = group_id("crm.upsert", TIMEOUT)
    assert error_grouping.refresh_retry_error_groups(db) == 1
    assert counts(db) == {auth: (1, 0), upstream: (2, 0), order: (1, 0), crm_timeout: (1, 0)}

    # last_error rewritten in place, attempts unchanged (no worker does this; a user may)
    conn.execute(
        "UPDATE integration_outbox SET last_error = 'HTTP 401 invalid API key for account 5555'"
        " WHERE id = %s",
        (c1,),
    )
    assert error_grouping.refresh_retry_error_groups(db) == 1
    order_auth = group_id("order.paid", AUTH)
    assert counts(db) == {auth: (1, 0), upstream: (2, 0), order_auth: (1, 0), crm_timeout: (1, 0)}

    # acked: fresh (retrying since its failure) succeeds on its next try
    make_due(conn, fresh)
    claim_only(conn, fresh)
    assert outbox.ack(conn, fresh, "w1")
    assert error_grouping.refresh_retry_error_groups(db) == 0
    assert fresh not in cached_ids(conn)
    assert counts(db) == {auth: (1, 0), upstream: (1, 0), order_auth: (1, 0), crm_timeout: (1, 0)}

    # dead-lettered: b1 fails permanently
    make_due(conn, b1)
    claim_only(conn, b1)
    assert outbox.dead_letter(conn, b1, "w1", "HTTP 500 upstream 'svc-a' failed") == "failed"
    assert error_grouping.refresh_retry_error_groups(db) == 0
    assert counts(db) == {auth: (1, 0), order_auth: (1, 0), crm_timeout: (1, 0)}

    # replayed: back to pending with attempts reset (not retrying), then it fails again
    conn.execute(
        "UPDATE integration_outbox SET status = 'pending', attempts = 0,"
        " available_at = now() - interval '1 second', processed_at = NULL WHERE id = %s",
        (b1,),
    )
    assert error_grouping.refresh_retry_error_groups(db) == 0
    assert counts(db) == {auth: (1, 0), order_auth: (1, 0), crm_timeout: (1, 0)}
    claim_only(conn, b1)
    assert outbox.fail(conn, b1, "w1", "HTTP 500 upstream 'svc-c' failed") == "pending"
    assert error_grouping.refresh_retry_error_groups(db) == 1
    assert counts(db) == {auth: (1, 0), upstream: (1, 0), order_auth: (1, 0), crm_timeout: (1, 0)}
    # only the retrying rows are cached, and each group's text once
    assert cached_ids(conn) == {
        row["id"]
        for row in conn.execute(
            "SELECT id FROM integration_outbox WHERE status = 'pending' AND attempts > 0"
        )
    }
    texts = conn.execute("SELECT fingerprint FROM outbox_monitor.retry_fingerprint_texts")
    assert sorted(row["fingerprint"] for row in texts) == sorted([AUTH, UPSTREAM, TIMEOUT])


def stamp(conn) -> object:
    """When the counts of integration_outbox were taken (migration 026)."""
    found = conn.execute(
        "SELECT refreshed_at FROM outbox_monitor.retry_error_groups_refreshed"
        " WHERE table_oid = 'integration_outbox'::regclass"
    ).fetchone()
    return found and found["refreshed_at"]


def age_counts(conn) -> None:
    """Make the counts 2 minutes old."""
    conn.execute(
        "UPDATE outbox_monitor.retry_error_groups_refreshed"
        " SET refreshed_at = refreshed_at - interval '2 minutes'"
    )


def test_a_reader_within_the_max_age_reads_the_last_counts_and_their_time(db, rows, conn):
    """A row that failed again after the count: a reader within the maximum age gets the
    groups as counted (and when), a reader past it counts them again (one row normalised)."""
    row = retrying(rows, "crm.upsert", "HTTP 401 invalid API key for account 12345")
    assert error_grouping.refresh_retry_error_groups(db) == 1
    counted = stamp(conn)
    conn.execute(
        "UPDATE integration_outbox SET attempts = 2,"
        " last_error = 'timeout after 1000 ms calling ''x''' WHERE id = %s",
        (row,),
    )
    young = error_grouping.retry_groups(db, max_age=3600)
    assert [(g["group_id"], g["retrying"]) for g in young.groups] == [
        (group_id("crm.upsert", AUTH), 1)
    ]
    assert young.counted_at == counted
    assert stamp(conn) == counted  # nothing counted
    age_counts(conn)
    old = error_grouping.retry_groups(db, max_age=60)
    assert [(g["group_id"], g["retrying"]) for g in old.groups] == [
        (group_id("crm.upsert", TIMEOUT), 1)
    ]
    assert old.counted_at is None  # counted by this read: as fresh as it
    assert stamp(conn) > counted
    assert error_grouping.refresh_retry_error_groups(db) == 0  # normalised by that reader


def test_a_reader_never_waits_for_a_session_counting(dsn, db, rows, conn):
    """While another session counts (it holds the count's lock), a reader past the maximum
    age reads the last counts at once instead of waiting."""
    retrying(rows, "crm.upsert", "HTTP 401 invalid API key for account 12345")
    assert error_grouping.refresh_retry_error_groups(db) == 1
    retrying(rows, "order.paid", "timeout after 3000 ms calling 'erp'")
    age_counts(conn)
    with psycopg.connect(dsn) as counting:  # a transaction holding the lock
        counting.execute(
            "SELECT pg_advisory_xact_lock(hashtextextended("
            "'outbox_monitor.retry_error_groups:' || 'integration_outbox'::regclass::oid, 0))"
        )
        loaded = error_grouping.retry_groups(db, max_age=60)
        assert [g["event_type"] for g in loaded.groups] == ["crm.upsert"]
    assert [g["event_type"] for g in error_grouping.retry_groups(db, max_age=60).groups] == [
        "crm.upsert",
        "order.paid",
    ]


def test_the_sampler_counts_them_so_pages_only_read(db, rows, conn):
    """Each sample counts the retry error groups when half an interval old: a page after it
    reads the counts (no row normalised by the page)."""
    retrying(rows, "crm.upsert", "HTTP 401 invalid API key for account 12345", due_in=-5)
    retrying(rows, "crm.upsert", "HTTP 401 invalid API key for account 67890")
    sample = record_sample(db)
    assert sample["retry_groups_counted_at"] == stamp(conn)
    counted = conn.execute(
        "SELECT event_type, retrying, due_now FROM outbox_monitor.retry_error_group_counts"
    ).fetchall()
    assert [tuple(r.values()) for r in counted] == [("crm.upsert", 2, 1)]
    assert error_grouping.retry_groups(db).counted_at == sample["retry_groups_counted_at"]
    assert error_grouping.refresh_retry_error_groups(db) == 0


def test_a_first_fill_larger_than_a_batch_takes_several_calls(db, rows):
    for account in range(5):  # 3 due since 10 s, 2 due in a minute
        due_in = -10 if account < 3 else 60
        retrying(
            rows, "crm.upsert", f"HTTP 401 invalid API key for account {account:04d}", due_in=due_in
        )
    assert error_grouping.refresh_retry_error_groups(db, batch=2) == 5
    assert error_grouping.refresh_retry_error_groups(db, batch=2) == 0
    assert counts(db) == {group_id("crm.upsert", AUTH): (5, 3)}


def test_the_header_totals_count_every_group_beyond_the_limit(db, rows):
    """Issue 30 item 8: 25 groups of 1 row and one of 2 (27 rows); 10 listed."""
    for n in range(25):
        retrying(rows, f"bulk.{n}", "HTTP 500 upstream 'x' failed")
    retrying(rows, "crm.upsert", "HTTP 401 invalid API key for account 1001")
    retrying(rows, "crm.upsert", "HTTP 401 invalid API key for account 1002")
    loaded = error_grouping.retry_groups(db, limit=10)
    assert (len(loaded.groups), loaded.groups_total, loaded.retrying_total) == (10, 26, 27)
    assert loaded.groups[0]["group_id"] == group_id("crm.upsert", AUTH)


def test_each_outbox_table_has_its_own_cache(dsn, db, rows, conn):
    """Under a fleet each outbox table's rows are cached under its own oid (migration 006's
    keying): another table's retrying rows never enter this table's groups."""
    retrying(rows, "crm.upsert", "HTTP 401 invalid API key for account 12345")
    conn.execute("CREATE TABLE public.second_outbox (LIKE integration_outbox INCLUDING ALL)")
    conn.execute(
        "INSERT INTO public.second_outbox SELECT * FROM integration_outbox;"
        " UPDATE public.second_outbox SET event_type = 'billing.sent'"
    )
    assert error_grouping.refresh_retry_error_groups(db) == 1
    with Database(load_settings(dsn=dsn, table="public.second_outbox")) as second:
        assert error_grouping.refresh_retry_error_groups(second) == 1
        assert [g["event_type"] for g in error_grouping.retry_error_groups(second)] == [
            "billing.sent"
        ]
    assert [g["event_type"] for g in error_grouping.retry_error_groups(db)] == ["crm.upsert"]
    assert error_grouping.refresh_retry_error_groups(db) == 0


def test_a_login_without_the_function_gets_the_live_groups_and_a_warning(dsn, logins, rows, caplog):
    """Grants of an older --print-grants (no EXECUTE on refresh_retry_error_groups): the same
    groups, every retrying row normalised now, and one WARNING per process and table."""
    retrying(rows, "crm.upsert", "HTTP 401 invalid API key for account 12345")
    retrying(rows, "order.paid", "timeout after 3000 ms calling 'erp'")
    with psycopg.connect(dsn, autocommit=True) as su:
        su.execute(
            sql.SQL(
                "REVOKE EXECUTE ON FUNCTION outbox_monitor.refresh_retry_error_groups("
                "regclass, integer, interval) FROM {}"
            ).format(sql.Identifier(logins.roles.viewer))
        )
    error_grouping._warned_live_retry_groups.clear()
    with (
        Database(load_settings(dsn=logins.dsn(dsn, logins.read))) as viewer,
        caplog.at_level(logging.WARNING, logger="outbox_monitor.metrics"),
    ):
        first = error_grouping.retry_groups(viewer)
        again = error_grouping.retry_error_groups(viewer, event_type="order.%")
    assert not first.cached
    assert {g["group_id"]: g["retrying"] for g in first.groups} == {
        group_id("crm.upsert", AUTH): 1,
        group_id("order.paid", TIMEOUT): 1,
    }
    assert (first.groups_total, first.retrying_total) == (2, 2)
    assert [g["group_id"] for g in again] == [group_id("order.paid", TIMEOUT)]
    warnings = [r for r in caplog.records if "computed from every retrying row" in r.message]
    assert len(warnings) == 1
    assert "--print-grants" in warnings[0].message


def test_the_viewer_login_fills_the_cache_through_the_function_only(dsn, logins, rows):
    retrying(rows, "crm.upsert", "HTTP 401 invalid API key for account 12345")
    with Database(load_settings(dsn=logins.dsn(dsn, logins.read))) as viewer:
        loaded = error_grouping.retry_groups(viewer)
        assert loaded.cached
        assert [g["retrying"] for g in loaded.groups] == [1]
        with viewer.connection() as conn, pytest.raises(psycopg.errors.InsufficientPrivilege):
            conn.execute(
                "INSERT INTO outbox_monitor.retry_fingerprints VALUES "
                "('integration_outbox'::regclass, 1, 1, 0, gen_random_uuid())"
            )
    with psycopg.connect(dsn) as su:
        found = su.execute("SELECT count(*) FROM outbox_monitor.retry_fingerprints").fetchone()
        assert found[0] == 1


def test_readers_waiting_for_the_first_count_read_it_instead_of_counting_again(dsn, db, rows, conn):
    """No count yet: a reader (maximum age 60 s) waits for the session taking the first one,
    then reads it — before, each waiting reader counted the backlog again, one after the
    other (N viewers opening the Overview at once: N passes in a row)."""
    retrying(rows, "crm.upsert", "HTTP 401 invalid API key for account 12345")
    params = {"table_regclass": db.table_name, "batch": 10, "max_age_seconds": 60}
    with psycopg.connect(dsn) as counting, ThreadPoolExecutor(1) as pool:
        # the first count, its lock held until this transaction commits
        counting.execute(
            "SELECT * FROM outbox_monitor.refresh_retry_error_groups("
            "'integration_outbox', 10, interval '0')"
        )
        reader = pool.submit(db.fetch_one, "retry_error_groups_refresh", params)
        wait_for(
            lambda: conn.execute(
                "SELECT count(*) AS n FROM pg_locks WHERE locktype = 'advisory' AND NOT granted"
            ).fetchone()["n"],
            timeout=30,
        )
        counting.commit()
        step = reader.result(timeout=60)
    assert (step["done"], step["counted"]) == (True, False)
    assert step["refreshed_at"] == stamp(conn)


def test_an_alerts_diagnosis_reads_the_groups_as_they_are_now(db, rows):
    """An alert's message (``notification_queue``: ``diagnosis.read_evidence`` and
    ``line_for``) names the error of the rows retrying now, as docs/figures.md promises
    ("status --json and the alerts, at each call"): before, it read counts a sample took
    less than 60 s earlier, and 30 rows failing since with another error were not in them."""
    for account in range(10):
        retrying(rows, "crm.upsert", f"HTTP 401 invalid API key for account {1000 + account}")
    error_grouping.refresh_retry_error_groups(db)  # the sampler's count, just taken
    for millis in range(30):
        retrying(rows, "crm.upsert", f"timeout after {1000 + millis} ms calling 'erp'")

    evidence = diagnosis.read_evidence(db)
    assert {g["group_id"]: g["retrying"] for g in evidence.retry_groups["crm.upsert"]} == {
        group_id("crm.upsert", AUTH): 10,
        group_id("crm.upsert", TIMEOUT): 30,
    }
    found = diagnosis.line_for(db, "crm.upsert")
    assert found is not None
    text = "".join(part["text"] for part in found.as_payload())
    assert "40 retrying with “timeout after 10" in text  # the newest row's error
    assert "likely cause: downstream failing (one error for 30 of 40 retrying rows)" in text


def test_a_page_whose_count_times_out_reads_the_last_counts_and_their_age(
    dsn, db, rows, conn, caplog
):
    """Counts 2 minutes old, and counting them again hits the statement timeout (here a
    session holding the counts' time row): a page reads the last counts, with their time and
    why they are not newer, and logs a WARNING — before, the QueryTimeout ended the Overview
    below the Retrying tile at every refresh. ``status --json`` (max_age 0) still fails."""
    retrying(rows, "crm.upsert", "HTTP 401 invalid API key for account 12345")
    error_grouping.refresh_retry_error_groups(db)
    age_counts(conn)
    counted = stamp(conn)
    retrying(rows, "order.paid", "timeout after 3000 ms calling 'erp'")
    with (
        Database(load_settings(dsn=dsn, statement_timeout=1)) as page_db,
        psycopg.connect(dsn) as holding,
        caplog.at_level(logging.WARNING, logger="outbox_monitor.metrics"),
    ):
        holding.execute("SELECT FROM outbox_monitor.retry_error_groups_refreshed FOR UPDATE")
        loaded = error_grouping.retry_groups(page_db, max_age=60)
        with pytest.raises(QueryTimeout):
            error_grouping.retry_groups(page_db, max_age=0)
        holding.rollback()
        # within the 60 s after the failure, this process reads the counts without trying
        again = error_grouping.retry_groups(page_db, max_age=60)
        assert (again.counted_at, again.recount_failed) == (counted, loaded.recount_failed)
    assert [(g["event_type"], g["retrying"]) for g in loaded.groups] == [("crm.upsert", 1)]
    assert loaded.counted_at == counted
    assert loaded.recount_failed and "statement timeout" in loaded.recount_failed
    assert caplog.text.count("counting them again failed") == 1
    assert error_grouping.retry_groups(db, max_age=0).counted_at is None  # status: counted now
    after = error_grouping.retry_groups(db, max_age=60)  # counted since the failure: no note
    assert (after.counted_at, after.recount_failed) == (stamp(conn), None)


def test_a_groups_sample_read_after_its_count_is_an_error_of_that_group(db, rows, conn):
    """Counted with the group's newest row as its sample; that row then failed again with
    another error (or was acked): within the maximum age the group's sample_error is still
    an error of that group — before, it was the row's new error (a timeout shown as the
    sample of the HTTP 401 group) or nothing."""
    retrying(rows, "crm.upsert", "HTTP 401 invalid API key for account 12345")
    newest = retrying(rows, "crm.upsert", "HTTP 401 invalid API key for account 67890")
    error_grouping.refresh_retry_error_groups(db)
    conn.execute(
        "UPDATE integration_outbox SET attempts = 2,"
        " last_error = 'timeout after 1000 ms calling ''x''' WHERE id = %s",
        (newest,),
    )
    [group] = error_grouping.retry_groups(db, max_age=3600).groups
    assert group["group_id"] == group_id("crm.upsert", AUTH)
    assert group["sample_error"] == AUTH  # the group's fingerprint: its row changed
    conn.execute("UPDATE integration_outbox SET status = 'done' WHERE id = %s", (newest,))
    [group] = error_grouping.retry_groups(db, max_age=3600).groups
    assert (group["retrying"], group["sample_error"]) == (2, AUTH)  # as counted


def test_a_partial_count_leaves_the_last_counts_whole(db, rows, conn):
    """A call that normalised a batch but had more left (done false: no new counts) kept
    the last counts, yet deleted the text of a group whose rows had all left: a reader
    then got those counts without that group (3 rows in 2 groups read as 2 in 1)."""
    retrying(rows, "crm.upsert", "HTTP 401 invalid API key for account 12345")
    retrying(rows, "crm.upsert", "HTTP 401 invalid API key for account 67890")
    gone = retrying(rows, "order.paid", "timeout after 3000 ms calling 'erp'")
    error_grouping.refresh_retry_error_groups(db)
    conn.execute("UPDATE integration_outbox SET status = 'done' WHERE id = %s", (gone,))
    for n in range(3):
        retrying(rows, "billing.sent", f"HTTP 500 upstream 'x{n}' failed")
    step = db.fetch_one(
        "retry_error_groups_refresh",
        {"table_regclass": db.table_name, "batch": 2, "max_age_seconds": 0},
    )
    assert (step["done"], step["counted"], step["normalised"]) == (False, False, 2)

    loaded = error_grouping.retry_groups(db, max_age=3600)
    assert {g["group_id"]: g["retrying"] for g in loaded.groups} == {
        group_id("crm.upsert", AUTH): 2,
        group_id("order.paid", TIMEOUT): 1,
    }
    assert (loaded.groups_total, loaded.retrying_total) == (2, 3)
    assert counts(db) == {  # the next count: every group as it is now, no text left behind
        group_id("crm.upsert", AUTH): (2, 0),
        group_id("billing.sent", UPSTREAM): (3, 0),
    }
    texts = conn.execute("SELECT fingerprint FROM outbox_monitor.retry_fingerprint_texts")
    assert sorted(row["fingerprint"] for row in texts) == sorted([AUTH, UPSTREAM])


def test_counts_stamped_in_the_future_are_counted_again(db, rows, conn):
    """The counts' time is ahead of the clock (the server's clock was set back, or a
    failover to a server whose clock is behind): a reader counts them again — before, they
    passed for younger than any maximum age until the clock caught up (here an hour)."""
    row = retrying(rows, "crm.upsert", "HTTP 401 invalid API key for account 12345")
    error_grouping.refresh_retry_error_groups(db)
    conn.execute(
        "UPDATE outbox_monitor.retry_error_groups_refreshed"
        " SET refreshed_at = now() + interval '1 hour'"
    )
    conn.execute(
        "UPDATE integration_outbox SET attempts = 2,"
        " last_error = 'timeout after 1000 ms calling ''x''' WHERE id = %s",
        (row,),
    )
    loaded = error_grouping.retry_groups(db, max_age=60)
    assert [g["group_id"] for g in loaded.groups] == [group_id("crm.upsert", TIMEOUT)]
    assert loaded.counted_at is None  # counted by this read


def test_a_page_in_a_storm_makes_one_step_and_reads_the_last_counts(db, rows, conn):
    """Counts 2 minutes old, then more rows failed than one call normalises (a storm): a
    page's read makes one call (one batch normalised, the others' progress kept) and reads
    the last counts with their age — before, it called again until the whole storm was
    normalised, the viewer waiting for it. The next read finishes the count."""
    retrying(rows, "crm.upsert", "HTTP 401 invalid API key for account 12345")
    error_grouping.refresh_retry_error_groups(db)
    age_counts(conn)
    counted = stamp(conn)
    storm = error_grouping.ERROR_GROUPS_BATCH + 1
    conn.execute(
        "INSERT INTO integration_outbox (event_type, aggregate_type, aggregate_id, event_key,"
        " payload, status, attempts, last_error, available_at)"
        " SELECT 'order.paid', 'order', n::text, 'storm-' || n, '{}', 'pending', 1,"
        " 'timeout after ' || (1000 + n) || ' ms calling ''erp''', now() + interval '1 minute'"
        " FROM generate_series(1, %s) AS n",
        (storm,),
    )
    first = error_grouping.retry_groups(db, max_age=60)
    assert first.counted_at == counted
    assert [(g["event_type"], g["retrying"]) for g in first.groups] == [("crm.upsert", 1)]
    assert len(cached_ids(conn)) == 1 + error_grouping.ERROR_GROUPS_BATCH
    second = error_grouping.retry_groups(db, max_age=60)
    assert second.counted_at is None  # counted by this read
    assert [(g["event_type"], g["retrying"]) for g in second.groups] == [
        ("order.paid", storm),
        ("crm.upsert", 1),
    ]


def test_counts_taken_while_a_reader_reads_carry_their_own_time(dsn, db, rows, conn):
    """A reader past the maximum age finds another session counting (it reads the last
    counts' time, 2 minutes old) and then reads the counts that session has just committed:
    the time it reports is theirs — before, fresh counts came back labelled 2 minutes old
    (the Overview's header said "counted 2m 0s ago" of counts taken now)."""
    retrying(rows, "crm.upsert", "HTTP 401 invalid API key for account 12345")
    error_grouping.refresh_retry_error_groups(db)
    age_counts(conn)
    retrying(rows, "order.paid", "timeout after 3000 ms calling 'erp'")
    with psycopg.connect(dsn) as counting, ThreadPoolExecutor(1) as pool:
        counting.execute(
            "SELECT * FROM outbox_monitor.refresh_retry_error_groups("
            "'integration_outbox', 10, interval '0')"
        )
        # the reader's read of the counts waits for this session's commit
        counting.execute("LOCK TABLE outbox_monitor.retry_error_group_counts")
        reader = pool.submit(error_grouping.retry_groups, db, max_age=60)
        wait_for(
            lambda: conn.execute(
                "SELECT count(*) AS n FROM pg_locks"
                " WHERE relation = 'outbox_monitor.retry_error_group_counts'::regclass"
                " AND NOT granted"
            ).fetchone()["n"],
            timeout=30,
        )
        counting.commit()
        loaded = reader.result(timeout=60)
    assert [g["event_type"] for g in loaded.groups] == ["crm.upsert", "order.paid"]
    assert loaded.counted_at == stamp(conn)


def test_a_sample_whose_count_times_out_is_recorded_and_says_so(dsn, rows, conn, caplog):
    """The sampler's count of the retry error groups hits the statement timeout: the sample
    is recorded, the pass returns no count time and logs a WARNING naming the groups —
    before, record_sample raised QueryTimeout after writing the sample, and the scheduler
    logged "sampler … failed" for a sample it had written."""
    retrying(rows, "crm.upsert", "HTTP 401 invalid API key for account 12345")
    with (
        Database(load_settings(dsn=dsn, statement_timeout=1)) as scheduler_db,
        psycopg.connect(dsn) as holding,
        caplog.at_level(logging.WARNING, logger="outbox_monitor.metrics"),
    ):
        error_grouping.refresh_retry_error_groups(scheduler_db)
        age_counts(conn)
        holding.execute("SELECT FROM outbox_monitor.retry_error_groups_refreshed FOR UPDATE")
        sample = record_sample(scheduler_db)
    assert sample["retry_groups_counted_at"] is None
    recorded = conn.execute("SELECT retrying FROM outbox_monitor.samples").fetchall()
    assert [r["retrying"] for r in recorded] == [1]
    assert "retry error groups of public.integration_outbox not counted" in caplog.text
