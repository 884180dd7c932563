"""The words and JSON of vLLM's newer modes (``runtime_modes``), for ``replay``, ``/status``,
``status`` and the status page (core: pure).

JSON (added to ``report``'s documents; keys only ever added)::

    incarnation "modes": {"role": "serve"|"weight_cache", "startup_kind": "full"|
        "weight_cache"|"startup_plan", "sleeping_since": iso8601|null,
        "sleep_freed_bytes": int|null, "sleep_kept_bytes": int|null,
        "fall_asleep_seconds": float|null, "wake_up_seconds": float|null, "sleeps": int,
        "weight_cache_socket": str|null, "weight_cache_bytes": int|null,
        "weight_cache_tensors": int|null, "startup_plan_path": str|null,
        "watchdog": null | {"dump_path": str, "reason": str|null, "at": iso8601|null},
        "ready_timeout_seconds": float|null}
    unit: "stall_reason": str|null, "will_time_out": bool,
        "ready_timeout_seconds": float|null, "ready_timeout_remaining_seconds": float|null,
        "watchdog_dump_path": str|null, "sleeping_since": iso8601|null

Sizes are bytes, durations seconds, times UTC (``Z``); a unit whose log named no zone
(``log_times_local``) has its times as printed, without an offset (``report.iso_time``).
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from vllm_sentinel.engine.catalog.phases import Phase
from vllm_sentinel.engine.runtime_modes import (
    ROLE_WEIGHT_CACHE,
    STARTUP_PLAN,
    STARTUP_WEIGHT_CACHE,
)
from vllm_sentinel.engine.snapshot import IncarnationSnapshot, UnitSnapshot

__all__ = [
    "mode_facts",
    "mode_lines",
    "modes_status_lines",
    "modes_to_json",
    "unit_modes_to_json",
]

_GIB = float(1 << 30)


def _iso(value: datetime | None, local: bool = False) -> str | None:
    """As ``report.iso_time``: UTC with ``Z``, or a zone-less log's time without an offset."""
    if value is None:
        return None
    if local:
        return value.replace(tzinfo=None).isoformat()
    return value.astimezone(UTC).isoformat().replace("+00:00", "Z")


def _gib(value: int | None) -> str:
    return f"{value / _GIB:.2f} GiB" if value is not None else "? GiB"


def modes_to_json(item: IncarnationSnapshot, local_times: bool = False) -> dict[str, Any]:
    """An incarnation's ``modes`` object (see the module docstring); ``local_times``: its
    unit's log named no zone (``UnitSnapshot.log_times_local``)."""
    modes = item.modes
    return {
        "role": modes.role,
        "startup_kind": modes.startup_kind,
        "sleeping_since": (
            _iso(modes.sleeping_since, local_times) if item.phase is Phase.SLEEPING else None
        ),
        "sleep_freed_bytes": modes.sleep_freed_bytes,
        "sleep_kept_bytes": modes.sleep_kept_bytes,
        "fall_asleep_seconds": modes.fall_asleep_seconds,
        "wake_up_seconds": modes.wake_up_seconds,
        "sleeps": modes.sleeps,
        "weight_cache_socket": modes.weight_cache_socket,
        "weight_cache_bytes": modes.weight_cache_bytes,
        "weight_cache_tensors": modes.weight_cache_tensors,
        "startup_plan_path": modes.startup_plan_path,
        "watchdog": None
        if modes.watchdog_dump_path is None
        else {
            "dump_path": modes.watchdog_dump_path,
            "reason": modes.watchdog_reason,
            "at": _iso(modes.watchdog_dumped_at, local_times),
        },
        "ready_timeout_seconds": modes.ready_timeout_seconds,
    }


def unit_modes_to_json(unit: UnitSnapshot) -> dict[str, Any]:
    """A unit's keys of the modes (see the module docstring)."""
    current = unit.current
    sleeping = current is not None and current.phase is Phase.SLEEPING
    return {
        "stall_reason": unit.stall_reason if unit.stalled else None,
        "will_time_out": unit.will_time_out,
        "ready_timeout_seconds": unit.ready_timeout_seconds,
        "ready_timeout_remaining_seconds": unit.ready_timeout_remaining_seconds,
        "watchdog_dump_path": current.modes.watchdog_dump_path if current else None,
        "sleeping_since": (
            _iso(current.modes.sleeping_since, unit.log_times_local)
            if current and sleeping
            else None
        ),
    }


def mode_lines(item: IncarnationSnapshot) -> list[str]:
    """Sentences on an incarnation's modes for the human timeline (none for a plain start)."""
    modes = item.modes
    out: list[str] = []
    if modes.role == ROLE_WEIGHT_CACHE:
        where = f" on {modes.weight_cache_socket}" if modes.weight_cache_socket else ""
        held = f", holding {_gib(modes.weight_cache_bytes)}" if modes.weight_cache_bytes else ""
        out.append(f"weight-cache daemon: serving weights{where}{held}")
    if modes.startup_kind == STARTUP_WEIGHT_CACHE:
        tensors = f"{modes.weight_cache_tensors} tensors " if modes.weight_cache_tensors else ""
        out.append(
            f"loaded through a weight-cache daemon ({tensors}mapped; compared only with such "
            "starts)"
        )
    elif modes.startup_kind == STARTUP_PLAN:
        out.append(
            "booted from a startup plan: memory profiling skipped, as expected (compared only "
            "with such starts)"
        )
    if item.phase is Phase.SLEEPING:
        out.append(
            f"sleeping since {_clock(modes.sleeping_since)} (vLLM sleep mode): freed "
            f"{_gib(modes.sleep_freed_bytes)}, {_gib(modes.sleep_kept_bytes)} still in use"
            + _took(" fell asleep in", modes.fall_asleep_seconds)
        )
    elif modes.sleeps:
        out.append(
            f"slept {modes.sleeps} time(s) (vLLM sleep mode)"
            + _took(" last fell asleep in", modes.fall_asleep_seconds)
            + _took(" woke in", modes.wake_up_seconds)
        )
    if modes.watchdog_dump_path is not None:
        why = f" due to {modes.watchdog_reason}" if modes.watchdog_reason else ""
        out.append(
            f"vLLM's watchdog dumped the stack to {modes.watchdog_dump_path}{why} at "
            f"{_clock(modes.watchdog_dumped_at)}"
        )
    return out


def _took(words: str, seconds: float | None) -> str:
    return f";{words} {seconds:.2f}s" if seconds is not None else ""


def _clock(value: datetime | None) -> str:
    return value.strftime("%Y-%m-%d %H:%M:%S") if value is not None else "?"


def modes_status_lines(unit: Mapping[str, Any]) -> list[str]:
    """Lines under a unit's row of ``status`` (a ``/status`` unit document)."""
    out: list[str] = []
    incarnations = unit.get("incarnations") or [{}]
    modes = incarnations[-1].get("modes") or {}
    if unit.get("sleeping_since"):
        freed, kept = modes.get("sleep_freed_bytes"), modes.get("sleep_kept_bytes")
        out.append(
            f"sleeping since {unit['sleeping_since']}: freed {_gib(freed)}, {_gib(kept)} in use"
        )
    if modes.get("role") == ROLE_WEIGHT_CACHE:
        out.append(f"weight-cache daemon serving weights on {modes.get('weight_cache_socket')}")
    if unit.get("stall_reason") == "vllm_watchdog":
        out.append(f"stalled: vLLM's watchdog dumped the stack to {unit.get('watchdog_dump_path')}")
    if unit.get("will_time_out"):
        remaining = unit.get("ready_timeout_remaining_seconds")
        left = f"{remaining:.0f}s" if isinstance(remaining, int | float) else "?"
        out.append(
            f"will time out: the ETA is past VLLM_ENGINE_READY_TIMEOUT_S="
            f"{unit.get('ready_timeout_seconds')} ({left} left): raise it"
        )
    return out


def mode_facts(unit: Mapping[str, Any]) -> list[str]:
    """Short facts of a ``/status`` unit document for the status page's progress cell."""
    out: list[str] = []
    incarnations = unit.get("incarnations") or [{}]
    modes = incarnations[-1].get("modes") or {}
    if unit.get("sleeping_since"):
        freed, kept = modes.get("sleep_freed_bytes"), modes.get("sleep_kept_bytes")
        out.append(f"asleep: freed {_gib(freed)}, {_gib(kept)} kept")
    if modes.get("role") == ROLE_WEIGHT_CACHE:
        held = modes.get("weight_cache_bytes")
        out.append("serving weights" + (f" ({_gib(held)})" if held else ""))
    if modes.get("startup_kind") == STARTUP_WEIGHT_CACHE:
        out.append("weights mapped from the weight cache")
    elif modes.get("startup_kind") == STARTUP_PLAN:
        out.append("startup plan: profiling skipped")
    if unit.get("stall_reason") == "vllm_watchdog" and unit.get("watchdog_dump_path"):
        out.append(f"vLLM watchdog stack dump: {unit['watchdog_dump_path']}")
    if unit.get("will_time_out"):
        timeout = unit.get("ready_timeout_seconds")
        out.append(
            "past VLLM_ENGINE_READY_TIMEOUT_S"
            + (f"={timeout:.0f}" if isinstance(timeout, int | float) else "")
        )
    return out
