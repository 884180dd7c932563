"""The command as a user gets it: ``pip install .`` into a fresh virtual environment.

The CLI start-up and end-to-end replay sections measure the installed ``vllm-sentinel``
console script of such an install (the compiled build, when a C compiler is at hand: see
``setup.py``), not a development checkout: an editable install adds an import hook to every
start, and ``VLLM_SENTINEL_PURE=1`` skips the compiled modules.
"""

from __future__ import annotations

import os
import subprocess
import sys
import venv
from dataclasses import dataclass
from pathlib import Path

from benchmarks.corpus import ROOT

__all__ = ["Install", "current_environment", "fresh_install"]


@dataclass(frozen=True, slots=True)
class Install:
    """A Python with vllm-sentinel installed: its interpreter, its console script, its build."""

    python: Path
    command: Path
    build: str  # "compiled" (mypyc extensions) or "pure"
    how: str  # what was measured, in words


def _build_of(python: Path) -> str:
    probe = "import vllm_sentinel.engine.tracker as t; print('pure' if t.__file__.endswith('.py') else 'compiled')"
    result = subprocess.run(
        [str(python), "-c", probe], capture_output=True, text=True, check=True, cwd="/"
    )
    return result.stdout.strip()


def fresh_install(directory: Path) -> Install:
    """Create a venv in ``directory`` (kept if it already holds an install) and
    ``pip install`` the repository into it, as a user would; return it."""
    python = directory / "bin" / "python"
    command = directory / "bin" / "vllm-sentinel"
    if not command.exists():
        venv.EnvBuilder(with_pip=True, clear=True).create(directory)
        env = {key: value for key, value in os.environ.items() if key != "VLLM_SENTINEL_PURE"}
        subprocess.run(
            [str(python), "-m", "pip", "install", "--quiet", str(ROOT)],
            check=True, env=env, cwd=directory, timeout=1800,
        )  # fmt: skip
    return Install(python, command, _build_of(python), f"pip install . into {directory}")


def current_environment() -> Install:
    """The interpreter running the benchmarks and its ``vllm-sentinel`` (``--quick``)."""
    python = Path(sys.executable)
    command = python.parent / "vllm-sentinel"
    if not command.exists():
        raise RuntimeError(f"no vllm-sentinel next to {python}: install the package first")
    return Install(python, command, _build_of(python), f"this environment ({python.parent})")
