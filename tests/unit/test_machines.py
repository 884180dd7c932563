"""One configured host whose journal holds several machines (a journal-remote directory).

The daemon and ``watch`` put the configured host's name on every record; the machine that
logged it (``_HOSTNAME``) must still keep same-named units apart (``TrackerSet``).
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from vllm_sentinel.engine.decode.record import Record
from vllm_sentinel.engine.tracker import TrackerSet

T0 = datetime(2026, 11, 28, 23, 36, 21, tzinfo=UTC)
UNIT = "vllm-ok.service"


def _line(seconds: int, message: str, machine: str, invocation: str, pid: int) -> Record:
    return Record(
        message,
        T0 + timedelta(seconds=seconds),
        "remote",
        UNIT,
        invocation,
        pid,
        "python3",
        6,
        machine=machine,
    )


def _started(seconds: int, machine: str, invocation: str) -> Record:
    return Record(
        "Started vllm-ok.service - vLLM.",
        T0 + timedelta(seconds=seconds),
        "remote",
        UNIT,
        invocation,
        1,
        "systemd",
        6,
        message_id="39f53479d3a045ac8e11786248231fbf",
        from_manager=True,
        machine=machine,
    )


class TestTrackerSetMachines:
    def test_same_unit_of_two_machines_never_merges(self) -> None:
        trackers = TrackerSet(("vllm*",))
        ok, stuck = "a" * 32, "b" * 32
        trackers.feed_many(
            [
                _started(0, "gpu-7", ok),
                _started(1, "gpu-8", stuck),
                _line(
                    2, "(APIServer pid=10) INFO:     Application startup complete.", "gpu-7", ok, 10
                ),
                _line(
                    3,
                    "(APIServer pid=20) INFO 11-28 23:36:24 [x.py:1] Starting to load model m",
                    "gpu-8",
                    stuck,
                    20,
                ),
            ]
        )
        snapshots = {t.unit: t.snapshot() for t in trackers}
        assert sorted(snapshots) == ["gpu-8/vllm-ok.service", UNIT]
        assert {s.host for s in snapshots.values()} == {"remote"}
        first, second = snapshots[UNIT], snapshots["gpu-8/vllm-ok.service"]
        assert [i.id for i in first.incarnations] == [ok]
        assert [i.id for i in second.incarnations] == [stuck]
        assert first.incarnations[-1].crash is None
        assert second.incarnations[-1].crash is None
        assert first.incarnations[-1].phase.value == "ready"
        assert second.incarnations[-1].phase.value != "ready"
        assert trackers.machine_units_total == 1

    def test_one_machine_keeps_the_plain_name(self) -> None:
        trackers = TrackerSet()
        trackers.feed_many([_started(0, "gpu-7", "a" * 32), _started(5, "gpu-7", "c" * 32)])
        assert [t.unit for t in trackers] == [UNIT]
        assert trackers.machine_units_total == 0

    def test_records_without_machine_merge_as_before(self) -> None:
        trackers = TrackerSet()
        trackers.feed_many(
            [_started(0, "gpu-7", "a" * 32), Record("x", T0, "remote", UNIT, "a" * 32, 10)]
        )
        assert [t.unit for t in trackers] == [UNIT]

    def test_restore_of_a_machine_unit_matches_the_unit_glob(self) -> None:
        from vllm_sentinel.engine.counters import UnitCounters

        trackers = TrackerSet(("vllm*",))
        assert trackers.restore("remote", "gpu-8/vllm-ok.service", UnitCounters())


class TestMonitorMachines:
    """The daemon's and ``watch``'s Monitor: one configured host, a journal of two machines."""

    def test_two_machines_units_stay_apart_and_neither_crashes(self) -> None:
        from vllm_sentinel.monitor import HostPlan, Monitor, Tick
        from vllm_sentinel.sources.journal import JournalBatch

        now = [T0]
        monitor = Monitor([HostPlan("remote", ("vllm*",))], clock=lambda: now[0], settle_seconds=5)
        ok, stuck = "a" * 32, "b" * 32
        records = (
            _started(0, "gpu-7", ok),
            _started(1, "gpu-8", stuck),
            _line(2, "(APIServer pid=10) INFO:     Application startup complete.", "gpu-7", ok, 10),
        )
        monitor.apply(JournalBatch("remote", records, None, False))
        now[0] = T0 + timedelta(seconds=60)
        monitor.apply(Tick(now[0]))
        (host,) = monitor.publish().hosts
        units = {unit.unit: unit for unit in host.units}
        assert sorted(units) == ["gpu-8/vllm-ok.service", UNIT]
        assert [i.id for i in units[UNIT].incarnations] == [ok]
        assert [i.id for i in units["gpu-8/vllm-ok.service"].incarnations] == [stuck]
        for unit in units.values():
            assert unit.host == "remote"
            assert sum(unit.crashes_total.values()) == 0
            assert unit.incarnations[-1].crash is None
