"""Real database logins holding only what ``outbox-monitor init-db --print-grants`` grants,
and a cluster that checks passwords (for the tests that secrets never leak).

Roles are cluster-wide, so the group roles and the logins are made once per cluster with
names of their own (``lp<n>_viewer``, ``lp<n>_read`` …; never the defaults, which
``tests/deploy/test_grants.py`` uses); the grants themselves are per database, so
``grant_in(dsn, logins)`` runs the printed script in each fresh test database.
Import as ``from tests.least_privilege import …`` (nothing here is a fixture).
"""

import itertools
import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from functools import cache

import psycopg
from psycopg import sql
from psycopg.conninfo import make_conninfo

from outbox_monitor.config.settings import load_settings
from outbox_monitor.demo.pgcluster import TemporaryCluster
from outbox_monitor.store.db import Database
from outbox_monitor.store.grants import Roles, grant_statements
from outbox_monitor.store.schema import init_db

_counter = itertools.count(1)


@dataclass(frozen=True)
class Logins:
    """Group roles (``roles``) and one login per process: ``read`` (member of the viewer
    role), ``actions`` (operator), ``scheduler`` (scheduler), ``nothing`` (no grant)."""

    roles: Roles
    read: str
    actions: str
    scheduler: str
    nothing: str

    def dsn(self, dsn: str, login: str) -> str:
        """``dsn`` (a test database) as ``login``, without a password (trust auth)."""
        return make_conninfo(dsn, user=login)


@cache
def cluster_logins(port: int) -> Logins:
    """The logins of the cluster on ``port``, created on first use (NOLOGIN groups are
    created by the grants script itself, in ``grant_in``)."""
    prefix = f"lp{os.getpid()}_{next(_counter)}"
    return Logins(
        roles=Roles(
            viewer=f"{prefix}_viewer",
            scheduler=f"{prefix}_scheduler",
            operator=f"{prefix}_operator",
        ),
        read=f"{prefix}_read",
        actions=f"{prefix}_actions",
        scheduler=f"{prefix}_sched",
        nothing=f"{prefix}_nothing",
    )


def logins_for(cluster: TemporaryCluster) -> Logins:
    """The cluster's ``Logins``; the login roles exist after the first call."""
    logins = cluster_logins(cluster.port)
    with psycopg.connect(cluster.dsn, autocommit=True) as su:
        for login in (logins.read, logins.actions, logins.scheduler, logins.nothing):
            exists = su.execute("SELECT 1 FROM pg_roles WHERE rolname = %s", (login,)).fetchone()
            if not exists:
                su.execute(sql.SQL("CREATE ROLE {} LOGIN").format(sql.Identifier(login)))
    return logins


def grant_in(dsn: str, logins: Logins, *, table: str | None = None) -> None:
    """Run the printed grants in the database of ``dsn`` (as its owner, the superuser)
    and make each login a member of its group role."""
    script = grant_statements(load_settings(dsn=dsn, table=table), logins.roles)
    with psycopg.connect(dsn, autocommit=True) as su:
        su.execute(script)
        for group, login in (
            (logins.roles.viewer, logins.read),
            (logins.roles.operator, logins.actions),
            (logins.roles.scheduler, logins.scheduler),
        ):
            su.execute(
                sql.SQL("GRANT {} TO {}").format(sql.Identifier(group), sql.Identifier(login))
            )


PASSWORD_LOGIN = "app_pw"
PASSWORD = "Zq7-Secr3t-Pw-81c4"
"""The real password of ``PASSWORD_LOGIN`` on ``password_cluster()``: a test asserts it
appears nowhere a DSN holding it could leak."""
WRONG_PASSWORD = "Wr0ng-Zq7-Pw-5e1d"


@contextmanager
def password_cluster() -> Iterator[TemporaryCluster]:
    """A throwaway cluster whose ``app`` database (outbox schema applied) accepts
    ``PASSWORD_LOGIN`` over TCP only with ``PASSWORD`` (scram-sha-256; the session
    cluster trusts everyone, so a wrong password would go unnoticed there). The
    superuser keeps trust auth. ``app_pw`` owns nothing and reads as a viewer."""
    with TemporaryCluster() as cluster:
        with psycopg.connect(cluster.dsn, autocommit=True) as su:
            su.execute("CREATE DATABASE app")
            su.execute(
                sql.SQL("CREATE ROLE {} LOGIN PASSWORD {}").format(
                    sql.Identifier(PASSWORD_LOGIN), sql.Literal(PASSWORD)
                )
            )
        hba = cluster.data / "pg_hba.conf"
        hba.write_text(f"host all {PASSWORD_LOGIN} 127.0.0.1/32 scram-sha-256\n" + hba.read_text())
        app = cluster.dsn_for("app")
        with Database(load_settings(dsn=app)) as db:
            init_db(db, create_table=True, create_indexes=False)
        with psycopg.connect(app, autocommit=True) as su:
            su.execute(grant_statements(load_settings(dsn=app)))
            su.execute(sql.SQL("GRANT outbox_viewer TO {}").format(sql.Identifier(PASSWORD_LOGIN)))
            su.execute("SELECT pg_reload_conf()")
        yield cluster


def password_dsn(
    cluster: TemporaryCluster, password: str = PASSWORD, port: int | None = None
) -> str:
    """A URI of the ``app`` database as ``PASSWORD_LOGIN`` with ``password``."""
    return f"postgresql://{PASSWORD_LOGIN}:{password}@127.0.0.1:{port or cluster.port}/app"
