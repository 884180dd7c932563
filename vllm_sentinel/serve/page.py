"""The status page served at ``/``: hosts × units as HTML (core: pure rendering, no I/O).

It renders the ``/status`` document (``report.status_document``), so the page says exactly
what ``/status`` says: per host its collectors (a down one said plainly), per unit its phase
(in the Grafana dashboard's phase colours), a progress bar while weights load, time in the
phase, stalled or slow, ready but failing its ``/health`` probe (since when, how many
failures), GPU memory, starts and crashes in the last 24 h (crashes counted once settled, those
still settling said apart), and the last crash with its cause, exception and fix hint (a cause
still ``pending`` said so).

The page is complete without JavaScript (a plain table; ``<noscript>`` reloads it every
``NOSCRIPT_REFRESH_SECONDS``). ``static/status.js`` refreshes it in place: it fetches
``?part=main`` (``render_main``) every few seconds and swaps the rows that changed, so nothing
flickers and nothing navigates. Everything taken from the document is escaped with
``html.escape``: log text is hostile. The skeleton is a ``string.Template`` (stdlib: the page is
small, and a template engine would be a dependency for two dozen lines of markup).

Facts a unit may carry or not (an ETA, ``slow``) are rows of ``PROGRESS_FACTS`` and
``UNIT_FLAGS``: rendered when the document has them, nothing otherwise.
"""

from __future__ import annotations

import html
import re
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime
from string import Template
from types import MappingProxyType
from typing import Any

from vllm_sentinel.engine.catalog.phases import Phase
from vllm_sentinel.engine.hints import RUNBOOK_URL
from vllm_sentinel.engine.modes_report import mode_facts
from vllm_sentinel.engine.report import (
    eta_text,
    format_duration,
    pending_crash_text,
    unhealthy_text,
)

__all__ = [
    "NOSCRIPT_REFRESH_SECONDS",
    "PROGRESS_FACTS",
    "REFRESH_SECONDS",
    "UNIT_FLAGS",
    "render_main",
    "render_page",
]

REFRESH_SECONDS = 5.0
"""How often the script refreshes the page (``?refresh=SECONDS`` overrides, 1 to 300)."""

NOSCRIPT_REFRESH_SECONDS = 15
"""How often a browser without JavaScript reloads the page."""

_Unit = Mapping[str, Any]


def _eta(fact: Callable[[str], Any]) -> str | None:
    text = eta_text(
        fact("eta_seconds"),
        fact("expected_ready_at"),
        fact("eta_basis"),
        fact("eta_overdue_seconds"),
    )
    return f"ETA {text}" if text else None


PROGRESS_FACTS: tuple[tuple[str, Callable[[Callable[[str], Any]], str | None]], ...] = (
    ("eta", _eta),
)
"""(name, render) of facts shown next to the progress bar when the unit has them.

``render`` gets a lookup of the document's keys: a key is looked up in the unit, then its
current incarnation, then that incarnation's ``progress`` (``None`` when absent), and returns
the text, or ``None`` to show nothing. The ETA says its basis: a lower bound (vLLM's bar of the
current phase only) reads ``ETA ≥ 18s, this phase's bar only``, with no firm ready time
(``report.eta_text``). A new fact of the snapshot is one row here.
"""

UNIT_FLAGS: tuple[tuple[str, str, str], ...] = (
    ("stalled", "stalled", "no progress for longer than the phase's stall threshold"),
    ("slow", "slow", "slower than this unit's usual start"),
    ("unhealthy", "unhealthy", "its /health probe fails"),
    (
        "will_time_out",
        "will time out",
        "its ETA lies past vLLM's engine ready timeout (VLLM_ENGINE_READY_TIMEOUT_S)",
    ),
)
"""(JSON key, label, explanation) of boolean flags shown next to the phase when true."""

_COLLECTOR_REASONS: Mapping[str, str] = MappingProxyType(
    {
        "ssh_connect_failed": "cannot connect over SSH",
        "ssh_connection_lost": "the SSH connection was lost",
        "ssh_auth_failed": "SSH authentication failed (key, user or host key)",
        "ssh_channel_failed": "the SSH session could not start the command",
        "stream_ended": "journalctl exited",
        "command_failed": "the command failed",
        "internal_error": "an internal error (see the sentinel's log)",
    }
)
"""Collector reasons in plain words (others are shown as they are)."""
_COLLECTOR_ORDER: Mapping[str, int] = MappingProxyType({"journal": 0, "gpu": 1})
"""The journal first: it decides whether the phases shown are current."""
_SUMMARY_WORDS = (
    ("crashed", "crashed"),
    ("stalled", "stalled"),
    ("unhealthy", "unhealthy"),
    ("ready", "ready"),
)
_STARTUP = frozenset(
    phase.value
    for phase in (
        Phase.STARTING,
        Phase.INITIALIZING,
        Phase.LOADING_WEIGHTS,
        Phase.COMPILING,
        Phase.PROFILING_KV_CACHE,
        Phase.CAPTURING_CUDA_GRAPHS,
        Phase.STARTING_API_SERVER,
    )
)
_PHASES = frozenset(phase.value for phase in Phase)
_GIB = 1 << 30
_MESSAGE_CHARS = 160
_BACKTICKS = re.compile(r"`([^`]+)`")

_PAGE = Template(
    """<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<meta name="color-scheme" content="light dark">
<title>$title</title>
<link rel="icon" href="data:,">
<link rel="stylesheet" href="static/status.css?v=$version">
<noscript><meta http-equiv="refresh" content="$noscript_refresh"></noscript>
<script src="static/status.js?v=$version" defer></script>
</head>
<body data-refresh="$refresh">
<header>
<h1>vllm-sentinel</h1>
<p id="live" class="live" hidden></p>
</header>
<main id="units">
$main
</main>
<footer>
<a href="metrics">metrics</a> (Prometheus) · <a href="status">status</a> (JSON) ·
<a href="units">units</a> (startup state) · <a href="healthz">healthz</a> ·
<a href="$runbook">runbook</a> · vllm-sentinel $version
</footer>
</body>
</html>
"""
)


def _e(value: object) -> str:
    """Escape anything for HTML text and attributes."""
    return html.escape(str(value), quote=True)


def _code(text: str) -> str:
    """Escape ``text`` and set its `backticked` parts as code."""
    return _BACKTICKS.sub(r"<code>\1</code>", _e(text))


def _parse_time(value: object) -> datetime | None:
    if not isinstance(value, str):
        return None
    try:
        return datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None


def _ago(at: datetime | None, moment: object) -> str:
    """How long before ``at`` the document's time ``moment`` was; ``""`` when either is
    unknown, or when one has a zone and the other none (a replayed text's local time, whose
    offset is unknown: no difference to speak of)."""
    then = _parse_time(moment)
    if at is None or then is None or (at.tzinfo is None) != (then.tzinfo is None):
        return ""
    return format_duration(max(0.0, (at - then).total_seconds()))


def _shorten(text: str, width: int) -> str:
    return text if len(text) <= width else text[: width - 1] + "…"


def _current(unit: _Unit) -> Mapping[str, Any]:
    incarnations = unit.get("incarnations") or [{}]
    current = incarnations[-1]
    return current if isinstance(current, Mapping) else {}


def _phase_of(current: Mapping[str, Any]) -> tuple[str, object]:
    phases = current.get("phases") or [{}]
    last = phases[-1] if isinstance(phases[-1], Mapping) else {}
    phase = str(last.get("phase") or "unknown")
    return phase, last.get("entered_at")


def _fact(unit: _Unit, key: str) -> Any:
    current = _current(unit)
    progress = current.get("progress")
    for source in (unit, current, progress if isinstance(progress, Mapping) else {}):
        value = source.get(key)
        if value is not None:
            return value
    return None


def _gib(size: float) -> str:
    return f"{size / _GIB:.1f} GiB"


# --------------------------------------------------------------------------- cells


def _unit_cell(unit: _Unit, current: Mapping[str, Any]) -> str:
    facts = [
        _e(text)
        for text in (
            current.get("model"),
            f"vLLM {current['vllm_version']}" if current.get("vllm_version") else None,
            f"TP={current['tensor_parallel_size']}"
            if current.get("tensor_parallel_size")
            else None,
        )
        if text
    ]
    detail = f'<span class="detail">{" · ".join(facts)}</span>' if facts else ""
    name = f'<span class="name">{_e(unit.get("unit"))}</span>'
    return f'<th scope="row" data-label="Unit">{name}{detail}</th>'


def _phase_cell(unit: _Unit, phase: str, known: bool) -> str:
    css = phase if phase in _PHASES else "unknown"
    parts = [f'<span class="phase phase-{css}">{_e(phase)}</span>']
    for key, label, why in UNIT_FLAGS:
        if unit.get(key) is True:
            parts.append(f'<span class="flag flag-{key}" title="{_e(why)}">{_e(label)}</span>')
    if not known:
        parts.append('<span class="flag flag-unknown" title="the journal collector is down">'
                     "last known</span>")  # fmt: skip
    health = unhealthy_text(unit.get("health"))
    if health:
        parts.append(f'<div class="health-state" role="status">{_e(health)}</div>')
    return f'<td data-label="Phase">{" ".join(parts)}</td>'


def _progress_cell(unit: _Unit, current: Mapping[str, Any], phase: str) -> str:
    progress = current.get("progress")
    progress = progress if isinstance(progress, Mapping) else {}
    parts = []
    loaded, total = progress.get("weights_shards_loaded"), progress.get("weights_shards_total")
    ratio = progress.get("weights_loaded_ratio")
    if phase == Phase.LOADING_WEIGHTS.value and isinstance(total, int) and total > 0:
        done = loaded if isinstance(loaded, int) else 0
        percent = f"{float(ratio or 0):.0%}"
        parts.append(
            f'<progress max="{total}" value="{min(done, total)}">{_e(percent)}</progress>'
            f'<span class="shards">{done}/{total} shards ({_e(percent)})</span>'
        )
    elif phase == Phase.LOADING_WEIGHTS.value:
        parts.append('<progress class="indeterminate"></progress>')
    elif phase in _STARTUP or phase == "ready":
        weights = progress.get("model_weights_bytes")
        if isinstance(weights, int | float) and weights > 0:
            parts.append(f'<span class="shards">weights {_gib(weights)} loaded</span>')
    if phase in _STARTUP:
        for name, render in PROGRESS_FACTS:
            text = render(lambda key: _fact(unit, key))
            if text is not None:
                parts.append(f'<span class="fact fact-{name}">{_e(text)}</span>')
    for text in mode_facts(unit):  # vLLM 0.33's modes (modes_report, vllm2026)
        parts.append(f'<span class="fact fact-mode">{_e(text)}</span>')
    return f'<td data-label="Progress">{" ".join(parts) or "–"}</td>'


def _in_phase_cell(at: datetime | None, entered: object) -> str:
    since = _ago(at, entered)
    when = _e(entered) if isinstance(entered, str) else ""
    text = f'<time datetime="{when}">{_e(since)}</time>' if since else "–"
    return f'<td data-label="In phase">{text}</td>'


def _gpu_cell(unit: _Unit) -> str:
    per_gpu = unit.get("gpu_memory_used_bytes")
    if not isinstance(per_gpu, Mapping) or not per_gpu:
        return '<td data-label="GPU memory">–</td>'
    sizes = {
        str(gpu): float(size) for gpu, size in per_gpu.items() if isinstance(size, int | float)
    }
    total = sum(sizes.values())
    count = len(sizes)
    title = ", ".join(f"GPU {gpu}: {_gib(size)}" for gpu, size in sorted(sizes.items()))
    label = "GPU" if count == 1 else "GPUs"
    return (
        f'<td data-label="GPU memory" title="{_e(title)}">{_e(_gib(total))} on {count} {label}</td>'
    )


def _day_cell(unit: _Unit) -> str:
    starts, crashes = unit.get("starts_last_24h"), unit.get("crashes_last_24h")
    if not isinstance(starts, int) or not isinstance(crashes, int):
        return '<td data-label="Last 24 h">–</td>'
    capped = "+" if unit.get("last_24h_capped") else ""
    settling = unit.get("crashes_settling")
    settling = settling if isinstance(settling, int) else 0
    crash_class = ' class="bad"' if crashes or settling else ""
    words = f"{crashes}{capped} crash{'es' if crashes != 1 else ''}"
    if settling:
        # crashes_total counts a crash once its cause is settled: say so, never "0 crashes"
        why = (
            "a crash is counted once its root cause is settled: about 30 s after the exit, "
            "longer while its traceback is still arriving"
        )
        words += f' counted <span class="settling" title="{_e(why)}">+ {settling} settling</span>'
    return (
        f'<td data-label="Last 24 h">{starts}{capped} start{"s" if starts != 1 else ""} · '
        f"<span{crash_class}>{words}</span></td>"
    )


def _crash_cell(unit: _Unit, at: datetime | None, runbook_url: str) -> str:
    crash = unit.get("last_crash")
    if not isinstance(crash, Mapping):
        return '<td data-label="Last crash" class="crash">–</td>'
    cause = str(crash.get("cause") or "unknown")
    ago = _ago(at, crash.get("at"))
    when = f", {_e(ago)} ago" if ago else ""
    phase = f" in {_e(crash.get('phase'))}" if crash.get("phase") else ""
    anchor = f"{runbook_url}#{cause}"
    lines = [
        f'<div class="cause"><a href="{_e(anchor)}">{_e(cause)}</a>{phase}{when}</div>',
    ]
    pending = pending_crash_text(crash)
    if pending:
        lines.append(f'<div class="pending">{_e(pending)}</div>')
    exception, message = str(crash.get("exception") or ""), str(crash.get("message") or "")
    if exception or message:
        what = f"<code>{_e(exception)}</code>: " if exception else ""
        lines.append(
            f'<div class="exception" title="{_e(_shorten(message, 2000))}">'
            f"{what}{_e(_shorten(message, _MESSAGE_CHARS))}</div>"
        )
    hint = crash.get("hint")
    if isinstance(hint, Mapping) and hint.get("text"):
        lines.append(f'<div class="hint"><strong>Fix:</strong> {_code(str(hint["text"]))}</div>')
    return f'<td data-label="Last crash" class="crash">{"".join(lines)}</td>'


def _unit_row(unit: _Unit, at: datetime | None, known: bool, runbook_url: str) -> str:
    current = _current(unit)
    phase, entered = _phase_of(current)
    key = f"unit:{unit.get('host')}/{unit.get('unit')}"
    classes = ["unit", f"row-{phase if phase in _PHASES else 'unknown'}"]
    if unit.get("stalled") is True:
        classes.append("row-stalled")
    if unit.get("unhealthy") is True:
        classes.append("row-unhealthy")
    cells = (
        _unit_cell(unit, current),
        _phase_cell(unit, phase, known),
        _progress_cell(unit, current, phase),
        _in_phase_cell(at, entered),
        _gpu_cell(unit),
        _day_cell(unit),
        _crash_cell(unit, at, runbook_url),
    )
    return f'<tr data-key="{_e(key)}" class="{" ".join(classes)}">{"".join(cells)}</tr>'


# --------------------------------------------------------------------------- hosts

_HEADER = (
    "<thead><tr>"
    + "".join(
        f'<th scope="col">{name}</th>'
        for name in (
            "Unit",
            "Phase",
            "Progress",
            "In phase",
            "GPU memory",
            "Last 24 h",
            "Last crash",
        )
    )
    + "</tr></thead>"
)


def _collector_item(name: str, state: Mapping[str, Any], at: datetime | None) -> str:
    reason = str(state.get("reason") or "")
    if state.get("up"):
        return f'<li class="up">{_e(name)}: up</li>'
    if reason == "starting":
        return f'<li class="starting">{_e(name)}: starting</li>'
    since = _ago(at, state.get("since"))
    words = _COLLECTOR_REASONS.get(reason, reason or "no reason given")
    when = f" for {_e(since)}" if since else ""
    return f'<li class="down">{_e(name)}: <strong>DOWN</strong>{when} ({_e(words)})</li>'


def _host_notes(collectors: Mapping[str, Any]) -> list[str]:
    notes = []
    journal = collectors.get("journal")
    if (
        isinstance(journal, Mapping)
        and not journal.get("up")
        and journal.get("reason") != "starting"
    ):
        notes.append(
            "The journal collector is down: the phases below are the last known, and "
            "nothing new is seen until it is back."
        )
    gpu = collectors.get("gpu")
    if isinstance(gpu, Mapping) and not gpu.get("up") and gpu.get("reason") != "starting":
        notes.append(
            "The GPU collector is down: GPU memory is not current, and stall detection sees "
            "log progress only."
        )
    return notes


def _host_section(
    host: Mapping[str, Any], units: Sequence[_Unit], at: datetime | None, runbook_url: str
) -> str:
    name = str(host.get("host"))
    collectors = host.get("collectors")
    collectors = collectors if isinstance(collectors, Mapping) else {}
    ordered = sorted(
        collectors.items(), key=lambda item: (_COLLECTOR_ORDER.get(item[0], 2), item[0])
    )
    items = "".join(
        _collector_item(str(key), state, at) for key, state in ordered if isinstance(state, Mapping)
    )
    notes = "".join(
        f'<p class="alert" role="status">{_e(note)}</p>' for note in _host_notes(collectors)
    )
    journal = collectors.get("journal")
    known = not isinstance(journal, Mapping) or bool(journal.get("up"))
    head = (
        f'<div class="host-head" data-key="{_e("host:" + name)}"><h2>{_e(name)}</h2>'
        f'<ul class="collectors">{items or "<li>no collectors</li>"}</ul>{notes}</div>'
    )
    if units:
        rows = "".join(_unit_row(unit, at, known, runbook_url) for unit in units)
    else:
        rows = (
            f'<tr data-key="{_e("none:" + name)}"><td colspan="7" class="empty">'
            "No unit seen yet on this host.</td></tr>"
        )
    table = f'<table class="units">{_HEADER}<tbody>{rows}</tbody></table>'
    return f'<section class="host">{head}{table}</section>'


def _summary(document: Mapping[str, Any], units: Sequence[_Unit], at: datetime | None) -> str:
    hosts = document.get("hosts") or []
    counts = []
    for key, word in _SUMMARY_WORDS:
        if key in ("stalled", "unhealthy"):
            number = sum(1 for unit in units if unit.get(key) is True)
        else:  # an unhealthy unit is not counted ready
            number = sum(
                1
                for unit in units
                if _phase_of(_current(unit))[0] == key and unit.get("unhealthy") is not True
            )
        if number:
            counts.append(f'<span class="count count-{key}">{number} {word}</span>')
    down = sum(
        1
        for host in hosts
        if isinstance(host, Mapping)
        for state in (host.get("collectors") or {}).values()
        if isinstance(state, Mapping) and not state.get("up") and state.get("reason") != "starting"
    )
    if down:
        counts.append(
            f'<span class="count count-down">{down} collector{"s" if down != 1 else ""} down</span>'
        )
    when = at.strftime("%Y-%m-%d %H:%M:%S UTC") if at else "?"
    stamp = _e(document.get("at") or "")
    return (
        f'<p class="summary" data-key="summary" data-title="{_e(_title(units))}">'
        f"{len(hosts)} host{'s' if len(hosts) != 1 else ''}"
        f" · {len(units)} unit{'s' if len(units) != 1 else ''}"
        f"{' · ' if counts else ''}{' · '.join(counts)}"
        f' · as of <time datetime="{stamp}">{_e(when)}</time></p>'
    )


def _title(units: Sequence[_Unit]) -> str:
    crashed = sum(1 for unit in units if _phase_of(_current(unit))[0] == "crashed")
    return f"({crashed} crashed) vllm-sentinel" if crashed else "vllm-sentinel"


def render_main(document: Mapping[str, Any], *, runbook_url: str = RUNBOOK_URL) -> str:
    """The page's ``<main>`` content: a summary line, then one section per host.

    Args:
        document: the ``/status`` document.
        runbook_url: the runbook page the cause links point into (``#<cause>`` appended).
    """
    at = _parse_time(document.get("at"))
    units = [unit for unit in document.get("units") or [] if isinstance(unit, Mapping)]
    by_host: dict[str, list[_Unit]] = {}
    for unit in units:
        by_host.setdefault(str(unit.get("host")), []).append(unit)
    sections = [
        _host_section(host, by_host.get(str(host.get("host")), []), at, runbook_url)
        for host in document.get("hosts") or []
        if isinstance(host, Mapping)
    ]
    if not sections:
        sections.append('<p class="empty" data-key="empty">No hosts configured.</p>')
    return _summary(document, units, at) + "\n" + "\n".join(sections)


def render_page(
    document: Mapping[str, Any],
    *,
    version: str,
    refresh_seconds: float = REFRESH_SECONDS,
    runbook_url: str = RUNBOOK_URL,
) -> str:
    """The whole page (``/``): the skeleton around ``render_main``.

    Args:
        document: the ``/status`` document.
        version: the sentinel's version (shown, and in the asset URLs so caches renew).
        refresh_seconds: how often the script refreshes the page in place.
        runbook_url: the runbook page the cause links point into.
    """
    units = [unit for unit in document.get("units") or [] if isinstance(unit, Mapping)]
    return _PAGE.substitute(
        title=_e(_title(units)),
        version=_e(version),
        refresh=_e(f"{refresh_seconds:g}"),
        noscript_refresh=NOSCRIPT_REFRESH_SECONDS,
        runbook=_e(runbook_url),
        main=render_main(document, runbook_url=runbook_url),
    )
