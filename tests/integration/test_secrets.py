"""Secrets never appear (issue 4, payload privacy): a DSN password is not in the settings'
repr, in any CLI error output (wrong password, unreachable server, unparsable DSN; text
and --json; read and actions DSN), nor in any log record of a failing Database; OIDC
secrets are not in the settings' repr or JSON dump. The server checks passwords for real
(scram-sha-256), so the wrong one is really refused."""

import json
import logging
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

from outbox_monitor.config.settings import load_settings
from outbox_monitor.demo.pgcluster import TemporaryCluster, free_port
from outbox_monitor.errors import ConfigError, DatabaseUnavailable
from outbox_monitor.figures import metrics
from outbox_monitor.store.db import Database
from tests.least_privilege import (
    PASSWORD,
    PASSWORD_LOGIN,
    WRONG_PASSWORD,
    password_cluster,
    password_dsn,
)

CLI = str(Path(sys.prefix) / "bin" / "outbox-monitor")
CLIENT_SECRET = "oidc-client-Secr3t-7f3a"
COOKIE_SECRET = "cookie-Secr3t-c0ffee-91-0123456789abcdef"


@pytest.fixture(scope="module")
def cluster() -> Iterator[TemporaryCluster]:
    with password_cluster() as server:
        yield server


def cli(*args: str, home: Path, **env: str) -> subprocess.CompletedProcess:
    environment = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(home), **env}
    return subprocess.run(
        [CLI, *args], env=environment, capture_output=True, text=True, timeout=120
    )


def test_the_password_cluster_really_checks_passwords(cluster):
    with psycopg.connect(password_dsn(cluster)) as conn:
        assert conn.execute("SELECT current_user").fetchone() == (PASSWORD_LOGIN,)
    with pytest.raises(psycopg.OperationalError, match="password authentication failed"):
        psycopg.connect(password_dsn(cluster, WRONG_PASSWORD))


def test_settings_repr_and_dump_never_show_secrets():
    settings = load_settings(
        dsn=f"postgresql://app:{PASSWORD}@db.internal/app",
        actions_dsn=f"postgresql://ops:{WRONG_PASSWORD}@db.internal/app",
        oidc_metadata_url="https://id.example.com/.well-known/openid-configuration",
        oidc_client_id="outbox-monitor",
        oidc_client_secret=CLIENT_SECRET,
        oidc_cookie_secret=COOKIE_SECRET,
        oidc_redirect_url="https://outbox.example.com/oauth2callback",
    )

    shown = repr(settings) + str(settings)
    dumped = settings.model_dump_json()

    for secret in (PASSWORD, WRONG_PASSWORD, CLIENT_SECRET, COOKIE_SECRET):
        assert secret not in shown
    for secret in (CLIENT_SECRET, COOKIE_SECRET):
        assert secret not in dumped
    assert "oidc_client_id='outbox-monitor'" in shown  # the rest is still shown
    assert settings.oidc_client_secret.get_secret_value() == CLIENT_SECRET


@pytest.mark.parametrize("as_json", [False, True], ids=["text", "json"])
@pytest.mark.parametrize("failure", ["wrong password", "unreachable"])
def test_cli_errors_never_show_the_password(cluster, tmp_path, failure, as_json):
    secret = WRONG_PASSWORD if failure == "wrong password" else PASSWORD
    bad = password_dsn(cluster, secret, port=free_port() if failure == "unreachable" else None)
    flag = ("--json",) if as_json else ()

    outputs = [
        cli("status", *flag, home=tmp_path, OUTBOX_MONITOR_DSN=bad),
        cli("status", "--dsn", bad, *flag, home=tmp_path),
        cli(
            *("replay", "--id", "1", "--yes", *flag),
            home=tmp_path,
            OUTBOX_MONITOR_DSN=password_dsn(cluster),
            OUTBOX_MONITOR_ACTIONS_DSN=bad,
        ),
    ]

    if failure == "wrong password":
        said, reason = "was refused by", "password authentication failed"
    else:
        said, reason = "cannot connect to", "refused"
    for result in outputs:
        text = result.stdout + result.stderr
        assert result.returncode == 1, text
        assert f"{said} {PASSWORD_LOGIN}@127.0.0.1" in text and reason in text
        if failure == "wrong password":
            assert "the login or password of " in text and "Check the user and password" in text
            assert "Is the database server up" not in text
        assert secret not in text and PASSWORD not in text
        if as_json:
            assert set(json.loads(result.stdout)) == {"error", "hint"}


def test_an_unparsable_dsn_is_refused_without_quoting_the_password(tmp_path):
    spaced = PASSWORD.replace("-", " ")  # libpq quotes the text it cannot parse
    for dsn in (
        f"host=127.0.0.1 user=app password={spaced}",
        f"postgresql://app:{spaced}@127.0.0.1/app",
        f"postgresql://app:{PASSWORD}%ZZ@127.0.0.1/app",
        f"postgresql://app:{PASSWORD}@x@127.0.0.1/app",
    ):
        with pytest.raises(ConfigError) as caught:
            load_settings(dsn=dsn)
        result = cli("status", "--json", home=tmp_path, OUTBOX_MONITOR_ACTIONS_DSN=dsn)
        for text in (str(caught.value), result.stdout + result.stderr):
            assert "OUTBOX_MONITOR_" in text or "--dsn" in text
            for part in spaced.split():
                assert part not in text, text


def test_log_records_of_a_failing_database_never_show_the_password(cluster, caplog):
    caplog.set_level(logging.DEBUG)
    # `outbox-monitor` quiets the pool's logger (cli.main); a CLI test run in this process
    # earlier would hide exactly the records this test reads.
    caplog.set_level(logging.DEBUG, logger="psycopg.pool")
    unreachable = password_dsn(cluster, PASSWORD, port=free_port())
    for dsn in (password_dsn(cluster, WRONG_PASSWORD), unreachable):
        with Database(load_settings(dsn=dsn)) as failing, pytest.raises(DatabaseUnavailable):
            metrics.queue_depth(failing)
    # A pool that worked, then lost its login: the pool's reconnect attempts log errors.
    with Database(load_settings(dsn=password_dsn(cluster))) as db:
        assert metrics.queue_depth(db) == 0
        with psycopg.connect(cluster.dsn_for("app"), autocommit=True) as su:
            su.execute(f"ALTER ROLE {PASSWORD_LOGIN} PASSWORD 'changed-elsewhere'")
            su.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = %s",
                (PASSWORD_LOGIN,),
            )
            # pg_terminate_backend only signals: under load a backend may still answer the
            # pool's next query. Go on once every backend of the login has ended.
            alive = "SELECT count(*) FROM pg_stat_activity WHERE usename = %s"
            deadline = time.monotonic() + 30
            while su.execute(alive, (PASSWORD_LOGIN,)).fetchone()[0]:
                assert time.monotonic() < deadline, "the login's backends did not end"
                time.sleep(0.05)
        try:
            with pytest.raises(DatabaseUnavailable) as caught:
                metrics.queue_depth(db)
            pool_logged(caplog)
        finally:
            with psycopg.connect(cluster.dsn_for("app"), autocommit=True) as su:
                su.execute(f"ALTER ROLE {PASSWORD_LOGIN} PASSWORD '{PASSWORD}'")

    assert "password authentication failed" in str(caught.value)
    for record in caplog.records:
        logged = f"{record.getMessage()} {record.args} {record.exc_text or ''}"
        if record.exc_info:
            logged += logging.Formatter().formatException(record.exc_info)
        assert PASSWORD not in logged and WRONG_PASSWORD not in logged, logged


def pool_logged(caplog, timeout: float = 15.0) -> None:
    """Wait until the pool's background reconnect has logged its failure (it runs in the
    pool's own thread, a moment after the call that failed)."""
    deadline = time.monotonic() + timeout
    while not any(r.name.startswith("psycopg") for r in caplog.records):
        assert time.monotonic() < deadline, "the pool logged nothing"
        time.sleep(0.1)
