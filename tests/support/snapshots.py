"""Hand-built snapshots for exporter, HTTP and golden tests.

``basic_snapshot()`` is one scrape's worth of state at a fixed time, chosen to exercise every
metric family: host ``gpu-a`` has a unit that crashed once and is now loading weights (slower
than usual, with an ETA), a unit that is ready (its ``/health`` probe answering), and a unit with
no records yet; host ``gpu-b`` has its journal collector down.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from vllm_sentinel.engine.catalog.causes import CrashCause
from vllm_sentinel.engine.catalog.phases import Outcome, Phase
from vllm_sentinel.engine.snapshot import (
    CollectorState,
    CrashInfo,
    EtaBasis,
    GpuDevice,
    HostSnapshot,
    IncarnationSnapshot,
    PhaseEntry,
    Progress,
    RuntimeModes,
    SentinelState,
    Snapshot,
    UnitHealth,
    UnitSnapshot,
)

__all__ = [
    "AT",
    "GIB",
    "T0",
    "at",
    "basic_snapshot",
    "incarnation",
    "modes_snapshot",
    "unit_snapshot",
]

GIB = 1024**3
T0 = datetime(2025, 3, 1, 12, 0, 0, tzinfo=UTC)
"""When the story starts (log time)."""
AT = T0 + timedelta(minutes=30)
"""When the snapshot is taken."""


def at(seconds: float) -> datetime:
    """``T0`` plus ``seconds``."""
    return T0 + timedelta(seconds=seconds)


def incarnation(
    phases: list[tuple[Phase, float]],
    *,
    id: str | None = "inv-1",
    outcome: Outcome = Outcome.RUNNING,
    crash: CrashInfo | None = None,
    ended: float | None = None,
    progress: Progress | None = None,
    vllm_version: str | None = "0.8.5",
    model: str | None = "meta-llama/Llama-3.1-8B-Instruct",
    tensor_parallel_size: int | None = 1,
    last_record: float | None = None,
) -> IncarnationSnapshot:
    """An incarnation that entered ``phases`` at the given offsets from ``T0`` (seconds)."""
    entries = tuple(PhaseEntry(phase, at(offset)) for phase, offset in phases)
    last = at(last_record) if last_record is not None else entries[-1].entered_at
    return IncarnationSnapshot(
        id=id,
        started_at=entries[0].entered_at,
        ended_at=at(ended) if ended is not None else None,
        phases=entries,
        phase=entries[-1].phase,
        furthest_phase=entries[-1].phase,
        outcome=outcome,
        crash=crash,
        pids=(4242,),
        benign_errors=0,
        records=10,
        last_record_at=last,
        last_progress_at=last,
        vllm_version=vllm_version,
        model=model,
        tensor_parallel_size=tensor_parallel_size,
        progress=progress or Progress(),
    )


def unit_snapshot(
    host: str, unit: str, *items: IncarnationSnapshot, **kwargs: object
) -> UnitSnapshot:
    """A unit snapshot with the given incarnations (oldest first) and extra fields."""
    return UnitSnapshot(host=host, unit=unit, incarnations=items, **kwargs)  # type: ignore[arg-type]


def _crashed_then_loading() -> UnitSnapshot:
    crash = CrashInfo(
        cause=CrashCause.CUDA_OOM,
        exception="torch.OutOfMemoryError",
        message="CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity "
        "of 79.10 GiB of which 1.12 GiB is free.",
        phase=Phase.PROFILING_KV_CACHE,
        at=at(300),
        invocation_id="inv-1",
    )
    first = incarnation(
        [
            (Phase.STARTING, 0),
            (Phase.INITIALIZING, 5),
            (Phase.LOADING_WEIGHTS, 20),
            (Phase.COMPILING, 140),
            (Phase.PROFILING_KV_CACHE, 200),
            (Phase.CRASHED, 300),
        ],
        id="inv-1",
        outcome=Outcome.CRASHED,
        crash=crash,
        ended=300,
        progress=Progress(
            weights_shards_loaded=4, weights_shards_total=4, model_weights_bytes=15 * GIB
        ),
    )
    second = incarnation(
        [(Phase.STARTING, 600), (Phase.INITIALIZING, 604), (Phase.LOADING_WEIGHTS, 620)],
        id="inv-2",
        progress=Progress(weights_shards_loaded=1, weights_shards_total=4),
        last_record=1500,
    )
    return unit_snapshot(
        "gpu-a",
        "vllm-llama.service",
        first,
        second,
        starts_total=2,
        crashes_total={CrashCause.CUDA_OOM: 1},
        records_by_level={"info": 120, "warning": 3, "error": 7, "none": 40},
        benign_errors_total=2,
        last_crash=crash,
        counted_crashes=(crash,),
        recent_starts=(at(0), at(600)),
        recent_crashes=(at(300),),  # settled: the tracker adds its end when it counts it
        phase_durations={
            Phase.STARTING: 5.0,
            Phase.INITIALIZING: 15.0,
            Phase.LOADING_WEIGHTS: 120.0,
            Phase.COMPILING: 60.0,
        },
        gpu_memory_used_bytes={0: 6 * GIB, 1: 6 * GIB},
        last_gpu_growth_at=at(1700),
        stalled=False,
        slow=True,  # 1180 s in loading_weights against a usual 120 s
        usual_phase_seconds=120.0,
        eta_seconds=420.0,
        expected_ready_at=AT + timedelta(seconds=420),
        eta_basis=EtaBasis.BOTH,
    )


def _ready() -> UnitSnapshot:
    item = incarnation(
        [
            (Phase.STARTING, 0),
            (Phase.INITIALIZING, 3),
            (Phase.LOADING_WEIGHTS, 10),
            (Phase.COMPILING, 70),
            (Phase.PROFILING_KV_CACHE, 100),
            (Phase.CAPTURING_CUDA_GRAPHS, 110),
            (Phase.STARTING_API_SERVER, 130),
            (Phase.READY, 135),
        ],
        id="0123456789abcdef0123456789abcdef",
        outcome=Outcome.READY,
        model="Qwen/Qwen2.5-7B-Instruct",
        progress=Progress(
            weights_shards_loaded=4,
            weights_shards_total=4,
            model_weights_bytes=int(14.25 * GIB),
            kv_cache_tokens=421_632,
        ),
    )
    return unit_snapshot(
        "gpu-a",
        "vllm-qwen.service",
        item,
        starts_total=1,
        records_by_level={"info": 300, "debug": 12},
        phase_durations={
            Phase.STARTING: 3.0,
            Phase.INITIALIZING: 7.0,
            Phase.LOADING_WEIGHTS: 60.0,
            Phase.COMPILING: 30.0,
            Phase.PROFILING_KV_CACHE: 10.0,
            Phase.CAPTURING_CUDA_GRAPHS: 20.0,
            Phase.STARTING_API_SERVER: 5.0,
        },
        startup_duration_seconds=135.0,
        gpu_memory_used_bytes={2: 70 * GIB},
        health=UnitHealth(
            url="http://127.0.0.1:8000",
            up=True,
            status=200,
            last_probe_at=at(1790),
            duration_seconds=0.0042,
            last_success_at=at(1790),
            ready_at=at(240),
            served_models=("Qwen/Qwen2.5-7B-Instruct",),
        ),
        ready_source="log",
    )


def _stalled() -> UnitSnapshot:
    item = incarnation(
        [(Phase.STARTING, 100), (Phase.INITIALIZING, 110), (Phase.COMPILING, 400)],
        id=None,
        vllm_version=None,
        model=None,
        tensor_parallel_size=None,
    )
    return unit_snapshot(
        "gpu-b",
        "vllm-mixtral.service",
        item,
        starts_total=1,
        records_by_level={"info": 50},
        stalled=True,
    )


def basic_snapshot() -> Snapshot:
    """Two hosts, four units, three GPUs: every family has at least one series."""
    host_a = HostSnapshot(
        host="gpu-a",
        units=(
            _crashed_then_loading(),
            _ready(),
            UnitSnapshot(host="gpu-a", unit="vllm-idle.service", incarnations=()),
        ),
        collectors={
            "journal": CollectorState(up=True, since=T0, reconnects_total=1),
            "gpu": CollectorState(up=True, since=T0),
        },
        gpus=(
            GpuDevice(0, "GPU-aaaaaaaa-0000", "NVIDIA H100 80GB HBM3", 7 * GIB, 80 * GIB),
            GpuDevice(1, "GPU-aaaaaaaa-0001", "NVIDIA H100 80GB HBM3", 7 * GIB, 80 * GIB),
            GpuDevice(2, "GPU-aaaaaaaa-0002", "NVIDIA H100 80GB HBM3", 71 * GIB, 80 * GIB),
        ),
        records_skipped={"invalid_json": 3, "line_too_long": 1},
    )
    host_b = HostSnapshot(
        host="gpu-b",
        units=(_stalled(),),
        collectors={
            "journal": CollectorState(
                up=False, since=at(1200), reason="ssh_connect_failed", reconnects_total=4
            ),
            "gpu": CollectorState(up=False, since=at(1200), reason="ssh_connect_failed"),
        },
    )
    sentinel = SentinelState(
        config_reloads={"success": 2, "failure": 1},
        cursor_save_failures_total=0,
        cursor_saved_at=at(1799),
    )
    return Snapshot(hosts=(host_a, host_b), at=AT, sentinel=sentinel)


# --- vLLM 0.33's modes (vllm2026) ------------------------------------------------------------

_SERVED = [
    (Phase.STARTING, 0),
    (Phase.INITIALIZING, 5),
    (Phase.LOADING_WEIGHTS, 10),
    (Phase.PROFILING_KV_CACHE, 12),
    (Phase.CAPTURING_CUDA_GRAPHS, 20),
    (Phase.STARTING_API_SERVER, 28),
    (Phase.READY, 30),
]


def modes_snapshot() -> Snapshot:
    """One host, ``gpu-c``, with a unit in each of vLLM 0.33's newer modes: a weight-cache
    daemon serving weights, a serve unit that mapped them and fell asleep, a start that will
    outlast its engine ready timeout, and one whose vLLM watchdog dumped its stack."""
    replace_kwargs = {"vllm_version": "0.33.0", "model": "Qwen/Qwen3-8B"}
    daemon = incarnation(
        [(Phase.STARTING, 0), (Phase.LOADING_WEIGHTS, 2), (Phase.READY, 40)],
        id="cafe0000000000000000000000000001",
        outcome=Outcome.READY,
        **replace_kwargs,  # type: ignore[arg-type]
    )
    daemon = _with_modes(
        daemon,
        RuntimeModes(
            role="weight_cache",
            weight_cache_socket="/run/vllm/weight_cache_0.sock",
            weight_cache_bytes=int(15.27 * GIB),
        ),
    )
    asleep = incarnation(
        [*_SERVED, (Phase.SLEEPING, 600)],
        id="cafe0000000000000000000000000002",
        outcome=Outcome.READY,
        **replace_kwargs,  # type: ignore[arg-type]
    )
    asleep = _with_modes(
        asleep,
        RuntimeModes(
            startup_kind="weight_cache",
            weight_cache_tensors=399,
            sleeping_since=at(600),
            sleep_freed_bytes=int(66.41 * GIB),
            sleep_kept_bytes=int(3.12 * GIB),
            fall_asleep_seconds=1.482913,
            wake_up_seconds=0.912345,
            sleeps=2,
        ),
    )
    late = incarnation(
        [(Phase.STARTING, 1500), (Phase.INITIALIZING, 1510), (Phase.LOADING_WEIGHTS, 1520)],
        id="cafe0000000000000000000000000003",
        progress=Progress(weights_shards_loaded=10, weights_shards_total=64),
        model="moonshotai/Kimi-K2.5",
        vllm_version="0.33.0",
        tensor_parallel_size=8,
    )
    late = _with_modes(late, RuntimeModes(ready_timeout_seconds=900.0))
    dumped = incarnation(
        [(Phase.STARTING, 1000), (Phase.INITIALIZING, 1010), (Phase.COMPILING, 1100)],
        id="cafe0000000000000000000000000004",
        last_record=1150,
        **replace_kwargs,  # type: ignore[arg-type]
    )
    dumped = _with_modes(
        dumped,
        RuntimeModes(
            watchdog_dump_path="/var/tmp/vllm-watchdog/VLLM_STACK_DUMP_for_engine_0_2817.log",
            watchdog_reason="feed timeout",
            watchdog_dumped_at=at(1700),
        ),
    )
    host = HostSnapshot(
        host="gpu-c",
        units=(
            unit_snapshot("gpu-c", "vllm-weights.service", daemon, starts_total=1),
            unit_snapshot("gpu-c", "vllm-chat.service", asleep, starts_total=1),
            unit_snapshot(
                "gpu-c",
                "vllm-kimi.service",
                late,
                starts_total=1,
                eta_seconds=1500.0,
                expected_ready_at=AT + timedelta(seconds=1500),
                eta_basis=EtaBasis.HISTORY,
                will_time_out=True,
                ready_timeout_seconds=900.0,
                ready_timeout_remaining_seconds=600.0,
            ),
            unit_snapshot(
                "gpu-c",
                "vllm-hung.service",
                dumped,
                starts_total=1,
                stalled=True,
                stall_reason="vllm_watchdog",
            ),
        ),
        collectors={"journal": CollectorState(up=True, since=T0)},
    )
    return Snapshot(hosts=(host,), at=AT)


def _with_modes(item: IncarnationSnapshot, modes: RuntimeModes) -> IncarnationSnapshot:
    from dataclasses import replace

    return replace(item, modes=modes)
