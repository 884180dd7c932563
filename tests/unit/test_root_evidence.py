"""Root-cause evidence beyond the exception line (issue 19, mechanisms 2, 5 and 6).

Every log here is built from real lines: the issue's examples (labelled by hand from public
bug reports) and the vLLM reports each test names.
"""

from __future__ import annotations

from vllm_sentinel.engine.catalog.causes import CrashCause
from vllm_sentinel.engine.catalog.phases import Outcome, Phase
from vllm_sentinel.engine.snapshot import UnitSnapshot
from vllm_sentinel.replay import replay


def _replay(lines: list[str]) -> UnitSnapshot:
    (unit,) = replay([["\n".join(lines).encode() + b"\n"]]).units
    return unit


_CORE = "(EngineCore_DP0 pid=12473) ERROR 11-05 12:19:32 [core.py:708] "
_SITE = "/home/localadmin/Documents/vllm/.venv/lib/python3.10/site-packages"
_OOM = (
    "CUDA out of memory. Tried to allocate 224.00 MiB. GPU 0 has a total capacity of 23.55 GiB "
    "of which 120.81 MiB is free. Including non-PyTorch memory, this process has 23.42 GiB "
    "memory in use."
)
_LOAD_START = (
    "(EngineCore_DP0 pid=12473) INFO 11-05 12:19:20 [gpu_model_runner.py:2602] Starting to "
    "load model meta-llama/Llama-3.1-8B-Instruct..."
)


class TestErrorLineStatesTheFailure:
    """Mechanism 2: a vLLM ERROR line that states the failure before the traceback."""

    def _lines(self) -> list[str]:
        # vLLM 0.11 linear.py:210 logs the OOM (logger.error) and re-raises a RuntimeError;
        # core.py:708 announces "EngineCore failed to start." with the traceback, here cut
        # by the paste before its exception lines (issue 19's example; the traceback's
        # shape is vllm-project/vllm#28143's, the same release and call path).
        return [
            _LOAD_START,
            "(EngineCore_DP0 pid=12473) ERROR 11-05 12:19:32 [linear.py:210] Failed to create "
            f"unquantized linear weights: {_OOM}",
            f"{_CORE}EngineCore failed to start.",
            f"{_CORE}Traceback (most recent call last):",
            f'{_CORE}  File "{_SITE}/vllm/v1/engine/core.py", line 699, in run_engine_core',
            f"{_CORE}    engine_core = EngineCoreProc(*args, **kwargs)",
            f'{_CORE}  File "{_SITE}/vllm/v1/engine/core.py", line 498, in __init__',
            f"{_CORE}    super().__init__(vllm_config, executor_class, log_stats,",
        ]

    def test_the_error_line_names_the_cause(self) -> None:
        """The OOM an ERROR line states is the root cause, not `unknown`."""
        crash = _replay(self._lines()).incarnations[-1].crash
        assert crash is not None
        assert crash.cause is CrashCause.CUDA_OOM
        assert crash.message.startswith("Failed to create unquantized linear weights: CUDA out")

    def test_an_announcement_is_never_the_exception(self) -> None:
        """`EngineCore failed to start.` alone says nothing: no cause, never shown as one."""
        lines = [line for line in self._lines() if "linear.py" not in line]
        crash = _replay(lines).incarnations[-1].crash
        assert crash is not None
        assert crash.cause is CrashCause.UNKNOWN
        assert "failed to start" not in f"{crash.exception} {crash.message}"

    def test_an_announcement_is_not_an_open_tracebacks_exception(self) -> None:
        """Without process prefixes (vLLM 0.8), the announcement after another process's
        open raw traceback is not that traceback's exception line."""
        lines = [
            "INFO 04-29 10:00:00 [gpu_model_runner.py:1329] Starting to load model "
            "Qwen/Qwen2.5-7B-Instruct...",
            "Traceback (most recent call last):",
            '  File "/usr/lib/python3.12/multiprocessing/process.py", line 314, in _bootstrap',
            "    self.run()",
            "ERROR 04-29 10:00:05 [core.py:396] EngineCore failed to start.",
            "ERROR 04-29 10:00:05 [core.py:396] Traceback (most recent call last):",
            'ERROR 04-29 10:00:05 [core.py:396]   File "/usr/local/lib/python3.12/dist-packages/'
            'vllm/v1/engine/core.py", line 387, in run_engine_core',
        ]
        crash = _replay(lines).incarnations[-1].crash
        assert crash is not None
        assert "failed to start" not in f"{crash.exception} {crash.message}"


_PROTOBUF = "AttributeError: 'MessageFactory' object has no attribute 'GetPrototype'"
_V085 = "/usr/local/lib/python3.12/dist-packages/vllm"


class TestNoiseTheProcessSurvived:
    """Mechanism 5: a line after which the same process makes progress did not end it."""

    def test_import_noise_is_not_the_root_cause(self) -> None:
        """Five bare protobuf AttributeErrors (an installed TensorFlow, at import), then a
        normal start, then the ValueError that ended it: the ValueError is the cause
        (issue 19's example; the ValueError is vLLM 0.8.5's kv_cache_utils.py message)."""
        err = "ERROR 05-20 03:13:10 [core.py:396] "
        lines = [
            "INFO 05-20 03:12:01 [__init__.py:239] Automatically detected platform cuda.",
            "INFO 05-20 03:12:05 [api_server.py:1043] vLLM API server version 0.8.5.post1",
            # the engine core process imports again, and prints the noise again
            *[_PROTOBUF] * 5,
            "INFO 05-20 03:12:15 [core.py:58] Initializing a V1 LLM engine (v0.8.5.post1) with "
            "config: model='Qwen/Qwen2.5-32B-Instruct'",
            "INFO 05-20 03:12:20 [gpu_model_runner.py:1329] Starting to load model "
            "Qwen/Qwen2.5-32B-Instruct...",
            "INFO 05-20 03:12:50 [gpu_model_runner.py:1347] Model loading took 61.03 GiB and "
            "29.49 seconds",
            f"{err}EngineCore failed to start.",
            f"{err}Traceback (most recent call last):",
            f'{err}  File "{_V085}/v1/engine/core.py", line 387, in run_engine_core',
            f"{err}ValueError: To serve at least one request with the models's max seq len "
            "(32768), (8.00 GiB KV cache is needed, which is larger than the available KV "
            "cache memory (5.28 GiB). Based on the available memory,  Try increasing "
            "`gpu_memory_utilization` or decreasing `max_model_len` when initializing the "
            "engine.",
        ]
        crash = _replay(lines).incarnations[-1].crash
        assert crash is not None
        assert (crash.cause, crash.exception) == (CrashCause.KV_CACHE_INSUFFICIENT, "ValueError")

    def test_noise_alone_is_still_shown(self) -> None:
        """With nothing after it, the line is still what the log shows (never dropped)."""
        lines = [_PROTOBUF, "Killed"]
        crash = _replay(lines).incarnations[-1].crash
        assert crash is not None
        assert crash.exception == "AttributeError"


_EC = "(EngineCore_DP0 pid=112) "
_ERR = f"{_EC}ERROR 05-01 14:39:06 [core.py:708] "
_V1 = "/usr/local/lib/python3.12/dist-packages/vllm"


def _profile_run_oom() -> list[str]:
    """A V1 0.11 start: loaded, compiled, then OOM in the profiling run (the frames are those
    of vllm-project/vllm#27508 and club-3090#16, vLLM 0.11 call path)."""
    frames = [
        ("v1/engine/core.py", 699, "run_engine_core"),
        ("v1/engine/core.py", 498, "__init__"),
        ("v1/engine/core.py", 92, "__init__"),
        ("v1/engine/core.py", 190, "_initialize_kv_caches"),
        ("v1/executor/abstract.py", 85, "determine_available_memory"),
        ("v1/worker/gpu_worker.py", 263, "determine_available_memory"),
        ("v1/worker/gpu_model_runner.py", 3361, "profile_run"),
        ("v1/worker/gpu_model_runner.py", 3103, "_dummy_run"),
    ]
    return [
        f"{_EC}INFO 05-01 14:38:36 [gpu_model_runner.py:2602] Starting to load model "
        "Qwen/Qwen3-32B-AWQ...",
        f"{_EC}INFO 05-01 14:38:39 [default_loader.py:267] Loading weights took 2.91 seconds",
        f"{_EC}INFO 05-01 14:38:40 [gpu_model_runner.py:2653] Model loading took 18.14 GiB "
        "and 3.58 seconds",
        f"{_EC}INFO 05-01 14:38:52 [backends.py:548] Using cache directory: /root/.cache/vllm"
        "/torch_compile_cache/3f1c/rank_0_0/backbone for vLLM's torch.compile",
        f"{_EC}INFO 05-01 14:38:52 [backends.py:559] Dynamo bytecode transform time: 11.62 s",
        f"{_EC}INFO 05-01 14:39:02 [monitor.py:34] torch.compile takes 21.40 s in total",
        f"{_ERR}EngineCore failed to start.",
        f"{_ERR}Traceback (most recent call last):",
        *(f'{_ERR}  File "{_V1}/{path}", line {n}, in {func}' for path, n, func in frames),
        f'{_ERR}  File "/usr/local/lib/python3.12/dist-packages/torch/nn/modules/module.py", '
        "line 1773, in _wrapped_call_impl",
        f"{_ERR}torch.OutOfMemoryError: {_OOM}",
    ]


class TestPhases:
    """Mechanism 6: the phase a crash happened in, and where phases end."""

    def test_the_frames_name_a_later_phase_than_the_markers(self) -> None:
        """An OOM under determine_available_memory → profile_run crashed while profiling,
        though compile's line was the last marker."""
        item = _replay(_profile_run_oom()).incarnations[-1]
        assert item.crash is not None
        assert item.crash.cause is CrashCause.CUDA_OOM
        assert item.crash.phase is Phase.PROFILING_KV_CACHE
        assert item.furthest_phase is Phase.PROFILING_KV_CACHE
        assert item.outcome is Outcome.CRASHED

    def test_frames_never_move_a_crash_back(self) -> None:
        """A load_model frame under a later marker leaves the marker's phase."""
        lines = _profile_run_oom()
        lines = [line.replace("profile_run", "load_model") for line in lines]
        lines = [
            line.replace("determine_available_memory", "x").replace("_initialize", "_x")
            for line in lines
        ]
        item = _replay(lines).incarnations[-1]
        assert item.crash is not None
        assert item.crash.phase is Phase.COMPILING

    def test_model_loading_took_ends_loading(self) -> None:
        """`Model loading took … and 3.58 seconds` ends loading_weights: Dynamo's seconds
        before compile's first line are compiling's."""
        unit = _replay(_profile_run_oom())
        assert unit.phase_durations[Phase.LOADING_WEIGHTS] == 4.0
        (compiling,) = [e for e in unit.incarnations[-1].phases if e.phase is Phase.COMPILING]
        assert compiling.entered_at is not None
        assert compiling.entered_at.strftime("%H:%M:%S") == "14:38:40"


class TestLateFrames:
    """A traceback delivered after systemd's verdict still names the phase it was raised in."""

    def test_the_crash_phase_follows_a_late_traceback(self) -> None:
        """journald hands over a worker's traceback after the exit: the crash moves from
        compiling (its last marker) to profiling_kv_cache (its frames), as when in order."""
        from tests.support.records import Journal
        from vllm_sentinel.engine.tracker import UnitTracker

        journal, tracker, inv = Journal(), UnitTracker("vllm-kimi-k25.service"), "d" * 32
        lines = _profile_run_oom()
        markers, traceback = lines[:6], lines[6:]
        tracker.feed(journal.at(0).systemd("Started vllm-kimi-k25.service - vLLM.", inv))
        for offset, line in enumerate(markers, 1):
            tracker.feed(journal.at(offset).line(line, inv, 112))
        tracker.feed(
            journal.at(30).systemd(
                "vllm-kimi-k25.service: Main process exited, code=exited, status=1/FAILURE", inv
            )
        )
        for line in traceback:
            tracker.feed(journal.at(31).line(line, inv, 112))
        tracker.finish()
        item = tracker.snapshot().incarnations[-1]
        assert item.crash is not None
        assert (item.crash.cause, item.crash.phase) == (
            CrashCause.CUDA_OOM,
            Phase.PROFILING_KV_CACHE,
        )
        assert item.furthest_phase is Phase.PROFILING_KV_CACHE
