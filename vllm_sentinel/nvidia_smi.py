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
bracketed value, ``invalid_number``, ``invalid_uuid``, ``invalid_pid``). Blank lines and the
banner ``No running processes found`` are not rows and are not counted.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Generic, TypeVar

from vllm_sentinel.snapshot import GpuDevice, GpuProcess

__all__ = [
    "MIB",
    "QUERY_APPS_ARGV",
    "QUERY_GPUS_ARGV",
    "ParsedRows",
    "parse_compute_apps",
    "parse_gpus",
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


def parse_gpus(output: str | bytes) -> ParsedRows[GpuDevice]:
    """Parse ``QUERY_GPUS_ARGV`` output into devices (MiB → bytes)."""
    rows: list[GpuDevice] = []
    skipped: Counter[str] = Counter()
    for fields in _rows(output):
        try:
            if len(fields) < 5:
                raise _RowError("wrong_field_count")
            index = _parse_int(fields[0])
            uuid = _parse_uuid(fields[1])
            name = ", ".join(fields[2:-2])
            used = _parse_int(fields[-2]) * MIB
            total = _parse_int(fields[-1]) * MIB
        except _RowError as bad:
            skipped[str(bad)] += 1
            continue
        rows.append(GpuDevice(index, uuid, name, used, total))
    return ParsedRows(tuple(rows), dict(skipped))


def parse_compute_apps(output: str | bytes) -> ParsedRows[GpuProcess]:
    """Parse ``QUERY_APPS_ARGV`` output into processes (MiB → bytes)."""
    rows: list[GpuProcess] = []
    skipped: Counter[str] = Counter()
    for fields in _rows(output):
        try:
            if len(fields) != 3:
                raise _RowError("wrong_field_count")
            uuid = _parse_uuid(fields[0])
            pid = _parse_int(fields[1])
            used = _parse_int(fields[2]) * MIB
        except _RowError as bad:
            skipped[str(bad)] += 1
            continue
        if pid == 0:
            skipped["invalid_pid"] += 1
            continue
        rows.append(GpuProcess(uuid, pid, used))
    return ParsedRows(tuple(rows), dict(skipped))


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
