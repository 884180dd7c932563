"""End-to-end detection latency: a phase marker written to a live journal → on ``/metrics``.

A ``systemd-journal-remote`` child writes a real journal file from a pipe; the real daemon (a
child process) follows it with ``journalctl -f``; this process writes one phase marker at a
time and polls ``/metrics`` until the unit's one-hot phase series for that phase, with the
current invocation id, reads 1. Each incarnation walks systemd's ``Started``, one vLLM line per
startup phase up to ready, then systemd's ``Stopping``/``Stopped``: ten markers. The latency of
a marker is from just before the write to the end of the first scrape that shows it, so it
includes journal-remote, journalctl, the daemon and one poll interval.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from benchmarks.daemon import (
    PHASE_LINES,
    STARTED,
    STOPPED,
    STOPPING,
    DaemonProcess,
    Scraper,
    host_table,
    now_us,
)
from benchmarks.measure import percentile, wait_until
from tests.support.journal_writer import JournalWriter, manager_line, service_line

__all__ = ["measure_latency"]

_UNIT = "vllm-bench.service"
_HOST = "bench"


def measure_latency(workdir: Path, *, incarnations: int, poll_seconds: float) -> dict[str, Any]:
    """Write ``incarnations`` × 10 markers; return latency percentiles in seconds."""
    journal_dir = workdir / "latency-journal"
    journal_dir.mkdir(parents=True, exist_ok=True)
    writer = JournalWriter(journal_dir, "live")
    daemon: DaemonProcess | None = None
    try:
        # the file must exist before journalctl -f starts (TOOLCHAIN: journal files)
        writer.write_and_flush(
            [manager_line("other.service", "0" * 32, "Started other.service.", STARTED, now_us())]
        )
        writer.wait_until_readable(1)
        daemon = DaemonProcess.start(
            workdir, host_table(_HOST, [_UNIT], journal_dir), name="latency-daemon"
        )
        scraper = Scraper(daemon.port)
        up = f'vllm_sentinel_collector_up{{collector="journal",host="{_HOST}"}} 1.0'
        wait_until(lambda: up in scraper.get().decode(), 60, "the journal collector")
        latencies: list[float] = []
        scrapes: list[float] = []
        by_phase: dict[str, list[float]] = {}
        for number in range(incarnations):
            invocation = f"{number + 1:032x}"
            pid = 5000 + number
            steps: list[tuple[str, dict[str, str | bytes | int]]] = [
                ("starting", manager_line(_UNIT, invocation, f"Started {_UNIT}.", STARTED, 0)),
                *((phase, service_line(_UNIT, invocation, pid, line, 0))
                  for phase, line in PHASE_LINES),
                ("stopping", manager_line(_UNIT, invocation, f"Stopping {_UNIT}...", STOPPING, 0)),
                ("stopped", manager_line(_UNIT, invocation, f"Stopped {_UNIT}.", STOPPED, 0)),
            ]  # fmt: skip
            for phase, entry in steps:
                phase_line = (
                    f'vllm_sentinel_unit_phase{{host="{_HOST}",phase="{phase}",unit="{_UNIT}"}} 1.0'
                )
                entry["__REALTIME_TIMESTAMP"] = now_us()
                started = time.perf_counter()
                writer.write_and_flush([entry])
                deadline = started + 30
                while True:
                    before = time.perf_counter()
                    text = scraper.get().decode()
                    seen = time.perf_counter()
                    scrapes.append(seen - before)
                    if phase_line in text and f'invocation_id="{invocation}"' in text:
                        break
                    if seen > deadline:
                        raise TimeoutError(f"phase {phase} of {invocation} never showed")
                    time.sleep(poll_seconds)
                latency = seen - started
                latencies.append(latency)
                by_phase.setdefault(phase, []).append(latency)
        return {
            "markers": len(latencies),
            "incarnations": incarnations,
            "poll_interval_seconds": poll_seconds,
            "p50_seconds": percentile(latencies, 0.50),
            "p90_seconds": percentile(latencies, 0.90),
            "p99_seconds": percentile(latencies, 0.99),
            "max_seconds": max(latencies),
            "mean_seconds": sum(latencies) / len(latencies),
            "scrape_p50_seconds": percentile(scrapes, 0.50),
            "p50_by_phase_seconds": {
                phase: percentile(values, 0.5) for phase, values in by_phase.items()
            },
        }
    finally:
        if daemon is not None:
            daemon.stop()
        writer.close()
