"""The Grafana dashboard deploy/grafana/vllm-sentinel.json: structure, units, queries."""

from __future__ import annotations

import importlib.util
import json
import re
import subprocess
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import yaml

from tests.conftest import require_binary
from tests.support.promql import DEFAULT_VARIABLES, dashboard_expressions, dashboard_queries
from vllm_sentinel.engine.catalog.causes import CrashCause

ROOT = Path(__file__).resolve().parents[2]
DASHBOARD_PATH = ROOT / "deploy" / "grafana" / "vllm-sentinel.json"
BUILDER_PATH = ROOT / "scripts" / "build-dashboard.py"
RULES_PATH = ROOT / "deploy" / "prometheus" / "vllm-sentinel-rules.yml"
DATASOURCE = {"type": "prometheus", "uid": "${datasource}"}
TIME_UNITS = {"s", "ms", "dtdurations", "dtdhms"}
DATE_UNITS = {"dateTimeAsIso", "dateTimeAsSystem", "dateTimeFromNow"}

# A selector: metric name then {matchers}.
SELECTOR = re.compile(r"\b(?P<name>[a-zA-Z_:][a-zA-Z0-9_:]*)\s*\{(?P<matchers>[^}]*)\}")
METRIC = re.compile(
    r"\b(?:vllm_sentinel_[a-z0-9_]+|host_[a-z_]+:vllm_sentinel_[a-z0-9_]+:[a-z0-9_]+)"
)


@pytest.fixture(scope="module")
def dashboard() -> dict[str, Any]:
    return json.loads(DASHBOARD_PATH.read_text(encoding="utf-8"))


def all_panels(panels: list[dict[str, Any]]) -> Iterator[dict[str, Any]]:
    for panel in panels:
        yield panel
        yield from all_panels(panel.get("panels", []))


def data_panels(dashboard: dict[str, Any]) -> list[dict[str, Any]]:
    return [p for p in all_panels(dashboard["panels"]) if p["type"] != "row"]


def panel_units(panel: dict[str, Any]) -> set[str]:
    """The units a panel sets: its default and those of its overrides."""
    config = panel.get("fieldConfig", {})
    units = {config.get("defaults", {}).get("unit")}
    for override in config.get("overrides", []):
        units |= {p["value"] for p in override.get("properties", []) if p.get("id") == "unit"}
    return {unit for unit in units if unit}


def acceptable_units(metric: str) -> set[str] | None:
    """The units a panel showing ``metric`` must offer; None when any unit will do."""
    if metric.endswith("_timestamp_seconds"):
        return TIME_UNITS | DATE_UNITS  # shown as a date, or as an age via time() - ts
    if "_bytes" in metric:
        return {"bytes", "decbytes"}
    if "_ratio" in metric or metric.endswith(":ratio"):
        return {"percentunit"}
    if "_seconds" in metric:
        return TIME_UNITS
    return None


class TestStructure:
    def test_is_current_grafana_schema(self, dashboard: dict[str, Any]) -> None:
        """The dashboard uses a current schema and imports as a new dashboard."""
        assert dashboard["schemaVersion"] >= 39
        assert dashboard["uid"] == "vllm-sentinel"
        assert dashboard["title"]
        assert dashboard.get("id") is None

    def test_refresh_and_time_range(self, dashboard: dict[str, Any]) -> None:
        """It refreshes every 30 s and shows the last 6 hours."""
        assert dashboard["refresh"] == "30s"
        assert dashboard["time"] == {"from": "now-6h", "to": "now"}

    def test_panel_ids_are_unique(self, dashboard: dict[str, Any]) -> None:
        """Every panel, rows included, has its own id."""
        ids = [panel.get("id") for panel in all_panels(dashboard["panels"])]
        assert None not in ids
        assert len(ids) == len(set(ids))

    def test_every_panel_uses_the_datasource_variable(self, dashboard: dict[str, Any]) -> None:
        """Each panel and each of its queries reads from ${datasource}."""
        for panel in data_panels(dashboard):
            assert panel.get("datasource") == DATASOURCE, panel["title"]
            for target in panel["targets"]:
                assert target.get("datasource", DATASOURCE) == DATASOURCE, panel["title"]

    def test_every_panel_has_queries(self, dashboard: dict[str, Any]) -> None:
        """Each panel has at least one PromQL query, with distinct refIds."""
        for panel in data_panels(dashboard):
            targets = panel.get("targets", [])
            assert targets, panel["title"]
            assert all(target.get("expr", "").strip() for target in targets), panel["title"]
            ref_ids = [target.get("refId") for target in targets]
            assert all(ref_ids) and len(ref_ids) == len(set(ref_ids)), panel["title"]

    def test_every_panel_has_a_title_and_a_description(self, dashboard: dict[str, Any]) -> None:
        """Someone paged at night gets a title and a line on what to look for."""
        for panel in data_panels(dashboard):
            assert panel.get("title"), panel["id"]
            assert panel.get("description"), panel["title"]

    def test_panels_fit_the_grid_and_do_not_overlap(self, dashboard: dict[str, Any]) -> None:
        """Every panel lies within the 24 columns and no two panels cover the same cell."""
        taken: dict[tuple[int, int], str] = {}
        for panel in all_panels(dashboard["panels"]):
            grid = panel["gridPos"]
            assert grid["x"] >= 0 and grid["w"] > 0 and grid["h"] > 0, panel.get("title")
            assert grid["x"] + grid["w"] <= 24, panel.get("title")
            for x in range(grid["x"], grid["x"] + grid["w"]):
                for y in range(grid["y"], grid["y"] + grid["h"]):
                    assert (x, y) not in taken, f"{panel.get('title')} overlaps {taken[(x, y)]}"
                    taken[(x, y)] = panel.get("title", "?")

    def test_rows_in_the_order_of_the_issue(self, dashboard: dict[str, Any]) -> None:
        """Unit overview first (repeated per unit), then GPU, crashes, durations, health."""
        rows = [panel for panel in dashboard["panels"] if panel["type"] == "row"]
        assert [row["title"] for row in rows] == [
            "Unit $unit",
            "GPU memory",
            "Starts and crashes",
            "Startup phase durations",
            "Collector health",
        ]
        assert rows[0]["repeat"] == "unit"

    def test_unit_row_shows_the_overview(self, dashboard: dict[str, Any]) -> None:
        """The per-unit row has phase over time, time in phase, weights, stalled, last crash,
        and the ETA, the expected ready time and the slow flag."""
        panels = dashboard["panels"]
        second_row = next(i for i, p in enumerate(panels) if p["type"] == "row" and i > 0)
        overview = {panel["title"]: panel for panel in panels[1:second_row]}
        assert overview["Phase"]["type"] == "state-timeline"
        assert "host_unit:vllm_sentinel_unit_phase:index" in overview["Phase"]["targets"][0]["expr"]
        assert {"Time in phase", "Weights loaded", "Stalled", "Last crash cause"} <= set(overview)
        # when it should be ready, and whether it is slower than usual (issue 11)
        assert {"Ready in", "Expected ready at", "Slower than usual", "Countdown to ready"} <= set(
            overview
        )
        assert "vllm_sentinel_unit_slow{" in overview["Slower than usual"]["targets"][0]["expr"]
        assert "basis" in overview["Ready in"]["targets"][0]["legendFormat"]

    def test_phase_mappings_follow_the_recorded_index(self, dashboard: dict[str, Any]) -> None:
        """The state timeline names each index the way the `index` recording rule numbers it."""
        panel = next(p for p in data_panels(dashboard) if p["title"] == "Phase")
        options = panel["fieldConfig"]["defaults"]["mappings"][0]["options"]
        names = [options[str(index)]["text"] for index in range(len(options))]
        rules = yaml.safe_load(RULES_PATH.read_text(encoding="utf-8"))
        index_rule = next(
            rule
            for group in rules["groups"]
            for rule in group["rules"]
            if rule.get("record") == "host_unit:vllm_sentinel_unit_phase:index"
        )
        numbered = re.findall(r'phase="(\w+)"\} == 1\) \* (\d+)', index_rule["expr"])
        assert [name for name, _ in numbered] == names
        assert [int(number) for _, number in numbered] == list(range(len(names)))


class TestVariables:
    def variables(self, dashboard: dict[str, Any]) -> dict[str, dict[str, Any]]:
        return {variable["name"]: variable for variable in dashboard["templating"]["list"]}

    def test_datasource_variable(self, dashboard: dict[str, Any]) -> None:
        """The datasource is a variable over Prometheus datasources."""
        datasource = self.variables(dashboard)["datasource"]
        assert datasource["type"] == "datasource"
        assert datasource["query"] == "prometheus"

    @pytest.mark.parametrize("name", ["host", "unit"])
    def test_host_and_unit_variables(self, dashboard: dict[str, Any], name: str) -> None:
        """host and unit come from label_values, multi-valued, with All as a regex."""
        variable = self.variables(dashboard)[name]
        assert variable["type"] == "query"
        assert variable["datasource"] == DATASOURCE
        assert variable["query"]["query"].startswith("label_values(")
        assert variable["query"]["query"].endswith(f", {name})")
        assert variable["multi"] is True
        assert variable["includeAll"] is True
        assert variable["allValue"] == ".+"

    def test_unit_variable_follows_the_host(self, dashboard: dict[str, Any]) -> None:
        """Choosing hosts narrows the unit list."""
        assert 'host=~"$host"' in self.variables(dashboard)["unit"]["query"]["query"]


class TestRunbookLink:
    """The runbook's address: asked at import, kept in one constant, used by every link."""

    def test_asked_at_import_with_the_daemons_copy_as_default(
        self, dashboard: dict[str, Any]
    ) -> None:
        """One constant input, defaulting to the daemon's /runbook at its default address."""
        (entry,) = dashboard["__inputs"]
        assert entry["name"] == "VAR_RUNBOOK_URL" and entry["type"] == "constant"
        assert entry["value"] == "http://127.0.0.1:9842/runbook"
        assert entry["label"]

    def test_kept_in_a_hidden_constant(self, dashboard: dict[str, Any]) -> None:
        """The runbook_url variable holds the input's value (Grafana substitutes it)."""
        variables = {v["name"]: v for v in dashboard["templating"]["list"]}
        variable = variables["runbook_url"]
        assert (variable["type"], variable["query"], variable["hide"]) == (
            "constant",
            "${VAR_RUNBOOK_URL}",
            2,
        )

    def test_every_link_uses_the_variable(self, dashboard: dict[str, Any]) -> None:
        """The dashboard link and the crash-cause data link; no other address anywhere."""
        (link,) = dashboard["links"]
        assert link["url"] == "${runbook_url}"
        cause_links = [
            item["url"]
            for panel in data_panels(dashboard)
            for item in panel.get("fieldConfig", {}).get("defaults", {}).get("links", [])
        ]
        assert cause_links == ["${runbook_url}#${__field.labels.cause}"]
        text = DASHBOARD_PATH.read_text(encoding="utf-8")
        assert "github.com" not in text
        # what Grafana's import replaces: only the declared input
        assert set(re.findall(r"\$\{(VAR_\w+)\}", text)) == {"VAR_RUNBOOK_URL"}

    def test_cause_anchors_exist_in_the_runbook(self) -> None:
        """${__field.labels.cause} is a crash cause; each cause has its heading (anchor)."""
        runbook = (ROOT / "docs" / "runbook.md").read_text(encoding="utf-8")
        headings = set(re.findall(r"^### (\S+)$", runbook, re.MULTILINE))
        assert {cause.value for cause in CrashCause} <= headings


class TestQueries:
    def test_units_are_set_on_every_panel(self, dashboard: dict[str, Any]) -> None:
        """Every panel states its unit (s, bytes, percentunit, none ...)."""
        for panel in data_panels(dashboard):
            assert panel.get("fieldConfig", {}).get("defaults", {}).get("unit"), panel["title"]

    def test_time_bytes_and_ratio_panels_have_their_units(self, dashboard: dict[str, Any]) -> None:
        """A panel of seconds shows s, of bytes shows bytes, of a ratio shows percentunit."""
        for panel in data_panels(dashboard):
            units = panel_units(panel)
            for target in panel["targets"]:
                for metric in METRIC.findall(target["expr"]):
                    wanted = acceptable_units(metric)
                    if wanted is not None:
                        assert units & wanted, f"{panel['title']}: {metric} needs one of {wanted}"

    def test_query_shapes_fit_the_panel(self, dashboard: dict[str, Any]) -> None:
        """Tables read instant rows; bar gauges one bar per series of an instant query; a stat
        that names a series (phase, cause) reads its value now, not the last one of the range
        (a range keeps the phases a unit has left and the causes of earlier crashes)."""
        checked = 0
        for panel in data_panels(dashboard):
            kind = panel["type"]
            for target in panel["targets"]:
                instant = target.get("instant") is True and target.get("range") is not True
                shape = target.get("format", "time_series")
                if kind == "table":
                    assert instant and shape == "table", panel["title"]
                elif kind == "bargauge":
                    assert instant and shape == "time_series", panel["title"]
                    assert panel["options"]["reduceOptions"]["values"] is False, panel["title"]
                elif kind == "stat" and panel["options"]["textMode"] in ("name", "value_and_name"):
                    assert instant and shape == "time_series", panel["title"]
                else:
                    continue
                checked += 1
        assert checked >= 15

    def test_selectors_filter_by_host_and_unit(self, dashboard: dict[str, Any]) -> None:
        """Every sentinel selector filters with host=~"$host" (and unit=~"$unit" for units)."""
        for where, expr in dashboard_queries(DASHBOARD_PATH, {"host": "$host", "unit": "$unit"}):
            bare = re.sub(SELECTOR, "", expr)
            assert not METRIC.search(bare), f"{where}: selector without matchers in {expr}"
            for selector in SELECTOR.finditer(expr):
                name, matchers = selector["name"], selector["matchers"]
                if not METRIC.fullmatch(name) or name == "vllm_sentinel_build_info":
                    continue
                assert 'host=~"$host"' in matchers, f"{where}: {selector[0]}"
                if "unit" in name.split(":")[0] or name.startswith("vllm_sentinel_unit_"):
                    assert 'unit=~"$unit"' in matchers, f"{where}: {selector[0]}"

    def test_only_metrics_of_the_contract_or_the_rules(self, dashboard: dict[str, Any]) -> None:
        """Recorded series the dashboard reads are recorded by the rules file."""
        rules = yaml.safe_load(RULES_PATH.read_text(encoding="utf-8"))
        recorded = {
            rule["record"]
            for group in rules["groups"]
            for rule in group["rules"]
            if "record" in rule
        }
        for expr in dashboard_expressions(DASHBOARD_PATH):
            for metric in METRIC.findall(expr):
                if ":" in metric:
                    assert metric in recorded, metric

    def test_expressions_have_no_variables_left(self) -> None:
        """After substitution no Grafana variable remains and brackets balance."""
        expressions = dashboard_expressions(DASHBOARD_PATH)
        assert len(expressions) >= 20
        for expr in expressions:
            assert "$" not in expr, expr
            for opening, closing in ("()", "[]", "{}"):
                assert expr.count(opening) == expr.count(closing), expr

    def test_unknown_variable_is_an_error(self, tmp_path: Path) -> None:
        """A typo in a variable name is caught rather than sent to Prometheus."""
        broken = tmp_path / "dashboard.json"
        panel = {"title": "x", "targets": [{"refId": "A", "expr": 'up{host=~"$hots"}'}]}
        broken.write_text(json.dumps({"panels": [panel]}), encoding="utf-8")
        with pytest.raises(ValueError, match="hots"):
            dashboard_expressions(broken)

    def test_variables_can_be_given(self) -> None:
        """The end-to-end test can pin host and unit to the ones it runs."""
        pinned = dashboard_expressions(DASHBOARD_PATH, {"host": "gpu-a", "unit": "vllm.service"})
        assert any('host=~"gpu-a", unit=~"vllm.service"' in expr for expr in pinned)
        assert all(".+" not in expr for expr in pinned if "unit=~" in expr)
        assert DEFAULT_VARIABLES["__rate_interval"] in " ".join(pinned)

    @pytest.mark.integration
    def test_every_expression_parses(self, tmp_path: Path) -> None:
        """promtool evaluates every expression (with the rules loaded) without a parse error."""
        promtool = require_binary("promtool")
        expressions = dashboard_expressions(DASHBOARD_PATH)
        tests = {
            "rule_files": [str(RULES_PATH)],
            "evaluation_interval": "1m",
            "tests": [
                {
                    "interval": "1m",
                    "input_series": [],
                    "promql_expr_test": [
                        {"expr": expr, "eval_time": "1m", "exp_samples": []} for expr in expressions
                    ],
                }
            ],
        }
        path = tmp_path / "dashboard.test.yml"
        path.write_text(yaml.safe_dump(tests, sort_keys=False), encoding="utf-8")
        result = subprocess.run(
            [promtool, "test", "rules", str(path)], capture_output=True, text=True, check=False
        )
        assert result.returncode == 0, result.stdout + result.stderr


def load_builder() -> ModuleType:
    spec = importlib.util.spec_from_file_location("build_dashboard", BUILDER_PATH)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class TestGenerated:
    def test_json_is_what_the_script_builds(self) -> None:
        """The committed JSON is the output of scripts/build-dashboard.py (no hand edits)."""
        pytest.importorskip("grafana_foundation_sdk")
        rendered = load_builder().render()
        assert DASHBOARD_PATH.read_text(encoding="utf-8") == rendered, (
            "run: python scripts/build-dashboard.py"
        )

    def test_json_round_trips_through_the_sdk_models(self, dashboard: dict[str, Any]) -> None:
        """Grafana's typed models read the JSON back; only fields they do not model differ."""
        encoder = pytest.importorskip("grafana_foundation_sdk.cog.encoder")
        models = pytest.importorskip("grafana_foundation_sdk.models.dashboard")
        parsed = models.Dashboard.from_json(dashboard)
        back = json.loads(encoder.JSONEncoder().encode(parsed))
        assert [p["id"] for p in back["panels"]] == [p["id"] for p in dashboard["panels"]]
        assert back["templating"]["list"][1]["query"] == dashboard["templating"]["list"][1]["query"]
        for original, parsed in zip(data_panels(dashboard), data_panels(back), strict=True):
            assert parsed["targets"] == original["targets"], original["title"]
            assert parsed["fieldConfig"] == original["fieldConfig"], original["title"]
