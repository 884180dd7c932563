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
from tests.support.promql import (
    PER_SENTINEL_ALERTS,
    fast_rules,
    replicated_rule_test,
    rule_expressions,
    rules,
)
from vllm_sentinel.engine.catalog.causes import CrashCause
from vllm_sentinel.engine.catalog.phases import Phase
from vllm_sentinel.engine.hints import CAUSE_HINTS, GENERIC_FIELDS, generic_text

ROOT = Path(__file__).resolve().parents[2]
RULES_PATH = ROOT / "deploy" / "prometheus" / "vllm-sentinel-rules.yml"
PROMETHEUS_EXAMPLE = ROOT / "deploy" / "prometheus" / "prometheus.example.yml"
ALERTMANAGER_EXAMPLE = ROOT / "deploy" / "alertmanager" / "example.yml"
RUNBOOK = ROOT / "docs" / "runbook.md"
RUNBOOK_RULE = "job:vllm_sentinel_runbook_url:info"
RUNBOOK_URL = (
    f'{{{{ with query "{RUNBOOK_RULE}" }}}}{{{{ . | sortByLabel "instance" | first | label "url" }}}}'
    "{{ else }}docs/runbook.md{{ end }}"
)
TEST_FILES = sorted(Path(__file__).parent.glob("*.test.yml"))
DEPLOYMENT = ROOT / "docs" / "deployment.md"
TOPOLOGIES = {
    "prometheus.example.yml": "one instance, Prometheus on the same machine",
    "per-node.yml": "per node",
    "central.yml": "central over SSH",
    "sharded.yml": "shards",
    "ha.yml": "two replicas",
    "federation.yml": "global view by federation",
    "remote-write.yml": "Thanos Receive or Mimir",
}
"""Every Prometheus config in deploy/prometheus/ and the topology it shows."""
SINGLE_SENTINEL_TEST_FILES = [path for path in TEST_FILES if path.name != "replicas.test.yml"]
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
            "VllmStartupWillTimeOut",  # vLLM's engine ready timeout (vllm2026)
            "VllmSentinelCollectorDown",
            "VllmSentinelStateNotSaved",
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
        assert expressions[0].startswith("label_replace(")  # the runbook's address
        assert expressions[1].startswith("max by (host, unit, phase) (vllm_sentinel_unit_phase)")
        assert all("vllm_sentinel" in expr or "up{" in expr for expr in expressions)
        first_alert = expressions[recorded].removeprefix("max without (instance, replica) (")
        assert first_alert.lstrip("( \n").startswith("vllm_sentinel_unit_stalled")


class TestReplicaShape:
    """Every unit alert deduplicates replicas the same way (tests/rules/replicas.test.yml)."""

    @pytest.mark.parametrize(
        "alert",
        [rule for rule in alerts() if rule["alert"].startswith("Vllm")],
        ids=lambda rule: rule["alert"],
    )
    def test_joins_stay_within_one_sentinel(self, alert: dict[str, Any]) -> None:
        """A join or aggregation by `instance` also keeps `replica`, so replicas never mix."""
        for clause in re.findall(r"\b(?:on|by) \(([^)]*)\)", alert["expr"]):
            labels = {label.strip() for label in clause.split(",")}
            if "instance" in labels:
                assert "replica" in labels, (alert["alert"], clause)

    @pytest.mark.parametrize(
        "alert",
        [
            rule
            for rule in alerts()
            if rule["alert"] not in PER_SENTINEL_ALERTS and rule["alert"] != "VllmSentinelAbsent"
        ],
        ids=lambda rule: rule["alert"],
    )
    def test_unit_alerts_take_the_max_over_replicas(self, alert: dict[str, Any]) -> None:
        """Unit alerts are `max without (instance, replica …)` of one sentinel's verdict."""
        assert re.match(r"max without \(instance, replica(, \w+)*\) \(", alert["expr"].strip())
        assert "$labels.instance" not in alert["annotations"]["description"]


class TestRunbookUrl:
    def test_the_address_is_written_once(self) -> None:
        """Only the runbook recording rule names an address; every alert asks that rule."""
        every = rules(RULES_PATH)
        (rule,) = [rule for rule in every if rule.get("record") == RUNBOOK_RULE]
        assert '"http://$1/runbook"' in rule["expr"]
        others = [item for item in every if item is not rule]
        assert not [item for item in others if "http" in yaml.safe_dump(item)]
        assert "github.com" not in RULES_PATH.read_text(encoding="utf-8")

    @pytest.mark.integration
    def test_changing_the_rule_changes_every_link(self, tmp_path: Path) -> None:
        """A constant in the recording rule is what the alerts' runbook_url then carries."""
        document = yaml.safe_load(RULES_PATH.read_text(encoding="utf-8"))
        for group in document["groups"]:
            for rule in group["rules"]:
                if rule.get("record") == RUNBOOK_RULE:
                    rule["expr"] = (
                        'label_replace(vector(1), "url", "https://wiki.example.com/vllm", "", "")'
                    )
        changed = tmp_path / "rules.yml"
        changed.write_text(yaml.safe_dump(document, sort_keys=False), encoding="utf-8")
        labels = {"job": "vllm-sentinel", "instance": "s:9842"}
        case = {
            "rule_files": [str(changed)],
            "evaluation_interval": "1m",
            "tests": [
                {
                    "interval": "1m",
                    "input_series": [
                        {"series": 'up{job="vllm-sentinel",instance="s:9842"}', "values": "0x20"}
                    ],
                    "alert_rule_test": [
                        {
                            "eval_time": "10m",
                            "alertname": "VllmSentinelDown",
                            "exp_alerts": [
                                {
                                    "exp_labels": {**labels, "severity": "warning"},
                                    "exp_annotations": {
                                        "summary": "vllm-sentinel s:9842 cannot be scraped",
                                        "description": "Prometheus has failed to scrape "
                                        "vllm-sentinel at s:9842 for 5 minutes. No vLLM alert "
                                        "of the hosts it watches can fire meanwhile.",
                                        "runbook_url": "https://wiki.example.com/vllm"
                                        "#vllmsentineldown",
                                    },
                                }
                            ],
                        }
                    ],
                }
            ],
        }
        test_file = tmp_path / "runbook.test.yml"
        test_file.write_text(yaml.safe_dump(case, sort_keys=False), encoding="utf-8")
        result = run(require_binary("promtool"), "test", "rules", str(test_file))
        assert result.returncode == 0, result.stdout + result.stderr


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


class TestTopologyConfigs:
    """deploy/prometheus/: one config per topology of docs/deployment.md."""

    def test_each_config_is_listed_and_documented(self) -> None:
        """No config without a topology; docs/deployment.md names every one."""
        shipped = {
            path.name for path in RULES_PATH.parent.glob("*.yml") if path.name != RULES_PATH.name
        }
        assert shipped == set(TOPOLOGIES)
        text = DEPLOYMENT.read_text(encoding="utf-8")
        assert [name for name in TOPOLOGIES if f"deploy/prometheus/{name}" not in text] == []

    @pytest.mark.parametrize("name", sorted(set(TOPOLOGIES) - {"federation.yml"}))
    def test_sentinels_are_scraped_as_job_vllm_sentinel_with_the_rules(self, name: str) -> None:
        """The rules (up{job="vllm-sentinel"}) and the dashboard rely on the job name."""
        config = yaml.safe_load((RULES_PATH.parent / name).read_text(encoding="utf-8"))
        assert config["rule_files"] == ["vllm-sentinel-rules.yml"]
        assert [job["job_name"] for job in config["scrape_configs"]] == ["vllm-sentinel"]
        assert not config["scrape_configs"][0].get("honor_labels")

    def test_replicas_carry_a_replica_label(self) -> None:
        """ha.yml: two targets, told apart by `replica` (what the rules deduplicate)."""
        config = yaml.safe_load((RULES_PATH.parent / "ha.yml").read_text(encoding="utf-8"))
        (job,) = config["scrape_configs"]
        assert sorted(group["labels"]["replica"] for group in job["static_configs"]) == ["a", "b"]

    def test_federation_keeps_the_sentinels_labels(self) -> None:
        """The global Prometheus pulls job vllm-sentinel and the recorded series, labels kept."""
        config = yaml.safe_load((RULES_PATH.parent / "federation.yml").read_text(encoding="utf-8"))
        (job,) = config["scrape_configs"]
        assert job["honor_labels"] is True and job["metrics_path"] == "/federate"
        assert '{job="vllm-sentinel"}' in job["params"]["match[]"]
        recorded = {rule["record"].split(":")[0] for rule in rules(RULES_PATH) if "record" in rule}
        pattern = next(m for m in job["params"]["match[]"] if "__name__" in m)
        assert all(f"{prefix}:vllm_sentinel_" in pattern for prefix in recorded - {"job"})


@pytest.mark.integration
class TestPromtool:
    @pytest.mark.parametrize("name", sorted(TOPOLOGIES))
    def test_topology_config_is_valid(self, name: str) -> None:
        """`promtool check config` accepts each topology's config, its rule file included."""
        path = RULES_PATH.parent / name
        result = run(require_binary("promtool"), "check", "config", str(path))
        assert result.returncode == 0, result.stdout + result.stderr
        loads_rules = "rule_files" in yaml.safe_load(path.read_text(encoding="utf-8"))
        assert ("1 rule files found" in result.stdout) is loads_rules

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
                {"series": 'up{job="vllm-sentinel",instance="s:9842"}', "values": "1x11"},
                {
                    "series": f'vllm_sentinel_unit_crashes_total{{{where},cause="{cause}"}}',
                    "values": "0 1x10",
                },
            ]
            labels = {"severity": "warning", "job": "vllm-sentinel"}
            labels |= {"host": "gpu-a", "unit": unit, "cause": cause}
            description = f"{unit} on gpu-a crashed with root cause {cause}."
            if phase:
                info = f'{where},cause="{cause}",phase="{phase}",exception="",message=""'
                series.append(
                    {"series": f"vllm_sentinel_unit_last_crash_info{{{info}}}", "values": "1x11"}
                )
                description = f"{unit} on gpu-a crashed in phase {phase} with root cause {cause}."
            # the cause's row as hints.py picks it (rows under a condition read the message,
            # which no alert carries), its fields in general form but the unit, from its label
            crashed = Phase(phase or "crashed")
            row = next(
                row
                for row in CAUSE_HINTS
                if row.cause == cause and not row.when and (not row.phases or crashed in row.phases)
            )
            text = generic_text(row, {**GENERIC_FIELDS, "unit": unit})
            # the sentinel's own runbook (job:vllm_sentinel_runbook_url:info), the cause's section
            hint = f"{text} Runbook: http://s:9842/runbook#{cause}"
            annotations = {
                "summary": f"vLLM {unit} on gpu-a crashed: {cause}",
                "description": f"{description} See the runbook's section on {cause}.",
                "runbook_url": "http://s:9842/runbook#vllmcrashed",
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


@pytest.mark.integration
class TestReplicas:
    """The shipped rules with two identical sentinels: every scenario fires what one fires."""

    @pytest.mark.parametrize("layout", ["instance", "replica"])
    @pytest.mark.parametrize("path", SINGLE_SENTINEL_TEST_FILES, ids=lambda path: path.name)
    def test_two_replicas_fire_what_one_fires(
        self, path: Path, layout: str, tmp_path: Path
    ) -> None:
        """Unit alerts once, sentinel alerts once per replica (own target, or replica label)."""
        copy = replicated_rule_test(
            path, tmp_path / path.name, layout=layout, rules_path=RULES_PATH
        )
        result = run(require_binary("promtool"), "test", "rules", str(copy))
        assert result.returncode == 0, result.stdout + result.stderr

    @pytest.mark.parametrize(
        ("layout", "before", "after", "tests"),
        [
            ("instance", "max without (instance, replica", "max without (replica", "crashed"),
            # VllmLoadingStalled joins the phase (group_left) on the replica's labels
            ("replica", "instance, replica, host", "instance, host", "loading-stalled"),
        ],
    )
    def test_the_check_can_fail(
        self, tmp_path: Path, layout: str, before: str, after: str, tests: str
    ) -> None:
        """Rules that keep `instance`, or join without `replica`, fail the replicated tests."""
        text = RULES_PATH.read_text(encoding="utf-8")
        assert before in text
        broken = tmp_path / "rules.yml"
        broken.write_text(text.replace(before, after), encoding="utf-8")
        source = Path(__file__).parent / f"{tests}.test.yml"
        copy = replicated_rule_test(
            source, tmp_path / source.name, layout=layout, rules_path=broken
        )
        result = run(require_binary("promtool"), "test", "rules", str(copy))
        assert result.returncode == 1, result.stdout + result.stderr
