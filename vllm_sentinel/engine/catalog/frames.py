"""The startup phase a traceback's vLLM frames were in (core: pure, data).

A crash's phase is, first, the phase of the last marker seen. But markers are sparse: V1
compiles inside the first profiling run, and a CUDA OOM raised under
``determine_available_memory → profile_run`` after compile's last line was still "compiling" by
the markers. The frames of the traceback say where the process was: the **innermost** frame
that a row here names gives the phase, and the tracker uses it when it is *later* than the
phase the markers reached (``tracker``).

Rows are (phase, regex over a frame line ``  File "…/vllm/<path>.py", line N, in <function>``,
source, releases). Functions that run in several phases (``_dummy_run``, ``execute_model``,
a model's ``forward``) have no row: only the callers that name one phase do.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Final

from vllm_sentinel.engine.catalog.phases import Phase

__all__ = ["FRAME_PHASES", "FramePhase", "frame_phase"]


@dataclass(frozen=True, slots=True)
class FramePhase:
    """One row: frames matching ``pattern`` run in ``phase``."""

    phase: Phase
    pattern: str
    source: str
    versions: str
    regex: re.Pattern[str] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "regex", re.compile(self.pattern))


_RUNNER: Final = r'/vllm/(?:v1/)?(?:worker|executor|engine)/[\w/]+\.py", line \d+, in '

FRAME_PHASES: tuple[FramePhase, ...] = (
    FramePhase(
        Phase.INITIALIZING,
        _RUNNER + r"(?:init_device|init_worker)$",
        "vllm/worker/*_worker.py (V0), vllm/v1/worker/gpu_worker.py, worker_base.py",
        "0.6.6–0.33.0",
    ),
    FramePhase(
        Phase.LOADING_WEIGHTS,
        _RUNNER + r"load_model$",
        "vllm/worker/model_runner.py, worker.py (V0), vllm/v1/worker/gpu_model_runner.py, "
        "gpu_worker.py, gpu/model_runner.py",
        "0.6.6–0.33.0",
    ),
    FramePhase(
        Phase.LOADING_WEIGHTS,
        r'/vllm/model_executor/[\w/]+\.py", line \d+, in (?:load_model|load_weights|get_model)$',
        "vllm/model_executor/model_loader/*.py (base_loader, default_loader, …), "
        "model_executor/models/*.py load_weights",
        "0.6.6–0.33.0",
    ),
    FramePhase(
        Phase.COMPILING,
        r"/vllm/compilation/(?:backends|compiler_interface|piecewise_backend"
        r'|cuda_piecewise_backend)\.py", line \d+, in \w+$',
        "vllm/compilation/backends.py, compiler_interface.py, piecewise_backend.py",
        "0.6.6–0.33.0",
    ),
    FramePhase(
        Phase.PROFILING_KV_CACHE,
        _RUNNER + r"(?:profile_run|determine_available_memory|determine_num_available_blocks"
        r"|_initialize_kv_caches|initialize_kv_cache|initialize_from_config|initialize_cache"
        r"|_init_cache)$",
        "vllm/worker/worker.py, model_runner.py, engine/llm_engine.py (V0), "
        "vllm/v1/engine/core.py, v1/worker/gpu_worker.py, gpu_model_runner.py",
        "0.6.6–0.33.0",
    ),
    FramePhase(
        Phase.PROFILING_KV_CACHE,
        r'/vllm/v1/core/kv_cache_utils\.py", line \d+, in (?:check_enough_kv_cache_memory'
        r"|_?get_kv_cache_config\w*|get_kv_cache_groups|unify_\w+)$",
        "vllm/v1/core/kv_cache_utils.py (sizing the KV cache: check_enough_kv_cache_memory, "
        "get_kv_cache_config(s))",
        "0.7–0.33.0",
    ),
    FramePhase(
        Phase.CAPTURING_CUDA_GRAPHS,
        _RUNNER + r"capture_model$",
        "vllm/worker/model_runner.py (V0), vllm/v1/worker/gpu_model_runner.py, "
        "gpu/model_runner.py, tpu_model_runner.py",
        "0.6.6–0.33.0",
    ),
)
"""Which startup phase a vLLM frame runs in (see the module docstring)."""


def frame_phase(frame: str) -> Phase | None:
    """The phase a frame line (``  File "…", line N, in f``) names, or ``None``."""
    if "/vllm/" not in frame:
        return None
    for row in FRAME_PHASES:
        if row.regex.search(frame):
            return row.phase
    return None
