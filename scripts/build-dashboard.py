#!/usr/bin/env python3
"""Build the Grafana dashboard deploy/grafana/vllm-sentinel.json from code.

The dashboard is described here with grafana-foundation-sdk (Grafana's typed builders; the
schema of Grafana 11.6) and written as JSON ready to import. Edit this file, run it, and
commit both: tests/unit/test_dashboard.py checks that the JSON is what this script builds.

    pip install 'grafana-foundation-sdk==1769699379!11.6.0'
    python scripts/build-dashboard.py            # rewrite the JSON
    python scripts/build-dashboard.py --check    # exit 1 if the JSON is out of date

Layout, for a person paged at night (top to bottom):
1. one row per unit (repeated over `$unit`): phase over time, time in phase, time since the last
   progress, weights loaded, stalled, last crash cause; then when it should be ready (ETA, the
   expected time, slower than usual, and the countdown against the time in the phase);
2. GPU memory per GPU of the host and per unit (the loading curve), weights loaded over time;
3. starts and crashes by cause over time, crashes by cause in the range, the last crash details;
4. phase durations of recent starts against the usual, startup duration, current incarnations;
5. collector health: collectors up, reconnects, records read and skipped, sentinel targets.

The runbook's address is an import input (`VAR_RUNBOOK_URL`, default: the copy the daemon serves
at http://127.0.0.1:9842/runbook) kept in the hidden constant `runbook_url`: the dashboard link
and the "Last crash cause" panel's link to the cause's section use it.

Conventions: the datasource is the `${datasource}` variable; every selector filters with
`host=~"$host"` (and `unit=~"$unit"` for unit metrics), so multi-value and "All" work; the
`host_unit:*` and `host_gpu:*` series are recorded by deploy/prometheus/vllm-sentinel-rules.yml.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from grafana_foundation_sdk.builders import (
    bargauge,
    dashboard,
    prometheus,
    stat,
    statetimeline,
    table,
    timeseries,
)
from grafana_foundation_sdk.builders import common as common_builders
from grafana_foundation_sdk.cog.encoder import JSONEncoder
from grafana_foundation_sdk.models import common
from grafana_foundation_sdk.models import dashboard as model
from grafana_foundation_sdk.models import prometheus as prometheus_model

ROOT = Path(__file__).resolve().parent.parent
OUTPUT = ROOT / "deploy" / "grafana" / "vllm-sentinel.json"
# The runbook's address is asked at import (Grafana's "import" dialog shows the __inputs entry
# with this default: the copy a daemon with the default listen address serves) and kept in the
# hidden constant variable runbook_url, which the dashboard link and the crash-cause links use.
RUNBOOK_INPUT = "VAR_RUNBOOK_URL"
RUNBOOK_DEFAULT = "http://127.0.0.1:9842/runbook"
RUNBOOK = "${runbook_url}"

DATASOURCE = model.DataSourceRef(type_val="prometheus", uid="${datasource}")
HOST = 'host=~"$host"'
UNIT = 'host=~"$host", unit=~"$unit"'

# Phases in order, as recorded by host_unit:vllm_sentinel_unit_phase:index, with their colours:
# blues while starting, purple while compiling and profiling, green when ready, grey when
# stopped on purpose, red when crashed; sleeping (added last, so the indices above stay) teal.
PHASES: tuple[tuple[str, str], ...] = (
    ("starting", "super-light-blue"),
    ("initializing", "light-blue"),
    ("loading_weights", "blue"),
    ("compiling", "super-light-purple"),
    ("profiling_kv_cache", "light-purple"),
    ("capturing_cuda_graphs", "purple"),
    ("starting_api_server", "yellow"),
    ("ready", "green"),
    ("stopping", "#8e8e8e"),
    ("stopped", "#5a5a5a"),
    ("crashed", "red"),
    ("sleeping", "#4e8f86"),  # vLLM sleep mode: ready, its GPU memory freed (index 11)
)


class _Ids:
    """Hand out panel ids in layout order, so that the JSON is stable."""

    def __init__(self) -> None:
        self._next = 0

    def __call__(self) -> int:
        self._next += 1
        return self._next


def _query(
    expr: str, legend: str = "", ref: str = "A", *, instant: bool = False, table: bool = False
) -> prometheus.Dataquery:
    """A Prometheus target: a range query, or ``instant`` (the value now, one per series, for
    stat and bar gauge panels: a range would keep series that ended, such as past phases), or
    ``table`` (instant, as rows with the labels as columns, for table panels)."""
    query = prometheus.Dataquery().expr(expr).ref_id(ref).datasource(DATASOURCE)
    if legend:
        query = query.legend_format(legend)
    if table:
        query = query.instant().format(prometheus_model.PromQueryFormat.TABLE)
    elif instant:
        query = query.instant().format(prometheus_model.PromQueryFormat.TIME_SERIES)
    else:
        query = query.range()
    return query


def _mappings(options: dict[str, tuple[str, str]]) -> list[model.ValueMap]:
    return [
        model.ValueMap(
            options={
                value: model.ValueMappingResult(text=text, color=color, index=index)
                for index, (value, (text, color)) in enumerate(options.items())
            }
        )
    ]


def _thresholds(*steps: tuple[float | None, str]) -> dashboard.ThresholdsConfig:
    return (
        dashboard.ThresholdsConfig()
        .mode(model.ThresholdsMode.ABSOLUTE)
        .steps([model.Threshold(value=value, color=color) for value, color in steps])
    )


def _fixed_colour(colour: str) -> dashboard.FieldColor:
    return dashboard.FieldColor().mode(model.FieldColorModeId.FIXED).fixed_color(colour)


def _last_value() -> common_builders.ReduceDataOptions:
    return common_builders.ReduceDataOptions().calcs(["lastNotNull"]).values(False)


def _legend_table() -> common_builders.VizLegendOptions:
    return (
        common_builders.VizLegendOptions()
        .display_mode(common.LegendDisplayMode.TABLE)
        .placement(common.LegendPlacement.RIGHT)
        .show_legend(True)
        .calcs(["lastNotNull", "max"])
    )


def _legend_list() -> common_builders.VizLegendOptions:
    return (
        common_builders.VizLegendOptions()
        .display_mode(common.LegendDisplayMode.LIST)
        .placement(common.LegendPlacement.BOTTOM)
        .show_legend(True)
    )


def _tooltip_all() -> common_builders.VizTooltipOptions:
    return (
        common_builders.VizTooltipOptions()
        .mode(common.TooltipDisplayMode.MULTI)
        .sort(common.SortOrder.DESCENDING)
    )


def _dashed(*, fill: bool = True) -> list[model.DynamicConfigValue]:
    """Overrides that draw a query's series dashed (a reference line: usual, total), unfilled
    unless ``fill``."""
    values = [
        model.DynamicConfigValue(
            id_val="custom.lineStyle", value={"fill": "dash", "dash": [10, 10]}
        )
    ]
    if not fill:
        values.append(model.DynamicConfigValue(id_val="custom.fillOpacity", value=0))
    return values


def _unit_column(
    name: str, unit: str
) -> tuple[model.MatcherConfig, list[model.DynamicConfigValue]]:
    return (
        model.MatcherConfig(id_val="byName", options=name),
        [model.DynamicConfigValue(id_val="unit", value=unit)],
    )


def _merge_and_organize(
    rename: dict[str, str], exclude: tuple[str, ...] = ()
) -> list[model.DataTransformerConfig]:
    return [
        model.DataTransformerConfig(id_val="merge", options={}),
        model.DataTransformerConfig(
            id_val="organize",
            options={
                "excludeByName": {"Time": True, **dict.fromkeys(exclude, True)},
                "renameByName": rename,
                "indexByName": {},
            },
        ),
    ]


# ---------------------------------------------------------------------------------------------
# Row 1: one row per unit


def _unit_row(ids: _Ids, builder: dashboard.Dashboard) -> dashboard.Dashboard:
    builder = builder.with_row(dashboard.Row("Unit $unit").id(ids()).repeat("unit"))

    phase = (
        statetimeline.Panel()
        .id(ids())
        .title("Phase")
        .description(
            "The unit's phase over time, one lane per host. Blues: starting and loading; purples: "
            "compiling, profiling the KV cache, capturing CUDA graphs; yellow: starting the API "
            "server; green: ready; grey: stopped on purpose; red: crashed."
        )
        .datasource(DATASOURCE)
        .with_target(_query(f"host_unit:vllm_sentinel_unit_phase:index{{{UNIT}}}", "{{host}}"))
        .unit("none")
        .mappings(_mappings({str(i): (name, colour) for i, (name, colour) in enumerate(PHASES)}))
        .color_scheme(dashboard.FieldColor().mode(model.FieldColorModeId.THRESHOLDS))
        .thresholds(_thresholds((None, "text")))
        .show_value(common.VisibilityMode.AUTO)
        .merge_values(True)
        .row_height(0.8)
        .fill_opacity(80)
        .legend(_legend_list().show_legend(False))
        .span(10)
        .height(6)
    )
    time_in_phase = (
        stat.Panel()
        .id(ids())
        .title("Time in phase")
        .description(
            "How long the unit has been in its current phase (named under the value). Empty "
            "while its state is unknown (the host's journal collector is down): the last phase "
            "seen is then no longer current."
        )
        .datasource(DATASOURCE)
        .with_target(
            _query(
                f"host_unit:vllm_sentinel_unit_phase_seconds:current{{{UNIT}}} "
                "and on (host, unit) "
                f"max by (host, unit) (vllm_sentinel_unit_state_known{{{UNIT}}}) == 1",
                "{{host}} {{phase}}",
                instant=True,
            )
        )
        .unit("s")
        .no_value("state unknown")
        .decimals(0)
        .reduce_options(_last_value())
        .text_mode(common.BigValueTextMode.VALUE_AND_NAME)
        .color_mode(common.BigValueColorMode.NONE)
        .graph_mode(common.BigValueGraphMode.NONE)
        .span(3)
        .height(6)
    )
    since_progress = (
        stat.Panel()
        .id(ids())
        .title("Since last progress")
        .description(
            "Time since the last log record of the current incarnation or the last GPU memory "
            "growth. Long while starting means a stall; long while ready is normal (idle)."
        )
        .datasource(DATASOURCE)
        .with_target(
            _query(
                "time() - max by (host, unit) ("
                f"vllm_sentinel_unit_last_progress_timestamp_seconds{{{UNIT}}})",
                "{{host}}",
            )
        )
        .unit("s")
        .decimals(0)
        .reduce_options(_last_value())
        .text_mode(common.BigValueTextMode.VALUE)
        .color_mode(common.BigValueColorMode.NONE)
        .graph_mode(common.BigValueGraphMode.NONE)
        .span(3)
        .height(6)
    )
    weights = (
        stat.Panel()
        .id(ids())
        .title("Weights loaded")
        .description(
            "Checkpoint shards loaded out of the total, for the current incarnation; the "
            "sparkline is the loading curve."
        )
        .datasource(DATASOURCE)
        .with_target(
            _query(
                f"max by (host, unit) (vllm_sentinel_unit_weights_loaded_ratio{{{UNIT}}})",
                "{{host}}",
            )
        )
        .unit("percentunit")
        .min(0)
        .max(1)
        .decimals(0)
        .reduce_options(_last_value())
        .text_mode(common.BigValueTextMode.VALUE)
        .color_mode(common.BigValueColorMode.VALUE)
        .graph_mode(common.BigValueGraphMode.AREA)
        .color_scheme(_fixed_colour("blue"))
        .span(3)
        .height(6)
    )
    stalled = (
        stat.Panel()
        .id(ids())
        .title("Stalled")
        .description(
            "STALLED: no new log record and no GPU memory growth for longer than the phase's "
            "threshold while starting (alert VllmLoadingStalled)."
        )
        .datasource(DATASOURCE)
        .with_target(
            _query(f"max by (host, unit) (vllm_sentinel_unit_stalled{{{UNIT}}})", "{{host}}")
        )
        .unit("none")
        .mappings(_mappings({"0": ("no", "green"), "1": ("STALLED", "red")}))
        .thresholds(_thresholds((None, "green"), (1, "red")))
        .reduce_options(_last_value())
        .text_mode(common.BigValueTextMode.VALUE)
        .color_mode(common.BigValueColorMode.BACKGROUND)
        .graph_mode(common.BigValueGraphMode.NONE)
        .span(2)
        .height(6)
    )
    last_crash = (
        stat.Panel()
        .id(ids())
        .title("Last crash cause")
        .description(
            "Root cause of the unit's last crash, as the sentinel classified it (see the "
            "runbook's crash causes)."
        )
        .datasource(DATASOURCE)
        .with_target(
            _query(
                f"max by (host, unit, cause) (vllm_sentinel_unit_last_crash_info{{{UNIT}}})",
                "{{cause}}",
                instant=True,
            )
        )
        .data_links(
            [
                dashboard.DashboardLink("Runbook: ${__field.labels.cause}")
                .url(RUNBOOK + "#${__field.labels.cause}")
                .target_blank(True)
            ]
        )
        .unit("none")
        .no_value("no crash")
        .reduce_options(_last_value())
        .text_mode(common.BigValueTextMode.NAME)
        .color_mode(common.BigValueColorMode.NONE)
        .graph_mode(common.BigValueGraphMode.NONE)
        .span(3)
        .height(6)
    )
    for panel in (phase, time_in_phase, since_progress, weights, stalled, last_crash):
        builder = builder.with_panel(panel)
    for panel in _readiness_panels(ids):
        builder = builder.with_panel(panel)
    return builder


def _readiness_panels(ids: _Ids) -> list[Any]:
    """The unit row's second line: when will it be ready, and is it slower than usual."""
    eta = (
        stat.Panel()
        .id(ids())
        .title("Ready in")
        .description(
            "The sentinel's estimate of the time left until the starting unit is ready, with its "
            "basis: vllm (vLLM's own progress bar: the end of the current phase only), history "
            "(the unit's recent starts of this model, else of any model) or both. Empty when "
            "there is no basis, when the unit is not starting, or while it is stalled."
        )
        .datasource(DATASOURCE)
        .with_target(
            _query(
                f"max by (host, unit, basis) (vllm_sentinel_unit_startup_eta_seconds{{{UNIT}}})",
                "{{host}} ({{basis}})",
                instant=True,
            )
        )
        .unit("s")
        .no_value("no estimate")
        .decimals(0)
        .reduce_options(_last_value())
        .text_mode(common.BigValueTextMode.VALUE_AND_NAME)
        .color_mode(common.BigValueColorMode.NONE)
        .graph_mode(common.BigValueGraphMode.NONE)
        .span(4)
        .height(6)
    )
    expected = (
        stat.Panel()
        .id(ids())
        .title("Expected ready at")
        .description("When the starting unit should be ready: now plus the estimate, same basis.")
        .datasource(DATASOURCE)
        .with_target(
            _query(
                "max by (host, unit, basis) ("
                f"vllm_sentinel_unit_expected_ready_timestamp_seconds{{{UNIT}}}) * 1000",
                "{{host}} ({{basis}})",
                instant=True,
            )
        )
        .unit("dateTimeAsIso")
        .no_value("no estimate")
        .reduce_options(_last_value())
        .text_mode(common.BigValueTextMode.VALUE_AND_NAME)
        .color_mode(common.BigValueColorMode.NONE)
        .graph_mode(common.BigValueGraphMode.NONE)
        .span(5)
        .height(6)
    )
    slow = (
        stat.Panel()
        .id(ids())
        .title("Slower than usual")
        .description(
            "SLOW: the current startup phase has lasted more than 1.5 times (slow_factor) its "
            "usual duration for this unit and model, and a minute more; still moving, unlike "
            "STALLED (alert VllmStartupSlowerThanUsual)."
        )
        .datasource(DATASOURCE)
        .with_target(_query(f"max by (host, unit) (vllm_sentinel_unit_slow{{{UNIT}}})", "{{host}}"))
        .unit("none")
        .mappings(_mappings({"0": ("no", "green"), "1": ("SLOW", "orange")}))
        .thresholds(_thresholds((None, "green"), (1, "orange")))
        .reduce_options(_last_value())
        .text_mode(common.BigValueTextMode.VALUE)
        .color_mode(common.BigValueColorMode.BACKGROUND)
        .graph_mode(common.BigValueGraphMode.NONE)
        .span(3)
        .height(6)
    )
    countdown = (
        timeseries.Panel()
        .id(ids())
        .title("Countdown to ready")
        .description(
            "The estimated time left until ready, the time spent in the current phase, and that "
            "phase's usual duration for this unit and model (dashed). Time in the phase rising "
            "far above the usual line is a slow start; the estimate then stops falling."
        )
        .datasource(DATASOURCE)
        .with_target(
            _query(
                f"max by (host, unit) (vllm_sentinel_unit_startup_eta_seconds{{{UNIT}}})",
                "{{host}} ready in",
                "A",
            )
        )
        .with_target(
            _query(
                f"host_unit:vllm_sentinel_unit_phase_seconds:current{{{UNIT}}}",
                "{{host}} in {{phase}}",
                "B",
            )
        )
        .with_target(
            _query(
                f"max by (host, unit) (vllm_sentinel_unit_phase_usual_seconds{{{UNIT}}})",
                "{{host}} usual for the phase",
                "C",
            )
        )
        .override_by_query(
            "C",
            _dashed(fill=False),
        )
        .unit("s")
        .min(0)
        .span_nulls(False)
        .legend(_legend_list())
        .tooltip(_tooltip_all())
        .span(12)
        .height(6)
    )
    return [eta, expected, slow, countdown]


# ---------------------------------------------------------------------------------------------
# Row 2: GPU memory


def _gpu_row(ids: _Ids, builder: dashboard.Dashboard) -> dashboard.Dashboard:
    builder = builder.with_row(dashboard.Row("GPU memory").id(ids()))
    per_gpu = (
        timeseries.Panel()
        .id(ids())
        .title("GPU memory used per GPU")
        .description(
            "Memory used on each GPU of the selected hosts (all processes); dashed: the GPU's "
            "total."
        )
        .datasource(DATASOURCE)
        .with_target(
            _query(
                f"max by (host, gpu) (vllm_sentinel_gpu_memory_used_bytes{{{HOST}}})",
                "{{host}} GPU {{gpu}}",
                "A",
            )
        )
        .with_target(
            _query(
                f"max by (host, gpu) (vllm_sentinel_gpu_memory_total_bytes{{{HOST}}})",
                "{{host}} GPU {{gpu}} total",
                "B",
            )
        )
        .override_by_query(
            "B",
            _dashed(fill=False),
        )
        .unit("bytes")
        .min(0)
        .fill_opacity(10)
        .span_nulls(False)
        .legend(_legend_table())
        .tooltip(_tooltip_all())
        .span(12)
        .height(8)
    )
    per_unit = (
        timeseries.Panel()
        .id(ids())
        .title("GPU memory per unit")
        .description(
            "Memory held by each unit's processes, over all its GPUs. While loading, this is the "
            "loading curve: a flat line during a start is what a stall looks like."
        )
        .datasource(DATASOURCE)
        .with_target(
            _query(
                f"host_unit:vllm_sentinel_unit_gpu_memory_used_bytes:sum{{{UNIT}}}",
                "{{host}} {{unit}}",
            )
        )
        .unit("bytes")
        .min(0)
        .fill_opacity(10)
        .legend(_legend_table())
        .tooltip(_tooltip_all())
        .span(12)
        .height(8)
    )
    per_unit_gpu = (
        timeseries.Panel()
        .id(ids())
        .title("GPU memory per unit and GPU")
        .description(
            "The same per GPU: with tensor parallelism, one rank that stays flat while the "
            "others grow is the one stuck."
        )
        .datasource(DATASOURCE)
        .with_target(
            _query(
                f"max by (host, unit, gpu) (vllm_sentinel_unit_gpu_memory_used_bytes{{{UNIT}}})",
                "{{host}} {{unit}} GPU {{gpu}}",
            )
        )
        .unit("bytes")
        .min(0)
        .legend(_legend_table())
        .tooltip(_tooltip_all())
        .span(12)
        .height(8)
    )
    weights = (
        timeseries.Panel()
        .id(ids())
        .title("Weights loaded")
        .description("Checkpoint shards loaded out of the total, per unit, over time.")
        .datasource(DATASOURCE)
        .with_target(
            _query(
                f"max by (host, unit) (vllm_sentinel_unit_weights_loaded_ratio{{{UNIT}}})",
                "{{host}} {{unit}}",
            )
        )
        .unit("percentunit")
        .min(0)
        .max(1)
        .legend(_legend_list())
        .tooltip(_tooltip_all())
        .span(12)
        .height(8)
    )
    share = (
        timeseries.Panel()
        .id(ids())
        .title("GPU memory in use")
        .description(
            "Share of each GPU's memory in use; near 100% before a start means another process "
            "holds the GPU (gpu_memory_in_use)."
        )
        .datasource(DATASOURCE)
        .with_target(
            _query(
                f"host_gpu:vllm_sentinel_gpu_memory_used:ratio{{{HOST}}}", "{{host}} GPU {{gpu}}"
            )
        )
        .unit("percentunit")
        .min(0)
        .max(1)
        .legend(_legend_list())
        .tooltip(_tooltip_all())
        .span(12)
        .height(8)
    )
    gpus = (
        table.Panel()
        .id(ids())
        .title("GPUs")
        .description("The GPUs of the selected hosts.")
        .datasource(DATASOURCE)
        .with_target(
            _query(
                f"max by (host, gpu, uuid, name) (vllm_sentinel_gpu_info{{{HOST}}})",
                ref="A",
                table=True,
            )
        )
        .with_target(
            _query(
                f"max by (host, gpu, uuid) (vllm_sentinel_gpu_memory_used_bytes{{{HOST}}})",
                ref="B",
                table=True,
            )
        )
        .with_target(
            _query(
                f"max by (host, gpu, uuid) (vllm_sentinel_gpu_memory_total_bytes{{{HOST}}})",
                ref="C",
                table=True,
            )
        )
        .transformations(
            _merge_and_organize({"Value #B": "used", "Value #C": "total"}, ("Value #A",))
        )
        .unit("none")
        .with_override(*_unit_column("used", "bytes"))
        .with_override(*_unit_column("total", "bytes"))
        .span(12)
        .height(8)
    )
    for panel in (per_gpu, per_unit, per_unit_gpu, weights, share, gpus):
        builder = builder.with_panel(panel)
    return builder


# ---------------------------------------------------------------------------------------------
# Row 3: starts and crashes


def _crash_row(ids: _Ids, builder: dashboard.Dashboard) -> dashboard.Dashboard:
    builder = builder.with_row(dashboard.Row("Starts and crashes").id(ids()))
    over_time = (
        timeseries.Panel()
        .id(ids())
        .title("Starts and crashes per hour")
        .description("Starts and crashes (by root cause) in the hour before each point, per unit.")
        .datasource(DATASOURCE)
        .with_target(
            _query(
                f"host_unit:vllm_sentinel_unit_starts:increase1h{{{UNIT}}}",
                "{{host}} {{unit}} starts",
                "A",
            )
        )
        .with_target(
            _query(
                f"host_unit_cause:vllm_sentinel_unit_crashes:increase1h{{{UNIT}}} > 0",
                "{{host}} {{unit}} crashed: {{cause}}",
                "B",
            )
        )
        .override_by_query(
            "B", [model.DynamicConfigValue(id_val="color", value={"mode": "palette-classic"})]
        )
        .unit("none")
        .decimals(0)
        .min(0)
        .line_interpolation(common.LineInterpolation.STEP_AFTER)
        .legend(_legend_table())
        .tooltip(_tooltip_all())
        .span(16)
        .height(8)
    )
    by_cause = (
        bargauge.Panel()
        .id(ids())
        .title("Crashes by cause in the time range")
        .description(
            "How often each root cause ended an incarnation of the selected units in the "
            "dashboard's time range."
        )
        .datasource(DATASOURCE)
        .with_target(
            _query(
                "sum by (cause) (round(increase("
                f"vllm_sentinel_unit_crashes_total{{{UNIT}}}[$__range]))) > 0",
                "{{cause}}",
                instant=True,
            )
        )
        .unit("none")
        .decimals(0)
        .min(0)
        .reduce_options(_last_value())
        .orientation(common.VizOrientation.HORIZONTAL)
        .display_mode(common.BarGaugeDisplayMode.BASIC)
        .color_scheme(_fixed_colour("red"))
        .span(8)
        .height(8)
    )
    details = (
        table.Panel()
        .id(ids())
        .title("Last crash")
        .description(
            "The last crash of each unit: cause, phase, root exception and message, and when it "
            "happened."
        )
        .datasource(DATASOURCE)
        .with_target(
            _query(
                "max by (host, unit, cause, phase, exception, message) ("
                f"vllm_sentinel_unit_last_crash_info{{{UNIT}}})",
                ref="A",
                table=True,
            )
        )
        .with_target(
            _query(
                "max by (host, unit) ("
                f"vllm_sentinel_unit_last_crash_timestamp_seconds{{{UNIT}}}) * 1000",
                ref="B",
                table=True,
            )
        )
        .transformations(_merge_and_organize({"Value #B": "crashed at"}, ("Value #A",)))
        .unit("none")
        .with_override(*_unit_column("crashed at", "dateTimeAsIso"))
        .sort_by([common_builders.TableSortByFieldState().display_name("crashed at").desc(True)])
        .span(24)
        .height(7)
    )
    for panel in (over_time, by_cause, details):
        builder = builder.with_panel(panel)
    return builder


# ---------------------------------------------------------------------------------------------
# Row 4: phase durations


def _duration_row(ids: _Ids, builder: dashboard.Dashboard) -> dashboard.Dashboard:
    builder = builder.with_row(dashboard.Row("Startup phase durations").id(ids()))
    history = (
        timeseries.Panel()
        .id(ids())
        .title("Phase durations of recent starts")
        .description(
            "How long each phase took in the latest start that passed it; each step is a new "
            "start. A step up is a slower start than the usual (alert VllmStartupSlow)."
        )
        .datasource(DATASOURCE)
        .with_target(
            _query(
                f"max by (host, unit, phase) (vllm_sentinel_unit_phase_duration_seconds{{{UNIT}}})",
                "{{host}} {{unit}} {{phase}}",
            )
        )
        .unit("s")
        .min(0)
        .line_interpolation(common.LineInterpolation.STEP_AFTER)
        .show_points(common.VisibilityMode.NEVER)
        .legend(_legend_table())
        .tooltip(_tooltip_all())
        .span(16)
        .height(8)
    )
    latest = (
        bargauge.Panel()
        .id(ids())
        .title("Phase durations, latest start")
        .description("Per phase, how long the latest start that passed it took.")
        .datasource(DATASOURCE)
        .with_target(
            _query(
                f"max by (host, unit, phase) (vllm_sentinel_unit_phase_duration_seconds{{{UNIT}}})",
                "{{unit}} {{phase}}",
                instant=True,
            )
        )
        .unit("s")
        .min(0)
        .reduce_options(_last_value())
        .orientation(common.VizOrientation.HORIZONTAL)
        .display_mode(common.BarGaugeDisplayMode.BASIC)
        .color_scheme(_fixed_colour("purple"))
        .span(8)
        .height(8)
    )
    startup = (
        timeseries.Panel()
        .id(ids())
        .title("Startup duration")
        .description("From start to ready, for the latest start that became ready.")
        .datasource(DATASOURCE)
        .with_target(
            _query(
                f"max by (host, unit) (vllm_sentinel_unit_startup_duration_seconds{{{UNIT}}})",
                "{{host}} {{unit}}",
            )
        )
        .unit("s")
        .min(0)
        .line_interpolation(common.LineInterpolation.STEP_AFTER)
        .legend(_legend_list())
        .tooltip(_tooltip_all())
        .span(8)
        .height(8)
    )
    incarnations = (
        table.Panel()
        .id(ids())
        .title("Current incarnations")
        .description(
            "What each unit runs now: vLLM version, model, tensor parallelism, since when, and "
            "what it loaded."
        )
        .datasource(DATASOURCE)
        .with_target(
            _query(
                "max by (host, unit, invocation_id, vllm_version, model, tensor_parallel_size) "
                f"(vllm_sentinel_unit_incarnation_info{{{UNIT}}})",
                ref="A",
                table=True,
            )
        )
        .with_target(
            _query(
                "max by (host, unit) ("
                f"vllm_sentinel_unit_incarnation_started_timestamp_seconds{{{UNIT}}}) * 1000",
                ref="B",
                table=True,
            )
        )
        .with_target(
            _query(
                f"max by (host, unit) (vllm_sentinel_unit_model_weights_bytes{{{UNIT}}})",
                ref="C",
                table=True,
            )
        )
        .with_target(
            _query(
                f"max by (host, unit) (vllm_sentinel_unit_kv_cache_tokens{{{UNIT}}})",
                ref="D",
                table=True,
            )
        )
        .transformations(
            _merge_and_organize(
                {
                    "Value #B": "started at",
                    "Value #C": "model weights",
                    "Value #D": "KV cache tokens",
                },
                ("Value #A",),
            )
        )
        .unit("none")
        .with_override(*_unit_column("started at", "dateTimeAsIso"))
        .with_override(*_unit_column("model weights", "bytes"))
        .span(16)
        .height(8)
    )
    for panel in (history, latest, startup, incarnations):
        builder = builder.with_panel(panel)
    return builder


# ---------------------------------------------------------------------------------------------
# Row 5: collector health


def _health_row(ids: _Ids, builder: dashboard.Dashboard) -> dashboard.Dashboard:
    builder = builder.with_row(dashboard.Row("Collector health").id(ids()))
    collectors = (
        statetimeline.Panel()
        .id(ids())
        .title("Collectors")
        .description(
            "Journal and GPU collectors per host. While a host's journal collector is down, its "
            "units' state is unknown."
        )
        .datasource(DATASOURCE)
        .with_target(
            _query(
                f"max by (host, collector) (vllm_sentinel_collector_up{{{HOST}}})",
                "{{host}} {{collector}}",
            )
        )
        .unit("none")
        .mappings(_mappings({"0": ("down", "red"), "1": ("up", "green")}))
        .color_scheme(dashboard.FieldColor().mode(model.FieldColorModeId.THRESHOLDS))
        .thresholds(_thresholds((None, "red"), (1, "green")))
        .show_value(common.VisibilityMode.NEVER)
        .merge_values(True)
        .fill_opacity(80)
        .legend(_legend_list().show_legend(False))
        .span(12)
        .height(7)
    )
    reconnects = (
        timeseries.Panel()
        .id(ids())
        .title("Collector reconnects")
        .description("Reconnections per collector (SSH drops, journalctl restarts, NVML errors).")
        .datasource(DATASOURCE)
        .with_target(
            _query(
                "sum by (host, collector) (increase("
                f"vllm_sentinel_collector_reconnects_total{{{HOST}}}[$__rate_interval]))",
                "{{host}} {{collector}}",
            )
        )
        .unit("none")
        .min(0)
        .legend(_legend_list())
        .tooltip(_tooltip_all())
        .span(12)
        .height(7)
    )
    records = (
        timeseries.Panel()
        .id(ids())
        .title("Log records read")
        .description(
            "Records per second read from the units' journals, by vLLM level; dashed: ERROR "
            "lines known to be benign."
        )
        .datasource(DATASOURCE)
        .with_target(
            _query(
                "sum by (host, unit, level) (rate("
                f"vllm_sentinel_unit_log_records_total{{{UNIT}}}[$__rate_interval]))",
                "{{host}} {{unit}} {{level}}",
                "A",
            )
        )
        .with_target(
            _query(
                "sum by (host, unit) (rate("
                f"vllm_sentinel_unit_benign_errors_total{{{UNIT}}}[$__rate_interval]))",
                "{{host}} {{unit}} benign errors",
                "B",
            )
        )
        .override_by_query(
            "B",
            _dashed(),
        )
        .unit("cps")
        .min(0)
        .legend(_legend_list())
        .tooltip(_tooltip_all())
        .span(8)
        .height(7)
    )
    skipped = (
        timeseries.Panel()
        .id(ids())
        .title("Records skipped")
        .description(
            "Journal records the sentinel could not read, by reason (empty when none were skipped)."
        )
        .datasource(DATASOURCE)
        .with_target(
            _query(
                "sum by (host, reason) (increase("
                f"vllm_sentinel_records_skipped_total{{{HOST}}}[$__rate_interval]))",
                "{{host}} {{reason}}",
            )
        )
        .unit("none")
        .min(0)
        .no_value("none skipped")
        .legend(_legend_list())
        .tooltip(_tooltip_all())
        .span(8)
        .height(7)
    )
    sentinels = (
        table.Panel()
        .id(ids())
        .title("Sentinels")
        .description(
            "The vllm-sentinel targets of Prometheus (job vllm-sentinel) and their versions."
        )
        .datasource(DATASOURCE)
        .with_target(_query('max by (instance) (up{job="vllm-sentinel"})', ref="A", table=True))
        .with_target(
            _query(
                'max by (instance, version) (vllm_sentinel_build_info{job="vllm-sentinel"})',
                ref="B",
                table=True,
            )
        )
        .transformations(_merge_and_organize({"Value #A": "up"}, ("Value #B",)))
        .unit("none")
        .with_override(
            model.MatcherConfig(id_val="byName", options="up"),
            [
                model.DynamicConfigValue(
                    id_val="mappings",
                    value=[
                        m.to_json() for m in _mappings({"0": ("down", "red"), "1": ("up", "green")})
                    ],
                ),
                model.DynamicConfigValue(id_val="custom.cellOptions", value={"type": "color-text"}),
            ],
        )
        .span(8)
        .height(7)
    )
    for panel in (collectors, reconnects, records, skipped, sentinels):
        builder = builder.with_panel(panel)
    return builder


# ---------------------------------------------------------------------------------------------


def _label_variable(
    name: str, label: str, description: str, series: str
) -> dashboard.QueryVariable:
    """A multi-value variable over the values of label ``name`` on ``series`` (All: ``.+``)."""
    return (
        dashboard.QueryVariable(name)
        .label(label)
        .description(description)
        .datasource(DATASOURCE)
        .query(
            {
                "qryType": 1,
                "query": f"label_values({series}, {name})",
                "refId": "PrometheusVariableQueryEditor-VariableQuery",
            }
        )
        .refresh(model.VariableRefresh.ON_TIME_RANGE_CHANGED)
        .sort(model.VariableSort.ALPHABETICAL_ASC)
        .multi(True)
        .include_all(True)
        .all_value(".+")
        .current(model.VariableOption(selected=True, text="All", value="$__all"))
    )


def _variables(builder: dashboard.Dashboard) -> dashboard.Dashboard:
    datasource = dashboard.DatasourceVariable("datasource").label("Data source").type("prometheus")
    host = _label_variable(
        "host", "Host", "Hosts watched by vllm-sentinel.", "vllm_sentinel_unit_state_known"
    )
    unit = _label_variable(
        "unit",
        "Unit",
        "vLLM systemd units on the selected hosts.",
        'vllm_sentinel_unit_state_known{host=~"$host"}',
    )
    runbook = (
        dashboard.ConstantVariable("runbook_url")
        .label("Runbook")
        .description("Base URL of the runbook (docs/runbook.md), asked at import.")
        .value("${" + RUNBOOK_INPUT + "}")
    )
    return (
        builder.with_variable(datasource)
        .with_variable(host)
        .with_variable(unit)
        .with_variable(runbook)
    )


def build_dashboard() -> dict[str, Any]:
    """Build the dashboard and return it as the JSON-ready dict Grafana imports."""
    ids = _Ids()
    builder = (
        dashboard.Dashboard("vLLM units (vllm-sentinel)")
        .uid("vllm-sentinel")
        .description(
            "Startup phases, stalls, crashes with root causes and GPU memory of vLLM systemd "
            "units, from vllm-sentinel."
        )
        .tags(["vllm", "vllm-sentinel", "gpu"])
        .editable()
        .timezone("browser")
        .time("now-6h", "now")
        .refresh("30s")
        .tooltip(model.DashboardCursorSync.CROSSHAIR)
        .link(
            dashboard.DashboardLink("Runbook")
            .type(model.DashboardLinkType.LINK)
            .url(RUNBOOK)
            .icon("doc")
            .tooltip("What each alert means and what to do")
            .target_blank(True)
        )
    )
    builder = _variables(builder)
    builder = builder.annotation(
        dashboard.AnnotationQuery()
        .name("Crashes")
        .datasource(DATASOURCE)
        .enable(True)
        .icon_color("red")
        .expr(
            "max by (host, unit, cause) (increase("
            f"vllm_sentinel_unit_crashes_total{{{UNIT}}}[$__rate_interval])) > 0"
        )
    )
    for row in (_unit_row, _gpu_row, _crash_row, _duration_row, _health_row):
        builder = row(ids, builder)
    document: dict[str, Any] = json.loads(JSONEncoder(sort_keys=True).encode(builder.build()))
    # Fields that the builders do not model: a variable's query as shown in the UI, and the
    # title and tags of a Prometheus annotation query.
    for variable in document["templating"]["list"]:
        if variable["type"] == "query":
            variable["definition"] = variable["query"]["query"]
    for annotation in document["annotations"]["list"]:
        if annotation.get("name") == "Crashes":
            annotation.update(
                {
                    "titleFormat": "{{unit}} on {{host}} crashed: {{cause}}",
                    "tagKeys": "host,unit,cause",
                    "step": "1m",
                    "useValueForTime": False,
                }
            )
    document["id"] = None
    document["__inputs"] = [
        {
            "name": RUNBOOK_INPUT,
            "type": "constant",
            "label": "Runbook URL",
            "value": RUNBOOK_DEFAULT,
            "description": "Where docs/runbook.md is served: a vllm-sentinel's /runbook "
            "(default: the daemon's default address), or your own copy.",
        }
    ]
    return document


def render() -> str:
    """Return the dashboard as the JSON text committed to the repository."""
    return json.dumps(build_dashboard(), indent=2, sort_keys=True, ensure_ascii=False) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument(
        "--output",
        type=Path,
        default=OUTPUT,
        help=f"where to write (default {OUTPUT.relative_to(ROOT)})",
    )
    parser.add_argument(
        "--check", action="store_true", help="do not write; exit 1 if the file differs"
    )
    args = parser.parse_args(argv)
    text = render()
    if args.check:
        current = args.output.read_text(encoding="utf-8") if args.output.exists() else ""
        if current != text:
            print(
                f"{args.output} is out of date: run python scripts/build-dashboard.py",
                file=sys.stderr,
            )
            return 1
        return 0
    args.output.write_text(text, encoding="utf-8")
    print(f"wrote {args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
