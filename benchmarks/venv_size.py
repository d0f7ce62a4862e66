"""The image's virtualenv, package by package: installed, then after the Dockerfile's cut.

Builds the wheel (``python -m build --wheel``, from a copy of the sources) and installs, as
the Dockerfile's stages do, into a fresh virtualenv in a temporary folder: pip of
the Makefile's version, ``requirements-runtime.lock`` (hashed, byte-compiled), the wheel
(no dependencies). Measures every distribution (the files its RECORD lists that exist,
``.pyc`` included), runs the Dockerfile's own cut (``image_trim_command``, ``/opt/venv``
translated) and measures again. The whole folder is measured too (what no RECORD lists:
the interpreter's links, ``pyvenv.cfg``, … is "rest").

Usage (from the repository root; ``build`` is in the test extras)::

    .venv/bin/python benchmarks/venv_size.py            # ≈ 1–2 min with pip's cache warm

The report goes to stdout as Markdown (MiB = 2^20 bytes); progress goes to stderr. Needs
Python 3.11 (the image's paths name it) and the package registry or pip's cache.
"""

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from tests.deploy.deployfiles import IMAGE_VENV, image_trim_command
from tests.deploy.test_wheel import PIP_VERSION, REPO, copy_sources

SIZES = """
import json, os
from importlib import metadata
sizes = {}
for dist in metadata.distributions():
    total = 0
    for file in dist.files or ():
        path = file.locate()
        if os.path.isfile(path) and not os.path.islink(path):
            total += os.path.getsize(path)
    sizes[dist.metadata["Name"]] = total
print(json.dumps(sizes))
"""
"""Run by the virtualenv's own Python: bytes per distribution."""
MIB = 2**20


def step(what: str, command: list, **options) -> None:
    print(f"{what}…", file=sys.stderr, flush=True)
    subprocess.run(command, check=True, **options)


def folder_bytes(folder: Path) -> int:
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file() and not p.is_symlink())


def measure(venv: Path) -> tuple[dict[str, int], int]:
    """Bytes per distribution and the folder's total."""
    env = {key: value for key, value in os.environ.items() if key != "PYTHONPATH"}
    command = [venv / "bin" / "python", "-c", SIZES]
    done = subprocess.run(command, check=True, capture_output=True, text=True, env=env)
    return json.loads(done.stdout), folder_bytes(venv)


def install(root: Path) -> Path:
    """The image's virtualenv under ``root`` (before the cut)."""
    source, dist, venv = root / "src", root / "dist", root / "venv"
    copy_sources(source)
    quiet = {"stdout": subprocess.DEVNULL}
    step("wheel", [sys.executable, "-m", "build", "--wheel", "--outdir", dist, source], **quiet)
    env = {key: value for key, value in os.environ.items() if key != "PYTHONPATH"}
    step("virtualenv", [sys.executable, "-m", "venv", venv], env=env)
    pip = [venv / "bin" / "python", "-m", "pip", "--quiet", "--disable-pip-version-check"]
    step("pip", [*pip, "install", f"pip=={PIP_VERSION}"], env=env)
    lock = REPO / "requirements-runtime.lock"
    step("lock", [*pip, "install", "--require-hashes", "-r", lock], env=env)
    (wheel,) = dist.glob("*.whl")
    step("the wheel", [*pip, "install", "--no-deps", wheel], env=env)
    return venv


def report(before: tuple[dict[str, int], int], after: tuple[dict[str, int], int]) -> str:
    (installed, total), (kept, kept_total) = before, after
    rest = total - sum(installed.values())
    kept_rest = kept_total - sum(kept.values())
    lines = [
        "| distribution | installed MiB | in the image MiB | cut MiB |",
        "|---|---:|---:|---:|",
    ]
    for name in sorted(installed, key=lambda n: (-installed[n], n.lower())):
        size, left = installed[name], kept.get(name, 0)
        cut = "uninstalled" if name not in kept else f"{(size - left) / MIB:.1f}"
        lines.append(f"| {name} | {size / MIB:.1f} | {left / MIB:.1f} | {cut} |")
    lines.append(f"| (rest: no RECORD lists it) | {rest / MIB:.1f} | {kept_rest / MIB:.1f} | |")
    lines.append(
        f"| **the virtualenv** | **{total / MIB:.1f}** | **{kept_total / MIB:.1f}** | "
        f"**{(total - kept_total) / MIB:.1f}** |"
    )
    return "\n".join(lines)


def main() -> None:
    with tempfile.TemporaryDirectory(prefix="outbox-monitor-venv-size-") as folder:
        venv = install(Path(folder))
        before = measure(venv)
        trim = image_trim_command().replace(IMAGE_VENV, str(venv))
        step("the Dockerfile's cut", ["sh", "-ec", trim])
        print(report(before, measure(venv)))


if __name__ == "__main__":
    main()
