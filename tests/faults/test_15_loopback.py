"""Item 15 (exposure guard): every address of 127.0.0.0/8 is loopback, as is ``::1``;
``outbox-monitor dashboard --address 127.0.0.2`` serves without sign-in, and the page
itself does not ask for one."""

import subprocess

import pytest

from outbox_monitor.config.settings import load_settings
from outbox_monitor.demo.pgcluster import free_port
from outbox_monitor.errors import ConfigError
from outbox_monitor.service.serve import check_exposure
from tests.browser_support import stop, wait_healthy
from tests.oidc_support import dashboard_command, dashboard_environment
from tests.raw_session import rendered_text


@pytest.mark.parametrize(
    "address", ["127.0.0.1", "127.0.0.2", "127.255.255.254", "::1", "localhost", "LOCALHOST"]
)
def test_loopback_addresses_serve_without_sign_in_or_warning(address):
    settings = load_settings(dsn="postgresql://nobody@127.0.0.1:1/none")
    assert check_exposure(settings, address, insecure_no_auth=False) == []


@pytest.mark.parametrize("address", ["0.0.0.0", "::", "10.0.0.1", "128.0.0.1", "example.com"])
def test_other_addresses_still_need_sign_in(address):
    settings = load_settings(dsn="postgresql://nobody@127.0.0.1:1/none")
    with pytest.raises(ConfigError, match=f"refusing to serve the dashboard on {address} "):
        check_exposure(settings, address, insecure_no_auth=False)


def test_dashboard_on_127_0_0_2_serves_the_overview(dsn, tmp_path):
    port = free_port()
    url = f"http://127.0.0.2:{port}"
    log_path = tmp_path / "dashboard.log"
    with log_path.open("w") as log:
        process = subprocess.Popen(
            dashboard_command("dashboard", "--address", "127.0.0.2", "--port", str(port)),
            env=dashboard_environment(tmp_path, {"dsn": dsn, "actor": "loopback-test"}),
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
        )
    try:
        wait_healthy(url, process, log_path)
        text = rendered_text(url, [])
    finally:
        stop(process)
    assert "Acting as `loopback-test` (local, admin)" in text
    assert "Sign-in required" not in text
    assert "WARNING" not in log_path.read_text()
