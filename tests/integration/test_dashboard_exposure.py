"""``outbox-monitor dashboard`` on a non-loopback address without sign-in (docs/security.md):
refused, unless ``--insecure-no-auth`` says a network boundary guards it, which then
serves on every interface and prints the warning."""

import subprocess
from pathlib import Path

from outbox_monitor.demo.pgcluster import free_port
from tests.browser_support import healthy, stop, wait_healthy
from tests.oidc_support import dashboard_command, dashboard_environment

LISTEN = "0A"
"""The LISTEN state in /proc/net/tcp."""


def listening_on_all_interfaces(port: int) -> bool:
    """Whether a socket listens on 0.0.0.0:``port`` (read from /proc/net/tcp)."""
    for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        local, state = line.split()[1], line.split()[3]
        if local == f"00000000:{port:04X}" and state == LISTEN:
            return True
    return False


def test_non_loopback_address_without_sign_in_is_refused(dsn, tmp_path):
    port = free_port()
    done = subprocess.run(
        dashboard_command("dashboard", "--address", "0.0.0.0", "--port", str(port)),
        env=dashboard_environment(tmp_path, {"dsn": dsn}),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 2  # a setting that cannot be used: a usage error
    assert done.stderr.startswith(
        "error: refusing to serve the dashboard on 0.0.0.0 without sign-in: anyone who "
        "reaches it could read payloads and replay, reap and prune\n"
    )
    assert "Set OUTBOX_MONITOR_AUTH=oidc (sign-in) or proxy" in done.stderr
    assert "--insecure-no-auth" in done.stderr
    assert not healthy(f"http://127.0.0.1:{port}")


def test_insecure_no_auth_serves_on_every_interface_with_a_warning(dsn, tmp_path):
    port = free_port()
    log_path = tmp_path / "dashboard.log"
    with log_path.open("w") as log:
        process = subprocess.Popen(
            dashboard_command(
                "dashboard", "--address", "0.0.0.0", "--port", str(port), "--insecure-no-auth"
            ),
            env=dashboard_environment(tmp_path, {"dsn": dsn, "actor": "night-shift"}),
            stdout=subprocess.DEVNULL,
            stderr=log,
            stdin=subprocess.DEVNULL,
        )
    try:
        wait_healthy(f"http://127.0.0.1:{port}", process, log_path)
        assert listening_on_all_interfaces(port)
    finally:
        returncode = stop(process)
    assert returncode == 0
    warnings = [line for line in log_path.read_text().splitlines() if "WARNING" in line]
    assert warnings == [
        "WARNING: the dashboard listens on 0.0.0.0 WITHOUT sign-in (--insecure-no-auth): "
        "anyone who reaches it can see payloads and replay, reap and prune as night-shift."
    ]
