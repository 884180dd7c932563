"""Which systemd unit holds which GPU memory (core: pure, no I/O).

Two sources name a process's unit:

1. its cgroup, from ``/proc/PID/cgroup`` (``parse_cgroup``) — authoritative while the process
   lives, and the only way to see workers that never logged;
2. failing that (the file could not be read, a PID namespace hides it, the process is in no
   unit), the PIDs the journal showed for the unit's current incarnation — vLLM prints the
   worker PIDs in its line prefixes (``(VllmWorker TP0 pid=4121)``).

``/proc/PID/cgroup`` holds one ``hierarchy-ID:controllers:path`` line per hierarchy
(cgroups(7)). Under cgroup v2 there is one line, ``0::/system.slice/vllm-kimi-k25.service``;
under v1 the ``name=systemd`` line carries the unit; hybrid hosts have both. systemd places a
unit's processes at ``<slices>/<unit>`` and a unit may make its own sub-cgroups below that
(``Delegate=``: ``/system.slice/x.service/payload``). User units live below the user manager
(``/user.slice/user-1000.slice/user@1000.service/app.slice/vllm.service``); there the user
unit is reported. Containers started through systemd are scopes
(``/system.slice/docker-<id>.scope``, ``…/cri-containerd-<id>.scope``); cgroupfs-driven ones
(``/docker/<id>``) and a namespaced view (``0::/``) belong to no unit.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Iterable, Mapping

from vllm_sentinel.engine.snapshot import GpuProcessUsage, GpuReading

__all__ = [
    "attribute_processes",
    "held_by_others",
    "parse_cgroup",
    "place_processes",
    "unit_from_cgroup_path",
]

_UNIT_NAME = re.compile(r"[A-Za-z0-9:_.\\@-]{1,250}\.(?:service|scope|socket|mount|swap)")
_USER_MANAGER = re.compile(r"user@\d+\.service")
_DELETED = " (deleted)"


def parse_cgroup(text: str) -> str | None:
    """Return the systemd unit named by ``/proc/PID/cgroup`` content, or ``None``.

    The unified (``0::``) line is read first, then v1's ``name=systemd`` line, then any other
    v1 hierarchy; the first one that names a unit wins.
    """
    unified: list[str] = []
    named: list[str] = []
    others: list[str] = []
    for line in text.splitlines():
        parts = line.strip().split(":", 2)
        if len(parts) != 3:
            continue
        hierarchy, controllers, path = parts
        if hierarchy == "0" and controllers == "":
            unified.append(path)
        elif controllers == "name=systemd":
            named.append(path)
        else:
            others.append(path)
    for path in (*unified, *named, *others):
        unit = unit_from_cgroup_path(path)
        if unit is not None:
            return unit
    return None


def unit_from_cgroup_path(path: str) -> str | None:
    """Return the unit a cgroup path belongs to (the user unit below a user manager)."""
    path = path.strip().removesuffix(_DELETED)
    components = [_unescape(part) for part in path.split("/") if part]
    unit, rest = _first_unit(components)
    if unit is not None and _USER_MANAGER.fullmatch(unit):
        user_unit, _ = _first_unit(rest)
        if user_unit is not None:
            return user_unit
    return unit


def attribute_processes(
    reading: GpuReading,
    pid_units: Mapping[int, str],
    journal_pids: Mapping[str, Collection[int]],
) -> dict[str, dict[int, int]]:
    """Sum the GPU memory of each unit's processes, per GPU index.

    Args:
        reading: one poll; its devices map each process's GPU uuid to the GPU index.
        pid_units: PID → unit from the processes' cgroups (``parse_cgroup``); PIDs whose
            cgroup could not be read or named no unit are absent.
        journal_pids: unit → PIDs the journal showed for its current incarnation; used only
            for PIDs absent from ``pid_units``. A PID claimed by more than one unit there is
            ambiguous and left out.

    Returns:
        unit → {GPU index: bytes}. Units with no attributed process are absent; processes
        on a GPU missing from ``reading.devices`` are left out.
    """
    index_of = {device.uuid: device.index for device in reading.devices}
    journal_owner = _journal_owners(journal_pids.items())
    usage: dict[str, dict[int, int]] = {}
    for process in reading.processes:
        index = index_of.get(process.gpu_uuid)
        if index is None:
            continue
        unit = pid_units.get(process.pid) or journal_owner.get(process.pid)
        if unit is None:
            continue
        per_gpu = usage.setdefault(unit, {})
        per_gpu[index] = per_gpu.get(index, 0) + process.used_memory_bytes
    return usage


def place_processes(
    reading: GpuReading,
    pid_units: Mapping[int, str],
    journal_pids: Mapping[str, Collection[int]],
) -> tuple[GpuProcessUsage, ...]:
    """Every GPU process of a reading with its GPU index and unit (``None`` when unknown).

    The unit comes from the same sources as ``attribute_processes`` (cgroup first, then the
    journal's PIDs); unlike it, processes of no watched unit are kept, so a hint can name what
    else holds GPU memory. Processes on a GPU missing from ``reading.devices`` are left out.
    """
    index_of = {device.uuid: device.index for device in reading.devices}
    journal_owner = _journal_owners(journal_pids.items())
    placed = []
    for process in reading.processes:
        index = index_of.get(process.gpu_uuid)
        if index is None:
            continue
        unit = pid_units.get(process.pid) or journal_owner.get(process.pid)
        placed.append(GpuProcessUsage(process.pid, index, process.used_memory_bytes, unit))
    return tuple(placed)


def held_by_others(placed: Iterable[GpuProcessUsage], unit: str) -> dict[int, int]:
    """Bytes the processes of anything but ``unit`` hold on each GPU index (other units, and
    processes of no known unit), from ``place_processes``' result."""
    held: dict[int, int] = {}
    for usage in placed:
        if usage.unit != unit:
            held[usage.gpu] = held.get(usage.gpu, 0) + usage.used_memory_bytes
    return held


def _journal_owners(items: Iterable[tuple[str, Collection[int]]]) -> dict[int, str]:
    owners: dict[int, str] = {}
    ambiguous: set[int] = set()
    for unit, pids in items:
        for pid in pids:
            if pid in owners and owners[pid] != unit:
                ambiguous.add(pid)
            owners.setdefault(pid, unit)
    for pid in ambiguous:
        del owners[pid]
    return owners


def _first_unit(components: list[str]) -> tuple[str | None, list[str]]:
    """Skip leading slices; the next component is the unit if it looks like one."""
    for position, component in enumerate(components):
        if component.endswith(".slice"):
            continue
        if _UNIT_NAME.fullmatch(component):
            return component, components[position + 1 :]
        return None, []
    return None, []


def _unescape(component: str) -> str:
    """Undo systemd's cgroup escaping (a ``_`` prefix on names that would clash)."""
    return component[1:] if component.startswith("_") else component
