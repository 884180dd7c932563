"""Soak and fuzz runs: millions of corpus-shaped records keep RSS flat; the fuzz target holds.

Both are ``slow`` (CI runs them; see ``conftest.py``). ``SOAK_RECORDS`` (default 3,000,000)
and ``FUZZ_SECONDS`` (default 30) scale them. The figures are printed for the reliability notes.
"""

from __future__ import annotations

import gc
import os
import time
from datetime import timedelta

import pytest
from prometheus_client import generate_latest

from tests.property import fuzz_engine
from tests.support.hostile import T0, journal_cycle, journal_cycle_length
from vllm_sentinel.engine.decode.journal_json import JournalJsonDecoder
from vllm_sentinel.engine.report import status_document
from vllm_sentinel.engine.snapshot import CollectorState
from vllm_sentinel.monitor import HostPlan, Monitor, Tick
from vllm_sentinel.serve.exporter import SentinelCollector, make_registry
from vllm_sentinel.sources.journal import JournalBatch

MIB = 1 << 20
HOST = "llm-two"


def _rss_bytes() -> int:
    with open("/proc/self/statm", encoding="ascii") as statm:
        return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


@pytest.mark.slow
# a fixed amount of work (3 million records: about two minutes of one core), not a time limit:
# on a machine whose cores are shared (two pytest-xdist workers, other jobs) it takes as long as
# the core it gets; the hang guard is sized for that, not the suite's 300 s default
@pytest.mark.timeout(1800)
def test_rss_stays_flat_over_millions_of_records(capsys: pytest.CaptureFixture[str]) -> None:
    """Millions of journal records (a crash and a restart every 241) grow RSS by < 20 MiB."""
    target = int(os.environ.get("SOAK_RECORDS", "3000000"))
    per_cycle = journal_cycle_length()
    cycles = max(target // per_cycle, 40)
    warm_up = max(cycles // 10, 20)
    clock = [T0]
    monitor = Monitor([HostPlan(HOST, ("vllm-*.service",))], clock=lambda: clock[0])
    decoder = JournalJsonDecoder(HOST)
    monitor.register_collector(
        HOST, "journal", lambda: CollectorState(up=True), lambda: dict(decoder.skipped)
    )
    registry = make_registry(SentinelCollector(lambda: monitor.latest))
    checkpoints: list[tuple[int, int]] = []
    records = 0
    started = time.perf_counter()
    rss_warm = 0
    for cycle in range(cycles):
        data = b"\n".join(journal_cycle(cycle, cycle * per_cycle + 1, T0)) + b"\n"
        batch = decoder.feed(data)
        records += len(batch)
        monitor.apply(JournalBatch(HOST, tuple(batch), decoder.last_cursor))
        if cycle % 50 == 49 or cycle == cycles - 1:
            clock[0] = T0 + timedelta(hours=cycle + 2)
            monitor.apply(Tick(clock[0]))
            monitor.publish()
            generate_latest(registry)
            status_document(monitor.latest)
        if cycle == warm_up:
            gc.collect()
            rss_warm = _rss_bytes()
        if cycle >= warm_up and cycle % max(cycles // 10, 1) == 0:
            checkpoints.append((records, _rss_bytes()))
    elapsed = time.perf_counter() - started
    gc.collect()
    rss_end = _rss_bytes()
    checkpoints.append((records, rss_end))
    (unit,) = monitor.latest.hosts[0].units
    growth = rss_end - rss_warm
    with capsys.disabled():
        print(
            f"\nsoak: {records:,} records ({cycles:,} incarnation pairs) in {elapsed:.1f}s "
            f"({records / elapsed:,.0f}/s); RSS after warm-up {rss_warm / MIB:.1f} MiB, at end "
            f"{rss_end / MIB:.1f} MiB, growth {growth / MIB:+.2f} MiB; checkpoints (records, "
            f"MiB): {[(n, round(rss / MIB, 1)) for n, rss in checkpoints]}"
        )
    assert records >= cycles * per_cycle
    assert unit.starts_total == 2 * cycles
    assert sum(unit.crashes_total.values()) >= cycles  # every cycle crashes at least once
    assert len(unit.incarnations) <= 8
    assert not decoder.skipped
    assert growth < 20 * MIB, f"RSS grew by {growth / MIB:.1f} MiB"


@pytest.mark.slow
def test_fuzz_target_for_a_while(capsys: pytest.CaptureFixture[str], tmp_path: object) -> None:
    """The hypothesis-driven fuzz loop finds no failure in FUZZ_SECONDS (default 30)."""
    seconds = int(os.environ.get("FUZZ_SECONDS", "30"))
    with capsys.disabled():
        assert (
            fuzz_engine.main(
                ["--seconds", str(seconds), "--hypothesis", "--artifacts", str(tmp_path)]
            )
            == 0
        )


def test_fuzz_target_accepts_its_seeds() -> None:
    """Every seed input runs through the fuzz target without a failure."""
    for seed in fuzz_engine.seeds():
        fuzz_engine.run_one(seed)
        fuzz_engine.run_one(seed[: len(seed) // 2])
