"""Podman on these machines: the engine the image and compose tests run on.

Debian's podman 4.3 works here with workarounds that are the sandbox's, not the product's
(issue 17, ENV-NOTES "Containers without a Docker engine"):

- a ``containers.conf`` of our own (``CONTAINERS_CONF``): runtime runc (crun fails,
  "cgroups in hybrid mode not supported") and bounded ulimits; storage of our own
  (``CONTAINERS_STORAGE_CONF``) under ``~/.cache/outbox-monitor/podman`` so the base
  stand-in and the build's layers survive between runs;
- no registry is reachable: ``python:3.11-slim`` is a stand-in made by debootstrap from
  the machine's own apt mirror and ``podman import`` (the Dockerfile stays unchanged);
- ``podman build --pull=never --format docker`` (the OCI format drops HEALTHCHECK);
  no systemd, so health is probed with ``podman healthcheck run NAME``.
"""

import hashlib
import os
import re
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

CACHE = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "outbox-monitor"
ROOT = CACHE / "podman"
BASE_IMAGE = "docker.io/library/python:3.11-slim"
SUITE = "bookworm"
BASE_PACKAGES = ("python3", "python3-venv", "python-is-python3", "ca-certificates")
BASE_ENV = {
    "PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
    "LANG": "C.UTF-8",
    "PIP_CERT": "/etc/ssl/certs/ca-certificates.crt",
}
"""What the stand-in sets: python:3.11-slim's PATH and LANG, and pip's CA bundle (the
machine's CA certificates are copied in: every HTTPS connection here goes through them)."""
HOST_FROM_CONTAINER = "10.0.2.2"
"""The host's 127.0.0.1 as a container on ``SLIRP_NETWORK`` sees it."""
SLIRP_NETWORK = "slirp4netns:allow_host_loopback=true"
TOOLS = ("podman", "runc", "slirp4netns", "debootstrap", "/usr/lib/cni/dnsname")
INSTALL_HINT = "run `make podman` (Debian's podman, runc, slirp4netns, debootstrap, dnsname)"

CONTAINERS_CONF = """\
[containers]
default_ulimits = ["nofile=20000:20000", "nproc=4096:4096"]
[engine]
runtime = "runc"
cgroup_manager = "cgroupfs"
events_logger = "file"
"""


def storage_conf() -> str:
    return (
        '[storage]\ndriver = "overlay"\n'
        f'graphroot = "{ROOT / "storage"}"\nrunroot = "{ROOT / "run"}"\n'
    )


def environment() -> dict[str, str]:
    """The process environment for every podman call: our containers.conf and storage."""
    ROOT.mkdir(parents=True, exist_ok=True)
    conf, storage = ROOT / "containers.conf", ROOT / "storage.conf"
    for path, text in ((conf, CONTAINERS_CONF), (storage, storage_conf())):
        if not path.exists() or path.read_text() != text:
            path.write_text(text)
    return {
        **os.environ,
        "CONTAINERS_CONF": str(conf),
        "CONTAINERS_STORAGE_CONF": str(storage),
    }


def podman(*args: str, timeout: float = 120, check: bool = True, **kwargs):
    """``podman ARGS`` with our configuration; output captured as text.

    Raises:
        AssertionError: ``check`` and a non-zero exit (the message has both streams).
    """
    result = subprocess.run(
        ["podman", *args],
        env=environment(),
        capture_output=True,
        text=True,
        timeout=timeout,
        **kwargs,
    )
    if check and result.returncode != 0:
        raise AssertionError(
            f"podman {' '.join(args)} exited {result.returncode}:\n"
            f"{result.stdout[-3000:]}\n{result.stderr[-3000:]}"
        )
    return result


_why_not: list[str | None] = []


def unavailable() -> str | None:
    """Why podman cannot run containers on this machine, or None when it can (checked
    once per session by running a container of the busybox-free kind: `podman info`)."""
    if _why_not:
        return _why_not[0]
    missing = [tool for tool in TOOLS if shutil.which(tool) is None]
    reason = None
    if missing:
        reason = f"{', '.join(missing)} missing: {INSTALL_HINT}"
    elif os.geteuid() != 0:
        reason = "not root: rootless podman needs subuid ranges this machine lacks"
    else:
        info = podman("info", "--format", "{{.Host.OCIRuntime.Name}}", check=False)
        if info.returncode != 0:
            reason = f"`podman info` fails: {info.stderr.strip()[-500:]}"
    _why_not.append(reason)
    return reason


def apt_mirror() -> str:
    """The Debian mirror of the machine's apt sources (deb822 or one-line format)."""
    sources = sorted(Path("/etc/apt/sources.list.d").glob("*.sources"))
    sources += [Path("/etc/apt/sources.list"), *Path("/etc/apt/sources.list.d").glob("*.list")]
    for path in sources:
        if not path.is_file():
            continue
        text = path.read_text()
        for url in re.findall(r"^\s*URIs:\s*(\S+)", text, re.M) + re.findall(
            r"^\s*deb\s+(?:\[[^\]]*\]\s+)?(\S+)", text, re.M
        ):
            if url.rstrip("/").endswith("/debian"):
                return url
    return "http://deb.debian.org/debian"


def image_exists(name: str) -> bool:
    return podman("image", "exists", name, check=False).returncode == 0


def make_rootfs(target: Path, packages: tuple[str, ...]) -> None:
    """debootstrap a minimal bookworm with ``packages`` and the machine's CA certificates.

    Raises:
        AssertionError: debootstrap or update-ca-certificates failed (with their output).
    """
    steps = [
        [
            "debootstrap",
            "--variant=minbase",
            f"--include={','.join(packages)}",
            SUITE,
            str(target),
            apt_mirror(),
        ],
        ["chroot", str(target), "update-ca-certificates"],
    ]
    for number, step in enumerate(steps):
        if number == 1:
            for cert in Path("/usr/local/share/ca-certificates").glob("*.crt"):
                shutil.copy(cert, target / "usr/local/share/ca-certificates" / cert.name)
        result = subprocess.run(step, capture_output=True, text=True, timeout=900)
        assert result.returncode == 0, f"{step[0]} failed:\n{result.stdout[-3000:]}"
    for cache in ("var/cache/apt/archives", "var/lib/apt/lists"):
        for item in (target / cache).glob("*"):
            if item.is_file():
                item.unlink()


def import_rootfs(rootfs: Path, name: str, changes: list[str]) -> None:
    """``tar -C rootfs -c . | podman import --change … - name``."""
    change_args = [arg for change in changes for arg in ("--change", change)]
    with subprocess.Popen(["tar", "-C", str(rootfs), "-c", "."], stdout=subprocess.PIPE) as tar:
        podman("import", *change_args, "-", name, stdin=tar.stdout, timeout=600)
    assert tar.returncode == 0, "tar of the stand-in's root file system failed"


def ensure_base() -> float:
    """The ``python:3.11-slim`` stand-in, made once and kept in our storage; returns the
    seconds it took (0 when it was there)."""
    if image_exists(BASE_IMAGE):
        return 0.0
    started = time.monotonic()
    with tempfile.TemporaryDirectory(dir=ROOT, prefix="rootfs-") as work:
        rootfs = Path(work) / "rootfs"
        make_rootfs(rootfs, BASE_PACKAGES)
        import_rootfs(rootfs, BASE_IMAGE, [f"ENV {k}={v}" for k, v in BASE_ENV.items()])
    return time.monotonic() - started


def build(
    context: Path, tag: str, containerfile: Path | None = None, target: str | None = None
) -> float:
    """``podman build --pull=never --format docker`` of ``context`` (up to the stage
    ``target``, when given); returns its seconds. Layers are cached in our storage, so an
    unchanged tree builds in seconds."""
    started = time.monotonic()
    args = ["build", "--pull=never", "--format", "docker", "-t", tag]
    if containerfile is not None:
        args += ["-f", str(containerfile)]
    if target is not None:
        args += ["--target", target]
    podman(*args, str(context), timeout=1800)
    return time.monotonic() - started


def drop_older(keyed: str) -> None:
    """Untag the other builds of ``keyed``'s repository and prune dangling images, so the
    cache holds one image per recipe, not one per change of the tree."""
    repository = keyed.rsplit(":", 1)[0]
    listed = podman("images", "--format", "{{.Repository}}:{{.Tag}}", repository).stdout
    older = [
        name
        for name in listed.split()
        if name.startswith(f"{repository}:") and name not in (keyed, IMAGE)
    ]
    if older:
        podman("rmi", *older, check=False, timeout=300)
    podman("image", "prune", "--force", check=False, timeout=300)


def image_size_mb(name: str) -> float:
    size = podman("image", "inspect", "--format", "{{.Size}}", name).stdout.strip()
    return int(size) / 1e6


def content_tag(name: str, *texts: str) -> str:
    """``name:<hash of texts>``: a stand-in rebuilt only when its recipe changes."""
    digest = hashlib.sha256("\0".join(texts).encode()).hexdigest()[:12]
    return f"localhost/{name}:{digest}"


def wait_healthy(container: str, timeout: float) -> str:
    """Run the image's HEALTHCHECK (``podman healthcheck run``) until it passes.

    Returns:
        ``"healthy"``.

    Raises:
        AssertionError: not healthy within ``timeout`` seconds, or the container exited
            (the message has its log's tail).
    """
    deadline = time.monotonic() + timeout
    last = ""
    while time.monotonic() < deadline:
        probe = podman("healthcheck", "run", container, check=False, timeout=60)
        if probe.returncode == 0:
            return "healthy"
        last = probe.stdout + probe.stderr
        state = podman("inspect", "--format", "{{.State.Status}}", container, check=False)
        if state.stdout.strip() not in ("running", "created"):
            break
        time.sleep(1)
    logs = podman("logs", container, check=False)
    raise AssertionError(
        f"{container} not healthy: {last.strip()}\n{logs.stdout[-2000:]}{logs.stderr[-2000:]}"
    )


REQUIRE_ENV = "OUTBOX_MONITOR_REQUIRE_PODMAN"
"""Set by ``make test`` (which installs podman first): a missing tool fails the tests;
a podman that is there but cannot run containers still skips them, loudly."""
IMAGE = "localhost/outbox-monitor:test"
_built: dict[str, float] = {}


def built_image(repo: Path) -> dict[str, float]:
    """The image of the Dockerfile in ``repo``, built once per session on the stand-in
    base; returns the seconds of each step and the image's size.

    Skips, loudly, where podman cannot run (fails instead under ``REQUIRE_ENV``).
    """
    import pytest

    reason = unavailable()
    if reason is not None:
        message = f"PODMAN CANNOT RUN HERE, THE IMAGE IS NOT BUILT NOR TESTED: {reason}"
        if os.environ.get(REQUIRE_ENV) and reason.endswith(INSTALL_HINT):
            pytest.fail(message)
        pytest.skip(message)
    if not _built:
        _built["base_seconds"] = ensure_base()
        base = image_id(BASE_IMAGE)
        keyed = content_tag("outbox-monitor", base, *context_texts(repo))
        started = time.monotonic()
        if not image_exists(keyed):
            # the dependencies' stage, tagged: `podman image prune` (``drop_older``) removes
            # the untagged images of a multi-stage build's other stages, and with them the
            # cache of the 550 MB virtualenv (it was built again at every change of the tree)
            deps = content_tag(
                "outbox-monitor-deps",
                base,
                *[text for text in context_texts(repo) if text.startswith(DEPS_RECIPE)],
            )
            if not image_exists(deps):
                build(repo, deps, target=DEPS_STAGE)
                drop_older(deps)
            build(repo, keyed)
        _built["build_seconds"] = time.monotonic() - started
        podman("tag", keyed, IMAGE)
        drop_older(keyed)
        _built["size_mb"] = image_size_mb(IMAGE)
    return _built


DEPS_STAGE = "deps"
"""The Dockerfile's stage of the dependencies' virtualenv, built from the lock alone."""
DEPS_RECIPE = ("Dockerfile\0", "requirements-runtime.lock\0")
"""The build context's files that stage depends on (``context_texts``' prefixes)."""


SKIPPED_FOLDERS = {".git", ".venv", "node_modules", "test-artifacts", "__pycache__"}


def context_texts(repo: Path) -> list[str]:
    """Each file of the build context (what .dockerignore admits) as ``path`` and content:
    the image is rebuilt only when one changes. Even fully cached, ``podman build`` takes
    ≈ 20 s here (it hashes the 550 MB virtualenv again for ``COPY --from``)."""
    from tests.deploy.test_dockerfile import _ignored

    rules = []
    for raw in (repo / ".dockerignore").read_text().splitlines():
        line = raw.strip()
        if line and not line.startswith("#"):
            rules.append((line.startswith("!"), line.lstrip("!")))
    texts = []
    for folder, subfolders, files in os.walk(repo):
        subfolders[:] = sorted(name for name in subfolders if name not in SKIPPED_FOLDERS)
        for name in sorted(files):
            path = Path(folder, name)
            relative = str(path.relative_to(repo))
            if relative in ("Dockerfile", ".dockerignore") or not _ignored(relative, rules):
                texts.append(f"{relative}\0{hashlib.sha256(path.read_bytes()).hexdigest()}")
    return texts


def image_id(name: str) -> str:
    return podman("image", "inspect", "--format", "{{.Id}}", name).stdout.strip()
