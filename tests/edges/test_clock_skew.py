"""Crash settling on one clock (issue 22 defect 4): the watched host's clock 600 s behind the
daemon's, or one line dated in the future, must not settle a crash before its traceback."""

from __future__ import annotations

from datetime import timedelta

from tests.support.monitor_driver import ManualClock
from tests.support.records import T0, Journal
from vllm_sentinel.engine.catalog.causes import CrashCause
from vllm_sentinel.engine.decode.record import Record
from vllm_sentinel.engine.tracker import UnitTracker
from vllm_sentinel.monitor import HostPlan, Monitor, Tick
from vllm_sentinel.sources.journal import JournalBatch

HOST = "llm-two"
UNIT = "vllm-kimi-k25.service"
A = "a" * 32
WORKER = 221343
LOAD = (
    "(Worker_TP0 pid=221343) INFO 11-28 23:36:21 [gpu_model_runner.py:3425] Starting to load "
    "model /shared/kimi..."
)
TRACEBACK = (
    "(Worker_TP0 pid=221343) ERROR 11-28 23:36:40 [multiproc_executor.py:1] Traceback (most "
    "recent call last):",
    '(Worker_TP0 pid=221343) ERROR 11-28 23:36:40 [multiproc_executor.py:1]   File "x.py", line '
    "1, in load",
    "(Worker_TP0 pid=221343) ERROR 11-28 23:36:40 [multiproc_executor.py:1] torch.OutOfMemoryError: "
    "CUDA out of memory. Tried to allocate 2.00 GiB.",
)
EXITED = f"{UNIT}: Main process exited, code=exited, status=1/FAILURE"


def _crash_counts(monitor: Monitor) -> dict[str, float]:
    (unit,) = monitor.latest.hosts[0].units
    return {cause.value: count for cause, count in unit.crashes_total.items()}


def _play_skewed(skew: timedelta) -> Monitor:
    """The host's clock ``skew`` behind the daemon's; the traceback arrives 5 s after systemd's
    exit record; the daemon ticks every second meanwhile and for 60 s after."""
    journal = Journal()
    clock = ManualClock(T0 + skew)
    monitor = Monitor([HostPlan(HOST, (UNIT,))], clock=clock, settle_seconds=30.0)

    def arrive(seconds: float, record: Record) -> None:
        clock.at = T0 + skew + timedelta(seconds=seconds)
        monitor.apply(JournalBatch(HOST, (record,), record.cursor))

    arrive(0, journal.at(0).systemd(f"Started {UNIT}.", A))
    arrive(21, journal.at(21).line(LOAD, A, WORKER))
    arrive(40, journal.at(40).systemd(EXITED, A))
    for second in range(41, 46):
        clock.at = T0 + skew + timedelta(seconds=second)
        monitor.apply(Tick(clock.at))
    for text in TRACEBACK:
        arrive(45, journal.at(45).line(text, A, WORKER))
    for second in range(46, 120):
        clock.at = T0 + skew + timedelta(seconds=second)
        monitor.apply(Tick(clock.at))
    monitor.publish()
    return monitor


class TestSettlingOnOneClock:
    """The window is the host's log time moved on by the daemon's elapsed time only."""

    def test_in_sync(self) -> None:
        """Clocks agree: the traceback's cause is counted."""
        assert _crash_counts(_play_skewed(timedelta(0))) == {"cuda_oom": 1}

    def test_host_clock_600_s_behind(self) -> None:
        """The host 600 s behind the daemon (central over SSH): counted the same, not unknown."""
        assert _crash_counts(_play_skewed(timedelta(seconds=600))) == {"cuda_oom": 1}

    def test_host_clock_600_s_ahead(self) -> None:
        """Ahead works alike (the crash still settles once the window passed)."""
        assert _crash_counts(_play_skewed(timedelta(seconds=-600))) == {"cuda_oom": 1}


class TestFutureDatedLine:
    """One line dated far ahead does not move the log time crashes settle by."""

    def test_one_future_line_then_a_crash_with_a_late_traceback(self) -> None:
        journal = Journal()
        tracker = UnitTracker(UNIT, HOST, settle_seconds=30)
        tracker.feed(journal.at(0).systemd(f"Started {UNIT}.", A))
        tracker.feed(journal.at(3600).line("INFO 11-29 00:35:00 [x.py:1] clock jumped", A, 7))
        tracker.feed(journal.at(21).line(LOAD, A, WORKER))
        tracker.feed(journal.at(40).systemd(EXITED, A))
        for text in TRACEBACK:
            tracker.feed(journal.at(45).line(text, A, WORKER))
        tracker.advance(T0 + timedelta(seconds=100))
        assert dict(tracker.snapshot().crashes_total) == {CrashCause.CUDA_OOM: 1}
