"""The benchmark suite runs end to end in its quick mode and writes a well-formed report.

A smoke test only: the quick mode's inputs are tiny, so nothing here looks at a figure or a
target verdict, and nothing is timed.
"""

from __future__ import annotations

import math
import subprocess
import sys
from pathlib import Path

import orjson
import pytest

from tests.conftest import require_binary
from tests.support.journal_writer import JOURNAL_REMOTE

ROOT = Path(__file__).resolve().parent.parent
SECTIONS = ("cli", "replay", "throughput", "latency", "footprint", "scrape")


def _numbers(node: object) -> list[float]:
    if isinstance(node, bool):
        return []
    if isinstance(node, (int, float)):
        return [float(node)]
    if isinstance(node, dict):
        return [number for value in node.values() for number in _numbers(value)]
    if isinstance(node, list):
        return [number for value in node for number in _numbers(value)]
    return []


@pytest.mark.integration
def test_quick_mode_writes_a_well_formed_report(tmp_path: Path) -> None:
    """``python -m benchmarks --quick`` exits 0 and writes every section, targets and meta."""
    for binary in ("journalctl", JOURNAL_REMOTE, "mtail", "grep"):
        require_binary(binary)
    report_path = tmp_path / "report.json"
    result = subprocess.run(
        [sys.executable, "-m", "benchmarks", "--quick", "--output", str(report_path),
         "--workdir", str(tmp_path / "work")],
        cwd=ROOT, capture_output=True, timeout=600, check=False,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr.decode()[-3000:]
    report = orjson.loads(report_path.read_bytes())
    assert report["meta"]["quick"] is True
    for section in SECTIONS:
        assert isinstance(report[section], dict), section
        assert "error" not in report[section], report[section].get("error")
    assert report["throughput"]["contenders"]["engine_text"]["lines"] > 0
    commands = report["cli"]["commands"]
    assert {
        "python_pass",
        "version",
        "help",
        "watch_help",
        "replay_small_file",
        "check_config",
    } <= set(commands)
    assert commands["python_pass"]["vs_python_pass"] == 1.0
    assert report["replay"]["replay"]["found"]["incarnations"] > 0
    assert report["replay"]["lines"] >= 5_000
    assert report["throughput"]["references_agree"] is True
    assert report["latency"]["markers"] > 0
    assert {"idle", "rate_1000", "rate_10000"} <= set(report["footprint"]["local"])
    assert report["scrape"]["text"]["identical_to_prometheus_client"] is True
    assert report["scrape"]["text"]["render_all_hosts_changed_seconds"] > 0
    targets = report["targets"]
    assert len(targets) == 18  # one start-up row per command of startup.COMMANDS
    assert all(set(target) == {"target", "value", "limit", "unit", "met"} for target in targets)
    assert all(math.isfinite(number) for number in _numbers(report) if not math.isnan(number))
    assert b"report:" in result.stdout
