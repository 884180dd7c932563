"""Phases and outcomes of a vLLM incarnation, and the forward-only rule (core: pure).

One spelling of each state everywhere: the enum values are the Prometheus label values, the
JSON strings and the words used in the docs.
"""

from __future__ import annotations

from collections.abc import Mapping
from enum import StrEnum
from types import MappingProxyType

__all__ = [
    "PHASE_ORDER",
    "STARTUP_PHASES",
    "TERMINAL_PHASES",
    "Outcome",
    "Phase",
    "is_forward",
]


class Phase(StrEnum):
    """Where an incarnation of a vLLM unit is, in the order a healthy start passes them."""

    STARTING = "starting"
    INITIALIZING = "initializing"
    LOADING_WEIGHTS = "loading_weights"
    COMPILING = "compiling"
    PROFILING_KV_CACHE = "profiling_kv_cache"
    CAPTURING_CUDA_GRAPHS = "capturing_cuda_graphs"
    STARTING_API_SERVER = "starting_api_server"
    READY = "ready"
    SLEEPING = "sleeping"  # a ready server put to sleep (vLLM --enable-sleep-mode, POST /sleep)
    STOPPING = "stopping"
    STOPPED = "stopped"
    CRASHED = "crashed"


class Outcome(StrEnum):
    """How an incarnation turned out (so far)."""

    RUNNING = "running"  # still starting up
    READY = "ready"  # became ready and has not ended
    STOPPED = "stopped"  # ended by a clean stop
    CRASHED = "crashed"  # ended by a failure


PHASE_ORDER: tuple[Phase, ...] = tuple(Phase)
"""Every phase, in order; ``STOPPED`` and ``CRASHED`` are both terminal and rank last."""

STARTUP_PHASES: tuple[Phase, ...] = PHASE_ORDER[: PHASE_ORDER.index(Phase.READY)]
"""The phases before ``READY``: the ones the stall rule watches."""

TERMINAL_PHASES: frozenset[Phase] = frozenset({Phase.STOPPED, Phase.CRASHED})

_RANK: Mapping[Phase, int] = MappingProxyType(
    {phase: min(index, PHASE_ORDER.index(Phase.STOPPED)) for index, phase in enumerate(PHASE_ORDER)}
)


def is_forward(current: Phase, candidate: Phase) -> bool:
    """Say whether ``candidate`` may follow ``current`` within one incarnation.

    Phases only move forward; a terminal phase is never left. ``sleeping`` ranks after
    ``ready``; waking back to ``ready`` is not a phase move of this rule but the wake line's
    own (``Incarnation.wake``), so that a request's access line cannot wake a sleeping unit.
    """
    if current in TERMINAL_PHASES:
        return False
    return _RANK[candidate] > _RANK[current]
