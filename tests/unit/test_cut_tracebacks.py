"""A traceback cut before its exception line is classified by its innermost frames.

A paste, a search index or a dying process's crash reporter often ends a traceback in its
frames. The innermost ones still name the failure: a ``raise X("…`` source line whose words a
catalog template has, a raise site whose catalog rows all mean one cause, or where it was
raised (``FRAME_RULES``). Such evidence ranks below a real exception line, above wrappers.
Every line here is real, from the threads each test names (none is in tests/golden/fresh2).
"""

from __future__ import annotations

from vllm_sentinel.engine.catalog.causes import CrashCause, EvidenceKind, classify_frames
from vllm_sentinel.engine.catalog.phases import Phase
from vllm_sentinel.engine.snapshot import UnitSnapshot
from vllm_sentinel.engine.tracebacks import CutTraceback, TracebackAssembler
from vllm_sentinel.replay import replay


def _replay(lines: list[str]) -> UnitSnapshot:
    (unit,) = replay([["\n".join(lines).encode() + b"\n"]]).units
    return unit


# vllm-project/vllm#27508, turn 2 (vLLM 0.11, raw EngineCore stderr): the raise's message is
# on the lines after ``raise ValueError(``; here cut before ``ValueError: To serve …``
_P = "(EngineCore_DP0 pid=6880) "
_CONDA = "/opt/conda/envs/vllm_env/lib/python3.13/site-packages"
_KV_CUT = [
    f"{_P}Traceback (most recent call last):",
    f'{_P}  File "{_CONDA}/vllm/v1/core/kv_cache_utils.py", line 1243, in get_kv_cache_configs',
    f"{_P}    check_enough_kv_cache_memory(vllm_config, kv_cache_spec_one_worker,",
    f"{_P}    ~~~~~~~~~~~~~~~~~~~~~~~~~~~~^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^",
    f"{_P}                                 available_memory_one_worker)",
    f"{_P}                                 ^^^^^^^^^^^^^^^^^^^^^^^^^^^^",
    f'{_P}  File "{_CONDA}/vllm/v1/core/kv_cache_utils.py", line 716, in '
    "check_enough_kv_cache_memory",
    f"{_P}    raise ValueError(",
    f"{_P}    ...<6 lines>...",
]

# THUDM/slime#1314 (FlashInfer 0.5.3's JIT under SGLang, Ray's prefix): cut after the frames
_RAY = "(SGLangEngine pid=23902) "
_MAMBA = "/usr/local/app/micromamba/envs/slime/lib/python3.12"
_NINJA_FRAMES = (
    f'  File "{_MAMBA}/site-packages/flashinfer/jit/cpp_ext.py", line 299, in run_ninja',
    f'  File "{_MAMBA}/subprocess.py", line 571, in run',
)

# vllm-project/vllm#36077's title and vllm-project/vllm#27508: a literal in the raise
_KV_FRAME = (
    '  File "/opt/venv/lib/python3.12/site-packages/vllm/v1/core/kv_cache_utils.py", line 699, '
    "in check_enough_kv_cache_memory"
)


class TestClassifyFrames:
    def test_a_raise_literal_matching_a_template_names_its_cause(self) -> None:
        """(a) ``raise ValueError("No available memory for the cache blocks. "`` → the row."""
        cause, exception, message = classify_frames(
            (_KV_FRAME,), 'raise ValueError("No available memory for the cache blocks. "'
        )
        assert (cause, exception) == (CrashCause.KV_CACHE_INSUFFICIENT, "ValueError")
        assert message == "No available memory for the cache blocks."

    def test_an_f_string_literal_is_read_up_to_its_first_value(self) -> None:
        cause, _, message = classify_frames(
            (_KV_FRAME,),
            "raise ValueError(f\"To serve at least one request with the models's max seq "
            'len ({max_model_len}), "',
        )
        assert cause is CrashCause.KV_CACHE_INSUFFICIENT
        assert message == "To serve at least one request with the models's max seq len ("

    def test_a_raise_without_a_literal_takes_its_site_and_class(self) -> None:
        """(a') ``raise ValueError(`` at a site where every ValueError means one cause."""
        frame = _KV_CUT[6][len(_P) :]
        cause, exception, _ = classify_frames((frame,), "raise ValueError(")
        assert (cause, exception) == (CrashCause.KV_CACHE_INSUFFICIENT, "ValueError")

    def test_frame_rules_read_the_frames_innermost_first(self) -> None:
        """(c) subprocess.py names nothing; FlashInfer's JIT frame under it does."""
        cause = classify_frames(_NINJA_FRAMES, "raise CalledProcessError(retcode, process.args,")
        assert cause == (CrashCause.JIT_BUILD_ERROR, "", "")

    def test_frames_that_name_nothing_stay_unknown(self) -> None:
        frame = f'  File "{_CONDA}/torch/nn/modules/module.py", line 1762, in _call_impl'
        cause = classify_frames((frame,), "return forward_call(*args, **kwargs)")
        assert cause == (CrashCause.UNKNOWN, "", "")


class TestAssembler:
    def test_the_open_traceback_keeps_its_innermost_frames_and_source(self) -> None:
        assembler = TracebackAssembler()
        for line in _KV_CUT:
            assembler.feed(6880, line[len(_P) :], None, False)
        cut = assembler.cut(6880)
        assert cut == CutTraceback(
            (_KV_CUT[1][len(_P) :], _KV_CUT[6][len(_P) :]),
            "raise ValueError(",
            Phase.PROFILING_KV_CACHE,
        )

    def test_an_exception_line_closes_it(self) -> None:
        assembler = TracebackAssembler()
        for line in _KV_CUT:
            assembler.feed(6880, line[len(_P) :], None, False)
        assembler.feed(6880, "ValueError: To serve at least one request", None, False)
        assert assembler.cut(6880) is None


class TestTracker:
    def test_a_cut_traceback_names_the_cause(self) -> None:
        crash = _replay(_KV_CUT).incarnations[-1].crash
        assert crash is not None
        assert crash.cause is CrashCause.KV_CACHE_INSUFFICIENT
        assert crash.exception == "ValueError"
        assert "traceback cut before its exception line" in crash.message

    def test_its_frames_name_the_phase(self) -> None:
        """``get_kv_cache_configs`` → ``check_enough_kv_cache_memory``: sizing the KV cache."""
        crash = _replay(_KV_CUT).incarnations[-1].crash
        assert crash is not None
        assert crash.phase is Phase.PROFILING_KV_CACHE

    def test_frames_of_a_stop_name_no_phase_and_no_cause(self) -> None:
        """The same frames ended by ``KeyboardInterrupt`` (Ctrl-C during startup): a stop;
        the frames' phase and cause were only provisional."""
        unit = _replay([*_KV_CUT, f"{_P}KeyboardInterrupt"])
        incarnation = unit.incarnations[-1]
        assert incarnation.crash is None
        assert incarnation.furthest_phase is not Phase.PROFILING_KV_CACHE

    def test_the_exception_line_replaces_the_frames(self) -> None:
        """vllm-project/vllm#27508 turn 2 as printed: its real exception line is the cause."""
        line = (
            f"{_P}ValueError: To serve at least one request with the models's max seq len "
            "(131072), (4.54 GiB KV cache is needed, which is larger than the available KV cache "
            "memory (1.71 GiB)."
        )
        crash = _replay([*_KV_CUT, line]).incarnations[-1].crash
        assert crash is not None
        assert crash.cause is CrashCause.KV_CACHE_INSUFFICIENT
        assert crash.message.startswith("To serve at least one request")

    def test_frames_rank_below_a_real_exception_and_above_wrappers(self) -> None:
        assert EvidenceKind.REAL < EvidenceKind.FRAMES < EvidenceKind.WRAPPER

    def test_caret_marks_before_the_frames_are_no_exception_message(self) -> None:
        """A paste that starts on a frame's ``^^^^`` marks (vllm-project/vllm#30905's shape,
        the flashinfer-ai/flashinfer#2252 report's first line): the marks are not the logged
        exception's message; the frames under them name the cause."""
        core = "(EngineCore_DP0 pid=9526) ERROR 12-20 20:13:01 [core.py:868] "
        site = "/home/spark/.vllm/lib/python3.12/site-packages"
        crash = (
            _replay(
                [
                    f"{core}                      ^^^^^^^^^^^^^^",
                    f'{core}  File "{site}/flashinfer/jit/core.py", line 1, in build_and_load',
                    f"{core}    self.build(verbose)",
                ]
            )
            .incarnations[-1]
            .crash
        )
        assert crash is not None
        assert crash.cause is CrashCause.JIT_BUILD_ERROR


# LMCache/LMCache#2306, turn 8 (vLLM with LMCache, while serving): the engine core's own raw
# traceback begins, cut by the index after its entry frame. Before it here: a server that is
# up and answering (its startup line, uvicorn's, an access line of vllm-project/vllm#11721),
# and not the API server's EngineDeadError of that thread, which says the death by itself.
_API = "(APIServer pid=697224) "
_CORE = "(EngineCore_DP0 pid=697344) "
_SERVING = [
    f"{_API}INFO 01-08 17:10:00 [api_server.py:1] vLLM API server version 0.13.0",
    f"{_API}INFO:     Application startup complete.",
    f'{_API}INFO:     127.0.0.1:40178 - "GET /v1/models HTTP/1.1" 200 OK',
]
_CORE_CUT = [
    f"{_CORE}Traceback (most recent call last):",
    f'{_CORE}  File "/usr/lib/python3.12/multiprocessing/process.py", line 314, in _bootstrap',
    f"{_CORE}    self.run()",
]


class TestCutAfterReady:
    """A cut traceback after ready: a process's death only when uncaught through its entry."""

    def test_an_uncaught_engine_core_traceback_cut_while_serving_is_a_crash(self) -> None:
        from vllm_sentinel.engine.catalog.phases import Outcome

        current = _replay([*_SERVING, *_CORE_CUT]).incarnations[-1]
        assert current.furthest_phase is Phase.READY
        assert current.outcome is Outcome.CRASHED

    def test_the_entry_frame_is_kept_in_the_cut(self) -> None:
        assembler = TracebackAssembler()
        for line in _CORE_CUT:
            assembler.feed(1, line.removeprefix(_CORE), None, False)
        cut = assembler.cut(1)
        assert cut is not None and cut.entry

    def test_a_logged_traceback_while_serving_stays_a_request_error(self) -> None:
        """The same frames logged through vLLM's logger (handled, ERROR header) are no death:
        the server answers on."""
        from vllm_sentinel.engine.catalog.phases import Outcome

        logged = [
            f"{_API}ERROR 01-08 17:16:15 [serving_chat.py:1278] Traceback (most recent call last):",
            f'{_API}ERROR 01-08 17:16:15 [serving_chat.py:1278]   File "/usr/lib/python3.12/'
            'multiprocessing/process.py", line 314, in _bootstrap',
            f'{_API}INFO:     127.0.0.1:40178 - "GET /v1/models HTTP/1.1" 200 OK',
        ]
        current = _replay([*_SERVING[:2], *logged]).incarnations[-1]
        assert current.outcome is not Outcome.CRASHED

    def test_a_raw_traceback_without_an_entry_frame_is_no_death(self) -> None:
        """A raw traceback cut in a library's frames (no process entry in view) after ready
        says nothing about a process's end."""
        from vllm_sentinel.engine.catalog.phases import Outcome

        raw = [
            "Traceback (most recent call last):",
            '  File "/usr/local/lib/python3.12/dist-packages/vllm/v1/engine/output_processor.py", '
            "line 70, in get",
            "    raise output",
        ]
        current = _replay([*_SERVING[:2], *raw]).incarnations[-1]
        assert current.outcome is not Outcome.CRASHED
