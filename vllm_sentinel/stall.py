"""The stall rule: slow is not stuck (core: pure).

During startup (``starting`` … ``starting_api_server``) a unit is **stalled** when, for longer
than the current phase's threshold, its incarnation logged nothing but heartbeats **and** its
GPU memory grew by less than ``min_growth_bytes``. A nine-minute weight load that prints a
shard every 30 s, or that fills GPU memory without printing, is progressing; one that does
neither is stuck. Any progress clears the flag.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from types import MappingProxyType

from vllm_sentinel.phases import STARTUP_PHASES, Phase

__all__ = ["DEFAULT_STALL_THRESHOLDS", "GpuGrowth", "is_stalled"]

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
