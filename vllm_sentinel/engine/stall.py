"""The stall rule and the slow rule: slow is not stuck (core: pure).

During startup (``starting`` … ``starting_api_server``) a unit is **stalled** when, for longer
than the current phase's threshold, its incarnation logged nothing but heartbeats **and** its
GPU memory grew by less than ``min_growth_bytes``. A nine-minute weight load that prints a
shard every 30 s, or that fills GPU memory without printing, is progressing; one that does
neither is stuck. Any progress clears the flag. The thresholds are fixed per phase: they need
no history.

A unit is **slow** when its current startup phase has lasted longer than ``factor`` times the
phase's usual duration for this unit and model (``eta.usual_phase_seconds``), and at least
``floor_seconds`` longer than it: still moving, but later than it should be. Without history
there is no usual duration and nothing is slow; the stall thresholds still apply.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from types import MappingProxyType

from vllm_sentinel.engine.catalog.phases import STARTUP_PHASES, Phase

__all__ = [
    "DEFAULT_SLOW_FACTOR",
    "DEFAULT_SLOW_FLOOR_SECONDS",
    "DEFAULT_STALL_THRESHOLDS",
    "GpuGrowth",
    "is_slow",
    "is_stalled",
]

DEFAULT_SLOW_FACTOR = 1.5
"""A phase is slow past this many times its usual duration (``slow_factor``)."""

DEFAULT_SLOW_FLOOR_SECONDS = 60.0
"""... and at least this many seconds past it (``slow_floor_seconds``): a phase that usually
takes 4 s is not slow at 7 s."""

DEFAULT_STALL_THRESHOLDS: Mapping[Phase, float] = MappingProxyType(
    {
        Phase.STARTING: 600.0,
        Phase.INITIALIZING: 900.0,
        Phase.LOADING_WEIGHTS: 600.0,
        Phase.COMPILING: 900.0,
        Phase.PROFILING_KV_CACHE: 600.0,
        Phase.CAPTURING_CUDA_GRAPHS: 600.0,
        Phase.STARTING_API_SERVER: 300.0,
    }
)
"""Seconds without progress before a startup phase counts as stalled; sized for 1T-parameter
models on 8 GPUs (a 600 GB checkpoint from network storage, a 15-minute torch.compile)."""

_STARTUP = frozenset(STARTUP_PHASES)


def is_stalled(
    phase: Phase,
    phase_entered_at: datetime | None,
    last_progress_at: datetime | None,
    now: datetime,
    thresholds: Mapping[Phase, float] = DEFAULT_STALL_THRESHOLDS,
) -> bool:
    """Apply the stall rule.

    Args:
        phase: the current phase of the current incarnation.
        phase_entered_at: when it began (UTC).
        last_progress_at: the later of the last non-heartbeat record and the last GPU memory
            growth of at least the threshold (UTC), or ``None``.
        now: the time of the check (UTC).
        thresholds: seconds per startup phase.

    Returns:
        True when the unit is in a startup phase and nothing moved for longer than the
        phase's threshold.
    """
    if phase not in _STARTUP:
        return False
    threshold = thresholds.get(phase)
    if threshold is None:
        return False
    reference = last_progress_at
    if phase_entered_at is not None and (reference is None or phase_entered_at > reference):
        reference = phase_entered_at
    if reference is None:
        return False
    return (now - reference).total_seconds() > threshold


def is_slow(
    phase: Phase,
    phase_entered_at: datetime | None,
    usual_seconds: float | None,
    now: datetime,
    factor: float = DEFAULT_SLOW_FACTOR,
    floor_seconds: float = DEFAULT_SLOW_FLOOR_SECONDS,
) -> bool:
    """Apply the slow rule.

    Args:
        phase: the current phase of the current incarnation.
        phase_entered_at: when it began (UTC).
        usual_seconds: the phase's usual duration for this unit and model, ``None`` without
            history.
        now: the time of the check (UTC).
        factor: how many times the usual duration a phase may take.
        floor_seconds: how many seconds over the usual duration a phase may always take.

    Returns:
        True when the unit is in a startup phase with a usual duration, and has been in it for
        more than ``max(factor × usual, usual + floor_seconds)``.
    """
    if phase not in _STARTUP or usual_seconds is None or phase_entered_at is None:
        return False
    limit = max(factor * usual_seconds, usual_seconds + floor_seconds)
    return (now - phase_entered_at).total_seconds() > limit


@dataclass(slots=True)
class GpuGrowth:
    """Tell GPU memory growth from noise for one unit.

    Growth counts when the unit's memory rose by at least ``min_growth_bytes`` above the last
    reference; a drop (memory freed, a restart) lowers the reference.
    """

    min_growth_bytes: int = 256 << 20
    reference_bytes: int | None = None
    last_growth_at: datetime | None = None

    def update(self, used_bytes: int, at: datetime) -> bool:
        """Feed the unit's total GPU memory at ``at``; True when it counts as growth."""
        if self.reference_bytes is None or used_bytes < self.reference_bytes:
            self.reference_bytes = used_bytes
            return False
        if used_bytes - self.reference_bytes >= self.min_growth_bytes:
            self.reference_bytes = used_bytes
            self.last_growth_at = at
            return True
        return False
