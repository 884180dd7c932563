"""The startup endpoint's documents: one unit's state for a load balancer, a deploy script or
an autoscaler (core: pure; served by ``http.py`` as ``/units`` and ``/units/{host}/{unit}``).

Each unit is one JSON object in the shape vLLM's users ask for (vllm-project/vllm#50282
``/startupz``, PR #45551 ``/readiness/stages``)::

    {"host": "llm-two", "unit": "vllm-kimi-k25.service",
     "state": "starting",             # starting | ready | sleeping | unhealthy | crashed
                                      #   | stopped
     "phase": "loading_weights",      # the phase as the logs (or a /health probe) say
     "detail": "weights 41/64 shards",
     "elapsed_seconds": 312.4,        # since the current incarnation started
     "phase_elapsed_seconds": 120.0,  # since it entered its phase
     "eta_seconds": null,             # seconds until ready, when there is a basis (eta.py)
     "expected_ready_at": null,       # when, and what the estimate rests on:
     "eta_basis": null,               #   "vllm" | "history" | "both"
     "eta_lower_bound": null,         # true for "vllm": this phase's bar only, the unit
                                      #   will be ready no sooner (eta.ETA_BASES)
     "eta_overdue_seconds": null,     # how long ago the estimate ran out (eta_seconds null)
     "slow": false,                   # slower than usual for this unit and model
     "progress": 0.640625,            # share of the phase's work vLLM reported done, or null
     "stalled": false, "state_known": true,
     "ready_source": null,            # "log" | "health_probe" once ready
     "invocation_id": "…", "started_at": "…Z", "ready_at": null,
     "model": "…", "vllm_version": "…", "tensor_parallel_size": 8,
     "last_crash": {"cause", "exception", "message", "phase", "at", "invocation_id",
                    "hint": {"text", "runbook", "rule"}} | null,   # report.crash_to_json
     "health": {"url", "up", "status", "error", "last_probe_at", "last_success_at",
                "failing_since", "failures", "unhealthy", "duration_seconds",
                "served_models"} | null,                          # report.health_to_json
     # vLLM 0.33's modes (modes_report, runtime_modes):
     "role": "serve",                 # "serve" | "weight_cache" (a `vllm preload` daemon)
     "startup_kind": "full",          # "full" | "weight_cache" | "startup_plan"
     "sleeping_since": null,          # when it fell asleep (state "sleeping")
     "sleep_freed_bytes": null, "sleep_kept_bytes": null,
     "stall_reason": null,            # "no_progress" | "vllm_watchdog" while stalled
     "watchdog_dump_path": null,      # where vLLM's watchdog dumped the stack
     "will_time_out": false,          # the ETA lies past VLLM_ENGINE_READY_TIMEOUT_S
     "ready_timeout_seconds": 600.0, "ready_timeout_remaining_seconds": 288.0}

``HTTP_STATUS`` maps the state to the answer's status code, so that ``curl -f`` and a load
balancer's health check read the state without parsing JSON: ``ready`` 200, ``starting`` 503,
``unhealthy`` 503 (up per its logs, but ``/health`` fails), ``sleeping`` 503 (vLLM's sleep
mode: its weights and KV cache released until ``POST /wake_up``; never unhealthy, stalled or
slow), ``stopped`` 503 (stopped or
stopping on purpose), ``crashed`` 500 (it will not come up without a restart; systemd may be
restarting it, and the next incarnation shows ``starting``). An unknown unit is 404 (``http.py``).
While the host's journal collector is down (``state_known: false``) the last known state is
served with its code.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from enum import StrEnum
from types import MappingProxyType
from typing import Any

from vllm_sentinel.engine.catalog.phases import Outcome, Phase
from vllm_sentinel.engine.hints import hint_context, without_weight_caches
from vllm_sentinel.engine.report import (
    crash_to_json,
    eta_is_lower_bound,
    format_duration,
    health_to_json,
    is_settled,
    iso_utc,
)
from vllm_sentinel.engine.snapshot import (
    GpuDevice,
    GpuProcessUsage,
    HostSnapshot,
    IncarnationSnapshot,
    Snapshot,
    UnitSnapshot,
)

__all__ = [
    "HTTP_STATUS",
    "UnitState",
    "find_unit",
    "unit_document",
    "unit_state",
    "units_document",
]


class UnitState(StrEnum):
    """A unit's state as the startup endpoint reports it."""

    STARTING = "starting"
    READY = "ready"
    UNHEALTHY = "unhealthy"
    CRASHED = "crashed"
    STOPPED = "stopped"
    SLEEPING = "sleeping"  # vLLM sleep mode: ready, not serving until woken (vllm2026)


HTTP_STATUS: Mapping[UnitState, int] = MappingProxyType(
    {
        UnitState.READY: 200,
        UnitState.STARTING: 503,
        UnitState.UNHEALTHY: 503,
        UnitState.STOPPED: 503,
        UnitState.CRASHED: 500,
        UnitState.SLEEPING: 503,
    }
)
"""The HTTP status of ``GET /units/{host}/{unit}`` for each state."""

_PHASE_DETAIL: Mapping[Phase, str] = MappingProxyType(
    {
        Phase.STARTING: "process started",
        Phase.INITIALIZING: "initializing the engine and workers",
        Phase.LOADING_WEIGHTS: "loading weights",
        Phase.COMPILING: "torch.compile",
        Phase.PROFILING_KV_CACHE: "profiling memory for the KV cache",
        Phase.CAPTURING_CUDA_GRAPHS: "capturing CUDA graphs",
        Phase.STARTING_API_SERVER: "starting the API server",
        Phase.READY: "ready",
        Phase.STOPPING: "stopping",
        Phase.STOPPED: "stopped",
        Phase.CRASHED: "crashed",
        Phase.SLEEPING: "sleeping",
    }
)


def unit_state(unit: UnitSnapshot) -> UnitState:
    """The endpoint state of a unit (its current incarnation, as the Monitor decorated it)."""
    current = unit.current
    if current is None:
        return UnitState.STARTING
    if current.outcome is Outcome.CRASHED:
        return UnitState.CRASHED
    if current.outcome is Outcome.STOPPED or current.phase in (Phase.STOPPING, Phase.STOPPED):
        return UnitState.STOPPED
    if current.phase is Phase.SLEEPING:
        return UnitState.SLEEPING
    if current.phase is Phase.READY:
        health = unit.health
        return UnitState.UNHEALTHY if health is not None and health.unhealthy else UnitState.READY
    return UnitState.STARTING


def _seconds(start: datetime | None, end: datetime) -> float | None:
    if start is None:
        return None
    return round(max(0.0, (end - start).total_seconds()), 3)


def _detail(unit: UnitSnapshot, state: UnitState, now: datetime) -> str:
    current = unit.current
    if current is None:
        return "no record yet"
    if state is UnitState.CRASHED:
        crash = current.crash or unit.last_crash
        if crash is None:
            return "crashed"
        what = f" ({crash.exception})" if crash.exception else ""
        return f"crashed in {crash.phase.value}: {crash.cause.value}{what}"
    health = unit.health
    if state is UnitState.UNHEALTHY and health is not None:
        failing = _seconds(health.failing_since, now)
        why = f"HTTP {health.status}" if health.error == "http_status" else health.error
        count = f"{health.failures} probe{'s' if health.failures != 1 else ''}"
        return (
            f"ready per its logs, but /health has failed for {format_duration(failing)} "
            f"({count}): {why}"
        )
    if state is UnitState.SLEEPING:
        modes = current.modes
        since = f" since {iso_utc(modes.sleeping_since)}" if modes.sleeping_since else ""
        memory = ""
        if modes.sleep_freed_bytes is not None:
            memory = (
                f": freed {modes.sleep_freed_bytes / 2**30:.2f} GiB, "
                f"{(modes.sleep_kept_bytes or 0) / 2**30:.2f} GiB still in use"
            )
        return f"sleeping{since} (vLLM sleep mode){memory}; POST /wake_up wakes it"
    if state is UnitState.READY and unit.ready_source == "health_probe":
        return "ready: /health answered 200 before the logs said so"
    text = _PHASE_DETAIL[current.phase]
    progress = current.progress
    if current.modes.role == "weight_cache":
        text = "weight-cache daemon: serving weights" if current.phase is Phase.READY else text
    if current.phase is Phase.LOADING_WEIGHTS and current.modes.startup_kind == "weight_cache":
        text = "mapping weights from the weight-cache daemon"
    elif current.phase is Phase.LOADING_WEIGHTS and progress.weights_shards_total:
        loaded = progress.weights_shards_loaded or 0
        text = f"weights {loaded}/{progress.weights_shards_total} shards"
    if unit.stalled and unit.stall_reason == "vllm_watchdog":
        text += (
            f"; vLLM's watchdog dumped the stack to {current.modes.watchdog_dump_path} (stalled)"
        )
    elif unit.stalled:
        idle = _seconds(unit.last_progress_at, now)
        text += f"; no progress for {format_duration(idle)} (stalled)"
    elif unit.slow and unit.usual_phase_seconds is not None:
        text += f"; slower than usual ({format_duration(unit.usual_phase_seconds)})"
    if unit.will_time_out:
        text += (
            f"; will time out: ready later than VLLM_ENGINE_READY_TIMEOUT_S="
            f"{unit.ready_timeout_seconds:.0f}s allows"
        )
    return text


def _progress(current: IncarnationSnapshot) -> float | None:
    if current.phase is Phase.LOADING_WEIGHTS:
        return current.progress.weights_loaded_ratio
    return None


def _ready_at(current: IncarnationSnapshot) -> datetime | None:
    for entry in current.phases:
        if entry.phase is Phase.READY:
            return entry.entered_at
    return None


def unit_document(
    unit: UnitSnapshot,
    now: datetime,
    *,
    state_known: bool = True,
    gpu_processes: tuple[GpuProcessUsage, ...] = (),
    gpus: tuple[GpuDevice, ...] = (),
) -> dict[str, Any]:
    """One unit's startup document (the module docstring has the shape).

    Args:
        unit: the unit as published (tracker snapshot decorated by the Monitor).
        now: the time the document describes (the snapshot's time).
        state_known: False while the host's journal collector is down.
        gpu_processes: the host's GPU processes, named in a memory crash's hint.
        gpus: the host's GPUs (their sizes weigh the memory others held at a start).
    """
    state = unit_state(unit)
    current = unit.current
    end = now
    if current is not None and current.ended_at is not None:
        end = current.ended_at
    starting = state is UnitState.STARTING
    return {
        "host": unit.host,
        "unit": unit.unit,
        "state": state.value,
        "phase": current.phase.value if current else None,
        "detail": _detail(unit, state, now),
        "elapsed_seconds": _seconds(current.started_at, end) if current else None,
        "phase_elapsed_seconds": _seconds(current.phase_entered_at, end) if current else None,
        "eta_seconds": unit.eta_seconds if starting else None,
        "expected_ready_at": iso_utc(unit.expected_ready_at) if starting else None,
        "eta_basis": unit.eta_basis.value if starting and unit.eta_basis else None,
        "eta_lower_bound": eta_is_lower_bound(unit.eta_basis) if starting else None,
        "eta_overdue_seconds": unit.eta_overdue_seconds if starting else None,
        "progress": _progress(current) if current else None,
        "stalled": unit.stalled,
        "slow": unit.slow,
        "state_known": state_known,
        "ready_source": unit.ready_source if state is not UnitState.STARTING else None,
        "invocation_id": current.id if current else None,
        "started_at": iso_utc(current.started_at) if current else None,
        "ready_at": iso_utc(_ready_at(current)) if current else None,
        "model": current.model if current else None,
        "vllm_version": current.vllm_version if current else None,
        "tensor_parallel_size": current.tensor_parallel_size if current else None,
        "last_crash": crash_to_json(
            unit.last_crash,
            hint_context(unit, gpu_processes, gpus),
            settled=unit.last_crash is None or is_settled(unit, unit.last_crash),
        ),
        "health": health_to_json(unit.health),
        **_modes(unit, current, starting),  # vLLM 0.33's modes (vllm2026)
    }


def _modes(
    unit: UnitSnapshot, current: IncarnationSnapshot | None, starting: bool
) -> dict[str, Any]:
    """The document's keys of vLLM's newer modes (the module docstring)."""
    modes = current.modes if current is not None else None
    sleeping = current is not None and current.phase is Phase.SLEEPING
    return {
        "role": modes.role if modes else None,
        "startup_kind": modes.startup_kind if modes else None,
        "sleeping_since": iso_utc(modes.sleeping_since) if modes and sleeping else None,
        "sleep_freed_bytes": modes.sleep_freed_bytes if modes and sleeping else None,
        "sleep_kept_bytes": modes.sleep_kept_bytes if modes and sleeping else None,
        "stall_reason": unit.stall_reason if unit.stalled else None,
        "watchdog_dump_path": modes.watchdog_dump_path if modes else None,
        "will_time_out": unit.will_time_out if starting else False,
        "ready_timeout_seconds": unit.ready_timeout_seconds if starting else None,
        "ready_timeout_remaining_seconds": (
            unit.ready_timeout_remaining_seconds if starting else None
        ),
    }


def _is_known(host: HostSnapshot) -> bool:
    state = host.collectors.get("journal")
    return state is not None and state.up


def units_document(snapshot: Snapshot) -> dict[str, Any]:
    """``/units``: ``{"at": …, "units": [unit documents]}``, every host's units in order."""
    return {
        "at": iso_utc(snapshot.at),
        "units": [
            unit_document(
                unit,
                snapshot.at,
                state_known=_is_known(host),
                gpu_processes=without_weight_caches(host.gpu_processes, host.units),
                gpus=host.gpus,
            )
            for host in snapshot.hosts
            for unit in host.units
        ],
    }


def find_unit(snapshot: Snapshot, host: str, unit: str) -> dict[str, Any] | None:
    """The document of ``unit`` on ``host``, or ``None`` when the snapshot has no such unit."""
    for entry in snapshot.hosts:
        if entry.host != host:
            continue
        for item in entry.units:
            if item.unit == unit:
                return unit_document(
                    item,
                    snapshot.at,
                    state_known=_is_known(entry),
                    gpu_processes=without_weight_caches(entry.gpu_processes, entry.units),
                    gpus=entry.gpus,
                )
    return None
