"""The Monitor on vLLM 0.33's modes: the ready-timeout verdict, vLLM's watchdog, sleeping.

The golden journal incident (a crash, then a start that became ready after 688 s) gives the
unit its history and a ready incarnation; the lines that follow are vLLM 0.33.0's own format
strings, printed as its logger prints them (vllm/logger.py ``_FORMAT``: ``(%(vllm_process_name)s
pid=%(process)d) %(levelname)s %(asctime)s [%(fileinfo)s:%(lineno)d] %(message)s``), each test
naming the source string it uses.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from structlog.testing import capture_logs

from tests.support.monitor_driver import KIMI_INCIDENT, ManualClock, journal_records, play
from tests.support.records import T0, Journal
from vllm_sentinel.engine.catalog.phases import Outcome, Phase
from vllm_sentinel.engine.decode.record import Record
from vllm_sentinel.engine.health import HealthProbeResult, ProbeOutcome, ProbePolicy, ProbeSettings
from vllm_sentinel.engine.report import status_document
from vllm_sentinel.engine.snapshot import GpuDevice, GpuProcess, GpuReading, UnitSnapshot
from vllm_sentinel.monitor import GpuSample, HostPlan, Monitor, Tick
from vllm_sentinel.serve.readiness import HTTP_STATUS, UnitState, units_document
from vllm_sentinel.sources.journal import JournalBatch

HOST = "llm-two"
UNIT = "vllm-kimi-k25.service"
MODEL = "/shared/kimi-k2.5-nvfp4"
B = "b7e2d95c14a84f6e8d3c2a1f0e9b7d64"  # the incident's start that became ready (688 s)
C = "c" * 32
C_STARTED = datetime(2026, 11, 28, 23, 55, 0, tzinfo=UTC)
QUIET = {phase: 3600.0 for phase in Phase}


def _line(
    invocation: str, at: datetime, message: str, *, manager: bool = False, seq: int = 0
) -> Record:
    """One journal record of the unit; ``seq`` orders records of the same millisecond."""
    return Record(
        message,
        at,
        HOST,
        UNIT,
        invocation,
        1 if manager else 230100,
        "systemd" if manager else "vllm",
        6,
        f"s=c0ffee;i={int(at.timestamp() * 1000) * 16 + seq:x}",
        None,
        manager,
    )


def _stamp(at: datetime) -> str:
    return at.strftime("%m-%d %H:%M:%S")


def _third_start(*extra: tuple[float, str]) -> list[Record]:
    """Start C of the same model, loading (and ``extra`` lines at seconds after its start)."""
    at = C_STARTED
    lines = [
        _line(C, at, f"Started {UNIT} - vLLM Kimi K2.5.", manager=True),
        _line(
            C,
            at + timedelta(seconds=10),
            f"(EngineCore_DP0 pid=230100) INFO {_stamp(at + timedelta(seconds=10))} "
            f"[core.py:139] Initializing a V1 LLM engine (v0.33.0) with config: model='{MODEL}', "
            "tensor_parallel_size=8",
        ),
        _line(
            C,
            at + timedelta(seconds=20),
            f"(Worker_TP0 pid=230100) INFO {_stamp(at + timedelta(seconds=20))} "
            f"[gpu_model_runner.py:4978] Starting to load model {MODEL}...",
        ),
    ]
    for seconds, message in extra:
        lines.append(_line(C, at + timedelta(seconds=seconds), message))
    return sorted(lines, key=lambda record: record.realtime or at)


def _monitor(**options: object) -> tuple[Monitor, ManualClock]:
    clock = ManualClock(datetime(2026, 11, 28, 23, 35, tzinfo=UTC))
    plan = HostPlan(HOST, (UNIT,), QUIET, **options)  # type: ignore[arg-type]
    return Monitor([plan], clock=clock), clock


def _at(monitor: Monitor, clock: ManualClock, when: datetime) -> UnitSnapshot:
    clock.at = when
    monitor.apply(Tick(when))
    monitor.publish()
    (unit,) = monitor.latest.hosts[0].units
    return unit


class TestReadyTimeout:
    """``eta.will_time_out`` as the Monitor publishes it (v1/engine/core_client.py's
    ``Timed out waiting for engine core processes to start. … Waited %ss (configured by
    VLLM_ENGINE_READY_TIMEOUT_S)``, 0.17.1–0.33.0)."""

    def test_an_eta_past_vllms_default_600_s_will_time_out(self) -> None:
        """B took 688 s to ready: C, a minute into its load, is expected past 600 s."""
        monitor, clock = _monitor()
        play(monitor, clock, journal_records(KIMI_INCIDENT, HOST))
        play(monitor, clock, _third_start())
        unit = _at(monitor, clock, C_STARTED + timedelta(seconds=80))
        assert unit.eta_seconds is not None and unit.expected_ready_at is not None
        assert unit.expected_ready_at > C_STARTED + timedelta(seconds=600)
        assert unit.will_time_out is True
        assert unit.ready_timeout_seconds == 600.0
        assert unit.ready_timeout_remaining_seconds == pytest.approx(520.0)
        (document,) = units_document(monitor.latest)["units"]
        assert (document["will_time_out"], document["ready_timeout_remaining_seconds"]) == (
            True,
            pytest.approx(520.0),
        )
        assert "will time out" in document["detail"]

    def test_the_units_own_timeout_from_its_lines_is_used(self) -> None:
        """A launcher's trace shows ``VLLM_ENGINE_READY_TIMEOUT_S=1800``: the ETA fits."""
        monitor, clock = _monitor()
        play(monitor, clock, journal_records(KIMI_INCIDENT, HOST))
        trace = "+ exec env VLLM_ENGINE_READY_TIMEOUT_S=1800 vllm serve /shared/kimi-k2.5-nvfp4"
        play(monitor, clock, _third_start((5, trace)))
        unit = _at(monitor, clock, C_STARTED + timedelta(seconds=80))
        assert unit.eta_seconds is not None
        assert (unit.will_time_out, unit.ready_timeout_seconds) == (False, 1800.0)
        assert unit.ready_timeout_remaining_seconds == pytest.approx(1720.0)

    def test_a_ready_unit_has_no_verdict(self) -> None:
        """Once ready, the timeout no longer applies."""
        monitor, clock = _monitor()
        play(monitor, clock, journal_records(KIMI_INCIDENT, HOST))
        (unit,) = monitor.latest.hosts[0].units
        assert unit.current is not None and unit.current.phase is Phase.READY
        assert (unit.will_time_out, unit.ready_timeout_remaining_seconds) == (False, None)


DUMP = (
    "(EngineCore_DP0 pid=230100) INFO {stamp} [watch_dog.py:95] [Watchdog]Dumped stack to "
    "/var/tmp/vllm-watchdog/VLLM_STACK_DUMP_for_engine_0_230100.log due to {reason}"
)  # vllm/utils/watch_dog.py (0.33.0): "[Watchdog]Dumped stack to %s due to %s"


class TestWatchdog:
    """vLLM's watchdog (``--watchdog-config``) says it is stuck: stalled, ``vllm_watchdog``."""

    def _ready(self) -> tuple[Monitor, ManualClock, datetime]:
        monitor, clock = _monitor()
        records = journal_records(KIMI_INCIDENT, HOST)
        play(monitor, clock, records)
        last = max(record.realtime for record in records if record.realtime is not None)
        return monitor, clock, last

    def test_a_feed_timeout_dump_stalls_a_ready_unit_until_it_moves(self) -> None:
        """The dump stalls it with the dump's path; the next progress line clears it."""
        monitor, clock, last = self._ready()
        dumped = last + timedelta(minutes=10)
        dump = DUMP.format(stamp=_stamp(dumped), reason="feed timeout")
        play(monitor, clock, [_line(B, dumped, dump)])
        unit = _at(monitor, clock, dumped + timedelta(seconds=5))
        assert (unit.stalled, unit.stall_reason) == (True, "vllm_watchdog")
        assert unit.current is not None
        assert unit.current.modes.watchdog_dump_path == (
            "/var/tmp/vllm-watchdog/VLLM_STACK_DUMP_for_engine_0_230100.log"
        )
        (document,) = units_document(monitor.latest)["units"]
        assert (document["stall_reason"], document["watchdog_dump_path"]) == (
            "vllm_watchdog",
            "/var/tmp/vllm-watchdog/VLLM_STACK_DUMP_for_engine_0_230100.log",
        )
        moved = dumped + timedelta(seconds=30)
        stats = (
            f"(APIServer pid=230100) INFO {_stamp(moved)} [loggers.py:282] Engine 000: Avg "
            "prompt throughput: 0.0 tokens/s, Avg generation throughput: 41.0 tokens/s, "
            "Running: 1 reqs, Waiting: 0 reqs"
        )  # vllm/v1/metrics/loggers.py (0.33.0)
        play(monitor, clock, [_line(B, moved, stats)])
        unit = _at(monitor, clock, moved + timedelta(seconds=1))
        assert (unit.stalled, unit.stall_reason) == (False, None)

    def test_a_dump_on_sigterm_is_no_stall(self) -> None:
        """The engine core also dumps on SIGTERM (v1/engine/core.py): a stop, not a hang."""
        monitor, clock, last = self._ready()
        dumped = last + timedelta(minutes=10)
        dump = DUMP.format(stamp=_stamp(dumped), reason="SIGTERM")
        play(monitor, clock, [_line(B, dumped, dump)])
        unit = _at(monitor, clock, dumped + timedelta(seconds=5))
        assert (unit.stalled, unit.stall_reason) == (False, None)


class TestSleeping:
    """Sleep mode: ``It took %.6f seconds to fall asleep.``, ``It took %.6f seconds to wake up
    tags %s.`` (v1/executor/abstract.py), ``Sleep mode freed %s GiB memory, %s GiB memory is
    still in use.`` (v1/worker/gpu_worker.py), 0.33.0."""

    def test_a_sleeping_unit_answers_503_and_a_failing_health_is_not_unhealthy(self) -> None:
        """Asleep for ten minutes with every probe failing: sleeping, never unhealthy."""
        policy = ProbePolicy(ProbeSettings(enabled=True, unhealthy_after_seconds=60.0))
        monitor, clock = _monitor(probe_policy=policy)
        records = journal_records(KIMI_INCIDENT, HOST)
        play(monitor, clock, records)
        last = max(record.realtime for record in records if record.realtime is not None)
        (unit,) = monitor.latest.hosts[0].units
        assert unit.current is not None
        key = (unit.current.id, unit.current.started_at)
        clock.at = last + timedelta(minutes=1)
        monitor.apply(
            HealthProbeResult(HOST, UNIT, key, clock.at, 0.01, ProbeOutcome.UP, "", 200, "u")
        )  # it answered while awake: from now on a failing probe counts
        asleep = last + timedelta(minutes=5)
        freed = (
            f"(Worker_TP0 pid=230100) INFO {_stamp(asleep)} [gpu_worker.py:335] Sleep mode "
            "freed 151.20 GiB memory, 9.80 GiB memory is still in use."
        )
        slept = (
            f"(EngineCore_DP0 pid=230100) INFO {_stamp(asleep)} [abstract.py:408] It took "
            "2.318204 seconds to fall asleep."
        )
        play(monitor, clock, [_line(B, asleep, freed), _line(B, asleep, slept, seq=1)])
        (unit,) = monitor.latest.hosts[0].units
        assert unit.current is not None and unit.current.phase is Phase.SLEEPING
        for seconds in range(0, 600, 30):
            at = asleep + timedelta(seconds=seconds + 1)
            failed = HealthProbeResult(
                HOST, UNIT, key, at, 5.0, ProbeOutcome.DOWN, "timeout", None, "http://x:8000"
            )
            clock.at = at
            monitor.apply(failed)
        unit = _at(monitor, clock, asleep + timedelta(minutes=10))
        assert unit.health is not None and unit.health.failures > 0
        assert unit.health.unhealthy is False
        assert (unit.stalled, unit.slow) == (False, False)
        (document,) = units_document(monitor.latest)["units"]
        assert document["state"] == UnitState.SLEEPING.value
        assert HTTP_STATUS[UnitState.SLEEPING] == 503
        assert document["sleeping_since"] == asleep.isoformat().replace("+00:00", "Z")
        assert document["sleep_freed_bytes"] == int(151.20 * (1 << 30))
        assert document["sleep_kept_bytes"] == int(9.80 * (1 << 30))
        woke = asleep + timedelta(minutes=11)
        wake = (
            f"(EngineCore_DP0 pid=230100) INFO {_stamp(woke)} [abstract.py:426] It took "
            "1.004518 seconds to wake up tags {'weights', 'kv_cache'}."
        )
        play(monitor, clock, [_line(B, woke, wake)])
        (unit,) = monitor.latest.hosts[0].units
        assert unit.current is not None
        assert (unit.current.phase, unit.current.outcome) == (Phase.READY, Outcome.READY)
        assert unit.current.modes.wake_up_seconds == pytest.approx(1.004518)
        assert unit.startup_duration_seconds == pytest.approx(688.0, abs=1.0)  # not the wake


class TestWeightCacheMemory:
    """A weight-cache daemon's GPU memory is never "another process" in a serve unit's hint
    (``Weight cache %s daemon rank %d loaded model (%s GiB allocated, %s GiB reserved)``,
    ``… serving on %s``: model_executor/model_loader/weight_cache/daemon.py, 0.33.0)."""

    DAEMON = "vllm-weights.service"

    def _oom_next_to(self, daemon_lines: bool) -> tuple[Monitor, list[Any]]:
        """The daemon unit holds 30 GiB of GPU 0 when the serve unit starts; the serve unit
        loads 40 GiB there and dies of a CUDA OOM whose message lists no process."""
        journal = Journal(unit=self.DAEMON, host=HOST)
        clock = ManualClock(T0)
        plan = HostPlan(HOST, (UNIT, self.DAEMON))
        monitor = Monitor([plan], clock=clock, settle_seconds=5.0)
        gib = 1 << 30
        devices = tuple(GpuDevice(i, f"GPU-{i}", "NVIDIA H100", 0, 80 * gib) for i in (0, 1))
        daemon_id, serve_id = "e" * 32, "d" * 32
        lines = [journal.at(0).systemd(f"Started {self.DAEMON} - vLLM weights.", daemon_id)]
        if daemon_lines:
            lines += [
                journal.at(1).line(
                    "(vllm-weight-cache-target-0 pid=555) INFO 11-28 23:35:01 [daemon.py:316] "
                    "Weight cache target daemon rank 0 loaded model (30.00 GiB allocated, "
                    "30.25 GiB reserved)",
                    daemon_id,
                    555,
                ),
                journal.at(1).line(
                    "(vllm-weight-cache-target-0 pid=555) INFO 11-28 23:35:01 [daemon.py:410] "
                    "Weight cache target daemon rank 0 serving on "
                    "/run/vllm-weight-cache/vllm_weight_cache_3b1f0c2e9d7a4b58.sock",
                    daemon_id,
                    555,
                ),
            ]
        monitor.apply(JournalBatch(HOST, tuple(lines), lines[-1].cursor))
        held = GpuProcess("GPU-0", 555, 30 * gib)
        owners = {555: self.DAEMON, 777: UNIT}
        monitor.apply(
            GpuSample(HOST, GpuReading(devices, (held,), T0 + timedelta(seconds=4)), owners)
        )
        journal.unit = UNIT
        started = journal.at(5).systemd(f"Started {UNIT} - vLLM.", serve_id)
        monitor.apply(JournalBatch(HOST, (started,), started.cursor))
        monitor.apply(
            GpuSample(HOST, GpuReading(devices, (held,), T0 + timedelta(seconds=6)), owners)
        )
        loaded = (held, GpuProcess("GPU-0", 777, 40 * gib))
        monitor.apply(
            GpuSample(HOST, GpuReading(devices, loaded, T0 + timedelta(seconds=20)), owners)
        )
        crash = [
            journal.at(25).line(
                "(EngineCore_DP0 pid=777) ERROR 11-28 23:35:25 [core.py:708] "
                "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB.",
                serve_id,
                777,
            ),
            journal.at(26).systemd(
                f"{UNIT}: Main process exited, code=exited, status=1/FAILURE", serve_id
            ),
        ]
        monitor.apply(JournalBatch(HOST, tuple(crash), crash[-1].cursor))
        with capture_logs() as logs:
            clock.at = T0 + timedelta(seconds=60)
            monitor.apply(Tick(clock.at))
            monitor.publish()
        return monitor, logs

    def test_a_weight_cache_daemon_is_not_blamed(self) -> None:
        monitor, logs = self._oom_next_to(daemon_lines=True)
        (crash,) = [entry for entry in logs if entry["event"] == "unit_crashed"]
        assert crash["cause"] == "cuda_oom"
        assert "already in use by another process" not in crash["hint"]
        assert self.DAEMON not in crash["hint"]
        units = {unit["unit"]: unit for unit in status_document(monitor.latest)["units"]}
        assert units[self.DAEMON]["incarnations"][-1]["modes"]["role"] == "weight_cache"
        assert self.DAEMON not in units[UNIT]["last_crash"]["hint"]["text"]

    def test_the_same_memory_of_another_unit_is(self) -> None:
        """Without the daemon's lines the other unit's 30 GiB is another process's memory."""
        _, logs = self._oom_next_to(daemon_lines=False)
        (crash,) = [entry for entry in logs if entry["event"] == "unit_crashed"]
        assert "already in use by another process" in crash["hint"]
