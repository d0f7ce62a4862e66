"""Claim-health test helpers (issue 14 item 2): an outbox with a long done history and a
backlog of new rows, on which the harmful ``(created_at)`` index makes the planner walk the
history (benchmarks/claim.py found it at 1 M rows; this history is smaller, the same
shape: the backlog is the newest rows, so a walk in ``created_at`` order reaches it last)."""

import itertools
import os

import psycopg
import pytest

from outbox_monitor.demo.pgcluster import TemporaryCluster
from tests.conftest import TEMPLATE

HISTORY_ROWS = 100_000
BACKLOG_ROWS = 1_000
HARMFUL_INDEX = "integration_outbox_created_at_idx"
HISTORY_TEMPLATE = "claim_history"
SORTED_DONE = 200_000
SORTED_DUE = 20_000
SORTED_TEMPLATE = "claim_sorted"
REQUIRE_HYPOPG_ENV = "OUTBOX_MONITOR_REQUIRE_HYPOPG"
"""Set by ``make test`` (which installs HypoPG first): a missing HypoPG fails the test."""
_copies = itertools.count()


def seed_history(
    conn: psycopg.Connection, *, history: int = HISTORY_ROWS, backlog: int = BACKLOG_ROWS
) -> None:
    """``history`` done rows from 30 days ago, one every 10 s, then ``backlog`` due pending
    rows created a minute ago; ANALYZE."""
    conn.execute(
        """INSERT INTO integration_outbox (event_type, aggregate_type, aggregate_id, event_key,
               payload, status, created_at, available_at, processed_at)
           SELECT 'order.paid', 'order', g::text, 'history:' || g, '{}', 'done',
                  now() - interval '30 days' + g * interval '10 seconds',
                  now() - interval '30 days' + g * interval '10 seconds',
                  now() - interval '30 days' + g * interval '10 seconds' + interval '5 seconds'
           FROM generate_series(1, %(history)s) AS g""",
        {"history": history},
    )
    conn.execute(
        """INSERT INTO integration_outbox (event_type, aggregate_type, aggregate_id, event_key,
               payload, status, created_at, available_at)
           SELECT 'order.paid', 'order', g::text, 'backlog:' || g, '{}', 'pending',
                  now() - interval '1 minute', now() - interval '1 minute'
           FROM generate_series(1, %(backlog)s) AS g""",
        {"backlog": backlog},
    )
    conn.execute("ANALYZE integration_outbox")


def install_hypopg(conn: psycopg.Connection) -> None:
    """The test installs HypoPG in its own database (the product never does); skips (fails
    under ``REQUIRE_HYPOPG_ENV``) when the server has no HypoPG (``make hypopg``)."""
    try:
        conn.execute("CREATE EXTENSION hypopg")
    except psycopg.errors.UndefinedFile:
        message = "HYPOPG IS MISSING, THE CLAIM ADVISOR'S ESTIMATE IS NOT TESTED: make hypopg"
        if os.environ.get(REQUIRE_HYPOPG_ENV):
            pytest.fail(message)
        pytest.skip(message)


def create_harmful_index(dsn: str) -> None:
    """The retired ``(created_at)`` index over every row, then ANALYZE."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(f"CREATE INDEX {HARMFUL_INDEX} ON integration_outbox (created_at)")
        conn.execute("ANALYZE integration_outbox")


def drop_harmful_index(dsn: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(f"DROP INDEX {HARMFUL_INDEX}")


def _create(cluster: TemporaryCluster, name: str, template: str) -> str:
    """``CREATE DATABASE name TEMPLATE template``; its DSN. (Names of our own: the suite's
    ``t_<n>`` counter lives in the conftest module that pytest loaded.)"""
    with psycopg.connect(cluster.dsn, autocommit=True) as conn:
        conn.execute(f"CREATE DATABASE {name} TEMPLATE {template} STRATEGY FILE_COPY")
    return cluster.dsn_for(name)


@pytest.fixture(scope="session")
def history_template(pg_cluster: TemporaryCluster) -> str:
    """A template database: the outbox schema with the history and backlog (seeded once)."""
    dsn = _create(pg_cluster, HISTORY_TEMPLATE, TEMPLATE)
    with psycopg.connect(dsn, autocommit=True) as conn:
        seed_history(conn)
    return HISTORY_TEMPLATE


@pytest.fixture
def history_dsn(pg_cluster: TemporaryCluster, history_template: str) -> str:
    """A fresh copy of the history template (no harmful index yet)."""
    return _create(pg_cluster, f"{history_template}_{next(_copies)}", history_template)


@pytest.fixture(scope="session")
def sorted_claim_template(pg_cluster: TemporaryCluster) -> str:
    """A template database whose claim sorts every due row (issue 32 item 5): the users'
    indexes only for the claim, ``SORTED_DONE`` done rows and ``SORTED_DUE`` due pending rows
    (``seed_history``, seeded once)."""
    dsn = _create(pg_cluster, SORTED_TEMPLATE, TEMPLATE)
    with psycopg.connect(dsn, autocommit=True) as conn:
        seed_history(conn, history=SORTED_DONE, backlog=SORTED_DUE)
    return SORTED_TEMPLATE


@pytest.fixture
def sorted_claim_dsn(pg_cluster: TemporaryCluster, sorted_claim_template: str) -> str:
    """A fresh copy of the sorted-claim template."""
    return _create(pg_cluster, f"{sorted_claim_template}_{next(_copies)}", sorted_claim_template)
