"""Crash cause classification and the root-cause choice."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from vllm_sentinel.engine.catalog.causes import (
    BenignMatcher,
    CrashCause,
    Evidence,
    EvidenceKind,
    choose_root_cause,
    classify_exception,
    is_request_error,
)

C = CrashCause


@pytest.mark.parametrize(
    ("exception", "message", "cause", "kind"),
    [
        (
            "torch.OutOfMemoryError",
            "CUDA out of memory. Tried to allocate 60.00 MiB.",
            C.CUDA_OOM,
            EvidenceKind.REAL,
        ),
        (
            "ValueError",
            "No available memory for the cache blocks. Try increasing `gpu_memory_utilization`",
            C.KV_CACHE_INSUFFICIENT,
            EvidenceKind.REAL,
        ),
        (
            "ValueError",
            "The model's max seq len (4096) is larger than the maximum number of tokens that can be stored in KV cache (3664).",
            C.KV_CACHE_INSUFFICIENT,
            EvidenceKind.REAL,
        ),
        (
            "ValueError",
            "Free memory on device (3.22/4.0 GiB) on startup is less than desired GPU memory utilization (0.9, 3.6 GiB).",
            C.GPU_MEMORY_IN_USE,
            EvidenceKind.REAL,
        ),
        (
            "RuntimeError",
            "NCCL error: unhandled system error (run with NCCL_DEBUG=INFO for details)",
            C.NCCL_ERROR,
            EvidenceKind.REAL,
        ),
        (
            "RuntimeError",
            "CUDA error: an illegal memory access was encountered",
            C.CUDA_ILLEGAL_MEMORY_ACCESS,
            EvidenceKind.REAL,
        ),
        (
            "RuntimeError",
            "CUDA error: device-side assert triggered",
            C.CUDA_ERROR,
            EvidenceKind.REAL,
        ),
        ("RuntimeError", "Failed to infer device type", C.NO_GPU, EvidenceKind.REAL),
        (
            "RuntimeError",
            "Found no NVIDIA driver on your system.",
            C.DRIVER_ERROR,
            EvidenceKind.REAL,
        ),
        (
            "RuntimeError",
            "flashinfer-cubin version (0.6.3) does not match flashinfer version (0.6.4).",
            C.DEPENDENCY_MISMATCH,
            EvidenceKind.REAL,
        ),
        (
            "ImportError",
            "/x/_C.abi3.so: undefined symbol: _ZN3c104cuda9SetDevice",
            C.DEPENDENCY_MISMATCH,
            EvidenceKind.REAL,
        ),
        ("ModuleNotFoundError", "No module named 'flash_attn'", C.IMPORT_ERROR, EvidenceKind.REAL),
        (
            "ValueError",
            "Invalid repository ID or local directory specified: '/models'.",
            C.MODEL_NOT_FOUND,
            EvidenceKind.REAL,
        ),
        (
            "ValueError",
            "Model architectures ['FooForCausalLM'] are not supported for now.",
            C.UNSUPPORTED_MODEL,
            EvidenceKind.REAL,
        ),
        (
            "pydantic_core._pydantic_core.ValidationError",
            "1 validation error for ModelConfig",
            C.CONFIG_ERROR,
            EvidenceKind.REAL,
        ),
        ("OSError", "[Errno 98] Address already in use", C.PORT_IN_USE, EvidenceKind.REAL),
        (
            "torch._inductor.exc.InductorError",
            "CompilationError: at 1:0",
            C.COMPILE_ERROR,
            EvidenceKind.REAL,
        ),
        (
            "subprocess.CalledProcessError",
            "Command '['ninja', '-v']' returned non-zero exit status 1.",
            C.JIT_BUILD_ERROR,
            EvidenceKind.REAL,
        ),
        (
            "TimeoutError",
            "Timed out waiting for engine core processes to start.",
            C.TIMEOUT,
            EvidenceKind.REAL,
        ),
        (
            "Exception",
            "WorkerProc initialization failed due to an exception in a background process.",
            C.WORKER_DIED,
            EvidenceKind.WRAPPER,
        ),
        (
            "RuntimeError",
            "Engine core initialization failed. See root cause above. Failed core proc(s): {}",
            C.UNKNOWN,
            EvidenceKind.WRAPPER,
        ),
        (
            "zmq.error.ZMQError",
            "Operation cannot be accomplished in current state",
            C.UNKNOWN,
            EvidenceKind.NOISE,
        ),
        ("KeyError", "'lm_head.weight'", C.UNKNOWN, EvidenceKind.REAL),
    ],
)
def test_classify(exception: str, message: str, cause: CrashCause, kind: EvidenceKind) -> None:
    """Each exception maps to its bounded cause and its directness."""
    assert classify_exception(exception, message) == (cause, kind)


def _evidence(cause: CrashCause, kind: EvidenceKind, second: int, seq: int) -> Evidence:
    return Evidence(
        cause, kind, "E", "m", datetime(2026, 1, 1, tzinfo=UTC) + timedelta(seconds=second), seq
    )


class TestRootCause:
    """The first real exception wins; wrappers and noise only when alone."""

    def test_real_beats_earlier_wrapper(self) -> None:
        """'see root cause above' never wins over the cause it points at."""
        chosen = choose_root_cause(
            [
                _evidence(C.WORKER_DIED, EvidenceKind.WRAPPER, 0, 1),
                _evidence(C.CUDA_ERROR, EvidenceKind.REAL, 5, 2),
                _evidence(C.UNKNOWN, EvidenceKind.NOISE, 6, 3),
            ]
        )
        assert chosen is not None and chosen.cause is C.CUDA_ERROR

    def test_earliest_real_wins_even_if_it_arrives_late(self) -> None:
        """Log time decides, not arrival: late-delivered lines keep their place."""
        chosen = choose_root_cause(
            [
                _evidence(C.UNSUPPORTED_MODEL, EvidenceKind.REAL, 10, 1),
                _evidence(C.IMPORT_ERROR, EvidenceKind.REAL, 3, 2),
            ]
        )
        assert chosen is not None and chosen.cause is C.IMPORT_ERROR

    def test_wrapper_alone_is_reported(self) -> None:
        """With nothing else, the wrapper is the best the log says."""
        chosen = choose_root_cause([_evidence(C.WORKER_DIED, EvidenceKind.WRAPPER, 0, 1)])
        assert chosen is not None and chosen.cause is C.WORKER_DIED


class TestNoise:
    """Benign lines and request errors."""

    def test_sparse_matrix_import_is_benign(self) -> None:
        """The Blackwell SM120 triton_kernels ERROR is benign by default."""
        line = (
            "Failed to import Triton kernels. Please make sure your triton version is compatible. "
            "Error: cannot import name 'SparseMatrix' from 'triton_kernels.tensor'"
        )
        assert BenignMatcher().matches(line)
        assert not BenignMatcher(()).matches(line)

    def test_request_errors(self) -> None:
        """A rejected request's traceback is never a crash cause."""
        assert is_request_error("vllm.exceptions.VLLMValidationError", "too long", None)
        assert is_request_error("ValueError", "x", "Error in preprocessing prompt inputs")
        assert not is_request_error("RuntimeError", "CUDA error", "EngineCore failed to start.")


def test_numpy_abi_message_after_an_empty_importerror_is_a_dependency_mismatch() -> None:
    """NumPy's ABI error (numpy/core/_multiarray_umath.py, 2.0.0–2.2.6) printed as
    ``ImportError: `` and then its message's lines (chipmuenk/pyfda#253,
    vllm-project/vllm#5594): the crash's cause is the mismatch, not an import error."""
    from tests.unit.test_tracebacks import NUMPY_TRACEBACK
    from vllm_sentinel.replay import replay

    (unit,) = replay([["\n".join(NUMPY_TRACEBACK).encode() + b"\n"]]).units
    crash = unit.incarnations[-1].crash
    assert crash is not None
    assert crash.cause is CrashCause.DEPENDENCY_MISMATCH
    assert crash.exception == "ImportError"
    assert crash.message.startswith("A module that was compiled using NumPy 1.x cannot be run in")
