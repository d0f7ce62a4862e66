"""What the Dockerfile and compose.yaml say a container runs, read from the files themselves,
and a container-like sandbox to run it on this host (no Docker engine here).

The tests never retype a command line: they take ENTRYPOINT/CMD/HEALTHCHECK/ENV from the
Dockerfile's final stage and ``command``/``environment``/``env_file`` from compose.yaml.
The only translations from image to host are the paths (``/opt/venv`` → this virtualenv,
``/app`` → the repository, ``HOME=/tmp`` → a fresh folder) and the database's address.
"""

import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import yaml

REPO = Path(__file__).resolve().parents[2]
DOCKERFILE = REPO / "Dockerfile"
DOCKERIGNORE = REPO / ".dockerignore"
COMPOSE = REPO / "compose.yaml"
ENV_FILE = "deploy/outbox-monitor.env"
"""The env file compose.yaml reads; not in the repository (it holds secrets)."""
ENV_TEMPLATE = REPO / "deploy" / "env.example"
"""What ``ENV_FILE`` is copied from; the tests use it in its place."""

IMAGE_VENV = "/opt/venv"
IMAGE_APP = "/app"
BASE_IMAGE_ENV = {
    "PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
    "LANG": "C.UTF-8",
}
"""The environment python:3.11-slim itself sets (the parts a command can notice)."""
STOP_GRACE_SECONDS = 10.0
"""``docker stop``'s default: SIGTERM, then SIGKILL after this long."""


# ----- Dockerfile -------------------------------------------------------------------


@dataclass
class Instruction:
    keyword: str
    arguments: str
    line: int


@dataclass
class Stage:
    base: str
    name: str | None
    instructions: list[Instruction] = field(default_factory=list)

    def all(self, keyword: str) -> list[Instruction]:
        return [i for i in self.instructions if i.keyword == keyword]

    def last(self, keyword: str) -> Instruction | None:
        found = self.all(keyword)
        return found[-1] if found else None


def dockerfile_stages(path: Path = DOCKERFILE) -> list[Stage]:
    """The stages of a Dockerfile: continuation lines joined, comments dropped."""
    stages: list[Stage] = []
    pending, start = "", 0
    for number, raw in enumerate(path.read_text().splitlines(), 1):
        stripped = raw.strip()
        if not pending and (not stripped or stripped.startswith("#")):
            continue
        if pending and stripped.startswith("#"):
            continue
        if not pending:
            start = number
        if stripped.endswith("\\"):
            pending += stripped[:-1] + " "
            continue
        text = pending + stripped
        pending = ""
        keyword, _, arguments = text.partition(" ")
        instruction = Instruction(keyword.upper(), arguments.strip(), start)
        if instruction.keyword == "FROM":
            words = instruction.arguments.split()
            name = words[2] if len(words) == 3 and words[1].upper() == "AS" else None
            stages.append(Stage(base=words[0], name=name))
        stages[-1].instructions.append(instruction)
    return stages


def image_trim_command() -> str:
    """The dependencies stage's cut of its virtualenv (what the runtime never loads): the
    parts of the RUN that installs the lock after its ``pip install``, as one shell command
    on ``/opt/venv`` (tests/deploy/test_wheel.py, benchmarks/venv_size.py)."""
    (run,) = [i for i in stage_named("deps").all("RUN") if "--require-hashes" in i.arguments]
    install, *trim = run.arguments.split(" && ")
    assert "install --quiet --require-hashes -r" in install, run.arguments
    # each part works in the virtualenv (``$site`` is its site-packages)
    assert trim and all(IMAGE_VENV in part or '"$site"' in part for part in trim), trim
    return " && ".join(trim)


def stage_named(name: str, path: Path = DOCKERFILE) -> Stage:
    """The Dockerfile's stage ``FROM … AS name``.

    Raises:
        AssertionError: no stage has that name.
    """
    named = [stage for stage in dockerfile_stages(path) if stage.name == name]
    assert named, f"the Dockerfile has no stage named {name}"
    return named[0]


def exec_form(instruction: Instruction, text: str | None = None) -> list[str]:
    """The JSON (exec) form of CMD/ENTRYPOINT/HEALTHCHECK CMD as a list.

    Raises:
        AssertionError: it is the shell form (then ``/bin/sh`` would be PID 1 and
            docker's SIGTERM would not reach the service).
    """
    text = instruction.arguments if text is None else text
    try:
        value = json.loads(text)
    except json.JSONDecodeError:
        value = None
    assert isinstance(value, list) and all(isinstance(v, str) for v in value), (
        f"Dockerfile line {instruction.line}: {instruction.keyword} must use the exec "
        f"(JSON) form, got {text!r}"
    )
    return value


def expand(value: str, env: dict[str, str]) -> str:
    """``$VAR``/``${VAR}`` in an ENV value, as docker expands them."""
    return re.sub(r"\$(?:\{(\w+)\}|(\w+))", lambda m: env.get(m.group(1) or m.group(2), ""), value)


@dataclass(frozen=True)
class Image:
    """What the final stage runs: entrypoint, default command, environment, health check."""

    base: str
    user: str | None
    workdir: str | None
    env: dict[str, str]
    entrypoint: list[str]
    cmd: list[str]
    healthcheck: list[str]
    healthcheck_options: dict[str, str]
    volumes: list[str]


def image(path: Path = DOCKERFILE) -> Image:
    """Read the final stage of the Dockerfile."""
    stage = dockerfile_stages(path)[-1]
    env: dict[str, str] = dict(BASE_IMAGE_ENV)
    for instruction in stage.all("ENV"):
        for word in shlex.split(instruction.arguments):
            assert "=" in word, f"line {instruction.line}: use ENV KEY=VALUE, got {word!r}"
            key, _, value = word.partition("=")
            env[key] = expand(value, env)
    health = stage.last("HEALTHCHECK")
    assert health is not None, "the final stage has no HEALTHCHECK"
    options_text, _, command_text = health.arguments.partition("CMD ")
    options = dict(
        option.removeprefix("--").split("=", 1) for option in options_text.split() if option
    )
    volumes: list[str] = []
    for instruction in stage.all("VOLUME"):
        text = instruction.arguments
        volumes += json.loads(text) if text.startswith("[") else text.split()
    user = stage.last("USER")
    workdir = stage.last("WORKDIR")
    entrypoint = stage.last("ENTRYPOINT")
    cmd = stage.last("CMD")
    assert entrypoint is not None and cmd is not None, "ENTRYPOINT and CMD are both expected"
    return Image(
        base=stage.base,
        user=user.arguments if user else None,
        workdir=workdir.arguments if workdir else None,
        env=env,
        entrypoint=exec_form(entrypoint),
        cmd=exec_form(cmd),
        healthcheck=exec_form(health, command_text),
        healthcheck_options=options,
        volumes=volumes,
    )


# ----- compose.yaml -----------------------------------------------------------------


def compose(path: Path = COMPOSE) -> dict[str, Any]:
    """compose.yaml as loaded (YAML merge keys resolved)."""
    return yaml.safe_load(path.read_text())


def env_file_values(path: Path) -> dict[str, str]:
    """``KEY=VALUE`` lines of an env file (comments and blank lines skipped)."""
    values = {}
    for raw in path.read_text().splitlines():
        line = raw.strip()
        if line and not line.startswith("#"):
            key, _, value = line.partition("=")
            values[key.strip()] = value.strip()
    return values


@dataclass(frozen=True)
class ServiceRun:
    """One command the image runs: the image default, or one compose service."""

    name: str
    argv: list[str]
    environment: dict[str, str]
    """Compose's env_file (its template) then ``environment``; empty for the default."""
    replicas: int = 1
    depends_on: dict[str, str] = field(default_factory=dict)

    @property
    def role(self) -> str:
        """The outbox-monitor subcommand (``dashboard``, ``init-db`` …)."""
        return self.argv[1]


def image_services(
    spec: dict[str, Any] | None = None, img: Image | None = None
) -> list[ServiceRun]:
    """Every compose service that runs this repository's image (those with ``build``),
    with the argv the container runs (ENTRYPOINT + ``command`` or CMD)."""
    spec = spec or compose()
    img = img or image()
    runs = []
    for name, service in spec["services"].items():
        if "build" not in service:
            continue
        assert "entrypoint" not in service, f"{name}: keep the image's ENTRYPOINT"
        command = service.get("command", img.cmd)
        assert isinstance(command, list), f"{name}: command must be a list (exec form)"
        environment: dict[str, str] = {}
        env_files = service.get("env_file", [])
        for entry in [env_files] if isinstance(env_files, str | dict) else env_files:
            file = entry["path"] if isinstance(entry, dict) else entry
            assert file == ENV_FILE, f"{name}: env_file {file!r}, expected {ENV_FILE}"
            environment.update(env_file_values(ENV_TEMPLATE))
        given = service.get("environment", {})
        assert isinstance(given, dict), f"{name}: environment must be a mapping"
        environment.update({k: str(v) for k, v in given.items()})
        depends = {k: v["condition"] for k, v in service.get("depends_on", {}).items()}
        runs.append(
            ServiceRun(
                name=name,
                argv=[*img.entrypoint, *command],
                environment=environment,
                replicas=service.get("deploy", {}).get("replicas", 1),
                depends_on=depends,
            )
        )
    return runs


def default_run(img: Image | None = None) -> ServiceRun:
    """``docker run IMAGE``: ENTRYPOINT + CMD, the image's environment only."""
    img = img or image()
    return ServiceRun(name="image default", argv=[*img.entrypoint, *img.cmd], environment={})


# ----- the sandbox ------------------------------------------------------------------


def host_path(value: str) -> str:
    """An image path (``/opt/venv/bin:…``, ``/app``) as the same place on this host."""
    return value.replace(IMAGE_VENV, sys.prefix).replace(IMAGE_APP, str(REPO))


def host_environment(
    img: Image, run: ServiceRun, *, home: Path, database: dict[str, str]
) -> dict[str, str]:
    """The environment the container would have, translated to this host.

    Args:
        img: the image (its ENV, after the base image's).
        run: the service (compose env_file template, then ``environment``).
        home: a fresh folder standing for the image's ``HOME=/tmp``.
        database: libpq variables naming the throwaway database; they replace the
            ``PG*`` variables compose names its ``postgres`` service with.

    Returns:
        Only those variables: nothing of the test process's own environment.
    """
    env = {key: host_path(value) for key, value in img.env.items()}
    env.update(run.environment)
    assert env.get("HOME") == "/tmp", "the image's HOME is expected to be /tmp"
    env["HOME"] = str(home)
    env.update(database)
    return env


def sandbox_support() -> str | None:
    """``None`` when this host can run the sandbox, else why not (for a skip)."""
    missing = [tool for tool in ("unshare", "nsenter", "ip", "mount") if not shutil.which(tool)]
    if missing:
        return f"{', '.join(missing)} not found (util-linux, iproute2)"
    if os.geteuid() != 0:
        return "namespaces and read-only bind mounts need root (CI runs as root)"
    probe = subprocess.run(
        ["unshare", "--mount", "--net", "--pid", "--fork", "--mount-proc", "true"],
        capture_output=True,
        text=True,
    )
    if probe.returncode != 0:
        return f"unshare refused: {probe.stderr.strip()}"
    return None


class Sandbox:
    """A command run as a container runs it: PID 1 of its own PID namespace, in its own
    network namespace (so the image's fixed ports never collide with the host's or a
    replica's), with the application and the virtualenv mounted read-only.

    Postgres is reached through its Unix socket (a file, shared across network
    namespaces). ``exec`` runs a further command inside, as ``docker exec`` and docker's
    HEALTHCHECK do.
    """

    def __init__(self, argv: list[str], env: dict[str, str], log: Path) -> None:
        self.argv = argv
        self.env = env
        self.log_path = log
        self.log: IO[bytes] | None = None
        self.process: subprocess.Popen | None = None
        self.pid: int | None = None

    def start(self) -> "Sandbox":
        readonly = [REPO, *([] if Path(sys.prefix).is_relative_to(REPO) else [Path(sys.prefix)])]
        steps = [f"{shutil.which('ip')} link set lo up"]
        for path in readonly:
            quoted = shlex.quote(str(path))
            steps.append(f"mount --bind {quoted} {quoted}")
            steps.append(f"mount -o remount,bind,ro {quoted}")
        steps.append(f"exec {shlex.join(self.argv)}")
        self.log = self.log_path.open("wb")
        self.process = subprocess.Popen(
            [
                shutil.which("unshare") or "unshare",
                "--mount",
                "--net",
                "--pid",
                "--fork",
                "--mount-proc",
                "--propagation",
                "private",
                "--",
                "/bin/sh",
                "-c",
                " && ".join(steps),
            ],
            env=self.env,
            cwd=REPO,
            stdout=self.log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
        )
        self.pid = self._inner_pid()
        return self

    def _inner_pid(self, timeout: float = 10.0) -> int:
        """The host PID of the sandbox's PID 1, once it runs the command itself."""
        assert self.process is not None
        children = Path(f"/proc/{self.process.pid}/task/{self.process.pid}/children")
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise AssertionError(f"the sandbox exited with {self.process.returncode}")
            pids = children.read_text().split() if children.exists() else []
            if pids:
                cmdline = Path(f"/proc/{pids[0]}/cmdline").read_bytes().split(b"\0")
                if any(os.path.basename(word.decode()) == "outbox-monitor" for word in cmdline):
                    return int(pids[0])
            time.sleep(0.02)
        raise AssertionError(f"the sandbox did not start {self.argv} within {timeout} s")

    def exec(self, argv: list[str], *, timeout: float = 30.0) -> subprocess.CompletedProcess:
        """Run ``argv`` inside (same namespaces, environment and working directory)."""
        return subprocess.run(
            [
                shutil.which("nsenter") or "nsenter",
                "--target",
                str(self.pid),
                "--net",
                "--pid",
                "--mount",
                f"--wd={REPO}",
                "--",
                *argv,
            ],
            env=self.env,
            capture_output=True,
            text=True,
            timeout=timeout,
        )

    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def wait(self, timeout: float) -> int:
        """Wait for a one-shot command to exit; its exit code."""
        assert self.process is not None
        try:
            return self.process.wait(timeout)
        finally:
            self._close_log()

    def _close_log(self) -> None:
        if self.log is not None:
            self.log.close()
            self.log = None

    def stop(self, grace: float = STOP_GRACE_SECONDS) -> int | None:
        """``docker stop``: SIGTERM to PID 1, SIGKILL after ``grace`` s.

        Returns:
            The command's exit code, or ``None`` when it had to be killed.
        """
        if self.process is None:
            return None
        try:
            if self.process.poll() is not None:
                return self.process.returncode
            os.kill(self.pid, signal.SIGTERM)
            try:
                return self.process.wait(grace)
            except subprocess.TimeoutExpired:
                os.kill(self.pid, signal.SIGKILL)
                self.process.wait()
                return None
        finally:
            self._close_log()
