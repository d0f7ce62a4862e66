"""Item 10: in proxy mode, a request carrying the identity header more than once (the
client's own line first, then the proxy's appended one) has no identity.

A browser cannot send two lines of one header, so the request is written by hand on a
raw socket (``tests.raw_session``): the websocket upgrade Streamlit reads
``st.context.headers`` from, then a run of the app, against a real ``outbox-monitor
dashboard`` in proxy mode; what the session renders is read from Streamlit's messages.
"""

import secrets
import time
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
from psycopg import sql

from tests.conftest import TEMPLATE
from tests.oidc_support import Dashboard, serve
from tests.raw_session import rendered_text

VIEWER = "viewer@example.com"
OPERATOR = "ops@example.com"
MAPPING = {"viewers": "@example.com", "operators": f"{OPERATOR},groups=oncall"}


@pytest.fixture(scope="module")
def proxied(pg_cluster, tmp_path_factory) -> Iterator[tuple[str, Path]]:
    """``outbox-monitor dashboard`` with OUTBOX_MONITOR_AUTH=proxy on a fresh database,
    shared by the module's tests (they only read); its base URL and its log."""
    name = f"proxy10_{secrets.token_hex(4)}"
    with psycopg.connect(pg_cluster.dsn, autocommit=True) as conn:
        conn.execute(
            sql.SQL("CREATE DATABASE {} TEMPLATE {} STRATEGY FILE_COPY").format(
                sql.Identifier(name), sql.Identifier(TEMPLATE)
            )
        )
    directory = tmp_path_factory.mktemp("proxy10")
    dashboard = Dashboard("proxy", {"dsn": pg_cluster.dsn_for(name), "auth": "proxy", **MAPPING})
    with serve([dashboard], directory):
        yield dashboard.url, directory / "proxy.log"


def test_one_header_line_signs_in_as_that_address(proxied):
    url, _ = proxied
    text = rendered_text(url, [f"X-Forwarded-Email: {VIEWER}"])
    assert f"Signed in as `{VIEWER}` · viewer" in text
    assert "No identity" not in text


def test_two_email_header_lines_mean_no_identity(proxied):
    """The client's own line first (an operator's address), the proxy's appended one
    (the viewer actually signed in) second: neither is believed."""
    url, log = proxied
    text = rendered_text(url, [f"X-Forwarded-Email: {OPERATOR}", f"X-Forwarded-Email: {VIEWER}"])
    assert "No identity" in text
    assert "2 lines of the" in text
    assert "Signed in as" not in text
    assert OPERATOR not in text
    assert _wait_for_log(log, "2 X-Forwarded-Email header lines")


def test_two_groups_header_lines_mean_no_identity(proxied):
    """A viewer who adds their own groups line before the proxy's is not an operator."""
    url, log = proxied
    text = rendered_text(
        url,
        [
            f"X-Forwarded-Email: {VIEWER}",
            "X-Forwarded-Groups: oncall",
            "X-Forwarded-Groups: staff",
        ],
    )
    assert "No identity" in text
    assert "Signed in as" not in text
    assert _wait_for_log(log, "2 X-Forwarded-Groups header lines")


def _wait_for_log(log: Path, needle: str, timeout: float = 10.0) -> str | None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for line in log.read_text().splitlines():
            if needle in line:
                return line
        time.sleep(0.2)
    return None
