"""The tracker's counting, as a Hypothesis state machine against a simple model (pure core).

A unit's journal is generated step by step (starts, lines of every level, crashes with their
traceback, clean stops) and fed to a ``UnitTracker`` in chunks of any size, while the test
flips ``counting`` (history the daemon counted before), feeds chunks again (a re-read after a
reconnect), lets wall-clock time pass (crashes settle), and *restarts*: the counters are taken
(``counters()``, what the daemon saves with its cursor), a new tracker goes on from them
(``restore``) and reads the whole journal again as history, as a restarted daemon's backfill
does. The model is a few integers: what was fed, once, while counting.

After every step: records by level and starts equal the model, counted crashes never exceed
it, no counter ever goes down; once everything is fed and time has passed, crashes by cause
equal the model exactly.
"""

from __future__ import annotations

import collections
from datetime import timedelta

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from tests.support.hostile import PROPERTY
from tests.support.records import T0, Journal
from vllm_sentinel.engine.catalog.causes import CrashCause
from vllm_sentinel.engine.decode.record import Record
from vllm_sentinel.engine.tracker import UnitTracker

UNIT = "vllm-machine.service"
LEVELS = ("debug", "info", "warning", "error", "none")
CAUSES = {
    "cuda_oom": "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB.",
    "kv_cache_insufficient": "ValueError: No available memory for the cache blocks. Try "
    "increasing `gpu_memory_utilization` when initializing the engine.",
}


def _line(level: str, text: str) -> str:
    return text if level == "none" else f"{level.upper()} 11-29 10:00:00 [x.py:1] {text}"


class CountingMachine(RuleBasedStateMachine):
    """A unit's journal fed in chunks, with history, re-reads, settling and restarts."""

    def __init__(self) -> None:
        super().__init__()
        self.journal = Journal(UNIT, "h")
        self.seconds = 0.0
        self.tracker = UnitTracker(UNIT, "h")
        self.pending: list[tuple[Record, str | None]] = []  # (record, its level if a line)
        self.fed: list[Record] = []
        self.serial = 0
        self.invocation: str | None = None
        self.running = False
        self.crash_pending: str | None = None  # the cause of the crash of the next exit
        # the model: what was fed, once, while counting
        self.records: collections.Counter[str] = collections.Counter()
        self.starts = 0
        self.crashes: collections.Counter[str] = collections.Counter()
        self.exit_causes: dict[str, str] = {}  # the exit record's cursor → its crash cause
        self.previous = (0, 0, 0)

    # --- writing the journal ---------------------------------------------------------------

    def _at(self, step: float = 0.1) -> Journal:
        self.seconds += step
        return self.journal.at(self.seconds)

    def _write(self, record: Record, level: str | None = None) -> None:
        self.pending.append((record, level))

    def _systemd(self, text: str) -> Record:
        return self._at().systemd(text, self.invocation)

    @rule(gap=st.sampled_from([0.5, 5.0, 40.0]))
    def start(self, gap: float) -> None:
        if self.running:
            self.stop()
        self.serial += 1
        self.invocation = f"{self.serial:032x}"
        self.running = True
        self.seconds += gap
        self._write(self._systemd(f"Started {UNIT}."))
        self._write(
            self._at().line(_line("info", "Starting to load model m..."), self.invocation), "info"
        )

    @precondition(lambda self: self.running)
    @rule(level=st.sampled_from(LEVELS), lines=st.integers(1, 3))
    def log(self, level: str, lines: int) -> None:
        text = "\n".join(_line(level if n == 0 else "info", f"line {n}") for n in range(lines))
        self._write(self._at().line(text, self.invocation), level)

    @precondition(lambda self: self.running)
    @rule(cause=st.sampled_from(sorted(CAUSES)))
    def crash(self, cause: str) -> None:
        for text in (
            _line("error", "EngineCore failed to start."),
            _line("error", "Traceback (most recent call last):"),
            _line("error", '  File "core.py", line 1, in run'),
            _line("error", CAUSES[cause]),
        ):
            self._write(self._at().line(text, self.invocation), "error")
        exit_record = self._systemd(f"{UNIT}: Main process exited, code=exited, status=1/FAILURE")
        assert exit_record.cursor is not None
        self.exit_causes[exit_record.cursor] = cause
        self._write(exit_record)
        self.running = False

    @precondition(lambda self: self.running)
    @rule()
    def stop(self) -> None:
        self._write(self._systemd(f"Stopping {UNIT}..."))
        self._write(self._systemd(f"{UNIT}: Deactivated successfully."))
        self.running = False

    # --- reading it ------------------------------------------------------------------------

    @precondition(lambda self: self.pending)
    @rule(size=st.integers(1, 12))
    def feed(self, size: int) -> None:
        chunk, self.pending = self.pending[:size], self.pending[size:]
        records = [record for record, _ in chunk]
        assert self.tracker.feed_many(records) == len(records)
        self.fed.extend(records)
        if not self.tracker.counting:
            return
        for record, level in chunk:
            if level is not None:
                self.records[level] += 1
            if record.message.startswith("Started "):
                self.starts += 1
            cause = self.exit_causes.get(record.cursor or "")
            if cause is not None:
                self.crashes[cause] += 1

    @precondition(lambda self: not self.pending)
    @rule()
    def toggle_history(self) -> None:
        """History begins or ends between two steps of the journal (the daemon's boundary is a
        record: what was written up to it, every record of a step on one side)."""
        self.tracker.counting = not self.tracker.counting

    @precondition(lambda self: self.fed)
    @rule(size=st.integers(1, 12))
    def read_again(self, size: int) -> None:
        """A reconnect re-reads the last records: nothing changes."""
        assert self.tracker.feed_many(self.fed[-size:]) == 0

    @rule(seconds=st.sampled_from([1.0, 31.0, 400.0]))
    def time_passes(self, seconds: float) -> None:
        self.tracker.advance(T0 + timedelta(seconds=self.seconds + seconds))

    @rule()
    def restart(self) -> None:
        """The daemon restarts: a new tracker goes on from the saved counters and reads the
        journal again from its start as history (its crashes not counted yet are carried)."""
        counting = self.tracker.counting
        saved = self.tracker.counters()
        tracker = UnitTracker(UNIT, "h")
        tracker.restore(saved)
        tracker.counting = False
        tracker.feed_many(self.fed)
        assert tracker.settle_carried() == 0  # every carried crash was read again
        tracker.counting = counting
        self.tracker = tracker

    # --- the invariants --------------------------------------------------------------------

    def _counted(self) -> tuple[int, int, int]:
        snapshot = self.tracker.snapshot()
        return (
            snapshot.starts_total,
            sum(snapshot.records_by_level.values()),
            sum(snapshot.crashes_total.values()),
        )

    @invariant()
    def counts_equal_the_model(self) -> None:
        snapshot = self.tracker.snapshot()
        assert dict(snapshot.records_by_level) == {k: v for k, v in self.records.items() if v}
        assert snapshot.starts_total == self.starts
        crashes = {cause.value: n for cause, n in snapshot.crashes_total.items() if n}
        assert sum(crashes.values()) <= sum(self.crashes.values())
        assert CrashCause.PENDING.value not in crashes

    @invariant()
    def counters_never_go_down(self) -> None:
        now = self._counted()
        assert all(a >= b for a, b in zip(now, self.previous, strict=True)), (now, self.previous)
        self.previous = now

    def teardown(self) -> None:
        """Everything fed and plenty of time later: crashes by cause equal the model."""
        if self.pending:
            self.feed(len(self.pending))
        self.tracker.advance(T0 + timedelta(seconds=self.seconds + 3600))
        crashes = {c.value: n for c, n in self.tracker.snapshot().crashes_total.items() if n}
        assert crashes == {cause: n for cause, n in self.crashes.items() if n}


CountingMachine.TestCase.settings = settings(
    max_examples=PROPERTY.max_examples, stateful_step_count=40, deadline=None
)
TestCountingMachine = CountingMachine.TestCase
