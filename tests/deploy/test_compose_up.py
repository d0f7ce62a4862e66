"""compose.yaml brought up for real, with podman-compose (Docker Compose cannot run here):
postgres (a stand-in built from Debian's PostgreSQL, tagged ``postgres:16`` locally: no
registry is reachable), init-db completed, the dashboard and two scheduler replicas
healthy by the image's HEALTHCHECK with exactly one leader, and the demo profile's
traffic in the outbox.

podman-compose 1.6 on podman 4.3 has two limits that force the order here, not in the
file (which stays as Docker Compose reads it):

- ``condition: service_healthy`` is ignored below podman 4.6 (no ``podman wait
  --condition=healthy``), and without systemd no timer runs the HEALTHCHECK: postgres is
  started alone and probed by hand (``podman healthcheck run``) before the rest;
- ``deploy.replicas`` is ignored unless ``deploy.mode: replicated`` is spelled out (the
  Compose default): the test passes ``--scale scheduler=<the file's replicas>`` instead;
- it turns ``depends_on`` into ``podman run --requires``, and podman 4.3 then refuses to
  start a service whose dependency has a dependency of its own ("depends on container …
  not found in input list"): the test starts each step with ``--no-deps``, in the
  file's order — postgres, healthy; init-db, exited 0; then the rest.
"""

import shutil
import subprocess
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from outbox_monitor.demo.pgcluster import free_port
from tests.deploy import podman
from tests.deploy.deployfiles import COMPOSE, ENV_FILE, REPO, compose
from tests.deploy.test_dockerfile import _eventually

PODMAN_COMPOSE_VERSION = "1.6.0"
STANDIN = Path(__file__).parent / "postgres-standin"
POSTGRES_IMAGE = "docker.io/library/postgres:16"
HEALTH_TIMEOUT_SECONDS = 150.0
LEADERS = (
    "SELECT count(*) FROM outbox_monitor.leader_leases WHERE expires_at > now() "
    "AND holder_pid IN (SELECT pid FROM pg_stat_activity)"
)


def podman_compose() -> Path:
    """podman-compose from PyPI in a virtualenv of its own under the cache folder (the
    project's dependencies do not carry it); installed once."""
    venv = podman.CACHE / f"podman-compose-{PODMAN_COMPOSE_VERSION}"
    binary = venv / "bin" / "podman-compose"
    if not binary.exists():
        subprocess.run(["python3", "-m", "venv", str(venv)], check=True)
        subprocess.run(
            [venv / "bin" / "pip", "install", "--quiet", "--disable-pip-version-check",
             f"podman-compose=={PODMAN_COMPOSE_VERSION}"],
            check=True,
        )  # fmt: skip
    return binary


def postgres_standin() -> None:
    """Debian's PostgreSQL as ``postgres:16`` (rebuilt only when its recipe changes)."""
    recipe = [(STANDIN / name).read_text() for name in ("Containerfile", "entrypoint.sh")]
    tag = podman.content_tag("postgres-standin", *recipe)
    if not podman.image_exists(tag):
        podman.build(STANDIN, tag)
    podman.podman("tag", tag, POSTGRES_IMAGE)
    podman.drop_older(tag)


class Project:
    """One compose project in a folder of its own (compose.yaml and a filled-in env file)."""

    def __init__(self, folder: Path) -> None:
        self.name = f"om-compose-{uuid.uuid4().hex[:6]}"
        self.folder = folder
        shutil.copy(COMPOSE, folder / "compose.yaml")
        (folder / "deploy").mkdir()
        (folder / ENV_FILE).write_text(
            "POSTGRES_PASSWORD=compose-test\nPGPASSWORD=compose-test\nN8N_ENCRYPTION_KEY=x\n"
        )
        self.env = {
            **podman.environment(),
            "OUTBOX_MONITOR_IMAGE": podman.IMAGE,
            "OUTBOX_MONITOR_DASHBOARD_PORT": str(free_port()),
        }

    def remove(self) -> None:
        """``down --volumes``, then whatever it left (it forgets ``--scale`` replicas and
        so the network they hold)."""
        self.run("--profile", "demo", "down", "--volumes", "--timeout", "10", check=False)
        label = f"label=io.podman.compose.project={self.name}"
        for kind, listing in (("container", ["ps", "--all"]), ("volume", ["volume", "ls"])):
            found = podman.podman(*listing, "--quiet", "--filter", label).stdout.split()
            if found:
                podman.podman(kind, "rm", "--force", *found, check=False, timeout=60)
        podman.podman("network", "rm", "--force", f"{self.name}_default", check=False)

    def run(self, *args: str, timeout: float = 300, check: bool = True):
        result = subprocess.run(
            [str(podman_compose()), "--project-name", self.name, *args],
            cwd=self.folder,
            env=self.env,
            capture_output=True,
            text=True,
            timeout=timeout,
        )
        output = f"podman-compose {args}:\n{result.stdout}\n{result.stderr}"
        assert result.returncode == 0 or not check, output
        return result

    def container(self, service: str, number: int = 1) -> str:
        return f"{self.name}_{service}_{number}"

    def psql(self, query: str) -> str:
        return podman.podman(
            "exec", self.container("postgres"), "psql", "-U", "outbox", "-d", "outbox",
            "-Atc", query,
        ).stdout.strip()  # fmt: skip


@pytest.fixture
def project(tmp_path: Path) -> Iterator[Project]:
    podman.built_image(REPO)
    postgres_standin()
    made = Project(tmp_path)
    yield made
    made.remove()


def test_podman_compose_reads_the_file(project):
    """``podman-compose config``: every service of the active profiles, as written."""
    spec = compose()
    read = yaml.safe_load(project.run("config").stdout)["services"]
    assert set(read) == {name for name, s in spec["services"].items() if "profiles" not in s}
    for name, service in read.items():
        assert service.get("depends_on") == spec["services"][name].get("depends_on"), name
    assert read["scheduler"]["deploy"] == spec["services"]["scheduler"]["deploy"]


def test_compose_up_with_two_schedulers_one_leader_and_the_demo(project, deploy_log):
    replicas = compose()["services"]["scheduler"]["deploy"]["replicas"]
    up = ("--profile", "demo", "up", "--detach", "--scale", f"scheduler={replicas}", "--no-deps")
    project.run(*up, "postgres")
    podman.wait_healthy(project.container("postgres"), HEALTH_TIMEOUT_SECONDS)
    project.run(*up, "init-db")
    init = podman.podman("wait", project.container("init-db"), timeout=180).stdout.strip()
    assert init == "0", podman.podman("logs", project.container("init-db")).stderr
    project.run(*up, "dashboard", "scheduler", "simulate")
    started = {
        line
        for line in podman.podman("ps", "--format", "{{.Names}}").stdout.split()
        if line.startswith(project.name)
    }
    services = ["postgres", "dashboard", "simulate"]
    expected = {project.container(s) for s in services} | {
        project.container("scheduler", n) for n in range(1, replicas + 1)
    }
    assert started == expected
    for name in sorted(expected - {project.container("postgres")}):
        podman.wait_healthy(name, HEALTH_TIMEOUT_SECONDS)
    port = project.env["OUTBOX_MONITOR_DASHBOARD_PORT"]
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/_stcore/health", timeout=10) as page:
        assert page.read() == b"ok", "published on the host's loopback"
    _eventually(lambda: project.psql(LEADERS) == "1", 60, "exactly one leader")
    _eventually(
        lambda: int(project.psql("SELECT count(*) FROM public.integration_outbox")) > 0,
        120,
        "the demo's traffic in the outbox",
    )
    deploy_log(
        f"compose up ({project.name}): {', '.join(sorted(expected))} running, all but "
        f"postgres healthy by their HEALTHCHECK; {replicas} scheduler replicas, exactly one "
        "leader; the demo's traffic in the outbox"
    )
