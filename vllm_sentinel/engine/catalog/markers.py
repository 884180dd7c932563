"""The marker catalog: every milestone vLLM and systemd log, as one table (core: pure).

Each ``Marker`` row says which ``Event`` a line means, which ``Phase`` it proves, the regex on
the line's *body* (after prefix and header, see ``vllm_line``), the vLLM releases whose source
holds that format string, and the file it comes from. The rows were checked against vLLM's
own source at 36 release trees, 0.4.0.post1 → 0.33.0 (``docs/markers.md`` has the method,
``docs/reference/vllm-log-markers.md`` the per-row references); versions given as ``A–B`` were
seen in every sampled release from A to B.

Matching is cheap on purpose: rows are grouped by the first word of their pattern, so a line
costs one dictionary lookup unless its first word starts some marker; rows whose first word
varies carry a ``needle`` substring that must be present before the regex runs.

Named groups are the numbers and names a line carries: ``ver`` (vLLM version), ``model``,
``tp`` (tensor-parallel size), ``n``/``total`` (progress), ``gib`` (GiB), ``s`` (seconds),
``tokens`` (KV cache tokens, thousands separators allowed), ``workers`` (worker processes),
``world`` (distributed world size), ``url`` (where the API server listens: ``http://HOST:PORT``
or ``unix:/path``), ``elapsed`` and ``remaining`` (the time a tqdm bar has run and says is
left, ``MM:SS`` or ``H:MM:SS``).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from types import MappingProxyType
from typing import Final, NamedTuple

from vllm_sentinel.engine.catalog.phases import Phase
from vllm_sentinel.engine.decode.vllm_line import LineKind

__all__ = [
    "CRASH_REPORTERS",
    "MARKERS",
    "PHASE_ENDS",
    "PHASE_END_EVENTS",
    "SYSTEMD_MARKERS",
    "CrashReporter",
    "Event",
    "Marker",
    "MarkerMatch",
    "MarkerMatcher",
    "PhaseEnd",
    "SystemdEvent",
    "SystemdMarker",
    "crash_reporter",
    "match_systemd",
]


class Event(StrEnum):
    """What a vLLM line says happened."""

    PROCESS_STARTED = "process_started"  # version banner: a new server process
    SERVER_CONFIG = "server_config"  # args, platform, architecture, max model len
    ENGINE_INIT = "engine_init"
    DISTRIBUTED_INIT = "distributed_init"
    ATTENTION_BACKEND = "attention_backend"
    LOAD_STARTED = "load_started"
    WEIGHTS_PROGRESS = "weights_progress"
    WEIGHTS_LOADED = "weights_loaded"
    MODEL_LOADED = "model_loaded"
    COMPILE_STARTED = "compile_started"
    COMPILE_FINISHED = "compile_finished"
    PROFILING = "profiling"
    KV_CACHE_MEMORY = "kv_cache_memory"
    KV_CACHE_SIZED = "kv_cache_sized"
    GRAPH_CAPTURE_PROGRESS = "graph_capture_progress"
    GRAPH_CAPTURE_FINISHED = "graph_capture_finished"
    ENGINE_READY = "engine_ready"
    API_SERVER_STARTING = "api_server_starting"
    APP_STARTUP_COMPLETE = "app_startup_complete"
    SERVING = "serving"  # engine stats and HTTP access lines
    SHUTDOWN = "shutdown"
    SHUTDOWN_COMPLETE = "shutdown_complete"
    HEARTBEAT = "heartbeat"  # printed while waiting: never progress
    EXECUTOR_WORKERS = "executor_workers"  # how many worker processes the executor runs
    FATAL = "fatal"  # a line that says the engine or a worker failed
    PORT_CONFLICT = "port_conflict"  # a hint, not fatal by itself
    # --- vLLM 2026 states (vllm2026): sleep, weight cache, startup plan, watchdog -----------
    FELL_ASLEEP = "fell_asleep"  # sleep mode: the executor put the workers to sleep
    SLEEP_MEMORY = "sleep_memory"  # a worker's sleep: GiB freed, GiB still in use
    WOKE_UP = "woke_up"  # the executor woke tags up (weights, kv_cache)
    WEIGHT_CACHE_LOADED = "weight_cache_loaded"  # a weight-cache daemon loaded its model
    WEIGHT_CACHE_SERVING = "weight_cache_serving"  # … serves the weights on its socket
    WEIGHT_CACHE_MAPPED = "weight_cache_mapped"  # a serve unit mapped the daemon's tensors
    STARTUP_PLAN_APPLIED = "startup_plan_applied"  # a persisted plan: profiling skipped
    STARTUP_PLAN_SAVED = "startup_plan_saved"
    WATCHDOG_STARTED = "watchdog_started"  # vLLM's hang watchdog is on
    WATCHDOG_DUMP = "watchdog_dump"  # vLLM's watchdog dumped the stack: it says it is stuck


@dataclass(frozen=True, slots=True)
class Marker:
    """One row of the catalog.

    Attributes:
        event: what the line means.
        phase: the phase it proves, or ``None`` (heartbeats, failures).
        pattern: regex searched in the line body; anchored with ``^`` unless ``needle`` is set.
        versions: vLLM releases whose source holds this format string.
        source: the vLLM source file (or third-party logger) that prints it.
        needle: a literal substring the body must contain; marks rows tried on every line.
        kinds: restrict to lines of these shapes (e.g. uvicorn access lines).
        terminal: for ``FATAL``, the process exits right after (no confirmation needed).
        cause: for ``FATAL``/``PORT_CONFLICT``, the crash cause the line implies.
    """

    event: Event
    phase: Phase | None
    pattern: str
    versions: str
    source: str
    needle: str | None = None
    kinds: frozenset[LineKind] | None = None
    terminal: bool = False
    cause: str | None = None
    regex: re.Pattern[str] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "regex", re.compile(self.pattern))


_UVICORN: Final = frozenset({LineKind.UVICORN, LineKind.RAW})
_LOGGED: Final = frozenset({LineKind.VLLM, LineKind.JSON})  # logo lines: through vLLM's logger
_TAG: Final = r"(?:\[\w+\] )?"  # 0.32+ compile lines may start with "[encoder] " (backends.py)
# tqdm's "[elapsed<remaining, rate]" after a bar's counts (format_interval: MM:SS or H:MM:SS;
# "?" before the first rate): the time vLLM's own bar has run and says is left.
_TQDM_REMAINING: Final = (
    r"(?: \[(?P<elapsed>\d+(?::\d\d){1,2})<(?:(?P<remaining>\d+(?::\d\d){1,2})|\?)[,\]])?"
)

_P: Final = Phase
_E: Final = Event

MARKERS: tuple[Marker, ...] = (
    # --- 1. process start, version banner, args (phase: starting) -----------------------------
    Marker(
        _E.PROCESS_STARTED,
        _P.STARTING,
        r"^vLLM API server version (?P<ver>\S+)$",
        "0.4.0.post1–0.14.1",
        "vllm/entrypoints/openai/api_server.py",
    ),
    Marker(
        _E.PROCESS_STARTED,
        _P.STARTING,
        r"\s{2}version\s+(?P<ver>\d[\w.+-]*)\s*$",
        "0.15.1–0.33.0 (logo)",
        "vllm/entrypoints/utils.py, serve/utils/api_utils.py, "
        "common/startup.py (log_version_and_model)",
        needle="  version ",
        kinds=_LOGGED,
    ),
    Marker(
        _E.PROCESS_STARTED,
        _P.STARTING,
        r"^vLLM server version (?P<ver>\S+), serving model (?P<model>.+)$",
        "0.15.1–0.33.0",
        "log_version_and_model() (logo disabled)",
    ),
    Marker(
        _E.PROCESS_STARTED,
        _P.STARTING,
        r"^Launching vLLM \(v(?P<ver>[^)]+)\) headless multiproc executor",
        "0.11.1–0.33.0",
        "vllm/entrypoints/cli/serve.py",
    ),
    Marker(
        _E.SERVER_CONFIG,
        _P.STARTING,
        r"\s{2}model\s+(?P<model>\S+)\s*$",
        "0.15.1–0.33.0 (logo)",
        "log_version_and_model()",
        needle="  model   ",
        kinds=_LOGGED,
    ),
    Marker(
        _E.SERVER_CONFIG,
        _P.STARTING,
        r"^args: Namespace\(",
        "0.4.3–0.8.5.post1",
        "vllm/entrypoints/openai/api_server.py",
    ),
    Marker(
        _E.SERVER_CONFIG,
        _P.STARTING,
        r"^non-default args: \{",
        "0.9.0–0.33.0",
        "entrypoints/openai/cli_args.py → entrypoints/utils.py → "
        "serve/utils/api_utils.py → common/startup.py",
    ),
    Marker(
        _E.SERVER_CONFIG,
        _P.STARTING,
        r"^Automatically detected platform \w+\.$",
        "0.7.0–0.11.0 (DEBUG after)",
        "vllm/platforms/__init__.py",
    ),
    Marker(
        _E.SERVER_CONFIG,
        _P.STARTING,
        r"^Resolved architecture: \S+$",
        "0.10.1.1–0.33.0",
        "vllm/config/model.py",
    ),
    Marker(
        _E.SERVER_CONFIG,
        _P.STARTING,
        r"^Using max model len \d+$",
        "0.9.2–0.33.0",
        "vllm/config/model.py",
    ),
    Marker(
        _E.SERVER_CONFIG,
        _P.STARTING,
        r"^Chunked prefill is enabled with max_num_batched_tokens=",
        "0.5.5–0.33.0",
        "vllm/config/scheduler.py",
    ),
    Marker(
        _E.SERVER_CONFIG,
        _P.STARTING,
        r"^This model supports multiple tasks: ",
        "0.6.6.post1–0.9.2",
        "vllm/config.py",
    ),
    Marker(
        _E.SERVER_CONFIG,
        _P.STARTING,
        r"^Started engine process with PID \d+$",
        "0.5.5–0.10.2",
        "vllm/entrypoints/openai/api_server.py",
    ),
    Marker(
        _E.SERVER_CONFIG,
        _P.STARTING,
        r"^Started \d+ API server processes$",
        "0.9.1–0.33.0",
        "vllm/v1/utils.py",
    ),
    # --- 2. engine and distributed init (phase: initializing) ---------------------------------
    Marker(
        _E.ENGINE_INIT,
        _P.INITIALIZING,
        r"^Initializing an? (?:V[01] )?LLM engine(?: \(v(?P<ver>[^)]+)\))? with config: "
        r"model='(?P<model>[^']*)'",
        "0.2.x–0.33.0 (V0 'an LLM engine' ≤0.7.0, 'a V0' 0.7.3–0.10.2, 'a V1' 0.7.3–0.33.0)",
        "vllm/engine/llm_engine.py, vllm/v1/engine/core.py",
    ),
    Marker(
        _E.DISTRIBUTED_INIT,
        _P.INITIALIZING,
        r"^world_size=\d+ rank=\d+ local_rank=\d+ ",
        "0.4.3–0.33.0 (INFO from 0.11.1)",
        "vllm/distributed/parallel_state.py",
    ),
    Marker(
        _E.DISTRIBUTED_INIT,
        _P.INITIALIZING,
        r"^rank \d+ in world size (?P<world>\d{1,6}) is assigned as ",
        "0.8.0–0.33.0",
        "vllm/distributed/parallel_state.py",
    ),
    Marker(
        _E.DISTRIBUTED_INIT,
        _P.INITIALIZING,
        r"^vLLM is using nccl==[\d.]+$",
        "0.4.0.post1–0.33.0",
        "vllm/distributed/device_communicators/pynccl.py",
    ),
    Marker(
        _E.DISTRIBUTED_INIT,
        _P.INITIALIZING,
        r"^Found nccl from library \S+$",
        "0.4.3–0.33.0 (DEBUG from 0.11.1)",
        "vllm/utils/nccl.py",
    ),
    Marker(
        _E.DISTRIBUTED_INIT,
        _P.INITIALIZING,
        r"^(?:reading|generating) GPU P2P access cache (?:from|in|for in) ",
        "0.4.3–0.33.0",
        "device_communicators/custom_all_reduce_utils.py, all_reduce_utils.py",
    ),
    Marker(
        _E.ATTENTION_BACKEND,
        _P.INITIALIZING,
        r"^Using (?:FlashAttention|Flash Attention|XFormers|Flashinfer|FlashInfer|Torch SDPA|"
        r"ROCmFlashAttention|Pallas|IPEX attention|OpenVINO Attention|HPUAttention)"
        r"(?:-\d+)? backend\.$",
        "0.4.0.post1–0.10.2; ROCm and XPU 0.11.0–0.33.0 (scripts/check-vllm-release)",
        "vllm/attention/selector.py, vllm/platforms/*.py",
    ),
    Marker(
        _E.ATTENTION_BACKEND,
        _P.INITIALIZING,
        r"^Using [\w ]+? backend on V1 engine",
        "0.7.0–0.11.0; XPU 0.7.0–0.33.0 (scripts/check-vllm-release)",
        "vllm/platforms/cuda.py, vllm/platforms/xpu.py",
    ),
    Marker(
        _E.ATTENTION_BACKEND,
        _P.INITIALIZING,
        r"^Using [\w.]+ (?:attention )?backend(?: out of potential backends: .*)?\.?$",
        "0.11.1–0.33.0",
        "vllm/platforms/cuda.py",
    ),
    # --- 3. weight loading (phase: loading_weights) -------------------------------------------
    Marker(
        _E.LOAD_STARTED,
        _P.LOADING_WEIGHTS,
        r"^Starting to load model (?P<model>.+?)\.\.\.$",
        "0.5.5–0.33.0",
        "vllm/worker/model_runner.py, vllm/v1/worker/gpu_model_runner.py",
    ),
    Marker(
        _E.LOAD_STARTED,
        _P.LOADING_WEIGHTS,
        r"^Loading model from scratch\.\.\.$",
        "0.9.1–0.33.0",
        "vllm/v1/worker/gpu_model_runner.py, v1/worker/gpu/model_runner.py",
    ),
    Marker(
        _E.WEIGHTS_PROGRESS,
        _P.LOADING_WEIGHTS,
        r"^(?:Loading (?:safetensors|pt|np_cache) checkpoint shards(?: \(eager\))?|"
        r"Multi-thread loading (?:pt checkpoint )?shards|"
        r"Loading safetensors using (?:Runai Model Streamer|Fastsafetensor loader|"
        r"InstantTensor loader)):\s+(?P<pct>\d{1,3})% Completed \| (?P<n>\d+)/(?P<total>\d+)"
        + _TQDM_REMAINING,
        "0.5.5–0.33.0 (tqdm bar)",
        "vllm/model_executor/model_loader/weight_utils.py",
    ),
    Marker(
        _E.WEIGHTS_PROGRESS,
        _P.LOADING_WEIGHTS,
        r"^Prefetching checkpoint files(?: into page cache started|: \d+% "
        r"\((?P<n>\d+)/(?P<total>\d+)\))",
        "0.18.0–0.33.0",
        "vllm/model_executor/model_loader/weight_utils.py",
    ),
    Marker(
        _E.WEIGHTS_LOADED,
        _P.LOADING_WEIGHTS,
        r"^Loading weights took (?P<s>[\d.]+) seconds$",
        "0.8.0–0.33.0",
        "model_loader/loader.py → default_loader.py",
    ),
    Marker(
        _E.MODEL_LOADED,
        _P.LOADING_WEIGHTS,
        r"^Loading model weights took (?P<gib>[\d.]+) (?:GB|GiB)$",
        "0.4.0.post1–0.9.2",
        "vllm/worker/model_runner.py, vllm/v1/worker/gpu_model_runner.py",
    ),
    Marker(
        _E.WEIGHTS_LOADED,
        _P.LOADING_WEIGHTS,
        r"^Pre-loading model weights on \S+ took ",
        "HabanaAI/vllm-fork (Gaudi HPU) 0.5–0.9 forks",
        "vllm/worker/hpu_model_runner.py (habana_model_runner.py before)",
    ),
    Marker(
        _E.MODEL_LOADED,
        _P.LOADING_WEIGHTS,
        r"^Loading model weights took in total (?P<gib>[\d.]+) GiB of device memory",
        "HabanaAI/vllm-fork (Gaudi HPU) 0.5–0.9 forks",
        "vllm/worker/hpu_model_runner.py (habana_model_runner.py before)",
    ),
    Marker(
        _E.MODEL_LOADED,
        _P.LOADING_WEIGHTS,
        r"^Model loading took (?P<gib>[\d.]+) ?(?:GB|GiB)(?: memory)? and (?P<s>[\d.]+) seconds$",
        "0.8.0–0.33.0",
        "vllm/v1/worker/gpu_model_runner.py, vllm/worker/model_runner.py",
    ),
    # --- 4. torch.compile (phase: compiling) --------------------------------------------------
    Marker(
        _E.COMPILE_STARTED,
        _P.COMPILING,
        rf"^{_TAG}Using cache directory: \S+ for vLLM's torch\.compile$",
        "0.6.6.post1–0.33.0",
        "vllm/compilation/backends.py",
    ),
    Marker(
        _E.COMPILE_STARTED,
        _P.COMPILING,
        rf"^{_TAG}Dynamo bytecode transform time: [\d.]+ s$",
        "0.6.6.post1–0.33.0",
        "vllm/compilation/backends.py",
    ),
    Marker(
        _E.COMPILE_STARTED,
        _P.COMPILING,
        rf"^{_TAG}Starting torch\.compile$",
        "0.32.0–0.33.0",
        "vllm/compilation/backends.py",
    ),
    Marker(
        _E.COMPILE_STARTED,
        _P.COMPILING,
        rf"^{_TAG}(?:Compiling a graph for |Directly load the compiled graph|"
        r"Cache the graph |Directly load AOT compilation from path )",
        "0.6.3.post1–0.33.0",
        "vllm/compilation/backends.py",
    ),
    Marker(
        _E.COMPILE_FINISHED,
        _P.COMPILING,
        rf"^{_TAG}torch\.compile (?:takes|took|and initial profiling/warmup run together "
        r"took) (?P<s>[\d.]+) s in total$",
        "takes: 0.6.6.post1–0.17.0; took: 0.18.0–0.33.0",
        "vllm/compilation/monitor.py",
    ),
    # --- 5. memory profiling and KV cache (phase: profiling_kv_cache) -------------------------
    Marker(
        _E.PROFILING,
        _P.PROFILING_KV_CACHE,
        rf"^{_TAG}Initial profiling/warmup run took [\d.]+ s$",
        "0.18.0–0.33.0",
        "vllm/compilation/monitor.py",
    ),
    Marker(
        _E.PROFILING,
        _P.PROFILING_KV_CACHE,
        r"^Memory profiling takes [\d.]+ seconds",
        "0.6.6.post1–0.10.2 (V0)",
        "vllm/worker/worker.py",
    ),
    Marker(
        _E.PROFILING,
        _P.PROFILING_KV_CACHE,
        r"^CUDA graph memory profiling is (?:enabled|disabled)|^Profiling CUDA graph memory: "
        r"|^Estimated CUDA graph memory: ",
        "0.18.0–0.33.0",
        "vllm/v1/worker/gpu_worker.py, gpu_model_runner.py",
    ),
    Marker(
        _E.KV_CACHE_MEMORY,
        _P.PROFILING_KV_CACHE,
        r"^Available KV cache memory: (?P<gib>-?[\d.]+) GiB$",
        "0.9.1–0.33.0",
        "vllm/v1/worker/gpu_worker.py",
    ),
    Marker(
        _E.KV_CACHE_MEMORY,
        _P.PROFILING_KV_CACHE,
        r"^Initial free memory [\d.]+ GiB, reserved (?P<gib>[\d.]+) ?GiB memory for KV Cache",
        "0.10.2–0.33.0",
        "vllm/v1/worker/gpu_worker.py",
    ),
    Marker(
        _E.KV_CACHE_SIZED,
        _P.PROFILING_KV_CACHE,
        r"^# (?:GPU|CUDA|TPU|HPU|XPU|CPU|NPU) blocks: \d+",
        "0.4.0.post1–0.11.0",
        "vllm/executor/*.py, v1/core/kv_cache_utils.py (0.6.6–0.7.3)",
    ),
    Marker(
        _E.KV_CACHE_SIZED,
        _P.PROFILING_KV_CACHE,
        r"^(?:[A-Z]+(?: \+ host)? )?KV cache size: (?P<tokens>[\d,]+) tokens",
        "GPU KV cache size 0.8.0–0.27.0; with Maximum concurrency 0.30.0–0.33.0",
        "vllm/v1/core/kv_cache_utils.py",
        needle="KV cache size: ",
    ),
    Marker(
        _E.KV_CACHE_SIZED,
        _P.PROFILING_KV_CACHE,
        r"^Maximum concurrency for [\d,]+ tokens per request: [\d.]+x$",
        "0.6.3.post1–0.27.0",
        "vllm/executor/*.py, vllm/v1/core/kv_cache_utils.py",
    ),
    # --- 6. CUDA graph capture (phase: capturing_cuda_graphs) ---------------------------------
    Marker(
        _E.GRAPH_CAPTURE_PROGRESS,
        _P.CAPTURING_CUDA_GRAPHS,
        r"^Capturing (?:the model for CUDA graphs|cudagraphs for decoding)\.",
        "0.4.0.post1–0.10.2 (V0)",
        "vllm/worker/model_runner.py",
    ),
    Marker(
        _E.GRAPH_CAPTURE_PROGRESS,
        _P.CAPTURING_CUDA_GRAPHS,
        r"^Capturing (?:eagle )?CUDA graph(?:s| shapes)(?: \([^)]*\))?:\s+\d{1,3}%"
        r"(?:\|[^|]*\| (?P<n>\d+)/(?P<total>\d+)" + _TQDM_REMAINING + ")?",
        "0.6.6.post1–0.33.0 (tqdm bar)",
        "vllm/worker/model_runner.py, "
        "vllm/v1/worker/gpu_model_runner.py, v1/worker/gpu/cudagraph_utils.py",
    ),
    Marker(
        _E.GRAPH_CAPTURE_FINISHED,
        _P.CAPTURING_CUDA_GRAPHS,
        r"^Graph capturing finished in (?P<s>\d+) secs(?:, took (?P<gib>-?[\d.]+) GiB)?\.?$",
        "0.4.0.post1–0.33.0 ('took X GiB' from 0.6.6)",
        "vllm/v1/worker/gpu_model_runner.py, vllm/worker/model_runner.py",
    ),
    # --- 7. engine ready, API server (phase: starting_api_server, ready) ----------------------
    Marker(
        _E.ENGINE_READY,
        _P.STARTING_API_SERVER,
        r"^init engine \(profile, create kv cache, warmup model\) took (?P<s>[\d.]+) s",
        "0.6.6.post1–0.33.0",
        "vllm/v1/engine/core.py, vllm/engine/llm_engine.py",
    ),
    Marker(
        _E.API_SERVER_STARTING,
        _P.STARTING_API_SERVER,
        r"^Supported[_ ]tasks: ",
        "0.10.1.1–0.33.0",
        "vllm/entrypoints/openai/api_server.py",
    ),
    Marker(
        _E.API_SERVER_STARTING,
        _P.STARTING_API_SERVER,
        r"^Starting vLLM (?:API )?server (?:\d+ )?on (?P<url>\S+)$",
        "API server on: 0.7.3–0.9.0; API server N on: 0.9.1–0.17.0; server on: 0.18.0–0.33.0",
        "vllm/entrypoints/openai/api_server.py, launchers/api_server/entry.py",
    ),
    Marker(
        _E.API_SERVER_STARTING,
        _P.STARTING_API_SERVER,
        r"^Available routes are:$",
        "0.5.5–0.33.0",
        "vllm/entrypoints/launcher.py",
    ),
    Marker(
        _E.API_SERVER_STARTING,
        _P.STARTING_API_SERVER,
        r"^Route: \S+, (?:Methods|Endpoint): ",
        "0.5.5–0.33.0",
        "vllm/entrypoints/launcher.py",
    ),
    Marker(
        _E.API_SERVER_STARTING,
        _P.STARTING_API_SERVER,
        r"^Launching Uvicorn with --limit_concurrency",
        "0.5.5–0.6.0",
        "vllm/entrypoints/launcher.py",
    ),
    Marker(
        _E.API_SERVER_STARTING,
        _P.STARTING_API_SERVER,
        r"^Started server process \[\d+\]$",
        "0.4.0.post1–0.33.0 (uvicorn, any version)",
        "uvicorn/server.py",
        kinds=_UVICORN,
    ),
    Marker(
        _E.API_SERVER_STARTING,
        _P.STARTING_API_SERVER,
        r"^Waiting for application startup\.$",
        "0.4.0.post1–0.33.0 (uvicorn, any version)",
        "uvicorn/lifespan/on.py",
        kinds=_UVICORN,
    ),
    Marker(
        _E.APP_STARTUP_COMPLETE,
        _P.READY,
        r"^Application startup complete\.$",
        "0.4.0.post1–0.33.0 (uvicorn, any version)",
        "uvicorn/lifespan/on.py",
        kinds=_UVICORN,
    ),
    Marker(
        _E.APP_STARTUP_COMPLETE,
        _P.READY,
        r"^Uvicorn running on (?P<url>\S+)",
        "vLLM ≤0.7.0 only (uvicorn binds the socket)",
        "uvicorn/server.py",
        kinds=_UVICORN,
    ),
    Marker(
        _E.SERVING,
        _P.READY,
        r"(?:^|: )Avg prompt throughput: [\d.]+ tokens/s, Avg generation throughput: ",
        "V0 0.4.0.post1–0.10.2; V1 0.7.3–0.33.0",
        "vllm/engine/metrics.py, vllm/v1/metrics/loggers.py",
        needle="Avg prompt throughput",
    ),
    Marker(
        _E.SERVING,
        _P.READY,
        r" - \"[A-Z]+ \S+ HTTP/[\d.]+\" \d{3}\b",
        "0.4.0.post1–0.33.0 (uvicorn access log)",
        "uvicorn.access",
        needle=" HTTP/",
        kinds=_UVICORN,
    ),
    # --- 8. shutdown and failure --------------------------------------------------------------
    Marker(
        _E.SHUTDOWN,
        _P.STOPPING,
        r"^(?:Shutting down FastAPI HTTP server\.|WorkerProc shutting down\.|"
        r"Shutdown initiated \(timeout=\d+\)|Engine is gracefully shutting down\.|"
        r"Shutting down\.?|Waiting for application shutdown\.)$",
        "0.5.0–0.33.0 (+ uvicorn)",
        "entrypoints/launcher.py, v1/engine/core.py, uvicorn",
    ),
    Marker(
        _E.SHUTDOWN,
        _P.STOPPING,
        r"^\[shutdown\] (?:API server: shutdown triggered|EngineCore: trigger received signal)",
        "0.24.0–0.33.0",
        "entrypoints/launcher(s)/launcher.py, vllm/v1/engine/core.py",
    ),
    Marker(
        _E.SHUTDOWN_COMPLETE,
        _P.STOPPED,
        r"^(?:Application shutdown complete\.|Finished server process \[\d+\])$",
        "0.4.0.post1–0.33.0 (uvicorn, any version)",
        "uvicorn/lifespan/on.py, uvicorn/server.py",
        kinds=_UVICORN,
    ),
    Marker(
        _E.EXECUTOR_WORKERS,
        None,
        r"^\[shutdown\] Executor: (?:waiting for worker exit|workers still running after grace "
        r"period; sending SIGTERM) count=(?P<workers>\d{1,4})",
        "0.24.0–0.33.0",
        "vllm/v1/executor/multiproc_executor.py",
    ),
    Marker(
        _E.HEARTBEAT,
        None,
        r"^Waiting for \d+ (?:local, \d+ remote )?core engine proc\(s\) to (?:start|connect)",
        "0.8.0–0.33.0 (DEBUG)",
        "v1/engine/core_client.py → v1/utils.py → v1/engine/utils.py",
    ),
    Marker(
        _E.HEARTBEAT,
        None,
        r"^No available (?:shared memory broadcast )?block found in \d+ seconds?",
        "0.5.5–0.33.0",
        "vllm/distributed/device_communicators/shm_broadcast.py",
    ),
    Marker(
        _E.HEARTBEAT,
        None,
        r"^Waiting for (?:init message from front-end|READY message from DP Coordinator)",
        "0.9.0–0.33.0",
        "vllm/v1/engine/core.py",
    ),
    Marker(
        _E.FATAL,
        None,
        r"^EngineCore (?:failed to start\.|encountered a fatal error\.|hit an exception)",
        "0.7.0–0.33.0",
        "vllm/v1/engine/core.py",
    ),
    Marker(
        _E.FATAL,
        None,
        r"^WorkerProc (?:failed to start\.|hit an exception)",
        "0.7.0–0.33.0",
        "vllm/v1/executor/multiproc_executor.py",
    ),
    Marker(
        _E.FATAL,
        None,
        r"^Worker proc (?P<proc>\S+) died unexpectedly(?: \(exit code: [^)]{1,12}\))?, "
        r"shutting down",
        "0.8.5.post1–0.33.0 (exit code from 0.27.0; `None` when the worker had not exited yet)",
        "vllm/v1/executor/multiproc_executor.py",
        cause="worker_died",
    ),
    Marker(
        _E.FATAL,
        None,
        r"^Engine core proc (?P<proc>\S+) died unexpectedly, shutting down client",
        "0.10.1.1–0.19.0",
        "vllm/v1/engine/core_client.py",
        terminal=True,
        cause="worker_died",
    ),
    Marker(
        _E.FATAL,
        None,
        r"^\[shutdown\] MPClient: engine core exited unexpectedly",
        "0.24.0–0.33.0",
        "vllm/v1/engine/core_client.py",
        cause="worker_died",
    ),
    Marker(
        _E.FATAL,
        None,
        r"^MQLLMEngine is already dead, terminating server process$",
        "0.6.3.post1–0.8.0",
        "vllm/entrypoints/launcher.py",
        terminal=True,
    ),
    Marker(
        _E.FATAL,
        None,
        r"^Exception in worker \S+ while processing method \w+",
        "0.4.3–0.10.2 (V0)",
        "vllm/executor/multiproc_worker_utils.py",
    ),
    Marker(
        _E.FATAL,
        None,
        r"^Error executing method \w+\. This might cause deadlock",
        "0.4.0.post1–0.10.2 (V0)",
        "vllm/worker/worker_base.py",
    ),
    Marker(
        _E.FATAL,
        None,
        r"^(?:Writing input of failed execution to \S+|Failed to pickle inputs of failed "
        r"execution: )",
        "0.6.0–0.6.6 (V0 model execution failed: its inputs dumped)",
        "vllm/worker/model_runner_base.py (dump_input_when_exception)",
    ),
    Marker(
        _E.FATAL,
        None,
        r"^Failed to load model - not enough GPU memory",
        "0.13.0–0.33.0",
        "vllm/v1/worker/gpu_model_runner.py",
        cause="cuda_oom",
    ),
    Marker(
        _E.FATAL,
        None,
        r"^Application startup failed\. Exiting\.$",
        "0.4.0.post1–0.33.0 (uvicorn, any version)",
        "uvicorn/lifespan/on.py",
        kinds=_UVICORN,
        terminal=True,
    ),
    Marker(
        _E.FATAL,
        None,
        r"^\[Errno 98\] (?:error while attempting to bind on address|Address already in use)",
        "0.4.0.post1–0.33.0 (uvicorn, any version)",
        "uvicorn/server.py",
        terminal=True,
        cause="port_in_use",
    ),
    Marker(
        _E.PORT_CONFLICT,
        None,
        r"^port \S+ is used by process ",
        "0.5.5–0.33.0",
        "vllm/entrypoints/launcher.py",
        cause="port_in_use",
    ),
    # --- 9. vLLM 2026 states: sleep, weight cache, startup plan, watchdog (vllm2026) ----------
    # Found by scripts/check-vllm-release 0.33.0 (docs/vllm-releases.md): the gRPC front end
    # (`vllm serve --grpc`) has no uvicorn lines, so its own two lines make it ready; Ray's V2
    # executor says a worker died in its own words; the preload CLI says a daemon rank died.
    Marker(
        _E.API_SERVER_STARTING,
        _P.STARTING_API_SERVER,
        r"^vLLM gRPC server started on \S{1,256}$",
        "0.17.1–0.33.0",
        "vllm/entrypoints/grpc_server.py → entrypoints/launchers/grpc_server.py",
    ),
    Marker(
        _E.APP_STARTUP_COMPLETE,
        _P.READY,
        r"^Server is ready to accept requests$",
        "0.17.1–0.33.0",
        "vllm/entrypoints/grpc_server.py → entrypoints/launchers/grpc_server.py",
    ),
    Marker(
        _E.FATAL,
        None,
        r"^RayWorkerProc rank=(?P<proc>\d+) died unexpectedly, shutting down executor\.$",
        "0.25.0–0.33.0",
        "vllm/v1/executor/ray_executor_v2.py",
        cause="worker_died",
    ),
    Marker(
        _E.FATAL,
        None,
        r"^Weight cache daemon rank\(s\) exited during startup \(exitcodes=[^)]{1,200}\); "
        r"shutting down\.$",
        "0.30.0–0.33.0",
        "weight_cache/daemon.py (0.30) → vllm/entrypoints/cli/preload.py (0.33)",
        terminal=True,
        cause="worker_died",
    ),
    # Sleep mode (--enable-sleep-mode; POST /sleep, POST /wake_up): the executor's lines time
    # the sleep and the wake-up, each worker says what its sleep freed. The phase moves are the
    # tracker's (``runtime_modes``): sleeping after ready, and back to ready on a whole wake.
    Marker(
        _E.FELL_ASLEEP,
        _P.SLEEPING,
        r"^It took (?P<s>[\d.]+) seconds to fall asleep\.$",
        "0.8.5–0.33.0",
        "vllm/executor/executor_base.py → vllm/v1/executor/abstract.py (Executor.sleep)",
    ),
    Marker(
        _E.SLEEP_MEMORY,
        None,
        r"^Sleep mode freed (?P<gib>[\d.]+) GiB memory, (?P<kept>[\d.]+) GiB memory is still "
        r"in use\.$",
        "0.8.5–0.33.0 (%.2f until 0.2x, format_gib after)",
        "vllm/v1/worker/gpu_worker.py (Worker.sleep)",
    ),
    Marker(
        _E.WOKE_UP,
        None,
        r"^It took (?P<s>[\d.]+) seconds to wake up tags (?P<tags>.{1,200})\.$",
        "0.8.5–0.33.0",
        "vllm/executor/executor_base.py → vllm/v1/executor/abstract.py (Executor.wake_up)",
    ),
    # The weight-cache daemon (`vllm preload`), and a serve unit loading through it
    # (--load-format ipc_cache).
    Marker(
        _E.WEIGHT_CACHE_LOADED,
        _P.LOADING_WEIGHTS,
        r"^Weight cache (?:(?P<role>\w+) )?daemon rank (?P<rank>\d+) loaded model"
        r"(?: \((?P<gib>[\d.]+) GiB allocated, (?P<reserved>[\d.]+) GiB reserved\))?$",
        "0.30.0–0.33.0 (the role and the GiB from 0.33.0; scripts/check-vllm-release 0.30.0)",
        "vllm/model_executor/model_loader/weight_cache/daemon.py",
    ),
    Marker(
        _E.WEIGHT_CACHE_SERVING,
        _P.READY,
        r"^Weight cache (?:(?P<role>\w+) )?daemon rank (?P<rank>\d+) serving on "
        r"(?P<socket>\S{1,256})$",
        "0.30.0–0.33.0 (the role from 0.33.0)",
        "vllm/model_executor/model_loader/weight_cache/daemon.py",
    ),
    Marker(
        _E.WEIGHT_CACHE_SERVING,
        _P.READY,
        r"^===== Weight cache daemon READY: node \d+/\d+ serving \d+ local rank\(s\)"
        r"(?: x \d+ role\(s\))? in .{1,256} =====$",
        "0.30.0–0.33.0 (`x %d role(s)` from 0.33.0)",
        "weight_cache/daemon.py (0.30) → vllm/entrypoints/cli/preload.py (0.33)",
        needle="Weight cache daemon READY",
    ),
    Marker(
        _E.WEIGHT_CACHE_MAPPED,
        _P.LOADING_WEIGHTS,
        r"^Mapped (?P<tensors>\d+) tensors from the weight cache daemon \((?P<mode>\w+) mode\)$",
        "0.30.0–0.33.0",
        "vllm/model_executor/model_loader/weight_cache/ipc_loader.py",
    ),
    # Startup plans (VLLM_ENABLE_STARTUP_PLAN=1): a boot that reuses one skips profiling.
    Marker(
        _E.STARTUP_PLAN_APPLIED,
        None,
        r"^Applying persisted startup plan \(fingerprint \S+\): ",
        "0.30.0–0.33.0",
        "vllm/v1/worker/startup_plan.py",
    ),
    Marker(
        _E.STARTUP_PLAN_SAVED,
        None,
        r"^Saved startup plan to (?P<path>\S{1,512})$",
        "0.30.0–0.33.0",
        "vllm/v1/worker/startup_plan.py",
    ),
    # vLLM's hang watchdog (--watchdog-config): its stack dump is vLLM saying it is stuck.
    Marker(
        _E.WATCHDOG_STARTED,
        None,
        r"^\[Watchdog\]Start with timeout=(?P<s>[\d.]+) check_interval=\S+ dump_dir=\S*",
        "0.33.0",
        "vllm/utils/watch_dog.py",
    ),
    Marker(
        _E.WATCHDOG_DUMP,
        None,
        r"^\[Watchdog\]Dumped stack to (?P<path>\S{1,512}) due to (?P<reason>.{1,200})$",
        "0.33.0",
        "vllm/utils/watch_dog.py",
    ),
)


@dataclass(frozen=True, slots=True)
class PhaseEnd:
    """A marker event that says its phase is over (not only that it is under way).

    The next phase starts where this line is: between ``Model loading took …`` and compile's
    first line (``Dynamo bytecode transform time: 8.71 s``, printed *after* Dynamo ran) the
    process is compiling, not loading.

    Attributes:
        event: the marker event (every row of ``MARKERS`` with it, in ``phase``).
        phase: the phase it ends.
        source: where vLLM logs it, and when.
        versions: the releases read.
    """

    event: Event
    phase: Phase
    source: str
    versions: str


PHASE_ENDS: tuple[PhaseEnd, ...] = (
    PhaseEnd(
        _E.MODEL_LOADED,
        _P.LOADING_WEIGHTS,
        "the last line of load_model: vllm/v1/worker/gpu_model_runner.py (Model loading took), "
        "vllm/worker/model_runner.py (Loading model weights took), hpu_model_runner.py",
        "0.4.0.post1–0.33.0",
    ),
    PhaseEnd(
        _E.GRAPH_CAPTURE_FINISHED,
        _P.CAPTURING_CUDA_GRAPHS,
        "the last line of capture_model: vllm/v1/worker/gpu_model_runner.py, "
        "vllm/worker/model_runner.py (Graph capturing finished in …)",
        "0.4.0.post1–0.33.0",
    ),
)
"""Marker events that end their phase: the next phase is entered at their time."""

PHASE_END_EVENTS: Mapping[Event, Phase] = MappingProxyType(
    {row.event: row.phase for row in PHASE_ENDS}
)


class MarkerMatch(NamedTuple):
    """A marker that matched a body, with its named groups.

    A ``NamedTuple`` (immutable, cheap): one is made for every marker line, often every other
    line of a startup log.
    """

    marker: Marker
    groups: Mapping[str, str | None]


_KEY: Final = re.compile(r"\[[^\]]{1,40}\]|[\w#'.-]+")
_KEY_MATCH: Final = _KEY.match  # bound once: no method lookup per line (hot path)
_NO_GROUPS: Final[Mapping[str, str | None]] = MappingProxyType({})
_new_match: Final = tuple.__new__  # MarkerMatch without the keyword wrapper (hot path)
_KEY_CHARS: Final = frozenset("#'.-_")


def _continues_word(body: str, index: int) -> bool:
    """Whether ``body[index]`` is a character of ``_KEY``'s word class ``[\\w#'.-]``."""
    char = body[index : index + 1]
    return char != "" and (char.isalnum() or char in _KEY_CHARS)


def _body_key(body: str) -> str:
    """The dispatch key of a body: its leading word (``[tag]`` kept whole)."""
    found = _KEY.match(body)
    return found.group() if found is not None else ""


def _first_word(pattern: str) -> str | None:
    """Return the literal key a pattern requires at the start of the body, if any."""
    if not pattern.startswith("^"):
        return None
    text = pattern[1:]
    if text.startswith(_TAG):
        text = text[len(_TAG) :]
    if text.startswith("\\["):
        close = text.find("\\]")
        return "[" + text[2:close] + "]" if close > 2 else None
    word: list[str] = []
    index = 0
    while index < len(text):
        char = text[index]
        if char == "\\" and index + 1 < len(text) and text[index + 1] in _KEY_CHARS:
            word.append(text[index + 1])
            index += 2
            continue
        if char.isalnum() or char in _KEY_CHARS:
            word.append(char)
            index += 1
            continue
        if char in "?*{" and word:
            word.pop()  # the previous character is optional: not part of a fixed key
        break
    return "".join(word) or None


def _alternative_first_words(pattern: str) -> tuple[str, ...]:
    """First words of a pattern shaped ``^(?:alt1|alt2…)rest``: each alternative's literal word."""
    body = pattern[1:]
    if body.startswith(_TAG):
        body = body[len(_TAG) :]
    if not body.startswith("(?:"):
        return ()
    depth = 0
    for end, char in enumerate(body):
        if char == "(" and (end == 0 or body[end - 1] != "\\"):
            depth += 1
        elif char == ")" and body[end - 1] != "\\":
            depth -= 1
            if depth == 0:
                break
    else:
        return ()
    inner = body[3:end]
    words = []
    depth = 0
    start = 0
    alternatives = []
    for index, char in enumerate(inner):
        if char == "(" and (index == 0 or inner[index - 1] != "\\"):
            depth += 1
        elif char == ")" and inner[index - 1] != "\\":
            depth -= 1
        elif char == "|" and depth == 0 and inner[index - 1] != "\\":
            alternatives.append(inner[start:index])
            start = index + 1
    alternatives.append(inner[start:])
    for alternative in alternatives:
        word = _first_word("^" + alternative)
        if word is None:
            return ()
        words.append(word)
    return tuple(words)


def _keys_of(marker: Marker) -> tuple[str, ...]:
    if marker.needle is not None:
        return ()
    word = _first_word(marker.pattern)
    if word is not None:
        return (word,)
    words = _alternative_first_words(marker.pattern)
    if words:
        return words
    raise ValueError(f"marker needs a literal first word or a needle: {marker.pattern!r}")


_Row = tuple[Marker, Callable[[str], "re.Match[str] | None"], "frozenset[LineKind] | None"]


def _rows(markers: Iterable[Marker]) -> tuple[_Row, ...]:
    return tuple((marker, marker.regex.search, marker.kinds) for marker in markers)


class MarkerMatcher:
    """Find the catalog row that a line body matches, cheaply.

    Build once from a table; ``match`` is pure and safe to call from any thread.
    """

    def __init__(self, markers: Iterable[Marker] = MARKERS) -> None:
        by_word: dict[str, list[Marker]] = {}
        always: list[Marker] = []
        for marker in markers:
            keys = _keys_of(marker)
            if not keys:
                always.append(marker)
            for key in dict.fromkeys(keys):
                by_word.setdefault(key, []).append(marker)
        self._by_word = {word: _rows(rows) for word, rows in by_word.items()}
        # The same keys by their first character, for bodies that do not start with "[": the
        # body's leading word is a key when the body starts with it and the next character
        # cannot continue a word (``_KEY``'s second branch), so no regex runs for the word.
        by_first: dict[str, list[tuple[str, tuple[_Row, ...]]]] = {}
        for word, rows in self._by_word.items():
            if not word.startswith("["):
                by_first.setdefault(word[0], []).append((word, rows))
        self._by_first = {first: tuple(keys) for first, keys in by_first.items()}
        # Rows tried on every body: each has a needle (``_keys_of`` refuses a row without one),
        # and a row without named groups has its one match made here (access lines, engine
        # stats: most lines of a serving log).
        self._always_rows = tuple(
            (
                marker.needle or "",
                marker.regex.search,
                marker.kinds,
                marker,
                None if marker.regex.groupindex else MarkerMatch(marker, _NO_GROUPS),
            )
            for marker in always
        )

    def match(self, body: str, kind: LineKind) -> MarkerMatch | None:
        """Return the first row whose pattern matches ``body``, or ``None``."""
        candidates: tuple[_Row, ...] | None = None
        first = body[:1]
        if first == "[":
            key = _KEY_MATCH(body)
            word = key.group() if key is not None else ""
            candidates = self._by_word.get(word)
            if candidates is None and word.startswith("["):
                candidates = self._by_word.get(_body_key(body[len(word) :].lstrip()))
        else:
            for word, rows in self._by_first.get(first, ()):
                if body.startswith(word) and not _continues_word(body, len(word)):
                    candidates = rows
                    break
        if candidates:
            for marker, search, kinds in candidates:
                if kinds is not None and kind not in kinds:
                    continue
                found = search(body)
                if found is not None:
                    return _new_match(MarkerMatch, (marker, found.groupdict()))
        # most bodies hold none of the needles: one substring test per row
        for needle, search, kinds, marker, fixed in self._always_rows:
            if needle not in body or (kinds is not None and kind not in kinds):
                continue
            found = search(body)
            if found is not None:
                if fixed is not None:
                    return fixed
                return _new_match(MarkerMatch, (marker, found.groupdict()))
        return None


# --- crash reporters: where vLLM logs the traceback of a dying process ----------------------


@dataclass(frozen=True, slots=True)
class CrashReporter:
    """A vLLM file that logs the traceback of its dying process (``logger.exception``).

    Every line of such a traceback carries ``ERROR … [<file>:<line>]``, so its frames name the
    reporter even when the excerpt (or the journal window) cut off the message before them
    (``EngineCore failed to start.``) and the exception line after them. During startup, an
    ERROR traceback of a reporter is the process dying, with or without header and end.

    Attributes:
        file: the file name as vLLM's header shows it (``core.py``).
        path: the module in vLLM's tree.
        fatal: the messages it logs before the traceback of a dying process (regex, for docs
            and tests; the rule does not need them: they are often cut off).
        handled: messages the same file logs before a traceback it survives (regex): a
            traceback whose context line says so is not a crash.
        versions: vLLM releases whose source logs so.
        example: a real frame line under the reporter's header.
    """

    file: str
    path: str
    fatal: str
    handled: str | None
    versions: str
    example: str
    handled_regex: re.Pattern[str] | None = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        regex = re.compile(self.handled) if self.handled is not None else None
        object.__setattr__(self, "handled_regex", regex)

    def survives(self, context: str | None) -> bool:
        """True when ``context`` (the line before the traceback) is a handled error's."""
        regex = self.handled_regex
        return context is not None and regex is not None and regex.match(context) is not None


CRASH_REPORTERS: tuple[CrashReporter, ...] = (
    CrashReporter(
        "core.py",
        "vllm/v1/engine/core.py (EngineCoreProc.run_engine_core)",
        r"^(?:EngineCore failed to start\.|EngineCore encountered a fatal error\.|EngineCore hit "
        r"an exception)",
        r"^Invocation of \S+ method failed",  # a client's utility call failed; it serves on
        "0.7.0–0.33.0 (`EngineCore hit an exception: %s` 0.7.0–0.8.0)",
        'ERROR 04-29 13:23:34 [core.py:396]   File "/usr/lib/python3/dist-packages/vllm/v1/'
        'engine/core.py", line 156, in _initialize_kv_caches',
    ),
    CrashReporter(
        "multiproc_executor.py",
        "vllm/v1/executor/multiproc_executor.py (WorkerProc.worker_main, worker_busy_loop)",
        r"^WorkerProc (?:failed to start\.|hit an exception)",
        None,
        "0.7.0–0.33.0",
        "(VllmWorker rank=1 pid=88) ERROR 05-10 16:00:15 [multiproc_executor.py:470]   File "
        '"/usr/lib/python3/dist-packages/vllm/v1/worker/gpu_worker.py", line 205, in '
        "determine_available_memory",
    ),
    CrashReporter(
        "multiproc_worker_utils.py",
        "vllm/executor/multiproc_worker_utils.py (V0 _run_worker_process)",
        r"^Exception in worker \S+ while processing method \w+",
        None,
        "0.4.3–0.10.2 (V0)",
        "(VllmWorkerProcess pid=25756) ERROR 03-25 12:23:00 [multiproc_worker_utils.py:238]   "
        'File "/usr/lib/python3/dist-packages/vllm/worker/model_runner.py", line 1654, in '
        "execute_model",
    ),
)
"""vLLM's crash reporters, one row per file (``tracker`` asks ``crash_reporter``)."""

_REPORTERS_BY_FILE: Final[Mapping[str, CrashReporter]] = MappingProxyType(
    {reporter.file: reporter for reporter in CRASH_REPORTERS}
)


def crash_reporter(source: str | None) -> CrashReporter | None:
    """The crash reporter a header's ``file.py:123`` names, or ``None``."""
    if source is None:
        return None
    return _REPORTERS_BY_FILE.get(source.rpartition(":")[0].rpartition("/")[2])


# --- systemd (the service manager) and the kernel, about the unit --------------------------


class SystemdEvent(StrEnum):
    """What systemd, the kernel or journalctl says about a unit."""

    UNIT_STARTING = "unit_starting"
    UNIT_STARTED = "unit_started"
    UNIT_STOPPING = "unit_stopping"
    UNIT_STOPPED = "unit_stopped"
    UNIT_DEACTIVATED = "unit_deactivated"
    MAIN_PROCESS_EXITED = "main_process_exited"
    UNIT_FAILED = "unit_failed"
    RESTART_SCHEDULED = "restart_scheduled"
    OOM_KILLED = "oom_killed"
    START_TIMED_OUT = "start_timed_out"
    BOOT = "boot"


@dataclass(frozen=True, slots=True)
class SystemdMarker:
    """One systemd message: event, catalog ``MESSAGE_ID`` (if any) and text pattern."""

    event: SystemdEvent
    message_id: str | None
    pattern: str
    source: str
    regex: re.Pattern[str] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "regex", re.compile(self.pattern))


_S: Final = SystemdEvent
_UNIT_PREFIX: Final = r"(?:^|: )"

SYSTEMD_MARKERS: tuple[SystemdMarker, ...] = (
    SystemdMarker(
        _S.MAIN_PROCESS_EXITED,
        "98e322203f7a4ed290d09fe03c09fe15",
        _UNIT_PREFIX + r"Main process exited, code=(?P<code>\w+), "
        r"status=(?P<status>-?\d+)(?:/(?P<name>\w+))?",
        "systemd src/core/service.c (unit_process_exit)",
    ),
    SystemdMarker(
        _S.UNIT_FAILED,
        None,
        _UNIT_PREFIX + r"Failed with result '(?P<result>[\w-]+)'",
        "systemd src/core/service.c (service_enter_dead)",
    ),
    SystemdMarker(
        _S.OOM_KILLED,
        "fe6faa94e7774663a0da52717891d8ef",
        _UNIT_PREFIX + r"A process of this unit has been killed by the OOM killer",
        "systemd src/core/unit.c (unit_out_of_memory)",
    ),
    SystemdMarker(
        _S.OOM_KILLED,
        None,
        r"Out of memory: Killed process (?P<pid>\d+)",
        "Linux mm/oom_kill.c (kernel)",
    ),
    SystemdMarker(
        _S.START_TIMED_OUT,
        None,
        _UNIT_PREFIX + r"Start operation timed out",
        "systemd src/core/service.c",
    ),
    SystemdMarker(
        _S.RESTART_SCHEDULED,
        "5eb03494b6584870a536b337290809b3",
        _UNIT_PREFIX + r"Scheduled restart job, restart counter is at (?P<n>\d+)",
        "systemd src/core/service.c",
    ),
    SystemdMarker(
        _S.UNIT_DEACTIVATED,
        "7ad2d189f7e94e70a38c781354912448",
        _UNIT_PREFIX + r"Deactivated successfully",
        "systemd src/core/unit.c",
    ),
    SystemdMarker(
        _S.UNIT_STARTING,
        "7d4958e842da4a758f6c1cdc7b36dcc5",
        r"^Starting (?P<what>.+)\.\.\.$",
        "systemd src/core/job.c",
    ),
    SystemdMarker(
        _S.UNIT_STARTED,
        "39f53479d3a045ac8e11786248231fbf",
        r"^Started (?P<what>.+?)\.?$",
        "systemd src/core/job.c",
    ),
    SystemdMarker(
        _S.UNIT_STOPPING,
        "de5b426a63be47a7b6ac3eaac82e2f6f",
        r"^Stopping (?P<what>.+)\.\.\.$",
        "systemd src/core/job.c",
    ),
    SystemdMarker(
        _S.UNIT_STOPPED,
        "9d1aaa27d60140bd96365438aad20286",
        r"^Stopped (?P<what>.+?)\.?$",
        "systemd src/core/job.c",
    ),
    SystemdMarker(
        _S.UNIT_FAILED,
        "be02cf6855d2428ba40df7e9d022f03d",
        r"^Failed to start (?P<what>.+?)\.?$",
        "systemd src/core/job.c (systemd < 250 wording)",
    ),
    SystemdMarker(_S.BOOT, None, r"^-- (?:Boot [0-9a-f]+|Reboot) --$", "journalctl (annotation)"),
)

_BY_MESSAGE_ID: Final[Mapping[str, SystemdMarker]] = MappingProxyType(
    {row.message_id: row for row in SYSTEMD_MARKERS if row.message_id}
)


def match_systemd(
    message: str, message_id: str | None = None
) -> tuple[SystemdEvent, Mapping[str, str | None]] | None:
    """Classify a line written by systemd (or the kernel) about a unit.

    Args:
        message: the message text.
        message_id: the journal ``MESSAGE_ID`` when the source has one; it decides the
            event when known, and the text then only supplies the numbers.
    """
    if message_id is not None:
        row = _BY_MESSAGE_ID.get(message_id)
        if row is not None:
            found = row.regex.search(message)
            return row.event, (found.groupdict() if found else {})
    for row in SYSTEMD_MARKERS:
        found = row.regex.search(message)
        if found is not None:
            return row.event, found.groupdict()
    return None
