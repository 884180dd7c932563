"""The engine (tracker, Monitor, metrics) against hostile and broken records: nothing raises,
memory and series stay bounded, phases only move forward, re-reads are harmless, and the same
input always gives the same state."""

from __future__ import annotations

import asyncio
import tracemalloc
from collections.abc import AsyncIterator, Sequence
from dataclasses import replace
from datetime import UTC, datetime, timedelta

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st
from prometheus_client import generate_latest

from tests.support.hostile import (
    FAR_FUTURE,
    PROPERTY,
    T0,
    UNIT,
    assert_tracker_bounded,
    chunk,
    engine_records,
    journal_entries,
    tracker_sizes,
)
from vllm_sentinel.engine.catalog.phases import PHASE_ORDER, Phase
from vllm_sentinel.engine.decode.journal_json import JournalJsonDecoder
from vllm_sentinel.engine.decode.record import Record
from vllm_sentinel.engine.report import to_json
from vllm_sentinel.engine.snapshot import HostSnapshot, Snapshot, UnitSnapshot
from vllm_sentinel.engine.tracker import TrackerSet, UnitTracker
from vllm_sentinel.monitor import HostPlan, Monitor
from vllm_sentinel.replay import replay
from vllm_sentinel.serve.exporter import SentinelCollector, make_registry
from vllm_sentinel.serve.metrics import LABEL_VALUE_LIMIT
from vllm_sentinel.sources.journal import FollowerSettings, JournalBatch, JournalFollower

MIB = 1 << 20
HOST = "h"
_TERMINAL_RANK = PHASE_ORDER.index(Phase.STOPPED)


def _rank(phase: Phase) -> int:
    return min(PHASE_ORDER.index(phase), _TERMINAL_RANK)


def _exposition(units: Sequence[UnitSnapshot], at: datetime = T0) -> str:
    snapshot = Snapshot((HostSnapshot(HOST, tuple(units)),), at)
    registry = make_registry(SentinelCollector(lambda: snapshot))
    return generate_latest(registry).decode("utf-8")


def _series(text: str) -> list[str]:
    return [line for line in text.splitlines() if line and not line.startswith("#")]


def _render_everything(tracker: UnitTracker) -> None:
    unit = tracker.snapshot()
    _exposition([unit], at=FAR_FUTURE)
    orjson.dumps(to_json([unit]))


def _fed(records: Sequence[Record], *, max_incarnations: int = 8) -> UnitTracker:
    tracker = UnitTracker(UNIT, HOST, max_incarnations=max_incarnations)
    for record in records:
        tracker.feed(record)
    return tracker


class TestNothingEscapes:
    """Hostile records reach every part of the engine without an exception."""

    @PROPERTY
    @given(records=engine_records(), max_incarnations=st.integers(1, 8))
    def test_any_records_never_raise_and_every_buffer_stays_bounded(
        self, records: list[Record], max_incarnations: int
    ) -> None:
        """Corpus lines, systemd verdicts, tracebacks, hostile text, wild times: bounded, no raise."""
        tracker = UnitTracker(UNIT, HOST, max_incarnations=max_incarnations)
        for record in records:
            tracker.feed(record)
            assert_tracker_bounded(tracker, max_incarnations, max_invocation_id=32)
        tracker.advance(FAR_FUTURE)
        tracker.finish()
        assert_tracker_bounded(tracker, max_incarnations, max_invocation_id=32)
        _render_everything(tracker)

    @PROPERTY
    @given(entries=st.lists(journal_entries, max_size=30), cuts=st.lists(st.integers(0, 4096)))
    def test_decoded_hostile_journal_runs_through_trackers_and_exposition(
        self, entries: list[dict[str, object]], cuts: list[int]
    ) -> None:
        """Journal objects with any field of any type: decoded, tracked, rendered, no raise."""
        data = b"\n".join(orjson.dumps(entry) for entry in entries) + b"\n"
        decoder = JournalJsonDecoder(HOST)
        trackers = TrackerSet()
        for piece in chunk(data, cuts):
            for record in decoder.feed(piece):
                trackers.feed(record)
        units = []
        for tracker in trackers:
            tracker.finish()
            assert_tracker_bounded(tracker)
            units.append(tracker.snapshot())
        _exposition(units)
        orjson.dumps(to_json(units))

    @PROPERTY
    @given(data=st.binary(max_size=4096), cuts=st.lists(st.integers(0, 4096)))
    def test_replay_of_random_bytes_never_raises(self, data: bytes, cuts: list[int]) -> None:
        """``replay`` of any bytes, text or JSON-looking, returns a result."""
        for head in (b"", b'{"MESSAGE":"x","__CURSOR":"c"}\n'):
            result = replay([chunk(head + data, cuts)])
            orjson.dumps(to_json(result.units))

    def test_far_future_record_time_then_header_times_without_a_year(self) -> None:
        """A record at 9999-12-31, then vLLM header lines in January with no record time."""
        tracker = UnitTracker(UNIT, HOST)
        tracker.feed(Record("INFO 12-31 23:59:59 [x.py:1] late", FAR_FUTURE, HOST, UNIT, "a" * 32))
        for line in ("INFO 01-01 00:00:01 [x.py:1] wraps", "ERROR 02-30 00:00:00 [x.py:1] no date"):
            tracker.feed(Record(line, None, HOST, UNIT, "a" * 32))
        tracker.advance(FAR_FUTURE)
        _render_everything(tracker)

    def test_times_going_backwards_never_move_a_phase_back(self) -> None:
        """A ready incarnation that then reads older loading lines stays ready."""
        tracker = UnitTracker(UNIT, HOST)
        ready = "(APIServer pid=1) INFO:     Application startup complete."
        loading = "(Worker_TP0 pid=2) INFO 11-28 23:36:00 [gpu_model_runner.py:1] Starting to load model m..."
        tracker.feed(Record(ready, T0 + timedelta(hours=1), HOST, UNIT, "a" * 32))
        for back in range(1, 50):
            tracker.feed(Record(loading, T0 - timedelta(days=back * 300), HOST, UNIT, "a" * 32))
        assert tracker.snapshot().current is not None
        assert tracker.snapshot().current.phase is Phase.READY  # type: ignore[union-attr]


class TestBoundedMemory:
    """What a hostile log can make the tracker keep."""

    def test_a_traceback_that_never_ends_costs_nothing(self) -> None:
        """50,000 frame lines of one traceback, and 1,000 processes each opening one: bounded."""
        tracker = UnitTracker(UNIT, HOST)
        start = Record("Traceback (most recent call last):", T0, HOST, UNIT, "a" * 32, 7)
        frame = Record('  File "/x.py", line 1, in f', T0, HOST, UNIT, "a" * 32, 7)
        tracker.feed(start)
        tracemalloc.start()
        try:
            for _ in range(50_000):
                tracker.feed(frame)
            for pid in range(1000, 2000):
                tracker.feed(start._replace(pid=pid))
                tracker.feed(frame._replace(pid=pid))
            _, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
        assert peak < 2 * MIB, f"peak {peak / MIB:.2f} MiB"
        assert_tracker_bounded(tracker)
        tracker.feed(Record("ValueError: finally", T0, HOST, UNIT, "a" * 32, 7))
        _render_everything(tracker)

    def test_huge_lines_leave_only_cut_text_behind(self) -> None:
        """1 MiB exception classes, messages, models and contexts are kept cut, not whole."""
        tracker = UnitTracker(UNIT, HOST)
        huge = "E" * MIB
        messages = [
            f"INFO 11-28 23:36:00 [api_server.py:1] vLLM API server version {huge}",
            f"(APIServer pid=1) INFO 02-10 10:00:01 [api_server.py:872] vLLM server version "
            f"0.15.1, serving model {huge}",
            f"ERROR 11-28 23:36:00 [core.py:1] {huge}",
            "Traceback (most recent call last):",
            '  File "/x.py", line 1, in f',
            huge,  # no "Class: message" shape: the whole line is taken as the exception
            "Traceback (most recent call last):",
            '  File "/x.py", line 1, in f',
            f"{huge}Error: {huge}",
            f"{huge}Error: {huge}",  # an orphan exception line
        ]
        for index, message in enumerate(messages):
            tracker.feed(Record(message, T0, HOST, UNIT, "a" * 32, 5, cursor=f"s=1;i={index:x}"))
        tracker.feed(
            Record(
                f"{UNIT}: Main process exited, code=exited, status=1/FAILURE",
                T0,
                HOST,
                UNIT,
                "a" * 32,
                1,
                "systemd",
                from_manager=True,
            )
        )
        tracker.finish()
        assert_tracker_bounded(tracker)
        sizes = tracker_sizes(tracker)
        assert sizes["evidence_exception"] <= 1000 and sizes["evidence_message"] <= 1000
        crash = tracker.snapshot().last_crash
        assert crash is not None
        exposition = _exposition([tracker.snapshot()])
        assert max(len(line) for line in _series(exposition)) < 12 * LABEL_VALUE_LIMIT

    def test_many_processes_in_many_incarnations_keep_a_bounded_pid_map(self) -> None:
        """20 incarnations of 1,000 PIDs each: the PID map holds at most 64 per kept incarnation."""
        tracker = UnitTracker(UNIT, HOST)
        for incarnation in range(20):
            for pid in range(1000):
                tracker.feed(
                    Record(
                        "INFO 11-28 23:36:00 [x.py:1] hello",
                        T0,
                        HOST,
                        UNIT,
                        f"{incarnation:032x}",
                        10_000 * (incarnation + 1) + pid,
                    )
                )
        assert_tracker_bounded(tracker)
        kept = {id(incarnation) for incarnation in tracker._incs.items}
        assert all(id(owner) in kept for owner in tracker._incs.pid_owner.values())


class TestInvariants:
    """Properties every input keeps."""

    @PROPERTY
    @given(records=engine_records())
    def test_phases_never_go_backwards_within_an_incarnation(self, records: list[Record]) -> None:
        """Timelines only move forward, and no incarnation's phase ever returns to an earlier one."""
        tracker = UnitTracker(UNIT, HOST, max_incarnations=4)
        previous: dict[str, int] = {}
        for record in records:
            tracker.feed(record)
            current: dict[str, int] = {}
            for incarnation in tracker.snapshot().incarnations:
                ranks = [_rank(entry.phase) for entry in incarnation.phases]
                assert ranks == sorted(ranks), incarnation.phases
                assert _rank(incarnation.phase) == ranks[-1]
                if incarnation.id is not None:
                    current[incarnation.id] = _rank(incarnation.phase)
                    assert current[incarnation.id] >= previous.get(incarnation.id, 0)
            previous = current

    @PROPERTY
    @given(records=engine_records(), split=st.integers(0, 60), again=st.integers(0, 60))
    def test_a_batch_fed_twice_is_the_same_as_once(
        self, records: list[Record], split: int, again: int
    ) -> None:
        """Re-reading records after a reconnect (same cursors) changes nothing but the count."""
        once = _fed(records)
        twice = UnitTracker(UNIT, HOST)
        head, tail = records[:split], records[split:]
        older = head[len(head) - again :] if again else []  # a resume from an older cursor
        for record in [*head, *tail[:again], *older, *tail, *tail]:
            twice.feed(record)
        assert replace(twice.snapshot(), duplicates_total=0) == replace(
            once.snapshot(), duplicates_total=0
        )

    @PROPERTY
    @given(records=engine_records())
    def test_a_monitor_applying_a_batch_twice_publishes_the_same_snapshot(
        self, records: list[Record]
    ) -> None:
        """The Monitor path: the same JournalBatch applied twice gives the same /metrics."""
        at = datetime(2027, 1, 1, tzinfo=UTC)
        plan = HostPlan(HOST, (UNIT,))
        once, twice = Monitor([plan], clock=lambda: at), Monitor([plan], clock=lambda: at)
        batch = JournalBatch(HOST, tuple(records), records[-1].cursor if records else None)
        once.apply(batch)
        twice.apply(batch)
        twice.apply(batch)
        render = [
            generate_latest(make_registry(SentinelCollector(lambda m=m: m.publish())))
            for m in (once, twice)
        ]
        assert render[0] == render[1]

    @PROPERTY
    @given(records=engine_records())
    def test_the_same_records_always_give_the_same_snapshot(self, records: list[Record]) -> None:
        """Two trackers fed the same records agree on everything, JSON report included."""
        first, second = _fed(records), _fed(records)
        assert first.snapshot() == second.snapshot()
        first.finish()
        second.finish()
        assert first.snapshot() == second.snapshot()
        assert orjson.dumps(to_json([first.snapshot()])) == orjson.dumps(
            to_json([second.snapshot()])
        )


def _incarnation_records(index: int, seqnum: int) -> list[Record]:
    """One incarnation with its own model, version and exception class, ending in a crash."""
    invocation = f"{index:032x}"
    at = T0 + timedelta(minutes=index)
    lines = [
        f"(APIServer pid=1) INFO 02-10 10:00:01 [api_server.py:872] vLLM server version "
        f"0.{index}.1, serving model org/model-{index}-{'x' * (index % 300)}",
        "Traceback (most recent call last):",
        '  File "/x.py", line 1, in f',
        f"Custom{index}Error: message number {index} {'y' * (index % 500)}",
    ]
    records = [
        Record(
            f"Started {UNIT}.",
            at,
            HOST,
            UNIT,
            invocation,
            1,
            "systemd",
            6,
            f"s=77;i={seqnum:x}",
            "39f53479d3a045ac8e11786248231fbf",
            True,
        )
    ]
    for offset, line in enumerate(lines, 1):
        records.append(
            Record(
                line,
                at + timedelta(seconds=offset),
                HOST,
                UNIT,
                invocation,
                100,
                "python3",
                6,
                f"s=77;i={seqnum + offset:x}",
            )
        )
    records.append(
        Record(
            f"{UNIT}: Main process exited, code=exited, status=1/FAILURE",
            at + timedelta(seconds=9),
            HOST,
            UNIT,
            invocation,
            1,
            "systemd",
            6,
            f"s=77;i={seqnum + 9:x}",
            None,
            True,
        )
    )
    return records


class TestSeriesStayBounded:
    """A log cannot explode the number of series."""

    def test_ten_thousand_incarnations_with_distinct_models_and_exceptions(self) -> None:
        """After 10, 100, 1,000 and 10,000 crashing incarnations the exposition has the same series."""
        at = T0 + timedelta(days=30)
        monitor = Monitor([HostPlan(HOST, (UNIT,))], clock=lambda: at)
        counts: dict[int, int] = {}
        seen_values: dict[int, set[str]] = {}
        for index in range(10_000):
            monitor.apply(JournalBatch(HOST, tuple(_incarnation_records(index, index * 10)), None))
            if index + 1 in (10, 100, 1_000, 10_000):
                snapshot = monitor.publish()
                series = _series(_exposition(snapshot.hosts[0].units, at))
                counts[index + 1] = len(series)
                seen_values[index + 1] = {
                    line for line in series if "_info{" in line and "unit_" in line
                }
        assert len(set(counts.values())) == 1, counts
        final = seen_values[10_000]
        (info,) = [line for line in final if "incarnation_info" in line]  # the current one only
        (crash,) = [line for line in final if "last_crash_info" in line]  # the last crash only
        assert 'model="org/model-9999-' in info and 'vllm_version="0.9999.1"' in info
        assert 'exception="Custom9999Error"' in crash
        unit = monitor.latest.hosts[0].units[0]
        assert unit.starts_total == 10_000
        assert len(unit.incarnations) == 8

    def test_one_incarnation_cannot_churn_its_info_series(self) -> None:
        """1,000 engine-init lines naming 1,000 models: the info series takes at most 2 values."""
        tracker = UnitTracker(UNIT, HOST)
        values: set[str] = set()
        for index in range(1_000):
            line = (
                f"INFO 04-28 10:00:05 [core.py:58] Initializing a V1 LLM engine (v0.8.{index}) "
                f"with config: model='org/model-{index}', speculative_config=None"
            )
            tracker.feed(Record(line, T0, HOST, UNIT, "a" * 32, 7, cursor=f"s=5;i={index:x}"))
            series = _series(_exposition([tracker.snapshot()]))
            values |= {line for line in series if "incarnation_info{" in line}
        assert len(values) <= 2, sorted(values)[:5]

    def test_a_process_cannot_invent_units_by_writing_unit_fields(self) -> None:
        """UNIT=/SYSLOG_IDENTIFIER=systemd from a service process do not create units or series."""
        decoder = JournalJsonDecoder(HOST)
        monitor = Monitor([HostPlan(HOST, ("vllm-*.service",))], clock=lambda: T0)
        lines = []
        for index in range(2_000):
            lines.append(
                orjson.dumps(
                    {
                        "MESSAGE": f"vllm-evil-{index}.service: Main process exited, code=killed, status=9/KILL",
                        "UNIT": f"vllm-evil-{index}.service",
                        "SYSLOG_IDENTIFIER": "systemd",
                        "_COMM": "systemd",  # prctl(PR_SET_NAME) can do this too
                        "_PID": "4242",
                        "_SYSTEMD_UNIT": UNIT,
                        "_SYSTEMD_INVOCATION_ID": "a" * 32,
                        "INVOCATION_ID": f"{index:032x}",
                        "__CURSOR": f"s=99;i={index:x}",
                        "__REALTIME_TIMESTAMP": str(int(T0.timestamp() * 1e6) + index),
                    }
                )
            )
        records = decoder.feed(b"\n".join(lines) + b"\n")
        monitor.apply(JournalBatch(HOST, tuple(records), None))
        (unit,) = monitor.publish().hosts[0].units
        assert unit.unit == UNIT
        assert len(unit.incarnations) == 1 and unit.incarnations[0].id == "a" * 32
        # (the lines still count as the unit's own, so the unit may "crash" itself: a unit can
        # lie about itself through the journal, never about another unit)


class _CannedTransport:
    """A transport whose journalctl prints canned bytes once, then follows quietly."""

    def __init__(self, host: str, chunks: list[bytes]) -> None:
        self.host = host
        self._chunks = chunks
        self.followed = asyncio.Event()

    async def stream(self, argv: Sequence[str]) -> AsyncIterator[bytes]:
        if "--follow" in argv:
            self.followed.set()
            await asyncio.Event().wait()  # until cancelled
        for piece in self._chunks:
            yield piece

    async def run(self, argv: Sequence[str], timeout: float) -> bytes:  # the Transport protocol
        return b""

    async def close(self) -> None:
        return None


class TestSkipsAreExported:
    """Skipped records end up in vllm_sentinel_records_skipped_total."""

    @pytest.mark.asyncio
    async def test_skips_flow_from_follower_through_monitor_to_metrics(self) -> None:
        """Broken JSON, non-objects, missing messages and too-long lines are counted by reason."""
        good = orjson.dumps(
            {
                "MESSAGE": "ok",
                "_SYSTEMD_UNIT": UNIT,
                "__CURSOR": "s=1;i=1",
                "_SYSTEMD_INVOCATION_ID": "a" * 32,
            }
        )
        chunks = [
            b"{broken\n[1]\n",
            b'{"FOO":"x"}\n' + good + b"\n",
            b'{"MESSAGE":"' + b"z" * (5 * MIB),
            b'"}\n',
            b'{"MESSAGE":{"a":1}}\n',
        ]
        transport = _CannedTransport(HOST, chunks)
        follower = JournalFollower(
            HOST, transport, FollowerSettings(units=(UNIT,)), clock=lambda: T0
        )
        monitor = Monitor([HostPlan(HOST, (UNIT,))], clock=lambda: T0)
        monitor.register_collector(
            HOST, "journal", lambda: follower.state, lambda: follower.skipped
        )

        async def emit(batch: JournalBatch) -> None:
            monitor.apply(batch)

        task = asyncio.create_task(follower.run(emit))
        try:
            await asyncio.wait_for(transport.followed.wait(), 10)
        finally:
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
        text = generate_latest(make_registry(SentinelCollector(monitor.publish))).decode()
        skipped = {
            line.split('reason="')[1].split('"')[0]: float(line.rsplit(" ", 1)[1])
            for line in _series(text)
            if line.startswith("vllm_sentinel_records_skipped_total{")
        }
        assert skipped == {
            "invalid_json": 1,
            "not_an_object": 1,
            "no_message": 1,
            "line_too_long": 1,
            "invalid_field": 1,
            "message_null": 0,  # every reason is exported, 0 until counted
            "history_file_corrupt": 0,
        }
        assert monitor.latest.hosts[0].units[0].current is not None
