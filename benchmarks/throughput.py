"""Engine throughput on corpus-built input, against mtail and grep on the same bytes.

Each contender is a child process pinned to the same single CPU, timed from spawn to exit
(start-up included for everyone) with its CPU time and peak RSS from ``wait4``. Rounds are
interleaved (engine, mtail, grep, then again) so a noisy neighbour hits all of them alike; the
figures are medians over the rounds. mtail's counters are checked against ``grep -c`` per rule:
the references count the same thing.
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path
from typing import Any

import orjson

from benchmarks.corpus import (
    ROOT,
    RULES,
    build_journal_json,
    build_text,
    mtail_program,
)
from benchmarks.measure import ProcessRun, cpu_for_pinning, median, run_pinned

__all__ = ["measure_throughput"]


def _engine(mode: str, path: Path, cpu: int) -> tuple[ProcessRun, dict[str, Any]]:
    run = run_pinned(
        [sys.executable, "-m", "benchmarks.engine", mode, str(path)], cpu=cpu, cwd=ROOT
    )
    if run.returncode != 0:
        raise RuntimeError(f"benchmarks.engine {mode} {path} exited {run.returncode}")
    return run, orjson.loads(run.stdout.splitlines()[-1])


def _mtail(progs: Path, path: Path, cpu: int) -> tuple[ProcessRun, dict[str, int]]:
    argv = [
        "mtail", "-one_shot", "-one_shot_format=prometheus", "-progs", str(progs),
        "-logs", str(path), "-logtostderr", "-address", "127.0.0.1", "-port", "0",
    ]  # fmt: skip
    run = run_pinned(argv, cpu=cpu)
    counts: dict[str, int] = {}
    for line in run.stdout.decode().splitlines():
        if line.startswith("vllm_marker_"):
            name, value = line.split("{", 1)[0], line.rsplit(" ", 1)[1]
            counts[name.removeprefix("vllm_marker_")] = int(float(value))
    return run, counts


def _grep_argv(path: Path) -> list[str]:
    argv = ["grep", "-cE"]
    for _, pattern in RULES:
        argv += ["-e", pattern]
    return [*argv, str(path)]


def _rate(lines: int, seconds: float) -> float:
    return lines / seconds if seconds > 0 else float("nan")


def _summary(
    lines: int, runs: list[ProcessRun], work_cpu: list[float] | None = None
) -> dict[str, Any]:
    wall = median([run.wall_seconds for run in runs])
    cpu = median([run.cpu_seconds for run in runs])
    result: dict[str, Any] = {
        "lines": lines,
        "runs": len(runs),
        "wall_seconds": wall,
        "cpu_seconds": cpu,
        "lines_per_second": _rate(lines, wall),
        "lines_per_cpu_second": _rate(lines, cpu),
        "peak_rss_bytes": max(run.max_rss_bytes for run in runs),
        "wall_seconds_each": [run.wall_seconds for run in runs],
    }
    if work_cpu is not None:  # the engine's own loop, start-up excluded
        result["work_cpu_seconds"] = median(work_cpu)
        result["work_lines_per_second"] = _rate(lines, median(work_cpu))
    return result


def measure_throughput(workdir: Path, *, min_lines: int, runs: int) -> dict[str, Any]:
    """Build the inputs, run every contender ``runs`` times, return the figures."""
    text = workdir / "corpus.log"
    text_lines = build_text(text, min_lines)
    json_inputs = build_journal_json(workdir, min_lines)
    progs = workdir / "progs"
    progs.mkdir(exist_ok=True)
    (progs / "vllm.mtail").write_text(mtail_program())
    cpu = cpu_for_pinning()
    has_mtail = shutil.which("mtail") is not None

    runs_of: dict[str, list[ProcessRun]] = {}
    work_of: dict[str, list[float]] = {}
    found_of: dict[str, dict[str, Any]] = {}
    mtail_counts: dict[str, int] = {}
    contenders: list[tuple[str, Path]] = [
        ("engine_text", text),
        ("engine_json_cut", json_inputs.cut),
        ("engine_json_full", json_inputs.full),
        ("orjson_floor_cut", json_inputs.cut),
    ]
    for _ in range(runs):
        for name, path in contenders:
            mode = {"engine_text": "text", "orjson_floor_cut": "orjson"}.get(name, "json")
            run, found = _engine(mode, path, cpu)
            runs_of.setdefault(name, []).append(run)
            work_of.setdefault(name, []).append(float(found.pop("cpu_seconds")))
            found_of[name] = found
        if has_mtail:
            run, mtail_counts = _mtail(progs, text, cpu)
            runs_of.setdefault("mtail_text", []).append(run)
        runs_of.setdefault("grep_text", []).append(run_pinned(_grep_argv(text), cpu=cpu))
        runs_of.setdefault("grep_json_cut", []).append(
            run_pinned(_grep_argv(json_inputs.cut), cpu=cpu)
        )

    grep_counts = {
        name: int(run_pinned(["grep", "-cE", "-e", pattern, str(text)], cpu=None).stdout or 0)
        for name, pattern in RULES
    }
    lines = {
        "engine_text": text_lines,
        "mtail_text": text_lines,
        "grep_text": text_lines,
        "engine_json_cut": json_inputs.records,
        "engine_json_full": json_inputs.records,
        "orjson_floor_cut": json_inputs.records,
        "grep_json_cut": json_inputs.records,
    }
    contenders_out = {
        name: _summary(lines[name], measured, work_of.get(name))
        for name, measured in runs_of.items()
    }
    for name, found in found_of.items():
        contenders_out[name]["found"] = found

    def ratio(a: str, b: str) -> float | None:
        if a not in contenders_out or b not in contenders_out:
            return None
        return float(contenders_out[a]["lines_per_second"] / contenders_out[b]["lines_per_second"])

    return {
        "pinned_cpu": cpu,
        "inputs": {
            "text_lines": text_lines,
            "text_bytes": text.stat().st_size,
            "json_records": json_inputs.records,
            "json_full_bytes_per_record": json_inputs.bytes_full,
            "json_cut_bytes_per_record": json_inputs.bytes_cut,
            "json_full_fields_per_record": json_inputs.fields_full,
            "json_cut_fields_per_record": json_inputs.fields_cut,
        },
        "rules": [pattern for _, pattern in RULES],
        "contenders": contenders_out,
        "ratios": {
            "engine_text_vs_mtail": ratio("engine_text", "mtail_text"),
            "engine_text_vs_grep": ratio("engine_text", "grep_text"),
            "engine_json_cut_vs_mtail_text": ratio("engine_json_cut", "mtail_text"),
            "engine_json_cut_vs_grep_json": ratio("engine_json_cut", "grep_json_cut"),
            "engine_json_cut_vs_full": ratio("engine_json_cut", "engine_json_full"),
        },
        "mtail_available": has_mtail,
        "mtail_counts": mtail_counts,
        "grep_counts": grep_counts,
        "references_agree": (not has_mtail) or mtail_counts == grep_counts,
    }
