"""Parse ``nvidia-smi`` CSV queries into GPU devices and processes (core: pure, no I/O).

The remote GPU path runs two queries (``QUERY_GPUS_ARGV``, ``QUERY_APPS_ARGV``). With
``--format=csv,noheader,nounits`` nvidia-smi prints one row per GPU or compute process, the
fields in the order asked for, separated by ``", "``, memory as whole MiB and no header::

    0, GPU-8d1d4a5c-7f36-2e1b-94b8-3a6f0c2e5d11, NVIDIA H200, 97612, 143771
    GPU-8d1d4a5c-7f36-2e1b-94b8-3a6f0c2e5d11, 48211, 97102

Fields are not quoted. A value the driver cannot give reads ``[N/A]`` (``[Not Supported]``
on older drivers, ``[Insufficient Permissions]``, ``[Unknown Error]`` …). GPU names contain
spaces (``NVIDIA H100 80GB HBM3``); a comma in a name is also tolerated, because the name
is taken as everything between the second field and the last two. ``used_memory`` is the
documented alias of ``used_gpu_memory``.

Never raises on input: a row that cannot become a ``GpuDevice`` or ``GpuProcess`` is
dropped and counted in ``skipped`` by reason (``wrong_field_count``, ``not_available`` for a
bracketed value, ``invalid_number``, ``invalid_uuid``, ``invalid_pid``, ``line_too_long``).
Blank lines and the banner ``No running processes found`` are not rows and are not counted.

**Streams.** ``stream_argv(QUERY_…_ARGV, interval)`` adds ``-lms N``: nvidia-smi then stays
up and prints the same rows again every N ms (header-less, no separator between rounds; it
flushes its output after each round). ``SmiStreamDecoder`` reads such a stream incrementally:
``feed(chunk)`` takes bytes in any chunking and returns the rounds it completed, ``flush()``
the round in progress when the stream went quiet (the caller's timer: a round is written at
once, so a short silence ends it). A GPU round also ends where the GPU index stops growing
(``0, 1, … 7`` then ``0`` again). A compute-apps round with no process prints nothing at all,
so its absence is the caller's to judge by age (``gpu.NvidiaSmiStreamReader``).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Generic, Literal, TypeVar

from vllm_sentinel.engine.decode.line_buffer import LineBuffer
from vllm_sentinel.engine.snapshot import GpuDevice, GpuProcess

__all__ = [
    "MIB",
    "QUERY_APPS_ARGV",
    "QUERY_GPUS_ARGV",
    "ParsedRows",
    "SmiStreamDecoder",
    "parse_compute_apps",
    "parse_gpus",
    "stream_argv",
]

MIB = 1 << 20
"""Bytes in one MiB: nvidia-smi's ``nounits`` memory unit."""

QUERY_GPUS_ARGV: tuple[str, ...] = (
    "nvidia-smi",
    "--query-gpu=index,uuid,name,memory.used,memory.total",
    "--format=csv,noheader,nounits",
)
"""One row per GPU: index, uuid, name, used MiB, total MiB."""

QUERY_APPS_ARGV: tuple[str, ...] = (
    "nvidia-smi",
    "--query-compute-apps=gpu_uuid,pid,used_memory",
    "--format=csv,noheader,nounits",
)
"""One row per (compute process, GPU): GPU uuid, PID, used MiB."""

_MAX_LINE_BYTES = 4096  # a row is ~100 bytes; a longer line is no row of ours


def stream_argv(query: tuple[str, ...], interval_seconds: float) -> tuple[str, ...]:
    """``query`` (``QUERY_GPUS_ARGV`` or ``QUERY_APPS_ARGV``) repeated by nvidia-smi itself
    every ``interval_seconds`` (``-lms``, whole milliseconds, at least 1)."""
    return (*query, "-lms", str(max(1, round(interval_seconds * 1000))))


_SEPARATOR = ","
_NOT_ROWS = frozenset({"no running processes found", "no running compute processes found"})

RowT = TypeVar("RowT")


@dataclass(frozen=True, slots=True)
class ParsedRows(Generic[RowT]):
    """The rows parsed from one query's output, and the lines dropped by reason."""

    rows: tuple[RowT, ...]
    skipped: Mapping[str, int] = field(default_factory=dict)

    @property
    def skipped_total(self) -> int:
        """Lines dropped, all reasons together."""
        return sum(self.skipped.values())


class _RowError(Exception):
    """A row that is dropped; the argument is the ``skipped`` reason."""


def _gpu_row(fields: list[str]) -> GpuDevice:
    if len(fields) < 5:
        raise _RowError("wrong_field_count")
    index = _parse_int(fields[0])
    uuid = _parse_uuid(fields[1])
    name = ", ".join(fields[2:-2])
    used = _parse_int(fields[-2]) * MIB
    total = _parse_int(fields[-1]) * MIB
    return GpuDevice(index, uuid, name, used, total)


def _app_row(fields: list[str]) -> GpuProcess:
    if len(fields) != 3:
        raise _RowError("wrong_field_count")
    uuid = _parse_uuid(fields[0])
    pid = _parse_int(fields[1])
    used = _parse_int(fields[2]) * MIB
    if pid == 0:
        raise _RowError("invalid_pid")
    return GpuProcess(uuid, pid, used)


def parse_gpus(output: str | bytes) -> ParsedRows[GpuDevice]:
    """Parse ``QUERY_GPUS_ARGV`` output into devices (MiB → bytes)."""
    rows: list[GpuDevice] = []
    skipped: Counter[str] = Counter()
    for fields in _rows(output):
        try:
            rows.append(_gpu_row(fields))
        except _RowError as bad:
            skipped[str(bad)] += 1
    return ParsedRows(tuple(rows), dict(skipped))


def parse_compute_apps(output: str | bytes) -> ParsedRows[GpuProcess]:
    """Parse ``QUERY_APPS_ARGV`` output into processes (MiB → bytes)."""
    rows: list[GpuProcess] = []
    skipped: Counter[str] = Counter()
    for fields in _rows(output):
        try:
            rows.append(_app_row(fields))
        except _RowError as bad:
            skipped[str(bad)] += 1
    return ParsedRows(tuple(rows), dict(skipped))


class SmiStreamDecoder:
    """Rounds of one ``nvidia-smi --query-… -lms N`` stream, from its bytes in any chunking.

    Args:
        query: ``"gpus"`` (``QUERY_GPUS_ARGV`` rows) or ``"apps"`` (``QUERY_APPS_ARGV`` rows).
        skipped: the counter to count dropped lines in (a reader's, kept across the streams
            it restarts); a new one by default.

    Attributes:
        skipped: lines dropped so far, by reason (as ``parse_gpus``/``parse_compute_apps``,
            plus ``line_too_long`` for a line over 4 KiB); a round keeps its good rows.
        last_skipped_line: the last line dropped (at most 200 characters): nvidia-smi prints
            its errors on stdout ("No devices were found"), so this names why a stream died.
    """

    def __init__(
        self, query: Literal["gpus", "apps"], *, skipped: Counter[str] | None = None
    ) -> None:
        self._query = query
        self._lines = LineBuffer(_MAX_LINE_BYTES, keep_truncated=False)
        self._overflows_counted = 0
        self._devices: list[GpuDevice] = []
        self._processes: list[GpuProcess] = []
        self.skipped: Counter[str] = Counter() if skipped is None else skipped
        self.last_skipped_line = ""

    @property
    def pending(self) -> bool:
        """Whether a round has rows not handed out yet (``flush`` would return it)."""
        return bool(self._devices or self._processes)

    def feed(self, chunk: bytes) -> list[ParsedRows[GpuDevice]]:
        """Read ``chunk``; return the GPU rounds it completed (a new round starts where the GPU
        index does not grow). The round in progress stays for ``flush_gpus``; compute-apps
        rows have no such mark, so an apps stream returns none here (``flush_apps``)."""
        completed, block = self._lines.push(chunk)
        lines: list[bytes] = [] if completed is None else [completed]
        if block is not None:
            for line in block.split(b"\n"):
                if self._lines.is_too_long(line):
                    continue
                lines.append(line)
        self._count_overflows()
        if self._query == "apps":
            for fields in _rows(b"\n".join(lines)):
                try:
                    self._processes.append(_app_row(fields))
                except _RowError as bad:
                    self._skip(str(bad), fields)
            return []
        rounds: list[ParsedRows[GpuDevice]] = []
        for fields in _rows(b"\n".join(lines)):
            try:
                device = _gpu_row(fields)
            except _RowError as bad:
                self._skip(str(bad), fields)
                continue
            if self._devices and device.index <= self._devices[-1].index:
                rounds.append(ParsedRows(tuple(self._devices)))
                self._devices = []
            self._devices.append(device)
        return rounds

    def flush_gpus(self) -> ParsedRows[GpuDevice] | None:
        """The GPU round in progress (the stream went quiet), or ``None`` if it has no row."""
        if not self._devices:
            return None
        devices, self._devices = tuple(self._devices), []
        return ParsedRows(devices)

    def flush_apps(self) -> ParsedRows[GpuProcess] | None:
        """The compute-apps round in progress, or ``None`` if it has no row."""
        if not self._processes:
            return None
        processes, self._processes = tuple(self._processes), []
        return ParsedRows(processes)

    def _skip(self, reason: str, fields: list[str]) -> None:
        self.skipped[reason] += 1
        self.last_skipped_line = ", ".join(fields)[:200]

    def _count_overflows(self) -> None:
        overflows = self._lines.overflows
        if overflows != self._overflows_counted:
            self.skipped["line_too_long"] += overflows - self._overflows_counted
            self._overflows_counted = overflows


def _rows(output: str | bytes) -> list[list[str]]:
    text = output.decode("utf-8", errors="replace") if isinstance(output, bytes) else output
    rows: list[list[str]] = []
    for line in text.splitlines():
        stripped = line.strip()
        if not stripped or stripped.lower() in _NOT_ROWS:
            continue
        rows.append([value.strip() for value in stripped.split(_SEPARATOR)])
    return rows


def _parse_int(value: str) -> int:
    if value.startswith("[") and value.endswith("]"):
        raise _RowError("not_available")
    if value.upper() in {"N/A", "NOT SUPPORTED"}:
        raise _RowError("not_available")
    if value.endswith("MiB"):  # a caller that forgot ``nounits``
        value = value[:-3].rstrip()
    if not value.isascii() or not value.isdigit():
        raise _RowError("invalid_number")
    return int(value)


def _parse_uuid(value: str) -> str:
    if value.startswith("[") and value.endswith("]"):
        raise _RowError("not_available")
    if not value or " " in value:
        raise _RowError("invalid_uuid")
    return value
