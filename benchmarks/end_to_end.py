"""Replay end to end: the installed ``vllm-sentinel replay --output json`` on a corpus-shaped
text file, against ``mtail -one_shot`` with the ten marker rules on the same file.

Both are timed from spawn to exit, pinned to the same CPU, rounds interleaved, medians of
``runs``: start-up, reading, the report and exit are in the figure, as a user gets it. The
input is the real-log corpus repeated in order to ``lines`` lines (``corpus.build_text``).

Three ratios come out, each of the two contenders in the same run: lines per second of wall
time (the target's own measure), CPU time (user + system, medians), and instructions executed
from spawn to exit, counted once each under valgrind (``measure.count_instructions``) when it
is installed. On a shared machine the wall and CPU figures move with the neighbours (mtail's
Go runtime more than our single thread); the instruction counts do not, but they are not a
time ratio either: mtail's regex loops run more instructions per cycle than CPython's.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any

import orjson

from benchmarks.corpus import build_text, mtail_program
from benchmarks.install import Install
from benchmarks.measure import (
    ProcessRun,
    count_instructions,
    cpu_for_pinning,
    median,
    run_pinned,
)

__all__ = ["measure_end_to_end"]


def _summary(lines: int, runs: list[ProcessRun]) -> dict[str, Any]:
    wall = median([run.wall_seconds for run in runs])
    return {
        "wall_seconds": wall,
        "cpu_seconds": median([run.cpu_seconds for run in runs]),
        "lines_per_second": lines / wall,
        "peak_rss_bytes": max(run.max_rss_bytes for run in runs),
        "wall_seconds_each": [run.wall_seconds for run in runs],
    }


def measure_end_to_end(
    install: Install, workdir: Path, *, lines: int, runs: int, instructions: bool = True
) -> dict[str, Any]:
    """Build the input, run both ``runs`` times, return the figures and the ratios; with
    ``instructions``, also count each one's instructions once (valgrind, if installed)."""
    text = workdir / "end-to-end.log"
    total = build_text(text, lines)
    progs = workdir / "e2e-progs"
    progs.mkdir(exist_ok=True)
    (progs / "vllm.mtail").write_text(mtail_program())
    cpu = cpu_for_pinning()
    ours: list[ProcessRun] = []
    theirs: list[ProcessRun] = []
    has_mtail = shutil.which("mtail") is not None
    found: dict[str, Any] = {}
    replay = [str(install.command), "replay", "--output", "json", "--format", "text", str(text)]
    mtail = [
        "mtail", "-one_shot", "-one_shot_format=prometheus", "-progs", str(progs),
        "-logs", str(text), "-logtostderr", "-address", "127.0.0.1", "-port", "0",
    ]  # fmt: skip
    for _ in range(runs):
        run = run_pinned(replay, cpu=cpu, cwd="/")
        if run.returncode != 0:
            raise RuntimeError(f"vllm-sentinel replay exited {run.returncode}")
        document = orjson.loads(run.stdout)
        found = {
            "units": len(document["units"]),
            "incarnations": sum(len(unit["incarnations"]) for unit in document["units"]),
            "output_bytes": len(run.stdout),
        }
        ours.append(run)
        if has_mtail:
            theirs.append(run_pinned(mtail, cpu=cpu))
    result: dict[str, Any] = {
        "install": install.how,
        "build": install.build,
        "pinned_cpu": cpu,
        "lines": total,
        "bytes": text.stat().st_size,
        "runs": runs,
        "replay": _summary(total, ours) | {"found": found},
    }
    if theirs:
        result["mtail"] = _summary(total, theirs)
        result["replay_vs_mtail"] = (
            result["replay"]["lines_per_second"] / result["mtail"]["lines_per_second"]
        )
        result["replay_vs_mtail_cpu"] = (
            result["mtail"]["cpu_seconds"] / result["replay"]["cpu_seconds"]
        )
    if instructions:
        ours_count = count_instructions(replay, cwd="/")
        if ours_count is not None:
            result["replay"]["instructions"] = ours_count
            result["replay"]["instructions_per_line"] = ours_count / total
        if ours_count is not None and has_mtail:
            # Go's asynchronous preemption signals trip valgrind's tools; the work is the same
            env = os.environ | {"GODEBUG": "asyncpreemptoff=1"}
            theirs_count = count_instructions(mtail, env=env)
            if theirs_count is not None:
                result["mtail"]["instructions"] = theirs_count
                result["mtail"]["instructions_per_line"] = theirs_count / total
                result["replay_vs_mtail_instructions"] = theirs_count / ours_count
    return result
