"""vLLM's newer ways to run, read from its lines (core: pure): sleep, weight caches, startup
plans, the hang watchdog and the engine ready timeout.

vLLM 0.8.5 → 0.33.0 grew states the startup phases do not describe; each is a row of the
marker catalog (``markers`` section 9, with the vLLM file and versions) and its effect is a
row of ``MODE_EVENTS`` here, applied to the incarnation's ``snapshot.RuntimeModes``:

* **sleep** (``--enable-sleep-mode``, ``POST /sleep``): ``It took %.6f seconds to fall
  asleep.`` puts a ready incarnation in phase ``sleeping`` (``Sleep mode freed %s GiB memory,
  %s GiB memory is still in use.`` says what it freed and kept); ``It took %.6f seconds to wake
  up tags %s.`` wakes it back to ``ready`` when the tags woken are all of them (a set, vLLM's
  own ``sleeping_tags``) or include ``kv_cache``: waking only ``weights`` (an RL trainer
  updating them) leaves it asleep;
* **the weight-cache daemon** (``vllm preload``): a unit whose lines say ``Weight cache …
  daemon rank N loaded model`` has the role ``weight_cache``; ``… serving on SOCKET`` and
  ``===== Weight cache daemon READY`` make it ready. A serve unit that logs ``Mapped N tensors
  from the weight cache daemon`` loaded through it (``startup_kind`` ``weight_cache``);
* **startup plans** (``VLLM_ENABLE_STARTUP_PLAN=1``): ``Applying persisted startup plan …
  Memory profiling will be skipped.`` makes the start's kind ``startup_plan`` (unless it
  mapped weights from a daemon, the bigger difference);
* **the watchdog** (``--watchdog-config``): ``[Watchdog]Dumped stack to PATH due to REASON``
  keeps the dump's path, reason and time; a dump ``due to feed timeout`` (the watchdog was not
  fed in time) makes the unit stalled (``vllm_watchdog``) until it logs progress again
  (``watchdog_stalled``); one due to ``SIGTERM`` or ``shutdown`` records a stop;
* **the engine ready timeout**: ``VLLM_ENGINE_READY_TIMEOUT_S=N`` (or ``: N``) in any of the
  unit's lines (a launcher's echo, a shell's ``set -x``, an environment dump), or vLLM's own
  ``Waited Ns (configured by VLLM_ENGINE_READY_TIMEOUT_S)``, sets the unit's timeout
  (``read_ready_timeout``); ``DEFAULT_READY_TIMEOUT_SECONDS`` otherwise.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import replace
from datetime import datetime
from types import MappingProxyType
from typing import Final

from vllm_sentinel.engine.catalog.markers import Event
from vllm_sentinel.engine.snapshot import IncarnationSnapshot, RuntimeModes

__all__ = [
    "DEFAULT_READY_TIMEOUT_SECONDS",
    "MODE_EVENTS",
    "NOT_PROGRESS",
    "READY_TIMEOUT_NEEDLE",
    "ROLE_SERVE",
    "ROLE_WEIGHT_CACHE",
    "STARTUP_FULL",
    "STARTUP_PLAN",
    "STARTUP_WEIGHT_CACHE",
    "WATCHDOG_HANG_REASON",
    "apply_mode_event",
    "read_ready_timeout",
    "wakes_fully",
    "watchdog_stalled",
]

DEFAULT_READY_TIMEOUT_SECONDS: Final = 600.0
"""``VLLM_ENGINE_READY_TIMEOUT_S``'s default (vllm/envs.py, 0.17.1–0.33.0)."""

ROLE_SERVE: Final = "serve"
ROLE_WEIGHT_CACHE: Final = "weight_cache"
STARTUP_FULL: Final = "full"
STARTUP_WEIGHT_CACHE: Final = "weight_cache"
STARTUP_PLAN: Final = "startup_plan"

READY_TIMEOUT_NEEDLE: Final = "VLLM_ENGINE_READY_TIMEOUT_S"
_READY_TIMEOUT: Final = re.compile(
    r"\bVLLM_ENGINE_READY_TIMEOUT_S['\"]?\s*[=:]\s*['\"]?(?P<s>\d{1,7})\b"
    r"|\bWaited (?P<waited>\d{1,7})s \(configured by VLLM_ENGINE_READY_TIMEOUT_S\)"
)
_GIB: Final = 1 << 30
_MAX_TEXT: Final = 512

NOT_PROGRESS: Final = frozenset({Event.WATCHDOG_DUMP})
"""Events that are not progress (like heartbeats): a stack dump says the process is stuck."""


def _float(text: str | None) -> float | None:
    try:
        return float(text) if text is not None else None
    except ValueError:
        return None


def _gib(text: str | None) -> int | None:
    value = _float(text)
    return int(value * _GIB) if value is not None else None


def wakes_fully(tags: str | None) -> bool:
    """Whether a wake-up line's tags wake the whole server.

    vLLM prints the tags asked for (a list, ``['weights']``) or, when none were named, every
    sleeping tag (a set, ``{'weights', 'kv_cache'}``). A set, or a list naming ``kv_cache``
    (woken last: weights first, then the cache), ends the sleep.
    """
    text = (tags or "").strip()
    return text.startswith("{") or "kv_cache" in text or text in ("", "None")


def _fell_asleep(
    modes: RuntimeModes, groups: Mapping[str, str | None], time: datetime | None
) -> RuntimeModes:
    return replace(
        modes,
        sleeping_since=time,
        fall_asleep_seconds=_float(groups.get("s")),
        sleeps=modes.sleeps + 1,
    )


def _sleep_memory(
    modes: RuntimeModes, groups: Mapping[str, str | None], time: datetime | None
) -> RuntimeModes:
    # one line per worker: the figures are summed while the executor's line has not come yet
    freed, kept = _gib(groups.get("gib")), _gib(groups.get("kept"))
    if modes.sleeping_since is None and modes.sleep_freed_bytes is not None:
        # a worker's line of the same sleep (they come before the executor's)
        freed = (freed or 0) + modes.sleep_freed_bytes
        kept = (kept or 0) + (modes.sleep_kept_bytes or 0)
    return replace(modes, sleep_freed_bytes=freed, sleep_kept_bytes=kept)


def _woke_up(
    modes: RuntimeModes, groups: Mapping[str, str | None], time: datetime | None
) -> RuntimeModes:
    seconds = _float(groups.get("s"))
    if not wakes_fully(groups.get("tags")):
        return replace(modes, wake_up_seconds=seconds)
    return replace(
        modes,
        sleeping_since=None,
        wake_up_seconds=seconds,
        sleep_freed_bytes=None,
        sleep_kept_bytes=None,
    )


def _weight_cache_loaded(
    modes: RuntimeModes, groups: Mapping[str, str | None], time: datetime | None
) -> RuntimeModes:
    held = _gib(groups.get("gib"))
    total = (modes.weight_cache_bytes or 0) + held if held is not None else modes.weight_cache_bytes
    return replace(modes, role=ROLE_WEIGHT_CACHE, weight_cache_bytes=total)


def _weight_cache_serving(
    modes: RuntimeModes, groups: Mapping[str, str | None], time: datetime | None
) -> RuntimeModes:
    socket = groups.get("socket")
    return replace(
        modes,
        role=ROLE_WEIGHT_CACHE,
        weight_cache_socket=socket[:_MAX_TEXT] if socket else modes.weight_cache_socket,
    )


def _weight_cache_mapped(
    modes: RuntimeModes, groups: Mapping[str, str | None], time: datetime | None
) -> RuntimeModes:
    tensors = groups.get("tensors")
    return replace(
        modes,
        startup_kind=STARTUP_WEIGHT_CACHE,
        weight_cache_tensors=int(tensors) if tensors and tensors.isdigit() else None,
    )


def _startup_plan_applied(
    modes: RuntimeModes, groups: Mapping[str, str | None], time: datetime | None
) -> RuntimeModes:
    if modes.startup_kind == STARTUP_WEIGHT_CACHE:
        return modes
    return replace(modes, startup_kind=STARTUP_PLAN)


def _startup_plan_saved(
    modes: RuntimeModes, groups: Mapping[str, str | None], time: datetime | None
) -> RuntimeModes:
    path = groups.get("path")
    return replace(modes, startup_plan_path=path[:_MAX_TEXT] if path else None)


def _watchdog_dump(
    modes: RuntimeModes, groups: Mapping[str, str | None], time: datetime | None
) -> RuntimeModes:
    path, reason = groups.get("path"), groups.get("reason")
    return replace(
        modes,
        watchdog_dump_path=path[:_MAX_TEXT] if path else None,
        watchdog_reason=reason[:200] if reason else None,
        watchdog_dumped_at=time,
    )


_Apply = Callable[[RuntimeModes, Mapping[str, str | None], datetime | None], RuntimeModes]

MODE_EVENTS: Mapping[Event, _Apply] = MappingProxyType(
    {
        Event.FELL_ASLEEP: _fell_asleep,
        Event.SLEEP_MEMORY: _sleep_memory,
        Event.WOKE_UP: _woke_up,
        Event.WEIGHT_CACHE_LOADED: _weight_cache_loaded,
        Event.WEIGHT_CACHE_SERVING: _weight_cache_serving,
        Event.WEIGHT_CACHE_MAPPED: _weight_cache_mapped,
        Event.STARTUP_PLAN_APPLIED: _startup_plan_applied,
        Event.STARTUP_PLAN_SAVED: _startup_plan_saved,
        Event.WATCHDOG_DUMP: _watchdog_dump,
    }
)
"""Marker event → how it changes the incarnation's ``RuntimeModes``."""


def apply_mode_event(
    modes: RuntimeModes, event: Event, groups: Mapping[str, str | None], time: datetime | None
) -> RuntimeModes:
    """``modes`` after a line of ``event`` with its named ``groups`` at log ``time``
    (``modes`` itself for an event of no mode)."""
    apply = MODE_EVENTS.get(event)
    return apply(modes, groups, time) if apply is not None else modes


def read_ready_timeout(modes: RuntimeModes, line: str) -> RuntimeModes:
    """``modes`` with the engine ready timeout a line shows (callers test
    ``READY_TIMEOUT_NEEDLE in line`` first: the check runs on every line)."""
    found = _READY_TIMEOUT.search(line)
    if found is None:
        return modes
    seconds = float(found.group("s") or found.group("waited"))
    if seconds <= 0 or seconds == modes.ready_timeout_seconds:
        return modes
    return replace(modes, ready_timeout_seconds=seconds)


WATCHDOG_HANG_REASON: Final = "feed timeout"
"""The reason vLLM's watchdog gives when it was not fed in time (``_check_loop``): a hang. It
also dumps on ``SIGTERM`` (v1/engine/core.py) and ``shutdown`` (multiproc_executor.py): a
record of a stop, not a stall."""


def watchdog_stalled(incarnation: IncarnationSnapshot | None) -> bool:
    """True when vLLM's watchdog dumped the stack of a live incarnation because it was not fed
    in time (``WATCHDOG_HANG_REASON``) and nothing moved since (no progress line after the
    dump)."""
    if incarnation is None or incarnation.ended_at is not None:
        return False
    dumped = incarnation.modes.watchdog_dumped_at
    if (
        incarnation.modes.watchdog_dump_path is None
        or incarnation.modes.watchdog_reason != WATCHDOG_HANG_REASON
    ):
        return False
    progress = incarnation.last_progress_at
    return dumped is None or progress is None or progress <= dumped
