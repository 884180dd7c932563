"""What keeps an idle fleet cheap, without changing what it shows.

* a publish between ticks rebuilds only the hosts items touched;
* a GPU reading with the figures already applied leaves the published units as they are;
* the SSH keepalive in effect keeps the host-down bound with the fewest keepalives.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from vllm_sentinel.config import parse_config
from vllm_sentinel.daemon import HOST_DOWN_DETECTION_RATIO, effective_ssh_settings
from vllm_sentinel.engine.decode.record import Record
from vllm_sentinel.engine.snapshot import CollectorState, GpuDevice, GpuProcess, GpuReading
from vllm_sentinel.monitor import GpuSample, HostPlan, Monitor, Tick
from vllm_sentinel.sources.journal import JournalBatch

NOW = datetime(2026, 11, 28, 23, 0, tzinfo=UTC)
UNIT = "vllm-a.service"
LINE = "(EngineCore_DP0 pid=4121) INFO 11-28 23:00:00 [gpu_model_runner.py:1] Starting to load model m..."


def _monitor(hosts: int = 2) -> Monitor:
    monitor = Monitor([HostPlan(f"h{index}", (UNIT,)) for index in range(hosts)], clock=lambda: NOW)
    for index in range(hosts):
        record = Record(LINE, NOW, f"h{index}", UNIT, "1" * 32, 4121)
        monitor.apply(JournalBatch(f"h{index}", (record,), None))
    monitor.publish()
    return monitor


def _reading(used_mib: int, at: datetime = NOW) -> GpuReading:
    device = GpuDevice(0, "GPU-0", "NVIDIA H200", used_mib << 20, 143771 << 20)
    return GpuReading(
        devices=(device,), processes=(GpuProcess("GPU-0", 4121, used_mib << 20),), at=at
    )


def test_a_publish_between_ticks_rebuilds_only_touched_hosts() -> None:
    """An untouched host keeps its last HostSnapshot (its source health waits for the tick);
    a host an item touched is rebuilt; a full publish refreshes everyone."""
    monitor = _monitor()
    states = {"h0": CollectorState(up=True, since=NOW), "h1": CollectorState(up=True, since=NOW)}
    for name in ("h0", "h1"):
        monitor.register_collector(name, "gpu", lambda name=name: states[name])
    first = monitor.publish()
    states["h0"] = states["h1"] = CollectorState(up=False, since=NOW, reason="timeout")
    monitor.apply(GpuSample("h1", _reading(1000), {4121: UNIT}))
    partial = monitor.publish(refresh_all=False)
    assert partial.hosts[0] is first.hosts[0]  # untouched: as it was
    assert partial.hosts[1].collectors["gpu"].up is False  # touched: refreshed
    assert partial.hosts[1].units[0].gpu_memory_used_bytes == {0: 1000 << 20}
    monitor.apply(Tick(NOW + timedelta(seconds=1)))
    full = monitor.publish(refresh_all=False)
    assert full.hosts[0].collectors["gpu"].up is True  # a Tick alone touches no host…
    full = monitor.publish()
    assert full.hosts[0].collectors["gpu"].up is False  # …the tick's publish is full


def test_an_unchanged_gpu_reading_keeps_the_published_units() -> None:
    """The same figures again (a new time) leave the unit snapshots as they were; a change of
    memory rebuilds them."""
    monitor = _monitor(1)
    monitor.apply(GpuSample("h0", _reading(1000), {4121: UNIT}))
    before = monitor.publish().hosts[0]
    monitor.apply(GpuSample("h0", _reading(1000, NOW + timedelta(seconds=2)), {4121: UNIT}))
    same = monitor.publish().hosts[0]
    assert same.units is before.units and same.gpus is before.gpus
    monitor.apply(GpuSample("h0", _reading(2000, NOW + timedelta(seconds=4)), {4121: UNIT}))
    moved = monitor.publish().hosts[0]
    assert moved.units[0].gpu_memory_used_bytes == {0: 2000 << 20}
    assert moved.units[0].last_gpu_growth_at == NOW + timedelta(seconds=4)


def test_keepalive_in_effect_keeps_the_bound_with_one_probe_a_period() -> None:
    """Capped keepalives use count_max 1: the same 1.25 × I detection, a probe per interval
    instead of one per quarter; a configuration already within the bound is kept."""
    config = parse_config(
        """
[defaults]
gpu_poll_interval_seconds = 2.0
[[hosts]]
name = "a"
address = "10.0.0.1"
known_hosts = "/k"
[[hosts]]
name = "b"
address = "10.0.0.2"
known_hosts = "/k"
keepalive_interval_seconds = 0.6
keepalive_count_max = 4
[[hosts]]
name = "c"
address = "10.0.0.3"
known_hosts = "/k"
keepalive_interval_seconds = 0.2
keepalive_count_max = 3
"""
    )
    capped, too_many, within = (effective_ssh_settings(host) for host in config.hosts)
    assert capped is not None and too_many is not None and within is not None
    budget = HOST_DOWN_DETECTION_RATIO * 2.0
    assert (capped.keepalive_interval_seconds, capped.keepalive_count_max) == (budget / 2, 1)
    assert (too_many.keepalive_interval_seconds, too_many.keepalive_count_max) == (budget / 2, 1)
    assert (within.keepalive_interval_seconds, within.keepalive_count_max) == (0.2, 3)
