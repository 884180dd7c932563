"""Measuring processes: run one pinned to a CPU, read CPU time and memory from ``/proc``."""

from __future__ import annotations

import os
import re
import shutil
import statistics
import subprocess
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

__all__ = [
    "ProcessRun",
    "ProcessSample",
    "count_instructions",
    "cpu_for_pinning",
    "descendants",
    "median",
    "percentile",
    "run_pinned",
    "sample_process",
]

_TICK = os.sysconf("SC_CLK_TCK")
_GNU_TIME = "/usr/bin/time"
_PAGE = os.sysconf("SC_PAGE_SIZE")


def cpu_for_pinning() -> int:
    """The CPU measured processes are pinned to: the last one this process may use."""
    return max(os.sched_getaffinity(0))


@dataclass(frozen=True, slots=True)
class ProcessRun:
    """One finished child: wall time from spawn to exit, CPU time, peak RSS, its stdout."""

    wall_seconds: float
    cpu_seconds: float
    max_rss_bytes: int
    stdout: bytes
    returncode: int


def run_pinned(
    argv: Sequence[str],
    *,
    cpu: int | None,
    env: dict[str, str] | None = None,
    cwd: str | Path | None = None,
    stdin: int | None = subprocess.DEVNULL,
) -> ProcessRun:
    """Run ``argv`` to its end pinned to ``cpu`` (``None``: any); measure it with ``wait4``."""

    command = list(argv) if cpu is None else ["taskset", "--cpu-list", str(cpu), *argv]
    # A child forked from this (large) process inherits its peak RSS in ru_maxrss, so the
    # peak is taken from GNU time, whose own child starts small.
    rss_file = None
    if os.access(_GNU_TIME, os.X_OK):
        handle, rss_file = tempfile.mkstemp(prefix="bench-rss-")
        os.close(handle)
        command = [_GNU_TIME, "--format=%M", f"--output={rss_file}", *command]
    start = time.perf_counter()
    process = subprocess.Popen(
        command,
        stdin=stdin,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        env=env,
        cwd=cwd,
    )
    assert process.stdout is not None
    stdout = process.stdout.read()
    _, status, usage = os.wait4(process.pid, 0)
    wall = time.perf_counter() - start
    process.returncode = os.waitstatus_to_exitcode(status)
    process.stdout.close()
    max_rss = usage.ru_maxrss * 1024
    if rss_file is not None:
        text = Path(rss_file).read_text().strip().splitlines()
        Path(rss_file).unlink()
        max_rss = int(text[-1]) * 1024 if text and text[-1].isdigit() else max_rss
    return ProcessRun(
        wall_seconds=wall,
        cpu_seconds=usage.ru_utime + usage.ru_stime,
        max_rss_bytes=max_rss,
        stdout=stdout,
        returncode=process.returncode,
    )


_I_REFS = re.compile(r"I\s+refs:\s+([\d,]+)")


def count_instructions(
    argv: Sequence[str], *, env: dict[str, str] | None = None, cwd: str | Path | None = None
) -> int | None:
    """Instructions ``argv`` executes from spawn to exit, counted by valgrind (cachegrind,
    no cache simulation: ``I refs``, every thread of the process); ``None`` without valgrind.

    A count does not depend on the machine's load, unlike wall and CPU time: on a shared
    machine it is the steady figure to compare two programs by (their instructions per cycle
    differ, so it is not a time ratio). A script's ``#!`` interpreter is run under valgrind.
    """
    if shutil.which("valgrind") is None:
        return None
    handle, log = tempfile.mkstemp(prefix="bench-valgrind-")
    os.close(handle)
    try:
        command = [
            "valgrind", "--tool=cachegrind", "--cache-sim=no", "--branch-sim=no",
            "--cachegrind-out-file=/dev/null", f"--log-file={log}", *argv,
        ]  # fmt: skip
        result = subprocess.run(
            command, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL, env=env, cwd=cwd, check=False,
        )  # fmt: skip
        found = _I_REFS.search(Path(log).read_text(errors="replace"))
        if result.returncode != 0 or found is None:
            raise RuntimeError(f"valgrind could not count {argv[0]} (exit {result.returncode})")
        return int(found.group(1).replace(",", ""))
    finally:
        Path(log).unlink(missing_ok=True)


@dataclass(frozen=True, slots=True)
class ProcessSample:
    """A running process at one moment: cumulative CPU seconds, current and peak RSS."""

    at: float
    cpu_seconds: float
    rss_bytes: int
    peak_rss_bytes: int


def _stat_cpu(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / _TICK  # utime, stime


def sample_process(pid: int) -> ProcessSample:
    """Read ``/proc/PID``: CPU seconds so far (user + system), VmRSS and VmHWM."""
    rss = peak = 0
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            rss = int(line.split()[1]) * 1024
        elif line.startswith("VmHWM:"):
            peak = int(line.split()[1]) * 1024
    return ProcessSample(time.perf_counter(), _stat_cpu(pid), rss, peak)


def descendants(pid: int) -> list[int]:
    """PIDs of every process below ``pid`` (children, their children…)."""
    parents: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            fields = Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        parents.setdefault(int(fields[1]), []).append(int(entry))
    found: list[int] = []
    todo = [pid]
    while todo:
        for child in parents.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


def cpu_of(pids: Sequence[int]) -> float:
    """Summed CPU seconds of ``pids`` (processes that are gone count 0)."""
    total = 0.0
    for pid in pids:
        try:
            total += _stat_cpu(pid)
        except OSError:
            continue
    return total


def median(values: Sequence[float]) -> float:
    """The median (the middle run of an odd number of runs)."""
    return float(statistics.median(values))


def percentile(values: Sequence[float], fraction: float) -> float:
    """The ``fraction`` quantile by the nearest-rank method (p99 of 300 = the 297th value)."""
    ordered = sorted(values)
    if not ordered:
        return float("nan")
    rank = max(1, min(len(ordered), int(-(-fraction * len(ordered) // 1))))
    return ordered[rank - 1]


def wait_until(
    predicate: Callable[[], bool], timeout: float, what: str, step: float = 0.05
) -> None:
    """Poll ``predicate`` until true; ``TimeoutError`` naming ``what`` after ``timeout``."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out after {timeout:g}s waiting for {what}")
        time.sleep(step)
