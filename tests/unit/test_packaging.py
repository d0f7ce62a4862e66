"""What the wheel carries, from pyproject.toml: every package folder of the source tree,
and the top-level dashboard.py, pages/ and alerts.yml mapped as ``outbox_monitor.app``
(tests/deploy/test_wheel.py builds the wheel and serves every page from it)."""

import tomllib
from pathlib import Path

from outbox_monitor import shipped

REPO = Path(__file__).resolve().parents[2]
SETUPTOOLS = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]


def test_every_package_folder_is_listed_and_the_shipped_files_are_mapped():
    on_disk = {
        ".".join(init.parent.relative_to(REPO).parts)
        for init in (REPO / "outbox_monitor").rglob("__init__.py")
    }
    mapped = SETUPTOOLS["package-dir"]
    assert mapped == {"outbox_monitor.app": ".", "outbox_monitor.app.pages": "pages"}
    assert set(SETUPTOOLS["packages"]) == on_disk | set(mapped)
    assert "alerts.yml" in SETUPTOOLS["package-data"]["outbox_monitor.app"]
    assert SETUPTOOLS["include-package-data"] is False, "README.md etc. stay out of app/"
    # the root holds no other module that would land in outbox_monitor/app
    assert sorted(path.name for path in REPO.glob("*.py")) == ["dashboard.py"]


def test_a_checkout_finds_the_shipped_files_at_its_root():
    assert shipped.shipped_folder() == REPO
    assert (shipped.shipped_folder() / "pages" / "overview.py").is_file()
    assert (shipped.shipped_folder() / "alerts.yml").is_file()
