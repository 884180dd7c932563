"""Failure lines that are not Python exceptions, every accelerator's words, handled tracebacks.

Issue 10, classes 3–6. Lines are real: from the shared corpus (file named), from vLLM's and
NCCL's format strings (file named), or as the issue quotes them from real reports.
"""

from __future__ import annotations

import re

import pytest

from vllm_sentinel.engine.catalog.causes import CrashCause, classify_exception
from vllm_sentinel.engine.catalog.failure_lines import FAILURE_LINES, Effect, classify_failure_line
from vllm_sentinel.engine.catalog.markers import CRASH_REPORTERS, CrashReporter, crash_reporter
from vllm_sentinel.engine.catalog.phases import Outcome, Phase
from vllm_sentinel.engine.decode.vllm_line import parse_line
from vllm_sentinel.engine.snapshot import UnitSnapshot
from vllm_sentinel.replay import replay

C = CrashCause


def _replay(lines: list[str]) -> UnitSnapshot:
    (unit,) = replay([["\n".join(lines).encode() + b"\n"]], reference_year=2026).units
    return unit


class TestTable:
    """The table itself: each row's example is a real line of its shape."""

    @pytest.mark.parametrize("row", FAILURE_LINES, ids=[row.name for row in FAILURE_LINES])
    def test_each_example_is_read_by_its_own_row(self, row: object) -> None:
        found = classify_failure_line(row.example)  # type: ignore[attr-defined]
        assert found is not None and found.row is row

    def test_rows_name_their_source(self) -> None:
        for row in FAILURE_LINES:
            assert row.source.strip() and row.example.strip(), row.name

    @pytest.mark.parametrize(
        ("line", "cause", "effect"),
        [
            # the examples of class 3
            (
                "terminate called after throwing an instance of 'c10::Error'",
                C.UNKNOWN,
                Effect.FATAL,
            ),
            ("  what():  CUDA error: device-side assert triggered", C.CUDA_ERROR, Effect.FATAL),
            (
                "host1:7:7 [0] enqueue.cc:1556 NCCL WARN Cuda failure 'out of memory'",
                C.CUDA_OOM,
                Effect.EVIDENCE,
            ),
            # corpus 311 (vLLM csrc/custom_all_reduce.cuh CUDACHECK)
            (
                "Failed: Cuda error /workspace/csrc/custom_all_reduce.cuh:164 'invalid argument'",
                C.CUDA_ERROR,
                Effect.FATAL,
            ),
            (
                "Failed: Cuda error /workspace/csrc/custom_all_reduce.cuh:164 "
                "'an illegal memory access was encountered'",
                C.CUDA_ILLEGAL_MEMORY_ACCESS,
                Effect.FATAL,
            ),
            (
                "terminate called after throwing an instance of 'c10::DistBackendError'",
                C.NCCL_ERROR,
                Effect.FATAL,
            ),
            # class 5: the process manager's word
            ("Killed", C.KILLED, Effect.ENDS),
            ("Segmentation fault (core dumped)", C.KILLED, Effect.ENDS),
            ("Aborted (core dumped)", C.KILLED, Effect.ENDS),
            (
                "./serve.sh: line 12:  4242 Killed                  python -m vllm.entrypoints."
                "openai.api_server --model /models/llama",
                C.KILLED,
                Effect.ENDS,
            ),
            ("vllm-1 exited with code 137", C.KILLED, Effect.ENDS),
            ("command terminated with exit code 137", C.KILLED, Effect.ENDS),
            ("Fatal Python error: Segmentation fault", C.KILLED, Effect.ENDS),
        ],
    )
    def test_cause_and_effect(self, line: str, cause: CrashCause, effect: Effect) -> None:
        found = classify_failure_line(line)
        assert found is not None
        assert (found.cause, found.row.effect) == (cause, effect)

    @pytest.mark.parametrize(
        "line",
        [
            "vllm-1 exited with code 0",
            "Terminated",
            "./serve.sh: line 12:  4242 Terminated              python -m vllm.entrypoints",
        ],
    )
    def test_a_clean_exit_or_sigterm_is_a_stop(self, line: str) -> None:
        found = classify_failure_line(line)
        assert found is not None and found.outcome is Outcome.STOPPED

    @pytest.mark.parametrize(
        "line",
        [
            "Out of memory: Killed process 4242 (python3)",  # the kernel's: systemd markers
            "INFO 05-01 10:00:00 [loader.py:1] Killed the old cache",
            "Loading safetensors checkpoint shards:  50% Completed | 1/2 [00:01<00:01]",
            "host1:7:7 [0] NCCL INFO Channel 00/02 :    0   1",
            "frame #0: c10::Error::Error(c10::SourceLocation, std::string) + 0x57",
        ],
    )
    def test_lines_that_are_not_failures(self, line: str) -> None:
        assert classify_failure_line(line) is None


class TestNativeFailures:
    """Class 3: the first native failure is the root cause; the Python noise after it is not."""

    def test_cxx_abort_then_python_noise(self) -> None:
        unit = _replay(
            [
                "INFO 09-10 09:37:01 [gpu_model_runner.py:3425] Starting to load model /m...",
                "INFO 09-10 09:37:20 [default_loader.py:291] Loading weights took 18.20 seconds",
                "terminate called after throwing an instance of 'c10::Error'",
                "  what():  CUDA error: device-side assert triggered",
                "Task exception was never retrieved",
                "zmq.error.ZMQError: Operation not supported",
                "ERROR 09-10 09:37:41 [multiproc_executor.py:314] Worker proc VllmWorker-0 died "
                "unexpectedly (exit code: -6), shutting down executor.",
            ]
        )
        crash = unit.last_crash
        assert crash is not None
        assert (crash.cause, crash.message) == (
            C.CUDA_ERROR,
            "  what():  CUDA error: device-side assert triggered",
        )
        assert crash.phase is Phase.LOADING_WEIGHTS

    def test_nccl_cuda_failure_out_of_memory(self) -> None:
        unit = _replay(
            [
                "(Worker_TP1 pid=236) INFO 08-20 10:00:00 [pynccl.py:69] vLLM is using nccl==2.21.5",
                "(Worker_TP1 pid=236) host1:236:236 [1] enqueue.cc:1556 NCCL WARN Cuda failure "
                "'out of memory'",
                "(Worker_TP1 pid=236) ERROR 08-20 10:00:01 [multiproc_executor.py:527] WorkerProc "
                "hit an exception.",
            ]
        )
        assert unit.last_crash is not None and unit.last_crash.cause is C.CUDA_OOM


class TestEveryAcceleratorsOutOfMemory:
    """Class 4: device OOM is cuda_oom whatever the vendor; the vendor stays in the message."""

    @pytest.mark.parametrize(
        ("exception", "message"),
        [
            ("torch.OutOfMemoryError", "HIP out of memory. Tried to allocate 12.95 GiB."),  # 313
            ("RuntimeError", "NPU out of memory. Tried to allocate 11.50 GiB (NPU 15; …)"),  # 309
            ("torch.OutOfMemoryError", "XPU out of memory. Tried to allocate 2.00 GiB."),
            ("RuntimeError", "HIP error: out of memory"),
            ("RuntimeError", "hipErrorOutOfMemory"),
            (
                "RuntimeError",
                "level_zero backend failed with error: 39 (UR_RESULT_ERROR_OUT_OF_DEVICE_MEMORY)",
            ),
            (
                "jaxlib.xla_extension.XlaRuntimeError",
                "RESOURCE_EXHAUSTED: Error allocating "
                "device buffer: Attempting to allocate 1.00G. That was not possible.",
            ),
            ("RuntimeError", "Ran out of memory in memory space hbm. Used 17.2G of 15.75G hbm."),
            (
                "torch._inductor.exc.InductorError",
                "RuntimeError: CUDA out of memory. Tried to allocate 20.00 MiB.",
            ),
        ],
    )
    def test_device_oom(self, exception: str, message: str) -> None:
        assert classify_exception(exception, message)[0] is C.CUDA_OOM

    def test_host_words_are_not_device_oom(self) -> None:
        assert classify_exception("OSError", "[Errno 12] Cannot allocate memory")[0] is not (
            C.CUDA_OOM
        )


class TestProcessManagersWord:
    """Class 5: the shell or runtime says the process is gone, even after ready."""

    READY = (
        "(APIServer pid=4242) INFO 05-01 10:00:00 [api_server.py:1043] vLLM API server version "
        "0.8.5",
        "(APIServer pid=4242) INFO:     Application startup complete.",
        "(APIServer pid=4242) INFO 05-01 10:05:00 [loggers.py:111] Engine 000: Avg prompt "
        "throughput: 0.0 tokens/s, Avg generation throughput: 0.0 tokens/s, Running: 0 reqs",
    )

    @pytest.mark.parametrize(
        "last",
        [
            "./serve.sh: line 12:  4242 Killed                  python -m vllm.entrypoints."
            "openai.api_server --model /models/llama",
            "Segmentation fault (core dumped)",
            "vllm-1 exited with code 137",
        ],
    )
    def test_death_after_ready(self, last: str) -> None:
        unit = _replay([*self.READY, last])
        current = unit.current
        assert current is not None and current.outcome is Outcome.CRASHED
        assert current.furthest_phase is Phase.READY
        assert current.crash is not None and current.crash.cause is C.KILLED
        assert current.crash.message == last

    def test_exit_code_zero_is_a_stop(self) -> None:
        unit = _replay([*self.READY, "vllm-1 exited with code 0"])
        assert unit.current is not None and unit.current.outcome is Outcome.STOPPED

    def test_a_real_cause_outranks_the_signal(self) -> None:
        unit = _replay(
            [
                *self.READY,
                "Failed: Cuda error /workspace/csrc/custom_all_reduce.cuh:164 'invalid argument'",
                "Aborted (core dumped)",
            ]
        )
        assert unit.last_crash is not None and unit.last_crash.cause is C.CUDA_ERROR


class TestTracebacksThatAreNotTheFailure:
    """Class 6: a handled (WARNING) traceback neither swallows nor outranks a later failure."""

    def test_warning_traceback_then_jit_build_failure_after_graph_capture(self) -> None:
        warn = "(EngineCore_DP0 pid=7) WARNING 05-01 10:00:05 [cuda.py:98] "
        unit = _replay(
            [
                "(APIServer pid=1) INFO 05-01 10:00:00 [api_server.py:1043] vLLM API server "
                "version 0.11.0",
                warn + "Failed to import flash_attn varlen kernel, falling back.",
                warn + "Traceback (most recent call last):",
                warn + '  File "/usr/lib/python3/dist-packages/vllm/attention/utils.py", line 40, '
                "in <module>",
                warn + "    from flash_attn import flash_attn_varlen_func",
                warn + "ModuleNotFoundError: No module named 'flash_attn'",
                "(EngineCore_DP0 pid=7) INFO 05-01 10:00:30 [gpu_model_runner.py:2602] Model "
                "loading took 14.99 GiB and 20.1 seconds",
                "(EngineCore_DP0 pid=7) INFO 05-01 10:01:30 [gpu_model_runner.py:3480] Graph "
                "capturing finished in 12 secs, took 0.55 GiB",
                "(EngineCore_DP0 pid=7) ERROR 05-01 10:01:40 [core.py:708] EngineCore failed to "
                "start.",
                "(EngineCore_DP0 pid=7) ERROR 05-01 10:01:40 [core.py:708] Traceback (most recent "
                "call last):",
                "(EngineCore_DP0 pid=7) ERROR 05-01 10:01:40 [core.py:708]   File "
                '"/usr/lib/python3/dist-packages/flashinfer/jit/cpp_ext.py", line 240, in '
                "run_ninja",
                "(EngineCore_DP0 pid=7) ERROR 05-01 10:01:40 [core.py:708] RuntimeError: Ninja "
                "build failed. Ninja output: /bin/sh: 1: nvcc: not found",
            ]
        )
        crash = unit.last_crash
        assert crash is not None and crash.cause is C.JIT_BUILD_ERROR
        assert crash.phase is Phase.CAPTURING_CUDA_GRAPHS
        current = unit.current
        assert current is not None and current.furthest_phase is Phase.CAPTURING_CUDA_GRAPHS

    def test_a_progress_bar_inside_a_traceback_is_not_its_exception(self) -> None:
        unit = _replay(
            [
                "INFO 05-01 10:00:00 [api_server.py:1043] vLLM API server version 0.8.5",
                "Traceback (most recent call last):",
                '  File "/usr/lib/python3/dist-packages/vllm/worker/worker.py", line 10, in x',
                "Loading safetensors checkpoint shards:  50% Completed | 1/2 [00:01<00:01, 1.2s/it]",
                "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 60.00 MiB.",
            ]
        )
        crash = unit.last_crash
        assert crash is not None
        assert (crash.cause, crash.exception) == (C.CUDA_OOM, "torch.OutOfMemoryError")


class TestStopsAreNotCrashes:
    """An operator's Ctrl-C or SIGTERM during startup ends in a stop, whatever breaks after."""

    def test_ctrl_c_during_a_hung_start(self) -> None:
        unit = _replay(
            [
                "INFO 05-26 18:54:01 [api_server.py:1043] vLLM API server version 0.8.5.post1",
                "INFO 05-26 18:54:09 [ray_utils.py:335] Waiting for creating a placement group "
                "of specs for 10 seconds.",
                "*** SIGTERM received at time=1748300290 on cpu 8 ***",
                "ERROR 05-26 18:58:11 [engine.py:448] KeyboardInterrupt",
                "Traceback (most recent call last):",
                '  File "/usr/lib/python3.12/asyncio/runners.py", line 123, in run',
                "    raise KeyboardInterrupt()",
                "KeyboardInterrupt",
            ]
        )
        current = unit.current
        assert current is not None and current.outcome is Outcome.STOPPED
        assert current.crash is None and unit.last_crash is None

    @pytest.mark.parametrize(
        ("exception", "stop"),
        [("KeyboardInterrupt", True), ("SystemExit: 15", True), ("SystemExit: 1", False)],
    )
    def test_exit_status_decides(self, exception: str, stop: bool) -> None:
        unit = _replay(
            [
                "INFO 05-26 18:54:01 [api_server.py:1043] vLLM API server version 0.8.5.post1",
                "Traceback (most recent call last):",
                '  File "/usr/lib/python3/dist-packages/vllm/engine/llm_engine.py", line 1, in x',
                exception,
            ]
        )
        assert unit.current is not None
        assert (unit.current.outcome is Outcome.STOPPED) is stop


class TestWhereItWasRaised:
    """An exception whose words name no cause is classified by its innermost frame."""

    @pytest.mark.parametrize(
        ("frame", "cause"),
        [
            (
                '  File "/venv/lib/python3.10/site-packages/vllm/entrypoints/chat_utils.py", '
                "line 1033, in validate_chat_template",
                C.CONFIG_ERROR,
            ),
            (
                '  File "/venv/lib/python3.12/site-packages/vllm/config/model.py", line 612, in '
                "__post_init__",
                C.CONFIG_ERROR,
            ),
            (
                '  File "/venv/lib/python3.12/site-packages/flashinfer/jit/cpp_ext.py", line 240, '
                "in run_ninja",
                C.JIT_BUILD_ERROR,
            ),
            (
                '  File "/venv/lib/python3.12/site-packages/triton/compiler/compiler.py", line '
                "300, in compile",
                C.COMPILE_ERROR,
            ),
            (
                '  File "/venv/lib/python3.12/site-packages/vllm/v1/engine/core.py", line 5, in x',
                C.UNKNOWN,
            ),
        ],
    )
    def test_frame_rules(self, frame: str, cause: CrashCause) -> None:
        assert classify_exception("ValueError", "something odd happened", frame)[0] is cause

    def test_words_win_over_the_frame(self) -> None:
        frame = '  File "/venv/lib/python3.12/site-packages/vllm/config/model.py", line 1, in f'
        assert classify_exception("RuntimeError", "CUDA out of memory.", frame)[0] is C.CUDA_OOM

    def test_the_frame_reaches_the_verdict(self) -> None:
        unit = _replay(
            [
                "Traceback (most recent call last):",
                '  File "/venv/lib/python3.10/site-packages/vllm/entrypoints/openai/cli_args.py",'
                " line 274, in validate_parsed_serve_args",
                "    validate_chat_template(args.chat_template)",
                '  File "/venv/lib/python3.10/site-packages/vllm/entrypoints/chat_utils.py", '
                "line 1033, in validate_chat_template",
                "    raise ValueError(",
                "ValueError: The supplied chat template string (tool_use) appears path-like, but "
                "doesn't exist!",
            ]
        )
        assert unit.last_crash is not None and unit.last_crash.cause is C.CONFIG_ERROR


class TestSmallerClasses:
    """Time-less logs, vLLM's OOM advice, vLLM not installed, TP facts."""

    def test_a_failure_in_a_log_without_any_time_is_still_a_crash(self) -> None:
        unit = _replay(
            [
                "torch.OutOfMemoryError: HIP out of memory. Tried to allocate 500.00 MiB.",
                "Traceback (most recent call last):",
                '  File "/venv/bin/vllm", line 8, in <module>',
            ]
        )
        assert unit.current is not None and unit.current.outcome is Outcome.CRASHED
        assert unit.last_crash is not None and unit.last_crash.cause is C.CUDA_OOM

    def test_vllms_oom_advice_points_at_the_exception(self) -> None:
        """gpu_model_runner.py logs its advice, then re-raises: the exception is the root."""
        unit = _replay(
            [
                "(EngineCore_DP0 pid=9) ERROR 01-01 10:00:00 [gpu_model_runner.py:3034] Failed to "
                "load model - not enough GPU memory. Try lowering --gpu-memory-utilization to "
                "free memory for weights, increasing --tensor-parallel-size, or using "
                "--quantization. See https://docs.vllm.ai/ for more tips.",
                "(EngineCore_DP0 pid=9) ERROR 01-01 10:00:00 [core.py:866] EngineCore failed to "
                "start.",
                "(EngineCore_DP0 pid=9) ERROR 01-01 10:00:00 [core.py:866] Traceback (most recent "
                "call last):",
                '(EngineCore_DP0 pid=9) ERROR 01-01 10:00:00 [core.py:866]   File "/x/vllm/v1/'
                'worker/gpu_model_runner.py", line 3020, in load_model',
                "(EngineCore_DP0 pid=9) ERROR 01-01 10:00:00 [core.py:866] torch.OutOfMemoryError:"
                " CUDA out of memory. Tried to allocate 260.00 MiB.",
            ]
        )
        crash = unit.last_crash
        assert crash is not None and crash.exception == "torch.OutOfMemoryError"

    def test_python_without_vllm(self) -> None:
        unit = _replay(
            [
                "/srv/app/.venv/bin/python: Error while finding module specification for "
                "'vllm.entrypoints.openai.api_server' (ModuleNotFoundError: No module named "
                "'vllm')"
            ]
        )
        assert unit.current is not None and unit.current.outcome is Outcome.CRASHED
        assert unit.last_crash is not None and unit.last_crash.cause is C.IMPORT_ERROR

    @pytest.mark.parametrize(
        ("line", "tp"),
        [
            (
                "(APIServer pid=1) INFO 06-19 15:35:00 [utils.py:253] non-default args: "
                "{'host': '0.0.0.0', 'model': 'Qwen/Qwen2.5-0.5B-Instruct'}",
                1,
            ),
            (
                "(APIServer pid=1) INFO 06-19 15:35:00 [utils.py:253] non-default args: "
                "{'model': 'm', 'tensor_parallel_size': 4}",
                4,
            ),
            (
                "(APIServer pid=1) INFO 06-19 15:35:00 [utils.py:253] non-default args: "
                "{'model': 'm', 'max_model_len': 4096, 'gpu_memory_uti",  # cut: unknown
                None,
            ),
            (
                "(EngineCore pid=260) INFO 06-19 15:35:18 [parallel_state.py:1903] rank 0 in "
                "world size 1 is assigned as DP rank 0, PP rank 0, TP rank 0",
                1,
            ),
            (
                "(Worker_TP0 pid=260) INFO 06-19 15:35:18 [parallel_state.py:1903] rank 0 in "
                "world size 2 is assigned as DP rank 0, PP rank 0, TP rank 0",
                None,
            ),
            ("INFO 11-20 10:45:57 gpu_executor.py:102] # GPU blocks: 12453, # CPU blocks: 2730", 1),
            (
                "INFO 11-20 10:45:57 distributed_gpu_executor.py:57] # GPU blocks: 12453, # CPU "
                "blocks: 2730",
                None,
            ),
        ],
    )
    def test_tensor_parallel_size_facts(self, line: str, tp: int | None) -> None:
        unit = _replay(
            ["INFO 06-19 15:34:59 [api_server.py:1043] vLLM API server version 0.9.0", line]
        )
        assert unit.current is not None and unit.current.tensor_parallel_size == tp


class TestHoldoutClasses:
    """Classes the holdout set's first run missed (tests/golden/holdout/README.md)."""

    def test_an_unknown_tools_prefix_before_vllms_line_is_a_wrapper(self) -> None:
        """A log shipper's or collector's prefix: a stamp, anything, then vLLM's own line."""
        for prefix in (
            "[2025-01-08 15:00:27] 7cf7b77579-xsp97 >> ",
            "2025-10-24T17:12:08.36 +08:00 CST ",
        ):
            unit = _replay(
                [
                    f"{prefix}INFO 01-07 23:00:20 api_server.py:640] vLLM API server version "
                    "0.6.4.post1",
                    f"{prefix}INFO:     Application startup complete.",
                ]
            )
            current = unit.current
            assert current is not None and current.vllm_version == "0.6.4.post1", prefix
            assert current.phase is Phase.READY

    def test_another_programs_own_line_keeps_its_prefix(self) -> None:
        """LMCache's `[stamp] LMCache INFO: …` is not vLLM's line (corpus 042)."""
        from vllm_sentinel.engine.decode.text_log import TextLogDecoder

        decoder = TextLogDecoder("vllm")
        line = b"[2025-07-18 19:52:38,710] LMCache INFO: Loading LMCache config file x.yaml\n"
        (record,) = [*decoder.feed(line), *decoder.flush()]
        assert record.message.startswith("[2025-07-18") and record.realtime is None

    def test_an_engine_dead_server_answering_500s_has_crashed(self) -> None:
        api = "(APIServer pid=1) "
        unit = _replay(
            [
                api + 'INFO:     127.0.0.1:39180 - "POST /v1/chat/completions HTTP/1.1" 200 OK',
                api + "ERROR 10-24 17:12:08 [async_llm.py:480] AsyncLLM output_handler failed.",
                api + "ERROR 10-24 17:12:08 [async_llm.py:480] Traceback (most recent call last):",
                api + 'ERROR 10-24 17:12:08 [async_llm.py:480]   File "/x/vllm/v1/engine/'
                'core_client.py", line 846, in get_output_async',
                api + "ERROR 10-24 17:12:08 [async_llm.py:480] vllm.v1.engine.exceptions."
                "EngineDeadError: EngineCore encountered an issue. See stack trace (above) for "
                "the root cause.",
                api + 'INFO:     127.0.0.1:39118 - "POST /v1/chat/completions HTTP/1.1" 500 '
                "Internal Server Error",
            ]
        )
        assert unit.current is not None and unit.current.outcome is Outcome.CRASHED

    def test_a_workers_shutdown_after_its_parent_died_is_no_stop_request(self) -> None:
        worker = "(Worker_TP0 pid=41) INFO 02-09 12:47:08 [multiproc_executor.py:"
        unit = _replay(
            [
                "(APIServer pid=21) INFO 02-09 12:46:00 [api_server.py:1000] vLLM API server "
                "version 0.15.1",
                "(EngineCore_DP0 pid=31) INFO 02-09 12:47:00 [core.py:200] init engine (profile, "
                "create kv cache, warmup model) took 60.00 seconds",
                worker + "730] Parent process exited, terminating worker",
                worker + "774] WorkerProc shutting down.",
                "(APIServer pid=21) Traceback (most recent call last):",
                '(APIServer pid=21)   File "/x/openai_harmony/__init__.py", line 1, in load',
                "(APIServer pid=21) openai_harmony.HarmonyError: invalid tiktoken vocab file",
            ]
        )
        current = unit.current
        assert current is not None and current.outcome is Outcome.CRASHED
        assert current.crash is not None
        assert current.crash.exception == "openai_harmony.HarmonyError"

    @pytest.mark.parametrize(
        ("line", "cause"),
        [
            (
                "(VllmWorkerProcess pid=67) ERROR 11-05 03:21:52 multiproc_worker_utils.py:233] "
                "Exception in worker VllmWorkerProcess while processing method "
                "determine_num_available_blocks: CUDA out of memory. Tried to allocate 1.95 GiB.",
                C.CUDA_OOM,
            ),
            (
                "WARNING 11-16 10:37:53 model_runner_base.py:143] Failed to pickle inputs of "
                "failed execution: CUDA error: an illegal memory access was encountered",
                C.CUDA_ILLEGAL_MEMORY_ACCESS,
            ),
            (
                "Synapse detected a device critical error that requires a restart. Killing "
                "process in 5 seconds (hl: 6) 10:29:11 [No progress error]",
                C.CUDA_ERROR,
            ),
            (
                # torch 2.4's c10 format (no thread id), its leading "[" lost in the paste
                "rank0]:[E811 01:10:50.482336908 ProcessGroupNCCL.cpp:1515] [PG 3 Rank 0] "
                "Process group watchdog thread terminated with exception: CUDA error: an "
                "illegal memory access was encountered",
                C.CUDA_ILLEGAL_MEMORY_ACCESS,
            ),
        ],
    )
    def test_failure_lines_that_carry_their_cause(self, line: str, cause: CrashCause) -> None:
        unit = _replay(
            ["INFO 11-05 03:20:00 api_server.py:577] vLLM API server version 0.6.3", line]
        )
        assert unit.current is not None and unit.current.outcome is Outcome.CRASHED
        assert unit.last_crash is not None and unit.last_crash.cause is cause


class TestBatchSchedulers:
    """A batch scheduler's word ends the job's process (issue 10 class 5, fresh set class A).

    Lines from the schedulers' format strings: Slurm ``src/slurmd/slurmstepd/req.c``
    (``*** %s ON %s CANCELLED AT %s DUE TO … ***``, ``Detected %u oom_kill event``) and srun's
    task report (``%s: %s %s: %s%s`` with strsignal, ``Exited with exit code %d``, ``Out Of
    Memory``), OpenPBS/Torque pbs_mom (``=>> PBS: job killed: walltime %ld exceeded limit %ld``)
    and LSF's job report (``TERM_RUNLIMIT: job killed after reaching LSF run time limit.``).
    A time limit, preemption, requeue or cancel is the operator's scheduler stopping the job: a
    stop. A node failure, a memory limit or a task killed by a signal is a crash.
    """

    READY = TestProcessManagersWord.READY

    @pytest.mark.parametrize(
        "line",
        [
            "slurmstepd: error: *** JOB 1234567 ON gpu-node-17 CANCELLED AT 2024-03-02T11:04:55 "
            "DUE TO TIME LIMIT ***",
            "slurmstepd: error: *** STEP 4242.0 ON a100-03 CANCELLED AT 2025-06-01T08:00:01 DUE "
            "TO PREEMPTION ***",
            "slurmstepd: error: *** JOB 991 ON n1 CANCELLED AT 2025-01-01T00:00:00 DUE TO JOB "
            "REQUEUE ***",
            "slurmstepd: error: *** JOB 31337 ON node042 CANCELLED AT 2024-11-05T16:22:10 ***",
            "srun: error: *** STEP 812.0 CANCELLED AT 2019-07-01T10:00:00 DUE TO TIME LIMIT ***",
            "srun: error: gpu01: task 0: Terminated",
            "=>> PBS: job killed: walltime 7236 exceeded limit 7200",
            "PBS: job killed: walltime 50 exceeded limit 30",
            "TERM_RUNLIMIT: job killed after reaching LSF run time limit.",
            "TERM_OWNER: job killed by owner.",
            "Exited with signal termination: Terminated.",
        ],
    )
    def test_a_limit_or_cancel_is_a_stop(self, line: str) -> None:
        found = classify_failure_line(line)
        assert found is not None
        assert (found.outcome, found.row.effect) == (Outcome.STOPPED, Effect.ENDS)

    @pytest.mark.parametrize(
        ("line", "cause"),
        [
            (
                "slurmstepd: error: *** JOB 77 ON gpu3 CANCELLED AT 2025-02-02T02:02:02 DUE TO "
                "NODE FAILURE, SEE SLURMCTLD LOG FOR DETAILS ***",
                C.KILLED,
            ),
            ("srun: error: gpu-a-12: task 1: Killed", C.KILLED),
            ("srun: error: node3: tasks 0-3: Segmentation fault (core dumped)", C.KILLED),
            ("srun: error: node3: task 0: Out Of Memory", C.HOST_OOM),
            ("srun: error: node3: task 0: Exited with exit code 1", C.UNKNOWN),
            (
                "slurmstepd: error: Detected 1 oom_kill event in StepId=4242.batch. Some of the "
                "step tasks have been OOM Killed.",
                C.HOST_OOM,
            ),
            (
                "slurmstepd: error: Detected 2 oom-kill event(s) in step 4242.0 cgroup. Some of "
                "your processes may have been killed by the cgroup out-of-memory handler.",
                C.HOST_OOM,
            ),
            ("=>> PBS: job killed: mem 33554432kb exceeded limit 16777216kb", C.HOST_OOM),
            ("=>> PBS: job killed: vmem 40000000000b exceeded limit 34359738368b", C.HOST_OOM),
            ("TERM_MEMLIMIT: job killed after reaching LSF memory usage limit.", C.HOST_OOM),
            ("Exited with signal termination: Killed.", C.KILLED),
        ],
    )
    def test_a_node_failure_or_memory_limit_is_a_crash(self, line: str, cause: CrashCause) -> None:
        found = classify_failure_line(line)
        assert found is not None
        assert (found.cause, found.outcome, found.row.effect) == (
            cause,
            Outcome.CRASHED,
            Effect.ENDS,
        )

    @pytest.mark.parametrize(
        "line",
        [
            "slurmstepd: error: couldn't chdir to `/home/user': No such file or directory",
            "srun: Job step created",
            "INFO 05-01 10:00:00 [api_server.py:1] CANCELLED AT the user's request",
            "TERM_ something else",
        ],
    )
    def test_other_scheduler_lines_end_nothing(self, line: str) -> None:
        assert classify_failure_line(line) is None

    def test_time_limit_after_ready_is_a_stop(self) -> None:
        unit = _replay(
            [
                *self.READY,
                "slurmstepd: error: *** JOB 1234567 ON gpu-node-17 CANCELLED AT "
                "2026-05-01T12:00:00 DUE TO TIME LIMIT ***",
            ]
        )
        current = unit.current
        assert current is not None and current.outcome is Outcome.STOPPED
        assert current.furthest_phase is Phase.READY
        assert unit.last_crash is None

    def test_node_failure_after_ready_is_a_crash(self) -> None:
        line = (
            "slurmstepd: error: *** STEP 77.0 ON gpu3 CANCELLED AT 2026-05-01T12:00:00 DUE TO "
            "NODE FAILURE, SEE SLURMCTLD LOG FOR DETAILS ***"
        )
        unit = _replay([*self.READY, line])
        current = unit.current
        assert current is not None and current.outcome is Outcome.CRASHED
        assert current.crash is not None and current.crash.cause is C.KILLED
        assert current.crash.message == line


class TestTorchRankPrefix:
    """A rank's lines under torch's ``[rankN]:`` prefix read as the lines beneath (class B)."""

    READY = TestProcessManagersWord.READY

    def test_prefixed_ctrl_c_after_ready_is_a_stop(self) -> None:
        unit = _replay(
            [
                *self.READY,
                "[rank0]: Traceback (most recent call last):",
                '[rank0]:   File "/usr/lib/python3.12/asyncio/runners.py", line 118, in run',
                "[rank0]:     return self._loop.run_until_complete(task)",
                "[rank0]: KeyboardInterrupt",
                "ERROR 05-01 10:06:00 multiproc_worker_utils.py:120] Worker VllmWorkerProcess pid "
                "4243 died, exit code: -15",
                "INFO 05-01 10:06:00 multiproc_worker_utils.py:123] Killing local vLLM worker "
                "processes",
            ]
        )
        current = unit.current
        assert current is not None and current.outcome is Outcome.STOPPED
        assert current.furthest_phase is Phase.READY and unit.last_crash is None

    def test_prefixed_traceback_during_startup_is_the_crash(self) -> None:
        unit = _replay(
            [
                "INFO 05-01 10:00:00 [api_server.py:1043] vLLM API server version 0.6.1",
                "[rank0]: Traceback (most recent call last):",
                '[rank0]:   File "/usr/lib/python3/dist-packages/vllm/worker/worker.py", line 9, '
                "in load_model",
                "[rank0]:     self.model_runner.load_model()",
                "[rank0]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. "
                "GPU 0 has a total capacity of 79.10 GiB of which 1.2 GiB is free.",
            ]
        )
        current = unit.current
        assert current is not None and current.outcome is Outcome.CRASHED
        assert current.crash is not None and current.crash.cause is C.CUDA_OOM
        assert current.crash.exception == "torch.OutOfMemoryError"


class TestCrashReporterFrames:
    """A crash reporter's logged traceback seen only by its frames (fresh set class C).

    vLLM's crash reporters log a traceback with ``logger.exception`` when their process is
    dying; every line carries ``ERROR … [file:line]``. An excerpt (or a journal window) may hold
    only frames: the header (``EngineCore failed to start.``) before it and the exception after
    it cut off. During startup such frames are the crash (``markers.CRASH_REPORTERS``).
    """

    @staticmethod
    def _frames(prefix: str, header: str) -> list[str]:
        return [
            f'{prefix}{header}  File "/usr/lib/python3/dist-packages/vllm/v1/worker/'
            'gpu_worker.py", line 205, in determine_available_memory',
            f"{prefix}{header}    self.model_runner.profile_run()",
            f'{prefix}{header}  File "/usr/lib/python3/dist-packages/vllm/v1/worker/'
            'gpu_model_runner.py", line 1548, in _dummy_sampler_run',
        ]

    @pytest.mark.parametrize(
        ("prefix", "header"),
        [
            # V1 EngineCore (vllm/v1/engine/core.py run_engine_core), 0.8.5 and 0.10+ formats
            ("", "ERROR 05-10 16:00:15 [core.py:396]"),
            ("(EngineCore_DP0 pid=412) ", "ERROR 09-20 10:00:09 [core.py:708]"),
            # V1 WorkerProc (vllm/v1/executor/multiproc_executor.py)
            ("(VllmWorker rank=1 pid=88) ", "ERROR 05-10 16:00:15 [multiproc_executor.py:470]"),
            # V0 worker (vllm/executor/multiproc_worker_utils.py), the pre-0.8 header
            ("(VllmWorkerProcess pid=7) ", "ERROR 08-01 10:00:03 multiproc_worker_utils.py:226]"),
        ],
    )
    def test_frames_only_during_startup_are_a_crash(self, prefix: str, header: str) -> None:
        unit = _replay(
            [
                "INFO 05-10 16:00:00 [api_server.py:1043] vLLM API server version 0.8.5",
                *self._frames(prefix, header + " "),
            ]
        )
        current = unit.current
        assert current is not None and current.outcome is Outcome.CRASHED

    def test_another_files_logged_frames_are_not(self) -> None:
        unit = _replay(
            [
                "INFO 05-10 16:00:00 [api_server.py:1043] vLLM API server version 0.8.5",
                *self._frames("", "ERROR 05-10 16:00:15 [serving_chat.py:200] "),
            ]
        )
        assert unit.current is not None and unit.current.outcome is not Outcome.CRASHED

    def test_after_ready_a_reporter_file_may_log_a_handled_error(self) -> None:
        # core.py also logs a failed utility call (``Invocation of %s method failed``) with
        # logger.exception and serves on: after ready, frames alone are no crash.
        unit = _replay(
            [
                *TestProcessManagersWord.READY,
                *self._frames("(EngineCore_DP0 pid=412) ", "ERROR 05-01 10:06:00 [core.py:780] "),
            ]
        )
        assert unit.current is not None and unit.current.outcome is Outcome.READY

    @pytest.mark.parametrize("row", CRASH_REPORTERS, ids=[row.file for row in CRASH_REPORTERS])
    def test_each_example_names_its_own_reporter(self, row: CrashReporter) -> None:
        parsed = parse_line(row.example)
        assert parsed.level == "ERROR" and parsed.body.startswith('  File "')
        assert crash_reporter(parsed.source) is row
        assert row.path.startswith("vllm/") and row.versions and re.compile(row.fatal)

    def test_a_handled_utility_call_is_not_a_crash_report(self) -> None:
        (core,) = (row for row in CRASH_REPORTERS if row.file == "core.py")
        assert core.survives("Invocation of sleep method failed")
        assert not core.survives("EngineCore failed to start.")
        assert not core.survives(None)


class TestConfigValidationInAnotherLoggersLine:
    """pydantic's title of a vLLM config's ValidationError, stated by a caller's own log line
    (class 4). The pydantic lines are vllm-project/vllm#26161's (vLLM 0.10.2, ModelConfig);
    the caller's line is the shape a serving wrapper's ``logger.error(f"…: {e}")`` gives, in
    Python logging's default format."""

    STATED = "ERROR:root:Failed to build the engine: 1 validation error for ModelConfig"
    PYDANTIC = (
        "  Value error, Expecting value: line 1 column 1 (char 0) [type=value_error, "
        "input_value=ArgsKwargs((), {'model': ...rocessor_plugin': None}), input_type=ArgsKwargs]",
        "    For further information visit https://errors.pydantic.dev/2.12/v/value_error",
    )
    CALLER = (
        "Traceback (most recent call last):",
        '  File "/app/handler.py", line 12, in <module>',
        "    engine = build_engine()",
        '  File "/app/engine.py", line 40, in build_engine',
        "    raise e",
    )

    def test_the_line_is_read_as_a_config_error(self) -> None:
        found = classify_failure_line(self.STATED)
        assert found is not None and found.row.name == "config_validation_summary"
        assert found.cause is CrashCause.CONFIG_ERROR and found.row.survivable

    def test_a_request_models_validation_error_is_not(self) -> None:
        """A request schema's title (``… for ChatCompletionRequest``) is no config's."""
        assert classify_failure_line("1 validation error for ChatCompletionRequest") is None

    def test_the_start_that_ends_in_the_callers_raise_is_a_config_error(self) -> None:
        unit = _replay([self.STATED, *self.PYDANTIC, *self.CALLER])
        current = unit.incarnations[-1]
        assert current.outcome is Outcome.CRASHED
        assert current.crash is not None and current.crash.cause is CrashCause.CONFIG_ERROR

    def test_a_line_the_process_outlives_is_noise(self) -> None:
        """The caller logged it and went on (a retry with other arguments): vLLM's progress
        after it means it ended nothing (``CrashBook.survived``); the later crash is not
        blamed on it."""
        unit = _replay(
            [
                self.STATED,
                *self.PYDANTIC,
                "INFO 10-03 10:00:05 [api_server.py:1] vLLM API server version 0.10.2",
                "INFO 10-03 10:00:06 [gpu_model_runner.py:1] Starting to load model m...",
                "INFO 10-03 10:00:09 [gpu_model_runner.py:1] Model loading took 3.3 GiB and "
                "2.1 seconds",
                "Traceback (most recent call last):",
                '  File "/usr/lib/python3/dist-packages/vllm/worker/worker.py", line 9, in '
                "determine_available_memory",
                "    self.model_runner.profile_run()",
                "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB.",
            ]
        )
        current = unit.incarnations[-1]
        assert current.crash is not None and current.crash.cause is CrashCause.CUDA_OOM
