"""Tests for vllm_sentinel.sources.gpu: NVML and nvidia-smi readers, cgroup reader, the poller."""

from __future__ import annotations

import asyncio
import ctypes
import json
import os
import threading
from collections.abc import AsyncIterator, Mapping, Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import ClassVar

import pynvml
import pytest
from structlog.testing import capture_logs
from tenacity import RetryCallState

from tests.support.fake_nvml import GIB, MIB, FakeGpu, FakeNvml, Frame, nvml_error
from vllm_sentinel.engine.snapshot import CollectorState, GpuDevice, GpuProcess, GpuReading
from vllm_sentinel.errors import GpuCollectorError, TransportError
from vllm_sentinel.sources.gpu import (
    REASON_INTERNAL_ERROR,
    REASON_STARTING,
    BackoffWait,
    CgroupReader,
    GpuPoller,
    NvidiaSmiReader,
    NvmlReader,
)
from vllm_sentinel.sources.nvidia_smi import QUERY_APPS_ARGV, QUERY_GPUS_ARGV
from vllm_sentinel.sources.transport import LocalTransport

STUB_NVIDIA_SMI = Path(__file__).resolve().parents[1] / "support" / "bin" / "nvidia-smi"
START = datetime(2025, 6, 1, 12, 0, tzinfo=UTC)
H200_TOTAL = 143771 * MIB
UUID_0 = "GPU-8d1d4a5c-7f36-2e1b-94b8-3a6f0c2e5d11"
UUID_1 = "GPU-1f0e7b2a-93c4-5d6e-a7b8-c9d0e1f2a3b4"


def _has_real_nvml() -> bool:
    try:
        ctypes.CDLL("libnvidia-ml.so.1")
    except OSError:
        return False
    return True


needs_no_nvml = pytest.mark.skipif(
    _has_real_nvml(), reason="libnvidia-ml.so.1 is present: this host has an NVIDIA driver"
)


class StopPollingError(Exception):
    """Raised by the fake sleep to end a poller run after a set number of pauses."""


class FakeClock:
    """A clock that only moves when the fake sleep is awaited."""

    def __init__(self, limit: int | None = None) -> None:
        self.at = START
        self.sleeps: list[float] = []
        self.limit = limit
        self.reached = asyncio.Event()
        self.on_sleep: list[object] = []

    def now(self) -> datetime:
        return self.at

    async def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.at += timedelta(seconds=seconds)
        for hook in self.on_sleep:
            hook(len(self.sleeps))  # type: ignore[operator]
        if self.limit is not None and len(self.sleeps) >= self.limit:
            raise StopPollingError
        await asyncio.sleep(0)


def _loading_frames() -> list[Frame]:
    """Two GPUs of a TP=2 unit: context, then weights in 8 GiB steps, then flat."""
    frames: list[Frame] = []
    for worker_bytes in (512 * MIB, 8 * GIB, 16 * GIB, 24 * GIB, 30 * GIB, 30 * GIB):
        frames.append(
            tuple(
                FakeGpu(
                    uuid=uuid,
                    name="NVIDIA H200",
                    total_bytes=H200_TOTAL,
                    used_bytes=worker_bytes + 600 * MIB,
                    processes=((4121 + index, worker_bytes),),
                )
                for index, uuid in enumerate((UUID_0, UUID_1))
            )
        )
    return frames


def _one_gpu(used: int = GIB) -> tuple[FakeGpu, ...]:
    return (FakeGpu(UUID_0, "NVIDIA H200", H200_TOTAL, used, ((4121, used),)),)


def _two_gpus(
    first: Mapping[str, pynvml.NVMLError] | None = None,
    lost: Mapping[str, pynvml.NVMLError] | None = None,
) -> tuple[FakeGpu, ...]:
    """Two GPUs with 1 GiB used by one process each; ``first``/``lost``: their NVML errors."""
    return (
        FakeGpu(UUID_0, "NVIDIA H200", H200_TOTAL, GIB, ((4121, GIB),), errors=first or {}),
        FakeGpu(UUID_1, "NVIDIA H200", H200_TOTAL, GIB, ((4122, GIB),), errors=lost or {}),
    )


class TestNvmlReader:
    @pytest.mark.asyncio
    async def test_reads_devices_and_processes_in_bytes(self) -> None:
        """One read gives every device and compute process, in exact bytes."""
        nvml = FakeNvml(_loading_frames()[1:2])
        reader = NvmlReader(nvml, now=lambda: START)
        reading = await reader.read()
        assert reading == GpuReading(
            devices=(
                GpuDevice(0, UUID_0, "NVIDIA H200", 8 * GIB + 600 * MIB, H200_TOTAL),
                GpuDevice(1, UUID_1, "NVIDIA H200", 8 * GIB + 600 * MIB, H200_TOTAL),
            ),
            processes=(GpuProcess(UUID_0, 4121, 8 * GIB), GpuProcess(UUID_1, 4122, 8 * GIB)),
            at=START,
        )

    @pytest.mark.asyncio
    async def test_nvml_is_called_off_the_event_loop(self) -> None:
        """Every NVML call runs in a worker thread, never on the loop's thread."""
        nvml = FakeNvml([_one_gpu()])
        reader = NvmlReader(nvml)
        await reader.read()
        await reader.close()
        assert nvml.thread_ids
        assert threading.get_ident() not in nvml.thread_ids

    @pytest.mark.asyncio
    async def test_init_once_shutdown_on_close(self) -> None:
        """NVML is initialised by the first read only, and shut down once by close."""
        nvml = FakeNvml([_one_gpu()])
        reader = NvmlReader(nvml)
        await reader.read()
        await reader.read()
        assert nvml.init_calls == 1
        await reader.close()
        await reader.close()
        assert nvml.shutdown_calls == 1
        assert not nvml.initialized

    @pytest.mark.asyncio
    async def test_close_before_any_read_does_nothing(self) -> None:
        """Closing a reader that never initialised NVML calls nothing."""
        nvml = FakeNvml([])
        await NvmlReader(nvml).close()
        assert nvml.calls == []

    @pytest.mark.asyncio
    async def test_nvml_error_is_a_collector_error_and_nvml_is_reinitialised(self) -> None:
        """An NVML error carries its class name as reason; the next read starts NVML again."""
        nvml = FakeNvml([_one_gpu(), nvml_error("NVMLError_GpuIsLost"), _one_gpu(2 * GIB)])
        reader = NvmlReader(nvml)
        await reader.read()
        with pytest.raises(GpuCollectorError) as caught:
            await reader.read()
        assert caught.value.reason == "NVMLError_GpuIsLost"
        assert caught.value.detail == "GPU is lost"
        assert nvml.shutdown_calls == 1
        reading = await reader.read()
        assert nvml.init_calls == 2
        assert reading.devices[0].memory_used_bytes == 2 * GIB

    @pytest.mark.asyncio
    async def test_init_error_is_a_collector_error(self) -> None:
        """A failing nvmlInit is reported by class name, and retried on the next read."""
        nvml = FakeNvml([_one_gpu()], init_errors=[nvml_error("NVMLError_DriverNotLoaded")])
        reader = NvmlReader(nvml)
        with pytest.raises(GpuCollectorError) as caught:
            await reader.read()
        assert caught.value.reason == "NVMLError_DriverNotLoaded"
        assert nvml.shutdown_calls == 0
        assert (await reader.read()).devices[0].uuid == UUID_0

    @pytest.mark.asyncio
    async def test_unknown_process_memory_and_unsupported_listing(self) -> None:
        """Processes without a memory figure are left out; a GPU that can't list them stays."""
        frame = (
            FakeGpu(UUID_0, "NVIDIA H200", H200_TOTAL, GIB, ((10, None), (11, GIB))),
            FakeGpu(UUID_1, "NVIDIA H200", H200_TOTAL, GIB, ((12, GIB),), False),
        )
        reading = await NvmlReader(FakeNvml([frame])).read()
        assert len(reading.devices) == 2
        assert reading.processes == (GpuProcess(UUID_0, 11, GIB),)

    @pytest.mark.asyncio
    async def test_memory_info_v1_when_the_driver_lacks_v2(self) -> None:
        """Without nvmlDeviceGetMemoryInfo_v2 the v1 call gives the same figures."""
        nvml = FakeNvml([_one_gpu(3 * GIB)], memory_v2=False)
        reader = NvmlReader(nvml)
        assert (await reader.read()).devices[0].memory_used_bytes == 3 * GIB
        assert (await reader.read()).devices[0].memory_used_bytes == 3 * GIB
        assert nvml.calls.count("nvmlDeviceGetMemoryInfo") == 3  # v2 tried once only

    @pytest.mark.asyncio
    async def test_bytes_names_are_decoded(self) -> None:
        """Old pynvml returned bytes for names; they become text."""
        frame = (FakeGpu(UUID_0, b"NVIDIA B200", 183359 * MIB, 0),)
        reading = await NvmlReader(FakeNvml([frame])).read()
        assert reading.devices[0].name == "NVIDIA B200"

    @pytest.mark.asyncio
    async def test_a_lost_gpu_is_skipped_and_the_others_are_read(self) -> None:
        """One GPU off the bus: the other GPU and its processes are still read; NVML stays up."""
        frame = _two_gpus(lost={"nvmlDeviceGetMemoryInfo": nvml_error("NVMLError_GpuIsLost")})
        nvml = FakeNvml([frame])
        reader = NvmlReader(nvml, host="h1", now=lambda: START)
        reading = await reader.read()
        assert reading.devices == (GpuDevice(0, UUID_0, "NVIDIA H200", GIB, H200_TOTAL),)
        assert reading.processes == (GpuProcess(UUID_0, 4121, GIB),)
        assert reader.devices_skipped == {"NVMLError_GpuIsLost": 1}
        assert nvml.shutdown_calls == 0 and nvml.init_calls == 1

    @pytest.mark.asyncio
    async def test_a_gpu_without_a_handle_is_skipped(self) -> None:
        """No handle for one GPU (NoPermission): that GPU is left out, the other is read."""
        denied = nvml_error("NVMLError_NoPermission")
        reader = NvmlReader(FakeNvml([_two_gpus(first={"nvmlDeviceGetHandleByIndex": denied})]))
        reading = await reader.read()
        assert [device.uuid for device in reading.devices] == [UUID_1]
        assert reading.devices[0].index == 1
        assert reading.processes == (GpuProcess(UUID_1, 4122, GIB),)
        assert reader.devices_skipped == {"NVMLError_NoPermission": 1}

    @pytest.mark.asyncio
    async def test_a_refused_process_list_keeps_the_device(self) -> None:
        """NVML refusing one GPU's process list drops only those processes."""
        denied = nvml_error("NVMLError_NoPermission")
        frame = _two_gpus(lost={"nvmlDeviceGetComputeRunningProcesses": denied})
        reader = NvmlReader(FakeNvml([frame]))
        reading = await reader.read()
        assert [device.uuid for device in reading.devices] == [UUID_0, UUID_1]
        assert reading.devices[1].memory_used_bytes == GIB
        assert reading.processes == (GpuProcess(UUID_0, 4121, GIB),)
        assert reader.process_lists_skipped == {"NVMLError_NoPermission": 1}
        assert not reader.devices_skipped

    @pytest.mark.asyncio
    async def test_every_gpu_failing_is_a_collector_error(self) -> None:
        """When no GPU answers, the read fails as before and NVML is initialised again."""
        lost = nvml_error("NVMLError_GpuIsLost")
        frame = _two_gpus(first={"nvmlDeviceGetUUID": lost}, lost={"nvmlDeviceGetMemoryInfo": lost})
        nvml = FakeNvml([frame])
        reader = NvmlReader(nvml)
        with pytest.raises(GpuCollectorError) as caught:
            await reader.read()
        assert caught.value.reason == "NVMLError_GpuIsLost"
        assert nvml.shutdown_calls == 1

    @pytest.mark.asyncio
    async def test_library_errors_on_a_device_still_fail_the_read(self) -> None:
        """A driver/library error raised by a per-device call is not a per-device problem."""
        gone = nvml_error("NVMLError_DriverNotLoaded")
        reader = NvmlReader(FakeNvml([_two_gpus(lost={"nvmlDeviceGetName": gone})]))
        with pytest.raises(GpuCollectorError) as caught:
            await reader.read()
        assert caught.value.reason == "NVMLError_DriverNotLoaded"

    @pytest.mark.asyncio
    async def test_device_skips_are_logged_once_per_state_change(self) -> None:
        """Skipped three reads in a row: one warning; back: one info; a new reason: a warning."""
        lost = _two_gpus(lost={"nvmlDeviceGetMemoryInfo": nvml_error("NVMLError_GpuIsLost")})
        denied = _two_gpus(
            lost={"nvmlDeviceGetComputeRunningProcesses": nvml_error("NVMLError_NoPermission")}
        )
        nvml = FakeNvml([lost, lost, lost, _two_gpus(), denied, denied])
        reader = NvmlReader(nvml, host="h1")
        with capture_logs() as logs:
            for _ in range(6):
                await reader.read()
        assert [(e["event"], e["log_level"], e.get("reason"), e["part"]) for e in logs] == [
            ("gpu_device_skipped", "warning", "NVMLError_GpuIsLost", "device"),
            ("gpu_device_recovered", "info", None, "device"),
            ("gpu_device_skipped", "warning", "NVMLError_NoPermission", "processes"),
        ]
        assert {(e["host"], e["gpu"]) for e in logs} == {("h1", 1)}
        assert logs[0]["detail"] == "GPU is lost"
        assert "fell off the bus" in logs[0]["hint"]
        assert logs[2]["uuid"] == UUID_1
        assert reader.devices_skipped == {"NVMLError_GpuIsLost": 3}
        assert reader.process_lists_skipped == {"NVMLError_NoPermission": 2}
        # what /metrics shows as vllm_sentinel_records_skipped_total{reason}
        assert reader.skipped() == {
            "gpu_device_GpuIsLost": 3,
            "gpu_processes_NoPermission": 2,
        }

    @needs_no_nvml
    @pytest.mark.asyncio
    async def test_real_pynvml_without_driver(self) -> None:
        """On a host without the NVML library the real pynvml gives LibraryNotFound."""
        reader = NvmlReader()
        with pytest.raises(GpuCollectorError) as caught:
            await reader.read()
        assert caught.value.reason == "NVMLError_LibraryNotFound"
        assert isinstance(caught.value.__cause__, pynvml.NVMLError_LibraryNotFound)
        await reader.close()


class TestBackoffWait:
    def _state(self, attempt: int) -> RetryCallState:
        state = RetryCallState(retry_object=None, fn=None, args=(), kwargs={})  # type: ignore[arg-type]
        state.attempt_number = attempt
        return state

    def test_doubles_up_to_the_cap(self) -> None:
        """Without jitter the waits are 1, 2, 4 … capped at the maximum."""
        wait = BackoffWait(1.0, 10.0, random=lambda: 0.0)
        assert [wait(self._state(n)) for n in range(1, 7)] == [1.0, 2.0, 4.0, 8.0, 10.0, 10.0]

    def test_jitter_stays_under_the_cap(self) -> None:
        """Jitter only shortens a wait, by at most jitter_ratio."""
        wait = BackoffWait(1.0, 60.0, jitter_ratio=0.2, random=lambda: 0.999)
        assert 48.0 <= wait(self._state(20)) <= 60.0
        assert 3.2 <= wait(self._state(3)) <= 4.0

    def test_huge_attempt_numbers_do_not_overflow(self) -> None:
        """Days of failures keep waiting the cap instead of overflowing."""
        assert BackoffWait(1.0, 60.0, random=lambda: 0.0)(self._state(100_000)) == 60.0

    def test_default_random_is_seeded_per_instance(self) -> None:
        """The default jitter source gives values within bounds."""
        values = {BackoffWait(1.0, 8.0)(self._state(4)) for _ in range(20)}
        assert all(6.4 <= value <= 8.0 for value in values)


class TestGpuPoller:
    def test_starts_down_with_reason_starting(self) -> None:
        """Before the first read the collector is down, reason 'starting'."""
        poller = GpuPoller("h1", NvmlReader(FakeNvml([])), 5.0)
        assert poller.state == CollectorState(up=False, since=None, reason=REASON_STARTING)

    @pytest.mark.asyncio
    async def test_loading_unit_memory_rises_then_flat(self) -> None:
        """Each poll emits the exact bytes: weights rising in 8 GiB steps, then flat."""
        clock = FakeClock(limit=8)
        nvml = FakeNvml(_loading_frames())
        poller = GpuPoller(
            "h1", NvmlReader(nvml, now=clock.now), 2.0, sleep=clock.sleep, now=clock.now
        )
        readings: list[GpuReading] = []

        async def emit(reading: GpuReading) -> None:
            readings.append(reading)

        with capture_logs() as logs, pytest.raises(StopPollingError):
            await poller.run(emit)

        per_worker = [[p.used_memory_bytes for p in r.processes] for r in readings]
        assert per_worker == [
            [512 * MIB] * 2,
            [8 * GIB] * 2,
            [16 * GIB] * 2,
            [24 * GIB] * 2,
            [30 * GIB] * 2,
            [30 * GIB] * 2,
            [30 * GIB] * 2,
            [30 * GIB] * 2,
        ]
        assert readings[2].devices[1].memory_used_bytes == 16 * GIB + 600 * MIB
        assert [r.at for r in readings] == [START + timedelta(seconds=2 * n) for n in range(8)]
        assert clock.sleeps == [2.0] * 8
        assert poller.state == CollectorState(up=True, since=START, reason="", reconnects_total=0)
        assert [entry["event"] for entry in logs] == ["gpu_collector_up"]
        assert nvml.shutdown_calls == 1  # the poller closed its reader

    @pytest.mark.asyncio
    async def test_one_failing_gpu_keeps_the_collector_up(self) -> None:
        """A lost GPU and a refused process list: collector up, the healthy GPU still emitted."""
        frame = _two_gpus(
            first={"nvmlDeviceGetComputeRunningProcesses": nvml_error("NVMLError_NoPermission")},
            lost={"nvmlDeviceGetHandleByIndex": nvml_error("NVMLError_GpuIsLost")},
        )
        clock = FakeClock(limit=3)
        poller = GpuPoller(
            "h1", NvmlReader(FakeNvml([frame]), now=clock.now), 2.0, sleep=clock.sleep
        )
        readings: list[GpuReading] = []

        async def emit(reading: GpuReading) -> None:
            readings.append(reading)

        with capture_logs() as logs, pytest.raises(StopPollingError):
            await poller.run(emit)
        assert poller.state.up
        assert len(readings) == 3
        assert all([d.uuid for d in r.devices] == [UUID_0] for r in readings)
        assert "gpu_collector_down" not in [entry["event"] for entry in logs]

    @needs_no_nvml
    @pytest.mark.asyncio
    async def test_real_nvml_without_driver_is_down_and_logged_once(self) -> None:
        """Real pynvml on a GPU-less host: down, NVMLError_LibraryNotFound, one log line."""
        clock = FakeClock(limit=6)
        poller = GpuPoller(
            "h1",
            NvmlReader(now=clock.now),
            5.0,
            sleep=clock.sleep,
            now=clock.now,
            backoff_initial_seconds=1.0,
            backoff_max_seconds=8.0,
        )

        async def emit(reading: GpuReading) -> None:
            raise AssertionError("no reading expected")

        with capture_logs() as logs, pytest.raises(StopPollingError):
            await poller.run(emit)

        assert poller.state == CollectorState(
            up=False, since=START, reason="NVMLError_LibraryNotFound", reconnects_total=0
        )
        assert len(logs) == 1
        entry = logs[0]
        assert entry["event"] == "gpu_collector_down"
        assert entry["log_level"] == "warning"
        assert entry["reason"] == "NVMLError_LibraryNotFound"
        assert entry["detail"] == "NVML Shared Library Not Found"
        assert "everything else keeps working" in entry["hint"]
        expected = [1.0, 2.0, 4.0, 8.0, 8.0, 8.0]
        assert all(0.8 * e <= s <= e for s, e in zip(clock.sleeps, expected, strict=True))

    @pytest.mark.asyncio
    async def test_backoff_logs_once_per_state_change(self) -> None:
        """Four failed reads log one 'down'; recovery logs one 'up' and counts a reconnect."""
        lost = nvml_error("NVMLError_GpuIsLost")
        frames: list[Frame] = [_one_gpu(GIB), lost, lost, lost, lost, _one_gpu(2 * GIB)]
        clock = FakeClock(limit=8)
        poller = GpuPoller(
            "h1",
            NvmlReader(FakeNvml(frames)),
            5.0,
            sleep=clock.sleep,
            now=clock.now,
            wait=BackoffWait(1.0, 4.0, random=lambda: 0.0),
        )
        readings: list[GpuReading] = []
        states: list[CollectorState] = []

        async def emit(reading: GpuReading) -> None:
            readings.append(reading)
            states.append(poller.state)

        with capture_logs() as logs, pytest.raises(StopPollingError):
            await poller.run(emit)

        assert clock.sleeps == [5.0, 1.0, 2.0, 4.0, 4.0, 5.0, 5.0, 5.0]
        assert [(e["event"], e.get("reason")) for e in logs] == [
            ("gpu_collector_up", None),
            ("gpu_collector_down", "NVMLError_GpuIsLost"),
            ("gpu_collector_up", None),
        ]
        assert logs[1]["retry_in_seconds"] == 1.0
        assert logs[2]["reconnects_total"] == 1
        assert states[1] == CollectorState(
            up=True, since=START + timedelta(seconds=16), reason="", reconnects_total=1
        )
        assert [r.devices[0].memory_used_bytes for r in readings] == [
            GIB,
            2 * GIB,
            2 * GIB,
            2 * GIB,
        ]

    @pytest.mark.asyncio
    async def test_a_new_reason_is_a_new_state(self) -> None:
        """While down, a different reason is logged again; the same reason is not."""
        frames: list[Frame] = [
            nvml_error("NVMLError_GpuIsLost"),
            nvml_error("NVMLError_NoPermission"),
            nvml_error("NVMLError_NoPermission"),
            _one_gpu(),
        ]
        clock = FakeClock(limit=4)
        poller = GpuPoller(
            "h1",
            NvmlReader(FakeNvml(frames)),
            5.0,
            sleep=clock.sleep,
            now=clock.now,
            wait=BackoffWait(1.0, 4.0, random=lambda: 0.0),
        )

        async def emit(reading: GpuReading) -> None:
            return None

        with capture_logs() as logs, pytest.raises(StopPollingError):
            await poller.run(emit)
        assert [(e["event"], e.get("reason")) for e in logs] == [
            ("gpu_collector_down", "NVMLError_GpuIsLost"),
            ("gpu_collector_down", "NVMLError_NoPermission"),
            ("gpu_collector_up", None),
        ]
        assert poller.state.reconnects_total == 1

    @pytest.mark.asyncio
    async def test_unexpected_exception_is_internal_error_with_traceback(self) -> None:
        """A bug in a reader marks internal_error, logs its traceback once, and is retried."""

        class FlakyReader:
            def __init__(self) -> None:
                self.calls = 0
                self.closed = False

            async def read(self) -> GpuReading:
                self.calls += 1
                if self.calls <= 3:
                    raise KeyError("surprise")
                return GpuReading((), (), START)

            async def close(self) -> None:
                self.closed = True

        reader = FlakyReader()
        clock = FakeClock(limit=4)
        poller = GpuPoller(
            "h1",
            reader,
            5.0,
            sleep=clock.sleep,
            now=clock.now,
            wait=BackoffWait(1.0, 4.0, random=lambda: 0.0),
        )

        async def emit(reading: GpuReading) -> None:
            return None

        with capture_logs() as logs, pytest.raises(StopPollingError):
            await poller.run(emit)
        assert [(e["event"], e.get("reason"), e["log_level"]) for e in logs] == [
            ("gpu_collector_down", REASON_INTERNAL_ERROR, "error"),
            ("gpu_collector_up", None, "info"),
        ]
        assert isinstance(logs[0]["exc_info"], KeyError)
        assert reader.closed

    @pytest.mark.asyncio
    async def test_cancel_stops_the_loop_and_closes_nvml(self) -> None:
        """Cancelling run() ends it promptly and shuts NVML down."""
        nvml = FakeNvml([_one_gpu()])
        reached = asyncio.Event()
        sleeps: list[float] = []

        async def sleep(seconds: float) -> None:
            sleeps.append(seconds)
            if len(sleeps) == 3:
                reached.set()
                await asyncio.Event().wait()  # parked until cancelled

        poller = GpuPoller("h1", NvmlReader(nvml), 5.0, sleep=sleep)

        async def emit(reading: GpuReading) -> None:
            return None

        task = asyncio.create_task(poller.run(emit))
        await asyncio.wait_for(reached.wait(), 10)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert nvml.shutdown_calls == 1

    @pytest.mark.asyncio
    async def test_cancel_during_backoff_propagates(self) -> None:
        """Cancelling while retrying a failure ends run() too (tenacity does not swallow it)."""
        nvml = FakeNvml.no_library()
        reached = asyncio.Event()

        async def sleep(seconds: float) -> None:
            reached.set()
            await asyncio.Event().wait()

        poller = GpuPoller("h1", NvmlReader(nvml), 5.0, sleep=sleep)

        async def emit(reading: GpuReading) -> None:
            return None

        with capture_logs():
            task = asyncio.create_task(poller.run(emit))
            await asyncio.wait_for(reached.wait(), 10)
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
        assert poller.state.reason == "NVMLError_LibraryNotFound"

    @pytest.mark.asyncio
    async def test_emit_failure_is_not_retried(self) -> None:
        """An exception from emit (the Monitor's side) ends run() and closes the reader."""
        nvml = FakeNvml([_one_gpu()])
        clock = FakeClock()
        poller = GpuPoller("h1", NvmlReader(nvml), 5.0, sleep=clock.sleep)

        async def emit(reading: GpuReading) -> None:
            raise RuntimeError("queue closed")

        with capture_logs(), pytest.raises(RuntimeError, match="queue closed"):
            await poller.run(emit)
        assert nvml.shutdown_calls == 1


class StubTransport:
    """A Transport whose ``nvidia-smi`` is the stub in tests/support/bin, run for real."""

    def __init__(self, state_file: Path, host: str = "gpu-host-1") -> None:
        self.host = host
        self.state_file = state_file
        self.calls: list[tuple[str, ...]] = []

    def stream(self, argv: Sequence[str]) -> AsyncIterator[bytes]:
        raise NotImplementedError

    async def run(self, argv: Sequence[str], timeout: float) -> bytes:
        self.calls.append(tuple(argv))
        assert argv[0] == "nvidia-smi"
        env = {**os.environ, "FAKE_NVIDIA_SMI_STATE": str(self.state_file)}
        process = await asyncio.create_subprocess_exec(
            str(STUB_NVIDIA_SMI),
            *argv[1:],
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            env=env,
        )
        stdout, stderr = await asyncio.wait_for(process.communicate(), timeout)
        if process.returncode != 0:
            detail = f"{argv[0]} exit {process.returncode}: {(stdout + stderr).decode().strip()}"
            raise TransportError(self.host, "command_failed", detail)
        return stdout

    async def close(self) -> None:
        return None


def _smi_state(
    worker_mib: int, *, gpus: int = 8, extra_gpu: dict[str, object] | None = None
) -> dict[str, object]:
    uuids = [f"GPU-8d1d4a5c-7f36-2e1b-94b8-3a6f0c2e5d{index:02d}" for index in range(gpus)]
    state: dict[str, list[dict[str, object]]] = {
        "gpus": [
            {
                "index": index,
                "uuid": uuid,
                "name": "NVIDIA H200",
                "memory.used": worker_mib + 600,
                "memory.total": 143771,
            }
            for index, uuid in enumerate(uuids)
        ],
        "apps": [
            {"gpu_uuid": uuid, "pid": 4121 + index, "used_memory": worker_mib}
            for index, uuid in enumerate(uuids)
        ],
    }
    if extra_gpu is not None:
        state["gpus"].append(extra_gpu)
    return dict(state)


class TestNvidiaSmiReader:
    @pytest.mark.asyncio
    async def test_reads_eight_h200_through_the_stub(self, tmp_path: Path) -> None:
        """The two queries run as real processes; their CSV becomes exact bytes."""
        state_file = tmp_path / "smi.json"
        state_file.write_text(json.dumps(_smi_state(97102)))
        transport = StubTransport(state_file)
        reader = NvidiaSmiReader(transport, timeout_seconds=30.0, now=lambda: START)
        reading = await reader.read()
        assert transport.calls == [QUERY_GPUS_ARGV, QUERY_APPS_ARGV]
        assert len(reading.devices) == 8
        assert reading.devices[7] == GpuDevice(
            7,
            "GPU-8d1d4a5c-7f36-2e1b-94b8-3a6f0c2e5d07",
            "NVIDIA H200",
            97702 * MIB,
            143771 * MIB,
        )
        assert reading.processes[0] == GpuProcess(
            "GPU-8d1d4a5c-7f36-2e1b-94b8-3a6f0c2e5d00", 4121, 97102 * MIB
        )
        assert reading.at == START
        assert reader.lines_skipped == {}

    @pytest.mark.asyncio
    async def test_not_available_rows_are_counted(self, tmp_path: Path) -> None:
        """A GPU whose memory reads [N/A] is skipped and counted, the others kept."""
        state_file = tmp_path / "smi.json"
        odd = {
            "index": 8,
            "uuid": "GPU-x",
            "name": "NVIDIA GB10",
            "memory.used": "[N/A]",
            "memory.total": "[N/A]",
        }
        state_file.write_text(json.dumps(_smi_state(10, gpus=1, extra_gpu=odd)))
        reader = NvidiaSmiReader(StubTransport(state_file), timeout_seconds=30.0)
        reading = await reader.read()
        assert [device.index for device in reading.devices] == [0]
        assert reader.lines_skipped == {"not_available": 1}
        assert reader.skipped() == {"gpu_line_not_available": 1}

    @pytest.mark.asyncio
    async def test_no_driver_is_a_collector_error(self, tmp_path: Path) -> None:
        """nvidia-smi failing (no driver) is GpuCollectorError with the transport's reason."""
        reader = NvidiaSmiReader(StubTransport(tmp_path / "absent.json"), timeout_seconds=30.0)
        with pytest.raises(GpuCollectorError) as caught:
            await reader.read()
        assert caught.value.reason == "command_failed"
        assert "couldn't communicate with the NVIDIA driver" in caught.value.detail

    @pytest.mark.asyncio
    async def test_poller_over_nvidia_smi_sees_memory_rise(self, tmp_path: Path) -> None:
        """Through the stub, the poller emits the rising-then-flat bytes of each poll."""
        state_file = tmp_path / "smi.json"
        steps = [512, 8192, 16384, 30720, 30720]
        state_file.write_text(json.dumps(_smi_state(steps[0], gpus=2)))
        clock = FakeClock(limit=len(steps))

        def advance(count: int) -> None:
            if count < len(steps):
                state_file.write_text(json.dumps(_smi_state(steps[count], gpus=2)))

        clock.on_sleep.append(advance)
        reader = NvidiaSmiReader(StubTransport(state_file), timeout_seconds=30.0, now=clock.now)
        poller = GpuPoller("gpu-host-1", reader, 2.0, sleep=clock.sleep, now=clock.now)
        seen: list[int] = []

        async def emit(reading: GpuReading) -> None:
            seen.append(reading.processes[1].used_memory_bytes)

        with capture_logs() as logs, pytest.raises(StopPollingError):
            await poller.run(emit)
        assert seen == [mib * MIB for mib in steps]
        assert [entry["event"] for entry in logs] == ["gpu_collector_up"]

    @pytest.mark.asyncio
    async def test_poller_over_nvidia_smi_without_driver_is_down(self, tmp_path: Path) -> None:
        """A host whose nvidia-smi fails keeps the poller down with reason command_failed."""
        clock = FakeClock(limit=3)
        reader = NvidiaSmiReader(StubTransport(tmp_path / "absent.json"), timeout_seconds=30.0)
        poller = GpuPoller("gpu-host-1", reader, 2.0, sleep=clock.sleep, now=clock.now)

        async def emit(reading: GpuReading) -> None:
            raise AssertionError("no reading expected")

        with capture_logs() as logs, pytest.raises(StopPollingError):
            await poller.run(emit)
        assert poller.state.reason == "command_failed"
        assert [entry["event"] for entry in logs] == ["gpu_collector_down"]


def _proc_tree(root: Path, cgroups: Mapping[int, str]) -> None:
    for pid, text in cgroups.items():
        (root / str(pid)).mkdir(parents=True)
        (root / str(pid) / "cgroup").write_text(text)


class CountingTransport(LocalTransport):
    def __init__(self) -> None:
        super().__init__("localhost")
        self.commands: list[list[str]] = []

    async def run(self, argv: Sequence[str], timeout: float) -> bytes:
        self.commands.append(list(argv))
        return await super().run(argv, timeout)


class TestCgroupReader:
    CGROUPS: ClassVar[Mapping[int, str]] = {
        4121: "0::/system.slice/vllm-kimi-k25.service\n",
        4122: "12:memory:/system.slice/vllm-b.service\n1:name=systemd:/system.slice/vllm-b.service\n",
        4123: "0::/user.slice/user-1000.slice/session-2.scope\n",
        4124: "0::/\n",
    }

    @pytest.mark.asyncio
    async def test_local_files_vanished_pids_tolerated(self, tmp_path: Path) -> None:
        """Local mode reads each file; a PID without one (exited) is left out."""
        _proc_tree(tmp_path, self.CGROUPS)
        reader = CgroupReader(proc_root=str(tmp_path))
        texts = await reader.read([4121, 4122, 9999])
        assert texts == {4121: self.CGROUPS[4121], 4122: self.CGROUPS[4122]}
        assert await reader.read_units([4121, 4122, 4123, 4124, 9999]) == {
            4121: "vllm-kimi-k25.service",
            4122: "vllm-b.service",
            4123: "session-2.scope",
        }

    @pytest.mark.asyncio
    async def test_remote_batches_in_one_command_each(self, tmp_path: Path) -> None:
        """Through a transport, each batch of PIDs is one command; missing PIDs are skipped."""
        _proc_tree(tmp_path, self.CGROUPS)
        transport = CountingTransport()
        reader = CgroupReader(transport, proc_root=str(tmp_path), batch_size=3)
        units = await reader.read_units([4124, 4123, 4122, 4121, 9999, 9998])
        assert units == {
            4121: "vllm-kimi-k25.service",
            4122: "vllm-b.service",
            4123: "session-2.scope",
        }
        assert len(transport.commands) == 2
        assert transport.commands[0][:4] == ["sh", "-c", 'grep -Hs "" "$@"; exit 0', "sh"]
        assert transport.commands[0][4:] == [
            f"{tmp_path}/{pid}/cgroup" for pid in (4121, 4122, 4123)
        ]
        texts = await reader.read([4122])
        assert texts == {4122: self.CGROUPS[4122]}

    @pytest.mark.asyncio
    async def test_units_of_reads_each_pid_once_while_it_stays(self, tmp_path: Path) -> None:
        """Known PIDs cost no command; a new PID is read alone; a PID that left is forgotten
        and read again when it comes back (the kernel may have reused it)."""
        _proc_tree(tmp_path, self.CGROUPS)
        transport = CountingTransport()
        reader = CgroupReader(transport, proc_root=str(tmp_path))
        first = await reader.units_of([4121, 4122, 4124])
        assert first == {4121: "vllm-kimi-k25.service", 4122: "vllm-b.service"}
        for _ in range(5):
            assert await reader.units_of([4122, 4121, 4124]) == first
        assert len(transport.commands) == 1
        assert await reader.units_of([4121, 4123]) == {
            4121: "vllm-kimi-k25.service",
            4123: "session-2.scope",
        }
        assert transport.commands[1][4:] == [f"{tmp_path}/4123/cgroup"]
        (tmp_path / "4122" / "cgroup").write_text("0::/system.slice/vllm-c.service\n")
        assert await reader.units_of([4121, 4122]) == {
            4121: "vllm-kimi-k25.service",
            4122: "vllm-c.service",  # left, came back: read again
        }
        assert transport.commands[2][4:] == [f"{tmp_path}/4122/cgroup"]
        assert reader.pids_read == 5

    @pytest.mark.asyncio
    async def test_units_of_keeps_nothing_from_a_failed_read(self, tmp_path: Path) -> None:
        """A transport failure raises and caches nothing: the next poll reads the PID again."""
        _proc_tree(tmp_path, self.CGROUPS)

        class FailsOnce(CountingTransport):
            failed = False

            async def run(self, argv: Sequence[str], timeout: float) -> bytes:
                if not self.failed:
                    self.failed = True
                    raise TransportError(self.host, "timeout", "slow host")
                return await super().run(argv, timeout)

        reader = CgroupReader(FailsOnce(), proc_root=str(tmp_path))
        with pytest.raises(GpuCollectorError):
            await reader.units_of([4121])
        assert await reader.units_of([4121]) == {4121: "vllm-kimi-k25.service"}

    @pytest.mark.asyncio
    async def test_no_pids_runs_nothing(self) -> None:
        """An empty PID set returns at once without a command."""
        transport = CountingTransport()
        assert await CgroupReader(transport).read([]) == {}
        assert transport.commands == []

    @pytest.mark.asyncio
    async def test_own_process_through_real_proc(self) -> None:
        """Our own /proc/self cgroup file is read locally and through a transport alike."""
        pid = os.getpid()
        local = await CgroupReader().read([pid])
        remote = await CgroupReader(LocalTransport()).read([pid])
        expected = await asyncio.to_thread(Path(f"/proc/{pid}/cgroup").read_text)
        assert local[pid] == expected
        assert remote == local

    @pytest.mark.asyncio
    async def test_transport_failure_is_a_collector_error(self) -> None:
        """A transport that cannot run the command raises GpuCollectorError."""

        class Broken(LocalTransport):
            async def run(self, argv: Sequence[str], timeout: float) -> bytes:
                raise TransportError(self.host, "ssh_connection_lost", "reset")

        with pytest.raises(GpuCollectorError) as caught:
            await CgroupReader(Broken()).read([1])
        assert caught.value.reason == "ssh_connection_lost"
