"""Crash settling: a split traceback across a late restart, ``pending``, late evidence.

The seed incident with the gap stretched (issue 10, class 1): the unit is restarted about 70 s
after the crash, and the rest of the dead worker's traceback — its root cause included — is
delivered after the new ``Started``. The lines are the incident's real ones (vLLM 0.17,
``multiproc_executor.py``); only the times move.
"""

from __future__ import annotations

from datetime import timedelta

from tests.support.records import T0, Journal
from vllm_sentinel.engine.catalog.causes import CrashCause
from vllm_sentinel.engine.catalog.phases import Outcome
from vllm_sentinel.engine.snapshot import CrashInfo
from vllm_sentinel.engine.tracker import UnitTracker

A = "a" * 32
B = "b" * 32
FLASHINFER = (
    "flashinfer-cubin version (0.6.3) does not match flashinfer version (0.6.4). Please install "
    "the same version of both packages."
)
WORKER = 221350


def _tp7(text: str) -> str:
    return (
        f"\x1b[1;36m(Worker_TP7 pid={WORKER})\x1b[0;0m ERROR 11-28 23:36:40 "
        f"[multiproc_executor.py:783] {text}"
    )


HEAD = [
    _tp7("WorkerProc failed to start."),
    _tp7("Traceback (most recent call last):"),
    _tp7(
        '  File "/opt/vllm/lib/python3.12/site-packages/vllm/v1/executor/multiproc_executor.py", '
        "line 754, in worker_main"
    ),
    _tp7("    worker = WorkerProc(*args, **kwargs)"),
]
REST = [
    _tp7(
        '  File "/opt/vllm/lib/python3.12/site-packages/flashinfer/jit/env.py", line 61, in '
        "_check_cubin_version"
    ),
    _tp7("    raise RuntimeError("),
    _tp7(f"RuntimeError: {FLASHINFER}"),
]
EXIT = 80.0


def _crash_then_restart(tracker: UnitTracker, journal: Journal, gap: float) -> None:
    """Start A, load, the head of the worker's traceback, exit, and B ``gap`` s after it."""
    tracker.feed(journal.at(0).systemd("Started vllm-kimi-k25.service - vLLM Kimi K2.5.", A))
    tracker.feed(
        journal.at(21).line(
            "(Worker_TP0 pid=221343) INFO 11-28 23:36:21 [gpu_model_runner.py:3425] Starting to "
            "load model /shared/kimi-k2.5-nvfp4...",
            A,
            221343,
        )
    )
    for text in HEAD:
        tracker.feed(journal.at(40).line(text, A, WORKER))
    tracker.feed(
        journal.at(EXIT).systemd(
            "vllm-kimi-k25.service: Main process exited, code=exited, status=1/FAILURE", A
        )
    )
    tracker.feed(
        journal.at(EXIT).systemd("vllm-kimi-k25.service: Failed with result 'exit-code'.", A)
    )
    tracker.feed(
        journal.at(EXIT + gap).systemd("Started vllm-kimi-k25.service - vLLM Kimi K2.5.", B)
    )


def _first_crash(tracker: UnitTracker) -> CrashInfo:
    first = tracker.snapshot().incarnations[0]
    assert first.id == A and first.outcome is Outcome.CRASHED and first.crash is not None
    return first.crash


class TestSplitTracebackAcrossALateRestart:
    """A traceback still being printed holds its crash unsettled (up to the hold)."""

    def test_the_rest_after_a_restart_70_s_later_gives_the_root_cause(self) -> None:
        """Before: settled 30 s after the exit as 'unknown' and the late lines were dropped."""
        journal = Journal()
        tracker = UnitTracker("vllm-kimi-k25.service", "llm-two")
        _crash_then_restart(tracker, journal, gap=70)
        assert _first_crash(tracker).cause is CrashCause.PENDING  # held, not settled
        assert sum(tracker.snapshot().crashes_total.values()) == 0
        for text in REST:  # written after B's Started, still A's invocation, journald's time
            tracker.feed(journal.at(EXIT + 71).line(text, A, WORKER))
        crash = _first_crash(tracker)
        assert (crash.cause, crash.exception, crash.message) == (
            CrashCause.DEPENDENCY_MISMATCH,
            "RuntimeError",
            FLASHINFER,
        )
        # the traceback is complete: the crash settled with that cause, counted once
        assert dict(tracker.snapshot().crashes_total) == {CrashCause.DEPENDENCY_MISMATCH: 1}

    def test_wall_clock_ticks_do_not_settle_it_while_the_traceback_is_open(self) -> None:
        """The daemon's tick (``advance``) respects the hold too."""
        journal = Journal()
        tracker = UnitTracker("vllm-kimi-k25.service", "llm-two")
        _crash_then_restart(tracker, journal, gap=70)
        assert not tracker.advance(T0 + timedelta(seconds=EXIT + 200))
        assert _first_crash(tracker).cause is CrashCause.PENDING
        for text in REST:
            tracker.feed(journal.at(EXIT + 201).line(text, A, WORKER))
        assert dict(tracker.snapshot().crashes_total) == {CrashCause.DEPENDENCY_MISMATCH: 1}

    def test_the_hold_is_bounded(self) -> None:
        """A traceback that never completes holds its crash ``traceback_hold_seconds`` at most."""
        journal = Journal()
        tracker = UnitTracker("vllm-kimi-k25.service", "llm-two", traceback_hold_seconds=120)
        _crash_then_restart(tracker, journal, gap=70)
        assert not tracker.advance(T0 + timedelta(seconds=EXIT + 119))
        assert tracker.advance(T0 + timedelta(seconds=EXIT + 120))
        assert _first_crash(tracker).cause is CrashCause.UNKNOWN
        assert dict(tracker.snapshot().crashes_total) == {CrashCause.UNKNOWN: 1}

    def test_without_an_open_traceback_the_crash_settles_after_settle_seconds(self) -> None:
        """The hold is only for a traceback in progress: a finished one settles as before."""
        journal = Journal()
        tracker = UnitTracker("vllm-kimi-k25.service", "llm-two")
        tracker.feed(journal.at(0).systemd("Started vllm-kimi-k25.service - vLLM Kimi K2.5.", A))
        for text in [*HEAD, *REST]:
            tracker.feed(journal.at(40).line(text, A, WORKER))
        tracker.feed(
            journal.at(EXIT).systemd(
                "vllm-kimi-k25.service: Main process exited, code=exited, status=1/FAILURE", A
            )
        )
        assert tracker.advance(T0 + timedelta(seconds=EXIT + 30))
        assert dict(tracker.snapshot().crashes_total) == {CrashCause.DEPENDENCY_MISMATCH: 1}

    def test_replay_settles_nothing_before_the_end_of_its_input(self) -> None:
        """A post-mortem has all the lines: however long the gap, the late ones count."""
        journal = Journal()
        tracker = UnitTracker("vllm-kimi-k25.service", "llm-two", settle_while_feeding=False)
        _crash_then_restart(tracker, journal, gap=3600)
        tracker.feed(journal.at(EXIT + 7200).line(HEAD[1], A, WORKER))  # a second traceback
        for text in REST:
            tracker.feed(journal.at(EXIT + 7201).line(text, A, WORKER))
        tracker.finish()
        assert _first_crash(tracker).cause is CrashCause.DEPENDENCY_MISMATCH

    def test_text_log_rest_after_a_new_banner_goes_to_the_dead_incarnation(self) -> None:
        """Plain text: the old worker's traceback rest, after a new process's banner, is its."""
        tracker = UnitTracker("vllm", settle_while_feeding=False)
        journal = Journal()

        def feed(seconds: float, text: str) -> None:
            tracker.feed(journal.at(seconds).line(text, None, WORKER)._replace(pid=None))

        feed(0, "INFO 11-28 23:35:02 [api_server.py:1043] vLLM API server version 0.17.1")
        feed(
            21,
            "(Worker_TP0 pid=221343) INFO 11-28 23:36:21 [gpu_model_runner.py:3425] Starting "
            "to load model /shared/kimi-k2.5-nvfp4...",
        )
        for text in HEAD:
            feed(40, text)
        feed(150, "INFO 11-28 23:37:30 [api_server.py:1043] vLLM API server version 0.17.1")
        for text in REST:
            feed(151, text)
        tracker.finish()
        first, second = tracker.snapshot().incarnations
        assert first.crash is not None and first.crash.cause is CrashCause.DEPENDENCY_MISMATCH
        assert second.outcome is Outcome.RUNNING and second.crash is None


class TestPending:
    """A wrapper is never published as the cause while the crash is unsettled."""

    WRAPPER = (
        "Exception: WorkerProc initialization failed due to an exception in a background "
        "process. See stack trace for root cause."
    )

    def _wrapper_first(self, tracker: UnitTracker, journal: Journal) -> None:
        tracker.feed(journal.at(0).systemd("Started vllm-kimi-k25.service - vLLM Kimi K2.5.", A))
        core = 221290
        for text in (
            "EngineCore failed to start.",
            "Traceback (most recent call last):",
            '  File "/opt/vllm/lib/python3.12/site-packages/vllm/v1/engine/core.py", line 1093, '
            "in run_engine_core",
            self.WRAPPER,
        ):
            tracker.feed(
                journal.at(41).line(
                    f"(EngineCore_DP0 pid={core}) ERROR 11-28 23:36:41 [core.py:1102] {text}",
                    A,
                    core,
                )
            )
        tracker.feed(
            journal.at(45).systemd(
                "vllm-kimi-k25.service: Main process exited, code=exited, status=1/FAILURE", A
            )
        )

    def test_wrapper_then_the_real_traceback(self) -> None:
        """'pending' while only the wrapper is known; the real cause once it arrives."""
        journal = Journal()
        tracker = UnitTracker("vllm-kimi-k25.service", "llm-two")
        self._wrapper_first(tracker, journal)
        assert tracker.snapshot().last_crash is not None
        assert tracker.snapshot().last_crash.cause is CrashCause.PENDING  # not worker_died
        for text in (
            "Traceback (most recent call last):",
            '  File "/opt/vllm/lib/python3.12/site-packages/vllm/v1/worker/gpu_worker.py", '
            "line 289, in load_model",
            "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.75 GiB. GPU 7 has a "
            "total capacity of 178.35 GiB of which 1.20 GiB is free.",
        ):
            tracker.feed(journal.at(47).line(_tp7(text), A, WORKER))
        crash = tracker.snapshot().last_crash
        assert crash is not None and crash.cause is CrashCause.CUDA_OOM  # real evidence: shown
        assert tracker.advance(T0 + timedelta(seconds=47 + 30))
        assert dict(tracker.snapshot().crashes_total) == {CrashCause.CUDA_OOM: 1}

    def test_a_wrapper_alone_settles_as_the_wrapper_cause(self) -> None:
        """Nothing better came: once settled, the wrapper's cause is the best answer."""
        journal = Journal()
        tracker = UnitTracker("vllm-kimi-k25.service", "llm-two")
        self._wrapper_first(tracker, journal)
        assert tracker.advance(T0 + timedelta(seconds=45 + 30))
        crash = tracker.snapshot().last_crash
        assert crash is not None and crash.cause is CrashCause.WORKER_DIED
        assert dict(tracker.snapshot().crashes_total) == {CrashCause.WORKER_DIED: 1}


class TestLateEvidenceAfterSettling:
    """After a crash settled, late lines refine the answer; the counter keeps its cause."""

    def test_refined_cause_and_unchanged_counter(self) -> None:
        journal = Journal()
        tracker = UnitTracker("vllm-kimi-k25.service", "llm-two", traceback_hold_seconds=30)
        _crash_then_restart(tracker, journal, gap=70)  # settles at the 30 s hold: unknown
        assert dict(tracker.snapshot().crashes_total) == {CrashCause.UNKNOWN: 1}
        for text in REST:
            tracker.feed(journal.at(EXIT + 80).line(text, A, WORKER))
        assert _first_crash(tracker).cause is CrashCause.DEPENDENCY_MISMATCH
        assert dict(tracker.snapshot().crashes_total) == {CrashCause.UNKNOWN: 1}
