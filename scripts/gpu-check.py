#!/usr/bin/env python3
"""Check ``NvmlReader`` against a real NVIDIA GPU: run once by hand on a GPU host, not in CI.

A child process allocates device memory through the CUDA driver API (ctypes on
``libcuda.so.1``: ``cuInit``, ``cuDevicePrimaryCtxRetain``, ``cuMemAlloc_v2`` — no torch) in
steps of 1, 2 and 4 GiB, waiting for the parent between steps. The parent polls
``vllm_sentinel.sources.gpu.NvmlReader`` meanwhile and prints one row per poll::

    time_s  device_used_bytes  child_pid  child_used_bytes

It exits 0 only if NVML showed the child's PID and the child's bytes grew by each allocated
step within ±64 MiB; 1 if not; 2 if the check could not run (no driver, no CUDA, too little
free memory). The whole run stays under about a minute.

    python scripts/gpu-check.py [--device 0] [--steps-gib 1,2,4] [--deadline 55]

Inside a container without the host's PID namespace NVML may report host PIDs, so the
child's own PID is never seen; the script then says so and names the PID that did grow.
"""

from __future__ import annotations

import argparse
import asyncio
import ctypes
import os
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from vllm_sentinel.sources.gpu import NvmlReader

GIB = 1 << 30
MIB = 1 << 20
TOLERANCE_BYTES = 64 * MIB
POLL_SECONDS = 0.2
STEP_TIMEOUT_SECONDS = 10.0
SCRIPT = Path(__file__).resolve()
CHECKOUT = SCRIPT.parents[1]


# -- child: allocate through the CUDA driver API -------------------------------------------


class CudaError(Exception):
    """A CUDA driver call returned an error code."""


def _cuda() -> ctypes.CDLL:
    cuda = ctypes.CDLL("libcuda.so.1")
    p_void = ctypes.c_void_p
    cuda.cuInit.argtypes = [ctypes.c_uint]
    cuda.cuDeviceGet.argtypes = [ctypes.POINTER(ctypes.c_int), ctypes.c_int]
    cuda.cuDevicePrimaryCtxRetain.argtypes = [ctypes.POINTER(p_void), ctypes.c_int]
    cuda.cuCtxSetCurrent.argtypes = [p_void]
    cuda.cuMemAlloc_v2.argtypes = [ctypes.POINTER(ctypes.c_uint64), ctypes.c_size_t]
    cuda.cuMemsetD8_v2.argtypes = [ctypes.c_uint64, ctypes.c_ubyte, ctypes.c_size_t]
    cuda.cuCtxSynchronize.argtypes = []
    cuda.cuMemFree_v2.argtypes = [ctypes.c_uint64]
    cuda.cuGetErrorName.argtypes = [ctypes.c_int, ctypes.POINTER(ctypes.c_char_p)]
    return cuda


def _check(cuda: ctypes.CDLL, name: str, result: int) -> None:
    if result != 0:
        text = ctypes.c_char_p()
        cuda.cuGetErrorName(result, ctypes.byref(text))
        label = text.value.decode() if text.value else str(result)
        raise CudaError(f"{name} failed: {label}")


def _say(line: str) -> None:
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


def run_child(ordinal: int, steps: list[int]) -> int:
    """Allocate ``steps`` bytes one by one, reporting on stdout, waiting on stdin."""
    try:
        cuda = _cuda()
        _check(cuda, "cuInit", cuda.cuInit(0))
        device = ctypes.c_int()
        _check(cuda, "cuDeviceGet", cuda.cuDeviceGet(ctypes.byref(device), ordinal))
        context = ctypes.c_void_p()
        _check(
            cuda,
            "cuDevicePrimaryCtxRetain",
            cuda.cuDevicePrimaryCtxRetain(ctypes.byref(context), device.value),
        )
        _check(cuda, "cuCtxSetCurrent", cuda.cuCtxSetCurrent(context))
        # Warm up (first allocation, first memset kernel) so that what the context adds
        # lazily is in the baseline, not in the first step.
        warm = ctypes.c_uint64()
        _check(cuda, "cuMemAlloc_v2", cuda.cuMemAlloc_v2(ctypes.byref(warm), 2 * MIB))
        _check(cuda, "cuMemsetD8_v2", cuda.cuMemsetD8_v2(warm.value, 0, 2 * MIB))
        _check(cuda, "cuCtxSynchronize", cuda.cuCtxSynchronize())
        _say(f"READY {os.getpid()}")
        pointers: list[int] = [warm.value]
        total = 0
        for size in steps:
            if sys.stdin.readline().strip() != "next":
                return 3
            pointer = ctypes.c_uint64()
            _check(cuda, "cuMemAlloc_v2", cuda.cuMemAlloc_v2(ctypes.byref(pointer), size))
            _check(cuda, "cuMemsetD8_v2", cuda.cuMemsetD8_v2(pointer.value, 0, size))
            _check(cuda, "cuCtxSynchronize", cuda.cuCtxSynchronize())
            pointers.append(pointer.value)
            total += size
            _say(f"ALLOCATED {total}")
        sys.stdin.readline()  # "exit"
        for pointer_value in pointers:
            cuda.cuMemFree_v2(pointer_value)
        return 0
    except (OSError, CudaError) as error:
        _say(f"ERROR {error}")
        return 2


# -- parent: poll NVML while the child allocates -------------------------------------------


class Table:
    """Prints one row per NVML poll."""

    HEADER = ("time_s", "device_used_bytes", "child_pid", "child_used_bytes")

    def __init__(self, started: float) -> None:
        self.started = started
        print("{:>7}  {:>18}  {:>9}  {:>16}".format(*self.HEADER))

    def row(self, device_used: int, pid: int, child_used: int | None, note: str = "") -> None:
        shown = "-" if child_used is None else str(child_used)
        elapsed = time.monotonic() - self.started
        print(f"{elapsed:7.2f}  {device_used:18d}  {pid:9d}  {shown:>16}  {note}".rstrip())


async def _poll(
    reader: NvmlReader, pid: int, table: Table, note: str = ""
) -> tuple[int | None, dict[int, int]]:
    """One NVML reading: the child's bytes (all GPUs) and every PID's bytes."""
    reading = await reader.read()
    by_pid: dict[int, int] = {}
    for process in reading.processes:
        by_pid[process.pid] = by_pid.get(process.pid, 0) + process.used_memory_bytes
    child_uuids = {p.gpu_uuid for p in reading.processes if p.pid == pid}
    devices = [d for d in reading.devices if d.uuid in child_uuids] or list(reading.devices[:1])
    device_used = sum(d.memory_used_bytes for d in devices)
    table.row(device_used, pid, by_pid.get(pid), note)
    return by_pid.get(pid), by_pid


async def _read_line(stream: asyncio.StreamReader, limit_seconds: float) -> str:
    line = await asyncio.wait_for(stream.readline(), limit_seconds)
    return line.decode().strip()


async def run_parent(ordinal: int, steps: list[int]) -> int:
    sys.path.insert(0, str(CHECKOUT))
    from vllm_sentinel.errors import GpuCollectorError
    from vllm_sentinel.sources import gpu

    reader = gpu.NvmlReader()
    try:
        first = await reader.read()
    except GpuCollectorError as error:
        print(f"cannot read NVML: {error.reason}: {error.detail}")
        return 2
    if not first.devices:
        print("NVML reports no GPU")
        return 2
    for device in first.devices:
        free = device.memory_total_bytes - device.memory_used_bytes
        print(f"GPU {device.index} {device.name} {device.uuid}: {free} bytes free")
    pids_before = {p.pid for p in first.processes}

    child = await asyncio.create_subprocess_exec(
        sys.executable,
        str(SCRIPT),
        "--child",
        "--device",
        str(ordinal),
        "--steps-gib",
        ",".join(str(step // GIB) for step in steps),
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
    )
    assert child.stdin is not None
    assert child.stdout is not None
    table = Table(time.monotonic())
    ok = True
    try:
        ready = await _read_line(child.stdout, 30.0)
        if not ready.startswith("READY "):
            print(f"child failed: {ready or 'no output'}")
            return 2
        pid = child.pid
        baseline = await _settle(reader, pid, table, None, "context")
        if baseline is None:
            _explain_missing_pid(pid, pids_before, await _poll(reader, pid, table))
            print("FAIL")
            return 1
        previous = baseline
        for size in steps:
            child.stdin.write(b"next\n")
            await child.stdin.drain()
            allocated = await _read_line(child.stdout, STEP_TIMEOUT_SECONDS)
            if not allocated.startswith("ALLOCATED "):
                print(f"child failed: {allocated or 'no output'}")
                return 2
            observed = await _settle(reader, pid, table, previous + size, f"+{size // GIB} GiB")
            if observed is None:
                print(f"step +{size} bytes: child not seen")
                ok = False
                break
            growth = observed - previous
            good = abs(growth - size) <= TOLERANCE_BYTES
            print(
                f"step +{size} bytes: NVML growth {growth} bytes "
                f"({'ok' if good else 'MISMATCH'}, tolerance ±{TOLERANCE_BYTES})"
            )
            ok = ok and good
            previous = observed
        child.stdin.write(b"exit\n")
        await child.stdin.drain()
        await asyncio.wait_for(child.wait(), 15.0)
    finally:
        if child.returncode is None:
            child.kill()
            await child.wait()
        await reader.close()
    print("PASS" if ok else "FAIL")
    return 0 if ok else 1


async def _settle(
    reader: NvmlReader, pid: int, table: Table, target: int | None, note: str
) -> int | None:
    """Poll until the child is seen (at ``target`` ±tolerance if given); its last bytes."""
    deadline = time.monotonic() + STEP_TIMEOUT_SECONDS
    last: int | None = None
    while time.monotonic() < deadline:
        last, _ = await _poll(reader, pid, table, note)
        if last is not None and (target is None or abs(last - target) <= TOLERANCE_BYTES):
            return last
        await asyncio.sleep(POLL_SECONDS)
    return last


def _explain_missing_pid(
    pid: int, pids_before: set[int], last: tuple[int | None, dict[int, int]]
) -> None:
    _, by_pid = last
    new = {other: used for other, used in by_pid.items() if other not in pids_before}
    print(f"child PID {pid} never appeared in nvmlDeviceGetComputeRunningProcesses")
    if new:
        print(
            f"new PIDs that did appear: {new} — NVML reports PIDs of another PID namespace "
            "(container without --pid=host?)"
        )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--device", type=int, default=0, help="CUDA device ordinal (visible)")
    parser.add_argument("--steps-gib", default="1,2,4", help="allocation steps in GiB")
    parser.add_argument("--deadline", type=float, default=55.0, help="seconds for the run")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    options = parser.parse_args()
    steps = [int(part) * GIB for part in options.steps_gib.split(",") if part.strip()]
    if options.child:
        return run_child(options.device, steps)

    async def bounded() -> int:
        try:
            async with asyncio.timeout(options.deadline):
                return await run_parent(options.device, steps)
        except TimeoutError:
            print(f"FAIL: not done within {options.deadline:g} s")
            return 1

    return asyncio.run(bounded())


if __name__ == "__main__":
    sys.exit(main())
