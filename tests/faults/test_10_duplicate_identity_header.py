"""Item 10: in proxy mode, a request carrying the identity header more than once (the
client's own line first, then the proxy's appended one) has no identity.

A browser cannot send two lines of one header, so the request is written by hand on a
raw socket (``tests.raw_session``): the websocket upgrade Streamlit reads
``st.context.headers`` from, then a run of the app, against a real ``outbox-monitor
dashboard`` in proxy mode; what the session renders is read from Streamlit's messages.

Also (the hostile tester's F6): no groups header is read unless
``OUTBOX_MONITOR_PROXY_GROUPS_HEADER`` names one, so a browser's own
``X-Forwarded-Groups: oncall`` does not make a viewer an operator behind a proxy that sets
only the e-mail header.
"""

from collections.abc import Iterator
from pathlib import Path

import pytest

from outbox_monitor.config.settings import load_settings
from outbox_monitor.service.serve import check_exposure
from tests.oidc_support import Dashboard, module_database, serve
from tests.proxy_support import log_line
from tests.raw_session import rendered_text

VIEWER = "viewer@example.com"
OPERATOR = "ops@example.com"
MAPPING = {"viewers": "@example.com", "operators": f"{OPERATOR},groups=oncall"}


@pytest.fixture(scope="module")
def proxied(pg_cluster, tmp_path_factory) -> Iterator[dict[str, tuple[str, Path]]]:
    """Two ``outbox-monitor dashboard`` with OUTBOX_MONITOR_AUTH=proxy on a fresh database,
    shared by the module's tests (they only read): ``proxy`` with the default settings
    (no groups header) and ``groups`` reading ``X-Forwarded-Groups``; each one's base URL
    and log."""
    directory = tmp_path_factory.mktemp("proxy10")
    settings = {"dsn": module_database(pg_cluster, "proxy10"), "auth": "proxy", **MAPPING}
    dashboards = [
        Dashboard("proxy", settings),
        Dashboard("groups", {**settings, "proxy_groups_header": "X-Forwarded-Groups"}),
    ]
    with serve(dashboards, directory):
        yield {d.name: (d.url, directory / f"{d.name}.log") for d in dashboards}


def test_one_header_line_signs_in_as_that_address(proxied):
    url, _ = proxied["proxy"]
    text = rendered_text(url, [f"X-Forwarded-Email: {VIEWER}"])
    assert f"Signed in as `{VIEWER}` · viewer" in text
    assert "No identity" not in text


def test_two_email_header_lines_mean_no_identity(proxied):
    """The client's own line first (an operator's address), the proxy's appended one
    (the viewer actually signed in) second: neither is believed."""
    url, log = proxied["proxy"]
    text = rendered_text(url, [f"X-Forwarded-Email: {OPERATOR}", f"X-Forwarded-Email: {VIEWER}"])
    assert "No identity" in text
    assert "2 lines of the" in text
    assert "Signed in as" not in text
    assert OPERATOR not in text
    assert log_line(log, "2 X-Forwarded-Email header lines")


def test_two_groups_header_lines_mean_no_identity(proxied):
    """A viewer who adds their own groups line before the proxy's is not an operator."""
    url, log = proxied["groups"]
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
    assert log_line(log, "2 X-Forwarded-Groups header lines")


def test_a_groups_header_is_not_read_unless_its_setting_names_it(proxied):
    """Default settings, a proxy that sets only the e-mail header, and a browser that
    sends its own ``X-Forwarded-Groups: oncall``: a viewer, not an operator
    (``groups=oncall`` maps to operator)."""
    forged = [f"X-Forwarded-Email: {VIEWER}", "X-Forwarded-Groups: oncall"]
    text = rendered_text(proxied["proxy"][0], forged)
    assert f"Signed in as `{VIEWER}` · viewer" in text
    assert "operator" not in text
    assert load_settings(auth="proxy").proxy_groups_header is None
    # the same header is believed once the setting names it (the proxy sets it)
    text = rendered_text(proxied["groups"][0], forged)
    assert f"Signed in as `{VIEWER}` · operator" in text


def test_groups_entries_without_a_groups_header_warn_at_start():
    """``groups=`` role entries match no one in proxy mode until the groups header is
    named: every start says so, rather than an on-call operator finding themselves a viewer."""
    unset = load_settings(auth="proxy", **MAPPING)
    assert check_exposure(unset, "127.0.0.1", insecure_no_auth=False) == [
        "WARNING: proxy sign-in reads no groups header (OUTBOX_MONITOR_PROXY_GROUPS_HEADER "
        "is unset), so groups=oncall match no one: set it to the header your proxy sets "
        "and strips from clients' requests, e.g. X-Forwarded-Groups."
    ]
    named = load_settings(auth="proxy", proxy_groups_header="X-Forwarded-Groups", **MAPPING)
    assert check_exposure(named, "127.0.0.1", insecure_no_auth=False) == []
    exposed = named.model_copy(update={"trusted_proxies": ("10.0.0.0/8",)})
    assert check_exposure(exposed, "0.0.0.0", insecure_no_auth=False) == []
