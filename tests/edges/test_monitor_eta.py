"""The Monitor's startup history, ETA and slow flag, on the kimi incident and a later start.

The golden journal incident (a crash, then a nine-minute load to ready) goes through a Monitor
on a controlled clock; a third start of the same model follows, written with the test's record
builder. What the Monitor publishes is checked at chosen moments.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from structlog.testing import capture_logs

from tests.support.monitor_driver import KIMI_INCIDENT, ManualClock, journal_records, play
from vllm_sentinel.engine.catalog.phases import Phase
from vllm_sentinel.engine.decode.record import Record
from vllm_sentinel.engine.health import HealthProbeResult, ProbeOutcome, ProbePolicy, ProbeSettings
from vllm_sentinel.engine.snapshot import EtaBasis, UnitSnapshot
from vllm_sentinel.monitor import HostPlan, Monitor, Tick
from vllm_sentinel.state.history_store import HISTORY_SKIP_REASON, HistoryStore

HOST = "llm-two"
UNIT = "vllm-kimi-k25.service"
MODEL = "/shared/kimi-k2.5-nvfp4"
B = "b7e2d95c14a84f6e8d3c2a1f0e9b7d64"  # the incident's second start: ready after 688 s
C = "c" * 32
C_STARTED = datetime(2026, 11, 28, 23, 55, 0, tzinfo=UTC)
C_LOADING = C_STARTED + timedelta(seconds=20)
B_LOAD = 541.002  # B's loading_weights, seconds, to its `Model loading took` line
# compile (from the end of loading: Dynamo's 11.76 s before compile's first line, then 21.76 s),
# KV cache, graphs, API server
B_AFTER_LOAD = 11.76 + 21.76 + 6.77 + 66.13 + 20.062346
QUIET = {phase: 3600.0 for phase in Phase}  # no stall unless a test wants one


def _third_start() -> list[Record]:
    """Start C of the same model: systemd's Started, the engine's config, loading."""

    def line(seconds: float, message: str, manager: bool = False) -> Record:
        at = C_STARTED + timedelta(seconds=seconds)
        return Record(
            message,
            at,
            HOST,
            UNIT,
            C,
            1 if manager else 230100,
            "systemd" if manager else "vllm",
            6,
            f"s=c0ffee;i={int(seconds * 1000):x}",
            None,
            manager,
        )

    stamp = C_STARTED.strftime("%m-%d %H:%M")
    return [
        line(0, f"Started {UNIT} - vLLM Kimi K2.5.", manager=True),
        line(
            10,
            f"(EngineCore_DP0 pid=230100) INFO {stamp}:10 [core.py:93] Initializing a V1 LLM "
            f"engine (v0.17.1) with config: model='{MODEL}', tensor_parallel_size=8",
        ),
        line(
            20,
            f"(Worker_TP0 pid=230100) INFO {stamp}:20 [gpu_model_runner.py:3425] Starting to "
            f"load model {MODEL}...",
        ),
    ]


def _at(monitor: Monitor, clock: ManualClock, when: datetime) -> UnitSnapshot:
    clock.at = when
    monitor.apply(Tick(when))
    monitor.publish()
    (unit,) = monitor.latest.hosts[0].units
    return unit


def _monitor(thresholds: dict[Phase, float] = QUIET, **options: Any) -> tuple[Monitor, ManualClock]:
    clock = ManualClock(datetime(2026, 11, 28, 23, 35, tzinfo=UTC))
    return Monitor([HostPlan(HOST, (UNIT,), thresholds)], clock=clock, **options), clock


def test_first_load_has_vllms_own_eta() -> None:
    """No history yet: the shard bar's remaining time, counted down, basis vllm."""
    monitor, clock = _monitor()
    shard_4 = datetime(2026, 11, 28, 23, 38, 27, 233330, tzinfo=UTC)  # 4/64 [00:31<07:57, …]
    play(
        monitor,
        clock,
        [r for r in journal_records(KIMI_INCIDENT, HOST) if r.realtime and r.realtime <= shard_4],
    )
    unit = _at(monitor, clock, shard_4 + timedelta(seconds=3))
    assert unit.eta_basis is EtaBasis.VLLM
    assert unit.eta_seconds == pytest.approx(477 - 3)
    assert unit.expected_ready_at == shard_4 + timedelta(seconds=477)
    assert unit.usual_phase_seconds is None and not unit.slow
    assert monitor.history.records(HOST, UNIT) == ()


def test_a_ready_start_becomes_history_and_the_next_start_uses_it() -> None:
    """B reached ready: recorded once; C of the same model gets B's durations as its ETA."""
    monitor, clock = _monitor()
    play(monitor, clock, journal_records(KIMI_INCIDENT, HOST))
    (record,) = monitor.history.records(HOST, UNIT)
    assert record.invocation_id == B
    assert record.phase_seconds[Phase.LOADING_WEIGHTS] == pytest.approx(B_LOAD)
    assert (record.model, record.vllm_version, record.tensor_parallel_size) == (
        MODEL,
        "0.17.1",
        8,
    )
    play(monitor, clock, _third_start())
    unit = _at(monitor, clock, C_LOADING + timedelta(seconds=60))
    assert unit.current is not None and unit.current.id == C
    assert unit.eta_basis is EtaBasis.HISTORY
    assert unit.eta_seconds == pytest.approx(B_LOAD - 60 + B_AFTER_LOAD)
    assert unit.usual_phase_seconds == pytest.approx(B_LOAD)
    # it counts down: the expected time stays put while C is on schedule
    later = _at(monitor, clock, C_LOADING + timedelta(seconds=160))
    assert later.expected_ready_at == unit.expected_ready_at
    assert later.eta_seconds == pytest.approx(B_LOAD - 160 + B_AFTER_LOAD)
    assert len(monitor.history.records(HOST, UNIT)) == 1  # republishing adds nothing


def test_slower_than_usual_is_flagged_and_logged_once() -> None:
    """Past 1.5x B's load (812 s), C is slow: one unit_slow event; moving on clears it."""
    monitor, clock = _monitor()
    play(monitor, clock, journal_records(KIMI_INCIDENT, HOST))
    play(monitor, clock, _third_start())
    with capture_logs() as logs:
        assert not _at(monitor, clock, C_LOADING + timedelta(seconds=805)).slow
        for seconds in (815, 900, 1000):
            unit = _at(monitor, clock, C_LOADING + timedelta(seconds=seconds))
            assert unit.slow and not unit.stalled
            assert unit.eta_seconds == pytest.approx(B_AFTER_LOAD)  # overrun: later phases
        compile_line = _third_start()[-1]._replace(
            message="(EngineCore_DP0 pid=230100) INFO 11-29 00:11:50 [backends.py:1] "
            "Dynamo bytecode transform time: 6.12 s",
            realtime=C_LOADING + timedelta(seconds=1010),
            cursor="s=c0ffee;i=ffffff",
        )
        play(monitor, clock, [compile_line])
    slow = [entry for entry in logs if entry["event"] == "unit_slow"]
    assert len(slow) == 1
    assert (slow[0]["phase"], slow[0]["invocation_id"], slow[0]["log_level"]) == (
        "loading_weights",
        C,
        "warning",
    )
    assert slow[0]["usual_phase_seconds"] == pytest.approx(B_LOAD)
    cleared = [entry for entry in logs if entry["event"] == "unit_slow_cleared"]
    assert [(entry["invocation_id"], entry["phase"]) for entry in cleared] == [(C, "compiling")]
    (unit,) = monitor.latest.hosts[0].units
    assert not unit.slow and unit.current is not None and unit.current.phase is Phase.COMPILING


def test_no_eta_and_no_slow_while_stalled() -> None:
    """A stalled start has no expected ready time, and is stalled rather than slow."""
    monitor, clock = _monitor({**QUIET, Phase.LOADING_WEIGHTS: 600.0})
    play(monitor, clock, journal_records(KIMI_INCIDENT, HOST))
    play(monitor, clock, _third_start())
    unit = _at(monitor, clock, C_LOADING + timedelta(seconds=900))
    assert unit.stalled and not unit.slow
    assert (unit.eta_seconds, unit.expected_ready_at, unit.eta_basis) == (None, None, None)
    assert unit.usual_phase_seconds == pytest.approx(B_LOAD)


def test_the_backfill_fills_the_history_once(tmp_path: Path) -> None:
    """History read again by a restarted daemon's backfill is not recorded twice."""
    store = HistoryStore(tmp_path)
    monitor, clock = _monitor(history=store)
    records = journal_records(KIMI_INCIDENT, HOST)
    play(monitor, clock, records, backfill=True, history=True)
    assert [r.invocation_id for r in store.records(HOST, UNIT)] == [B]
    assert store.flush_sync() == 1
    again = HistoryStore(tmp_path)
    again.load()
    restarted, clock = _monitor(history=again)
    play(restarted, clock, records, backfill=True, history=True)
    assert [r.invocation_id for r in again.records(HOST, UNIT)] == [B]
    assert again.flush_sync() == 0


def test_a_corrupt_history_file_is_counted_for_its_host(tmp_path: Path) -> None:
    """records_skipped_total{reason="history_file_corrupt"} of the host whose file was bad."""
    bad = tmp_path / HOST / f"{UNIT}.json"
    bad.parent.mkdir()
    bad.write_text("{")
    store = HistoryStore(tmp_path)
    store.load()
    monitor, _ = _monitor(history=store)
    (host,) = monitor.publish().hosts
    assert host.records_skipped == {HISTORY_SKIP_REASON: 1}


def test_ready_by_its_health_probe_is_no_longer_estimated() -> None:
    """/health answers 200 while the logs still say loading: ready from the probe, no ETA,
    not slow (the probe's word ends the start; its logs will record it in the history)."""
    clock = ManualClock(datetime(2026, 11, 28, 23, 35, tzinfo=UTC))
    policy = ProbePolicy(ProbeSettings(enabled=True, unhealthy_after_seconds=60.0))
    monitor = Monitor([HostPlan(HOST, (UNIT,), QUIET, probe_policy=policy)], clock=clock)
    play(monitor, clock, journal_records(KIMI_INCIDENT, HOST))
    play(monitor, clock, _third_start())
    slow = _at(monitor, clock, C_LOADING + timedelta(seconds=900))
    assert slow.slow and slow.eta_basis is EtaBasis.HISTORY
    assert slow.current is not None
    monitor.apply(
        HealthProbeResult(
            HOST,
            UNIT,
            (C, slow.current.started_at),
            clock.at,
            0.01,
            ProbeOutcome.UP,
            "",
            200,
            "http://127.0.0.1:8000",
        )
    )
    monitor.publish()
    (unit,) = monitor.latest.hosts[0].units
    assert unit.ready_source == "health_probe"
    assert (unit.slow, unit.eta_seconds, unit.eta_basis, unit.usual_phase_seconds) == (
        False,
        None,
        None,
        None,
    )
    later = _at(monitor, clock, C_LOADING + timedelta(seconds=960))
    assert (later.slow, later.eta_seconds) == (False, None)
