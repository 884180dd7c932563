"""Scrape cost: ``/metrics`` for a fleet (200 hosts × 8 units), against prometheus_client.

The state is real: a ``Monitor`` whose 1,600 trackers each read one corpus log (as journal
records of its own invocation), with 8 GPUs per host and both collectors up. Each snapshot is
rendered by the exporter (``SentinelCollector.render``) and, as the reference, by
prometheus_client's encoders over the same registry (``generate_latest``, both formats); the
two outputs are compared byte for byte. The exporter keeps each host's lines while the Monitor
republishes the same ``HostSnapshot`` (an idle host): ``render_seconds`` is that steady
state, ``render_all_hosts_changed_seconds`` a scrape where every host was republished since
the last one (each a new ``HostSnapshot``: a fleet where every host had news);
``render_peak_bytes`` the most memory such a render allocates at once (tracemalloc). A real
HTTP scrape through the daemon's server (the headers Prometheus sends: OpenMetrics, gzip) is timed
as well.
"""

from __future__ import annotations

import dataclasses
import time
import tracemalloc
import urllib.request
from datetime import UTC, datetime
from typing import Any

from prometheus_client.exposition import generate_latest
from prometheus_client.openmetrics.exposition import generate_latest as generate_openmetrics

from benchmarks.corpus import corpus_files
from benchmarks.measure import median
from vllm_sentinel.engine.decode.text_log import TextLogDecoder
from vllm_sentinel.engine.snapshot import (
    CollectorState,
    GpuDevice,
    GpuProcess,
    GpuReading,
    Snapshot,
)
from vllm_sentinel.monitor import GpuSample, HostPlan, Monitor
from vllm_sentinel.serve.exporter import SentinelCollector, make_registry, render_exposition
from vllm_sentinel.serve.http import make_app, start_http_server
from vllm_sentinel.sources.journal import JournalBatch

__all__ = ["measure_scrape"]

_ACCEPT = "application/openmetrics-text;version=1.0.0,text/plain;version=0.0.4;q=0.5"


def _fleet_monitor(hosts: int, units: int) -> Monitor:
    now = datetime(2026, 1, 1, 12, 0, tzinfo=UTC)
    names = [f"vllm-{index}.service" for index in range(units)]
    plans = [HostPlan(f"gpu-{index:03d}", tuple(names)) for index in range(hosts)]
    monitor = Monitor(plans, clock=lambda: now)
    logs = [path.read_bytes() for path in corpus_files()]
    up = CollectorState(up=True, since=now)
    for host_index, plan in enumerate(plans):
        for unit_index, unit in enumerate(names):
            log = logs[(host_index * units + unit_index) % len(logs)]
            decoder = TextLogDecoder(unit, plan.name, reference_year=2026)
            invocation = f"{host_index:016x}{unit_index:016x}"
            records = tuple(
                record._replace(invocation_id=invocation)
                for record in decoder.feed(log) + decoder.flush()
            )
            monitor.apply(JournalBatch(plan.name, records, None))
        devices = tuple(
            GpuDevice(index, f"GPU-{host_index:04d}-{index:04d}", "NVIDIA H200", 130 << 30,
                      141 << 30)
            for index in range(8)
        )  # fmt: skip
        processes = tuple(
            GpuProcess(f"GPU-{host_index:04d}-{index:04d}", 6100 + index, 129 << 30)
            for index in range(8)
        )
        monitor.apply(
            GpuSample(
                plan.name,
                GpuReading(devices=devices, processes=processes, at=now),
                {6100 + index: names[index % units] for index in range(8)},
            )
        )
        monitor.register_collector(plan.name, "journal", lambda: up)
        monitor.register_collector(plan.name, "gpu", lambda: up)
    monitor.publish()
    return monitor


def _best_and_median(function: Any, runs: int) -> tuple[float, float, Any]:
    times = []
    output = None
    for _ in range(runs):
        started = time.perf_counter()
        output = function()
        times.append(time.perf_counter() - started)
    return min(times), median(times), output


def _copied_hosts(snapshot: Snapshot) -> Snapshot:
    """``snapshot`` with every host a new (equal) ``HostSnapshot``, as if each had news."""
    return dataclasses.replace(
        snapshot, hosts=tuple(dataclasses.replace(host) for host in snapshot.hosts)
    )


def _every_host_changed(
    changing: list[Snapshot], snapshot: Snapshot, render: Any, runs: int
) -> tuple[float, bytes]:
    """Median seconds of ``render`` when every host is a new ``HostSnapshot``; its output."""
    times = []
    output = b""
    for _ in range(runs):
        changing[0] = _copied_hosts(snapshot)
        started = time.perf_counter()
        output = render()
        times.append(time.perf_counter() - started)
    changing[0] = snapshot
    return median(times), output


def measure_scrape(*, hosts: int, units: int, runs: int) -> dict[str, Any]:
    """Render the fleet's ``/metrics`` ``runs`` times each way; return the figures."""
    built = time.perf_counter()
    monitor = _fleet_monitor(hosts, units)
    build_seconds = time.perf_counter() - built
    snapshot = monitor.latest
    changing = [snapshot]  # what the registry renders: the snapshot, or a copy of every host
    registry = make_registry(SentinelCollector(lambda: changing[0]))
    result: dict[str, Any] = {
        "hosts": hosts,
        "units": hosts * units,
        "state_build_seconds": build_seconds,
        "runs": runs,
    }
    render_exposition(registry)  # the first scrape renders every series prefix once
    for name, fast, reference in (
        ("text", lambda: render_exposition(registry), lambda: generate_latest(registry)),
        (
            "openmetrics",
            lambda: render_exposition(registry, openmetrics=True),
            lambda: generate_openmetrics(registry),
        ),
    ):
        changing[0] = _copied_hosts(snapshot)
        tracemalloc.start()
        fast()
        render_peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
        changing[0] = snapshot
        fast()
        ours_best, ours_median, ours = _best_and_median(fast, runs)
        _, ref_median, ref = _best_and_median(reference, max(1, min(runs, 3)))
        changed = _every_host_changed(changing, snapshot, fast, runs)
        result[name] = {
            "series": sum(1 for line in ours.splitlines() if not line.startswith(b"#")),
            "bytes": len(ours),
            "render_seconds": ours_median,
            "render_best_seconds": ours_best,
            "prometheus_client_seconds": ref_median,
            "speedup": ref_median / ours_median,
            "identical_to_prometheus_client": ours == ref and changed[1] == ref,
            "render_all_hosts_changed_seconds": changed[0],
            "render_peak_bytes": render_peak,
        }
    server = start_http_server("127.0.0.1", 0, make_app(registry, lambda: {}), None)
    try:
        for label, headers in (
            ("http_prometheus_headers", {"Accept": _ACCEPT, "Accept-Encoding": "gzip"}),
            ("http_plain", {}),
        ):
            request = urllib.request.Request(
                f"http://127.0.0.1:{server.port}/metrics", headers=headers
            )

            def scrape(request: urllib.request.Request = request) -> bytes:
                with urllib.request.urlopen(request, timeout=60) as response:
                    return bytes(response.read())

            _, seconds, body = _best_and_median(scrape, runs)
            result[label] = {"seconds": seconds, "bytes": len(body)}
    finally:
        server.shutdown()
    return result
