"""Fixtures of the read-replica tests (a pytest plugin listed in tests/conftest.py): one real
primary and one streaming hot standby (``pg_basebackup -R``) per test session, started only
when a test asks for them, and a fresh outbox database per test on the primary, replayed on
the standby before the test starts.
"""

from collections.abc import Iterator
from dataclasses import dataclass

import psycopg
import pytest

from outbox_monitor.config.settings import load_settings
from outbox_monitor.demo.pgcluster import TemporaryCluster
from outbox_monitor.demo.pgstandby import TemporaryStandby
from outbox_monitor.store.db import Database
from outbox_monitor.store.schema import init_db
from tests.conftest import TEMPLATE, create_database


@dataclass(frozen=True)
class Replication:
    """The session's primary and its standby."""

    primary: TemporaryCluster
    standby: TemporaryStandby


@dataclass(frozen=True)
class ReplicaDatabase:
    """One test's outbox database: ``primary`` and ``standby`` are DSNs of the same database
    on each server; ``name`` its name; ``standby_server`` pauses and resumes replay."""

    name: str
    primary: str
    standby: str
    standby_server: TemporaryStandby


@pytest.fixture(scope="session")
def replication() -> Iterator[Replication]:
    """A primary with the outbox template database, and a hot standby streaming from it;
    both stopped (and their folders removed) at the end of the session."""
    primary = TemporaryCluster()
    standby = None
    try:
        primary.start()
        with psycopg.connect(primary.dsn, autocommit=True) as conn:
            conn.execute(f"CREATE DATABASE {TEMPLATE}")
        with Database(load_settings(dsn=primary.dsn_for(TEMPLATE))) as db:
            init_db(db, create_table=True)
        standby = TemporaryStandby(primary).start()
        yield Replication(primary, standby)
    finally:
        if standby is not None:
            standby.stop()
        primary.stop()


@pytest.fixture
def replica_db(replication: Replication) -> Iterator[ReplicaDatabase]:
    """A fresh outbox database, on the standby too; replay is resumed after the test (a
    test may pause it)."""
    dsn = create_database(replication.primary)
    name = dsn.rsplit("/", 1)[1]
    replication.standby.wait_for_database(name)
    try:
        yield ReplicaDatabase(name, dsn, replication.standby.dsn_for(name), replication.standby)
    finally:
        replication.standby.resume_replay()
