"""Where the real n8n worker and its workflows are: the n8n installed by ``n8n/install.sh``
(a cache folder keyed by its version, ``~/.cache/outbox-monitor/n8n-<version>``, or
``$OUTBOX_MONITOR_N8N_HOME``) and the workflow files to import (the repository's
n8n/workflows). This module never installs anything; ``n8n`` runs what it finds.
"""

import os
import shutil
from pathlib import Path

from outbox_monitor.errors import OutboxMonitorError

N8N_VERSION = "1.123.81"
"""The n8n release the workflows are proven on (the newest that accepts Node 20)."""
N8N_HOME_ENV = "OUTBOX_MONITOR_N8N_HOME"
"""A folder holding ``node_modules/.bin/n8n`` (an install made elsewhere); overrides the cache."""
N8N_WORKFLOWS_ENV = "OUTBOX_MONITOR_N8N_WORKFLOWS"
"""The folder of workflow JSON files to import (default: the repository's n8n/workflows)."""
SHIPPED_FOLDER = Path(__file__).resolve().parents[2] / "n8n"
"""The repository's n8n folder: workflows/ and credentials/ (the files users import)."""
INSTALL_HINT = (
    "Install n8n {version} (once, ≈ 10 min and 1.8 GB, outside the repository) with "
    "`n8n/install.sh`, or point {env} at a folder holding node_modules/.bin/n8n."
)


class N8nNotFound(OutboxMonitorError):
    """No n8n install where this module looks; the hint says how to install it."""


def cache_folder(version: str = N8N_VERSION) -> Path:
    """Where ``n8n/install.sh`` installs n8n: ``$XDG_CACHE_HOME`` (or ``~/.cache``) /
    ``outbox-monitor/n8n-<version>``."""
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "outbox-monitor" / f"n8n-{version}"


def find_n8n(version: str = N8N_VERSION) -> Path:
    """The ``n8n`` executable: under ``$OUTBOX_MONITOR_N8N_HOME`` when set, else in the cache.

    Returns:
        The path of ``node_modules/.bin/n8n``.

    Raises:
        N8nNotFound: nothing there (or node missing); the hint says how to install it.
    """
    home = os.environ.get(N8N_HOME_ENV)
    folder = Path(home).expanduser() if home else cache_folder(version)
    binary = folder / "node_modules" / ".bin" / "n8n"
    hint = INSTALL_HINT.format(version=version, env=N8N_HOME_ENV)
    if not binary.exists():
        raise N8nNotFound(f"n8n is not installed: {binary} does not exist", hint=hint)
    if shutil.which("node") is None:
        raise N8nNotFound("n8n needs Node.js (node) on the PATH", hint=hint)
    return binary


def workflows_folder() -> Path:
    """The workflows to import: ``$OUTBOX_MONITOR_N8N_WORKFLOWS``, else this checkout's
    ``n8n/workflows``.

    Raises:
        N8nNotFound: the folder has no workflow JSON (an installed package without the repo).
    """
    override = os.environ.get(N8N_WORKFLOWS_ENV)
    folder = Path(override) if override else SHIPPED_FOLDER / "workflows"
    if not list(folder.glob("*.json")):
        raise N8nNotFound(
            f"no n8n workflows in {folder}",
            hint=f"Run from a checkout of outbox-monitor, or set {N8N_WORKFLOWS_ENV}.",
        )
    return folder
