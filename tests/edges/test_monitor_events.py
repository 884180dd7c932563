"""The Monitor's structured events: one per phase change, crash and stall, with their identity.

The kimi incident of the golden journal test goes through a Monitor on a controlled clock;
structlog's ``capture_logs`` records what an operator's log would show.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from structlog.testing import capture_logs

from tests.support.monitor_driver import KIMI_INCIDENT, ManualClock, events, journal_records, play
from tests.support.records import T0, Journal
from vllm_sentinel.engine.catalog.phases import Phase
from vllm_sentinel.engine.decode.record import Record
from vllm_sentinel.engine.report import status_document
from vllm_sentinel.engine.snapshot import GpuDevice, GpuProcess, GpuReading
from vllm_sentinel.monitor import GpuSample, HostPlan, Monitor, Tick
from vllm_sentinel.sources.journal import JournalBatch

HOST = "llm-two"
UNIT = "vllm-kimi-k25.service"
LOADING = datetime(2026, 11, 28, 23, 37, 52, 118000, tzinfo=UTC)  # second `Starting to load model`


def test_phase_changes_and_the_crash_are_one_event_each() -> None:
    records = journal_records(KIMI_INCIDENT, HOST)
    clock = ManualClock(records[0].realtime or LOADING)
    thresholds = {phase: 3600.0 for phase in Phase}  # no stall in this test
    monitor = Monitor([HostPlan(HOST, (UNIT,), thresholds)], clock=clock, settle_seconds=30.0)
    with capture_logs() as logs:
        play(monitor, clock, records, until=LOADING)
        clock.at = LOADING + timedelta(seconds=60)  # past settling: the first crash is final
        monitor.apply(Tick(clock.at))
        monitor.publish()
        monitor.publish()  # nothing new: no event repeats

    crashes = events(logs, "unit_crashed")
    assert len(crashes) == 1
    crash = crashes[0]
    assert crash["log_level"] == "warning"
    assert (crash["host"], crash["unit"], crash["cause"], crash["phase"]) == (
        HOST,
        UNIT,
        "dependency_mismatch",
        "loading_weights",
    )
    assert crash["exception_class"] == "RuntimeError"
    assert crash["message"].startswith("flashinfer-cubin version (0.6.3) does not match")
    assert crash["crashes_total"] == 1
    assert crash["hint"].startswith("`pip install flashinfer-cubin==0.6.4`")
    assert crash["runbook"] == "/runbook#dependency_mismatch"

    changes = events(logs, "unit_phase_changed")
    second = [event for event in changes if event["invocation_id"] != crash["invocation_id"]]
    assert [event["phase"] for event in second][-1] == "loading_weights"
    assert all(event["host"] == HOST and event["unit"] == UNIT for event in changes)
    phases = [(event["invocation_id"], event["phase"]) for event in changes]
    assert len(phases) == len(set(phases)), "a phase change was logged twice"
    assert (crash["invocation_id"], "crashed") in phases


def test_a_stall_is_logged_once_when_it_begins_and_once_when_it_clears() -> None:
    records = journal_records(KIMI_INCIDENT, HOST)
    clock = ManualClock(records[0].realtime or LOADING)
    thresholds = {phase: 3600.0 for phase in Phase} | {Phase.LOADING_WEIGHTS: 120.0}
    monitor = Monitor([HostPlan(HOST, (UNIT,), thresholds)], clock=clock)
    play(monitor, clock, records, until=LOADING + timedelta(seconds=2))  # before the first shard
    with capture_logs() as logs:
        for seconds in range(10, 200, 10):  # time passes with no record and no GPU growth
            clock.at = LOADING + timedelta(seconds=seconds)
            monitor.apply(Tick(clock.at))
            monitor.publish()
        stalled = events(logs, "unit_stalled")
        assert len(stalled) == 1
        assert stalled[0]["log_level"] == "warning"
        assert stalled[0]["phase"] == "loading_weights"
        assert stalled[0]["phase_entered_at"] == "2026-11-28T23:37:52.118000Z"
        assert stalled[0]["last_progress_at"] == "2026-11-28T23:37:53.912000Z"
        invocation = stalled[0]["invocation_id"]
        assert invocation is not None
        (unit,) = monitor.latest.hosts[0].units
        assert unit.stalled and unit.current is not None and unit.current.id == invocation

        # the load moves again: the next shard line, written now
        shard = next(r for r in records if "checkpoint shards" in r.message)
        clock.at = LOADING + timedelta(seconds=200)
        resumed = shard._replace(realtime=clock.at)
        monitor.apply(JournalBatch(HOST, (resumed,), resumed.cursor))
        monitor.publish()
    cleared = events(logs, "unit_stall_cleared")
    assert [(event["invocation_id"], event["phase"]) for event in cleared] == [
        (invocation, "loading_weights")
    ]
    assert len(events(logs, "unit_stalled")) == 1
    (unit,) = monitor.latest.hosts[0].units
    assert not unit.stalled


def _phase_events(logs: list[dict[str, Any]]) -> list[tuple[str, str, str | None]]:
    return [
        (event["invocation_id"], event["phase"], event["previous_phase"])
        for event in events(logs, "unit_phase_changed")
    ]


def test_every_phase_change_is_an_event_however_records_are_batched() -> None:
    """One batch or one record at a time: the same events, one per phase entered, in order."""
    records = [
        r
        for r in journal_records(KIMI_INCIDENT, HOST)
        if r.realtime is not None and r.realtime <= LOADING
    ]
    thresholds = {phase: 3600.0 for phase in Phase}
    one_by_one = Monitor([HostPlan(HOST, (UNIT,), thresholds)], clock=ManualClock(LOADING))
    with capture_logs() as slow:
        for record in records:
            one_by_one.apply(JournalBatch(HOST, (record,), record.cursor))
            one_by_one.publish()
    at_once = Monitor([HostPlan(HOST, (UNIT,), thresholds)], clock=ManualClock(LOADING))
    with capture_logs() as fast:
        at_once.apply(JournalBatch(HOST, records[:1], records[0].cursor))  # first sight
        at_once.publish()
        at_once.apply(JournalBatch(HOST, tuple(records[1:]), records[-1].cursor))
        at_once.publish()
    assert _phase_events(fast) == _phase_events(slow)
    phases = [phase for _, phase, _ in _phase_events(slow)]
    assert phases == [
        "starting", "initializing", "loading_weights", "crashed",
        "starting", "initializing", "loading_weights",
    ]  # fmt: skip
    assert all(
        previous == phases[index - 1]
        for index, (_, _, previous) in enumerate(_phase_events(slow))
        if index
    )


def test_history_is_not_logged_and_its_end_logs_each_unit_once() -> None:
    """Backfilled records log no phase changes; the end of the backfill logs each unit's
    current phase once (``previous_phase`` None: the sentinel's first sight of it)."""
    records = [
        r
        for r in journal_records(KIMI_INCIDENT, HOST)
        if r.realtime is not None and r.realtime <= LOADING
    ]
    monitor = Monitor([HostPlan(HOST, (UNIT,))], clock=ManualClock(LOADING))
    with capture_logs() as logs:
        for record in records:
            monitor.apply(JournalBatch(HOST, (record,), record.cursor, True, history=True))
            monitor.publish()
        assert _phase_events(logs) == []
        monitor.apply(JournalBatch(HOST, (), records[-1].cursor, backfill=False))
        monitor.publish()
    ((invocation, phase, previous),) = _phase_events(logs)
    assert (phase, previous) == ("loading_weights", None)
    assert invocation == records[-1].invocation_id
    assert events(logs, "unit_crashed") == []  # history: the first crash was not counted


def test_crash_hint_names_the_other_gpu_processes() -> None:
    """A ``gpu_memory_in_use`` crash: the event's hint says how much was free and which other
    processes hold the GPU, from the GPU collector's latest reading (not the unit's own)."""
    journal = Journal(unit=UNIT, host=HOST)
    invocation = "c" * 32
    clock = ManualClock(T0)
    monitor = Monitor([HostPlan(HOST, (UNIT,))], clock=clock, settle_seconds=5.0)
    gib = 1 << 30
    reading = GpuReading(
        (GpuDevice(0, "GPU-0", "NVIDIA H100", 70 * gib, 80 * gib),),
        (GpuProcess("GPU-0", 4242, 69 * gib), GpuProcess("GPU-0", 777, gib)),
        T0,
    )
    monitor.apply(GpuSample(HOST, reading, {4242: "jupyter.service", 777: UNIT}))
    lines = [
        journal.at(0).systemd(f"Started {UNIT} - vLLM.", invocation),
        journal.at(5).line(
            "(EngineCore_DP0 pid=777) ERROR 11-28 23:35:05 [core.py:708] ValueError: Free memory "
            "on device cuda:0 (10.00/80.00 GiB) on startup is less than desired GPU memory "
            "utilization (0.90, 72.00 GiB). Decrease GPU memory utilization or reduce GPU memory "
            "used by other processes.",
            invocation,
            777,
        ),
        journal.at(6).systemd(
            f"{UNIT}: Main process exited, code=exited, status=1/FAILURE", invocation
        ),
        journal.at(6).systemd(f"{UNIT}: Failed with result 'exit-code'.", invocation),
    ]
    with capture_logs() as logs:
        monitor.apply(JournalBatch(HOST, tuple(lines), lines[-1].cursor))
        clock.at = T0 + timedelta(seconds=60)
        monitor.apply(Tick(clock.at))
        monitor.publish()
    (crash,) = events(logs, "unit_crashed")
    assert crash["cause"] == "gpu_memory_in_use"
    assert crash["hint"] == (
        "GPU cuda:0 had 10.00 GiB free of 80.00 GiB; `--gpu-memory-utilization 0.90` wants "
        "72.00 GiB: other processes hold the rest. Stop them, or lower "
        "`--gpu-memory-utilization` to 0.12 or less. Now on its GPUs: jupyter.service "
        "(pid 4242) holds 69.0 GiB on GPU 0."
    )
    status = status_document(monitor.latest)
    (unit,) = status["units"]
    assert unit["last_crash"]["hint"]["text"] == crash["hint"]
    assert unit["last_crash"]["hint"]["rule"] == "free_memory_below_utilization"


def _oom_after_reading_at_start(holder: GpuProcess, unit_of_holder: str) -> tuple[Monitor, list]:
    """A start that sees ``holder`` on the GPUs, then loads on GPU 0 and dies of a CUDA OOM
    whose message lists no process; ``holder`` is gone by the time the crash settles."""
    journal = Journal(unit=UNIT, host=HOST)
    invocation = "d" * 32
    clock = ManualClock(T0)
    monitor = Monitor([HostPlan(HOST, (UNIT,))], clock=clock, settle_seconds=5.0)
    gib = 1 << 30
    devices = tuple(GpuDevice(i, f"GPU-{i}", "NVIDIA H100", 0, 80 * gib) for i in (0, 1))
    started = journal.at(0).systemd(f"Started {UNIT} - vLLM.", invocation)
    monitor.apply(JournalBatch(HOST, (started,), started.cursor))
    owners = {holder.pid: unit_of_holder, 777: UNIT}
    monitor.apply(
        GpuSample(HOST, GpuReading(devices, (holder,), T0 + timedelta(seconds=2)), owners)
    )
    loaded = (holder, GpuProcess("GPU-0", 777, 40 * gib))
    monitor.apply(GpuSample(HOST, GpuReading(devices, loaded, T0 + timedelta(seconds=20)), owners))
    lines = [
        journal.at(25).line(
            "(EngineCore_DP0 pid=777) ERROR 11-28 23:35:05 [core.py:708] torch.OutOfMemoryError: "
            "CUDA out of memory. Tried to allocate 2.00 GiB.",
            invocation,
            777,
        ),
        journal.at(26).systemd(
            f"{UNIT}: Main process exited, code=exited, status=1/FAILURE", invocation
        ),
    ]
    monitor.apply(JournalBatch(HOST, tuple(lines), lines[-1].cursor))
    monitor.apply(GpuSample(HOST, GpuReading(devices, (), T0 + timedelta(seconds=30)), owners))
    with capture_logs() as logs:
        clock.at = T0 + timedelta(seconds=60)
        monitor.apply(Tick(clock.at))
        monitor.publish()
    return monitor, logs


def test_memory_other_processes_held_at_start_is_named_as_the_oom_cause() -> None:
    """The GPU collector saw jupyter hold 30 of GPU 0's 80 GiB when the incarnation started,
    and the unit then loaded on GPU 0: the hint says the memory was already in use, in the
    event and in ``/status``, though jupyter is gone by then."""
    gib = 1 << 30
    monitor, logs = _oom_after_reading_at_start(
        GpuProcess("GPU-0", 4242, 30 * gib), "jupyter.service"
    )
    (crash,) = events(logs, "unit_crashed")
    assert crash["cause"] == "cuda_oom"
    assert "already in use by another process" in crash["hint"]
    assert "nvidia-smi --query-compute-apps=pid,process_name,used_memory" in crash["hint"]
    (unit,) = status_document(monitor.latest)["units"]
    assert unit["last_crash"]["hint"]["text"] == crash["hint"]


def test_memory_held_on_another_gpu_at_start_is_not_the_cause() -> None:
    """Another unit on GPU 1, which this unit never used: the memory budget hint stays."""
    gib = 1 << 30
    _, logs = _oom_after_reading_at_start(GpuProcess("GPU-1", 555, 70 * gib), "vllm-b.service")
    (crash,) = events(logs, "unit_crashed")
    assert "already in use" not in crash["hint"]


def test_crashes_that_settle_together_are_one_event_each_with_their_own_cause() -> None:
    """Three crashes 3 s apart with three causes settle on the same tick: three
    ``unit_crashed`` events, each naming its own invocation and cause (issue 15 §5: all three
    said the last one's)."""
    from tests.support.records import T0, Journal

    journal = Journal(UNIT, HOST)
    exceptions = {
        "cuda_oom": "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB.",
        "dependency_mismatch": "RuntimeError: flashinfer-cubin version (0.6.3) does not match "
        "flashinfer version (0.6.4). Please install the same version of both packages.",
        "kv_cache_insufficient": "ValueError: No available memory for the cache blocks. Try "
        "increasing `gpu_memory_utilization` when initializing the engine.",
    }
    records: list[Record] = []
    for n, exception in enumerate(exceptions.values()):
        invocation, at = f"{n + 1:032x}", 3 * n
        header = "ERROR 11-29 10:00:03 [core.py:1] "
        records += [
            journal.at(at).systemd(f"Started {UNIT}.", invocation),
            journal.at(at + 0.5).line(header + "EngineCore failed to start.", invocation),
            journal.at(at + 0.5).line(header + "Traceback (most recent call last):", invocation),
            journal.at(at + 0.5).line(header + '  File "core.py", line 1, in run', invocation),
            journal.at(at + 0.5).line(header + exception, invocation),
            journal.at(at + 1).systemd(
                f"{UNIT}: Main process exited, code=exited, status=1/FAILURE", invocation
            ),
        ]
    monitor = Monitor([HostPlan(HOST, (UNIT,))], clock=lambda: T0)
    with capture_logs() as logs:
        monitor.apply(JournalBatch(HOST, tuple(records), records[-1].cursor))
        monitor.publish()
        monitor.apply(Tick(T0 + timedelta(seconds=60)))  # all three settle now
        monitor.publish()
        monitor.publish()
    crashes = events(logs, "unit_crashed")
    assert [(c["invocation_id"], c["cause"], c["crashes_total"]) for c in crashes] == [
        (f"{n + 1:032x}", cause, n + 1) for n, cause in enumerate(exceptions)
    ]
    assert [c["exception_class"] for c in crashes] == [
        "torch.OutOfMemoryError",
        "RuntimeError",
        "ValueError",
    ]
