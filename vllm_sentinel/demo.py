"""``vllm-sentinel demo``: real-shaped incidents played through the real engine (edge).

Three bundled incidents (``vllm_sentinel/incidents/*.jsonl``: ``journalctl -o json`` lines
built from real logs by ``scripts/build-demo-data.py``) play at once on host ``demo-gpu-01``,
accelerated, in a loop:

* ``vllm-kimi-k25.service`` — TP=8 Kimi-K2.5: a flashinfer version mismatch crashes the first
  start, systemd restarts it, the second start loads for nine minutes and becomes ready. Its
  earlier good starts (``KIMI_HISTORY``) are in the startup history from the beginning, so its
  ETA covers the whole start (vLLM's bar for the current phase, history for the phases after
  it) rather than only the end of the current bar;
* ``vllm-qwen-14b.service`` — the KV cache is too small for max_model_len; the restart works;
* ``vllm-llama-405b.service`` — shard loading stops printing at 33 %: the stall rule fires.
  Its earlier starts (``LLAMA_HISTORY``) are in the startup history from the beginning, so its
  ETA counts down while the shards come, it turns slower than usual as the load outlasts its
  usual duration, then stalled.

The readiness probe runs for real (``probe.HealthProber`` over TCP) against a stand-in for each
unit's vLLM ``/health`` on 127.0.0.1 (``FakeHealthEndpoints``): 503 until the unit's logs say
ready, then 200 — except Qwen's, whose engine "dies" a little after it became ready: its
``/health`` answers 503 again while its logs still say ready, and the unit turns ``unhealthy``.

Each record's time is moved to "now" (scaled by the speed-up), and so are the times a tqdm bar
prints (``[elapsed<remaining``), so that vLLM's own remaining time matches the demo's clock
(a remaining time is rounded up to whole seconds, as a bar with time left never reads
``00:00`` after the speed-up);
invocation ids are renewed on every loop, and the records go through ``JournalJsonDecoder``
into the Monitor's queue exactly like a followed journal. Each start that becomes ready joins
its unit's history (in memory), so the next loop's starts have an ETA from history too. A
synthetic GPU sample per loaded unit makes the memory panels move.
"""

from __future__ import annotations

import asyncio
import hashlib
import math
import re
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from importlib import resources
from types import MappingProxyType

import h11
import orjson

from vllm_sentinel.engine.catalog.phases import Outcome, Phase
from vllm_sentinel.engine.decode.journal_json import JournalJsonDecoder
from vllm_sentinel.engine.health import ProbePolicy, ProbeSettings
from vllm_sentinel.engine.report import status_document
from vllm_sentinel.engine.snapshot import (
    CollectorState,
    GpuDevice,
    GpuProcess,
    GpuReading,
    Snapshot,
    StartupRecord,
)
from vllm_sentinel.monitor import GpuSample, HostPlan, Monitor, Tick
from vllm_sentinel.serve.exporter import SentinelCollector, make_registry
from vllm_sentinel.serve.http import make_app, start_http_server
from vllm_sentinel.sources.health_probe import HealthProber
from vllm_sentinel.sources.journal import JournalBatch
from vllm_sentinel.sources.transport import LocalTransport
from vllm_sentinel.state.history_store import HistoryStore

__all__ = [
    "DEMO_HOST",
    "INCIDENTS",
    "KIMI_HISTORY",
    "LLAMA_HISTORY",
    "DemoIncident",
    "FakeHealthEndpoints",
    "demo_gpu_sample",
    "demo_history",
    "play_incident",
    "run_demo",
]

DEMO_HOST = "demo-gpu-01"
_DEMO_GPUS = 13
_GPUS_OF_SLOT = (range(0, 8), range(8, 9), range(9, 13))  # kimi TP=8, qwen TP=1, llama TP=4
_GIB = 1 << 30


@dataclass(frozen=True, slots=True)
class DemoIncident:
    """One bundled incident: its file, speed-up, and pause before it plays again."""

    unit: str
    file: str
    speed: float
    pause_seconds: float


INCIDENTS: tuple[DemoIncident, ...] = (
    DemoIncident("vllm-kimi-k25.service", "kimi-k25-flashinfer-restart.jsonl", 12.0, 45.0),
    DemoIncident("vllm-qwen-14b.service", "qwen-kv-cache-too-small.jsonl", 2.0, 60.0),
    DemoIncident("vllm-llama-405b.service", "llama-stalled-load.jsonl", 30.0, 30.0),
)


LLAMA_HISTORY: tuple[Mapping[Phase, float], ...] = (
    MappingProxyType(
        {
            Phase.STARTING: 4.0,
            Phase.INITIALIZING: 26.0,
            Phase.LOADING_WEIGHTS: 570.0,
            Phase.COMPILING: 95.0,
            Phase.PROFILING_KV_CACHE: 22.0,
            Phase.CAPTURING_CUDA_GRAPHS: 48.0,
            Phase.STARTING_API_SERVER: 9.0,
        }
    ),
    MappingProxyType(
        {
            Phase.STARTING: 5.0,
            Phase.INITIALIZING: 25.0,
            Phase.LOADING_WEIGHTS: 600.0,
            Phase.COMPILING: 90.0,
            Phase.PROFILING_KV_CACHE: 20.0,
            Phase.CAPTURING_CUDA_GRAPHS: 50.0,
            Phase.STARTING_API_SERVER: 10.0,
        }
    ),
    MappingProxyType(
        {
            Phase.STARTING: 4.0,
            Phase.INITIALIZING: 27.0,
            Phase.LOADING_WEIGHTS: 630.0,
            Phase.COMPILING: 100.0,
            Phase.PROFILING_KV_CACHE: 21.0,
            Phase.CAPTURING_CUDA_GRAPHS: 52.0,
            Phase.STARTING_API_SERVER: 11.0,
        }
    ),
)
"""Three earlier starts of the Llama unit, in the incident's own seconds (before the speed-up):
about ten minutes of loading each. The stalled start is slower (30 s a shard) before it stops."""

KIMI_HISTORY: tuple[Mapping[Phase, float], ...] = tuple(
    MappingProxyType(
        {
            Phase.STARTING: 13.0,
            Phase.INITIALIZING: 8.0,
            Phase.LOADING_WEIGHTS: load,
            Phase.COMPILING: 22.0,
            Phase.PROFILING_KV_CACHE: 7.0,
            Phase.CAPTURING_CUDA_GRAPHS: graphs,
            Phase.STARTING_API_SERVER: 20.0,
        }
    )
    for load, graphs in ((540.0, 64.0), (560.0, 66.0), (575.0, 68.0))
)
"""Three earlier good starts of the Kimi unit, in the incident's own seconds: the phase
durations of the incident's own second start (``vllm-sentinel replay`` of its file), the load
a little faster or slower."""

_LLAMA_MODEL = "meta-llama/Llama-3.1-405B-Instruct-FP8"
_KIMI_MODEL = "/shared/kimi-k2.5-nvfp4"
_HISTORIES: tuple[tuple[str, tuple[Mapping[Phase, float], ...], str, str, int], ...] = (
    ("llama", LLAMA_HISTORY, _LLAMA_MODEL, "0.11.0", 4),
    ("kimi", KIMI_HISTORY, _KIMI_MODEL, "0.17.1", 8),
)
"""(incident file prefix, earlier starts, model, vLLM version, tensor parallel size)."""
_TQDM_TIMES = re.compile(r"\[(\d+(?::\d\d){1,2})<(\d+(?::\d\d){1,2})")
_SLOW_FLOOR_SECONDS = 2.0  # the slow rule's floor in real seconds at speed 1 (the default is 60)


def _load(name: str) -> list[dict[str, object]]:
    text = resources.files("vllm_sentinel").joinpath("incidents", name).read_bytes()
    return [orjson.loads(line) for line in text.splitlines() if line.strip()]


def _renew(invocation: object, loop: int) -> str:
    return hashlib.md5(f"{invocation}:{loop}".encode(), usedforsecurity=False).hexdigest()


def _interval(text: str, speed: float, *, up: bool = False) -> str:
    """tqdm's ``MM:SS`` (or ``H:MM:SS``) divided by ``speed``, rounded (``up``: rounded up, so
    that time left stays above zero)."""
    seconds = 0
    for part in text.split(":"):
        seconds = seconds * 60 + int(part)
    scaled = seconds / speed
    minutes, secs = divmod(math.ceil(scaled) if up else round(scaled), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}:{minutes:02d}:{secs:02d}" if hours else f"{minutes:02d}:{secs:02d}"


def _scale_bar(message: str, speed: float) -> str:
    """A tqdm bar's ``[elapsed<remaining`` divided by the speed-up, like the record times (the
    remaining time rounded up: 5 s left at a speed-up of 12 is ``00:01``, not ``00:00``)."""
    return _TQDM_TIMES.sub(
        lambda found: f"[{_interval(found[1], speed)}<{_interval(found[2], speed, up=True)}",
        message,
    )


def demo_history(now: datetime, speed: float) -> HistoryStore:
    """The demo's startup history (in memory): ``LLAMA_HISTORY`` and ``KIMI_HISTORY`` at their
    incident's speed times ``speed``, days ago."""
    store = HistoryStore(None)
    for prefix, history, model, version, tensor_parallel in _HISTORIES:
        unit = next(item for item in INCIDENTS if item.file.startswith(prefix))
        scale = unit.speed * speed
        for days, phases in enumerate(history, 1):
            started = now - timedelta(days=len(history) + 1 - days)
            seconds = {phase: value / scale for phase, value in phases.items()}
            store.add(
                DEMO_HOST,
                unit.unit,
                StartupRecord(
                    started_at=started,
                    ready_at=started + timedelta(seconds=sum(seconds.values())),
                    phase_seconds=seconds,
                    invocation_id=_renew(unit.unit, -days),
                    model=model,
                    vllm_version=version,
                    tensor_parallel_size=tensor_parallel,
                ),
            )
    return store


async def play_incident(
    incident: DemoIncident,
    emit: Callable[[JournalBatch], Awaitable[None]],
    *,
    clock: Callable[[], datetime] = lambda: datetime.now(UTC),
    sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    loops: int | None = None,
) -> None:
    """Play ``incident`` (forever unless ``loops``), emitting one batch per record."""
    entries = _load(incident.file)
    loop = 0
    while loops is None or loop < loops:
        loop += 1
        decoder = JournalJsonDecoder(DEMO_HOST)
        first = int(str(entries[0]["__REALTIME_TIMESTAMP"]))
        started = clock()
        for entry in entries:
            offset = (int(str(entry["__REALTIME_TIMESTAMP"])) - first) / 1e6 / incident.speed
            due = started + timedelta(seconds=offset)
            delay = (due - clock()).total_seconds()
            if delay > 0:
                await sleep(delay)
            rewritten = dict(entry)
            rewritten["__REALTIME_TIMESTAMP"] = str(int(due.timestamp() * 1e6))
            for key in ("_SYSTEMD_INVOCATION_ID", "INVOCATION_ID"):
                if key in rewritten:
                    rewritten[key] = _renew(rewritten[key], loop)
            for key in ("UNIT", "_SYSTEMD_UNIT"):
                if rewritten.get(key) not in (None, "init.scope"):
                    rewritten[key] = incident.unit
            rewritten.pop("__CURSOR", None)
            record = decoder.decode_entry(rewritten)
            if record is not None:
                if "<" in record.message:
                    record = record._replace(message=_scale_bar(record.message, incident.speed))
                await emit(JournalBatch(DEMO_HOST, (record,), None))
        await sleep(incident.pause_seconds)
        await _stop_unit(incident, entries, loop, decoder, emit, clock)


async def _stop_unit(
    incident: DemoIncident,
    entries: list[dict[str, object]],
    loop: int,
    decoder: JournalJsonDecoder,
    emit: Callable[[JournalBatch], Awaitable[None]],
    clock: Callable[[], datetime],
) -> None:
    """End the loop as an operator would: systemd stops the unit before it plays again."""
    invocation = next(
        (
            entry.get("_SYSTEMD_INVOCATION_ID") or entry.get("INVOCATION_ID")
            for entry in reversed(entries)
            if entry.get("_SYSTEMD_INVOCATION_ID") or entry.get("INVOCATION_ID")
        ),
        None,
    )
    if invocation is None:
        return
    stop = (f"Stopping {incident.unit} - demo...", f"{incident.unit}: Deactivated successfully.")
    for message in stop:
        entry: dict[str, object] = {
            "__REALTIME_TIMESTAMP": str(int(clock().timestamp() * 1e6)),
            "MESSAGE": message,
            "_PID": "1",
            "SYSLOG_IDENTIFIER": "systemd",
            "_SYSTEMD_UNIT": "init.scope",
            "UNIT": incident.unit,
            "INVOCATION_ID": _renew(invocation, loop),
        }
        record = decoder.decode_entry(entry)
        if record is not None:
            await emit(JournalBatch(DEMO_HOST, (record,), None))


def demo_gpu_sample(monitor: Monitor, now: datetime, units: Sequence[str]) -> GpuSample:
    """A synthetic reading of the demo host's 13 H200s: each loading or ready unit holds
    memory on its own GPUs (Kimi TP=8, Qwen TP=1, Llama TP=4)."""
    devices = []
    processes = []
    held: dict[int, int] = {}
    for slot, unit in enumerate(units):
        snapshot = next(
            (item for host in monitor.latest.hosts for item in host.units if item.unit == unit),
            None,
        )
        current = snapshot.current if snapshot else None
        if current is None or current.outcome in (Outcome.CRASHED, Outcome.STOPPED):
            continue
        ratio = current.progress.weights_loaded_ratio or 0.0
        if current.phase not in (Phase.STARTING, Phase.INITIALIZING, Phase.LOADING_WEIGHTS):
            ratio = 1.0
        per_gpu = int((2 + 108 * ratio) * _GIB)
        gpus = _GPUS_OF_SLOT[slot % len(_GPUS_OF_SLOT)]
        pids = list(current.pids) or [1]
        for index in gpus:
            pid = pids[min(len(pids) - 1, 1 + index if len(pids) > 1 else 0)]
            processes.append(GpuProcess(f"GPU-demo-{index}", pid, per_gpu))
            held[index] = held.get(index, 0) + per_gpu
    for index in range(_DEMO_GPUS):
        devices.append(
            GpuDevice(
                index,
                f"GPU-demo-{index}",
                "NVIDIA H200",
                held.get(index, 0) + _GIB // 2,
                141 * _GIB,
            )
        )
    return GpuSample(DEMO_HOST, GpuReading(tuple(devices), tuple(processes), now))


_DEMO_THRESHOLDS = MappingProxyType(
    {
        Phase.STARTING: 60.0,
        Phase.INITIALIZING: 60.0,
        Phase.LOADING_WEIGHTS: 10.0,  # seconds of real time: the stalled load shows within the loop
        Phase.COMPILING: 60.0,
        Phase.PROFILING_KV_CACHE: 60.0,
        Phase.CAPTURING_CUDA_GRAPHS: 60.0,
        Phase.STARTING_API_SERVER: 60.0,
    }
)
"""Stall thresholds of the demo in real seconds at ``speed=1`` (divided by the speed)."""


_ENGINE_DIES_AFTER_SECONDS = 20.0
"""Real seconds (at speed 1) after Qwen's ready line when its fake /health turns to 503."""


class FakeHealthEndpoints:
    """A stand-in for each demo unit's vLLM ``/health``, one port per unit on 127.0.0.1.

    ``/health`` answers 200 while the unit's logs say ready (503 before, as vLLM's socket is
    bound during the load), ``/v1/models`` the unit's model; ``dies`` lists units whose
    engine dies ``dies_after_seconds`` after they became ready (503 again, logs unchanged).
    """

    def __init__(
        self,
        get_snapshot: Callable[[], Snapshot],
        units: Sequence[str],
        *,
        dies: Sequence[str] = (),
        dies_after_seconds: float = _ENGINE_DIES_AFTER_SECONDS,
    ) -> None:
        self._get_snapshot = get_snapshot
        self._units = tuple(units)
        self._dies = frozenset(dies)
        self._dies_after = dies_after_seconds
        self._servers: list[asyncio.Server] = []
        self._open: set[asyncio.StreamWriter] = set()
        self.ports: dict[str, int] = {}

    async def start(self) -> None:
        """Listen on one free port per unit."""
        for unit in self._units:
            server = await asyncio.start_server(
                lambda reader, writer, unit=unit: self._serve(unit, reader, writer),  # type: ignore[misc]
                "127.0.0.1",
                0,
            )
            self._servers.append(server)
            self.ports[unit] = int(server.sockets[0].getsockname()[1])

    async def close(self) -> None:
        """Stop listening and close the connections still open (since Python 3.12.1
        ``wait_closed`` waits for every connection: one left open would hold the stop)."""
        for server in self._servers:
            server.close()
        for writer in list(self._open):
            writer.transport.abort()
        for server in self._servers:
            await server.wait_closed()

    def _answer(self, unit: str, path: str) -> tuple[int, bytes]:
        snapshot = next(
            (
                item
                for host in self._get_snapshot().hosts
                for item in host.units
                if item.unit == unit
            ),
            None,
        )
        current = snapshot.current if snapshot is not None else None
        ready_at = None
        if current is not None and snapshot is not None and snapshot.ready_source == "log":
            ready_at = next((e.entered_at for e in current.phases if e.phase is Phase.READY), None)
        if ready_at is None:
            return 503, b""
        if unit in self._dies:
            alive = (datetime.now(UTC) - ready_at).total_seconds()
            if alive > self._dies_after:
                return 503, b""
        if path == "/v1/models":
            model = current.model if current is not None else None
            data = [{"id": model, "object": "model", "root": model}] if model else []
            return 200, orjson.dumps({"object": "list", "data": data})
        return (200, b"") if path == "/health" else (404, b"")

    async def _serve(
        self, unit: str, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        connection = h11.Connection(h11.SERVER)
        self._open.add(writer)
        try:
            while True:
                event = connection.next_event()
                if event is h11.NEED_DATA:
                    connection.receive_data(await reader.read(65536))
                    continue
                if isinstance(event, h11.Request):
                    status, body = self._answer(unit, event.target.decode("ascii", "replace"))
                    headers = [("Content-Length", str(len(body))), ("Connection", "close")]
                    writer.write(connection.send(h11.Response(status_code=status, headers=headers)))
                    writer.write(connection.send(h11.Data(data=body)) or b"")
                    writer.write(connection.send(h11.EndOfMessage()) or b"")
                    await writer.drain()
                    break
                if isinstance(event, h11.ConnectionClosed):
                    break
        except (h11.ProtocolError, OSError):
            pass
        finally:
            self._open.discard(writer)
            writer.close()


def _scaled(thresholds: Mapping[Phase, float], speed: float) -> Mapping[Phase, float]:
    return MappingProxyType({phase: seconds / speed for phase, seconds in thresholds.items()})


async def run_demo(
    listen_host: str,
    listen_port: int,
    *,
    speed: float = 1.0,
    duration_seconds: float | None = None,
    announce: Callable[[str], None] = print,
    command: str = "vllm-sentinel",
) -> None:
    """Serve the exporter while the incidents play, until cancelled or ``duration_seconds``.

    Args:
        listen_host, listen_port: where to serve ``/metrics`` and ``/status`` (port 0: any).
        speed: extra speed-up on top of each incident's own; the demo's stall thresholds
            (10 s of real time for ``loading_weights`` at speed 1), its slow rule's floor
            (2 s) and the Llama unit's history shrink by the same factor.
        duration_seconds: stop after this long (``None``: until cancelled).
        announce: where the "try this" lines go.
        command: how the user runs vllm-sentinel (``.venv/bin/vllm-sentinel``), for those lines.

    Raises:
        OSError: the address cannot be bound.
    """

    units = [incident.unit for incident in INCIDENTS]
    endpoints = FakeHealthEndpoints(
        lambda: monitor.latest,
        units,
        dies=("vllm-qwen-14b.service",),
        dies_after_seconds=_ENGINE_DIES_AFTER_SECONDS / speed,
    )
    await endpoints.start()
    probing = ProbeSettings(
        enabled=True,
        interval_seconds=max(0.5, 2.0 / speed),
        timeout_seconds=1.0,
        unhealthy_after_seconds=10.0 / speed,
    )
    policy = ProbePolicy(
        probing,
        tuple((unit, replace(probing, port=port)) for unit, port in endpoints.ports.items()),
    )
    plan = HostPlan(
        DEMO_HOST,
        ("vllm-*.service",),
        _scaled(_DEMO_THRESHOLDS, speed),
        256 << 20,
        policy,
        slow_floor_seconds=_SLOW_FLOOR_SECONDS / speed,
    )
    monitor = Monitor([plan], settle_seconds=5.0, history=demo_history(datetime.now(UTC), speed))
    up = CollectorState(True, datetime.now(UTC), "", 0)
    monitor.register_collector(DEMO_HOST, "journal", lambda: up)
    monitor.register_collector(DEMO_HOST, "gpu", lambda: up)
    monitor.publish()
    app = make_app(
        make_registry(SentinelCollector(lambda: monitor.latest)),
        lambda: status_document(monitor.latest),
        snapshot=lambda: monitor.latest,
    )
    try:
        server = start_http_server(listen_host, listen_port, app)
    except OSError:
        await endpoints.close()
        raise
    url = f"http://{server.host}:{server.port}"
    announce(f"vllm-sentinel demo: playing {len(INCIDENTS)} real-shaped incidents on {DEMO_HOST}")
    wanted = (
        r"^vllm_sentinel_unit_(phase\{.*\} 1|crashes_total\{.*\} [1-9]|stalled\{|"
        r"slow\{.*\} 1|startup_eta_seconds)"
    )
    announce(f"  page:    {url}/   (open it in a browser: hosts, units, crashes with fixes)")
    announce(f"  units:   {command} status --url {url}")
    announce(f"  all:     {command} status --url {url} --json")
    announce(f"  metrics: curl -s {url}/metrics | grep -E '{wanted}'")
    kimi = f"{url}/units/{DEMO_HOST}/vllm-kimi-k25.service"
    announce(f"  startup: curl -s {kimi}   (200 once ready; 503 starting, 500 crashed)")
    announce(f"           until curl -fs -o /dev/null {kimi}; do sleep 2; done; echo ready")
    announce(
        f"  /health: curl -s {url}/metrics | grep -E '^vllm_sentinel_unit_(health_up|unhealthy)'"
    )
    announce("  Ctrl-C stops.")
    queue: asyncio.Queue[object] = asyncio.Queue()

    async def emit(batch: JournalBatch) -> None:
        await queue.put(batch)

    async def tick() -> None:
        while True:
            await asyncio.sleep(1.0)
            now = datetime.now(UTC)
            await queue.put(Tick(now))
            await queue.put(demo_gpu_sample(monitor, now, units))

    try:
        async with asyncio.timeout(duration_seconds):
            async with asyncio.TaskGroup() as group:
                group.create_task(monitor.run(queue))  # type: ignore[arg-type]
                group.create_task(tick())
                prober = HealthProber(
                    DEMO_HOST, LocalTransport(DEMO_HOST), policy, lambda: monitor.latest
                )
                group.create_task(prober.run(queue.put))
                for incident in INCIDENTS:
                    scaled = DemoIncident(
                        incident.unit,
                        incident.file,
                        incident.speed * speed,
                        incident.pause_seconds / speed,
                    )
                    group.create_task(play_incident(scaled, emit))
    except TimeoutError:
        pass
    finally:
        await asyncio.to_thread(server.shutdown)
        await endpoints.close()
