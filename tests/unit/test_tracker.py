"""UnitTracker: incarnations, phases, crash root causes, dedupe, settling."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

from tests.support.records import T0, Journal
from vllm_sentinel.engine.catalog.causes import CrashCause
from vllm_sentinel.engine.catalog.phases import Outcome, Phase
from vllm_sentinel.engine.decode.record import Record
from vllm_sentinel.engine.snapshot import IncarnationSnapshot
from vllm_sentinel.engine.tracker import BENIGN_LINES_KEPT, RECENT_EVENTS_KEPT, UnitTracker

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

    def test_history_rebuilds_state_without_counting(self) -> None:
        """``counting=False`` (history a restarted daemon reported before): incarnations, the
        last crash and its cause are rebuilt, the counters are not; a crash counts when its end
        is seen while counting."""
        tracker = UnitTracker("vllm-kimi-k25.service", "llm-two", settle_seconds=30)
        journal = Journal()
        tracker.counting = False
        _incident(tracker, journal, late=False, until=151)  # A crashes, B starts: history
        tracker.counting = True
        tracker.advance(T0 + timedelta(seconds=300))
        snapshot = tracker.snapshot()
        assert (snapshot.starts_total, dict(snapshot.crashes_total)) == (0, {})
        assert snapshot.last_crash is not None
        assert snapshot.last_crash.cause is CrashCause.DEPENDENCY_MISMATCH
        # B's crash is seen live: its start was history, its crash counts
        tracker.feed(journal.at(301).systemd("vllm-kimi-k25.service: Killed (OOM).", B))
        tracker.feed(
            journal.at(301).systemd(
                "vllm-kimi-k25.service: Main process exited, code=killed, status=9/KILL", B
            )
        )
        tracker.advance(T0 + timedelta(seconds=400))
        assert tracker.snapshot().starts_total == 0
        assert sum(tracker.snapshot().crashes_total.values()) == 1

    def test_an_incarnation_met_midway_first_is_not_a_new_start(self) -> None:
        """A restarted daemon resuming at its cursor meets the current incarnation midway (its
        ``Started`` was before the cursor): not counted again; the next ``Started`` is."""
        tracker = UnitTracker("vllm-kimi-k25.service", "llm-two")
        journal = Journal()
        tracker.feed(journal.at(10).line("INFO 11-28 23:36:21 [core.py:1] x", A, 7))
        tracker.feed(journal.at(20).line("INFO 11-28 23:36:31 [core.py:1] y", B, 8))
        assert tracker.snapshot().starts_total == 1  # B: a new invocation after one we know
        tracker.feed(journal.at(30).systemd("Started vllm-kimi-k25.service - vLLM.", "c" * 32))
        assert tracker.snapshot().starts_total == 2

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
        # no evidence but the restart: pending until it settles, then unknown
        assert first.crash is not None and first.crash.cause is CrashCause.PENDING
        tracker.finish()
        first, _ = tracker.snapshot().incarnations
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

    def test_a_phase_line_from_the_past_keeps_the_timeline_forward(self) -> None:
        """Processes' lines out of time order: a phase is never entered before the last one."""
        tracker = UnitTracker("vllm", reference_year=2026)
        _text(
            tracker,
            [
                "(EngineCore_DP0 pid=7) INFO 05-27 11:47:50 [gpu_model_runner.py:1] Starting to "
                "load model m...",
                "(Worker_TP1 pid=9) INFO 05-27 11:47:45 [backends.py:430] Dynamo bytecode "
                "transform time: 13.06 s",
            ],
        )
        current = tracker.snapshot().current
        assert current is not None and current.phase is Phase.COMPILING
        assert _forward(current)

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
        assert current.crash.cause is CrashCause.PENDING  # a signal may have a cause above it
        tracker.advance(journal.now + timedelta(seconds=31))
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


def _text(tracker: UnitTracker, lines: list[str]) -> None:
    """Feed lines as a pasted text log gives them: no journal fields, no record time."""
    for line in lines:
        tracker.feed(Record(line, unit="vllm"))


def _forward(incarnation: IncarnationSnapshot) -> bool:
    times = [entry.entered_at for entry in incarnation.phases]
    return None not in times and times == sorted(times)  # type: ignore[type-var]


_API = "(APIServer pid=1) "
_ENGINE = "(EngineCore pid=111) "
_RUN = [  # one docker run of vLLM 0.22 (logo on): banner, engine init, loading, ready
    "WARNING {d} 08:54:54 [argparse_utils.py:257] With `vllm serve`, you should provide the model",
    _API + "INFO {d} 08:54:54 [utils.py:344]",
    _API + "INFO {d} 08:54:54 [utils.py:344]        █     █     █▄   ▄█",
    _API + "INFO {d} 08:54:54 [utils.py:344]  ▄▄ ▄█ █     █     █ ▀▄▀ █  version 0.22.1",
    _API + "INFO {d} 08:54:54 [utils.py:344]   █▄█▀ █     █     █     █  model   m",
    _ENGINE + "INFO {d} 08:55:37 [core.py:112] Initializing a V1 LLM engine (v0.22.1) with "
    "config: model='m', tensor_parallel_size=1",
    _ENGINE + "INFO {d} 08:55:57 [gpu_model_runner.py:5037] Starting to load model m...",
]
_READY = [
    _API + "INFO {d} 08:56:59 [api_server.py:596] Starting vLLM server on http://0.0.0.0:8020",
    _API + "INFO:     Application startup complete.",
]
_CRASH = [
    _ENGINE + "ERROR {d} 08:56:40 [core.py:1] EngineCore failed to start.",
    _ENGINE + "ERROR {d} 08:56:40 [core.py:1] Traceback (most recent call last):",
    _ENGINE + 'ERROR {d} 08:56:40 [core.py:1]   File "/x.py", line 1, in f',
    _ENGINE + "ERROR {d} 08:56:40 [core.py:1] torch.OutOfMemoryError: CUDA out of memory.",
    _API + "Traceback (most recent call last):",
    _API + '  File "/usr/local/bin/vllm", line 10, in <module>',
    _API + "    sys.exit(main())",
    _API + "RuntimeError: Engine core initialization failed. See root cause above.",
]


def _run(lines: list[str], day: str) -> list[str]:
    return [line.replace("{d}", day) for line in lines]


class TestContainerRestart:
    """``docker logs`` of a restarted container: no journal fields, the same PIDs again."""

    def test_restart_after_a_raw_traceback_starts_a_new_incarnation(self) -> None:
        """The logo after the dead API server's traceback (same PID 1) is a new start."""
        tracker = UnitTracker("vllm", reference_year=2026)
        _text(tracker, _run(_RUN + _CRASH, "06-07") + _run(_RUN + _READY, "06-08"))
        first, second = tracker.snapshot().incarnations
        assert first.crash is not None and first.crash.cause is CrashCause.CUDA_OOM
        assert first.crash.phase is Phase.LOADING_WEIGHTS
        assert second.outcome is Outcome.READY and second.vllm_version == "0.22.1"
        assert second.started_at is not None and second.started_at.day == 8

    def test_reused_pids_belong_to_the_new_incarnation(self) -> None:
        """The engine's PID 111, owned by the dead incarnation, now speaks for the new one."""
        tracker = UnitTracker("vllm", reference_year=2026)
        _text(tracker, _run(_RUN + _CRASH, "06-07") + _run(_RUN + _READY, "06-08"))
        first, second = tracker.snapshot().incarnations
        assert [entry.phase for entry in second.phases] == [
            Phase.STARTING,
            Phase.INITIALIZING,
            Phase.LOADING_WEIGHTS,
            Phase.STARTING_API_SERVER,
            Phase.READY,
        ]
        assert first.pids == (1, 111) and second.pids == (1, 111)
        assert _forward(first) and _forward(second)

    def test_the_same_log_twice_never_goes_back_in_time(self) -> None:
        """A log pasted twice: the first run ends where its timeline ended, not earlier."""
        tracker = UnitTracker("vllm", reference_year=2026)
        _text(tracker, _run(_RUN + _READY, "06-07") * 2)
        first, second = tracker.snapshot().incarnations
        assert first.outcome is Outcome.CRASHED and second.outcome is Outcome.READY
        assert first.ended_at == first.phases[-2].entered_at  # ready, not the rerun's banner
        assert _forward(first) and _forward(second)


def _json(time: str, level: str, process: str, pid: int, message: str, **extra: str) -> str:
    fields = {"asctime": time, "levelname": level, "name": "vllm", "processName": process}
    return json.dumps({**fields, "process": pid, "message": message, **extra})


class TestJsonFormatter:
    """vLLM 0.32+ ``--logging-config.formatter json``: one record per message, tracebacks inside."""

    OOM = (
        "Traceback (most recent call last):\n"
        '  File "/vllm/v1/engine/core.py", line 1, in run_engine_core\n'
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB."
    )

    def _lines(self, time: str) -> list[str]:
        return [
            _json(
                time + "00,123",
                "INFO",
                "APIServer",
                1,
                "vLLM server version 0.32.0, serving model m",
            ),
            _json(time + "10,123", "INFO", "EngineCore_DP0", 50, "Starting to load model m..."),
            _json(
                time + "20,123",
                "ERROR",
                "EngineCore_DP0",
                50,
                "EngineCore failed to start.",
                exc_info=self.OOM,
            ),
        ]

    def test_exc_info_traceback_gives_the_root_cause(self) -> None:
        """The traceback in ``exc_info`` reaches the assembler: cuda_oom, not unknown."""
        tracker = UnitTracker("vllm", reference_year=2026)
        _text(tracker, self._lines("2026-05-01 10:00:"))
        tracker.finish()
        (incarnation,) = tracker.snapshot().incarnations
        assert incarnation.crash is not None
        assert incarnation.crash.cause is CrashCause.CUDA_OOM
        assert incarnation.crash.exception == "torch.OutOfMemoryError"
        assert incarnation.crash.message.startswith("CUDA out of memory.")
        assert incarnation.crash.phase is Phase.LOADING_WEIGHTS

    def test_asctime_is_the_time_of_a_text_line(self) -> None:
        """A full-date ``asctime`` is the line's time (read as UTC, like vLLM's header)."""
        tracker = UnitTracker("vllm")
        _text(tracker, self._lines("2026-05-01 10:00:"))
        tracker.finish()
        (incarnation,) = tracker.snapshot().incarnations
        start = datetime(2026, 5, 1, 10, 0, 0, 123000, tzinfo=UTC)
        assert [entry.entered_at for entry in incarnation.phases] == [
            start,
            start + timedelta(seconds=10),
            start + timedelta(seconds=20),
        ]

    def test_asctime_without_a_year_is_read_like_the_header(self) -> None:
        """vLLM's own date format (``MM-DD HH:MM:SS``) takes the reference year."""
        tracker = UnitTracker("vllm", reference_year=2026)
        _text(tracker, [line.replace(",123", "") for line in self._lines("05-01 10:00:")])
        (incarnation,) = tracker.snapshot().incarnations
        assert incarnation.started_at == datetime(2026, 5, 1, 10, 0, 0, tzinfo=UTC)
        assert incarnation.phase_entered_at == datetime(2026, 5, 1, 10, 0, 10, tzinfo=UTC)

    def test_logo_record_is_a_start_banner(self) -> None:
        """The logo is one multi-line record: its version line starts the incarnation."""
        logo = "\n".join(
            [
                "",
                "       █     █     █▄   ▄█",
                " ▄▄ ▄█ █     █     █ ▀▄▀ █  version 0.32.0",
                "  █▄█▀ █     █     █     █  model   Qwen/Qwen3-8B",
                "   ▀▀  ▀▀▀▀▀ ▀▀▀▀▀ ▀     ▀",
                "",
            ]
        )
        tracker = UnitTracker("vllm", reference_year=2026)
        _text(tracker, [_json("2026-05-01 10:00:00,123", "INFO", "APIServer", 1, logo)] * 2)
        first, second = tracker.snapshot().incarnations
        assert (first.vllm_version, first.model) == ("0.32.0", "Qwen/Qwen3-8B")
        assert (second.vllm_version, second.model) == ("0.32.0", "Qwen/Qwen3-8B")

    def test_record_time_wins_over_asctime(self) -> None:
        """A journal record's own time stays the line's time."""
        journal = Journal()
        tracker = UnitTracker("u")
        for seconds, line in zip((0, 5, 9), self._lines("2020-01-01 00:00:"), strict=True):
            tracker.feed(journal.at(seconds).line(line, A))
        (incarnation,) = tracker.snapshot().incarnations
        assert incarnation.started_at == T0
        assert incarnation.crash is None and incarnation.last_record_at == T0 + timedelta(seconds=9)


class TestRecentEvents:
    """The bounded record of start and crash times behind "the last 24 h", and benign lines."""

    def test_starts_and_settled_crashes_are_kept_history_included(self) -> None:
        """History (not counted) still fills the times: the page's 24 h is about the unit."""
        tracker = UnitTracker("vllm-kimi-k25.service", "llm-two", settle_seconds=30)
        tracker.counting = False
        _incident(tracker, Journal(), late=False, until=151)
        tracker.advance(T0 + timedelta(seconds=300))
        snapshot = tracker.snapshot()
        assert snapshot.starts_total == 0 and dict(snapshot.crashes_total) == {}
        assert snapshot.recent_starts == (
            T0 + timedelta(seconds=58),
            T0 + timedelta(seconds=151),
        )
        assert snapshot.recent_crashes == (T0 + timedelta(seconds=140),)

    def test_times_are_bounded(self) -> None:
        """A crash loop keeps the latest RECENT_EVENTS_KEPT times, oldest first."""
        tracker = UnitTracker("u", "h", settle_seconds=1)
        journal = Journal(unit="u", host="h")
        total = RECENT_EVENTS_KEPT + 20
        for index in range(total):
            invocation = f"{index:032x}"
            tracker.feed(journal.at(index * 10).systemd("Started u - vLLM.", invocation))
            tracker.feed(
                journal.at(index * 10 + 5).systemd(
                    "u: Main process exited, code=exited, status=1/FAILURE", invocation
                )
            )
            tracker.feed(
                journal.at(index * 10 + 5).systemd("u: Failed with result 'exit-code'.", invocation)
            )
        tracker.advance(T0 + timedelta(seconds=total * 10 + 60))
        snapshot = tracker.snapshot()
        assert len(snapshot.recent_starts) == RECENT_EVENTS_KEPT
        assert snapshot.recent_starts[0] == T0 + timedelta(seconds=20 * 10)
        assert snapshot.recent_starts[-1] == T0 + timedelta(seconds=(total - 1) * 10)
        assert len(snapshot.recent_crashes) == RECENT_EVENTS_KEPT
        assert snapshot.recent_crashes[-1] == T0 + timedelta(seconds=(total - 1) * 10 + 5)

    def test_first_benign_lines_are_kept(self) -> None:
        """The bodies of the first BENIGN_LINES_KEPT benign ERROR lines; all are counted."""
        tracker = UnitTracker("u")
        journal = Journal(unit="u")
        for index in range(BENIGN_LINES_KEPT + 3):
            tracker.feed(
                journal.at(index).line(
                    f"ERROR 11-28 23:35:0{index % 10} [fused_moe.py:60] Failed to import Triton "
                    f"kernels. Please make sure your triton version is compatible. Error: {index}",
                    A,
                )
            )
        current = tracker.snapshot().current
        assert current is not None
        assert current.benign_errors == BENIGN_LINES_KEPT + 3
        assert len(current.benign_lines) == BENIGN_LINES_KEPT
        assert current.benign_lines[0].startswith("Failed to import Triton kernels.")
        assert current.benign_lines[0].endswith("Error: 0")
