"""PromQL found in the deploy files, ready to send to a Prometheus; and a fast copy of the rules.

Used by the dashboard and rule tests, and by the end-to-end test that queries a live Prometheus
scraping the real daemon:

- ``dashboard_expressions(path)``: every query of the Grafana dashboard (panel targets, also
  inside collapsed rows, and annotation queries), with Grafana's variables replaced by concrete
  values (``$host`` → ``.+``, ``$__rate_interval`` → ``1m`` …; override them with ``variables``).
- ``rule_expressions(path)``: every ``expr`` of a Prometheus rules file, recording rules first.
- ``fast_rules(src, dst)``: a copy of the rules whose alerts fire within seconds: every ``for:``
  becomes ``for_seconds``, and every tunable marked ``# fast: VALUE`` in an expression takes
  that value.
- ``replicated_rule_test(src, dst, layout=…)``: a copy of a promtool test file in which every
  sentinel series comes from two identical replicas; unit alerts are expected unchanged, the
  per-sentinel alerts once per replica.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import yaml

__all__ = [
    "DEFAULT_VARIABLES",
    "PER_SENTINEL_ALERTS",
    "dashboard_expressions",
    "dashboard_queries",
    "fast_rules",
    "replicated_rule_test",
    "rule_expressions",
    "rules",
]

PER_SENTINEL_ALERTS = frozenset(
    {"VllmSentinelCollectorDown", "VllmSentinelDown", "VllmSentinelStateNotSaved"}
)
"""Alerts about one sentinel (kept per ``instance`` and ``replica``); the others are about units."""

DEFAULT_VARIABLES: Mapping[str, str] = {
    "host": ".+",
    "unit": ".+",
    "datasource": "prometheus",
    "__rate_interval": "1m",
    "__interval": "30s",
    "__interval_ms": "30000",
    "__range": "1h",
    "__range_s": "3600",
    "__range_ms": "3600000",
}
"""Values for Grafana's variables: multi-value variables are regexes (used with ``=~``)."""

# $name, ${name}, ${name:format} and the deprecated [[name]].
_VARIABLE = re.compile(r"\$\{(?P<braced>\w+)(?::\w+)?\}|\$(?P<plain>\w+)|\[\[(?P<old>\w+)\]\]")

# A tunable: the last number or duration on the line before a `# fast: VALUE` comment.
_FAST_MARKER = re.compile(r"#\s*fast:\s*(?P<value>\S+)\s*$")
_NUMBER_OR_DURATION = re.compile(r"(?<![\w.])\d+(?:\.\d+)?(?:ms|s|m|h|d|w|y)?(?![\w.])")


def _substitute(expr: str, variables: Mapping[str, str]) -> str:
    def replace(match: re.Match[str]) -> str:
        name = match.group("braced") or match.group("plain") or match.group("old")
        if name not in variables:
            raise ValueError(f"unknown Grafana variable ${name} in {expr!r}")
        return variables[name]

    return _VARIABLE.sub(replace, expr)


def _walk_panels(panels: list[dict[str, Any]]) -> Iterator[dict[str, Any]]:
    for panel in panels:
        yield panel
        yield from _walk_panels(panel.get("panels", []))


def dashboard_queries(
    path: str | Path, variables: Mapping[str, str] | None = None
) -> list[tuple[str, str]]:
    """Return ``(where, expr)`` for every query of a dashboard, variables replaced.

    ``where`` names the panel (``panel 'Title' A``) or annotation, for readable failures.
    Raises ``ValueError`` for a variable that is neither given nor a default.
    """
    values = {**DEFAULT_VARIABLES, **(variables or {})}
    dashboard = json.loads(Path(path).read_text(encoding="utf-8"))
    found: list[tuple[str, str]] = []
    for panel in _walk_panels(dashboard.get("panels", [])):
        for target in panel.get("targets", []):
            expr = target.get("expr", "")
            if expr.strip():
                where = f"panel {panel.get('title', '?')!r} {target.get('refId', '?')}"
                found.append((where, _substitute(expr, values)))
    for annotation in dashboard.get("annotations", {}).get("list", []):
        expr = annotation.get("expr") or annotation.get("target", {}).get("expr", "")
        if expr.strip():
            found.append((f"annotation {annotation.get('name', '?')!r}", _substitute(expr, values)))
    return found


def dashboard_expressions(
    path: str | Path, variables: Mapping[str, str] | None = None
) -> list[str]:
    """Return every PromQL expression of a dashboard, with Grafana variables replaced."""
    return [expr for _, expr in dashboard_queries(path, variables)]


def rules(path: str | Path) -> list[dict[str, Any]]:
    """Return every rule of a Prometheus rules file, in file order."""
    document = yaml.safe_load(Path(path).read_text(encoding="utf-8"))
    return [rule for group in document["groups"] for rule in group["rules"]]


def rule_expressions(path: str | Path) -> list[str]:
    """Return every rule's expression, recording rules first, without trailing whitespace."""
    all_rules = rules(path)
    recording = [rule["expr"].strip() for rule in all_rules if "record" in rule]
    alerting = [rule["expr"].strip() for rule in all_rules if "alert" in rule]
    return recording + alerting


def _apply_fast_markers(text: str) -> tuple[str, int]:
    lines = text.splitlines(keepends=True)
    count = 0
    for index, line in enumerate(lines):
        marker = _FAST_MARKER.search(line.rstrip("\n"))
        if marker is None:
            continue
        code = line[: marker.start()]
        tokens = list(_NUMBER_OR_DURATION.finditer(code))
        if not tokens:
            raise ValueError(f"line {index + 1}: '# fast:' marker without a number: {line!r}")
        last = tokens[-1]
        lines[index] = code[: last.start()] + marker.group("value") + code[last.end() :].rstrip()
        lines[index] += "\n" if line.endswith("\n") else ""
        count += 1
    return "".join(lines), count


class _BlockDumper(yaml.SafeDumper):
    """Write multi-line strings (expressions) as literal blocks, for a readable test copy."""


def _represent_str(dumper: yaml.SafeDumper, value: str) -> yaml.ScalarNode:
    style = "|" if "\n" in value else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)


_BlockDumper.add_representer(str, _represent_str)


def fast_rules(src: str | Path, dst: str | Path, for_seconds: int = 1) -> Path:
    """Write a copy of the rules file ``src`` to ``dst`` whose alerts fire within seconds.

    Every alert's ``for:`` becomes ``for_seconds`` (``0`` drops the wait), and in expressions
    every tunable marked ``# fast: VALUE`` takes that value (the marker comment is removed).
    Returns ``dst``. Raises ``ValueError`` for a marker without a number to replace.
    """
    text, _ = _apply_fast_markers(Path(src).read_text(encoding="utf-8"))
    document = yaml.safe_load(text)
    for group in document["groups"]:
        for rule in group["rules"]:
            if "alert" in rule:
                rule["for"] = f"{for_seconds}s"
    out = Path(dst)
    out.write_text(
        yaml.dump(document, Dumper=_BlockDumper, sort_keys=False, width=1000),
        encoding="utf-8",
    )
    return out


_SENTINEL_SERIES = re.compile(r'\bjob="vllm-sentinel"')
_INSTANCE_LABEL = re.compile(r'instance="([^"]*)"')


def _twin_instance(instance: str) -> str:
    """``sentinel-1:9842`` → ``sentinel-1b:9842`` (sorts right after it, as the runbook picks)."""
    host, colon, port = instance.rpartition(":")
    return f"{host}b{colon}{port}" if colon else f"{instance}b"


def replicated_rule_test(src: Path, dst: Path, *, layout: str, rules_path: Path) -> Path:
    """Write a copy of the promtool test ``src`` as seen with two identical sentinels.

    Args:
        src: a promtool test file written for one sentinel.
        dst: where to write the copy.
        layout: ``"instance"`` — the twin is scraped as its own target (``sentinel-1b:9842``);
            ``"replica"`` — both keep the instance and get a ``replica`` label (``a``, ``b``),
            as for Thanos deduplication.
        rules_path: the rules file the copy loads (absolute).

    Every series of job ``vllm-sentinel`` is doubled. Expected alerts about units stay as they
    are (one alert, whatever the number of replicas); those in ``PER_SENTINEL_ALERTS`` are
    expected once per replica, their annotations naming the twin's instance.
    """
    if layout not in ("instance", "replica"):
        raise ValueError(f"unknown layout {layout!r}")
    document: dict[str, Any] = yaml.safe_load(src.read_text(encoding="utf-8"))
    document["rule_files"] = [str(rules_path)]
    for test in document["tests"]:
        series: list[dict[str, Any]] = []
        for item in test.get("input_series", []):
            selector = str(item["series"])
            if not _SENTINEL_SERIES.search(selector):
                series.append(item)
                continue
            if layout == "instance":
                twin = _INSTANCE_LABEL.sub(
                    lambda match: f'instance="{_twin_instance(match[1])}"', selector
                )
                series += [item, {**item, "series": twin}]
            else:
                series += [
                    {**item, "series": selector.replace("{", f'{{replica="{name}",', 1)}
                    for name in ("a", "b")
                ]
        test["input_series"] = series
        for case in test.get("alert_rule_test", []):
            if case["alertname"] not in PER_SENTINEL_ALERTS:
                continue
            expected: list[dict[str, Any]] = []
            for alert in case.get("exp_alerts") or []:
                labels = dict(alert.get("exp_labels", {}))
                annotations = dict(alert.get("exp_annotations", {}))
                if layout == "replica":
                    expected += [
                        {**alert, "exp_labels": {**labels, "replica": name}} for name in ("a", "b")
                    ]
                    continue
                instance = str(labels["instance"])
                twin_annotations = {
                    key: value
                    if key == "runbook_url"
                    else value.replace(instance, _twin_instance(instance))
                    for key, value in annotations.items()
                }
                expected += [
                    alert,
                    {
                        "exp_labels": {**labels, "instance": _twin_instance(instance)},
                        "exp_annotations": twin_annotations,
                    },
                ]
            case["exp_alerts"] = expected
    dst.write_text(yaml.safe_dump(document, sort_keys=False, width=1000), encoding="utf-8")
    return dst
