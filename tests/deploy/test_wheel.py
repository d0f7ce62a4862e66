"""The wheel works outside the repository (issue 17, item 4), as the image installs it.

``python -m build`` makes the sdist and the wheel from a copy of the sources the Dockerfile
copies; a fresh virtualenv in a temporary folder gets the runtime lock (hashed; pip's cache
makes later runs quick), then ``pip install <the wheel>``, then the image's cut of what the
runtime never loads (the Dockerfile's own command, its paths translated). From there, run
in a folder of its own with nothing of the checkout on ``sys.path``: the CLI reads the
shipped alerts.yml, ``outbox-monitor dashboard`` serves every page dashboard.py lists (each
page's URL answers, and a session opened on it draws that page), and ``outbox-monitor
demo`` serves its dashboard on its own throwaway Postgres.
"""

import os
import re
import shutil
import signal
import subprocess
import sys
import tarfile
import time
import urllib.request
import zipfile
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from outbox_monitor.demo.pgcluster import free_port
from tests.browser_support import healthy
from tests.deploy.deployfiles import IMAGE_VENV, image_trim_command
from tests.raw_session import rendered_text

REPO = Path(__file__).resolve().parents[2]
SOURCES = ("pyproject.toml", "README.md", "dashboard.py", "alerts.yml", "outbox_monitor", "pages")
"""What the build reads: the Dockerfile's copies (.dockerignore's allow-list) minus the lock."""
PIP_VERSION = re.search(r"PIP_VERSION := (\S+)", (REPO / "Makefile").read_text()).group(1)
START_TIMEOUT_SECONDS = 120.0
"""A cold first start of Streamlit from a new virtualenv, under the suite's load."""
PAGE_CONTENT = {
    "": "Firing alerts",  # the root opens the Overview
    "overview": "Firing alerts",
    "events": "Event detail",
    "dead_letters": "No dead letters",
    "alerts": "Active silences",
    "controls": "Controls in force",
    "health": "xmin horizon",
    "workers": "Liveness",
    "timeline": "Nothing changed in this range.",
    "actions": "Reap stuck locks",
}
"""Text each page itself draws (beyond the title the dashboard draws for every page), by
its URL path in dashboard.py; a page added there needs its line here."""
FLEET_ONLY = {"fleet"}
"""Pages listed only for a fleet file of several outboxes; the wheel's dashboard serves one
(the Fleet page's own tests: tests/ui/test_fleet_page.py, tests/browser/test_fleet_browser.py)."""


@dataclass
class Installed:
    """The wheel installed into a fresh virtualenv: its ``bin``, a folder to run in, the
    built files and how long each step took (seconds)."""

    bin: Path
    workdir: Path
    sdist: Path
    wheel: Path
    timings: dict[str, float] = field(default_factory=dict)

    def environment(self, home: Path, **settings: str) -> dict[str, str]:
        """Ours without the checkout (``PYTHONPATH``) or any ``OUTBOX_MONITOR_*``/
        ``PG*``, ``HOME`` at ``home``, plus ``settings`` as ``OUTBOX_MONITOR_<NAME>``;
        .pyc files are written (the virtualenv was installed without them)."""
        dropped = ("PYTHONPATH", "PYTHONDONTWRITEBYTECODE")
        env = {
            name: value
            for name, value in os.environ.items()
            if name not in dropped and not name.startswith(("OUTBOX_MONITOR_", "PG"))
        }
        env["HOME"] = str(home)
        env.update({f"OUTBOX_MONITOR_{key.upper()}": value for key, value in settings.items()})
        return env

    def run(self, *arguments: str, home: Path, **settings: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            [str(self.bin / "outbox-monitor"), *arguments],
            cwd=self.workdir,
            env=self.environment(home, **settings),
            capture_output=True,
            text=True,
            timeout=120,
        )


def copy_sources(target: Path) -> None:
    """``SOURCES`` into ``target`` (created), without bytecode: what the build reads."""
    target.mkdir(parents=True)
    for name in SOURCES:
        if (REPO / name).is_dir():
            ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
            shutil.copytree(REPO / name, target / name, ignore=ignore)
        else:
            shutil.copy2(REPO / name, target / name)


def venv_megabytes(venv: Path) -> float:
    return round(sum(p.stat().st_size for p in venv.rglob("*") if p.is_file()) / 2**20, 1)


def _timed(timings: dict[str, float], step: str, command: list[str], **options) -> None:
    started = time.monotonic()
    done = subprocess.run(command, capture_output=True, text=True, **options)
    timings[step] = round(time.monotonic() - started, 1)
    assert done.returncode == 0, f"{step}: {command}\n{done.stdout[-3000:]}{done.stderr[-3000:]}"


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> Installed:
    root = tmp_path_factory.mktemp("wheel")
    source, dist, venv, workdir = (root / name for name in ("src", "dist", "venv", "run"))
    copy_sources(source)
    workdir.mkdir()
    env = {key: value for key, value in os.environ.items() if key != "PYTHONPATH"}
    timings: dict[str, float] = {}
    # the build runs the test environment's `build` (the test extras); it reads only the copy
    # and needs nothing of the virtualenv: it runs while the virtualenv gets the lock
    build = [sys.executable, "-m", "build", "--outdir", dist, source]
    with ThreadPoolExecutor(max_workers=1) as builder:
        built = builder.submit(_timed, timings, "build", build)
        pip = [str(venv / "bin" / "python"), "-m", "pip", "--quiet", "--disable-pip-version-check"]
        # the image's pip (Dockerfile: venv, then pip==PIP_VERSION), installed by our pip
        # (the same version) instead of ensurepip's older one first (≈ 7 s less)
        _timed(timings, "venv", [sys.executable, "-m", "venv", "--without-pip", venv], env=env)
        ours = [sys.executable, "-m", "pip", "--quiet", "--disable-pip-version-check"]
        into_venv = [*ours, "--python", str(venv / "bin" / "python"), "install"]
        _timed(timings, "pip", [*into_venv, f"pip=={PIP_VERSION}"], env=env, cwd=workdir)
        lock = REPO / "requirements-runtime.lock"
        # not byte-compiled (≈ 30 s less): the runs below write .pyc files of what they import
        locked = [*pip, "install", "--no-compile", "--require-hashes", "-r", lock]
        _timed(timings, "lock", locked, env=env, cwd=workdir)
        built.result()
    (wheel,) = dist.glob("outbox_monitor-*.whl")
    (sdist,) = dist.glob("outbox_monitor-*.tar.gz")
    _timed(timings, "wheel", [*pip, "install", wheel], env=env, cwd=workdir)
    assert (venv / "lib" / "python3.11").is_dir(), "the image's paths name python3.11"
    size = venv_megabytes(venv)
    trim = image_trim_command().replace(IMAGE_VENV, str(venv))
    _timed(timings, "trim", ["sh", "-ec", trim], env=env, cwd=workdir)
    print(f"wheel venv: {size} MB installed, {venv_megabytes(venv)} MB after the image's cut")
    print(f"wheel install timings (s): {timings}")
    return Installed(venv / "bin", workdir, sdist, wheel, timings)


def test_the_wheel_and_the_sdist_carry_the_dashboard_its_pages_and_the_rules(installed):
    pages = sorted(path.name for path in (REPO / "pages").glob("*.py"))
    in_wheel = set(zipfile.ZipFile(installed.wheel).namelist())
    # alerts.yml's schema where its first line names it (cli/file_reference.py, modeline)
    schema = "outbox_monitor/schemas/alerts.schema.json"
    shipped = {"dashboard.py", "alerts.yml", schema, *(f"pages/{page}" for page in pages)}
    app = "outbox_monitor/app/"
    assert {name.removeprefix(app) for name in in_wheel if name.startswith(app)} == shipped
    assert "outbox_monitor/store/sql/queries.sql" in in_wheel
    assert {f"outbox_monitor/schemas/{n}.schema.json" for n in ("alerts", "controls", "fleet")} | {
        "outbox_monitor/demo/controls.yml"
    } <= in_wheel
    assert not [name for name in in_wheel if name.startswith("tests/")]
    with tarfile.open(installed.sdist) as sdist:
        top = sdist.getnames()[0].split("/")[0]
        in_sdist = {name.removeprefix(f"{top}/") for name in sdist.getnames()}
    assert {"dashboard.py", "alerts.yml", "pyproject.toml", *(f"pages/{p}" for p in pages)} <= (
        in_sdist
    )


def test_the_installed_cli_reads_the_shipped_rules_from_the_wheel(installed, dsn, tmp_path):
    code = "import outbox_monitor; print(outbox_monitor.__file__)"
    where = subprocess.run(
        [str(installed.bin / "python"), "-c", code],
        cwd=installed.workdir,
        env=installed.environment(tmp_path),
        capture_output=True,
        text=True,
    )
    assert where.stdout.startswith(str(installed.bin.parent / "lib")), where
    shipped = installed.bin.parent.glob("lib/python*/site-packages/outbox_monitor/app/alerts.yml")
    (rules,) = shipped
    assert rules.read_text() == (REPO / "alerts.yml").read_text()
    # the schemas the shipped YAML files name on their first line are there, relative to them
    for yaml_file in (rules, rules.parents[1] / "demo" / "controls.yml"):
        named = yaml_file.read_text().split("\n", 1)[0].split("$schema=", 1)[1]
        schema = yaml_file.parent / named
        assert schema.is_file(), schema
        assert schema.read_text() == (REPO / "outbox_monitor/schemas" / schema.name).read_text()
    count = len(re.findall(r"^  - name: ", rules.read_text(), re.M))
    validated = installed.run("alerts", "validate", home=tmp_path)
    assert validated.returncode == 0, validated.stderr
    assert validated.stdout.startswith(f"{rules}: valid — {count} rule(s)"), validated.stdout
    checked = installed.run("check", "--dsn", dsn, home=tmp_path)
    assert checked.returncode in (0, 1), checked.stdout + checked.stderr  # 2: an error
    demo = installed.run("demo", "--help", home=tmp_path)
    assert demo.returncode == 0 and "Throwaway local Postgres" in demo.stdout, demo.stderr


def dashboard_pages() -> dict[str, str]:
    """Every page dashboard.py lists: its URL path → its title."""
    text = (REPO / "dashboard.py").read_text()
    found = re.findall(r'title="([^"]+)",\s*url_path="([^"]*)"', text)
    return {path: title for title, path in found}


@pytest.fixture
def serve(installed, tmp_path) -> Iterator:
    """Start ``outbox-monitor <arguments>`` from the installed wheel; yields a function
    returning the URL once healthy; stops it (SIGINT, as Ctrl-C) at the end."""
    processes: list[subprocess.Popen] = []

    def start(*arguments: str, **settings: str) -> str:
        port = free_port()
        log = tmp_path / f"{arguments[0]}.log"
        with log.open("w") as output:
            process = subprocess.Popen(
                [str(installed.bin / "outbox-monitor"), *arguments, "--port", str(port)],
                cwd=installed.workdir,
                env=installed.environment(tmp_path, **settings),
                stdout=output,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
            )
        processes.append(process)
        url = f"http://127.0.0.1:{port}"
        started = time.monotonic()
        while not healthy(url):
            assert process.poll() is None, log.read_text()[-3000:]
            assert time.monotonic() - started < START_TIMEOUT_SECONDS, log.read_text()[-3000:]
            time.sleep(0.3)
        installed.timings[f"{arguments[0]} healthy"] = round(time.monotonic() - started, 1)
        return url

    yield start
    for process in processes:
        process.send_signal(signal.SIGINT)
        try:
            assert process.wait(30) == 0
        finally:
            if process.poll() is None:  # deaf to Ctrl-C: SIGTERM stops it and its Streamlit
                process.terminate()
                try:
                    process.wait(30)
                except subprocess.TimeoutExpired:
                    process.kill()
                    process.wait()


def test_the_installed_dashboard_serves_every_page(installed, serve, dsn, tmp_path, deploy_log):
    pages = {path: title for path, title in dashboard_pages().items() if path not in FLEET_ONLY}
    assert set(pages) == set(PAGE_CONTENT), "each page of dashboard.py has its content here"
    url = serve("dashboard", dsn=dsn, actor="wheel-test")
    for path, title in pages.items():
        with urllib.request.urlopen(f"{url}/{path}", timeout=10) as response:
            assert response.status == 200 and b'<div id="root">' in response.read(), path
        text = rendered_text(url, [], page=path)
        assert "Page not found" not in text and "Unexpected error" not in text, (path, text[-2000:])
        assert f'"{title if path else "Overview"}"' in text or title in text, (path, title)
        assert PAGE_CONTENT[path] in text, (path, text[-3000:])
    assert "Acting as `wheel-test` (local, admin)" in rendered_text(url, [], page="actions")
    deploy_log(
        f"wheel {installed.wheel.name} installed outside the repo ({installed.bin.parent}): "
        f"its dashboard served all "
        f"{len(pages)} pages ({', '.join(path or '/' for path in pages)})"
    )


def test_the_installed_demo_serves_its_dashboard(installed, serve, tmp_path):
    url = serve("demo", "--rate", "5", "--workers", "1")
    text = rendered_text(url, [], page="overview")
    assert "Firing alerts" in text and "Unexpected error" not in text, text[-3000:]
    print(f"wheel timings (s): {installed.timings}")
