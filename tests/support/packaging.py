"""Build the package the way users do, once per test session: a copy of the tree, a wheelhouse.

``tracked_tree(dst)`` copies what ``git clone`` would give (tracked files, as they are in the
working tree) so that builds never write into the checkout. ``wheelhouse(dst)`` fills a
directory with the wheels an offline ``pip install .`` needs: the runtime dependencies and the
build requirements of ``pyproject.toml``, plus vllm-sentinel's own pure-Python wheel, built
with ``pip wheel -v`` (its log is returned: the build must be quiet).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

__all__ = ["ROOT", "backend_output", "build_env", "pip_env", "tracked_tree", "wheelhouse"]

ROOT = Path(__file__).resolve().parents[2]


def tracked_tree(dst: Path) -> Path:
    """Copy the tracked files of the checkout (working-tree contents) to ``dst``."""
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=ROOT,
        capture_output=True,
        check=True,
    ).stdout
    for name in filter(None, listed.decode().split("\0")):
        source = ROOT / name
        if not source.is_file():
            continue  # deleted in the working tree
        target = dst / name
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(source, target)
    return dst


def build_env(**extra: str) -> dict[str, str]:
    """This process's environment without what would change a build's output or its log.

    ``PYTHONDONTWRITEBYTECODE`` makes setuptools print "byte-compiling is disabled" warnings
    that a user's build does not print; ``VLLM_SENTINEL_PURE`` is set by the caller or not.
    """
    env = {
        key: value
        for key, value in os.environ.items()
        if key not in ("PYTHONDONTWRITEBYTECODE", "VLLM_SENTINEL_PURE", "PYTHONPATH")
    }
    return {**env, "PIP_DISABLE_PIP_VERSION_CHECK": "1", **extra}


def pip_env(**extra: str) -> dict[str, str]:
    """``build_env`` for pip as a fresh machine has it: no pip config of this machine's."""
    env = {key: value for key, value in build_env().items() if not key.startswith("PIP_")}
    return {**env, "PIP_CONFIG_FILE": os.devnull, "PIP_DISABLE_PIP_VERSION_CHECK": "1", **extra}


def wheelhouse(dst: Path, tree: Path) -> str:
    """Fill ``dst`` with every wheel an offline ``pip install tree`` needs; return the build log.

    Raises:
        subprocess.CalledProcessError: pip failed (its output is in the exception).
    """
    project = tomllib.loads((tree / "pyproject.toml").read_text(encoding="utf-8"))
    build_requires = project["build-system"]["requires"]
    result = subprocess.run(
        [
            sys.executable, "-m", "pip", "wheel", "-v", "--wheel-dir", str(dst),
            str(tree), *build_requires,
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,  # one log, in the order pip wrote it
        env=pip_env(VLLM_SENTINEL_PURE="1"),
        timeout=600,
        check=True,
    )  # fmt: skip
    return result.stdout.decode(errors="replace")


def backend_output(log: str, project: str = "vllm-sentinel") -> str:
    """The build backend's own lines in a ``pip wheel -v`` log of ``project``.

    From the "Getting requirements to build wheel" hook to "Created wheel for PROJECT": what
    setuptools and ``setup.py`` print, without pip's lines about indexes and dependencies.
    """
    lines = log.splitlines()
    start = next(
        (i for i, line in enumerate(lines) if "Running command Getting requirements" in line), None
    )
    end = next((i for i, line in enumerate(lines) if f"Created wheel for {project}" in line), None)
    if start is None or end is None:
        raise ValueError(f"not a pip wheel -v log of {project}:\n{log[-2000:]}")
    return "\n".join(lines[start:end])
