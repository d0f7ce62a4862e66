"""The claim advisor (issue 32 item 5) on a real Postgres: an outbox with 200,000 done rows and
20,000 due pending rows, only the users' indexes for the claim: the claim sorts every due row,
and the advisor proposes ``(created_at, available_at) WHERE status = 'pending'`` — without an
estimate when HypoPG is not installed, with one (the claim planned on the hypothetical index,
its cost down) when the test has installed it; once the index is built (by the test, from the
printed statement) nothing is proposed; the retired ``(created_at)`` index is never proposed;
the CLI's output and exit codes. The advisor never creates an index or an extension.

HypoPG is Debian's ``postgresql-<version>-hypopg`` (``make hypopg``); without it the tests
that need it skip, loudly, and fail under ``make test`` (``OUTBOX_MONITOR_REQUIRE_HYPOPG``).
"""

import json
import re

import psycopg
import pytest
from click.testing import CliRunner

from outbox_monitor.cli import main
from outbox_monitor.cli.claim_advice import EXIT_ERRORS, EXIT_PROPOSED
from outbox_monitor.config.settings import load_settings
from outbox_monitor.demo.partitioned import create_partitioned_outbox
from outbox_monitor.health.claim_advice import NO_HYPOPG, PARTITIONED, advise_claim
from outbox_monitor.health.claim_proposals import CLAIM_ORDER, MEASURED_EFFECT
from outbox_monitor.store.db import APPLICATION_NAME, Database
from outbox_monitor.store.db_errors import describe_target
from outbox_monitor.store.schema import init_db
from tests.alerting import LOADED_DEADLINE, wait_for
from tests.claim_health import HARMFUL_INDEX, create_harmful_index, install_hypopg
from tests.claim_health import SORTED_DUE as DUE

PROPOSED = (
    'CREATE INDEX CONCURRENTLY "integration_outbox_claim_order_idx" ON "public".'
    '"integration_outbox" ("created_at", "available_at") WHERE status = \'pending\';'
)


def catalog(conn: psycopg.Connection) -> tuple[set[str], set[str]]:
    """The outbox table's index names and the database's extensions."""
    indexes = conn.execute(
        "SELECT indexname FROM pg_indexes WHERE tablename = 'integration_outbox'"
    ).fetchall()
    extensions = conn.execute("SELECT extname FROM pg_extension").fetchall()
    return {row[0] for row in indexes}, {row[0] for row in extensions}


@pytest.fixture
def dsn(sorted_claim_dsn: str) -> str:
    """This module's outbox: its claim sorts every due row."""
    return sorted_claim_dsn


@pytest.fixture
def backlog(dsn: str) -> psycopg.Connection:
    with psycopg.connect(dsn, autocommit=True) as conn:
        yield conn


def test_a_sort_of_every_due_row_gets_the_index_proposed_without_an_estimate(dsn, backlog):
    before = catalog(backlog)
    with Database(load_settings(dsn=dsn)) as db:
        advice = advise_claim(db)
    assert [(f.statement, f.kind) for f in advice.findings] == [
        ("users_claim", "sorts_due_rows"),
        ("shared_claim", "sorts_due_rows"),
    ]
    sorted_rows = int(re.search(r"≈ ([\d,]+)", advice.findings[0].text)[1].replace(",", ""))
    assert 0.9 * DUE <= sorted_rows <= 1.1 * DUE  # the planner's estimate of the due rows
    proposal = advice.proposal
    assert proposal.name == "integration_outbox_claim_order_idx"
    assert proposal.definition == CLAIM_ORDER.definition
    assert proposal.statements == (PROPOSED,)
    assert proposal.estimate is None and proposal.estimate_note == NO_HYPOPG
    assert proposal.entries == {"publish": 1, "claim": 0, "ack": 0, "retry": 1, "dead-letter": 0}
    assert proposal.write_cost.startswith("Estimate (HypoPG cannot measure writes)")
    assert catalog(backlog) == before  # no index built, no extension created
    assert "hypopg" not in before[1]


def test_with_hypopg_the_claim_is_planned_on_the_hypothetical_index(dsn, backlog):
    install_hypopg(backlog)
    before = catalog(backlog)
    with Database(load_settings(dsn=dsn)) as db:
        advice = advise_claim(db)
        estimate = advice.proposal.estimate
        assert estimate is not None, advice.proposal.estimate_note
        assert [plan.statement for plan in estimate.plans] == ["users_claim", "shared_claim"]
        for plan in estimate.plans:
            assert "Sort" in plan.shape_before, plan.shape_before
            assert plan.uses_index, plan.shape_after
            assert "Sort" not in plan.shape_after
            assert plan.shape_after.startswith("Limit > Index Scan (<")  # HypoPG's <oid>name
            assert plan.cost_after < plan.cost_before / 10
        # 20,000 pending entries of two timestamps: HypoPG's estimate, in the right range
        assert 20 * DUE <= estimate.size_bytes <= 200 * DUE
        assert f"about {estimate.size_bytes / 1_048_576:,.1f} MB" in advice.proposal.write_cost
        # nothing left behind: no index built, no hypothetical index in the pool's sessions
        assert catalog(backlog) == before
        with db.connection() as conn:
            assert (
                conn.execute("SELECT count(*) AS n FROM hypopg_list_indexes").fetchone()["n"] == 0
            )

        backlog.execute(PROPOSED)  # the person runs the printed statement
        backlog.execute("ANALYZE integration_outbox")
        built = advise_claim(db)
    assert built.findings == () and built.proposal is None
    assert built.note == (
        "no claim sorts 10,000 or more due rows nor walks rows it cannot hand out: "
        "no index to propose"
    )


def table_reads(conn: psycopg.Connection) -> tuple:
    """The outbox table's read and write counters (``pg_stat_user_tables``), read afresh, and
    the number of tables in the database."""
    conn.execute("SELECT pg_stat_clear_snapshot()")
    counters = conn.execute(
        """SELECT seq_scan, seq_tup_read, coalesce(idx_scan, 0), coalesce(idx_tup_fetch, 0),
                  n_tup_ins, n_tup_upd, n_tup_del
           FROM pg_stat_user_tables WHERE relname = 'integration_outbox'"""
    ).fetchone()
    [tables] = conn.execute(
        "SELECT count(*) FROM pg_class WHERE relkind IN ('r', 'p', 'm') "
        "AND relnamespace NOT IN ('pg_catalog'::regnamespace, 'information_schema'::regnamespace)"
    ).fetchone()
    return counters, tables


def monitor_sessions_ended(conn: psycopg.Connection) -> bool:
    """Whether no session of outbox-monitor is left on this database: a backend flushes its
    statistics as it exits, before it leaves pg_stat_activity."""
    [left] = conn.execute(
        "SELECT count(*) FROM pg_stat_activity WHERE application_name = %s "
        "AND datname = current_database()",
        (APPLICATION_NAME,),
    ).fetchone()
    return left == 0


def test_the_advisor_reads_and_copies_no_row_of_the_outbox(dsn, backlog):
    install_hypopg(backlog)
    before = table_reads(backlog)
    with Database(load_settings(dsn=dsn)) as db:
        assert advise_claim(db).proposal.estimate is not None  # HypoPG's path too
    assert wait_for(lambda: monitor_sessions_ended(backlog), timeout=LOADED_DEADLINE)
    assert table_reads(backlog) == before  # EXPLAIN only: no scan, no row read or written
    # the measure sees a read: one row read by a session of the same name
    with psycopg.connect(dsn, application_name=APPLICATION_NAME) as reader:
        reader.execute("SELECT id FROM integration_outbox LIMIT 1").fetchone()
    assert wait_for(lambda: monitor_sessions_ended(backlog), timeout=LOADED_DEADLINE)
    assert table_reads(backlog)[0] != before[0]


def test_an_index_of_the_users_own_that_serves_the_claim_means_no_proposal(dsn, backlog):
    backlog.execute(
        "CREATE INDEX my_pending_idx ON integration_outbox (status, created_at, available_at)"
    )
    backlog.execute("ANALYZE integration_outbox")
    with Database(load_settings(dsn=dsn)) as db:
        advice = advise_claim(db)
    assert advice.proposal is None and advice.findings == ()


def test_the_retired_created_at_index_is_never_proposed_again(history_dsn):
    """The history walked through ``(created_at)`` (what init-db retired): the advisor
    proposes the index of pending rows, never ``(created_at)`` again."""
    create_harmful_index(history_dsn)
    with Database(load_settings(dsn=history_dsn)) as db:
        advice = advise_claim(db)
    kinds = {finding.kind for finding in advice.findings}
    assert "walks_non_pending" in kinds
    assert any(HARMFUL_INDEX in finding.text for finding in advice.findings)
    assert advice.proposal.definition == CLAIM_ORDER.definition
    [statement] = advice.proposal.statements
    assert '("created_at")' not in statement and "WHERE status = 'pending'" in statement


def test_the_cli_prints_the_statement_and_exits_1_then_0_once_built(dsn, backlog):
    runner = CliRunner()
    result = runner.invoke(main, ["claim-advice", "--dsn", dsn], catch_exceptions=False)
    assert result.exit_code == EXIT_PROPOSED, result.output
    lines = result.stdout.splitlines()
    assert lines[0] == f"The workers' claim on public.integration_outbox at {describe_target(dsn)}:"
    assert lines[1].startswith("  users' claim (SPEC §1 SQL): sorts every due row (≈ ")
    assert "Proposed index: (created_at, available_at) WHERE status = 'pending'" in lines
    assert PROPOSED in lines  # alone on its line, to copy
    assert f"Effect on the claim: not estimated. {NO_HYPOPG}" in lines
    written = "Write cost: Estimate (HypoPG cannot measure writes)"
    assert any(line.startswith(written) for line in lines)
    assert MEASURED_EFFECT in lines  # what benchmarks measured, the trade-off included

    result = runner.invoke(main, ["claim-advice", "--dsn", dsn, "--json"])
    assert result.exit_code == EXIT_PROPOSED
    shown = json.loads(result.stdout)
    assert shown["advised"] is True and shown["proposal"]["statements"] == [PROPOSED]
    assert [f["kind"] for f in shown["findings"]] == ["sorts_due_rows", "sorts_due_rows"]

    backlog.execute(PROPOSED)
    backlog.execute("ANALYZE integration_outbox")
    result = runner.invoke(main, ["claim-advice", "--dsn", dsn])
    assert result.exit_code == 0, result.output
    assert result.stdout.splitlines()[1:] == [
        (
            "no claim sorts 10,000 or more due rows nor walks rows it cannot hand out: "
            "no index to propose"
        )
    ]


def test_the_cli_exits_2_when_the_advice_cannot_be_read(empty_dsn):
    result = CliRunner().invoke(main, ["claim-advice", "--dsn", empty_dsn, "--json"])
    assert result.exit_code == EXIT_ERRORS
    assert "integration_outbox" in json.loads(result.stdout)["error"]


def test_on_a_partitioned_outbox_the_index_is_built_on_only_the_parent_and_each_partition(
    empty_dsn,
):
    """Three monthly partitions and the default: 60,000 done rows, 20,000 due in the current
    month. The proposal is ON ONLY the parent, CONCURRENTLY on each partition, each attached
    (CREATE INDEX CONCURRENTLY refuses a partitioned table); HypoPG does not estimate it, and
    the proposal says so. Run as printed, the parent's index is valid and nothing more is
    proposed."""
    with psycopg.connect(empty_dsn, autocommit=True) as conn:
        bounds = [
            row[0]
            for row in conn.execute(
                "SELECT date_trunc('month', now()) + make_interval(months => n) "
                "FROM generate_series(-2, 1) AS n ORDER BY n"
            )
        ]
        parts = create_partitioned_outbox(conn, "public", "integration_outbox", bounds)
    with Database(load_settings(dsn=empty_dsn)) as db:
        init_db(db)
    with psycopg.connect(empty_dsn, autocommit=True) as conn:
        conn.execute(
            """INSERT INTO integration_outbox (event_type, aggregate_type, aggregate_id,
                   event_key, payload, status, created_at, available_at, processed_at)
               SELECT 'order.paid', 'order', g::text, 'done:' || g, '{}', 'done',
                      date_trunc('month', now()) - interval '2 months' + g * interval '80 s',
                      date_trunc('month', now()) - interval '2 months' + g * interval '80 s',
                      date_trunc('month', now()) - interval '2 months' + g * interval '81 s'
               FROM generate_series(1, 60000) AS g"""
        )
        conn.execute(
            """INSERT INTO integration_outbox (event_type, aggregate_type, aggregate_id,
                   event_key, payload, status, created_at, available_at)
               SELECT 'order.paid', 'order', g::text, 'due:' || g, '{}', 'pending',
                      now() - interval '1 minute', now() - interval '1 minute'
               FROM generate_series(1, %s) AS g""",
            (DUE,),
        )
        conn.execute("ANALYZE integration_outbox")
        install_hypopg(conn)
        with Database(load_settings(dsn=empty_dsn)) as db:
            advice = advise_claim(db)
            assert "sorts_due_rows" in {finding.kind for finding in advice.findings}
            statements = advice.proposal.statements
            assert statements[0] == (
                'CREATE INDEX "integration_outbox_claim_order_idx" ON ONLY "public".'
                '"integration_outbox" ("created_at", "available_at") WHERE status = \'pending\';'
            )
            for part in parts:
                own = f"{part}_claim_order_idx"
                assert (
                    f'CREATE INDEX CONCURRENTLY "{own}" ON "public"."{part}" ("created_at", '
                    "\"available_at\") WHERE status = 'pending';"
                ) in statements
                assert (
                    'ALTER INDEX "public"."integration_outbox_claim_order_idx" ATTACH PARTITION '
                    f'"public"."{own}";'
                ) in statements
            assert len(statements) == 1 + 2 * len(parts)
            # HypoPG is installed, but its indexes on partitions are not planned: said so
            assert advice.proposal.estimate is None
            assert advice.proposal.estimate_note == PARTITIONED

            for statement in statements:  # the person runs them in order
                conn.execute(statement)
            conn.execute("ANALYZE integration_outbox")
            [valid] = conn.execute(
                "SELECT indisvalid FROM pg_index "
                "WHERE indexrelid = 'integration_outbox_claim_order_idx'::regclass"
            ).fetchone()
            assert valid
            built = advise_claim(db)
    assert built.proposal is None and built.findings == (), built.as_json()


def test_the_read_login_gets_the_advice_and_a_failed_estimate_is_named(dsn, backlog, logins):
    """The viewer's login (``init-db --print-grants``) reads the advice; where it may not call
    HypoPG's functions the proposal stands and says why it has no estimate."""
    install_hypopg(backlog)
    backlog.execute("REVOKE EXECUTE ON FUNCTION hypopg_create_index(text) FROM PUBLIC")
    with Database(load_settings(dsn=logins.dsn(dsn, logins.read))) as db:
        advice = advise_claim(db)
    assert advice.proposal.statements == (PROPOSED,)
    assert advice.proposal.estimate is None
    note = advice.proposal.estimate_note
    assert note.startswith("HypoPG's estimate failed (PermissionDenied: "), note
    assert "hypopg_create_index" in note


def test_a_name_taken_by_another_index_gets_the_next_free_one(dsn, backlog):
    backlog.execute(
        "CREATE INDEX integration_outbox_claim_order_idx ON integration_outbox (aggregate_id)"
    )
    with Database(load_settings(dsn=dsn)) as db:
        proposal = advise_claim(db).proposal
    assert proposal.name == "integration_outbox_claim_order2_idx"
    assert proposal.statements == (PROPOSED.replace("claim_order_idx", "claim_order2_idx"),)


def test_a_walk_of_pending_rows_in_backoff_gets_the_index_that_skips_them(dsn, backlog):
    """The users' own ``(created_at) WHERE status = 'pending'`` instead of their claim index,
    and 20,000 pending rows in backoff older than the due ones: the claim walks them in
    ``created_at`` order, reading each from the table to test ``available_at``. The advisor
    finds the walk and proposes the index that tests ``available_at`` inside it."""
    backlog.execute("DROP INDEX integration_outbox_claim_idx")
    backlog.execute(
        "CREATE INDEX my_pending_idx ON integration_outbox (created_at) WHERE status = 'pending'"
    )
    backlog.execute(
        """INSERT INTO integration_outbox (event_type, aggregate_type, aggregate_id, event_key,
               payload, status, attempts, created_at, available_at)
           SELECT 'order.paid', 'order', g::text, 'backoff:' || g, '{}', 'pending', 1,
                  now() - interval '2 hours', now() + interval '1 hour'
           FROM generate_series(1, 20000) AS g"""
    )
    backlog.execute("ANALYZE integration_outbox")
    with Database(load_settings(dsn=dsn)) as db:
        advice = advise_claim(db)
    walks = [f for f in advice.findings if f.kind == "walks_not_due"]
    assert [f.statement for f in walks] == ["users_claim", "shared_claim"], advice.as_json()
    assert walks[0].text.startswith(
        "reads pending rows that are not due from the table through my_pending_idx and "
        "filters them by (available_at <= now())"
    )
    assert advice.proposal.statements == (PROPOSED,)
