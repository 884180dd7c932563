"""``python -m benchmarks``: run the suite, print the table, write the JSON report.

Sections (``--only`` picks some): ``cli`` (start-up of each command against ``python -c
pass``), ``replay`` (end to end against mtail), ``throughput``, ``latency``, ``footprint``,
``scrape``. ``cli`` and ``replay`` measure the installed command of ``pip install .`` into a
fresh venv (``--venv DIR`` keeps or reuses it; ``--quick`` uses this environment's). A
section that fails is reported with its error and the others still run; the exit status is 1
when any failed. ``--quick`` shrinks every input and window to a smoke test (seconds): its
figures mean nothing.
"""

from __future__ import annotations

import argparse
import math
import os
import platform
import shutil
import sys
import tempfile
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import orjson

from benchmarks.corpus import ROOT
from benchmarks.end_to_end import measure_end_to_end
from benchmarks.footprint import measure_footprint
from benchmarks.install import Install, current_environment, fresh_install
from benchmarks.latency import measure_latency
from benchmarks.scrape import measure_scrape
from benchmarks.startup import COMMANDS, measure_startup
from benchmarks.throughput import measure_throughput
from vllm_sentinel import __version__
from vllm_sentinel.log import configure_logging

SECTIONS = ("cli", "replay", "throughput", "latency", "footprint", "scrape")
DEFAULT_OUTPUT = ROOT / "benchmarks" / "results" / "latest.json"


@dataclass(frozen=True, slots=True)
class Plan:
    """Sizes of one run."""

    min_lines: int
    runs: int
    incarnations: int
    poll_seconds: float
    window: float
    rates: tuple[int, ...]
    fleet_sizes: tuple[int, ...]
    fleet_rate: int
    scrape_hosts: int
    scrape_runs: int
    fleet_windows: int
    cli_runs: int
    end_to_end_lines: int
    end_to_end_runs: int


FULL = Plan(
    1_000_000, 3, 30, 0.002, 20.0, (1_000, 10_000), (50, 200), 1_000, 200, 10, 3, 10, 300_000, 5
)
QUICK = Plan(5_000, 1, 2, 0.002, 1.0, (1_000, 10_000), (2,), 1_000, 4, 2, 1, 2, 5_000, 1)

FLEET_RSS_BEFORE = 179e6
"""Peak RSS of the daemon watching 200 SSH hosts before the streams (reference.json of
2026-11-30): the fleet's memory must not grow."""


def _section(name: str, function: Callable[[], dict[str, Any]]) -> dict[str, Any]:
    started = time.perf_counter()
    print(f"[{name}] running…", file=sys.stderr, flush=True)
    try:
        result = function()
    except Exception as error:
        traceback.print_exc()
        result = {"error": f"{type(error).__name__}: {error}"}
    result["section_seconds"] = time.perf_counter() - started
    return result


def _operand(rest: tuple[str, ...]) -> str:
    """How a target row names a command's arguments: ``--help`` as it is, a path as FILE."""
    if not rest:
        return ""
    return f" {rest[0]}" if rest[0].startswith("--") else " FILE"


def _get(report: dict[str, Any], *path: str) -> Any:
    node: Any = report
    for key in path:
        if not isinstance(node, dict) or key not in node:
            return None
        node = node[key]
    return node


def targets(report: dict[str, Any]) -> list[dict[str, Any]]:
    """The issue's targets against this report's figures (``met`` is None when not measured)."""

    def row(name: str, value: Any, limit: float, *, above: bool, unit: str) -> dict[str, Any]:
        met = None if value is None else (value >= limit if above else value < limit)
        return {"target": name, "value": value, "limit": limit, "unit": unit, "met": met}

    fleet = _get(report, "footprint", "fleet") or {}
    largest = max(fleet.values(), key=lambda item: item["hosts"], default=None)
    largest_rate = None if largest is None else next(
        (value for key, value in largest.items() if key.startswith("rate_")), None
    )  # fmt: skip
    hosts = largest["hosts"] if largest else 200  # the fleet when not measured
    scraped = _get(report, "scrape", "hosts") or 200
    starts = [
        row(f"`vllm-sentinel {args[0]}{_operand(args[1:])}` start ≤ 10× `python -c pass`",
            _get(report, "cli", "commands", name, "vs_python_pass"), 10.0, above=False, unit="×")
        for name, args in COMMANDS
    ]  # fmt: skip
    idle = None if largest is None else largest["idle"]
    return [
        *starts,
        row("replay end to end (installed, spawn to exit) ≥ 5× mtail (aim 10×)",
            _get(report, "replay", "replay_vs_mtail"), 5.0, above=True, unit="×"),
        row("… the same in CPU time (user + system) ≥ 5× mtail",
            _get(report, "replay", "replay_vs_mtail_cpu"), 5.0, above=True, unit="×"),
        row("… the same in instructions executed ≥ 5× fewer than mtail",
            _get(report, "replay", "replay_vs_mtail_instructions"), 5.0, above=True, unit="×"),
        row("text: engine ≥ 5× mtail lines/s (aim 10×)",
            _get(report, "throughput", "ratios", "engine_text_vs_mtail"), 5.0, above=True,
            unit="×"),
        row("journal JSON ≥ 200,000 records/s",
            _get(report, "throughput", "contenders", "engine_json_cut", "lines_per_second"),
            200_000, above=True, unit="records/s"),
        row("detection latency p99 < 250 ms",
            _get(report, "latency", "p99_seconds"), 0.250, above=False, unit="s"),
        row("idle (8 units) < 1% of a core",
            _get(report, "footprint", "local", "idle", "cpu_percent"), 1.0, above=False, unit="%"),
        row("idle (8 units) < 80 MB RSS",
            _get(report, "footprint", "local", "idle", "peak_rss_bytes"), 80e6, above=False,
            unit="bytes"),
        row(f"{hosts} SSH hosts × 8 units + GPU, idle < 10% of a core",
            None if idle is None else idle["cpu_percent"], 10.0, above=False, unit="%"),
        row(f"{hosts} SSH hosts at 1,000 records/s < 25% of a core",
            None if largest_rate is None else largest_rate["cpu_percent"], 25.0, above=False,
            unit="%"),
        row(f"{hosts} SSH hosts: peak RSS not above before the streams (179 MB)",
            None if largest_rate is None else largest_rate["peak_rss_bytes"],
            FLEET_RSS_BEFORE * 1.0001, above=False, unit="bytes"),
        row(f"/metrics for {scraped}×8 rendered < 50 ms (hosts republished unchanged)",
            _get(report, "scrape", "text", "render_seconds"), 0.050, above=False, unit="s"),
        row(f"/metrics for {scraped}×8 rendered < 50 ms (every host changed)",
            _get(report, "scrape", "text", "render_all_hosts_changed_seconds"), 0.050,
            above=False, unit="s"),
    ]  # fmt: skip


def _fmt(value: Any, unit: str = "") -> str:
    if value is None:
        return "—"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float) and math.isnan(value):
        return "nan"
    if unit == "s":
        return f"{value * 1000:.1f} ms" if value < 1 else f"{value:.2f} s"
    if unit == "bytes":
        return f"{value / 1e6:.1f} MB"
    if unit == "%":
        return f"{value:.2f} %"
    if unit == "×":
        return f"{value:.2f}×"
    if unit == "/s":
        return f"{value:,.0f}/s"
    return f"{value:,.0f}" if isinstance(value, (int, float)) and abs(value) >= 100 else str(value)


def table(report: dict[str, Any]) -> str:
    """The report as a fixed-width table: figures with references and ratios, then targets."""
    rows: list[tuple[str, str, str, str]] = []
    cli = report.get("cli") or {}
    for item in (cli.get("commands") or {}).values():
        rows.append((f"start: {' '.join(item['argv'])[:60]}",
                     _fmt(item["wall_seconds"], "s"),
                     f"{item['vs_python_pass']:.1f}× python -c pass", ""))  # fmt: skip
    end_to_end = report.get("replay") or {}
    if "replay" in end_to_end:
        ours = end_to_end["replay"]
        mtail_e2e = end_to_end.get("mtail") or {}
        rows.append((f"replay end to end, {end_to_end['lines']:,} lines (lines/s)",
                     _fmt(ours["lines_per_second"], "/s"),
                     _fmt(end_to_end.get("replay_vs_mtail"), "×"), ""))  # fmt: skip
        if mtail_e2e:
            rows.append(("mtail one-shot, same file", _fmt(mtail_e2e["lines_per_second"], "/s"),
                         "1.00×", ""))  # fmt: skip
            rows.append(("replay / mtail CPU time (user + system)",
                         f"{ours['cpu_seconds']:.2f} s / {mtail_e2e['cpu_seconds']:.2f} s",
                         _fmt(end_to_end.get("replay_vs_mtail_cpu"), "×"), ""))  # fmt: skip
        if "instructions" in ours and "instructions" in mtail_e2e:
            rows.append(("replay / mtail instructions a line (valgrind)",
                         f"{ours['instructions_per_line']:,.0f} / "
                         f"{mtail_e2e['instructions_per_line']:,.0f}",
                         _fmt(end_to_end.get("replay_vs_mtail_instructions"), "×"), ""))  # fmt: skip
    throughput = report.get("throughput") or {}
    contenders = throughput.get("contenders") or {}
    mtail = (contenders.get("mtail_text") or {}).get("lines_per_second")
    grep = (contenders.get("grep_text") or {}).get("lines_per_second")
    for name, label in (
        ("engine_text", "engine, text (lines/s)"),
        ("mtail_text", "mtail one-shot, 10 rules, text"),
        ("grep_text", "grep -cE, 10 rules, text"),
        ("engine_json_cut", "engine, journal JSON --output-fields"),
        ("engine_json_full", "engine, journal JSON all fields"),
        ("orjson_floor_cut", "orjson.loads only, JSON cut"),
        ("grep_json_cut", "grep -cE, JSON cut"),
    ):
        item = contenders.get(name)
        if item:
            rate = item["lines_per_second"]
            rows.append((label, _fmt(rate, "/s"),
                         _fmt(rate / mtail, "×") if mtail else "—",
                         _fmt(rate / grep, "×") if grep else "—"))  # fmt: skip
    latency = report.get("latency") or {}
    if "p50_seconds" in latency:
        p50, p99 = _fmt(latency["p50_seconds"], "s"), _fmt(latency["p99_seconds"], "s")
        rows.append((f"detection latency p50 / p99 ({latency['markers']} markers)",
                     f"{p50} / {p99}", "", ""))  # fmt: skip
    local = _get(report, "footprint", "local") or {}
    for key, item in local.items():
        cpu, rss = _fmt(item["cpu_percent"], "%"), _fmt(item["peak_rss_bytes"], "bytes")
        rows.append((f"daemon, 1 host × 8 units, {key.replace('_', ' ')}", f"{cpu} CPU, {rss}",
                     f"journalctl {_fmt(item['journalctl_cpu_percent'], '%')}", ""))  # fmt: skip
    for item in (_get(report, "footprint", "fleet") or {}).values():
        for key, value in item.items():
            if isinstance(value, dict) and "cpu_percent" in value:
                cpu, rss = _fmt(value["cpu_percent"], "%"), _fmt(value["peak_rss_bytes"], "bytes")
                label = f"daemon, {item['hosts']} SSH hosts × 8 units, {key.replace('_', ' ')}"
                rows.append((label, f"{cpu} CPU, {rss}", "", ""))
    scrape = report.get("scrape") or {}
    for key in ("text", "openmetrics"):
        item = scrape.get(key)
        if item:
            rows.append((f"/metrics {scrape['hosts']}×{scrape['units'] // scrape['hosts']} "
                         f"render, {key} ({item['series']:,} series)",
                         _fmt(item["render_seconds"], "s"),
                         f"prometheus_client {_fmt(item['prometheus_client_seconds'], 's')}",
                         f"{item['speedup']:.1f}× faster"))  # fmt: skip
            rows.append(("… every host changed since the last scrape",
                         _fmt(item.get("render_all_hosts_changed_seconds"), "s"), "", ""))  # fmt: skip
    for key in ("http_prometheus_headers", "http_plain"):
        item = scrape.get(key)
        if item:
            label = f"/metrics over HTTP ({key.removeprefix('http_').replace('_', ' ')})"
            rows.append((label, _fmt(item["seconds"], "s"), f"{item['bytes'] / 1e6:.2f} MB", ""))
    width = max((len(row[0]) for row in rows), default=10)
    lines = [f"{'figure':<{width}}  {'value':>22}  {'vs mtail / reference':>28}  {'vs grep':>12}"]
    lines += [f"{a:<{width}}  {b:>22}  {c:>28}  {d:>12}" for a, b, c, d in rows]
    lines.append("")
    for target in report.get("targets", []):
        verdict = {True: "MET", False: "NOT MET", None: "not measured"}[target["met"]]
        lines.append(f"  {verdict:<12} {target['target']}: {_fmt(target['value'], target['unit'])}")
    return "\n".join(lines)


def _build() -> str:
    """``compiled`` when the engine's modules are mypyc extensions, else ``pure``."""
    import vllm_sentinel.engine.tracker

    return "pure" if vllm_sentinel.engine.tracker.__file__.endswith(".py") else "compiled"


def main(argv: list[str] | None = None) -> int:
    """Parse arguments, run the sections, print and write the report."""
    parser = argparse.ArgumentParser(prog="python -m benchmarks", description=__doc__)
    parser.add_argument("--quick", action="store_true", help="tiny inputs: a smoke test")
    parser.add_argument("--only", default=",".join(SECTIONS), help="comma-separated sections")
    parser.add_argument("--runs", type=int, default=None, help="runs per throughput contender")
    parser.add_argument("--output", type=Path, default=DEFAULT_OUTPUT, help="JSON report path")
    parser.add_argument("--workdir", type=Path, default=None, help="keep inputs here")
    parser.add_argument(
        "--venv", type=Path, default=None,
        help="cli/replay: the venv to install into with pip install . (reused if it has one)",
    )  # fmt: skip
    args = parser.parse_args(argv)
    plan = QUICK if args.quick else FULL
    runs = args.runs or plan.runs
    chosen = [name.strip() for name in args.only.split(",") if name.strip()]
    unknown = sorted(set(chosen) - set(SECTIONS))
    if unknown:
        parser.error(f"unknown sections: {', '.join(unknown)}")
    os.chdir(ROOT)

    configure_logging("console", "error")
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="vllm-sentinel-bench-"))
    workdir.mkdir(parents=True, exist_ok=True)
    report: dict[str, Any] = {
        "meta": {
            "started_at": datetime.now(UTC).isoformat(),
            "quick": args.quick,
            "runs": runs,
            "vllm_sentinel": __version__,
            "build": _build(),
            "python": sys.version.split()[0],
            "platform": platform.platform(),
            "cpus": os.cpu_count(),
            "mtail": shutil.which("mtail"),
        }
    }
    installed: list[Install] = []

    def install() -> Install:
        if not installed:
            if args.venv is not None:
                installed.append(fresh_install(args.venv.resolve()))
            elif args.quick:
                installed.append(current_environment())
            else:
                installed.append(fresh_install(workdir / "venv"))
        return installed[0]

    try:
        for name in chosen:
            if name == "cli":
                report[name] = _section(
                    name, lambda: measure_startup(install(), runs=plan.cli_runs)
                )
            elif name == "replay":
                report[name] = _section(
                    name,
                    lambda: measure_end_to_end(
                        install(), workdir, lines=plan.end_to_end_lines, runs=plan.end_to_end_runs
                    ),
                )
            elif name == "throughput":
                report[name] = _section(
                    name, lambda: measure_throughput(workdir, min_lines=plan.min_lines, runs=runs)
                )
            elif name == "latency":
                report[name] = _section(
                    name,
                    lambda: measure_latency(
                        workdir, incarnations=plan.incarnations, poll_seconds=plan.poll_seconds
                    ),
                )
            elif name == "footprint":
                report[name] = _section(
                    name,
                    lambda: measure_footprint(
                        workdir,
                        window=plan.window,
                        rates=plan.rates,
                        fleet_sizes=plan.fleet_sizes,
                        fleet_rate=plan.fleet_rate,
                        fleet_windows=plan.fleet_windows,
                    ),
                )
            elif name == "scrape":
                report[name] = _section(
                    name,
                    lambda: measure_scrape(hosts=plan.scrape_hosts, units=8, runs=plan.scrape_runs),
                )
    finally:
        if args.workdir is None:
            shutil.rmtree(workdir, ignore_errors=True)
    report["targets"] = targets(report)
    report["meta"]["finished_at"] = datetime.now(UTC).isoformat()
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_bytes(orjson.dumps(report, option=orjson.OPT_INDENT_2 | orjson.OPT_SORT_KEYS))
    print(table(report))
    print(f"\nreport: {args.output}")
    failed = [name for name in chosen if "error" in report.get(name, {})]
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
