"""A unit's counters are born at their value: the alerts must count a series' first value.

The sentinel exports a unit's series from the moment it first reads the unit, so
``vllm_sentinel_unit_starts_total`` appears at 1 (its first start), or higher when the unit
restarted between two scrapes; Prometheus' ``increase()`` never counts a series' first value.
The real-journald tier (``tests/journald``) showed it with a crash loop under systemd: the first
sample Prometheus held for the unit was 1.0 (or 0 when a scrape fell between systemd's
``Starting`` and ``Started``), so whether a 3-start loop paged depended on that race.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
import yaml

from tests.conftest import require_binary

REPO = Path(__file__).resolve().parents[2]
RULES = REPO / "deploy" / "prometheus" / "vllm-sentinel-rules.yml"
LABELS = 'job="vllm-sentinel",instance="s:9842",host="gpu-a",unit="vllm-loop.service"'


@pytest.mark.xfail(
    strict=True,
    reason="product defect (rules): increase(vllm_sentinel_unit_starts_total[30m]) misses the "
    "first start of a series born at 1, so VllmCrashLooping ('at least 3 starts and 2 crashes') "
    "stays silent for a unit that started 3 times and crashed 3 times (systemd's "
    "StartLimitBurst=3). Count a series born in the window from 0, e.g. `increase(x[30m]) or "
    "(x unless x offset 30m)` per series.",
)
def test_a_three_start_crash_loop_seen_from_its_first_start_pages(tmp_path: Path) -> None:
    """The unit appears at its first start (1), restarts twice within a minute, crashes each
    time and systemd gives up: 3 starts, 3 crashes, never ready. The alert must fire."""
    case = {
        "rule_files": [str(RULES)],
        "evaluation_interval": "15s",
        "tests": [
            {
                "interval": "15s",
                "input_series": [
                    {"series": 'up{job="vllm-sentinel",instance="s:9842"}', "values": "1x200"},
                    {
                        "series": f"vllm_sentinel_unit_starts_total{{{LABELS}}}",
                        "values": "_ _ 1 2 3 3x150",
                    },
                    {
                        "series": f'vllm_sentinel_unit_crashes_total{{{LABELS},cause="cuda_oom"}}',
                        "values": "_ _ 0 0 1 2 3x150",
                    },
                    {
                        "series": f'vllm_sentinel_unit_phase{{{LABELS},phase="ready"}}',
                        "values": "_ _ 0x150",
                    },
                ],
                "alert_rule_test": [
                    {
                        "eval_time": "10m",
                        "alertname": "VllmCrashLooping",
                        "exp_alerts": [
                            {
                                "exp_labels": {
                                    "severity": "critical",
                                    "job": "vllm-sentinel",
                                    "host": "gpu-a",
                                    "unit": "vllm-loop.service",
                                },
                                "exp_annotations": {
                                    "summary": "vLLM vllm-loop.service on gpu-a is crash-looping",
                                    "description": "vllm-loop.service on gpu-a started 3 times "
                                    "in 30 minutes without becoming ready. Restarting again "
                                    "will not help until the cause is fixed.",
                                    "hint": "",
                                    "runbook_url": "http://s:9842/runbook#vllmcrashlooping",
                                },
                            }
                        ],
                    }
                ],
            }
        ],
    }
    test_file = tmp_path / "born.test.yml"
    test_file.write_text(yaml.safe_dump(case, sort_keys=False), encoding="utf-8")
    result = subprocess.run(
        [require_binary("promtool"), "test", "rules", str(test_file)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
