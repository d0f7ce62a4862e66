"""A real OpenID provider on 127.0.0.1 for the sign-in tests, and the dashboard served by
``outbox-monitor dashboard`` in a sign-in mode.

The provider is panva's npm ``oidc-provider`` (pinned in tests/oidc/package.json) run by
tests/oidc/provider.mjs: its development login form accepts any login and password, and
the ID token carries ``email`` (the login typed), ``email_verified`` and ``groups``.
tests/oidc/install.sh installs it outside the repo (a cache folder keyed by its version),
only when absent; tests skip only when ``node`` is missing.
"""

import json
import os
import secrets
import select
import shutil
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path

import psycopg
import pytest
from playwright.sync_api import BrowserContext, Page
from psycopg import sql

from outbox_monitor.demo.pgcluster import free_port
from tests.browser_support import START_TIMEOUT_SECONDS, stop, wait_healthy
from tests.conftest import TEMPLATE

ROOT = Path(__file__).resolve().parents[1]
OIDC_DIR = ROOT / "tests" / "oidc"
INSTALL_TIMEOUT_SECONDS = 300
CLIENT_ID = "outbox-monitor"
COOKIE_SECRET = "cookie-secret-of-the-sign-in-tests-0123456789"
"""Streamlit signs its auth cookie with this (at least 32 characters)."""
GOOGLE_FONTS = "https://fonts.googleapis.com/**"
"""The provider's login page imports a web font; there is no network here."""


@dataclass(frozen=True)
class OidcProvider:
    """A running provider: its ``issuer`` URL and its one confidential client."""

    issuer: str
    client_id: str
    client_secret: str

    @property
    def metadata_url(self) -> str:
        """The discovery document (``OUTBOX_MONITOR_OIDC_METADATA_URL``)."""
        return f"{self.issuer}/.well-known/openid-configuration"


def node() -> str:
    """The ``node`` executable; skips the test when there is none."""
    found = shutil.which("node")
    if found is None:
        pytest.skip("node is not installed: the OIDC tests run the npm oidc-provider")
    return found


@cache
def provider_home() -> Path:
    """Where ``oidc-provider`` is installed (tests/oidc/install.sh installs it the first
    time, ≈ 3 s; afterwards it only checks the lock file)."""
    done = subprocess.run(
        [str(OIDC_DIR / "install.sh")],
        capture_output=True,
        text=True,
        timeout=INSTALL_TIMEOUT_SECONDS,
        check=False,
    )
    if done.returncode != 0:
        pytest.fail(f"tests/oidc/install.sh failed:\n{done.stdout}\n{done.stderr}")
    return Path(done.stdout.strip().splitlines()[-1])


def _metadata(url: str) -> dict | None:
    try:
        with urllib.request.urlopen(url, timeout=1) as response:
            return json.load(response)
    except (urllib.error.URLError, ConnectionError, TimeoutError, ValueError):
        return None


@contextmanager
def run_provider(
    *,
    redirect_uris: Sequence[str],
    groups: Mapping[str, Sequence[str]],
    log_path: Path,
    client_id: str = CLIENT_ID,
) -> Iterator[OidcProvider]:
    """Start tests/oidc/provider.mjs on a free port of 127.0.0.1 until the block ends.

    Args:
        redirect_uris: the client's redirect URIs (Streamlit's end in ``/oauth2callback``).
        groups: login → the ``groups`` claim, e.g. ``{"ops@example.com": ["oncall"]}``.
        log_path: the provider's output (quoted when it fails to start).
        client_id: the confidential client's id; its secret is random.

    Yields:
        The provider, once ``/.well-known/openid-configuration`` answers.
    """
    executable = node()
    env = {
        **os.environ,
        "OIDC_PROVIDER_HOME": str(provider_home()),
        "OIDC_PORT": "0",
        "OIDC_CLIENT_ID": client_id,
        "OIDC_CLIENT_SECRET": secrets.token_urlsafe(24),
        "OIDC_REDIRECT_URIS": " ".join(redirect_uris),
        "OIDC_GROUPS": json.dumps(dict(groups)),
    }
    with log_path.open("w") as log:
        process = subprocess.Popen(
            [executable, str(OIDC_DIR / "provider.mjs")],
            env=env,
            stdout=subprocess.PIPE,
            stderr=log,
            stdin=subprocess.DEVNULL,
            text=True,
        )
        try:
            # {"issuer": ...} once it listens
            ready, _, _ = select.select([process.stdout], [], [], START_TIMEOUT_SECONDS)
            first_line = process.stdout.readline() if ready else ""
            if not first_line:
                pytest.fail(f"oidc-provider did not start:\n{log_path.read_text()[-3000:]}")
            provider = OidcProvider(
                json.loads(first_line)["issuer"], client_id, env["OIDC_CLIENT_SECRET"]
            )
            deadline = time.monotonic() + START_TIMEOUT_SECONDS
            while (_metadata(provider.metadata_url) or {}).get("issuer") != provider.issuer:
                if process.poll() is not None or time.monotonic() > deadline:
                    pytest.fail(f"oidc-provider did not answer:\n{log_path.read_text()[-3000:]}")
                time.sleep(0.1)
            yield provider
        finally:
            stop(process)
            process.stdout.close()


def dashboard_command(*args: str) -> list[str]:
    """``outbox-monitor <args>`` as this virtualenv installed it (or ``python -m``)."""
    script = Path(sys.executable).with_name("outbox-monitor")
    if script.exists():
        return [str(script), *args]
    return [sys.executable, "-m", "outbox_monitor", *args]


def dashboard_environment(home: Path, settings: Mapping[str, str]) -> dict[str, str]:
    """Our environment without any ``OUTBOX_MONITOR_*``/``DATABASE_URL`` of the caller,
    ``HOME`` at ``home``, plus ``settings`` as ``OUTBOX_MONITOR_<NAME>`` variables."""
    env = {
        name: value
        for name, value in os.environ.items()
        if not name.startswith("OUTBOX_MONITOR_") and name != "DATABASE_URL"
    }
    env["HOME"] = str(home)
    env.update({f"OUTBOX_MONITOR_{name.upper()}": value for name, value in settings.items()})
    return env


@dataclass
class Dashboard:
    """One ``outbox-monitor dashboard --address ADDRESS --port PORT`` to serve: ``name``
    (its log and ``HOME`` folder), ``settings`` (``OUTBOX_MONITOR_<NAME>`` variables,
    lower-case names); ``url`` is on 127.0.0.1 whatever ``address`` (``0.0.0.0`` too)."""

    name: str
    settings: dict[str, str]
    port: int = field(default_factory=free_port)
    address: str = "127.0.0.1"

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def redirect_url(self) -> str:
        """Where the provider sends the browser back after sign-in (Streamlit's route)."""
        return f"{self.url}/oauth2callback"


@contextmanager
def serve(dashboards: Sequence[Dashboard], directory: Path) -> Iterator[None]:
    """Serve ``dashboards`` until the block ends; they start (and stop) side by side.

    Args:
        dashboards: what to serve.
        directory: ``<name>.log`` and ``<name>-home/`` of each are written there.

    Fails the test when one exits or does not answer ``/_stcore/health`` in time.
    """
    processes = []
    try:
        for dashboard in dashboards:
            home = directory / f"{dashboard.name}-home"
            home.mkdir(parents=True, exist_ok=True)
            with (directory / f"{dashboard.name}.log").open("w") as log:
                processes.append(
                    subprocess.Popen(
                        dashboard_command(
                            "dashboard",
                            "--address",
                            dashboard.address,
                            "--port",
                            str(dashboard.port),
                        ),
                        cwd=ROOT,
                        env=dashboard_environment(home, dashboard.settings),
                        stdout=log,
                        stderr=subprocess.STDOUT,
                        stdin=subprocess.DEVNULL,
                    )
                )
        for dashboard, process in zip(dashboards, processes, strict=True):
            wait_healthy(dashboard.url, process, directory / f"{dashboard.name}.log")
        yield
    finally:
        for process in processes:  # SIGTERM all, then wait for each (≈ 1 s each alone)
            if process.poll() is None:
                process.terminate()
        for process in processes:
            stop(process)


def oidc_settings(provider: OidcProvider, dashboard: Dashboard) -> dict[str, str]:
    """The ``OUTBOX_MONITOR_*`` settings that make ``dashboard`` sign in through
    ``provider`` (``auth=oidc``; the provider must list ``dashboard.redirect_url``)."""
    return {
        "auth": "oidc",
        "oidc_metadata_url": provider.metadata_url,
        "oidc_client_id": provider.client_id,
        "oidc_client_secret": provider.client_secret,
        "oidc_cookie_secret": COOKIE_SECRET,
        "oidc_redirect_url": dashboard.redirect_url,
    }


def offline(context: BrowserContext) -> None:
    """Answer the provider page's web-font import at once (there is no network here)."""
    context.route(GOOGLE_FONTS, lambda route: route.abort())


def sign_in(page: Page, url: str, login: str) -> None:
    """Open the dashboard at ``url`` and sign in as ``login`` through the provider's real
    pages: the dashboard's "Sign in" button, the login form (any password), consent.
    Streamlit then sends the browser to the dashboard's root URL."""
    page.goto(url)
    page.get_by_role("button", name="Sign in").click()
    page.locator('input[name="login"]').fill(login)
    page.locator('input[name="password"]').fill("any password")
    page.get_by_role("button", name="Sign-in").click()
    page.get_by_role("button", name="Continue").click()  # the consent page


def module_database(cluster, prefix: str) -> str:
    """A fresh outbox database shared by a module's tests and its dashboards (``cluster``:
    the suite's ``pg_cluster``), cloned from the template as ``<prefix>_<random>`` — not by
    ``conftest.create_database``, whose counter a module's own import of ``tests.conftest``
    counts apart from pytest's (the same ``t_N`` twice); returns its DSN."""
    name = f"{prefix}_{secrets.token_hex(4)}"
    with psycopg.connect(cluster.dsn, autocommit=True) as conn:
        conn.execute(
            sql.SQL("CREATE DATABASE {} TEMPLATE {} STRATEGY FILE_COPY").format(
                sql.Identifier(name), sql.Identifier(TEMPLATE)
            )
        )
    return cluster.dsn_for(name)
