"""Units are forgotten (issue 22 defect 5): a unit that logged nothing for
``forget_unit_after_seconds`` of log time loses its tracker, series and saved counters."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

from structlog.testing import capture_logs

from tests.support.monitor_driver import ManualClock, events
from tests.support.records import T0, Journal
from vllm_sentinel.monitor import HostPlan, Monitor, Tick
from vllm_sentinel.sources.journal import JournalBatch
from vllm_sentinel.state.cursor_store import CursorStore

HOST = "llm-two"
WEEK = 7 * 86400.0


def test_a_unit_silent_for_a_week_is_forgotten_and_its_counters_no_longer_saved(
    tmp_path: Path,
) -> None:
    """``vllm-dead`` crashed 8 days ago and never came back, ``vllm-live`` logs today: after a
    tick only ``vllm-live`` is published and saved."""
    clock = ManualClock(T0)
    cursors = CursorStore(tmp_path)
    monitor = Monitor(
        [HostPlan(HOST, ("vllm-*.service",), same_clock=True)],
        clock=clock,
        cursors=cursors,
        forget_unit_after_seconds=WEEK,
    )
    dead = Journal(unit="vllm-dead.service")
    records = [
        dead.at(0).systemd("Started vllm-dead.service.", "d" * 32),
        dead.at(5).systemd(
            "vllm-dead.service: Main process exited, code=exited, status=1/FAILURE", "d" * 32
        ),
    ]
    monitor.apply(JournalBatch(HOST, tuple(records), records[-1].cursor))
    clock.at = T0 + timedelta(seconds=60)
    monitor.apply(Tick(clock.at))  # the crash settles
    live = Journal(unit="vllm-live.service")
    later = live.at(8 * 86400).systemd("Started vllm-live.service.", "e" * 32)
    clock.at = T0 + timedelta(days=8)
    monitor.apply(JournalBatch(HOST, (later,), later.cursor))
    monitor.publish()
    assert {unit.unit for unit in monitor.latest.hosts[0].units} == {
        "vllm-dead.service",
        "vllm-live.service",
    }
    with capture_logs() as logs:
        clock.at = T0 + timedelta(days=8, seconds=1)
        monitor.apply(Tick(clock.at))
        monitor.publish()
    assert {unit.unit for unit in monitor.latest.hosts[0].units} == {"vllm-live.service"}
    (forgotten,) = events(logs, "unit_forgotten")
    assert (forgotten["unit"], forgotten["idle_seconds"]) == ("vllm-dead.service", 8 * 86400 - 4)
    assert monitor.checkpoint() == 1
    cursors.flush_sync()
    again = CursorStore(tmp_path)
    assert again.load(HOST) == later.cursor
    saved = again.saved(HOST)
    assert saved is not None and set(saved.units) == {"vllm-live.service"}


def test_nothing_is_forgotten_when_forgetting_is_off() -> None:
    """``forget_unit_after_seconds = 0`` keeps every unit, however old."""
    clock = ManualClock(T0)
    monitor = Monitor([HostPlan(HOST, ("vllm-*.service",), same_clock=True)], clock=clock)
    record = Journal(unit="vllm-old.service").at(0).systemd("Started vllm-old.service.", "f" * 32)
    monitor.apply(JournalBatch(HOST, (record,), record.cursor))
    clock.at = T0 + timedelta(days=365)
    monitor.apply(Tick(clock.at))
    monitor.publish()
    assert [unit.unit for unit in monitor.latest.hosts[0].units] == ["vllm-old.service"]
