"""Tests for vllm_sentinel.sources.attribution: cgroup → unit, and GPU memory per unit."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from vllm_sentinel.engine.snapshot import GpuDevice, GpuProcess, GpuReading
from vllm_sentinel.sources.attribution import (
    attribute_processes,
    parse_cgroup,
    unit_from_cgroup_path,
)

GIB = 1 << 30
AT = datetime(2025, 6, 1, 12, 0, tzinfo=UTC)

V1_HYBRID = """\
12:pids:/system.slice/vllm-kimi-k25.service
11:memory:/system.slice/vllm-kimi-k25.service
10:devices:/system.slice/vllm-kimi-k25.service
9:cpu,cpuacct:/system.slice/vllm-kimi-k25.service
1:name=systemd:/system.slice/vllm-kimi-k25.service
0::/system.slice/vllm-kimi-k25.service
"""


class TestParseCgroup:
    @pytest.mark.parametrize(
        ("text", "unit"),
        [
            ("0::/system.slice/vllm-kimi-k25.service\n", "vllm-kimi-k25.service"),
            ("1:name=systemd:/system.slice/x.service\n", "x.service"),
            (V1_HYBRID, "vllm-kimi-k25.service"),
            ("0::/system.slice/x.service/payload\n", "x.service"),
            ("0::/system.slice/vllm@qwen3.service\n", "vllm@qwen3.service"),
            ("0::/vllm.slice/vllm-inner.slice/vllm-a.service\n", "vllm-a.service"),
            (
                "0::/user.slice/user-1000.slice/user@1000.service/app.slice/vllm.service\n",
                "vllm.service",
            ),
            ("0::/user.slice/user-1000.slice/session-3.scope\n", "session-3.scope"),
            (
                "0::/user.slice/user-1000.slice/user@1000.service/init.scope\n",
                "init.scope",
            ),
            ("0::/system.slice/docker-0123456789abcdef.scope\n", "docker-0123456789abcdef.scope"),
            (
                "0::/kubepods.slice/kubepods-burstable.slice/"
                "kubepods-burstable-pod1234.slice/cri-containerd-abcd.scope\n",
                "cri-containerd-abcd.scope",
            ),
            ("0::/system.slice/_cpu.service\n", "cpu.service"),
            ("0::/system.slice/gone.service (deleted)\n", "gone.service"),
        ],
    )
    def test_unit_is_found(self, text: str, unit: str) -> None:
        """System, nested, user, container and escaped cgroups name their unit."""
        assert parse_cgroup(text) == unit

    @pytest.mark.parametrize(
        "text",
        [
            "",
            "0::/\n",
            "0::/docker/0123456789abcdef\n",
            "0::/user.slice/user-1000.slice\n",
            "12:memory:/docker/abc\n1:name=systemd:/docker/abc\n",
            "not a cgroup file\n",
        ],
    )
    def test_no_unit(self, text: str) -> None:
        """Root, cgroupfs containers, bare slices and junk name no unit."""
        assert parse_cgroup(text) is None

    def test_hybrid_host_with_empty_unified_line_uses_name_systemd(self) -> None:
        """On a hybrid host whose unified line is '/', the name=systemd line decides."""
        text = "1:name=systemd:/system.slice/x.service\n0::/\n"
        assert parse_cgroup(text) == "x.service"

    def test_path_helper_reads_one_path(self) -> None:
        """unit_from_cgroup_path works on a bare path too."""
        assert unit_from_cgroup_path("/system.slice/a.service/sub/deeper") == "a.service"


def _reading() -> GpuReading:
    devices = tuple(
        GpuDevice(index, f"GPU-{index}", "NVIDIA H200", 0, 143771 << 20) for index in range(4)
    )
    processes = (
        GpuProcess("GPU-0", 100, 2 * GIB),  # main process, cgroup known
        GpuProcess("GPU-0", 101, 30 * GIB),  # worker TP0, cgroup known
        GpuProcess("GPU-1", 102, 31 * GIB),  # worker TP1, cgroup unreadable → journal
        GpuProcess("GPU-2", 200, 7 * GIB),  # another unit
        GpuProcess("GPU-3", 300, 1 * GIB),  # nobody's
        GpuProcess("GPU-9", 101, 5 * GIB),  # a GPU not in the reading
    )
    return GpuReading(devices=devices, processes=processes, at=AT)


class TestAttributeProcesses:
    def test_cgroup_then_journal(self) -> None:
        """cgroup units come first; PIDs without one fall back to the journal's PIDs."""
        usage = attribute_processes(
            _reading(),
            pid_units={100: "vllm-a.service", 101: "vllm-a.service", 200: "vllm-b.service"},
            journal_pids={"vllm-a.service": [100, 101, 102]},
        )
        assert usage == {
            "vllm-a.service": {0: 32 * GIB, 1: 31 * GIB},
            "vllm-b.service": {2: 7 * GIB},
        }

    def test_cgroup_wins_over_journal(self) -> None:
        """A PID the journal gave to one unit but whose cgroup names another goes by cgroup."""
        usage = attribute_processes(
            _reading(),
            pid_units={200: "vllm-b.service"},
            journal_pids={"vllm-a.service": [200]},
        )
        assert usage == {"vllm-b.service": {2: 7 * GIB}}

    def test_ambiguous_journal_pid_is_left_out(self) -> None:
        """A PID claimed by two units' journals is attributed to neither."""
        usage = attribute_processes(
            _reading(),
            pid_units={},
            journal_pids={"vllm-a.service": {300, 102}, "vllm-b.service": (300,)},
        )
        assert usage == {"vllm-a.service": {1: 31 * GIB}}

    def test_nothing_known_gives_nothing(self) -> None:
        """Without cgroups or journal PIDs no memory is attributed."""
        assert attribute_processes(_reading(), pid_units={}, journal_pids={}) == {}
