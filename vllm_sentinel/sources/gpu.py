"""Poll GPU memory per device and per process (edge: asyncio).

* ``NvmlReader`` asks NVML on this machine (pynvml, every call through ``asyncio.to_thread``).
  One GPU that fails (off the bus, access refused) is left out of the reading, counted and
  logged once per state change (``gpu_device_skipped`` / ``gpu_device_recovered``); the
  others are still read and the collector stays up.
* ``NvidiaSmiStreamReader`` (what the daemon uses) keeps two ``nvidia-smi … -lms N``
  streams open through a ``Transport`` (a remote host over SSH: one channel each on the
  host's connection, or this machine), and parses their rounds incrementally with
  ``nvidia_smi.SmiStreamDecoder`` (core): no process and no channel per poll. A stream that
  dies or goes silent fails the read; the poller's backoff then restarts both.
* ``NvidiaSmiReader`` runs the two ``nvidia-smi`` CSV queries once per read (a process and
  a channel each), for one-off reads.
* ``CgroupReader`` reads ``/proc/PID/cgroup`` for the PIDs a reading shows, locally or
  through a transport in one command per batch, so that ``attribution`` (core) can name
  each process's unit; ``units_of`` reads each PID once and keeps its unit while the PID
  stays in the readings.
* ``GpuPoller`` calls a reader every ``interval_seconds`` (or as fast as a stream reader
  hands out rounds) and hands each ``GpuReading`` to ``emit``. A failing read sets its
  ``CollectorState`` down with a bounded reason, logs ``gpu_collector_down`` once, and is
  retried with capped exponential backoff and jitter (tenacity); the first good read after
  that logs ``gpu_collector_up`` once. A host without NVIDIA driver ends down with reason
  ``NVMLError_LibraryNotFound`` and the rest of the daemon carries on.

Nothing here reads the wall clock or sleeps directly: ``now`` and ``sleep`` are injected.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import random as random_module
import re
import threading
from collections import Counter
from collections.abc import Awaitable, Callable, Iterable, Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal, Protocol

import structlog
from tenacity import AsyncRetrying, RetryCallState, retry_if_exception_type
from tenacity.wait import wait_base

from vllm_sentinel.engine.snapshot import CollectorState, GpuDevice, GpuProcess, GpuReading
from vllm_sentinel.errors import GpuCollectorError, TransportError
from vllm_sentinel.sources.attribution import parse_cgroup
from vllm_sentinel.sources.nvidia_smi import (
    QUERY_APPS_ARGV,
    QUERY_GPUS_ARGV,
    ParsedRows,
    SmiStreamDecoder,
    parse_compute_apps,
    parse_gpus,
    stream_argv,
)
from vllm_sentinel.sources.transport import Transport

__all__ = [
    "REASON_INTERNAL_ERROR",
    "REASON_STARTING",
    "BackoffWait",
    "CgroupReader",
    "GpuPoller",
    "GpuReader",
    "NvidiaSmiReader",
    "NvidiaSmiStreamReader",
    "NvmlReader",
]

REASON_STARTING = "starting"
"""The poller has not finished its first read yet."""
REASON_INTERNAL_ERROR = "internal_error"
"""A read raised something no reader raises on purpose (a bug): logged with its traceback."""

_REASON = re.compile(r"[A-Za-z][A-Za-z0-9_]{0,63}")
_HINTS: Mapping[str, str] = {
    "NVMLError_LibraryNotFound": (
        "libnvidia-ml.so.1 is not installed (no NVIDIA driver on this host): GPU memory is "
        "not collected, everything else keeps working"
    ),
    "NVMLError_DriverNotLoaded": "the NVIDIA kernel driver is not loaded",
    "NVMLError_NoPermission": "NVML refused access: run as a user allowed to use the GPUs",
    "NVMLError_GpuIsLost": (
        "a GPU fell off the bus (dmesg shows an Xid); it is left out until it answers again, "
        "and NVML is re-initialised when no GPU answers"
    ),
}
_LIBRARY_ERRORS = frozenset(
    {
        "NVMLError_Uninitialized",
        "NVMLError_DriverNotLoaded",
        "NVMLError_LibraryNotFound",
        "NVMLError_LibRmVersionMismatch",
        "NVMLError_FunctionNotFound",
    }
)
"""NVML errors about the library or driver, not one GPU: they fail the whole read."""
_log = structlog.get_logger("vllm_sentinel.sources.gpu")


def _utc_now() -> datetime:
    return datetime.now(UTC)


def _error_name(name: str) -> str:
    """``NVMLError_GpuIsLost`` → ``GpuIsLost`` (a bounded set: pynvml's error classes)."""
    return name.removeprefix("NVMLError_")[:64]


class GpuReader(Protocol):
    """Reads every GPU of one host once per call."""

    async def read(self) -> GpuReading:
        """Return one reading; ``GpuCollectorError`` when the GPUs cannot be read."""
        ...

    async def close(self) -> None:
        """Release what the reader holds (NVML, connections are the transport's)."""
        ...

    def skipped(self) -> dict[str, int]:
        """What could not be read so far, by reason (counter values; ``gpu_`` prefixed)."""
        ...


class NvmlReader:
    """GPU memory through NVML on this machine.

    NVML is initialised on the first read and shut down by ``close``. After an NVML error that
    fails the read it is shut down and initialised again on the next read, so a reloaded driver
    or a GPU that came back is picked up. Device memory is ``nvmlDeviceGetMemoryInfo`` version 2
    where the driver has it (``used`` then excludes the driver's reserve, as nvidia-smi does),
    else version 1. A process whose memory NVML cannot give is left out.

    Errors of one GPU do not cost the others: a GPU whose handle, UUID, name or memory NVML
    cannot give (``NVMLError_GpuIsLost``, ``NVMLError_NoPermission`` …) is left out of the
    reading and counted in ``devices_skipped`` by the error's class name; a GPU whose process
    list NVML refuses keeps its memory figures and loses only its processes, counted in
    ``process_lists_skipped``. Each GPU's problem is logged once when it starts or changes
    (``gpu_device_skipped``, a warning) and once when it ends (``gpu_device_recovered``). The
    read fails as a whole (``GpuCollectorError``, the collector goes down) on an error of NVML
    itself (init, the device count, a library or driver error from any call) and when no GPU
    could be read at all.

    Args:
        nvml: the pynvml module, or a fake with the same functions and error classes
            (``import pynvml`` when ``None``).
        host: the host label for the per-GPU log events.
        now: the clock stamping each reading.
    """

    def __init__(
        self,
        nvml: Any = None,
        *,
        host: str = "localhost",
        now: Callable[[], datetime] = _utc_now,
    ) -> None:
        self._nvml: Any = nvml if nvml is not None else importlib.import_module("pynvml")
        self._host = host
        self._now = now
        self._lock = threading.Lock()
        self._initialized = False
        self._memory_v2: bool | None = None
        # GPU index -> (part, reason) of the problem last logged for it
        self._problems: dict[int, tuple[str, str]] = {}
        self.devices_skipped: Counter[str] = Counter()
        self.process_lists_skipped: Counter[str] = Counter()

    async def read(self) -> GpuReading:
        """Read every GPU once (in a worker thread).

        Returns:
            The GPUs that could be read and their compute processes, stamped with ``now``.

        Raises:
            GpuCollectorError: NVML itself failed, or no GPU could be read; the reason is the
                NVML error's class name (``NVMLError_LibraryNotFound``).
        """
        devices, processes = await asyncio.to_thread(self._read_blocking)
        return GpuReading(devices=devices, processes=processes, at=self._now())

    async def close(self) -> None:
        await asyncio.to_thread(self._shutdown_blocking)

    def skipped(self) -> dict[str, int]:
        """GPUs left out of readings (``gpu_device_<NVML error>``) and process lists left out
        (``gpu_processes_<NVML error>``), e.g. ``gpu_device_GpuIsLost``."""
        devices = dict(self.devices_skipped)  # one C-level copy: safe against the NVML thread
        processes = dict(self.process_lists_skipped)
        counts = {f"gpu_device_{_error_name(k)}": v for k, v in devices.items()}
        counts.update({f"gpu_processes_{_error_name(k)}": v for k, v in processes.items()})
        return counts

    def _read_blocking(self) -> tuple[tuple[GpuDevice, ...], tuple[GpuProcess, ...]]:
        nvml = self._nvml
        with self._lock:
            try:
                if not self._initialized:
                    nvml.nvmlInit()
                    self._initialized = True
                return self._query(nvml)
            except nvml.NVMLError as error:
                self._shutdown_locked()
                raise GpuCollectorError(type(error).__name__, str(error)) from error

    def _query(self, nvml: Any) -> tuple[tuple[GpuDevice, ...], tuple[GpuProcess, ...]]:
        devices: list[GpuDevice] = []
        processes: list[GpuProcess] = []
        problems: dict[int, tuple[str, str, str]] = {}  # index -> (part, reason, detail)
        uuids: dict[int, str] = {}
        first_device_error: Exception | None = None
        count = int(nvml.nvmlDeviceGetCount())
        for index in range(count):
            try:
                handle = nvml.nvmlDeviceGetHandleByIndex(index)
                uuid = uuids[index] = _text(nvml.nvmlDeviceGetUUID(handle))
                used, total = self._memory(nvml, handle)
                name = _text(nvml.nvmlDeviceGetName(handle))
            except nvml.NVMLError as error:
                if type(error).__name__ in _LIBRARY_ERRORS:
                    raise
                first_device_error = first_device_error or error
                problems[index] = ("device", type(error).__name__, str(error))
                self.devices_skipped[type(error).__name__] += 1
                continue
            devices.append(
                GpuDevice(
                    index=index,
                    uuid=uuid,
                    name=name,
                    memory_used_bytes=used,
                    memory_total_bytes=total,
                )
            )
            try:
                running = nvml.nvmlDeviceGetComputeRunningProcesses(handle)
            except nvml.NVMLError_NotSupported:
                running = []
            except nvml.NVMLError as error:
                if type(error).__name__ in _LIBRARY_ERRORS:
                    raise
                problems[index] = ("processes", type(error).__name__, str(error))
                self.process_lists_skipped[type(error).__name__] += 1
                running = []
            for info in running:
                used_bytes = getattr(info, "usedGpuMemory", None)
                if used_bytes is None:
                    continue
                processes.append(GpuProcess(uuid, int(info.pid), int(used_bytes)))
        if count and not devices and first_device_error is not None:
            raise first_device_error  # no GPU answered: down, and NVML starts again
        self._log_problem_changes(problems, uuids)
        return tuple(devices), tuple(processes)

    def _log_problem_changes(
        self, problems: Mapping[int, tuple[str, str, str]], uuids: Mapping[int, str]
    ) -> None:
        """Log each GPU whose problem began, changed or ended since the last read."""
        for index, (part, reason, detail) in sorted(problems.items()):
            if self._problems.get(index) == (part, reason):
                continue
            self._problems[index] = (part, reason)
            fields: dict[str, object] = {
                "host": self._host,
                "gpu": index,
                "uuid": uuids.get(index, ""),
                "part": part,
                "reason": reason if _REASON.fullmatch(reason) else "other",
                "detail": detail[:300],
            }
            if reason in _HINTS:
                fields["hint"] = _HINTS[reason]
            _log.warning("gpu_device_skipped", **fields)
        for index in sorted(set(self._problems) - set(problems)):
            part, _reason = self._problems.pop(index)
            _log.info(
                "gpu_device_recovered",
                host=self._host,
                gpu=index,
                uuid=uuids.get(index, ""),
                part=part,
            )

    def _memory(self, nvml: Any, handle: object) -> tuple[int, int]:
        version = getattr(nvml, "nvmlMemory_v2", None)
        if version is not None and self._memory_v2 is not False:
            try:
                memory = nvml.nvmlDeviceGetMemoryInfo(handle, version=version)
            except (
                nvml.NVMLError_FunctionNotFound,
                nvml.NVMLError_NotSupported,
                nvml.NVMLError_ArgumentVersionMismatch,
            ):
                self._memory_v2 = False
            else:
                self._memory_v2 = True
                return int(memory.used), int(memory.total)
        memory = nvml.nvmlDeviceGetMemoryInfo(handle)
        return int(memory.used), int(memory.total)

    def _shutdown_blocking(self) -> None:
        with self._lock:
            self._shutdown_locked()

    def _shutdown_locked(self) -> None:
        if not self._initialized:
            return
        self._initialized = False
        self._problems.clear()  # NVML starts afresh: so does what was logged about each GPU
        try:
            self._nvml.nvmlShutdown()
        except self._nvml.NVMLError:
            _log.debug("nvml_shutdown_failed")


def _text(value: str | bytes) -> str:
    return value.decode("utf-8", errors="replace") if isinstance(value, bytes) else str(value)


class NvidiaSmiReader:
    """GPU memory from ``nvidia-smi`` CSV queries run through a transport.

    A transport failure becomes ``GpuCollectorError`` with the transport's reason
    (``timeout``, ``command_failed`` …). Output lines that do not parse are dropped and
    counted in ``lines_skipped`` by reason.
    """

    def __init__(
        self,
        transport: Transport,
        *,
        timeout_seconds: float = 10.0,
        now: Callable[[], datetime] = _utc_now,
    ) -> None:
        self._transport = transport
        self._timeout = timeout_seconds
        self._now = now
        self.lines_skipped: Counter[str] = Counter()

    async def read(self) -> GpuReading:
        try:
            gpus_output = await self._transport.run(QUERY_GPUS_ARGV, self._timeout)
            apps_output = await self._transport.run(QUERY_APPS_ARGV, self._timeout)
        except TransportError as error:
            raise GpuCollectorError(error.reason, error.detail) from error
        gpus = parse_gpus(gpus_output)
        apps = parse_compute_apps(apps_output)
        self.lines_skipped.update(gpus.skipped)
        self.lines_skipped.update(apps.skipped)
        return GpuReading(devices=gpus.rows, processes=apps.rows, at=self._now())

    async def close(self) -> None:
        return None

    def skipped(self) -> dict[str, int]:
        """nvidia-smi CSV lines that could not be read: ``gpu_line_<reason>``."""
        return {f"gpu_line_{reason}": count for reason, count in self.lines_skipped.items()}


class NvidiaSmiStreamReader:
    """GPU memory from two long-lived ``nvidia-smi --query-… -lms N`` streams (N: the poll
    interval), one for devices and one for compute processes, through a transport.

    The streams are started by the first ``read`` and kept open; each ``read`` waits for the
    next round of device rows and returns it with the latest round of process rows. A round
    is complete when the stream goes quiet for ``settle_seconds`` after it (nvidia-smi writes
    a round at once), or, for devices, when the GPU index starts again at the lowest one.

    nvidia-smi prints nothing for a round without compute processes, so the process rows are
    the latest round's while it is younger than ``1.5 × interval + 0.5 s``, and none after
    that: a process that exited leaves the readings within that time.

    Failures end both streams and raise ``GpuCollectorError`` from ``read`` (the poller marks
    the collector down and calls ``read`` again after its backoff, which starts them again):
    the transport's reason when a stream cannot start or fails (``ssh_connection_lost``,
    ``command_failed`` …), ``stream_ended`` when nvidia-smi exits without error, ``timeout``
    when no round comes within ``timeout_seconds + interval`` (the first round of a stream:
    ``2 × timeout_seconds + interval``). Lines that do not parse are
    dropped and counted by reason (``skipped``: ``gpu_line_<reason>``), the round keeps the rest.
    """

    def __init__(
        self,
        transport: Transport,
        *,
        interval_seconds: float,
        timeout_seconds: float = 10.0,
        settle_seconds: float | None = None,
        now: Callable[[], datetime] = _utc_now,
    ) -> None:
        self._transport = transport
        self._interval = interval_seconds
        self._timeout = timeout_seconds
        self._settle = (
            settle_seconds if settle_seconds is not None else min(0.1, interval_seconds / 4)
        )
        self._apps_max_age = 1.5 * interval_seconds + 0.5
        self._now = now
        self._tasks: list[asyncio.Task[None]] = []
        self.lines_skipped: Counter[str] = Counter()  # every stream's decoder counts here
        self._round: ParsedRows[GpuDevice] | None = None
        self._failure: BaseException | None = None
        self._ready = asyncio.Event()
        self._processes: tuple[GpuProcess, ...] = ()
        self._processes_at: float | None = None  # loop time of the latest process round
        self._apps_seen = asyncio.Event()
        self._output_bytes = 0  # of the device stream since it started (for the timeout detail)
        self.streams_started = 0

    async def read(self) -> GpuReading:
        """Wait for the next round of device rows; return it with the current processes.

        Raises:
            GpuCollectorError: a stream could not start, failed, ended or went silent.
        """
        loop = asyncio.get_running_loop()
        fresh = not self._tasks
        if fresh:
            self._start()
        # the first round of a stream also waits for the channel and nvidia-smi's start (the
        # driver's, without persistence mode): twice the query timeout
        limit = self._timeout * (2 if fresh else 1) + self._interval
        if not await _wait_event(self._ready, limit):
            seen = self._output_bytes
            await self._stop()
            raise GpuCollectorError(
                "timeout",
                f"no nvidia-smi round within {limit:g}s ({seen} bytes of device rows since "
                f"the stream started)",
            )
        self._ready.clear()
        if self._failure is not None:
            failure, self._failure = self._failure, None
            await self._stop()
            raise failure
        devices, self._round = self._round, None
        assert devices is not None
        if fresh and self._processes_at is None:
            # both streams started together: give the first process round a moment to come
            await _wait_event(self._apps_seen, min(self._interval, 1.0))
        processes = self._processes
        if self._processes_at is None or loop.time() - self._processes_at > self._apps_max_age:
            processes = ()
        return GpuReading(devices=devices.rows, processes=processes, at=self._now())

    async def close(self) -> None:
        await self._stop()

    def skipped(self) -> dict[str, int]:
        """nvidia-smi lines that could not be read: ``gpu_line_<reason>``."""
        return {f"gpu_line_{reason}": count for reason, count in self.lines_skipped.items()}

    def _start(self) -> None:
        self._round = None
        self._failure = None
        self._ready.clear()
        self._processes, self._processes_at = (), None
        self._apps_seen.clear()
        self._output_bytes = 0
        self.streams_started += 1
        self._tasks = [
            asyncio.ensure_future(self._follow("gpus", QUERY_GPUS_ARGV)),
            asyncio.ensure_future(self._follow("apps", QUERY_APPS_ARGV)),
        ]

    async def _stop(self) -> None:
        tasks, self._tasks = self._tasks, []
        for task in tasks:
            task.cancel()
        if tasks:
            await asyncio.gather(*tasks, return_exceptions=True)

    async def _follow(self, query: Literal["gpus", "apps"], argv: tuple[str, ...]) -> None:
        """Read one stream until it ends or fails (then ``read`` raises), or is cancelled."""
        decoder = SmiStreamDecoder(query, skipped=self.lines_skipped)
        loop = asyncio.get_running_loop()
        timer: asyncio.TimerHandle | None = None
        try:
            stream = self._transport.stream(stream_argv(argv, self._interval))
            async with contextlib.aclosing(stream) as chunks:
                async for chunk in chunks:
                    if query == "gpus":
                        self._output_bytes += len(chunk)
                    if timer is not None:
                        timer.cancel()
                        timer = None
                    for devices in decoder.feed(chunk):
                        self._deliver(devices)
                    if decoder.pending:
                        timer = loop.call_later(self._settle, self._settled, decoder)
            raise GpuCollectorError("stream_ended", f"{argv[0]} exited without error")
        except asyncio.CancelledError:
            raise
        except TransportError as error:
            detail = error.detail
            if decoder.last_skipped_line:  # nvidia-smi says why on stdout
                detail = f"{detail} (last output: {decoder.last_skipped_line})"
            self._fail(GpuCollectorError(error.reason, detail))
        except Exception as error:  # GpuCollectorError above, or a bug (internal_error)
            self._fail(error)
        finally:
            if timer is not None:
                timer.cancel()

    def _settled(self, decoder: SmiStreamDecoder) -> None:
        """The stream went quiet: its round in progress is complete."""
        devices = decoder.flush_gpus()
        if devices is not None:
            self._deliver(devices)
        processes = decoder.flush_apps()
        if processes is not None:
            self._processes = processes.rows
            self._processes_at = asyncio.get_running_loop().time()
            self._apps_seen.set()

    def _deliver(self, devices: ParsedRows[GpuDevice]) -> None:
        self._round = devices  # a round nobody read yet is replaced by the newer one
        self._ready.set()

    def _fail(self, error: BaseException) -> None:
        if self._failure is None:
            self._failure = error
        self._ready.set()


async def _wait_event(event: asyncio.Event, seconds: float) -> bool:
    """Wait for ``event`` at most ``seconds``; False when the time ran out."""
    try:
        async with asyncio.timeout(seconds):
            await event.wait()
    except TimeoutError:
        return False
    return True


class CgroupReader:
    """``/proc/PID/cgroup`` of many processes, from this machine or through a transport.

    Locally the files are read under ``proc_root`` in a worker thread. Through a transport,
    each batch of PIDs is one command, ``sh -c 'grep -Hs "" "$@"; exit 0' sh /proc/P/cgroup…``:
    every line comes back prefixed with its file, and a PID that exited in the meantime is
    simply missing (PIDs are integers, and the paths travel as arguments, not as script).
    A vanished or unreadable PID is left out of the result; a transport failure raises
    ``GpuCollectorError`` with the transport's reason.
    """

    _SCRIPT = 'grep -Hs "" "$@"; exit 0'

    def __init__(
        self,
        transport: Transport | None = None,
        *,
        proc_root: str = "/proc",
        timeout_seconds: float = 10.0,
        batch_size: int = 256,
    ) -> None:
        self._transport = transport
        self._proc_root = proc_root.rstrip("/") or "/"
        self._timeout = timeout_seconds
        self._batch_size = max(1, batch_size)
        self._known: dict[int, str | None] = {}  # PID -> its unit (None: none), see units_of
        self.pids_read = 0

    async def read(self, pids: Iterable[int]) -> dict[int, str]:
        """Return PID → the text of its cgroup file, for the PIDs that could be read."""
        wanted = sorted({pid for pid in pids if pid > 0})
        if not wanted:
            return {}
        if self._transport is None:
            return await asyncio.to_thread(self._read_local, wanted)
        texts: dict[int, str] = {}
        for start in range(0, len(wanted), self._batch_size):
            batch = wanted[start : start + self._batch_size]
            texts.update(await self._read_remote(self._transport, batch))
        return texts

    async def read_units(self, pids: Iterable[int]) -> dict[int, str]:
        """Return PID → systemd unit, for the PIDs whose cgroup names one."""
        units: dict[int, str] = {}
        for pid, text in (await self.read(pids)).items():
            unit = parse_cgroup(text)
            if unit is not None:
                units[pid] = unit
        return units

    async def units_of(self, pids: Iterable[int]) -> dict[int, str]:
        """``read_units`` for the PIDs of the current reading, each PID read only once.

        A PID's unit (or that its cgroup names none, or could not be read) is kept while the
        PID is in the readings; a PID missing from ``pids`` is forgotten, so a PID the kernel
        reuses for a new process is read again. Only new PIDs cost a read (a command through
        the transport), so a host whose processes stay put costs nothing per poll.

        Raises:
            GpuCollectorError: reading the new PIDs failed (nothing is kept from that read).
        """
        current = {pid for pid in pids if pid > 0}
        for gone in self._known.keys() - current:
            del self._known[gone]
        new = current - self._known.keys()
        if new:
            texts = await self.read(new)
            self.pids_read += len(new)
            for pid in new:
                text = texts.get(pid)
                self._known[pid] = parse_cgroup(text) if text is not None else None
        return {pid: unit for pid in current if (unit := self._known[pid]) is not None}

    def _read_local(self, pids: list[int]) -> dict[int, str]:
        texts: dict[int, str] = {}
        for pid in pids:
            try:
                texts[pid] = Path(self._proc_root, str(pid), "cgroup").read_text(
                    encoding="utf-8", errors="replace"
                )
            except OSError:  # exited (ENOENT, ESRCH) or hidden (EACCES)
                continue
        return texts

    async def _read_remote(self, transport: Transport, pids: list[int]) -> dict[int, str]:
        paths = [f"{self._proc_root}/{pid}/cgroup" for pid in pids]
        argv = ["sh", "-c", self._SCRIPT, "sh", *paths]
        try:
            output = await transport.run(argv, self._timeout)
        except TransportError as error:
            raise GpuCollectorError(error.reason, error.detail) from error
        prefix = re.compile(re.escape(self._proc_root) + r"/(\d+)/cgroup:(.*)")
        lines: dict[int, list[str]] = {}
        for line in output.decode("utf-8", errors="replace").splitlines():
            match = prefix.fullmatch(line)
            if match is not None:
                lines.setdefault(int(match.group(1)), []).append(match.group(2))
        return {pid: "\n".join(text) + "\n" for pid, text in lines.items()}


class BackoffWait(wait_base):
    """Capped exponential backoff with jitter, as a tenacity wait strategy.

    Attempt ``n`` waits ``min(maximum, initial · 2^(n-1)) · (1 - jitter_ratio · r)`` with
    ``r`` from ``random`` in [0, 1): never above the cap, never below ``1 - jitter_ratio`` of
    it, so many hosts failing together do not retry in step.
    """

    def __init__(
        self,
        initial_seconds: float,
        maximum_seconds: float,
        *,
        jitter_ratio: float = 0.2,
        random: Callable[[], float] | None = None,
    ) -> None:
        self.initial_seconds = initial_seconds
        self.maximum_seconds = maximum_seconds
        self.jitter_ratio = min(max(jitter_ratio, 0.0), 1.0)
        # Jitter only spreads retries out; it needs no cryptographic randomness.
        self._random = random if random is not None else random_module.Random().random  # noqa: S311

    def __call__(self, retry_state: RetryCallState) -> float:
        exponent = min(max(retry_state.attempt_number - 1, 0), 62)
        base = min(self.maximum_seconds, self.initial_seconds * float(2**exponent))
        return max(0.0, base * (1.0 - self.jitter_ratio * self._random()))


class GpuPoller:
    """Polls one host's GPUs until cancelled; owns its reader and closes it on the way out.

    Args:
        host: the host label for logs.
        reader: where readings come from.
        interval_seconds: the pause after each good reading.
        now: the clock for ``CollectorState.since``.
        sleep: awaited for every pause (tests pass a fake that returns at once).
        wait: the tenacity wait strategy between failed reads (``BackoffWait`` of
            ``backoff_initial_seconds`` … ``backoff_max_seconds`` by default).
        reader_paced: the reader's ``read`` itself waits for the next reading (a stream,
            ``NvidiaSmiStreamReader``): no pause after a good reading.
    """

    def __init__(
        self,
        host: str,
        reader: GpuReader,
        interval_seconds: float,
        *,
        now: Callable[[], datetime] = _utc_now,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
        backoff_initial_seconds: float = 1.0,
        backoff_max_seconds: float = 60.0,
        wait: wait_base | None = None,
        reader_paced: bool = False,
    ) -> None:
        self.host = host
        self._reader = reader
        self._interval = interval_seconds
        self._reader_paced = reader_paced
        self._now = now
        self._sleep = sleep
        self._wait = (
            wait if wait is not None else BackoffWait(backoff_initial_seconds, backoff_max_seconds)
        )
        self._state = CollectorState(up=False, since=None, reason=REASON_STARTING)

    @property
    def state(self) -> CollectorState:
        """The collector's health now (a frozen value, replaced on every change)."""
        return self._state

    def skipped(self) -> dict[str, int]:
        """The reader's skip counts by reason (``GpuReader.skipped``)."""
        return self._reader.skipped()

    async def run(self, emit: Callable[[GpuReading], Awaitable[None]]) -> None:
        """Read, emit, pause, forever; failed reads are retried with backoff."""
        try:
            while True:
                reading = await self._read_with_retry()
                self._mark_up(reading)
                await emit(reading)
                if not self._reader_paced:
                    await self._sleep(self._interval)
        finally:
            await self._reader.close()

    async def _read_with_retry(self) -> GpuReading:
        retrying = AsyncRetrying(
            sleep=self._sleep,
            wait=self._wait,
            retry=retry_if_exception_type(Exception),
            before_sleep=self._mark_down,
            reraise=True,
        )
        reading: GpuReading | None = None
        async for attempt in retrying:
            with attempt:
                reading = await self._reader.read()
        assert reading is not None
        return reading

    def _mark_down(self, retry_state: RetryCallState) -> None:
        outcome = retry_state.outcome
        error = outcome.exception() if outcome is not None else None
        reason, detail = _reason_of(error)
        if not self._state.up and self._state.reason == reason:
            return
        self._state = CollectorState(
            up=False,
            since=self._now(),
            reason=reason,
            reconnects_total=self._state.reconnects_total,
        )
        next_action = retry_state.next_action
        fields: dict[str, object] = {
            "host": self.host,
            "collector": "gpu",
            "reason": reason,
            "detail": detail,
            "retry_in_seconds": round(next_action.sleep, 3) if next_action else None,
        }
        if reason in _HINTS:
            fields["hint"] = _HINTS[reason]
        if reason == REASON_INTERNAL_ERROR and error is not None:
            _log.error("gpu_collector_down", exc_info=error, **fields)
        else:
            _log.warning("gpu_collector_down", **fields)

    def _mark_up(self, reading: GpuReading) -> None:
        if self._state.up:
            return
        recovered = self._state.reason != REASON_STARTING
        reconnects = self._state.reconnects_total + (1 if recovered else 0)
        self._state = CollectorState(
            up=True, since=self._now(), reason="", reconnects_total=reconnects
        )
        _log.info(
            "gpu_collector_up",
            host=self.host,
            collector="gpu",
            devices=len(reading.devices),
            reconnects_total=reconnects,
        )


def _reason_of(error: BaseException | None) -> tuple[str, str]:
    if isinstance(error, GpuCollectorError | TransportError):
        reason, detail = error.reason, error.detail
    else:
        return REASON_INTERNAL_ERROR, f"{type(error).__name__}: {error}"[:300]
    if not _REASON.fullmatch(reason):
        reason = "other"
    return reason, detail[:300]
