"""Prometheus rules, their promtool unit tests, the fast test copy, and the example configs."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.conftest import require_binary
from tests.support.promql import fast_rules, rule_expressions, rules
from vllm_sentinel.causes import CrashCause
from vllm_sentinel.hints import CAUSE_HINTS, hint_for
from vllm_sentinel.hints import RUNBOOK_URL as CAUSE_RUNBOOK
from vllm_sentinel.phases import Phase
from vllm_sentinel.snapshot import CrashInfo

ROOT = Path(__file__).resolve().parents[2]
RULES_PATH = ROOT / "deploy" / "prometheus" / "vllm-sentinel-rules.yml"
PROMETHEUS_EXAMPLE = ROOT / "deploy" / "prometheus" / "prometheus.example.yml"
ALERTMANAGER_EXAMPLE = ROOT / "deploy" / "alertmanager" / "example.yml"
RUNBOOK = ROOT / "docs" / "runbook.md"
RUNBOOK_URL = "https://github.com/vllm-sentinel/vllm-sentinel/blob/main/docs/runbook.md"
TEST_FILES = sorted(Path(__file__).parent.glob("*.test.yml"))
CAUSES = [cause.value for cause in CrashCause]
CRASH_ALERTS = ("VllmCrashed", "VllmCrashLooping")
HINTS_BUILDER = ROOT / "scripts" / "build-alert-hints.py"


def alerts() -> list[dict[str, Any]]:
    return [rule for rule in rules(RULES_PATH) if "alert" in rule]


def run(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, capture_output=True, text=True, check=False)


class TestAlertDefinitions:
    def test_the_alerts_of_the_issue_exist(self) -> None:
        """Every alert the dashboard issue asks for is defined."""
        names = {rule["alert"] for rule in alerts()}
        assert names == {
            "VllmLoadingStalled",
            "VllmStartupSlow",
            "VllmStartupSlowerThanUsual",
            "VllmCrashed",
            "VllmCrashLooping",
            "VllmNotReady",
            "VllmReadyButUnhealthy",
            "VllmSentinelCollectorDown",
            "VllmSentinelDown",
            "VllmSentinelAbsent",
        }

    @pytest.mark.parametrize("alert", alerts(), ids=lambda rule: rule["alert"])
    def test_alert_has_for_severity_and_annotations(self, alert: dict[str, Any]) -> None:
        """Each alert waits (`for`), has a severity, a summary, a description and a runbook;
        the crash alerts also a fix hint, as an annotation (labels stay bounded)."""
        assert re.fullmatch(r"\d+[smh]", alert["for"])
        assert set(alert["labels"]) == {"severity"}
        assert alert["labels"]["severity"] in {"critical", "warning"}
        annotations = alert["annotations"]
        hinted = {"hint"} if alert["alert"] in CRASH_ALERTS else set()
        assert set(annotations) == {"summary", "description", "runbook_url", *hinted}
        assert annotations["runbook_url"] == f"{RUNBOOK_URL}#{alert['alert'].lower()}"

    def test_hint_annotations_are_generated_from_the_hint_table(self) -> None:
        """The crash alerts' `hint` is what scripts/build-alert-hints.py writes (no hand edits)."""
        result = run(sys.executable, str(HINTS_BUILDER), "--check")
        assert result.returncode == 0, result.stdout + result.stderr
        for alert in alerts():
            if alert["alert"] in CRASH_ALERTS:
                hint = alert["annotations"]["hint"]
                for cause in CAUSES:  # every cause of the enum has its branch
                    assert (
                        f"eq {'$labels' if alert['alert'] == 'VllmCrashed' else '.Labels'}" in hint
                    )
                    assert f'"{cause}"' in hint or cause == "unknown", (alert["alert"], cause)

    @pytest.mark.parametrize("alert", alerts(), ids=lambda rule: rule["alert"])
    def test_runbook_has_a_section_per_alert(self, alert: dict[str, Any]) -> None:
        """The runbook_url anchor exists: a `## AlertName` heading in docs/runbook.md."""
        headings = re.findall(r"^## (\S+)$", RUNBOOK.read_text(encoding="utf-8"), re.MULTILINE)
        assert alert["alert"] in headings

    def test_runbook_has_a_section_per_cause(self) -> None:
        """The crash alerts send the reader to the cause's section: every cause of the bounded
        set (read from the enum now, so a new cause needs its section) has one, and every
        section under "Crash causes" is a cause with a fix hint."""
        text = RUNBOOK.read_text(encoding="utf-8")
        headings = re.findall(r"^### (\S+)$", text, re.MULTILINE)
        assert [cause for cause in CAUSES if cause not in headings] == []
        hinted = {row.cause for row in CAUSE_HINTS}
        assert [heading for heading in headings if heading not in hinted] == []

    def test_unit_alerts_describe_host_unit_and_phase_or_cause(self) -> None:
        """Summaries and descriptions of unit alerts name the host and the unit."""
        for alert in alerts():
            if alert["alert"].startswith("VllmSentinel"):
                continue
            for text in (alert["annotations"]["summary"], alert["annotations"]["description"]):
                assert "$labels.host" in text and "$labels.unit" in text, alert["alert"]
        by_name = {alert["alert"]: alert for alert in alerts()}
        assert "$labels.cause" in by_name["VllmCrashed"]["annotations"]["summary"]
        assert "$labels.phase" in by_name["VllmLoadingStalled"]["annotations"]["summary"]
        assert "$labels.phase" in by_name["VllmStartupSlow"]["annotations"]["summary"]
        assert "$labels.phase" in by_name["VllmStartupSlowerThanUsual"]["annotations"]["summary"]

    def test_every_alert_is_unit_tested_both_ways(self) -> None:
        """Each alert has a promtool case where it fires and one where it must not."""
        fires: set[str] = set()
        silent: set[str] = set()
        for path in TEST_FILES:
            document = yaml.safe_load(path.read_text(encoding="utf-8"))
            for test in document["tests"]:
                for case in test.get("alert_rule_test", []):
                    (fires if case.get("exp_alerts") else silent).add(case["alertname"])
        names = {alert["alert"] for alert in alerts()}
        assert names - fires == set(), "alerts never seen firing"
        assert names - silent == set(), "alerts never checked silent"

    def test_rule_expressions_lists_recording_rules_first(self) -> None:
        """rule_expressions gives every expr, recording rules first (they feed the others)."""
        all_rules = rules(RULES_PATH)
        expressions = rule_expressions(RULES_PATH)
        assert len(expressions) == len(all_rules)
        recorded = sum(1 for rule in all_rules if "record" in rule)
        assert expressions[0].startswith("max by (host, unit, phase) (vllm_sentinel_unit_phase)")
        assert all("vllm_sentinel" in expr or "up{" in expr for expr in expressions)
        assert expressions[recorded].lstrip("(").strip().startswith("vllm_sentinel_unit_stalled")


class TestFastRules:
    def test_every_for_is_shortened(self, tmp_path: Path) -> None:
        """The test copy waits `for_seconds` on every alert and keeps every rule."""
        fast = fast_rules(RULES_PATH, tmp_path / "fast-rules.yml", for_seconds=1)
        copied = rules(fast)
        assert len(copied) == len(rules(RULES_PATH))
        assert {rule["for"] for rule in copied if "alert" in rule} == {"1s"}
        assert [rule.get("record") or rule["alert"] for rule in copied] == [
            rule.get("record") or rule["alert"] for rule in rules(RULES_PATH)
        ]

    def test_marked_thresholds_take_their_fast_values(self, tmp_path: Path) -> None:
        """`> 300  # fast: 2` becomes `> 2`; unmarked numbers stay as they are."""
        fast = fast_rules(RULES_PATH, tmp_path / "fast-rules.yml")
        slow = next(rule for rule in rules(fast) if rule.get("alert") == "VllmStartupSlow")
        assert "# fast" not in slow["expr"]
        assert re.search(r"\)\s*> 2\s+or", slow["expr"])
        assert re.search(r"\)\s*> 5\s*\)\s*and on", slow["expr"])
        assert "2 * (vllm_sentinel_unit_phase_duration_seconds > 0)" in slow["expr"]
        production = RULES_PATH.read_text(encoding="utf-8")
        assert "> 300  # fast: 2" in production and "> 1800  # fast: 5" in production

    def test_durations_can_be_marked(self, tmp_path: Path) -> None:
        """A marked range selector is rewritten too; a marker without a number is an error."""
        src = tmp_path / "rules.yml"
        src.write_text(
            "groups:\n- name: g\n  rules:\n  - alert: A\n    expr: |\n"
            "      increase(x_total[30m])  # fast: 20s\n      > 0\n    for: 10m\n",
            encoding="utf-8",
        )
        fast = fast_rules(src, tmp_path / "fast.yml", for_seconds=0)
        rule = rules(fast)[0]
        assert rule["expr"].startswith("increase(x_total[20s])\n")
        assert rule["for"] == "0s"
        src.write_text(
            "groups:\n- name: g\n  rules:\n  - alert: A\n    expr: |\n"
            "      up  # fast: 1\n    for: 1m\n",
            encoding="utf-8",
        )
        with pytest.raises(ValueError, match="without a number"):
            fast_rules(src, tmp_path / "fast.yml")


class TestExampleConfigs:
    def test_prometheus_example_scrapes_the_sentinel_job(self) -> None:
        """The example scrapes job `vllm-sentinel`, loads the rules and sends to Alertmanager."""
        config = yaml.safe_load(PROMETHEUS_EXAMPLE.read_text(encoding="utf-8"))
        jobs = {job["job_name"]: job for job in config["scrape_configs"]}
        assert "vllm-sentinel" in jobs
        assert jobs["vllm-sentinel"]["static_configs"][0]["targets"] == ["127.0.0.1:9842"]
        assert config["rule_files"] == ["vllm-sentinel-rules.yml"]
        assert config["alerting"]["alertmanagers"]

    def test_alertmanager_example_groups_by_host_and_unit(self) -> None:
        """The route groups by host and unit, drops by default and has a webhook receiver."""
        config = yaml.safe_load(ALERTMANAGER_EXAMPLE.read_text(encoding="utf-8"))
        route = config["route"]
        assert route["group_by"] == ["host", "unit"]
        assert route["receiver"] == "null"
        receivers = {receiver["name"]: receiver for receiver in config["receivers"]}
        assert set(receivers["null"]) == {"name"}
        assert any("webhook_configs" in receiver for receiver in receivers.values())
        assert all(child["group_by"] == ["host", "unit"] for child in route["routes"])


@pytest.mark.integration
class TestPromtool:
    def test_rules_file_is_valid(self) -> None:
        """`promtool check rules` accepts the rules file."""
        result = run(require_binary("promtool"), "check", "rules", str(RULES_PATH))
        assert result.returncode == 0, result.stdout + result.stderr

    @pytest.mark.parametrize("path", TEST_FILES, ids=lambda path: path.name)
    def test_unit_tests_pass(self, path: Path) -> None:
        """`promtool test rules` passes for each series history."""
        result = run(require_binary("promtool"), "test", "rules", str(path))
        assert result.returncode == 0, result.stdout + result.stderr

    def test_every_cause_fires_with_its_hint(self, tmp_path: Path) -> None:
        """VllmCrashed for each cause of the bounded set carries that cause's hint (the one
        hints.py gives), and the phase variant when the last crash names the phase."""
        cases = [(cause, None) for cause in CAUSES] + [("cuda_oom", "loading_weights")]
        tests = []
        for index, (cause, phase) in enumerate(cases):
            unit = f"vllm-{index}.service"
            where = f'job="vllm-sentinel",instance="s:9842",host="gpu-a",unit="{unit}"'
            series = [
                {
                    "series": f'vllm_sentinel_unit_crashes_total{{{where},cause="{cause}"}}',
                    "values": "0 1x10",
                }
            ]
            labels = {"severity": "warning", "job": "vllm-sentinel", "instance": "s:9842"}
            labels |= {"host": "gpu-a", "unit": unit, "cause": cause}
            description = f"{unit} on gpu-a crashed with root cause {cause}."
            if phase:
                info = f'{where},cause="{cause}",phase="{phase}",exception="",message=""'
                series.append(
                    {"series": f"vllm_sentinel_unit_last_crash_info{{{info}}}", "values": "1x11"}
                )
                labels |= {"phase": phase}
                description = f"{unit} on gpu-a crashed in phase {phase} with root cause {cause}."
            crash = CrashInfo(CrashCause(cause), "", "", Phase(phase or "crashed"), None)
            hint = f"{hint_for(crash).text} Runbook: {CAUSE_RUNBOOK}#{cause}"
            annotations = {
                "summary": f"vLLM {unit} on gpu-a crashed: {cause}",
                "description": f"{description} See the runbook's section on {cause}.",
                "runbook_url": f"{RUNBOOK_URL}#vllmcrashed",
                "hint": hint,
            }
            tests.append(
                {
                    "interval": "1m",
                    "input_series": series,
                    "alert_rule_test": [
                        {
                            "eval_time": "3m",
                            "alertname": "VllmCrashed",
                            "exp_alerts": [{"exp_labels": labels, "exp_annotations": annotations}],
                        }
                    ],
                }
            )
        path = tmp_path / "every-cause.test.yml"
        document = {"rule_files": [str(RULES_PATH)], "evaluation_interval": "1m", "tests": tests}
        path.write_text(json.dumps(document), encoding="utf-8")  # JSON is YAML
        result = run(require_binary("promtool"), "test", "rules", str(path))
        assert result.returncode == 0, result.stdout + result.stderr

    def test_fast_rules_are_valid(self, tmp_path: Path) -> None:
        """The fast test copy is a valid rules file too."""
        fast = fast_rules(RULES_PATH, tmp_path / "fast-rules.yml")
        result = run(require_binary("promtool"), "check", "rules", str(fast))
        assert result.returncode == 0, result.stdout + result.stderr

    def test_prometheus_example_is_valid(self) -> None:
        """`promtool check config` accepts the example, rule file included."""
        result = run(require_binary("promtool"), "check", "config", str(PROMETHEUS_EXAMPLE))
        assert result.returncode == 0, result.stdout + result.stderr
        assert "1 rule files found" in result.stdout

    def test_alertmanager_example_is_valid(self) -> None:
        """`amtool check-config` accepts the Alertmanager example."""
        result = run(require_binary("amtool"), "check-config", str(ALERTMANAGER_EXAMPLE))
        assert result.returncode == 0, result.stdout + result.stderr

    def test_alertmanager_example_routes_by_severity(self) -> None:
        """A crash reaches the webhook, grouped by host and unit; other alerts are dropped."""
        amtool = require_binary("amtool")
        crash = run(
            amtool, "config", "routes", "test", f"--config.file={ALERTMANAGER_EXAMPLE}",
            "--verify.receivers=vllm-oncall",
            "alertname=VllmCrashed", "severity=warning", "host=gpu-a", "unit=vllm.service",
        )  # fmt: skip
        assert crash.returncode == 0, crash.stdout + crash.stderr
        other = run(
            amtool, "config", "routes", "test", f"--config.file={ALERTMANAGER_EXAMPLE}",
            "--verify.receivers=null", "alertname=NodeDown", "severity=critical",
        )  # fmt: skip
        assert other.returncode == 0, other.stdout + other.stderr
