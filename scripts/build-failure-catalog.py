#!/usr/bin/env python3
"""Build ``vllm_sentinel/engine/catalog/failures.tsv``: what vLLM and its stack can raise.

Reads the packages, never copies their code: for each vLLM release unpacked under
``--vllm-src`` (``<dir>/<version>/vllm/``, from the wheels ``pip download vllm==X --no-deps``
fetches) it walks every module with ``ast`` and keeps the *message templates* (the text, with
each formatted value as ``{}``) of

* every ``raise X("…")`` (f-strings, ``%`` and ``.format`` messages, string concatenations, and
  a message built in a local variable first), and every ``assert cond, "…"``;
* every ``logger.error/exception/critical("…")`` format string (``kind`` ``log``);

with the exception class, the file and function, and the releases that contain it. The same
for the libraries whose messages surface in vLLM's logs, from the wheels under ``--libs``
(``pip download --no-deps -d /work/cache/libs NAME==VER``): PyTorch's Python raises and the
message fragments of its C++ (``strings`` of ``libc10*.so``/``libtorch_cuda.so``: the caching
allocator's OOM, ``CUDA driver error``, ``torch.AcceleratorError``), the CUDA runtime's error
strings (``libcudart.so``), NCCL's (``libnccl.so``), HIP's error names (hip-python's
bindings), huggingface_hub's exception classes (``errors.py``), Ray's, FlashInfer's and
Triton's raises, and transformers' (the model's config, files and tokenizer).

The cause column is decided in this order: ``OVERRIDES`` (reviewed by hand, each with its
reason), then the project's own vocabulary (``causes.CAUSE_RULES``) over the template text, then
``LOCATION_DEFAULTS`` (where it is raised: a ``ValueError`` in ``vllm/config/`` is a
``config_error``), else ``unknown``. Rows of request paths (a 400 for one request) are left
out (``REQUEST_PATHS``).

Usage::

    scripts/build-failure-catalog.py [--vllm-src /work/cache/vllm-src] [--libs /work/cache/libs]

The script downloads nothing itself and is not run in CI; its output is committed, and
``tests/unit/test_failure_catalog.py`` checks it.
"""

from __future__ import annotations

import argparse
import ast
import re
import subprocess
import sys
import tempfile
import zipfile
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from vllm_sentinel.engine.catalog.causes import CAUSE_RULES, CrashCause

ROOT = Path(__file__).resolve().parent.parent
OUTPUT = ROOT / "vllm_sentinel" / "engine" / "catalog" / "failures.tsv"

# --- what is kept -------------------------------------------------------------------------

MIN_FIXED = 12  # a template whose fixed text is shorter than this says nothing by itself
RAISE_CLASSES = re.compile(r"(?:Error|Exception|Exit|Interrupt|Warning)$|^(?:\w+Error\w*)$")
# (path regex, reason): code whose raises end one request, not the process
REQUEST_PATHS: tuple[tuple[str, str], ...] = (
    (r"^vllm/entrypoints/openai/(?:serving_|.*/serving)", "OpenAI request handlers (a 4xx/5xx)"),
    (r"^vllm/entrypoints/(?:.*/)?protocol\.py$", "request schema validation (a 400)"),
    (r"^vllm/entrypoints/(?:.*/)?(?:chat_utils|score_utils|renderer)\.py$", "one request's input"),
    (r"^vllm/entrypoints/serve/", "request routes of the API server"),
    (r"^vllm/entrypoints/pooling/|^vllm/entrypoints/(?:anthropic|sagemaker)/", "request handlers"),
    (r"^vllm/(?:tool_parsers|reasoning|entrypoints/openai/tool_parsers)/", "per-request parsers"),
    (r"^vllm/benchmarks/|/tests?/|^vllm/third_party/", "not the server"),
    (r"^vllm/sampling_params\.py$|^vllm/pooling_params\.py$", "a request's parameters"),
    (r"^vllm/v1/structured_output/", "a request's grammar"),
    (r"^vllm/multimodal/(?:parse|inputs|image|audio|video|utils)\.py$", "a request's media"),
)
_REQUEST_PATHS = re.compile("|".join(f"(?:{p})" for p, _ in REQUEST_PATHS))

# --- the cause column -----------------------------------------------------------------------


@dataclass(frozen=True)
class Override:
    """A reviewed row: ``template`` (regex on the template text), optionally where, the cause."""

    template: str
    cause: CrashCause
    reason: str
    path: str = ""


C = CrashCause
OVERRIDES: tuple[Override, ...] = (
    Override(
        r"^Cannot find the config file for \{\}$",
        C.CONFIG_ERROR,
        "weight_utils.get_quant_config: `--quantization X` names a method whose config file "
        "the checkpoint does not have (the argument and the model disagree)",
    ),
    Override(
        r"^Cannot find any of \{\} in the model's",
        C.MODEL_NOT_FOUND,
        "the checkpoint lacks the file a loader needs (incomplete download, wrong path)",
    ),
    Override(
        r"^CUDA driver error: \{\}$",
        C.CUDA_ERROR,
        "c10 driver API check (torch/csrc, c10/cuda/driver_api.h); the driver's reason, when "
        "known, wins (`wraps`)",
    ),
    Override(
        r"^(?:cuda driver can't be loaded|amdsmi driver can't be loaded)",
        C.DRIVER_ERROR,
        "torch/cuda/__init__.py: the driver library cannot be loaded",
    ),
    Override(
        r"^PyTorch was compiled without CUDA support",
        C.NO_GPU,
        "torch/cuda/__init__.py: a CPU build of torch (as `Torch not compiled with CUDA`)",
    ),
    Override(
        r"^device \{\} is not visible \((?:CUDA|HIP)_VISIBLE_DEVICES",
        C.NO_GPU,
        "torch/cuda/__init__.py: the device is hidden from the process",
    ),
    Override(
        r"^Timed out initializing process group in store based barrier",
        C.NCCL_ERROR,
        "torch.distributed: the ranks never met (a rank died or the network is blocked)",
    ),
    Override(
        r"^Cannot re-initialize CUDA in forked subprocess",
        C.CUDA_ERROR,
        "torch/cuda/__init__.py: CUDA initialised before fork (a multiprocessing method problem)",
    ),
    Override(
        r"^(?:out of memory|CUDA out of memory\. Tried to allocate |HIP out of memory\. Tried "
        r"to allocate )",
        C.CUDA_OOM,
        "CUDA runtime cudaErrorMemoryAllocation and the caching allocator's OOM text",
    ),
    Override(
        r"^no CUDA-capable device is detected",
        C.NO_GPU,
        "CUDA runtime cudaErrorNoDevice: no device visible to the process",
    ),
    Override(
        r"^CUDA driver version is insufficient for CUDA runtime version",
        C.DRIVER_ERROR,
        "CUDA runtime cudaErrorInsufficientDriver: the driver is older than the runtime",
    ),
    Override(
        r"^an illegal memory access was encountered",
        C.CUDA_ILLEGAL_MEMORY_ACCESS,
        "CUDA runtime cudaErrorIllegalAddress",
    ),
    Override(
        r"^Model architectures \{\} (?:are not supported|failed to be inspected)",
        C.UNSUPPORTED_MODEL,
        "registry.py: the architecture has no vLLM model class",
    ),
    Override(
        r"^(?:The model's max seq len|To serve at least one request with the model|No "
        r"available memory for the cache blocks)",
        C.KV_CACHE_INSUFFICIENT,
        "kv_cache_utils/kv_cache_planning/worker: the KV cache cannot hold one max-length sequence",
    ),
    Override(
        r"^Unrecognized (?:configuration class|model identifier)",
        C.UNSUPPORTED_MODEL,
        "transformers' Auto classes: the installed transformers does not know this model type",
    ),
    Override(
        r"^This tokenizer cannot be instantiated\. Please make sure you have `sentencepiece`",
        C.IMPORT_ERROR,
        "transformers tokenization_auto: the slow tokenizer's package is not installed",
    ),
    Override(
        r"^Free memory on device",
        C.GPU_MEMORY_IN_USE,
        "gpu_worker.py: less free memory at start than gpu_memory_utilization asks",
    ),
)

# (path regex on "vllm/…" or "library:path", exception regex, cause, reason): the default
# where the template's words name no cause
LOCATION_DEFAULTS: tuple[tuple[str, str, CrashCause, str], ...] = (
    (
        r"^vllm/config(?:/|\.py$)|^vllm/engine/arg_utils\.py$|^vllm/entrypoints/openai/cli_args"
        r"\.py$|^vllm/entrypoints/cli/|^vllm/entrypoints/utils\.py$|^vllm/envs\.py$",
        r"ValueError|TypeError|NotImplementedError|AssertionError|RuntimeError|KeyError"
        r"|ArgumentError|ArgumentTypeError|ValidationError",
        C.CONFIG_ERROR,
        "vLLM's argument, environment and config validation",
    ),
    (
        r"^vllm/model_executor/layers/quantization/",
        r"ValueError|NotImplementedError|TypeError",
        C.CONFIG_ERROR,
        "a quantization method's checks: the arguments chose a method this model or GPU cannot run",
    ),
    (
        r"^vllm/(?:v1/)?attention/backends/|^vllm/v1/attention/selector\.py$|^vllm/attention/"
        r"selector\.py$",
        r"ValueError|NotImplementedError",
        C.CONFIG_ERROR,
        "an attention backend's checks: the backend chosen (or forced with "
        "VLLM_ATTENTION_BACKEND), the KV cache dtype or the head size does not fit this model "
        "or GPU",
    ),
    (
        r"^vllm/lora/",
        r"ValueError",
        C.CONFIG_ERROR,
        "LoRA's checks: the adapters or --max-lora-rank and the like do not fit the model",
    ),
    (
        r"^vllm/model_executor/models/registry\.py$",
        r"ValueError",
        C.UNSUPPORTED_MODEL,
        "the model registry: the architecture is not supported",
    ),
    (
        r"^vllm/transformers_utils/(?:config|repo_utils|utils)\.py$|^vllm/model_executor/"
        r"model_loader/weight_utils\.py$",
        r"FileNotFoundError|OSError|EnvironmentError",
        C.MODEL_NOT_FOUND,
        "the model's files cannot be found or read",
    ),
    (
        r"^vllm/distributed/device_communicators/pynccl",
        r"RuntimeError",
        C.NCCL_ERROR,
        "vLLM's NCCL wrapper",
    ),
    (r"^nccl:", r".*", C.NCCL_ERROR, "NCCL's error strings (ncclGetErrorString)"),
    (r"^cuda_runtime:", r".*", C.CUDA_ERROR, "the CUDA runtime's error strings"),
    (r"^hip:", r".*", C.CUDA_ERROR, "HIP's error names"),
    (
        r"^huggingface_hub:",
        r"RepositoryNotFound|GatedRepo|RevisionNotFound|EntryNotFound|"
        r"LocalEntryNotFound|HFValidation|OfflineModeIsEnabled",
        C.MODEL_NOT_FOUND,
        "huggingface_hub: the repository, revision or file cannot be reached",
    ),
    (
        r"^transformers:transformers/(?:utils/hub|configuration_utils|tokenization_utils_base"
        r"|dynamic_module_utils)\.py$",
        r"OSError|EnvironmentError|FileNotFoundError",
        C.MODEL_NOT_FOUND,
        "transformers cannot find or read the model's files (hub, config, tokenizer)",
    ),
    (r"^triton:.*(?:compiler|language|backends)/", r".*", C.COMPILE_ERROR, "Triton's compiler"),
    (
        r"^torch:torch/utils/cpp_extension\.py$",
        r".*",
        C.JIT_BUILD_ERROR,
        "torch.utils.cpp_extension: building a C++/CUDA extension",
    ),
    (r"^torch:torch/_(?:inductor|dynamo)/", r".*", C.COMPILE_ERROR, "torch.compile"),
    (r"^flashinfer:flashinfer/jit/", r".*", C.JIT_BUILD_ERROR, "FlashInfer's JIT builds"),
    (
        r"^ray:",
        r"ActorDied|ActorUnavailable|WorkerCrashed|NodeDied|ObjectLost|OwnerDied"
        r"|RayActorError",
        C.WORKER_DIED,
        "Ray: a worker or node died",
    ),
    (r"^ray:", r"OutOfMemory", C.HOST_OOM, "Ray's memory monitor killed a worker"),
)
_RULES = tuple((rule.cause, re.compile(rule.pattern)) for rule in CAUSE_RULES)


def decide_cause(template: str, exception: str, where: str) -> tuple[CrashCause, str]:
    """The cause of one row and why: an override, the vocabulary, the location, else unknown."""
    for row in OVERRIDES:
        if re.search(row.template, template) and (not row.path or re.search(row.path, where)):
            return row.cause, "reviewed: " + row.reason
    sample = template.replace("{}", "0")
    text = f"{exception}: {sample}" if exception else sample
    for cause, pattern in _RULES:
        if pattern.search(text):
            return cause, "vocabulary"
    for path, classes, cause, reason in LOCATION_DEFAULTS:
        if re.search(path, where) and re.search(classes, exception or ""):
            return cause, "location: " + reason
    return C.UNKNOWN, ""


# --- templates from Python source -------------------------------------------------------------


def _template(node: ast.expr | None, names: dict[str, ast.expr], depth: int = 0) -> str | None:
    """The message template of an expression: fixed text with ``{}`` for each value."""
    if node is None or depth > 8:
        return None
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value.replace("{", "{{").replace("}", "}}")
    if isinstance(node, ast.JoinedStr):
        out = []
        for value in node.values:
            if isinstance(value, ast.Constant) and isinstance(value.value, str):
                out.append(value.value.replace("{", "{{").replace("}", "}}"))
            else:
                out.append("{}")
        return "".join(out)
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        left = _template(node.left, names, depth + 1)
        right = _template(node.right, names, depth + 1)
        if left is None and right is None:
            return None
        return (left if left is not None else "{}") + (right if right is not None else "{}")
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Mod):
        base = _template(node.left, names, depth + 1)
        if base is None:
            return None
        return re.sub(
            r"%(?:\([^)]*\))?[-+ #0]*(?:\d+|\*)?(?:\.\d+)?[sdifrxXgeEc%]",
            lambda m: "%" if m.group(0) == "%%" else "{}",
            base,
        )
    if (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr == "format"
    ):
        base = _template(node.func.value, names, depth + 1)
        if base is None:
            return None
        # "a {{b}} {x:>4}" as written: un-escape our own escaping, then re-read the fields
        raw = base.replace("{{", "\x01").replace("}}", "\x02")
        raw = re.sub(r"\x01([^\x01\x02]*)\x02", "{}", raw)
        return raw.replace("\x01", "{{").replace("\x02", "}}")
    if isinstance(node, ast.Name) and node.id in names:
        return _template(names.pop(node.id), names, depth + 1)
    return None


def _log_template(node: ast.expr, names: dict[str, ast.expr]) -> str | None:
    """A logger call's format string (``%s`` → ``{}``)."""
    text = _template(node, names)
    if text is None:
        return None
    if isinstance(node, ast.Constant):
        return re.sub(
            r"%(?:\([^)]*\))?[-+ #0]*(?:\d+|\*)?(?:\.\d+)?[sdifrxXgeEc%]",
            lambda m: "%" if m.group(0) == "%%" else "{}",
            text,
        )
    return text


def _dotted(node: ast.expr) -> str | None:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        base = _dotted(node.value)
        return f"{base}.{node.attr}" if base else node.attr
    return None


@dataclass
class Site:
    """One place a template is raised or logged, in one package file."""

    template: str
    exception: str
    kind: str  # raise | log
    library: str
    path: str
    function: str
    releases: set[str] = field(default_factory=set)


def _normalise(template: str) -> str:
    text = re.sub(r"\s+", " ", template).strip()
    text = re.sub(r"(?:\{\}){2,}", "{}", text)
    return re.sub(r"\{\}\s*\{\}", "{} {}", text)


def _fixed_chars(template: str) -> int:
    return len(template.replace("{}", "").replace("{{", "{").replace("}}", "}").strip())


class _Visitor(ast.NodeVisitor):
    def __init__(self) -> None:
        self.found: list[tuple[str, str, str, str]] = []  # template, class, kind, function
        self._function = "<module>"
        self._names: dict[str, ast.expr] = {}

    def visit_FunctionDef(self, node: ast.FunctionDef | ast.AsyncFunctionDef) -> None:
        outer, names = self._function, self._names
        self._function, self._names = node.name, {}
        for child in ast.walk(node):
            if isinstance(child, ast.Assign) and len(child.targets) == 1:
                target = child.targets[0]
                if isinstance(target, ast.Name) and target.id not in self._names:
                    self._names[target.id] = child.value
        self.generic_visit(node)
        self._function, self._names = outer, names

    visit_AsyncFunctionDef = visit_FunctionDef  # noqa: N815

    def visit_Raise(self, node: ast.Raise) -> None:
        exc = node.exc
        if isinstance(exc, ast.Call):
            name = _dotted(exc.func)
            if name and RAISE_CLASSES.search(name.rsplit(".", 1)[-1]) and exc.args:
                text = _template(exc.args[0], dict(self._names))
                if text is not None:
                    self.found.append((text, name.rsplit(".", 1)[-1], "raise", self._function))
        self.generic_visit(node)

    def visit_Assert(self, node: ast.Assert) -> None:
        if node.msg is not None:
            text = _template(node.msg, dict(self._names))
            if text is not None:
                self.found.append((text, "AssertionError", "raise", self._function))
        self.generic_visit(node)

    def visit_Call(self, node: ast.Call) -> None:
        func = node.func
        if (
            isinstance(func, ast.Attribute)
            and func.attr in ("error", "exception", "critical", "fatal")
            and isinstance(func.value, ast.Name)
            and func.value.id in ("logger", "log", "_logger", "LOGGER")
            and node.args
        ):
            text = _log_template(node.args[0], dict(self._names))
            if text is not None:
                self.found.append((text, "", "log", self._function))
        self.generic_visit(node)


def python_sites(root: Path, library: str, prefix: str, release: str) -> Iterator[Site]:
    """Every raise/assert/logger.error template of the ``.py`` files under ``root``."""
    for file in sorted(root.rglob("*.py")):
        rel = prefix + file.relative_to(root).as_posix()
        try:
            tree = ast.parse(file.read_text(encoding="utf-8", errors="replace"))
        except (SyntaxError, ValueError):
            continue
        visitor = _Visitor()
        visitor.visit(tree)
        for text, exc, kind, function in visitor.found:
            template = _normalise(text)
            if _fixed_chars(template) < MIN_FIXED:
                continue
            yield Site(template, exc, kind, library, rel, function, {release})


# --- libraries -------------------------------------------------------------------------------


def _wheels(libs: Path, name: str) -> list[Path]:
    return sorted(libs.glob(f"{name}-*.whl"))


def _version(wheel: Path) -> str:
    return wheel.name.split("-")[1]


def _extract(wheel: Path, members: Iterable[str], into: Path) -> None:
    with zipfile.ZipFile(wheel) as archive:
        wanted = [m for m in archive.namelist() if any(re.search(p, m) for p in members)]
        archive.extractall(into, wanted)


def _strings(path: Path) -> list[str]:
    out = subprocess.run(
        ["strings", "-n", "6", str(path)], capture_output=True, text=True, check=True
    )
    return out.stdout.splitlines()


def library_python(libs: Path, name: str, library: str, package: str, paths: str) -> list[Site]:
    """The Python raises of a library wheel, under the files ``paths`` (regex) selects."""
    sites: list[Site] = []
    for wheel in _wheels(libs, name):
        with tempfile.TemporaryDirectory() as tmp:
            _extract(wheel, [rf"^{package}/.*\.py$"], Path(tmp))
            root = Path(tmp) / package
            for site in python_sites(root, library, f"{library}:{package}/", _version(wheel)):
                if re.search(paths, site.path):
                    sites.append(site)
    return sites


def cuda_runtime(libs: Path) -> list[Site]:
    """The CUDA runtime's ``cudaGetErrorString`` texts (``strings`` of ``libcudart.so``)."""
    sites: list[Site] = []
    for wheel in _wheels(libs, "nvidia_cuda_runtime_cu12"):
        with tempfile.TemporaryDirectory() as tmp:
            _extract(wheel, [r"libcudart\.so"], Path(tmp))
            for lib in Path(tmp).rglob("libcudart.so*"):
                lines = _strings(lib)
                # the error names and strings lie together, from cudaSuccess's "no error" to
                # the last one, "startup failure in cuda runtime"
                start = next((i for i, s in enumerate(lines) if s == "no error"), None)
                if start is None:
                    continue
                end = next(
                    (
                        i
                        for i in range(start, len(lines))
                        if lines[i] == "startup failure in cuda runtime"
                    ),
                    start,
                )
                for text in lines[start + 1 : end + 1]:
                    if re.fullmatch(r"cudaError\w+", text) or (
                        re.fullmatch(r"[a-zA-Z_][\w ,.'()/-]{5,200}", text)
                        and " " in text
                        and not text.startswith("cuda")
                    ):
                        sites.append(
                            Site(
                                text,
                                "",
                                "message",
                                "cuda_runtime",
                                "cuda_runtime:libcudart.so",
                                "cudaGetErrorString",
                                {_version(wheel)},
                            )
                        )
    return sites


def nccl(libs: Path) -> list[Site]:
    """NCCL's ``ncclGetErrorString`` texts (``strings`` of ``libnccl.so``)."""
    sites: list[Site] = []
    for wheel in _wheels(libs, "nvidia_nccl_cu12"):
        with tempfile.TemporaryDirectory() as tmp:
            _extract(wheel, [r"libnccl\.so"], Path(tmp))
            for lib in Path(tmp).rglob("libnccl.so*"):
                for text in _strings(lib):
                    if re.match(
                        r"(?:unhandled (?:cuda|system) error|internal error|invalid "
                        r"(?:argument|usage)|remote process exited|NCCL operation in "
                        r"progress)",
                        text,
                    ):
                        sites.append(
                            Site(
                                _normalise(text.replace("%s", "{}")),
                                "",
                                "message",
                                "nccl",
                                "nccl:libnccl.so",
                                "ncclGetErrorString",
                                {_version(wheel)},
                            )
                        )
    return sites


def hip(libs: Path) -> list[Site]:
    """HIP's error names (``hipError…``) as hip-python's bindings list them."""
    sites: list[Site] = []
    for wheel in _wheels(libs, "hip_python_fork"):
        with zipfile.ZipFile(wheel) as archive:
            names: set[str] = set()
            for member in archive.namelist():
                if re.search(r"hip/hip\.(?:pyx|pxd|pyi|py)$", member):
                    names.update(re.findall(r"\bhipError\w+", archive.read(member).decode()))
            for name in sorted(names):
                if len(name) >= MIN_FIXED and name != "hipErrorTbd":
                    sites.append(
                        Site(
                            name,
                            "",
                            "message",
                            "hip",
                            "hip:hip/hip.pyx",
                            "hipGetErrorName",
                            {_version(wheel)},
                        )
                    )
    return sites


def torch_native(libs: Path) -> list[Site]:
    """Message fragments of PyTorch's C++ (the caching allocator, c10's CUDA checks)."""
    wanted = (
        r"^CUDA out of memory\. Tried to allocate ",
        r"^CUDA driver error: ",
        r"^CUDA error: ",
        r"^CUDA kernel errors might be asynchronously reported",
        r"^NCCL error in: ",
        r"^Error in .* failed: ",
        r"^CUDACachingAllocator ",
    )
    sites: list[Site] = []
    for wheel in _wheels(libs, "torch"):
        with tempfile.TemporaryDirectory() as tmp:
            _extract(
                wheel,
                [r"lib/libc10_cuda\.so$", r"lib/libtorch_cuda\.so$", r"lib/libtorch_python\.so$"],
                Path(tmp),
            )
            for lib in sorted(Path(tmp).rglob("*.so")):
                for text in _strings(lib):
                    if any(re.match(p, text) for p in wanted) and len(text) < 300:
                        template = _normalise(text.replace("%s", "{}").replace("%d", "{}"))
                        if template.endswith(":"):
                            template += " {}"  # C++ appends the reason after the colon
                        sites.append(
                            Site(
                                template,
                                "",
                                "message",
                                "torch",
                                f"torch:{lib.name}",
                                "",
                                {_version(wheel)},
                            )
                        )
            # ROCm builds hipify the allocator's text
            sites.append(
                Site(
                    "HIP out of memory. Tried to allocate {}",
                    "OutOfMemoryError",
                    "message",
                    "torch",
                    "torch:libc10_hip.so (ROCm build)",
                    "",
                    {_version(wheel)},
                )
            )
    return sites


def exception_classes(libs: Path, name: str, library: str, member: str) -> list[Site]:
    """A library's exception classes (each class defined in ``member``) as rows of kind
    ``class``: the class alone names the failure (``GatedRepoError``, ``ActorDiedError``)."""
    sites: list[Site] = []
    for wheel in _wheels(libs, name):
        with zipfile.ZipFile(wheel) as archive:
            source = archive.read(member).decode()
        for found in re.findall(r"^class (\w+)\(", source, flags=re.M):
            sites.append(
                Site(
                    found, found, "class", library, f"{library}:{member}", found, {_version(wheel)}
                )
            )
    return sites


def huggingface_hub(libs: Path) -> list[Site]:
    """huggingface_hub's raises and its exception classes (``errors.py``)."""
    sites = library_python(
        libs,
        "huggingface_hub",
        "huggingface_hub",
        "huggingface_hub",
        r"huggingface_hub/(?:errors|utils/_http|utils/_validators|file_download"
        r"|_snapshot_download)\.py$",
    )
    return sites + exception_classes(
        libs, "huggingface_hub", "huggingface_hub", "huggingface_hub/errors.py"
    )


# --- assembling -------------------------------------------------------------------------------


def vllm_sites(src: Path) -> list[Site]:
    """The sites of every unpacked vLLM release under ``src``."""
    sites: list[Site] = []
    for release_dir in sorted(src.iterdir()):
        root = release_dir / "vllm"
        if root.is_dir():
            for site in python_sites(root, "vllm", "vllm/", release_dir.name):
                if not _REQUEST_PATHS.search(site.path):
                    sites.append(site)
    return sites


def _release_key(release: str) -> tuple[int, ...]:
    return tuple(int(p) if p.isdigit() else 0 for p in re.split(r"[.+]", release))


def merge(sites: Iterable[Site]) -> list[Site]:
    """One row per (template, class, kind, file, function), with every release seen."""
    rows: dict[tuple[str, str, str, str, str], Site] = {}
    for site in sites:
        key = (site.template, site.exception, site.kind, site.path, site.function)
        if key in rows:
            rows[key].releases |= site.releases
        else:
            rows[key] = site
    return sorted(
        rows.values(),
        key=lambda s: (s.library != "vllm", s.library, s.path, s.function, s.template),
    )


COLUMNS = (
    "cause", "kind", "exception", "library", "raised_in", "releases", "site_sole", "raise_only",
    "template", "why",
)  # fmt: skip


def format_row(site: Site, cause: CrashCause, why: str, sole: bool, raise_only: bool) -> str:
    """One TSV line of the catalog (templates hold no tab or newline: whitespace is folded)."""
    raised_in = f"{site.path}:{site.function}" if site.function else site.path
    releases = ",".join(sorted(site.releases, key=_release_key))
    fields = (cause.value, site.kind, site.exception, site.library, raised_in, releases,
              "1" if sole else "0", "1" if raise_only else "0", site.template, why)  # fmt: skip
    for value in fields:
        if "\t" in value or "\n" in value:
            raise ValueError(f"a tab or newline in {value!r}")
    return "\t".join(fields) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--vllm-src", type=Path, default=Path("/work/cache/vllm-src"))
    parser.add_argument("--libs", type=Path, default=Path("/work/cache/libs"))
    parser.add_argument("--output", type=Path, default=OUTPUT)
    args = parser.parse_args()
    sites = vllm_sites(args.vllm_src)
    libs = args.libs
    sites += torch_native(libs)
    sites += library_python(
        libs,
        "torch",
        "torch",
        "torch",
        r"torch/(?:cuda/__init__|cuda/memory|_inductor/exc|_dynamo/exc"
        r"|distributed/distributed_c10d|utils/cpp_extension)\.py$",
    )
    sites += cuda_runtime(libs)
    sites += nccl(libs)
    sites += hip(libs)
    sites += huggingface_hub(libs)
    sites += library_python(
        libs,
        "transformers",
        "transformers",
        "transformers",
        r"transformers/(?:utils/hub|configuration_utils|tokenization_utils_base|dynamic_module_utils"
        r"|models/auto/(?:configuration_auto|auto_factory|tokenization_auto))\.py$",
    )
    sites += library_python(libs, "ray", "ray", "ray", r"ray/(?:exceptions|_private/worker)\.py$")
    sites += exception_classes(libs, "ray", "ray", "ray/exceptions.py")
    sites += library_python(
        libs,
        "flashinfer_python",
        "flashinfer",
        "flashinfer",
        r"flashinfer/(?:jit/|utils\.py|__init__\.py)",
    )
    sites += library_python(
        libs,
        "triton",
        "triton",
        "triton",
        r"triton/(?:compiler|runtime|backends/nvidia|backends/amd)/",
    )
    rows = merge(sites)
    decided = [decide_cause(site.template, site.exception, site.path) for site in rows]
    # a raise site (file:function, class) whose every template means one cause
    at_site: dict[tuple[str, str, str], set[str]] = {}
    for site, (cause, _) in zip(rows, decided, strict=True):
        at_site.setdefault((site.path, site.function, site.exception), set()).add(cause.value)
    # a template raised in vLLM that no logger prints: its text alone says it was raised
    raised = {site.template for site in rows if site.kind == "raise" and site.library == "vllm"}
    logged = {site.template for site in rows if site.kind == "log"}
    # rows of a known cause first (what matching reads), then the rest
    order = sorted(range(len(rows)), key=lambda i: decided[i][0] is C.UNKNOWN)
    with args.output.open("w", encoding="utf-8") as out:
        out.write("\t".join(COLUMNS) + "\n")
        for index in order:
            site, (cause, why) = rows[index], decided[index]
            sole = (
                site.kind == "raise"
                and at_site[(site.path, site.function, site.exception)] == {cause.value}
                and cause is not C.UNKNOWN
            )
            raise_only = site.template in raised and site.template not in logged
            out.write(format_row(site, cause, why, sole, raise_only))
    counts: dict[str, int] = {}
    for site in rows:
        counts[site.library] = counts.get(site.library, 0) + 1
    print(f"{len(rows)} rows -> {args.output}: {counts}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
