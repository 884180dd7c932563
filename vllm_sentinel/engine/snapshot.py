"""Frozen views of what the engine knows, handed from the one writer to every reader (core).

``UnitTracker.snapshot(now)`` builds a ``UnitSnapshot``; the Monitor adds GPU and stall facts
and publishes a ``Snapshot`` of every host; the exporter, ``/status`` and ``replay`` only read.
Times are timezone-aware UTC ``datetime``; durations are float seconds; sizes are bytes.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum

from vllm_sentinel.engine.catalog.causes import CrashCause
from vllm_sentinel.engine.catalog.phases import Outcome, Phase
from vllm_sentinel.engine.counters import UnitCounters

__all__ = [
    "CollectorState",
    "CrashInfo",
    "EarlierIncarnations",
    "EtaBasis",
    "GpuDevice",
    "GpuProcess",
    "GpuProcessUsage",
    "GpuReading",
    "HostSnapshot",
    "IncarnationSnapshot",
    "PhaseEntry",
    "Progress",
    "ProgressBar",
    "RuntimeModes",
    "SentinelState",
    "Snapshot",
    "StartupRecord",
    "UnitHealth",
    "UnitSnapshot",
]


@dataclass(frozen=True, slots=True)
class PhaseEntry:
    """A phase an incarnation entered, and when (log time)."""

    phase: Phase
    entered_at: datetime | None


@dataclass(frozen=True, slots=True)
class CrashInfo:
    """The root cause of a crash.

    Attributes:
        cause: the bounded cause label.
        exception: the root exception's class (``RuntimeError``), ``""`` for a log line.
        message: its message (bounded).
        phase: the phase the incarnation was in when it crashed.
        at: when it crashed (log time), if known.
        invocation_id: the crashed incarnation's systemd invocation id, if known.
    """

    cause: CrashCause
    exception: str
    message: str
    phase: Phase
    at: datetime | None
    invocation_id: str | None = None


@dataclass(frozen=True, slots=True)
class ProgressBar:
    """The last tqdm progress bar an incarnation printed: shard loading or CUDA graph capture.

    vLLM draws these bars with tqdm (``model_executor/model_loader/weight_utils.py``,
    ``v1/worker/gpu_model_runner.py``, 0.5.5–0.33.0); each refresh ends in
    ``[elapsed<remaining, rate]``. ``remaining_seconds`` is tqdm's own estimate at ``at``
    (``None`` while tqdm prints ``?``).

    Attributes:
        phase: the phase the bar belongs to (``loading_weights``, ``capturing_cuda_graphs``).
        at: log time of the refresh.
        done: items done (shards, graph shapes), if printed.
        total: items in total, if printed.
        remaining_seconds: the time tqdm says is left for this bar.
    """

    phase: Phase
    at: datetime | None
    done: int | None = None
    total: int | None = None
    remaining_seconds: float | None = None

    @property
    def is_complete(self) -> bool:
        """True once the bar shows every item done."""
        return self.total is not None and self.done is not None and self.done >= self.total


@dataclass(frozen=True, slots=True)
class Progress:
    """Figures read from the startup lines (``None`` until the line is seen).

    ``weights_progress_first_at`` / ``weights_progress_first_loaded`` are the first reading of
    the current shard-loading bar and ``weights_progress_at`` when its count last grew: the
    shard rate measured from them does not depend on tqdm's own estimate.
    """

    weights_shards_loaded: int | None = None
    weights_shards_total: int | None = None
    model_weights_bytes: int | None = None
    weights_load_seconds: float | None = None
    compile_seconds: float | None = None
    kv_cache_bytes: int | None = None
    kv_cache_tokens: int | None = None
    cuda_graph_bytes: int | None = None
    cuda_graph_capture_seconds: float | None = None
    engine_init_seconds: float | None = None
    bar: ProgressBar | None = None
    weights_progress_first_at: datetime | None = None
    weights_progress_first_loaded: int | None = None
    weights_progress_at: datetime | None = None

    @property
    def weights_loaded_ratio(self) -> float | None:
        """Checkpoint shards loaded / total, 0–1."""
        if not self.weights_shards_total:
            return None
        return min(1.0, (self.weights_shards_loaded or 0) / self.weights_shards_total)


# --- vLLM 2026 states (sleep, weight cache, startup plan, watchdog, ready timeout) ---------


@dataclass(frozen=True, slots=True)
class RuntimeModes:
    """How an incarnation runs, from the lines of vLLM 0.33's newer modes (``runtime_modes``).

    Attributes:
        role: ``"serve"`` (a vLLM server) or ``"weight_cache"`` (a ``vllm preload`` weight-cache
            daemon: it loads and holds the weights that serve units map; ready once it serves).
        startup_kind: how its start loaded: ``"full"`` (from disk), ``"weight_cache"`` (mapped
            from a weight-cache daemon, ``--load-format ipc_cache``: seconds), or
            ``"startup_plan"`` (a persisted startup plan skipped memory profiling); the startup
            history keeps each kind's starts apart (``eta.same_kind``).
        sleeping_since: when it fell asleep (log time), ``None`` while awake.
        sleep_freed_bytes, sleep_kept_bytes: GPU memory its last sleep freed and kept in use.
        fall_asleep_seconds, wake_up_seconds: how long its last sleep and wake-up took.
        sleeps: times it fell asleep.
        weight_cache_socket: where the weight-cache daemon serves (a Unix socket path).
        weight_cache_bytes: GPU memory the daemon's model holds (allocated, bytes).
        weight_cache_tensors: tensors a serve unit mapped from the daemon.
        startup_plan_path: where a startup plan was saved.
        watchdog_dump_path, watchdog_reason, watchdog_dumped_at: vLLM's watchdog dumped the
            stack there, why, and when (``--watchdog-config``): vLLM says it is stuck.
        ready_timeout_seconds: ``VLLM_ENGINE_READY_TIMEOUT_S`` as the unit's lines show it
            (``None``: not shown; vLLM's default is 600 s).
    """

    role: str = "serve"
    startup_kind: str = "full"
    sleeping_since: datetime | None = None
    sleep_freed_bytes: int | None = None
    sleep_kept_bytes: int | None = None
    fall_asleep_seconds: float | None = None
    wake_up_seconds: float | None = None
    sleeps: int = 0
    weight_cache_socket: str | None = None
    weight_cache_bytes: int | None = None
    weight_cache_tensors: int | None = None
    startup_plan_path: str | None = None
    watchdog_dump_path: str | None = None
    watchdog_reason: str | None = None
    watchdog_dumped_at: datetime | None = None
    ready_timeout_seconds: float | None = None


@dataclass(frozen=True, slots=True)
class IncarnationSnapshot:
    """One run of the unit's main process (a systemd invocation, or a restart in text logs).

    ``start_seen`` is True when the log showed the process start (systemd's ``Starting``/
    ``Started`` or vLLM's version banner), not only lines from its middle: only such an
    incarnation's phase durations are whole.
    """

    id: str | None
    started_at: datetime | None
    ended_at: datetime | None
    phases: tuple[PhaseEntry, ...]
    phase: Phase
    furthest_phase: Phase
    outcome: Outcome
    crash: CrashInfo | None
    pids: tuple[int, ...]
    benign_errors: int
    records: int
    last_record_at: datetime | None
    last_progress_at: datetime | None
    vllm_version: str | None = None
    model: str | None = None
    tensor_parallel_size: int | None = None
    progress: Progress = field(default_factory=Progress)
    api_url: str | None = None  # where its API server listens, from its logs (health.py)
    benign_lines: tuple[str, ...] = ()  # the first few ERROR lines matched as benign (bodies)
    start_seen: bool = False
    phase_ended_at: datetime | None = None  # a line said the current phase ended then
    modes: RuntimeModes = field(default_factory=RuntimeModes)  # sleep, weight cache, … (vllm2026)

    @property
    def phase_entered_at(self) -> datetime | None:
        """When the current phase began."""
        return self.phases[-1].entered_at if self.phases else self.started_at


class EtaBasis(StrEnum):
    """What a startup ETA rests on (the ``basis`` label value)."""

    VLLM = "vllm"  # vLLM's own progress: tqdm's remaining time, or the measured shard rate
    HISTORY = "history"  # the unit's recent starts (same model, else any model)
    BOTH = "both"  # vLLM's progress for the current phase, history for the phases to come


@dataclass(frozen=True, slots=True)
class StartupRecord:
    """How one incarnation that reached ``ready`` started: the unit's startup history.

    Attributes:
        started_at: when it started (log time, UTC).
        ready_at: when it became ready.
        phase_seconds: seconds each startup phase it passed took (phases it skipped are absent).
        invocation_id: its systemd invocation id, if known (with ``started_at``, the identity).
        model, vllm_version, tensor_parallel_size: what it ran, if known.
        startup_kind: how it loaded (``RuntimeModes.startup_kind``): ``full``,
            ``weight_cache`` or ``startup_plan``; starts of one kind are compared only with
            that kind's.
    """

    started_at: datetime
    ready_at: datetime
    phase_seconds: Mapping[Phase, float]
    invocation_id: str | None = None
    model: str | None = None
    vllm_version: str | None = None
    tensor_parallel_size: int | None = None
    startup_kind: str = "full"

    @property
    def startup_seconds(self) -> float:
        """Seconds from start to ready."""
        return max(0.0, (self.ready_at - self.started_at).total_seconds())


@dataclass(frozen=True, slots=True)
class UnitHealth:
    """What the probes of the current incarnation say (``UnitSnapshot.health``).

    Attributes:
        url: the base URL probed.
        up: True when the last probe got 200 from ``/health``, False when it failed, ``None``
            when the host could not be reached (or no probe finished yet).
        error, status: the last probe's error (``PROBE_ERRORS``) and HTTP status.
        last_probe_at: when the last probe started.
        duration_seconds: how long it took.
        last_success_at: when ``/health`` last answered 200.
        ready_at: when it first answered 200 in this incarnation.
        failing_since: when the probes started failing while the unit was ready.
        failures: probes that failed since ``failing_since`` (0 when not failing).
        unhealthy: ready, and failing for at least the unit's ``unhealthy_after_seconds``.
        served_models: model ids from ``/v1/models``.
    """

    url: str
    up: bool | None
    error: str = ""
    status: int | None = None
    last_probe_at: datetime | None = None
    duration_seconds: float | None = None
    last_success_at: datetime | None = None
    ready_at: datetime | None = None
    failing_since: datetime | None = None
    failures: int = 0
    unhealthy: bool = False
    served_models: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class EarlierIncarnations:
    """The incarnations a unit's tracker no longer keeps (it keeps the last few), summed up.

    Attributes:
        count: how many were forgotten.
        by_outcome: how each ended: a crash by its root cause (``killed``,
            ``kv_cache_insufficient``), otherwise its outcome (``stopped``, ``running``),
            most frequent first.
        first_started_at: when the earliest of them started (UTC), if known.
        last_ended_at: when the latest of them ended (UTC), if known.
    """

    count: int = 0
    by_outcome: Mapping[str, int] = field(default_factory=dict)
    first_started_at: datetime | None = None
    last_ended_at: datetime | None = None


@dataclass(frozen=True, slots=True)
class UnitSnapshot:
    """Everything known about one unit on one host.

    Attributes:
        host, unit: identity.
        incarnations: the last few incarnations, oldest first; the last one is current.
        starts_total: incarnations seen since the tracker began (counter).
        crashes_total: settled crashes by cause since the tracker began (counter).
        records_by_level: log lines by vLLM level (``debug`` … ``critical``, ``none``).
        benign_errors_total: ERROR lines matched as benign (counter).
        duplicates_total: records ignored because their cursor was already applied.
        last_crash: the newest crash and its root cause, if any.
        counted_crashes: the last crashes counted into ``crashes_total``, oldest first (at
            most 16): what each one was when it was counted.
        phase_durations: seconds each startup phase took in the latest incarnation that
            passed it.
        startup_duration_seconds: start → ready of the latest incarnation that became ready.
        gpu_memory_used_bytes: bytes held by the unit's processes per GPU index (daemon).
        gpu_memory_held_by_others_at_start: per invocation id of the last incarnations, the
            bytes other processes held on each GPU the incarnation then used, as the GPU
            collector read them before it loaded anything (daemon; the crash hints' evidence
            of a GPU already in use).
        last_gpu_growth_at: when that memory last grew by the stall threshold (daemon).
        stalled: the stall rule's verdict at snapshot time (daemon).
        health: what the ``/health`` probes of the current incarnation say (daemon; ``None``
            when it is not probed).
        ready_source: what says the unit is ready: ``"log"`` (its own lines),
            ``"health_probe"`` (``/health`` answered while the logs lag), ``None`` (not
            ready, or not probed: see ``health.with_probe_readiness``).
        recent_starts: log times of the latest incarnation starts, oldest first (at most
            ``tracker.RECENT_EVENTS_KEPT``; history included, unlike ``starts_total``).
        recent_crashes: log times of the latest settled crashes, oldest first (same bound).
        slow: the current startup phase has lasted longer than the slow rule allows against
            its usual duration for this unit and model (``stall.is_slow``); never together
            with ``stalled`` (daemon, replay).
        usual_phase_seconds: the usual duration of the current startup phase for this unit
            and model (median of recent starts that passed it), ``None`` without history.
        eta_seconds: estimated seconds until ready at snapshot time (``eta.estimate_ready``);
            ``None`` when there is no basis (never a made-up number), when the unit is not
            starting, or while it is stalled.
        expected_ready_at: snapshot time plus ``eta_seconds``.
        eta_basis: what the estimate rests on (``vllm``, ``history``, ``both``).
        eta_overdue_seconds: how long ago the estimate ran out, when it did (then
            ``eta_seconds`` and ``expected_ready_at`` are ``None``: never "ready in 0 s").
        unit_name_known: the name came from the journal, systemd's own lines or the user;
            False for plain text that named no unit (replay's placeholder name): the hints'
            commands then say ``<unit>`` for the operator to fill.
        stall_reason: why ``stalled``: ``"no_progress"`` (the stall rule) or
            ``"vllm_watchdog"`` (vLLM's own watchdog dumped the stack, ``RuntimeModes``).
        will_time_out: the ETA lies past the engine's ready timeout
            (``VLLM_ENGINE_READY_TIMEOUT_S``, ``ready_timeout_seconds``, counted from the
            start): vLLM will give up first (``eta.will_time_out``).
        ready_timeout_seconds: the ready timeout that applies (the unit's, else 600).
        ready_timeout_remaining_seconds: seconds left before it runs out (never below 0).
        log_times_local: its times are plain text's as printed (replay of text): the host's
            local time read as if UTC, the year assumed where the stamps carry none; False for
            the journal's real timestamps.
    """

    host: str | None
    unit: str
    incarnations: tuple[IncarnationSnapshot, ...]
    starts_total: int = 0
    crashes_total: Mapping[CrashCause, int] = field(default_factory=dict)
    records_by_level: Mapping[str, int] = field(default_factory=dict)
    benign_errors_total: int = 0
    duplicates_total: int = 0
    last_crash: CrashInfo | None = None
    counted_crashes: tuple[CrashInfo, ...] = ()
    phase_durations: Mapping[Phase, float] = field(default_factory=dict)
    startup_duration_seconds: float | None = None
    gpu_memory_used_bytes: Mapping[int, int] = field(default_factory=dict)
    gpu_memory_held_by_others_at_start: Mapping[str, Mapping[int, int]] = field(
        default_factory=dict
    )
    last_gpu_growth_at: datetime | None = None
    stalled: bool = False
    health: UnitHealth | None = None
    ready_source: str | None = None
    recent_starts: tuple[datetime, ...] = ()
    recent_crashes: tuple[datetime, ...] = ()
    slow: bool = False
    usual_phase_seconds: float | None = None
    eta_seconds: float | None = None
    expected_ready_at: datetime | None = None
    eta_basis: EtaBasis | None = None
    eta_overdue_seconds: float | None = None
    unit_name_known: bool = True
    log_times_local: bool = False
    earlier: EarlierIncarnations = field(default_factory=EarlierIncarnations)
    # vLLM 2026 states (vllm2026): why it is stalled, and the engine ready timeout's verdict
    stall_reason: str | None = None
    will_time_out: bool = False
    ready_timeout_seconds: float | None = None
    ready_timeout_remaining_seconds: float | None = None

    @property
    def current(self) -> IncarnationSnapshot | None:
        """The newest incarnation, or ``None`` before the first record."""
        return self.incarnations[-1] if self.incarnations else None

    @property
    def last_progress_at(self) -> datetime | None:
        """The later of the last non-heartbeat log record and the last GPU memory growth."""
        current = self.current
        log = current.last_progress_at if current else None
        gpu = self.last_gpu_growth_at
        if log is None or (gpu is not None and gpu > log):
            return gpu
        return log


@dataclass(frozen=True, slots=True)
class GpuDevice:
    """One GPU as NVML or nvidia-smi reports it."""

    index: int
    uuid: str
    name: str
    memory_used_bytes: int
    memory_total_bytes: int


@dataclass(frozen=True, slots=True)
class GpuProcess:
    """GPU memory one process holds on one GPU."""

    gpu_uuid: str
    pid: int
    used_memory_bytes: int


@dataclass(frozen=True, slots=True)
class GpuProcessUsage:
    """GPU memory one process holds on one GPU, with the unit it belongs to when known.

    Attributes:
        pid: the process id (as the GPU collector sees it).
        gpu: the GPU's index.
        used_memory_bytes: bytes it holds there.
        unit: the systemd unit of the process (from its cgroup or the journal), ``None`` when
            unknown (a process outside any unit, or one the collector could not place).
    """

    pid: int
    gpu: int
    used_memory_bytes: int
    unit: str | None = None


@dataclass(frozen=True, slots=True)
class GpuReading:
    """One poll of a host's GPUs (``at`` is the poll time, UTC)."""

    devices: tuple[GpuDevice, ...]
    processes: tuple[GpuProcess, ...]
    at: datetime


@dataclass(frozen=True, slots=True)
class CollectorState:
    """Health of one collector (``journal`` or ``gpu``) of one host.

    Attributes:
        up: True while the last attempt worked.
        since: when ``up`` last changed.
        reason: why it is down, from a bounded set (``ssh_connect_failed``,
            ``NVMLError_LibraryNotFound``…); ``""`` when up.
        reconnects_total: restarts after a failure (counter).
    """

    up: bool
    since: datetime | None = None
    reason: str = ""
    reconnects_total: int = 0


@dataclass(frozen=True, slots=True)
class HostSnapshot:
    """One host: its units, its GPUs and its collectors.

    ``saved_counters``: when set (the daemon), the counters of each unit as the cursor store
    last saved them, which ``/metrics`` shows instead of the units' own (a unit missing there
    has counted nothing that was saved yet): a restarted daemon goes on from exactly these.
    """

    host: str
    units: tuple[UnitSnapshot, ...]
    collectors: Mapping[str, CollectorState] = field(default_factory=dict)
    gpus: tuple[GpuDevice, ...] = ()
    records_skipped: Mapping[str, int] = field(default_factory=dict)
    gpu_processes: tuple[GpuProcessUsage, ...] = ()  # the latest reading's processes, placed
    saved_counters: Mapping[str, UnitCounters] | None = None


@dataclass(frozen=True, slots=True)
class SentinelState:
    """The daemon's own state: config reloads, and the saving of cursors and counters.

    Attributes:
        config_reloads: reloads by result (``success``: applied; ``failure``: refused, the
            running config kept).
        cursor_save_failures_total: writes of the state directory that failed.
        cursor_saved_at: when cursors and counters were last written (wall clock), if ever.
    """

    config_reloads: Mapping[str, int] = field(default_factory=dict)
    cursor_save_failures_total: int = 0
    cursor_saved_at: datetime | None = None


@dataclass(frozen=True, slots=True)
class Snapshot:
    """What the daemon knows at ``at``: every host (the exporter renders this), and the
    daemon's own state (``None`` outside the daemon: replay, tests)."""

    hosts: tuple[HostSnapshot, ...]
    at: datetime
    sentinel: SentinelState | None = None
