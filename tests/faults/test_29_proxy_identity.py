"""Issue 29 items 3 and 4: in proxy mode the identity header is believed only as it is and
only from a trusted proxy.

Item 3: a header value whose cleaned form (``access.normalise_actor``) differs from what was
received (``op\\xad@example.com``, a soft hyphen) or that is longer than the audit log's cut
gets no identity: the role, the name shown and the name audited are one value.

Item 4: ``OUTBOX_MONITOR_TRUSTED_PROXIES`` (CIDRs; empty: loopback only) says whose
connections' headers are believed, by the connection's peer address — never by
``X-Forwarded-For``; proxy mode refuses to start on a non-loopback address with the list
empty, and a malformed CIDR refuses to start, naming the setting.

AppTest cannot seed ``st.context.headers`` or ``st.context.ip_address`` (Streamlit 1.67,
``testing/v1/app_test.py``: they come from the session's client), so the door is tested
against real ``outbox-monitor dashboard`` processes through a raw websocket session
(``tests.raw_session``), which carries the header bytes exactly and connects from a chosen
address; the fleet case runs in Chromium (``tests/browser/test_proxy_identity_browser.py``).
"""

import socket
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from outbox_monitor.access import (
    FORWARDED_ALLOW_IPS,
    MAX_ACTOR_LENGTH,
    name_refusal,
    trusted_proxy,
)
from outbox_monitor.config.settings import load_settings
from outbox_monitor.demo.pgcluster import free_port
from outbox_monitor.service.serve import (
    dashboard_script,
    stop_process,
    streamlit_command,
    wait_until_healthy,
)
from tests.browser_support import outward_address
from tests.oidc_support import (
    Dashboard,
    dashboard_command,
    dashboard_environment,
    module_database,
    serve,
)
from tests.proxy_support import log_line
from tests.raw_session import rendered_text

OPERATOR = "op@example.com"
SOFT_HYPHEN = "op\xad@example.com"
MAPPING = {"viewers": "@example.com", "operators": OPERATOR}
LISTED = "10.0.0.0/8"


def _header(value: str) -> str:
    return f"X-Forwarded-Email: {value}"


def _refused(url: str, header_lines: list[str], why: str) -> None:
    """Check that a session sending ``header_lines`` to ``url`` renders the "No identity"
    page saying ``why``, with no one signed in."""
    text = rendered_text(url, header_lines)
    assert "No identity" in text
    assert why in text
    assert "Signed in as" not in text


@pytest.fixture(scope="module")
def proxied(pg_cluster, tmp_path_factory) -> Iterator[dict[str, tuple[str, Path]]]:
    """Two ``outbox-monitor dashboard`` in proxy mode on a fresh database, shared by the
    module's tests (they only read): ``loopback`` (127.0.0.1, the list empty) and ``listed``
    (0.0.0.0, the list naming only 10.0.0.0/8); each one's base URL and log."""
    directory = tmp_path_factory.mktemp("proxy29")
    settings = {"dsn": module_database(pg_cluster, "proxy29"), "auth": "proxy", **MAPPING}
    dashboards = [
        Dashboard("loopback", settings),
        Dashboard("listed", {**settings, "trusted_proxies": LISTED}, address="0.0.0.0"),
    ]
    with serve(dashboards, directory):
        yield {d.name: (d.url, directory / f"{d.name}.log") for d in dashboards}


# ------------------------------------------------------------------ item 3: one value


def test_a_clean_header_signs_in_as_exactly_that_name(proxied):
    url, _ = proxied["loopback"]
    text = rendered_text(url, [_header(OPERATOR)])
    assert f"Signed in as `{OPERATOR}` · operator" in text
    assert "No identity" not in text


def test_an_invisible_byte_in_the_header_means_no_identity(proxied):
    """``op\\xad@example.com`` would map as a viewer (``@example.com``) while cleaning makes
    it ``op@example.com``, an operator: neither role is given, and the log names the header."""
    url, log = proxied["loopback"]
    _refused(url, [_header(SOFT_HYPHEN)], "cannot be a name as it is")
    line = log_line(log, "WARNING", "X-Forwarded-Email header", "U+00AD")
    assert line is not None, log.read_text()[-2000:]


def test_a_header_longer_than_the_cut_means_no_identity(proxied):
    url, log = proxied["loopback"]
    long_address = "a" * (MAX_ACTOR_LENGTH - len("@example.com") + 1) + "@example.com"
    assert len(long_address) == MAX_ACTOR_LENGTH + 1
    _refused(url, [_header(long_address)], "cannot be a name as it is")
    assert log_line(log, "WARNING", f"it is {MAX_ACTOR_LENGTH + 1} characters long") is not None
    # one character shorter is exactly the cut: signed in under that very name
    text = rendered_text(url, [_header(long_address[1:])])
    assert f"Signed in as `{long_address[1:]}` · viewer" in text


def test_name_refusal_names_what_cleaning_would_change():
    assert name_refusal(OPERATOR) is None
    assert "U+00AD" in name_refusal(SOFT_HYPHEN)
    assert "U+202E" in name_refusal("op\u202e@example.com")  # right-to-left override
    assert "NFC" in name_refusal("e\u0301@example.com")  # é decomposed
    assert name_refusal("x" * MAX_ACTOR_LENGTH) is None
    assert "201 characters" in name_refusal("x" * (MAX_ACTOR_LENGTH + 1))


# ------------------------------------------------------- item 4: trusted proxy addresses


def test_a_header_from_loopback_is_believed_when_the_list_is_empty(proxied):
    url, _ = proxied["loopback"]
    # the client's X-Forwarded-For is not the peer: the connection comes from 127.0.0.1
    text = rendered_text(url, [_header(OPERATOR), "X-Forwarded-For: 10.1.2.3"])
    assert f"Signed in as `{OPERATOR}` · operator" in text


def test_a_header_from_loopback_is_refused_when_the_list_names_only_10_0_0_0_8(proxied):
    url, log = proxied["listed"]
    _refused(url, [_header(OPERATOR)], "not a trusted proxy")
    line = log_line(log, "WARNING", "request from 127.0.0.1", "OUTBOX_MONITOR_TRUSTED_PROXIES")
    assert line is not None, log.read_text()[-2000:]
    assert LISTED in line


def test_x_forwarded_for_naming_a_listed_address_is_not_believed(proxied):
    """uvicorn (Streamlit's server) would put a loopback peer's X-Forwarded-For in its place;
    ``outbox-monitor dashboard`` turns that off, so the peer stays 127.0.0.1 and is refused."""
    url, _ = proxied["listed"]
    _refused(
        url, [_header(OPERATOR), "X-Forwarded-For: 10.1.2.3"], "This request comes from `127.0.0.1`"
    )


def test_a_proxy_at_ipv6_loopback_is_told_apart_from_127_0_0_1(pg_cluster, tmp_path):
    """Streamlit's ``st.context.ip_address`` gives ``::1`` and ``127.0.0.1`` both as ``None``,
    which was read as ``127.0.0.1``: a proxy at ``[::1]`` with the list ``::1/128`` was refused
    as "a request from 127.0.0.1". The peer is the connection's own address."""
    if not _ipv6_loopback():
        pytest.skip("this machine has no IPv6 loopback")
    settings = {"dsn": module_database(pg_cluster, "proxy29v6"), "auth": "proxy", **MAPPING}
    dashboard = Dashboard("v6", {**settings, "trusted_proxies": "::1/128"}, address="::")
    with serve([dashboard], tmp_path):
        text = rendered_text(f"http://[::1]:{dashboard.port}", [_header(OPERATOR)])
        assert f"Signed in as `{OPERATOR}` · operator" in text, text[-2000:]
        # IPv4 loopback reaches a dual-stack socket as ::ffff:127.0.0.1: not ::1/128
        _refused(dashboard.url, [_header(OPERATOR)], "not a trusted proxy")
    line = log_line(tmp_path / "v6.log", "WARNING", "request from ::ffff:127.0.0.1", "::1/128")
    assert line is not None, (tmp_path / "v6.log").read_text()[-2000:]


def _ipv6_loopback() -> bool:
    try:
        with socket.socket(socket.AF_INET6) as probe:
            probe.bind(("::1", 0))
    except OSError:
        return False
    return True


def test_a_header_from_another_machine_is_refused_and_logged(proxied):
    address = outward_address()
    if address is None:
        pytest.skip("this machine has no non-loopback IPv4 address to come from")
    url, log = proxied["listed"]
    port = url.rsplit(":", 1)[1]
    _refused(
        f"http://{address}:{port}", [_header(OPERATOR)], f"This request comes from `{address}`"
    )
    assert log_line(log, "WARNING", f"request from {address}", LISTED) is not None


def test_started_without_outbox_monitor_dashboard_x_forwarded_for_leaves_no_known_peer(
    tmp_path, pg_cluster
):
    """``streamlit run dashboard.py`` keeps uvicorn's default (a loopback peer's
    X-Forwarded-For replaces its address), so in proxy mode a request carrying that header
    has no known peer: refused, the log naming FORWARDED_ALLOW_IPS; one without it is read."""
    port = free_port()
    settings = {"dsn": module_database(pg_cluster, "proxy29run"), "auth": "proxy", **MAPPING}
    env = dashboard_environment(tmp_path, settings)
    env.pop(FORWARDED_ALLOW_IPS, None)
    log = tmp_path / "streamlit.log"
    with log.open("w") as output:
        server = subprocess.Popen(
            streamlit_command(address="127.0.0.1", port=port),
            cwd=dashboard_script().parent,
            env=env,
            stdout=output,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
        )
    try:
        wait_until_healthy(server, address="127.0.0.1", port=port, log_path=log)
        url = f"http://127.0.0.1:{port}"
        _refused(url, [_header(OPERATOR), "X-Forwarded-For: 127.0.0.1"], "address is unknown")
        assert log_line(log, "WARNING", FORWARDED_ALLOW_IPS, "outbox-monitor dashboard")
        text = rendered_text(url, [_header(OPERATOR)])
        assert f"Signed in as `{OPERATOR}` · operator" in text
    finally:
        stop_process(server)


def test_trusted_proxy_reads_the_list_or_loopback():
    empty = load_settings(auth="proxy")
    assert [trusted_proxy(empty, a) for a in ("127.0.0.1", "127.9.9.9", "::1")] == [True] * 3
    assert [trusted_proxy(empty, a) for a in ("10.1.2.3", "192.0.2.2", "fd00::1")] == [False] * 3
    listed = load_settings(auth="proxy", trusted_proxies="10.0.0.0/8, fd00::/8")
    assert [trusted_proxy(listed, a) for a in ("10.1.2.3", "::ffff:10.1.2.3", "fd00::1")] == [
        True
    ] * 3
    assert [trusted_proxy(listed, a) for a in ("127.0.0.1", "11.0.0.1", "not-an-ip")] == [False] * 3


def _start(tmp_path: Path, address: str, **settings: str) -> subprocess.CompletedProcess:
    """``outbox-monitor dashboard --address ADDRESS`` with ``settings``; it must exit by
    itself (a refusal) within 60 s."""
    return subprocess.run(
        dashboard_command("dashboard", "--address", address, "--port", str(free_port())),
        env=dashboard_environment(
            tmp_path, {"dsn": "postgresql://nobody@127.0.0.1:1/none", **settings}
        ),
        capture_output=True,
        text=True,
        timeout=60,
        stdin=subprocess.DEVNULL,
    )


def test_proxy_mode_on_every_interface_with_no_trusted_proxies_refuses_to_start(tmp_path):
    done = _start(tmp_path, "0.0.0.0", auth="proxy", viewers="@example.com")
    assert done.returncode == 2, done  # a configuration error (cli.support.EXIT_USAGE)
    assert "refusing to serve the dashboard in proxy mode on 0.0.0.0" in done.stderr
    assert "OUTBOX_MONITOR_TRUSTED_PROXIES empty" in done.stderr


def test_a_malformed_cidr_refuses_to_start_naming_the_setting(tmp_path):
    done = _start(tmp_path, "127.0.0.1", auth="proxy", trusted_proxies="10.0.0/33")
    assert done.returncode == 2, done
    assert "OUTBOX_MONITOR_TRUSTED_PROXIES: '10.0.0/33' is not a network" in done.stderr
