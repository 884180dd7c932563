"""UnitTracker: incarnations, phases, crash root causes, dedupe, settling."""

from __future__ import annotations

from datetime import timedelta

from tests.support.records import T0, Journal
from vllm_sentinel.causes import CrashCause
from vllm_sentinel.phases import Outcome, Phase
from vllm_sentinel.tracker import UnitTracker

A = "a" * 32
B = "b" * 32
FLASHINFER = (
    "flashinfer-cubin version (0.6.3) does not match flashinfer version (0.6.4). Please install "
    "the same version of both packages."
)


def _tp7(text: str) -> str:
    return f"\x1b[1;36m(Worker_TP7 pid=221350)\x1b[0;0m ERROR 11-28 23:36:40 [multiproc_executor.py:783] {text}"


def _crash_lines() -> list[str]:
    return [
        _tp7("WorkerProc failed to start."),
        _tp7("Traceback (most recent call last):"),
        _tp7(
            '  File "/usr/lib/python3/dist-packages/vllm/v1/executor/multiproc_executor.py", line 783, in worker_main'
        ),
        _tp7("    self.worker.load_model()"),
        _tp7(f"RuntimeError: {FLASHINFER}"),
    ]


def _incident(tracker: UnitTracker, journal: Journal, *, late: bool, until: float = 1e9) -> None:
    feed = tracker.feed
    feed(journal.at(58).systemd("Started vllm-kimi-k25.service - vLLM Kimi K2.5.", A))
    feed(
        journal.at(81).line(
            "(Worker_TP0 pid=221343) INFO 11-28 23:36:21 [gpu_model_runner.py:3425] Starting to load model /shared/kimi-k2.5-nvfp4...",
            A,
            221343,
        )
    )
    lines = _crash_lines()
    early, delayed = (lines[:2], lines[2:]) if late else (lines, [])
    for text in early:
        feed(journal.at(100).line(text, A, 221350))
    feed(
        journal.at(140).systemd(
            "vllm-kimi-k25.service: Main process exited, code=exited, status=1/FAILURE", A
        )
    )
    feed(journal.at(140).systemd("vllm-kimi-k25.service: Failed with result 'exit-code'.", A))
    feed(journal.at(151).systemd("Started vllm-kimi-k25.service - vLLM Kimi K2.5.", B))
    for text in delayed:  # late delivery: written after the restart, still invocation A
        feed(journal.at(100).line(text, A, 221350))
    if until <= 151:
        return
    feed(
        journal.at(160).line(
            "(APIServer pid=222500) ERROR 11-28 23:37:40 [gpt_oss_triton_kernels_moe.py:60] Failed to import Triton kernels. Please make sure your triton version is compatible. Error: cannot import name 'SparseMatrix' from 'triton_kernels.tensor'",
            B,
            222500,
        )
    )
    feed(
        journal.at(172).line(
            "(Worker_TP0 pid=222636) INFO 11-28 23:37:52 [gpu_model_runner.py:3425] Starting to load model /shared/kimi-k2.5-nvfp4...",
            B,
            222636,
        )
    )
    feed(
        journal.at(200).line(
            "(Worker_TP0 pid=222636) \rLoading safetensors checkpoint shards:   3% Completed | 2/64 [00:28<14:00, 14.0s/it]",
            B,
            222636,
        )
    )


class TestIncarnations:
    """Which incarnation a record belongs to."""

    def test_late_lines_of_a_dead_incarnation_touch_only_it(self) -> None:
        """The flashinfer incident: late traceback lines never move the live incarnation."""
        tracker = UnitTracker("vllm-kimi-k25.service", "llm-two")
        _incident(tracker, Journal(), late=True)
        snapshot = tracker.snapshot(T0 + timedelta(seconds=210))
        first, second = snapshot.incarnations
        assert (first.id, second.id) == (A, B)
        assert second.phase is Phase.LOADING_WEIGHTS
        assert second.phase_entered_at == T0 + timedelta(seconds=172)
        assert second.outcome is Outcome.RUNNING
        assert first.outcome is Outcome.CRASHED
        assert first.crash is not None
        assert first.crash.cause is CrashCause.DEPENDENCY_MISMATCH
        assert (first.crash.exception, first.crash.message) == ("RuntimeError", FLASHINFER)
        assert first.crash.phase is Phase.LOADING_WEIGHTS
        assert second.benign_errors == 1 and first.benign_errors == 0
        assert snapshot.benign_errors_total == 1
        assert second.progress.weights_shards_loaded == 2
        assert second.progress.weights_shards_total == 64

    def test_crash_is_counted_once_with_the_refined_cause(self) -> None:
        """Settled after settle_seconds of log time, with the cause the late lines gave."""
        tracker = UnitTracker("vllm-kimi-k25.service", "llm-two", settle_seconds=30)
        _incident(tracker, Journal(), late=True, until=151)
        tracker.advance(T0 + timedelta(seconds=151))
        assert dict(tracker.snapshot().crashes_total) == {}
        tracker.advance(T0 + timedelta(seconds=175))
        settled = tracker.snapshot()
        assert dict(settled.crashes_total) == {CrashCause.DEPENDENCY_MISMATCH: 1}
        assert settled.starts_total == 2

    def test_text_banner_starts_a_new_incarnation(self) -> None:
        """Without journal fields, a second version banner after progress is a restart."""
        journal = Journal()
        tracker = UnitTracker("vllm")
        for seconds, text in [
            (0, "INFO 04-29 07:18:08 [api_server.py:1043] vLLM API server version 0.8.5"),
            (
                10,
                "INFO 04-29 07:18:18 [core.py:58] Initializing a V1 LLM engine (v0.8.5) with config: model='m', x=1",
            ),
            (20, "INFO 04-29 07:19:08 [api_server.py:1043] vLLM API server version 0.8.5"),
        ]:
            tracker.feed(journal.at(seconds).line(text, None)._replace(cursor=None))
        first, second = tracker.snapshot().incarnations
        assert first.outcome is Outcome.CRASHED and second.phase is Phase.STARTING
        assert first.crash is not None and first.crash.cause is CrashCause.UNKNOWN


class TestPhases:
    """Forward-only phases and outcomes."""

    def test_phases_never_move_backwards(self) -> None:
        """A loading line after compile does not pull the incarnation back."""
        journal = Journal()
        tracker = UnitTracker("u")
        for text in [
            "INFO 05-27 11:47:55 [backends.py:430] Dynamo bytecode transform time: 13.06 s",
            "INFO 05-27 11:47:56 [loader.py:458] Loading weights took 28.05 seconds",
        ]:
            tracker.feed(journal.line(text, A))
        assert tracker.snapshot().current.phase is Phase.COMPILING  # type: ignore[union-attr]

    def test_planned_stop_is_not_a_crash(self) -> None:
        """Stopping + SIGTERM traceback + exit 0 is a clean stop."""
        journal = Journal()
        tracker = UnitTracker("u")
        tracker.feed(
            journal.at(0).line("(APIServer pid=1) INFO:     Application startup complete.", A)
        )
        tracker.feed(journal.at(5).systemd("Stopping u - vLLM...", A))
        tracker.feed(
            journal.at(6).line(
                "(APIServer pid=1) ERROR 08-01 21:34:51 [async_llm.py:704] AsyncLLM output_handler failed.",
                A,
            )
        )
        tracker.feed(
            journal.at(6).line(
                "(APIServer pid=1) ERROR 08-01 21:34:51 [async_llm.py:704] Traceback (most recent call last):",
                A,
            )
        )
        tracker.feed(
            journal.at(6).line(
                "(APIServer pid=1) ERROR 08-01 21:34:51 [async_llm.py:704] vllm.v1.engine.exceptions.EngineDeadError: EngineCore encountered an issue.",
                A,
            )
        )
        tracker.feed(
            journal.at(7).systemd("u: Main process exited, code=exited, status=0/SUCCESS", A)
        )
        tracker.feed(journal.at(7).systemd("u: Deactivated successfully.", A))
        tracker.finish()
        current = tracker.snapshot().current
        assert current is not None
        assert current.outcome is Outcome.STOPPED and current.crash is None
        assert current.furthest_phase is Phase.READY

    def test_crash_after_ready_is_a_crash(self) -> None:
        """A bind failure after 'Application startup complete' crashes the incarnation."""
        journal = Journal()
        tracker = UnitTracker("u")
        tracker.feed(journal.line("INFO:     Application startup complete.", None))
        tracker.feed(
            journal.line(
                "ERROR:    [Errno 98] error while attempting to bind on address ('0.0.0.0', 8000): address already in use",
                None,
            )
        )
        current = tracker.snapshot().current
        assert current is not None and current.crash is not None
        assert current.crash.cause is CrashCause.PORT_IN_USE
        assert current.crash.phase is Phase.READY

    def test_oom_kill_names_host_oom(self) -> None:
        """systemd's OOM-kill verdict beats the 'worker died' wrapper it causes."""
        journal = Journal()
        tracker = UnitTracker("u")
        tracker.feed(
            journal.line(
                "(Worker_TP0 pid=7) INFO 11-28 23:36:21 [gpu_model_runner.py:1] Starting to load model m...",
                A,
            )
        )
        tracker.feed(
            journal.line(
                "(EngineCore_DP0 pid=6) ERROR 11-28 23:36:30 [multiproc_executor.py:1] Worker proc VllmWorker-0 died unexpectedly, shutting down executor.",
                A,
            )
        )
        tracker.feed(
            journal.systemd("u: A process of this unit has been killed by the OOM killer.", A)
        )
        tracker.feed(journal.systemd("u: Main process exited, code=killed, status=9/KILL", A))
        tracker.feed(journal.systemd("u: Failed with result 'oom-kill'.", A))
        current = tracker.snapshot().current
        assert current is not None and current.crash is not None
        assert current.crash.cause is CrashCause.HOST_OOM

    def test_killed_without_other_cause(self) -> None:
        """A SIGKILL nobody asked for, with no error before it, is 'killed'."""
        journal = Journal()
        tracker = UnitTracker("u")
        tracker.feed(
            journal.line(
                "INFO 11-28 23:36:21 [gpu_model_runner.py:1] Starting to load model m...", A
            )
        )
        tracker.feed(journal.systemd("u: Main process exited, code=killed, status=9/KILL", A))
        current = tracker.snapshot().current
        assert current is not None and current.crash is not None
        assert current.crash.cause is CrashCause.KILLED


class TestProgress:
    """What counts as progress for the stall rule."""

    def test_heartbeats_are_not_progress(self) -> None:
        """'Waiting for … core engine proc(s)' lines leave last_progress_at alone."""
        journal = Journal()
        tracker = UnitTracker("u")
        tracker.feed(
            journal.at(0).line(
                "INFO 04-18 18:08:51 [kv_cache_utils.py:634] GPU KV cache size: 233,936 tokens", A
            )
        )
        tracker.feed(
            journal.at(60).line(
                "DEBUG 04-18 18:09:51 [core_client.py:421] Waiting for 1 core engine proc(s) to start: {0}",
                A,
            )
        )
        current = tracker.snapshot().current
        assert current is not None
        assert current.last_progress_at == T0
        assert current.last_record_at == T0 + timedelta(seconds=60)


class TestDeduplication:
    """Re-reading after a reconnect is harmless."""

    def test_a_batch_fed_twice_equals_once(self) -> None:
        """Records with a cursor already applied are ignored and counted as duplicates."""
        journal = Journal()
        records = [
            journal.at(0).systemd("Started u.", A),
            journal.at(1).line(
                "INFO 11-28 23:36:21 [gpu_model_runner.py:1] Starting to load model m...", A
            ),
            journal.at(2).line("ERROR 11-28 23:36:22 [core.py:1] EngineCore failed to start.", A),
        ]
        once, twice = UnitTracker("u"), UnitTracker("u")
        for record in records:
            once.feed(record)
        for record in records + records:
            twice.feed(record)
        assert twice.duplicates_total == 3
        first, second = once.snapshot(T0), twice.snapshot(T0)
        assert first.incarnations == second.incarnations
        assert first.records_by_level == second.records_by_level
