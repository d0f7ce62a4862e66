"""What every real-browser test shares: Debian's Chromium and its flags, and waits."""

import socket
import urllib.error
import urllib.request

from playwright.sync_api import expect

CHROMIUM = "/usr/bin/chromium"
"""The system's Chromium (Debian package), never a downloaded one."""
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
START_TIMEOUT_SECONDS = 30
ELEMENT_TIMEOUT_MS = 20_000

# A loaded 2-core CI machine can take seconds to render a Streamlit page: wait for
# content up to 20 s instead of Playwright's 5 s (a real miss still fails).
expect.set_options(timeout=ELEMENT_TIMEOUT_MS)


def healthy(url: str) -> bool:
    """Whether the Streamlit server at ``url`` answers its health check with ``ok``."""
    try:
        with urllib.request.urlopen(f"{url}/_stcore/health", timeout=1) as response:
            return response.read() == b"ok"
    except (urllib.error.URLError, ConnectionError, TimeoutError):
        return False


def outward_address() -> str | None:
    """This machine's address on its outward interface (no packet is sent), or None."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        try:
            probe.connect(("192.0.2.1", 9))
        except OSError:
            return None
        address = probe.getsockname()[0]
    return None if address.startswith("127.") else address
