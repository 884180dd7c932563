"""A process left over from an earlier start writes under the NEW invocation id (real journald).

The shape the real-journald tier (``tests/journald``) recorded from systemd 252 with
``KillMode=process``: the failed worker of start A outlives the main process, systemd starts B,
and the worker prints the end of its traceback (the root cause). journald stamps those lines
with B's invocation id (it reads the id the unit's cgroup has now) but with the ``_STREAM_ID``
of A's stdout stream, which the worker inherited. The lines are the founding incident's
(``tests/support/make_incident.py``: vLLM 0.17.1, ``multiproc_executor.py``, ``core.py``).
"""

from __future__ import annotations

from datetime import timedelta

from tests.support.make_incident import (
    API_TRACEBACK,
    ENGINE_TRACEBACK,
    WORKER_TRACEBACK_HEAD,
    WORKER_TRACEBACK_LATE,
)
from tests.support.records import T0, Journal
from vllm_sentinel.engine.catalog.causes import CrashCause
from vllm_sentinel.engine.catalog.phases import Outcome, Phase
from vllm_sentinel.engine.decode.record import Record
from vllm_sentinel.engine.tracker import UnitTracker

A, B, C = "a" * 32, "b" * 32, "c" * 32
STREAM_A, STREAM_B, STREAM_C = "1" * 32, "2" * 32, "3" * 32
UNIT = "vllm-kimi-k25.service"
EXIT = 40.0


def _vllm(role: str, pid: int, level: str, src: str, text: str) -> str:
    return f"({role} pid={pid}) {level} 11-28 23:36:40 [{src}] {text}"


class _Unit:
    """Feeds a tracker the entries journald writes for one unit."""

    def __init__(self, tracker: UnitTracker) -> None:
        self.tracker = tracker
        self.journal = Journal(UNIT)

    def line(self, at: float, invocation: str, stream: str, pid: int, text: str) -> None:
        record: Record = self.journal.at(at).line(text, invocation, pid)
        self.tracker.feed(record._replace(stream=stream))

    def systemd(self, at: float, invocation: str, text: str) -> None:
        self.tracker.feed(self.journal.at(at).systemd(text, invocation))

    def start(self, at: float, invocation: str, stream: str, api: int, engine: int) -> None:
        self.systemd(at, invocation, f"Started {UNIT} - vLLM Kimi K2.5.")
        self.line(
            at + 1,
            invocation,
            stream,
            api,
            _vllm("APIServer", api, "INFO", "api_server.py:1043", "vLLM API server version 0.17.1"),
        )
        self.line(
            at + 2,
            invocation,
            stream,
            engine,
            _vllm(
                "EngineCore_DP0",
                engine,
                "INFO",
                "core.py:93",
                "Initializing a V1 LLM engine (v0.17.1) with config: model='/m', x=1",
            ),
        )

    def worker(self, at: float, invocation: str, stream: str, pid: int, lines: list[str]) -> None:
        for text in lines:
            self.line(
                at,
                invocation,
                stream,
                pid,
                _vllm("Worker_TP7", pid, "ERROR", "multiproc_executor.py:783", text),
            )

    def crash(self, invocation: str, stream: str, api: int, engine: int, worker: int) -> None:
        """The worker's traceback head, the engine's and the API server's wrappers, the exit."""
        self.worker(30, invocation, stream, worker, WORKER_TRACEBACK_HEAD)
        for text in ENGINE_TRACEBACK:
            self.line(
                31,
                invocation,
                stream,
                engine,
                _vllm("EngineCore_DP0", engine, "ERROR", "core.py:1102", text),
            )
        for text in API_TRACEBACK:
            self.line(32, invocation, stream, api, f"(APIServer pid={api}) {text}")
        self.systemd(
            EXIT, invocation, f"{UNIT}: Main process exited, code=exited, status=1/FAILURE"
        )
        self.systemd(EXIT, invocation, f"{UNIT}: Failed with result 'exit-code'.")


def _founding_incident(tracker: UnitTracker, late_at: float) -> _Unit:
    unit = _Unit(tracker)
    unit.start(0, A, STREAM_A, 217, 237)
    unit.crash(A, STREAM_A, 217, 237, 280)
    unit.start(EXIT + 1, B, STREAM_B, 331, 340)
    # the left-over worker: A's stream, B's invocation id (journald reads the cgroup's id now)
    unit.worker(late_at, B, STREAM_A, 280, WORKER_TRACEBACK_LATE)
    return unit


class TestTheLateRootCause:
    def test_the_late_lines_under_the_new_id_belong_to_the_dead_incarnation(self) -> None:
        """Before: the root cause joined B and A's crash was counted worker_died (the
        EngineCore wrapper)."""
        tracker = UnitTracker(UNIT, "llm-two", settle_seconds=30)
        _founding_incident(tracker, late_at=EXIT + 2)
        first, second = tracker.snapshot().incarnations
        assert (first.id, second.id) == (A, B)
        assert first.crash is not None
        assert first.crash.cause is CrashCause.DEPENDENCY_MISMATCH
        assert first.crash.exception == "RuntimeError"
        assert first.crash.message.startswith("flashinfer-cubin version (0.6.3) does not match")
        assert first.crash.phase is not Phase.STARTING
        assert second.crash is None and second.outcome is Outcome.RUNNING
        assert 280 in first.pids and 280 not in second.pids
        assert second.pids == (331, 340)
        tracker.advance(T0 + timedelta(seconds=EXIT + 31))
        assert dict(tracker.snapshot().crashes_total) == {CrashCause.DEPENDENCY_MISMATCH: 1}

    def test_the_open_traceback_holds_the_settle_past_its_window(self) -> None:
        """The rest arrives 70 s after the exit (past the 30 s settle window): the crash
        waits for it (``traceback_hold_seconds``) and is counted with the refined cause."""
        tracker = UnitTracker(UNIT, "llm-two", settle_seconds=30, traceback_hold_seconds=300)
        unit = _Unit(tracker)
        unit.start(0, A, STREAM_A, 217, 237)
        unit.crash(A, STREAM_A, 217, 237, 280)
        unit.start(EXIT + 1, B, STREAM_B, 331, 340)
        assert not tracker.advance(T0 + timedelta(seconds=EXIT + 60))
        assert dict(tracker.snapshot().crashes_total) == {}
        unit.worker(EXIT + 70, B, STREAM_A, 280, WORKER_TRACEBACK_LATE)
        tracker.advance(T0 + timedelta(seconds=EXIT + 71))
        assert dict(tracker.snapshot().crashes_total) == {CrashCause.DEPENDENCY_MISMATCH: 1}

    def test_without_the_stream_id_the_new_id_decides(self) -> None:
        """No ``_STREAM_ID`` (another transport): the invocation id decides, as before."""
        tracker = UnitTracker(UNIT, "llm-two")
        unit = _founding_incident(tracker, late_at=EXIT + 2)
        unit.line(
            EXIT + 3,
            B,
            None,  # type: ignore[arg-type]
            281,
            _vllm("Worker_TP6", 281, "INFO", "gpu_worker.py:1", "a line"),
        )
        assert 281 in tracker.snapshot().incarnations[-1].pids


class TestNewProcessesStayNew:
    def test_pids_a_container_restart_reuses_belong_to_the_new_start(self) -> None:
        """A podman unit restarted: the same PIDs in the container (APIServer pid=1, the
        engine 111) under B's id, on B's new stream: B's, though A owned the PIDs."""
        tracker = UnitTracker(UNIT, "llm-two")
        unit = _Unit(tracker)
        unit.start(0, A, STREAM_A, 1, 111)
        unit.crash(A, STREAM_A, 1, 111, 112)
        unit.start(EXIT + 1, B, STREAM_B, 1, 111)
        unit.line(
            EXIT + 3,
            B,
            STREAM_B,
            112,
            _vllm(
                "Worker_TP7",
                112,
                "INFO",
                "gpu_model_runner.py:3425",
                "Starting to load model /m...",
            ),
        )
        first, second = tracker.snapshot().incarnations
        assert second.pids == (1, 111, 112)
        assert second.phase is Phase.LOADING_WEIGHTS
        assert second.vllm_version == "0.17.1"
        assert first.outcome is Outcome.CRASHED

    def test_a_left_over_process_first_seen_late_goes_to_its_own_start(self) -> None:
        """A worker of B that never logged before C started prints on B's stream with C's
        id (the tier's ``systemctl restart``): it is B's, C's PIDs stay C's own."""
        tracker = UnitTracker(UNIT, "llm-two")
        unit = _Unit(tracker)
        unit.start(0, B, STREAM_B, 331, 340)
        unit.systemd(10, B, f"Stopping {UNIT} - vLLM Kimi K2.5...")
        unit.systemd(11, B, f"Stopped {UNIT} - vLLM Kimi K2.5.")
        unit.start(12, C, STREAM_C, 361, 365)
        unit.line(
            12.5,
            C,
            STREAM_B,
            354,
            _vllm("Worker_TP1", 354, "INFO", "parallel_state.py:1325", "world_size=2 rank=1"),
        )
        first, second = tracker.snapshot().incarnations
        assert (first.id, second.id) == (B, C)
        assert 354 in first.pids and second.pids == (361, 365)
        assert first.outcome is Outcome.STOPPED
