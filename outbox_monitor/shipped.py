"""Where the files shipped beside the package are: ``dashboard.py``, ``pages/`` and
``alerts.yml``.

A checkout keeps them at the repository's root (the design's layout, ``streamlit run
dashboard.py``); a built wheel carries the same files as ``outbox_monitor/app``
(pyproject.toml maps the root there). The wheel's folder is used when it is there; an
editable install or a checkout on ``PYTHONPATH`` has none, so it reads the root.
"""

from pathlib import Path

PACKAGE_FOLDER = Path(__file__).resolve().parent
INSTALLED_FOLDER = PACKAGE_FOLDER / "app"
"""Their place in an installed wheel."""
CHECKOUT_FOLDER = PACKAGE_FOLDER.parent
"""Their place in a checkout: the repository's root."""


def shipped_folder() -> Path:
    """The folder holding ``dashboard.py``, ``pages/`` and ``alerts.yml``: the installed
    wheel's ``outbox_monitor/app`` when it has ``dashboard.py``, else the checkout's root
    (whether the files are there is the caller's to check)."""
    if (INSTALLED_FOLDER / "dashboard.py").is_file():
        return INSTALLED_FOLDER
    return CHECKOUT_FOLDER
