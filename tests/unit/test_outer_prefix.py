"""An outer prefix nobody put in a table, inferred from the input (issue 19, mechanism 4).

A CI console's gutter (Buildkite's `  | [2025-03-10T15:07:20Z] `, as pasted in
vllm-project/vllm#14574: "V1 Test Failed due to "No available memory for the cache blocks""),
a box-drawing gutter, a `kubectl logs --prefix` tag: a prefix that (nearly) every line shares
in front of what then parses as vLLM's lines is a wrapper, whatever its vendor.
"""

from __future__ import annotations

import pytest

from vllm_sentinel.engine.catalog.causes import CrashCause
from vllm_sentinel.engine.catalog.phases import Outcome, Phase
from vllm_sentinel.engine.decode.text_log import TextLogDecoder
from vllm_sentinel.replay import replay

_SITE = "/usr/local/lib/python3.12/dist-packages/vllm"
_CORE = "ERROR 03-10 08:07:20 [core.py:302] "
# vLLM 0.7.x (V1) as #14574 shows it: model loaded, then the engine core's logged traceback
_BODY = [
    "INFO 03-10 08:07:14 [gpu_model_runner.py:1040] Starting to load model facebook/opt-125m...",
    "INFO 03-10 08:07:20 [gpu_model_runner.py:1067] Model loading took 0.2389 GB and "
    "0.977005 seconds",
    f"{_CORE}EngineCore hit an exception: Traceback (most recent call last):",
    f'{_CORE}  File "{_SITE}/v1/engine/core.py", line 294, in run_engine_core',
    f"{_CORE}    engine_core = EngineCoreProc(*args, **kwargs)",
    f'{_CORE}  File "{_SITE}/v1/engine/core.py", line 249, in __init__',
    f"{_CORE}    super().__init__(vllm_config, executor_class, log_stats)",
    f'{_CORE}  File "{_SITE}/v1/engine/core.py", line 62, in __init__',
    f"{_CORE}    num_gpu_blocks, num_cpu_blocks = self._initialize_kv_caches(vllm_config)",
    f'{_CORE}  File "{_SITE}/v1/core/kv_cache_utils.py", line 453, in check_enough_kv_cache_memory',
    f'{_CORE}    raise ValueError("No available memory for the cache blocks. "',
    f"{_CORE}ValueError: No available memory for the cache blocks. Try increasing "
    "`gpu_memory_utilization` when initializing the engine.",
]


def _stamp(line: str) -> str:
    clock = line.split(" ")[2]  # HH:MM:SS of vLLM's header
    return f"[2025-03-10T{clock.replace('08:', '15:', 1)}Z] {line}"


GUTTERS = {
    "buildkite": lambda line: f"  | {_stamp(line)}",
    "box-drawing": lambda line: f"│ {line}",
    "kubectl-prefix": lambda line: f"[pod/vllm-7d9f8/vllm] {line}",
    "stamped": _stamp,
}


@pytest.mark.parametrize("name", sorted(GUTTERS))
def test_the_gutter_hides_no_crash(name: str) -> None:
    """Behind each gutter shape the crash and its cause are found."""
    lines = [GUTTERS[name](line) for line in _BODY]
    (unit,) = replay([["\n".join(lines).encode() + b"\n"]]).units
    item = unit.incarnations[-1]
    assert item.outcome is Outcome.CRASHED
    assert item.crash is not None
    assert item.crash.cause is CrashCause.KV_CACHE_INSUFFICIENT
    assert item.crash.exception == "ValueError"
    assert item.furthest_phase is Phase.PROFILING_KV_CACHE  # _initialize_kv_caches' frames


def test_the_repair_is_counted() -> None:
    """The decoder says it stripped an inferred prefix (replay reports repairs)."""
    decoder = TextLogDecoder()
    lines = [GUTTERS["buildkite"](line) for line in _BODY]
    records = decoder.feed("\n".join(lines).encode() + b"\n") + decoder.flush()
    assert records[0].message.startswith("INFO 03-10 08:07:14 [gpu_model_runner.py:1040]")
    assert decoder.repaired["outer_prefix"] == len(_BODY)


def test_prefixes_vllm_reads_itself_stay() -> None:
    """vLLM's process prefix and torch's `[rankN]:` are no gutter: lines keep them."""
    lines = [f"(EngineCore_DP0 pid=441) {line}" for line in _BODY]
    decoder = TextLogDecoder()
    records = decoder.feed("\n".join(lines).encode() + b"\n") + decoder.flush()
    assert [r.message[:25] for r in records[:3]] == ["(EngineCore_DP0 pid=441) "] * 3
    assert "outer_prefix" not in decoder.repaired
    ranked = [f"[rank0]: {line}" for line in _BODY]
    decoder = TextLogDecoder()
    records = decoder.feed("\n".join(ranked).encode() + b"\n") + decoder.flush()
    assert [r.message[:9] for r in records[:3]] == ["[rank0]: "] * 3
    assert "outer_prefix" not in decoder.repaired


def test_a_prefix_few_lines_share_is_kept() -> None:
    """Below nine lines in ten, a shared prefix is text, not a wrapper."""
    lines = [f"│ {line}" if index % 3 else line for index, line in enumerate(_BODY)]
    decoder = TextLogDecoder()
    decoder.feed("\n".join(lines).encode() + b"\n")
    decoder.flush()
    assert "outer_prefix" not in decoder.repaired


# vllm-project/vllm-omni#1029 (turn 5, a Buildkite console in a CI-failure thread): two
# consecutive lines behind its gutter and the omni stage's tag, `  | [Stage-1] `, which no
# wrapper row knows; the whole of a short paste.
_GUTTER = "  | [Stage-1] "
_STAGED = [
    f"{_GUTTER}ERROR 01-29 19:03:10 [async_llm.py:546] vllm.v1.engine.exceptions.EngineDeadError: "
    "EngineCore encountered an issue. See stack trace (above) for the root cause.",
    f"{_GUTTER}ERROR 01-29 19:03:10 [omni_stage.py:1400] Failed on request "
    "chatcmpl-869f7757a6a736c7: EngineCore encountered an issue. See stack trace (above) for the "
    "root cause.",
]


class TestShortInputs:
    """One or two lines: the prefix is taken only on total evidence."""

    def test_two_lines_behind_one_prefix(self) -> None:
        """Both lines share the gutter and both parse as vLLM's without it: stripped."""
        decoder = TextLogDecoder()
        records = decoder.feed("\n".join(_STAGED).encode() + b"\n") + decoder.flush()
        assert [r.message for r in records] == [line[len(_GUTTER) :] for line in _STAGED]
        assert decoder.repaired["outer_prefix"] == 2

    def test_one_line_behind_the_prefix(self) -> None:
        decoder = TextLogDecoder()
        records = decoder.feed(_STAGED[1].encode()) + decoder.flush()
        assert [r.message for r in records] == [_STAGED[1][len(_GUTTER) :]]

    def test_two_lines_where_one_gains_nothing_are_kept(self) -> None:
        """The second line behind the same gutter is raw text with or without it (the
        console's source line, its vLLM header gone): the evidence is not total, nothing is
        stripped (a longer input is read under the nine-in-ten rule)."""
        source = f"{_GUTTER}    outputs = await engine_core.get_output_async()"
        decoder = TextLogDecoder()
        records = decoder.feed(f"{_STAGED[0]}\n{source}\n".encode()) + decoder.flush()
        assert [r.message for r in records] == [_STAGED[0], source]
        assert "outer_prefix" not in decoder.repaired

    def test_two_lines_whose_shared_text_vllm_reads_stay(self) -> None:
        """Two lines sharing torch's `[rank0]: ` (test_failure_lines' rank lines): vLLM's
        parser reads that prefix itself, so nothing is gained and the rank stays."""
        ranked = [
            "[rank0]: Traceback (most recent call last):",
            "[rank0]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB.",
        ]
        decoder = TextLogDecoder()
        records = decoder.feed("\n".join(ranked).encode() + b"\n") + decoder.flush()
        assert [r.message for r in records] == ranked
        assert "outer_prefix" not in decoder.repaired
