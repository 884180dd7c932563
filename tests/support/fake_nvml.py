"""``FakeNvml``: a scripted stand-in for the ``pynvml`` module (tests only).

It implements the pynvml functions ``NvmlReader`` calls and raises the *real* pynvml
exception classes (``FakeNvml().NVMLError_GpuIsLost is pynvml.NVMLError_GpuIsLost``), so
``except nvml.NVMLError`` behaves as it does against a driver.

The script is a list of frames. Each ``nvmlDeviceGetCount()`` call — the first call of every
read — moves to the next frame and stays on the last one when the script runs out, so
``[ramp_1, ramp_2, ramp_3, flat]`` reads as memory rising in steps, then flat. A frame is a
tuple of ``FakeGpu`` or an NVML error, which that ``nvmlDeviceGetCount()`` raises.
``init_errors`` makes the first ``nvmlInit()`` calls fail in order; ``no_library()`` builds
a fake on which every ``nvmlInit()`` fails like a host without a driver. A ``FakeGpu``'s
``errors`` make single per-device functions fail for that GPU only (a GPU that fell off the
bus, a process list NVML refuses), while the other GPUs of the frame answer.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any, TypeAlias

import pynvml

__all__ = ["GIB", "MIB", "FakeGpu", "FakeNvml", "Frame", "nvml_error"]

MIB = 1 << 20
GIB = 1 << 30


@dataclass(frozen=True)
class FakeGpu:
    """One GPU in one frame; ``processes`` are (PID, bytes, or ``None`` if NVML can't tell).

    ``errors`` maps a pynvml function name (``"nvmlDeviceGetMemoryInfo"``) to the NVML error
    that function raises for this GPU.
    """

    uuid: str
    name: str | bytes
    total_bytes: int
    used_bytes: int
    processes: tuple[tuple[int, int | None], ...] = ()
    processes_supported: bool = True
    errors: Mapping[str, pynvml.NVMLError] = field(default_factory=dict, hash=False)


Frame: TypeAlias = tuple[FakeGpu, ...] | pynvml.NVMLError


def nvml_error(name: str) -> pynvml.NVMLError:
    """An instance of the real pynvml error class ``name`` (``"NVMLError_GpuIsLost"``)."""
    error: pynvml.NVMLError = getattr(pynvml, name)()
    return error


@dataclass(frozen=True)
class _Handle:
    index: int


class FakeNvml:
    """The pynvml functions ``NvmlReader`` uses, scripted by frames (see the module doc)."""

    NVMLError = pynvml.NVMLError
    nvmlMemory_v2 = pynvml.nvmlMemory_v2  # noqa: N815  (pynvml's own name)

    def __init__(
        self,
        frames: Sequence[Frame],
        *,
        init_errors: Sequence[pynvml.NVMLError] = (),
        broken: pynvml.NVMLError | None = None,
        memory_v2: bool = True,
    ) -> None:
        self.frames = list(frames)
        self.position = -1
        self.init_errors = list(init_errors)
        self.broken = broken
        self.memory_v2 = memory_v2
        self.initialized = False
        self.init_calls = 0
        self.shutdown_calls = 0
        self.calls: list[str] = []
        self.thread_ids: set[int] = set()

    @classmethod
    def no_library(cls) -> FakeNvml:
        """A fake for a host without ``libnvidia-ml.so.1``."""
        return cls([], broken=nvml_error("NVMLError_LibraryNotFound"))

    def __getattr__(self, name: str) -> Any:
        if name.startswith("NVMLError_"):
            return getattr(pynvml, name)
        raise AttributeError(name)

    # -- pynvml functions ---------------------------------------------------------------

    def nvmlInit(self) -> None:
        self._record("nvmlInit")
        self.init_calls += 1
        if self.broken is not None:
            raise self.broken
        if self.init_errors:
            raise self.init_errors.pop(0)
        self.initialized = True

    def nvmlShutdown(self) -> None:
        self._record("nvmlShutdown")
        self._check_initialized()
        self.shutdown_calls += 1
        self.initialized = False

    def nvmlDeviceGetCount(self) -> int:
        self._record("nvmlDeviceGetCount")
        self._check_initialized()
        if self.position < len(self.frames) - 1:
            self.position += 1
        frame = self._frame()
        if isinstance(frame, BaseException):
            raise frame
        return len(frame)

    def nvmlDeviceGetHandleByIndex(self, index: int) -> _Handle:
        self._gpu(_Handle(index), "nvmlDeviceGetHandleByIndex")
        return _Handle(index)

    def nvmlDeviceGetUUID(self, handle: _Handle) -> str:
        return self._gpu(handle, "nvmlDeviceGetUUID").uuid

    def nvmlDeviceGetName(self, handle: _Handle) -> str | bytes:
        return self._gpu(handle, "nvmlDeviceGetName").name

    def nvmlDeviceGetMemoryInfo(self, handle: _Handle, version: int | None = None) -> Any:
        gpu = self._gpu(handle, "nvmlDeviceGetMemoryInfo")
        if version is not None and not self.memory_v2:
            raise nvml_error("NVMLError_FunctionNotFound")
        free = gpu.total_bytes - gpu.used_bytes
        if version is None:
            return SimpleNamespace(total=gpu.total_bytes, free=free, used=gpu.used_bytes)
        return SimpleNamespace(
            version=version, total=gpu.total_bytes, reserved=0, free=free, used=gpu.used_bytes
        )

    def nvmlDeviceGetComputeRunningProcesses(self, handle: _Handle) -> list[Any]:
        gpu = self._gpu(handle, "nvmlDeviceGetComputeRunningProcesses")
        if not gpu.processes_supported:
            raise nvml_error("NVMLError_NotSupported")
        return [
            SimpleNamespace(
                pid=pid,
                usedGpuMemory=used,
                gpuInstanceId=0xFFFFFFFF,
                computeInstanceId=0xFFFFFFFF,
            )
            for pid, used in gpu.processes
        ]

    # -- helpers --------------------------------------------------------------------------

    def _record(self, name: str) -> None:
        self.calls.append(name)
        self.thread_ids.add(threading.get_ident())

    def _check_initialized(self) -> None:
        if not self.initialized:
            raise nvml_error("NVMLError_Uninitialized")

    def _frame(self) -> Frame:
        if not self.frames:
            return ()
        return self.frames[max(self.position, 0)]

    def _gpu(self, handle: _Handle, function: str) -> FakeGpu:
        """Record the call of ``function`` for ``handle``'s GPU and raise what it scripts."""
        self._record(function)
        self._check_initialized()
        frame = self._frame()
        if isinstance(frame, BaseException) or not 0 <= handle.index < len(frame):
            raise nvml_error("NVMLError_InvalidArgument")
        gpu = frame[handle.index]
        if function in gpu.errors:
            raise gpu.errors[function]
        return gpu
