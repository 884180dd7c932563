"""The Monitor and probe results: per-incarnation health, unhealthy in time, ready from a probe.

Records are real vLLM and systemd lines through the tracker; probe results are what
``HealthProber`` puts on the queue. A controlled clock drives time.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from structlog.testing import capture_logs

from tests.support.monitor_driver import ManualClock, events
from vllm_sentinel.engine.catalog.phases import Phase
from vllm_sentinel.engine.decode.record import Record
from vllm_sentinel.engine.health import HealthProbeResult, ProbeOutcome, ProbePolicy, ProbeSettings
from vllm_sentinel.engine.snapshot import UnitSnapshot
from vllm_sentinel.monitor import HostPlan, Monitor, Tick
from vllm_sentinel.sources.journal import JournalBatch

HOST = "llm-two"
UNIT = "vllm-qwen.service"
T0 = datetime(2026, 11, 28, 23, 0, 0, tzinfo=UTC)
A = "a" * 32
B = "b" * 32
POLICY = ProbePolicy(ProbeSettings(enabled=True, unhealthy_after_seconds=60.0))


def _line(second: float, text: str, invocation: str = A, pid: int = 500, **fields: Any) -> Record:
    return Record(
        text,
        T0 + timedelta(seconds=second),
        host=HOST,
        unit=UNIT,
        invocation_id=invocation,
        pid=pid,
        **fields,
    )


def _systemd(second: float, text: str, invocation: str = A) -> Record:
    return _line(second, text, invocation, 1, syslog_identifier="systemd", from_manager=True)


START = [
    _systemd(0, f"Started {UNIT} - vLLM."),
    _line(
        1, "(APIServer pid=500) INFO 11-28 23:00:01 [utils.py:1] non-default args: {'port': 8001}"
    ),
    _line(
        5,
        "(Worker pid=501) INFO 11-28 23:00:05 [gpu_model_runner.py:1] Starting to load model Qwen/Qwen3-8B...",
    ),
]
READY = [
    _line(
        30,
        "(APIServer pid=500) INFO 11-28 23:00:30 [api_server.py:1] Starting vLLM server on http://0.0.0.0:8001",
    ),
    _line(31, "INFO:     Application startup complete."),
]


def _monitor(clock: ManualClock) -> Monitor:
    thresholds = dict.fromkeys(Phase, 3600.0)
    return Monitor([HostPlan(HOST, (UNIT,), thresholds, probe_policy=POLICY)], clock=clock)


def _feed(monitor: Monitor, clock: ManualClock, records: list[Record]) -> None:
    for record in records:
        assert record.realtime is not None
        clock.at = max(clock.at, record.realtime)
        monitor.apply(JournalBatch(HOST, (record,), None))
    monitor.publish()


def _unit(monitor: Monitor) -> UnitSnapshot:
    (host,) = monitor.latest.hosts
    (unit,) = host.units
    return unit


def _probe(
    monitor: Monitor, clock: ManualClock, second: float, outcome: ProbeOutcome, invocation: str = A
) -> None:
    clock.at = T0 + timedelta(seconds=second)
    current = _unit(monitor).current
    assert current is not None
    key = (invocation, current.started_at if invocation == current.id else T0)
    monitor.apply(
        HealthProbeResult(
            HOST,
            UNIT,
            key,
            clock.at,
            0.01,
            outcome,
            "" if outcome is ProbeOutcome.UP else "http_status",
            200 if outcome is ProbeOutcome.UP else 503,
            "http://127.0.0.1:8001",
        )
    )
    monitor.publish()


def test_a_probe_of_another_incarnation_is_dropped() -> None:
    """A result sent for an incarnation that is not the current one changes nothing."""
    clock = ManualClock(T0)
    monitor = _monitor(clock)
    _feed(monitor, clock, START)
    _probe(monitor, clock, 10, ProbeOutcome.UP, invocation=B)
    unit = _unit(monitor)
    assert unit.health is None and unit.current is not None
    assert unit.current.phase is Phase.LOADING_WEIGHTS


def test_unhealthy_turns_on_with_time_alone_and_is_logged_once() -> None:
    """Ready, then 503s: unhealthy once 60 s passed (a tick suffices); one event each way."""
    clock = ManualClock(T0)
    monitor = _monitor(clock)
    with capture_logs() as logs:
        _feed(monitor, clock, START + READY)
        _probe(monitor, clock, 40, ProbeOutcome.UP)
        _probe(monitor, clock, 50, ProbeOutcome.DOWN)
        for second in (60, 100, 109):
            clock.at = T0 + timedelta(seconds=second)
            monitor.apply(Tick(clock.at))
            monitor.publish()
            health = _unit(monitor).health
            assert health is not None and not health.unhealthy, second
        clock.at = T0 + timedelta(seconds=110)
        monitor.apply(Tick(clock.at))
        monitor.publish()
        monitor.publish()
        health = _unit(monitor).health
        assert (
            health is not None
            and health.unhealthy
            and health.failing_since == clock.at - timedelta(seconds=60)
        )
        _probe(monitor, clock, 120, ProbeOutcome.UP)
        health = _unit(monitor).health
        assert health is not None and not health.unhealthy
    assert len(events(logs, "unit_unhealthy")) == 1
    assert len(events(logs, "unit_unhealthy_cleared")) == 1
    assert _unit(monitor).current.phase is Phase.READY  # type: ignore[union-attr]


def test_ready_from_a_probe_then_the_logs_catch_up_then_a_crash() -> None:
    """One ready event at the probe's time; the logs' later ready is not news; the crash is."""
    clock = ManualClock(T0)
    monitor = _monitor(clock)
    with capture_logs() as logs:
        _feed(monitor, clock, START)
        _probe(monitor, clock, 20, ProbeOutcome.UP)
        unit = _unit(monitor)
        assert unit.ready_source == "health_probe" and unit.current is not None
        assert unit.current.phase is Phase.READY
        assert unit.current.phase_entered_at == T0 + timedelta(seconds=20)
        _feed(monitor, clock, READY)
        unit = _unit(monitor)
        assert unit.ready_source == "log" and unit.current is not None
        assert unit.current.phase_entered_at == T0 + timedelta(seconds=31)
        _feed(
            monitor,
            clock,
            [
                _systemd(40, f"{UNIT}: Main process exited, code=exited, status=1/FAILURE"),
                _systemd(40, f"{UNIT}: Failed with result 'exit-code'."),
            ],
        )
        unit = _unit(monitor)
        assert unit.current is not None and unit.current.phase is Phase.CRASHED
        assert unit.health is None and unit.ready_source is None
    phases = [event["phase"] for event in events(logs, "unit_phase_changed")]
    assert phases == ["loading_weights", "ready", "crashed"]


def test_a_reload_that_disables_probing_forgets_the_health() -> None:
    """Probing turned off for the unit: its health goes, results in flight are dropped."""
    clock = ManualClock(T0)
    monitor = _monitor(clock)
    _feed(monitor, clock, START + READY)
    _probe(monitor, clock, 40, ProbeOutcome.UP)
    assert _unit(monitor).health is not None
    off = ProbePolicy(ProbeSettings(enabled=False))
    thresholds = dict.fromkeys(Phase, 3600.0)
    monitor.reconfigure([HostPlan(HOST, (UNIT,), thresholds, probe_policy=off)], ())
    monitor.publish()
    assert _unit(monitor).health is None
    _probe(monitor, clock, 50, ProbeOutcome.UP)
    assert _unit(monitor).health is None
