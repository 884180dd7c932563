"""Crash causes: the bounded set, the classification table, and the root-cause choice (core).

An incarnation collects *evidence* while it runs: exception lines (from ``tracebacks``),
failure lines (from ``markers``) and systemd's verdicts (exit status, OOM kill). When it
crashes, the root cause is the **first real** piece of evidence: wrappers that only point
elsewhere (``Engine core initialization failed. See root cause above``), noise that follows a
real failure (``zmq.error.ZMQError``) and bare signals rank below any real exception, and among
equals the earliest wins (log time, then arrival). Request-level errors (a 400 for a too-long
prompt) and benign lines are never evidence.

The cause of one exception is, in this order: the **failure catalog**'s row for its message
(``failures``: every template vLLM 0.6–0.33 and its libraries raise, with the cause reviewed per
row, chosen by the raising frame where one text is raised in several places; a template that
ends with another message, ``CUDA driver error: {}``, takes that message's cause when it names
one), else the words (``CAUSE_RULES``), else where it was raised (``FRAME_RULES``), else
``unknown``.

All tables here are data: ``CAUSE_RULES`` (the words), ``FRAME_RULES`` (where it was raised),
``WRAPPER_PATTERNS``, ``NOISE_PATTERNS``, ``STOP_REQUEST_PATTERNS``,
``REQUEST_ERROR_PATTERNS``, ``DEFAULT_BENIGN_PATTERNS``.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime
from enum import IntEnum, StrEnum
from functools import lru_cache
from typing import Final

from vllm_sentinel.engine.catalog.failures import FailureCatalog, packaged_catalog, site_of

__all__ = [
    "CAUSE_RULES",
    "DEFAULT_BENIGN_PATTERNS",
    "FRAME_RULES",
    "NOISE_PATTERNS",
    "REQUEST_ERROR_PATTERNS",
    "STOP_REQUEST_PATTERNS",
    "WRAPPER_PATTERNS",
    "BenignMatcher",
    "CauseRule",
    "CrashCause",
    "Evidence",
    "EvidenceKind",
    "bare_raise_cause",
    "catalog_cause",
    "choose_root_cause",
    "classify_exception",
    "classify_frames",
    "is_engine_dead",
    "is_request_error",
    "is_stop_request",
]


class CrashCause(StrEnum):
    """Why an incarnation crashed: a bounded set, safe as a Prometheus label.

    ``PENDING`` is never counted: it is what ``last_crash_info`` says while a crash is not
    settled and nothing seen so far names a real failure (only a wrapper that points at a root
    cause elsewhere, a consequence, or a bare signal), so that a wrapper is never published as
    the cause.
    """

    CUDA_OOM = "cuda_oom"
    KV_CACHE_INSUFFICIENT = "kv_cache_insufficient"
    GPU_MEMORY_IN_USE = "gpu_memory_in_use"
    HOST_OOM = "host_oom"
    NCCL_ERROR = "nccl_error"
    CUDA_ILLEGAL_MEMORY_ACCESS = "cuda_illegal_memory_access"
    CUDA_ERROR = "cuda_error"
    NO_GPU = "no_gpu"
    DRIVER_ERROR = "driver_error"
    DEPENDENCY_MISMATCH = "dependency_mismatch"
    IMPORT_ERROR = "import_error"
    MODEL_NOT_FOUND = "model_not_found"
    UNSUPPORTED_MODEL = "unsupported_model"
    CONFIG_ERROR = "config_error"
    PORT_IN_USE = "port_in_use"
    COMPILE_ERROR = "compile_error"
    JIT_BUILD_ERROR = "jit_build_error"
    WORKER_DIED = "worker_died"
    KILLED = "killed"
    TIMEOUT = "timeout"
    UNKNOWN = "unknown"
    PENDING = "pending"  # crashed, root cause not settled yet (only wrappers or signals so far)


class EvidenceKind(IntEnum):
    """How much a piece of evidence says about the root cause; lower ranks first."""

    REAL = 0  # the failure itself
    FRAMES = 1  # a traceback cut before its exception line: its innermost frames name it
    WRAPPER = 2  # a message that points at an earlier failure
    NOISE = 3  # what breaks after a failure (sockets, queues)
    SIGNAL = 4  # only an exit status or a signal


@dataclass(frozen=True, slots=True)
class Evidence:
    """One reason an incarnation may have crashed.

    Attributes:
        cause: the classified cause.
        kind: how direct the evidence is.
        exception: the exception class (``RuntimeError``), or ``""`` for a log line.
        message: the exception message or the log line, bounded.
        at: log time (UTC) of the line, if known.
        seq: arrival order within the tracker, to break ties.
        pid: the process whose line it is (``None``: unknown, or not a process's line).
        survivable: a process's own line (an exception, an ERROR line): when that process
            makes progress after it, it did not end the process (``CrashBook.survived``).
    """

    cause: CrashCause
    kind: EvidenceKind
    exception: str
    message: str
    at: datetime | None
    seq: int
    pid: int | None = None
    survivable: bool = False


@dataclass(frozen=True, slots=True)
class CauseRule:
    """A row of the classification table: ``pattern`` searched in ``"Class: message"``."""

    cause: CrashCause
    pattern: str
    note: str


_C: Final = CrashCause

CAUSE_RULES: tuple[CauseRule, ...] = (
    CauseRule(
        _C.KV_CACHE_INSUFFICIENT,
        r"No available memory for the cache blocks|larger than the available KV cache memory"
        r"|larger than the maximum number of tokens that can be stored in KV cache"
        r"|Insufficient (?:memory for )?KV cache",
        "vllm/v1/core/kv_cache_utils.py, vllm/worker/worker.py (0.4–0.33)",
    ),
    CauseRule(
        _C.GPU_MEMORY_IN_USE,
        r"Free memory on device.{0,80} on startup is less than desired GPU memory utilization"
        r"|Error in memory profiling\. Initial free memory",
        "vllm/v1/worker/gpu_worker.py (0.9.1–0.33)",
    ),
    CauseRule(
        _C.CUDA_OOM,
        # every accelerator's words for device memory exhausted (the vendor stays in the
        # message): CUDA/HIP/NPU/XPU/HPU/MPS, their runtime error names, XLA's on TPU
        r"(?:CUDA|HIP|NPU|XPU|HPU|MPS|GPU|[Dd]evice) out of memory|OutOfMemoryError"
        r"|out of memory occurred when warming up|not enough GPU memory|CUBLAS_STATUS_ALLOC_FAILED"
        r"|cudaErrorMemoryAllocation|hipErrorOutOfMemory|(?:Cuda|CUDA|HIP) failure(?: \d+)? 'out "
        r"of memory'|^out of memory$|CUDA error: out of memory|HIP error: out of memory"
        r"|(?:UR|ZE|PI)_(?:RESULT_)?ERROR_OUT_OF_DEVICE_MEMORY|ACL_ERROR_RT_MEMORY_ALLOCATION"
        r"|RESOURCE_EXHAUSTED.{0,80}(?:[Oo]ut of memory|allocat)|Ran out of memory in memory "
        r"space (?:hbm|vmem)",
        "PyTorch caching allocators (CUDA, ROCm/HIP, torch_npu, XPU, HPU), CUDA/HIP runtime, "
        "NCCL, Level Zero/UR, CANN, XLA (TPU); vllm/v1/worker/gpu_model_runner.py",
    ),
    CauseRule(_C.CUDA_ILLEGAL_MEMORY_ACCESS, r"illegal memory access", "CUDA runtime"),
    CauseRule(
        _C.NCCL_ERROR,
        r"NCCL error|DistBackendError|ncclUnhandled|ncclInternalError|ncclSystemError"
        r"|ncclRemoteError|Watchdog caught collective operation timeout|NCCL communicator",
        "vllm/distributed/device_communicators/pynccl_wrapper.py, torch.distributed",
    ),
    CauseRule(
        _C.DRIVER_ERROR,
        # the accelerator's runtime cannot start: driver missing, too old or mismatched
        r"\b(?:Initialize|SetDevice|InitDevice)\w*:\S* NPU function error"
        r"|init runtime platform info failed|hipErrorNoBinaryForGpu|hipErrorInsufficientDriver"
        r"|Found no NVIDIA driver|NVIDIA driver on your system is too old"
        r"|CUDA driver version is insufficient|driver/library version mismatch"
        r"|cudaErrorInsufficientDriver|unsupported display driver|forward compatibility was "
        r"attempted|CUDA driver initialization failed|NVMLError|NVML_ERROR",
        "CUDA runtime, NVML; torch_npu device init (CANN), HIP runtime",
    ),
    CauseRule(
        _C.NO_GPU,
        r"Failed to infer device type|No CUDA GPUs are available|no CUDA-capable device"
        r"|Torch not compiled with CUDA enabled|device_count\(\) (?:== 0|returned 0)",
        "vllm/config.py DeviceConfig, torch.cuda",
    ),
    CauseRule(
        _C.CUDA_ERROR,
        # an accelerator runtime call failed (not memory, not a driver install problem)
        r"CUDA error|cudaError|CUBLAS_STATUS|CUDNN_STATUS|cuDNN error|device-side assert"
        r"|unspecified launch failure|misaligned address|illegal instruction"
        r"|status == cuda\w*Success|HIP error|hipError\w+|NPU function error"
        r"|level_zero backend failed|(?:UR|ZE)_RESULT_ERROR_\w+|FATAL ERROR :: MODULE:\w+"
        r"|synStatus \w+|HPU error",
        "CUDA runtime and kernels' checks (FlashInfer, vLLM csrc), HIP runtime, torch_npu "
        "(CANN), Intel Level Zero/UR (XPU), Habana PyTorch bridge (HPU)",
    ),
    CauseRule(
        _C.DEPENDENCY_MISMATCH,
        r"does not match flashinfer version|flashinfer-(?:cubin|jit-cache) version"
        r"|undefined symbol|version mismatch|compiled against (?:a different|an incompatible)"
        r"|requires \S+ (?:>=|==|<)[^,]* but (?:you have|found)",
        "flashinfer/jit/env.py; extension modules built for another torch",
    ),
    CauseRule(
        _C.DEPENDENCY_MISMATCH,
        r"compiled using NumPy 1\.x cannot be run|_ARRAY_API not found",
        "numpy/core/_multiarray_umath.py __getattr__ (numpy 2.0.0, 2.2.6 wheels read): an "
        "extension built against NumPy 1.x imported under 2.x; raise ImportError(msg), msg "
        "beginning with a newline (printed as `ImportError: ` then the message's lines)",
    ),
    CauseRule(
        _C.JIT_BUILD_ERROR,
        r"CalledProcessError: Command '\['ninja'|ninja: build stopped|Error building extension"
        r"|Ninja build failed|Could not find nvcc|nvcc: not found|CUDA_HOME environment variable "
        r"is not set|cuda_home=\S+ doesn't exist"
        r"|Ninja is required|JIT compil\w+ failed|Command '\['nvcc'|nvcc fatal",
        "flashinfer / torch.utils.cpp_extension JIT builds (a missing CUDA toolkit included)",
    ),
    CauseRule(
        _C.COMPILE_ERROR,
        r"InductorError|BackendCompilerFailed|torch\._dynamo\.exc|TorchRuntimeError"
        r"|CompilationError|LoweringException|cannot find -lcuda|collect2: error"
        r"|PassManager::run failed|LLVM ERROR|MLIRError|triton\.compiler\.errors",
        "torch.compile (dynamo, inductor), Triton's MLIR/LLVM compiler",
    ),
    CauseRule(
        _C.PORT_IN_USE,
        r"Errno 98|[Aa]ddress already in use",
        "uvicorn/server.py, vllm/entrypoints/launcher.py",
    ),
    CauseRule(
        _C.MODEL_NOT_FOUND,
        r"Invalid repository ID or local directory|RepositoryNotFoundError|GatedRepoError"
        r"|EntryNotFoundError|is not a local folder and is not a valid model identifier"
        r"|does not appear to have a file named|gated repo|HFValidationError"
        r"|401 Client Error|404 Client Error|No such file or directory: \S*config\.json",
        "huggingface_hub, vllm/transformers_utils/config.py",
    ),
    CauseRule(
        _C.UNSUPPORTED_MODEL,
        r"Model architectures .{0,200} (?:are not supported|failed to be inspected)"
        r"|Unrecognized model|does not recognize this architecture|not supported by vLLM",
        "vllm/model_executor/models/registry.py",
    ),
    CauseRule(
        _C.IMPORT_ERROR,
        r"^(?:\w+\.)*(?:ImportError|ModuleNotFoundError)\b|No module named",
        "Python import system",
    ),
    CauseRule(
        _C.TIMEOUT,
        r"^(?:\w+\.)*TimeoutError\b|Timed out waiting|timed out",
        "vllm/v1/engine/core_client.py (VLLM_ENGINE_READY_TIMEOUT_S)",
    ),
    CauseRule(
        _C.CONFIG_ERROR,
        r"ValidationError|Bfloat16 is only supported on GPUs|User-specified max_model_len"
        r"|(?:is not|must be) divisible by|unrecognized arguments|invalid choice"
        r"|Unknown quantization method|cannot be used (?:with|together)"
        r"|\b\d{1,4} validation errors? for [A-Z]\w{0,60}Config\b",
        "vllm/config/*.py, vllm/engine/arg_utils.py; pydantic-core's ValidationError title "
        "('N validation error(s) for <class>') of a vLLM config dataclass, quoted without its "
        "class by a caller's log line",
    ),
    CauseRule(
        _C.WORKER_DIED,
        r"WorkerProc initialization failed|died unexpectedly|ActorDiedError|RayActorError"
        r"|died with exit code",
        "vllm/v1/executor/multiproc_executor.py, vllm/v1/engine/core_client.py",
    ),
)

WRAPPER_PATTERNS: tuple[str, ...] = (
    # \b: without it, a search over a long word backtracks from every letter (quadratic)
    r"(?:Engine core|EngineCore|\b\w+) initialization failed\. See root cause above",
    r"Engine process failed to start",
    r"WorkerProc initialization failed",
    r"Worker failed with error",
    r"died unexpectedly",
    r"EngineDeadError|EngineCore encountered an issue|AsyncEngineDeadError"
    r"|Background loop (?:is not running|has errored)|MQEngineDeadError",
    r"died with exit code",
    r"^(?:\w+\.)*\w+: Executor failed\.?$|^Executor failed\.?$",
    # vLLM's advice logged right before it re-raises the OOM (gpu_model_runner.py 0.13+)
    r"^Failed to load model - not enough GPU memory",
)
"""Exceptions that only say "see above": a root cause only when nothing else was seen."""

NOISE_PATTERNS: tuple[str, ...] = (
    r"ZMQError|zmq\.error|ContextTerminated",
    r"^(?:\w+\.)*(?:BrokenPipeError|ConnectionResetError|ConnectionRefusedError|EOFError"
    r"|CancelledError|KeyboardInterrupt|SystemExit|ProcessLookupError)\b",
)
"""Exceptions that follow a failure (dead sockets, cancelled tasks)."""

ENGINE_DEAD_PATTERNS: tuple[str, ...] = (
    r"EngineDeadError|AsyncEngineDeadError|MQEngineDeadError|Background loop has errored",
)
"""Wrappers that say the engine behind a live API server is dead: the server answers 500s, but
the incarnation has crashed (vllm/v1/engine/exceptions.py, V0 async_llm_engine.py)."""

STOP_REQUEST_PATTERNS: tuple[str, ...] = (
    r"^(?:\w+\.)*KeyboardInterrupt\b",  # SIGINT (Ctrl-C), or asyncio's runner on SIGTERM
    r"^(?:\w+\.)*SystemExit(?:: (?:0|2|-?15|130|143))?$",  # sys.exit on a stop signal
)
"""Exceptions that say the process was asked to stop: a stop, not a crash, and no evidence."""

FRAME_RULES: tuple[CauseRule, ...] = (
    CauseRule(
        _C.CONFIG_ERROR,
        r'/vllm/config(?:/|\.py")|/vllm/engine/arg_utils\.py"|/vllm/entrypoints/openai/cli_args'
        r'\.py"|/vllm/[\w/]+\.py", line \d+, in (?:validate|verify|_validate|_verify)_\w+$',
        "vLLM's argument and config validation (vllm/config, engine/arg_utils.py, cli_args.py, "
        "validate_*/verify_* functions), 0.4–0.33",
    ),
    CauseRule(
        _C.JIT_BUILD_ERROR,
        r'/flashinfer/jit/|/torch/utils/cpp_extension\.py"|/deep_gemm/jit/|/tvm_ffi/',
        "JIT builds: FlashInfer, torch.utils.cpp_extension, DeepGEMM",
    ),
    CauseRule(
        _C.COMPILE_ERROR,
        r"/torch/_inductor/|/torch/_dynamo/|/triton/compiler/|/triton/backends/",
        "torch.compile (dynamo, inductor) and Triton's compiler",
    ),
)
"""Where an exception was raised (its innermost frame) names the cause when its words do not."""

REQUEST_ERROR_PATTERNS: tuple[str, ...] = (
    r"VLLMValidationError|RequestValidationError|HTTPException|BadRequestError",
    r"jinja2\.exceptions|TemplateError|ClientDisconnect",
    r"^Error in preprocessing prompt inputs|^Error in (?:chat )?completion stream generator"
    r"|^Exception in ASGI application|^Error with model",
)
"""Errors of one request while serving: logged with a traceback, never a crash."""

DEFAULT_BENIGN_PATTERNS: tuple[str, ...] = (
    # gpt_oss_triton_kernels_moe.py / fused_moe/config.py, vLLM 0.10.1.1–0.19 (ERROR at import
    # on Blackwell SM120 when triton_kernels lacks SparseMatrix); the Triton MoE path falls back.
    r"Failed to import Triton kernels\. Please make sure your triton version is compatible\.",
    r"^Using legacy triton_kernels on ROCm",
    # flashinfer 0.7.x downgrades a cubin/version mismatch to this warning.
    r"^Ignoring incompatible flashinfer-cubin package",
)
"""ERROR/WARNING lines known not to be fatal (``docs/markers.md`` §10)."""

_RULES: Final = tuple((rule.cause, re.compile(rule.pattern)) for rule in CAUSE_RULES)
_FRAME_RULES: Final = tuple((rule.cause, re.compile(rule.pattern)) for rule in FRAME_RULES)
_ENGINE_DEAD: Final = re.compile("|".join(f"(?:{p})" for p in ENGINE_DEAD_PATTERNS))
_STOP_REQUEST: Final = re.compile("|".join(f"(?:{p})" for p in STOP_REQUEST_PATTERNS))
_WRAPPER: Final = re.compile("|".join(f"(?:{p})" for p in WRAPPER_PATTERNS))
_NOISE: Final = re.compile("|".join(f"(?:{p})" for p in NOISE_PATTERNS))
_MEMO: Final = 512  # classifications remembered (messages are at most ~1,000 characters)
_REQUEST: Final = re.compile("|".join(f"(?:{p})" for p in REQUEST_ERROR_PATTERNS))
# an exception's message that begins with another exception's class ("OutOfMemoryError: HIP
# out of memory…" inside torch._inductor's InductorError)
_NESTED: Final = re.compile(r"((?:\w+\.){0,6}\w*(?:Error|Exception))(?:\(\w*\))?: (.+)", re.S)
_MAX_DEPTH: Final = 2
_LOCATION_DEFAULT: Final = "location:"  # a row's ``why`` when its cause is where it is raised


def catalog_cause(
    exception: str,
    message: str,
    frame: str | None = None,
    catalog: FailureCatalog | None = None,
) -> tuple[CrashCause, bool]:
    """The cause the failure catalog gives an exception, and whether it is only a default.

    Args:
        exception: the class as printed (``""`` for a log line).
        message: the message (or the line).
        frame: the innermost traceback frame, if known: it picks the row raised there, and
            names the cause of a message too cut to match when every row raised there means
            one cause.
        catalog: the compiled catalog (default ``failures.packaged_catalog()``).

    Returns:
        ``(cause, is_default)``: ``UNKNOWN`` when the catalog names none; ``is_default`` when
        the cause comes only from where the message is raised (a row's location default, or
        the raising frame), so that the message's own words, when they name a cause, win.
    """
    return _catalog_cause(exception, message, frame, catalog or packaged_catalog(), 0)


def _catalog_cause(
    exception: str, message: str, frame: str | None, catalog: FailureCatalog, depth: int
) -> tuple[CrashCause, bool]:
    site = site_of(frame) if frame else None
    found = catalog.match(message, exception, site)
    if found is not None:
        if found.tail and depth < _MAX_DEPTH:
            inner = _text_cause("", found.tail, catalog, depth + 1)
            if inner is not CrashCause.UNKNOWN:
                return inner, False  # "CUDA driver error: out of memory": the inner message
        return CrashCause(found.row.cause), found.row.why.startswith(_LOCATION_DEFAULT)
    nested = _NESTED.match(message)
    if nested is not None and depth < _MAX_DEPTH:
        inner = _text_cause(nested.group(1), nested.group(2), catalog, depth + 1)
        if inner is not CrashCause.UNKNOWN:
            return inner, False
    if exception:
        by_class = catalog.class_cause(exception)
        if by_class is not None:
            return CrashCause(by_class), False
    if site is not None and exception:
        at_site = catalog.cause_at(site, exception)
        if at_site is not None:
            return CrashCause(at_site), True
    return CrashCause.UNKNOWN, False


def bare_raise_cause(line: str, catalog: FailureCatalog | None = None) -> CrashCause | None:
    """The cause a bare line names when only a ``raise`` in vLLM prints its text, else ``None``.

    ``The model's max seq len (29000) is larger than the maximum number of tokens that can be
    stored in KV cache (23648). Try increasing …`` (a paste that lost ``ValueError:`` and the
    traceback) → ``kv_cache_insufficient``: the catalog's raise-only templates of known cause
    (``FailureCatalog.match_bare``), never a template a logger also prints.
    """
    found = (catalog or packaged_catalog()).match_bare(line)
    return None if found is None else CrashCause(found.row.cause)


def _text_cause(exception: str, message: str, catalog: FailureCatalog, depth: int) -> CrashCause:
    """A nested message's cause: the catalog's, else the words' (``CAUSE_RULES``)."""
    cause, is_default = _catalog_cause(exception, message, None, catalog, depth)
    if cause is not CrashCause.UNKNOWN and not is_default:
        return cause
    text = f"{exception}: {message}" if exception else message
    for candidate, pattern in _RULES:
        if pattern.search(text):
            return candidate
    return cause


@lru_cache(maxsize=_MEMO)
def classify_exception(
    exception: str, message: str, frame: str | None = None
) -> tuple[CrashCause, EvidenceKind]:
    """Classify an exception line into a cause and how direct it is.

    Args:
        exception: the class as printed (may be empty for plain failure lines).
        message: the message text.
        frame: the innermost traceback frame (``  File "…", line N, in func``), if known:
            where it was raised names the cause when its words do not (``FRAME_RULES``).

    The failure catalog's row decides first (``catalog_cause``), then ``CAUSE_RULES``, then
    ``FRAME_RULES``; a row whose cause is only its location's default yields to the words.

    Returns:
        ``(cause, kind)``; an exception that matches no rule is ``(UNKNOWN, REAL)``: a real
        failure of a kind the table does not know yet.

    Pure, so memoised (``_MEMO`` entries): a crash loop prints the same exception on every
    start, and each is matched against the catalog and every rule once.
    """
    text = f"{exception}: {message}" if exception else message
    cause, is_default = catalog_cause(exception, message, frame)
    if cause is CrashCause.UNKNOWN or is_default:
        for candidate, pattern in _RULES:
            if pattern.search(text):
                cause = candidate
                break
    if cause is CrashCause.UNKNOWN and frame:
        for candidate, pattern in _FRAME_RULES:
            if pattern.search(frame):
                cause = candidate
                break
    if _WRAPPER.search(text):
        return cause, EvidenceKind.WRAPPER
    if _NOISE.search(text):
        return cause, EvidenceKind.NOISE
    return cause, EvidenceKind.REAL


# the source line under a frame that raises: ``raise ValueError("No available memory … "``,
# ``raise RuntimeError(f"Failed to … {name}"`` (the literal's text up to its first value)
_RAISE_SOURCE: Final = re.compile(
    r"""raise (?P<cls>(?:[A-Za-z_]\w*\.){0,6}[A-Za-z_]\w*)\((?:\s*[fFrRbBuU]{0,2}"""
    r"""(?P<quote>["'])(?P<text>(?:(?!(?P=quote))[^\\{]|\\.)*))?"""
)


def classify_frames(frames: Sequence[str], source: str | None) -> tuple[CrashCause, str, str]:
    """Classify a traceback cut before its exception line by its innermost frames.

    Args:
        frames: the innermost frame lines, outermost first (``tracebacks.CutTraceback``).
        source: the source line under the innermost frame, if printed.

    In this order: (a) a source line ``raise X("…`` whose literal's head matches a catalog
    template → that row's cause; (b) else the innermost frame's raise site, when every catalog
    row raised there means one cause (``FailureCatalog.cause_at_site``); (c) else
    ``FRAME_RULES`` over the frames, innermost first.

    Returns:
        ``(cause, exception, message)``: ``UNKNOWN`` when the frames name none; for (a) the
        class and the literal's head the ``raise`` prints, else ``("", "")``.
    """
    if not frames:
        return CrashCause.UNKNOWN, "", ""
    innermost = frames[-1]
    site = site_of(innermost)
    raised = _RAISE_SOURCE.search(source) if source else None
    if raised is not None:
        exception = raised.group("cls")
        quote = raised.group("quote") or ""
        head = (raised.group("text") or "").replace("\\" + quote, quote) if quote else ""
        found = packaged_catalog().match(head, exception, site) if head.strip() else None
        if found is not None:
            return CrashCause(found.row.cause), exception, head.rstrip()
        if site is not None:
            at_site = packaged_catalog().cause_at(site, exception)
            if at_site is not None:
                return CrashCause(at_site), exception, head.rstrip()
    if site is not None:
        at_site = packaged_catalog().cause_at_site(site)
        if at_site is not None:
            return CrashCause(at_site), "", ""
    for frame in reversed(frames):
        for candidate, pattern in _FRAME_RULES:
            if pattern.search(frame):
                return candidate, "", ""
    return CrashCause.UNKNOWN, "", ""


def is_engine_dead(exception: str, message: str) -> bool:
    """Say whether an exception reports that the engine behind the server is dead."""
    return _ENGINE_DEAD.search(exception) is not None or _ENGINE_DEAD.search(message) is not None


def is_stop_request(exception: str, message: str) -> bool:
    """Say whether an exception means the process was asked to stop (Ctrl-C, SIGTERM)."""
    text = f"{exception}: {message}" if message else exception
    return _STOP_REQUEST.search(text) is not None


@lru_cache(maxsize=_MEMO)
def is_request_error(exception: str, message: str, context: str | None) -> bool:
    """Say whether an exception belongs to one request (never a crash cause); memoised as
    ``classify_exception`` is."""
    if _REQUEST.search(exception) or _REQUEST.search(message):
        return True
    return context is not None and _REQUEST.search(context) is not None


def choose_root_cause(evidence: Iterable[Evidence]) -> Evidence | None:
    """Pick the root cause: the most direct kind first, then the earliest (time, arrival)."""
    best: Evidence | None = None
    best_key: tuple[int, float, int] | None = None
    for item in evidence:
        key = (int(item.kind), item.at.timestamp() if item.at else float("inf"), item.seq)
        if best_key is None or key < best_key:
            best, best_key = item, key
    return best


class BenignMatcher:
    """Tell known-benign ERROR/WARNING lines from real ones.

    Args:
        patterns: regexes searched in the line body (config ``benign_patterns``).

    Raises:
        re.error: a pattern does not compile (config validation reports it first).
    """

    def __init__(self, patterns: Sequence[str] = DEFAULT_BENIGN_PATTERNS) -> None:
        self.patterns = tuple(patterns)
        self._regex = (
            re.compile("|".join(f"(?:{p})" for p in self.patterns)) if self.patterns else None
        )

    def matches(self, body: str) -> bool:
        """True when ``body`` is a known-benign line."""
        return self._regex is not None and self._regex.search(body) is not None
