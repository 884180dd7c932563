"""CLI start-up: each command from spawn to exit, against ``python -c pass`` in the same run.

The commands are the installed console script (``benchmarks.install``), run with their
output discarded, a fresh process each time, rounds interleaved (reference, then every
command, then again) so that a noisy neighbour hits all alike; each figure is the median of
``runs`` rounds, wall time from spawn to exit and CPU time from ``wait4``. ``pydantic``'s own
import is timed too: ``check-config`` validates with it, so it is that command's floor.
"""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path
from typing import Any

from benchmarks.corpus import ROOT
from benchmarks.install import Install
from benchmarks.measure import median

__all__ = ["COMMANDS", "measure_startup"]

SMALL_LOG = ROOT / "tests/golden/logs/101-journald-v0.15.1-boot-kv-too-small-restart-then-ready.log"

COMMANDS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("version", ("--version",)),
    ("help", ("--help",)),
    ("watch_help", ("watch", "--help")),
    ("replay_small_file", ("replay", str(SMALL_LOG))),
    ("check_config", ("check-config", str(ROOT / "config.example.toml"))),
)
"""(name, arguments): the commands whose start is measured."""


def _spawn(argv: list[str]) -> tuple[float, float, int]:
    started = time.perf_counter()
    process = subprocess.Popen(
        argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        cwd="/",
    )  # fmt: skip
    _, status, usage = os.wait4(process.pid, 0)
    return time.perf_counter() - started, usage.ru_utime + usage.ru_stime, status


def measure_startup(install: Install, *, runs: int) -> dict[str, Any]:
    """Run the reference and every command ``runs`` times; return medians and ratios."""
    python = str(install.python)
    argvs: dict[str, list[str]] = {
        "python_pass": [python, "-c", "pass"],
        **{name: [str(install.command), *args] for name, args in COMMANDS},
        "import_pydantic": [python, "-c", "import pydantic; from pydantic import BaseModel"],
    }
    walls: dict[str, list[float]] = {name: [] for name in argvs}
    cpus: dict[str, list[float]] = {name: [] for name in argvs}
    for argv in argvs.values():  # warm the page cache once
        _, _, status = _spawn(argv)
        if os.waitstatus_to_exitcode(status) != 0:
            raise RuntimeError(f"{' '.join(argv)} failed ({status})")
    for _ in range(runs):
        for name, argv in argvs.items():
            wall, cpu, _ = _spawn(argv)
            walls[name].append(wall)
            cpus[name].append(cpu)
    reference = median(walls["python_pass"])
    commands: dict[str, Any] = {}
    for name in argvs:
        wall = median(walls[name])
        commands[name] = {
            "argv": [Path(argvs[name][0]).name, *argvs[name][1:]],
            "wall_seconds": wall,
            "cpu_seconds": median(cpus[name]),
            "vs_python_pass": wall / reference,
            "wall_seconds_each": walls[name],
        }
    return {
        "install": install.how,
        "build": install.build,
        "runs": runs,
        "reference": "python_pass",
        "commands": commands,
    }
