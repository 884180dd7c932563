"""Fix hints: what to do about a crash, from its cause and its own message (core: pure).

A root cause is half an answer; the other half is the fix. Three tables, all data:

* ``CAUSE_HINTS`` — one row per crash cause of the bounded set (``causes.CrashCause``), some
  with a variant per phase (a ``cuda_oom`` while loading weights is a model that does not fit;
  later it is a memory budget) or under a condition of ``CONDITIONS`` (a ``cuda_oom`` where
  another process held the GPU's memory: stop it, no smaller budget helps). Every cause has a
  row without phases or condition: the default. A row's text may name ``{unit}`` and
  ``{journal_command}``, filled from the crash and its context (``generic_text`` fills them
  for the alert rules, which have neither).
* ``MESSAGE_HINTS`` — one row per well-known message shape: a regex whose named groups fill
  the fix, so the hint carries what the message said (the exact ``pip install`` line of two
  versions that must match, the package of a missing module, the KV cache needed against the
  KV cache available, the port that is taken). A row applies only to the causes it names.
* ``BENIGN_NOTES`` — why each default benign pattern (``causes.DEFAULT_BENIGN_PATTERNS``) is
  harmless, so ``replay`` can say what it discounted and why.

``hint_for(crash, context)`` picks the first message row that matches the crash's
``"Exception: message"`` (else the cause row) and, for memory causes, names the other processes
that hold GPU memory when the GPU collector knows them. Every hint links its runbook section
(``docs/runbook.md#<cause>``). Text taken from the log is cut short, and every value a row
captures must have the shape its field is (``value_shapes.FIELD_SHAPES``: a PEP 440 version, a
package name, a port …) or the row is skipped: log text never becomes a command. The renderers
escape it.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import timedelta
from types import MappingProxyType

from vllm_sentinel.engine.catalog.causes import DEFAULT_BENIGN_PATTERNS
from vllm_sentinel.engine.catalog.phases import Phase
from vllm_sentinel.engine.snapshot import CrashInfo, GpuDevice, GpuProcessUsage, UnitSnapshot
from vllm_sentinel.engine.value_shapes import has_shape

__all__ = [
    "BENIGN_NOTES",
    "CAUSE_HINTS",
    "CONDITIONS",
    "GENERIC_FIELDS",
    "HELD_BY_OTHERS_RATIO",
    "MESSAGE_HINTS",
    "MODULE_PACKAGES",
    "RUNBOOK_PATH",
    "RUNBOOK_URL",
    "UNIT_PLACEHOLDER",
    "BenignNote",
    "CauseHint",
    "Condition",
    "Hint",
    "HintContext",
    "MessageHint",
    "explain_benign",
    "generic_text",
    "hint_context",
    "hint_for",
    "runbook_anchor",
    "weight_cache_units",
    "without_weight_caches",
]

RUNBOOK_PATH = "/runbook"
"""The runbook a user can open: the daemon serves it at this path (``serve/http.py``); hints
link ``RUNBOOK_PATH#<cause>``. Commands without a daemon (``replay``, ``watch``) name the copy
the package installs instead (``serve.runbook.installed_runbook``)."""

RUNBOOK_URL = "runbook"
"""The runbook the status page links into: the daemon's own ``/runbook`` (docs/runbook.md as
HTML), relative to the page so that a reverse proxy's path prefix is kept. The alert rules take
theirs from the recording rule ``job:vllm_sentinel_runbook_url:info``."""

_MAX_FIELD = 120  # characters of one value taken from a log message into a hint
_MAX_HOLDERS = 3  # other GPU processes named in a hint
_GIB = 1 << 30


@dataclass(frozen=True, slots=True)
class Hint:
    """What to do about one crash.

    Attributes:
        text: one or two sentences, plain text (commands in backticks).
        cause: the crash cause it is for (``CrashCause`` value).
        rule: the row that produced it: a ``MESSAGE_HINTS`` name, or ``cause:<cause>``.
        runbook: the runbook section on the daemon's page, ``/runbook#<cause>``.
    """

    text: str
    cause: str
    rule: str
    runbook: str


@dataclass(frozen=True, slots=True)
class HintContext:
    """What the daemon knows around a crash, beyond the log.

    Attributes:
        unit: the crashed unit (its own processes are not "other processes").
        gpu_processes: processes holding GPU memory on the unit's host, from the latest GPU
            reading (``HostSnapshot.gpu_processes``).
        held_by_others_at_start: per invocation id, bytes other processes held on each GPU
            the incarnation used, when it started
            (``UnitSnapshot.gpu_memory_held_by_others_at_start``).
        gpu_total_bytes: each GPU's memory, by index (``HostSnapshot.gpus``).
        recovered: the crashes after which a later incarnation of the same model became ready
            (the unit's incarnations as known: the daemon's last few, all of a replay's input).
        local_times: the crash times are plain text's as printed (the host's local time, the
            year assumed): the journalctl window is given without ``UTC``.
    """

    unit: str | None = None
    gpu_processes: tuple[GpuProcessUsage, ...] = ()
    held_by_others_at_start: Mapping[str, Mapping[int, int]] = field(default_factory=dict)
    gpu_total_bytes: Mapping[int, int] = field(default_factory=dict)
    recovered: frozenset[CrashInfo] = frozenset()
    local_times: bool = False


def weight_cache_units(units: Iterable[UnitSnapshot]) -> frozenset[str]:
    """The units whose current incarnation is a weight-cache daemon (``vllm preload``,
    ``RuntimeModes.role``): they hold model weights for serve units on purpose."""
    return frozenset(
        unit.unit
        for unit in units
        if unit.current is not None
        and unit.current.ended_at is None
        and unit.current.modes.role == "weight_cache"
    )


def without_weight_caches(
    processes: Iterable[GpuProcessUsage], units: Iterable[UnitSnapshot]
) -> tuple[GpuProcessUsage, ...]:
    """``processes`` less those of weight-cache daemons (``weight_cache_units``): their memory
    is the weights serve units map, never "another process holding the GPU" in a hint."""
    daemons = weight_cache_units(units)
    if not daemons:
        return tuple(processes)
    return tuple(usage for usage in processes if usage.unit not in daemons)


def hint_context(
    unit: UnitSnapshot,
    gpu_processes: Sequence[GpuProcessUsage] = (),
    gpus: Sequence[GpuDevice] = (),
) -> HintContext:
    """What the hints of ``unit``'s crashes may use beyond the log: its host's GPU processes
    and devices, the memory others held on its GPUs when each incarnation started, and which
    crashes a later start of the same model recovered from (it became ready)."""
    incarnations = unit.incarnations
    recovered = frozenset(
        item.crash
        for index, item in enumerate(incarnations)
        if item.crash is not None
        and item.model is not None
        and any(
            later.model == item.model and later.furthest_phase is Phase.READY
            for later in incarnations[index + 1 :]
        )
    )
    return HintContext(
        unit.unit if unit.unit_name_known else None,
        tuple(gpu_processes),
        unit.gpu_memory_held_by_others_at_start,
        {gpu.index: gpu.memory_total_bytes for gpu in gpus},
        recovered,
        unit.log_times_local,
    )


@dataclass(frozen=True, slots=True)
class CauseHint:
    """A row of ``CAUSE_HINTS``: the hint of a cause, or of a cause in some phases, or when a
    condition of ``CONDITIONS`` (named by ``when``) holds for the crash."""

    cause: str
    text: str
    phases: frozenset[Phase] = frozenset()
    when: str = ""


@dataclass(frozen=True, slots=True)
class Condition:
    """A row of ``CONDITIONS``: evidence a ``CauseHint`` row may require.

    Attributes:
        name: what ``CauseHint.when`` names.
        holds: reads the crash (its exception and message) and the daemon's context.
        source: where the evidence comes from.
        example: a message it holds for (tests check it).
        example_context: the context it holds in for a crash of that message (``None``: the
            message alone is evidence).
    """

    name: str
    holds: Callable[[CrashInfo, HintContext | None], bool]
    source: str
    example: str
    example_context: Callable[[CrashInfo], HintContext] | None = None


_Fields = Mapping[str, str]


@dataclass(frozen=True, slots=True)
class MessageHint:
    """A row of ``MESSAGE_HINTS``.

    Attributes:
        name: the row's name (``Hint.rule``).
        causes: the causes it applies to (values of ``CrashCause``).
        pattern: searched in ``"Exception: message"``; its named groups fill ``template``.
        template: ``str.format`` text over the groups (and ``derive``'s fields).
        source: where the message comes from (project file, versions).
        example: a real message of that shape (tests check the row matches it).
        derive: computes more fields from the groups (a package name, a fitting value).
        with_cause_hint: append the cause's hint (the message gave numbers, not the fix).
        names_gpu_processes: append the other processes holding GPU memory, when known.
    """

    name: str
    causes: frozenset[str]
    pattern: str
    template: str
    source: str
    example: str
    derive: Callable[[_Fields], _Fields] | None = None
    with_cause_hint: bool = False
    names_gpu_processes: bool = False


@dataclass(frozen=True, slots=True)
class BenignNote:
    """Why lines matching one of ``DEFAULT_BENIGN_PATTERNS`` are harmless."""

    pattern: str
    why: str
    source: str
    example: str


# --------------------------------------------------------------------------- cause hints

_MEMORY_BUDGET = (
    "Activations or CUDA graphs did not fit in the memory budget: lower `--max-num-seqs` or "
    "`--max-model-len`, or leave headroom with a lower `--gpu-memory-utilization`; "
    "`--enforce-eager` tells whether CUDA graphs are the cause."
)

_OOM_KILLER = (
    "confirm with `journalctl -k --grep 'Out of memory|oom-kill'` and `systemctl show -p "
    "MemoryMax,MemoryPeak {unit}`; then add RAM, raise the unit's `MemoryMax`, or use less "
    "CPU memory (lower `--swap-space`, `--cpu-offload-gb`; fewer workers loading at once)."
)

CAUSE_HINTS: tuple[CauseHint, ...] = (
    CauseHint(
        "cuda_oom",
        "Memory on the GPU was already in use by another process (a stale vLLM still exiting, "
        "another unit, a notebook), so no smaller budget helps: find it with `nvidia-smi "
        "--query-compute-apps=pid,process_name,used_memory --format=csv` (`ps -o unit= -p PID` "
        "names its unit), stop it and restart this unit; give units disjoint "
        "`CUDA_VISIBLE_DEVICES`.",
        when="gpu_memory_held_by_others",
    ),
    CauseHint(
        "cuda_oom",
        "The model does not fit in device memory at this size and dtype: raise "
        "`--tensor-parallel-size` or use a quantized checkpoint.",
        frozenset({Phase.STARTING, Phase.INITIALIZING, Phase.LOADING_WEIGHTS}),
    ),
    CauseHint("cuda_oom", "The device ran out of memory. " + _MEMORY_BUDGET),
    CauseHint(
        "kv_cache_insufficient",
        "Other processes held memory on the GPU when this incarnation started, so the KV cache "
        "got only what they left: do not shrink `--max-model-len` for it. Find them with "
        "`nvidia-smi --query-compute-apps=pid,process_name,used_memory --format=csv` "
        "(`ps -o unit= -p PID` names its unit), stop them and restart this unit; give units "
        "disjoint `CUDA_VISIBLE_DEVICES`.",
        when="gpu_memory_held_by_others",
    ),
    CauseHint(
        "kv_cache_insufficient",
        "A later start with the same model became ready: the shortage was transient (memory "
        "held by another process?), so do not shrink `--max-model-len` for it. Find what held "
        "the GPU then (another unit starting at the same time, an incarnation still exiting: "
        "`nvidia-smi`, their journals), and order the units' starts (`After=`) or give them "
        "disjoint `CUDA_VISIBLE_DEVICES`.",
        when="later_start_ready",
    ),
    CauseHint(
        "kv_cache_insufficient",
        "The weights fit but the KV cache for one max-length sequence does not: lower "
        "`--max-model-len`, raise `--gpu-memory-utilization`, or add GPUs "
        "(`--tensor-parallel-size`).",
    ),
    CauseHint(
        "gpu_memory_in_use",
        "Other processes hold memory on the unit's GPUs (a previous incarnation still exiting, "
        "another unit, a notebook): stop them (`nvidia-smi` lists them), give units disjoint "
        "`CUDA_VISIBLE_DEVICES`, or lower `--gpu-memory-utilization`.",
    ),
    CauseHint(
        "host_oom",
        "The kernel's OOM killer ended the process: host RAM (or the unit's cgroup limit) ran "
        "out, not GPU memory; " + _OOM_KILLER,
    ),
    CauseHint(
        "nccl_error",
        "A collective between ranks failed: check every GPU for Xid errors "
        "(`dmesg | grep -i xid`), the topology (`nvidia-smi topo -m`) and the size of "
        "`/dev/shm`; rerun with `NCCL_DEBUG=INFO` to see which link.",
    ),
    CauseHint(
        "cuda_illegal_memory_access",
        "A kernel touched memory it does not own: a bug (vLLM, a custom kernel, the driver) or "
        "failing hardware. Look for Xid errors in `dmesg`; try another attention backend or "
        "`--enforce-eager` to isolate it; check the vLLM version's known issues.",
    ),
    CauseHint(
        "cuda_error",
        "A call into the accelerator's runtime (CUDA, HIP, NPU, XPU) failed: check the device's "
        "health (`dmesg | grep -i xid` on NVIDIA, `npu-smi info`, `rocm-smi`) and the failing "
        "operation in the message; a device-side assert is often a shape or dtype the device "
        "does not support.",
    ),
    CauseHint(
        "no_gpu",
        "The unit sees no GPU: check `CUDA_VISIBLE_DEVICES` in the unit, the permissions of "
        "`/dev/nvidia*`, the container's GPU flags, and that `nvidia-smi` works.",
    ),
    CauseHint(
        "driver_error",
        "The accelerator's driver is missing, too old for the runtime in this environment, or "
        "out of step after an upgrade: reboot after a driver update; otherwise update the "
        "driver, or install the PyTorch build (CUDA, ROCm, torch_npu) the driver supports.",
    ),
    CauseHint(
        "dependency_mismatch",
        "Installed packages do not fit together: reinstall the environment from its lock "
        "file, or pin the versions this vLLM release requires (`pip check` lists conflicts).",
    ),
    CauseHint(
        "import_error",
        "A Python module is missing or broken: install it into the unit's environment, and "
        "check that `ExecStart` runs the intended interpreter or virtual environment.",
    ),
    CauseHint(
        "model_not_found",
        "The model is not reachable: check its name or path (is the file system mounted for "
        "the unit?), `HF_TOKEN` for a gated or private repository, and `HF_HUB_OFFLINE`.",
    ),
    CauseHint(
        "unsupported_model",
        "This vLLM version does not support the model's architecture: upgrade vLLM, or look "
        "for an import error above that hid the model class.",
    ),
    CauseHint(
        "config_error",
        "An argument is invalid or conflicts with another: fix the unit's flags (the message "
        "names the argument).",
    ),
    CauseHint(
        "port_in_use",
        "The API server's port is taken by another process, often the previous incarnation "
        "still exiting: `ss -ltnp` shows which; stop it, or give this unit another `--port`.",
    ),
    CauseHint(
        "compile_error",
        "`torch.compile` failed: clear `~/.cache/vllm/torch_compile_cache` after an upgrade, "
        "or start with `--enforce-eager` to confirm (and to serve meanwhile).",
    ),
    CauseHint(
        "jit_build_error",
        "A just-in-time kernel build failed: check that `nvcc` and `ninja` match the CUDA "
        "version, or install the prebuilt kernels (`flashinfer-jit-cache`, `flashinfer-cubin`) "
        "of the same version as flashinfer.",
    ),
    CauseHint(
        "worker_died",
        "A worker process died without saying why: read the other ranks' lines and `dmesg` "
        "(OOM killer, segfault) around the time of the crash.",
    ),
    CauseHint(
        "killed",
        "A signal nobody planned killed the process: find the sender (`journalctl` around the "
        "time, audit logs); raise `TimeoutStopSec` if systemd killed a slow shutdown.",
    ),
    CauseHint(
        "timeout",
        "The engine did not become ready in time: raise the timeout "
        "(`VLLM_ENGINE_READY_TIMEOUT_S`) for very large models, or find where it hung (as for "
        "a stalled load).",
    ),
    CauseHint(
        "unknown",
        "No known cause was recognised: read the dead incarnation's own lines "
        "({journal_command}); a recurring cause belongs in the table of "
        "`vllm_sentinel/engine/catalog/causes.py`.",
    ),
    CauseHint(
        "pending",
        "A crash is seen but its root cause is not settled yet (a traceback is still open, or "
        "late lines may follow): the cause and its fix appear once it settles.",
    ),
)
"""One default row per cause (no ``phases``, no ``when``), its variants listed before it: the
first row whose condition and phases fit the crash is taken."""


# --------------------------------------------------------------------------- conditions

_SIZE_UNITS: Mapping[str, int] = MappingProxyType(
    {"B": 1, "KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30, "TiB": 1 << 40}
)
_OOM_CAPACITY = re.compile(
    r"GPU \d+ has a total capacity of (?P<total>[\d.]+) (?P<unit>[KMGT]?i?B)"
)
_OOM_PROCESS = re.compile(
    r"(?P<who>Process \d+|this process) has (?P<held>[\d.]+) (?P<unit>[KMGT]?i?B) memory in use"
)
HELD_BY_OTHERS_RATIO = 0.10
"""Other processes holding this share of a GPU crowd vLLM out: its default
``--gpu-memory-utilization`` (0.9) leaves 10 % for everything else."""


def _bytes(number: str, unit: str) -> float:
    return float(number) * _SIZE_UNITS.get(unit, 1)


def _held_by_others(crash: CrashInfo, context: HintContext | None) -> bool:
    """Other processes held ``HELD_BY_OTHERS_RATIO`` of a GPU the incarnation used.

    Two sources: the GPU collector's reading when the incarnation started (``context``), and
    PyTorch's out-of-memory report, which lists every process on the GPU (NVML): ``Process N
    has X memory in use`` for the others, ``this process has …`` for itself. In a container
    PyTorch cannot tell its own PID from NVML's (no ``this process``): the largest listed one
    is taken as itself.
    """
    if context is not None and crash.invocation_id is not None:
        held = context.held_by_others_at_start.get(crash.invocation_id, {})
        for gpu, size in held.items():
            total = context.gpu_total_bytes.get(gpu, 0)
            if total > 0 and size >= HELD_BY_OTHERS_RATIO * total:
                return True
    text = crash.message
    capacity = _OOM_CAPACITY.search(text)
    if capacity is None:
        return False
    capacity_bytes = _bytes(capacity["total"], capacity["unit"])
    listed = [
        (found["who"], _bytes(found["held"], found["unit"]))
        for found in _OOM_PROCESS.finditer(text)
    ]
    others = [held for who, held in listed if who != "this process"]
    if others and len(others) == len(listed):
        others.remove(max(others))
    return capacity_bytes > 0 and sum(others) >= HELD_BY_OTHERS_RATIO * capacity_bytes


CONDITIONS: Mapping[str, Condition] = MappingProxyType(
    {
        "gpu_memory_held_by_others": Condition(
            "gpu_memory_held_by_others",
            _held_by_others,
            "the GPU collector's reading (NVML, nvidia-smi) when the incarnation started; "
            "PyTorch caching allocator's out-of-memory message (c10/cuda/CUDACachingAllocator.cpp "
            "reportProcessMemoryInfo, torch 2.1+): the GPU's processes from NVML",
            "CUDA out of memory. Tried to allocate 60.00 MiB. GPU 2 has a total capacity of "
            "79.22 GiB of which 2.06 MiB is free. Process 3888866 has 71.11 GiB memory in use. "
            "Including non-PyTorch memory, this process has 8.08 GiB memory in use.",
        ),
        "later_start_ready": Condition(
            "later_start_ready",
            lambda crash, context: context is not None and crash in context.recovered,
            "the unit's incarnations (``hint_context``): a later one of the same model reached "
            "ready (the daemon's last few incarnations; a replay's whole input)",
            "ValueError: To serve at least one request with the models's max seq len (16384), "
            "(3.0 GiB KV cache is needed, which is larger than the available KV cache memory "
            "(1.87 GiB).",
            example_context=lambda crash: HintContext(recovered=frozenset({crash})),
        ),
    }
)
"""The evidence ``CauseHint.when`` may name, by name.

A ``CauseHint`` row whose condition holds outranks the ``MESSAGE_HINTS`` rows that give a fix
of their own (``with_cause_hint`` false): the message's fix assumes the GPU was the unit's own
(lower `--max-model-len` to what fitted), the evidence says it was not."""


# --------------------------------------------------------------------------- context fields

_INVOCATION_ID = re.compile(r"[0-9A-Za-z-]{1,64}")
_WINDOW_BEFORE = timedelta(minutes=10)  # the journal read before a crash of unknown start
_WINDOW_AFTER = timedelta(minutes=1)
_JOURNAL_TIME = "%Y-%m-%d %H:%M:%S UTC"  # systemd.time(7) with an explicit zone
_LOCAL_TIME = "%Y-%m-%d %H:%M:%S"  # systemd.time(7) without a zone: journalctl's local time
UNIT_PLACEHOLDER = "<unit>"
"""``{unit}`` of a crash whose unit name nobody gave (plain text naming no unit): the operator
fills it."""

GENERIC_FIELDS: Mapping[str, str] = MappingProxyType(
    {
        "unit": "UNIT",
        "journal_command": "`journalctl _SYSTEMD_INVOCATION_ID=ID -o cat`, ID being the crash's "
        "`invocation_id` in `vllm-sentinel status --json`",
    }
)


def _context_fields(crash: CrashInfo, context: HintContext | None) -> dict[str, str]:
    """``{unit}`` and ``{journal_command}`` for one crash: the journalctl command that prints
    exactly the dead incarnation's lines (its invocation id), else the unit's lines in a
    window before the crash: in UTC for the journal's times, else (plain text: the host's
    local time as journalctl printed it, the year assumed) without a zone, so that journalctl
    reads it as local time too. ``{unit}`` is ``UNIT_PLACEHOLDER`` when nobody named the unit.
    """
    unit = _bounded(context.unit) if context is not None and context.unit else UNIT_PLACEHOLDER
    if unit != UNIT_PLACEHOLDER and not has_shape("unit", unit):
        unit = UNIT_PLACEHOLDER  # not a unit name systemd could have made: no command with it
    local = context is not None and context.local_times
    ident = crash.invocation_id
    if ident and _INVOCATION_ID.fullmatch(ident):
        command = f"`journalctl _SYSTEMD_INVOCATION_ID={ident} -o cat`"
    else:
        command = f"`journalctl --unit {unit} -o cat`"
        if crash.at is not None:
            form = _LOCAL_TIME if local else _JOURNAL_TIME
            try:
                since = (crash.at - _WINDOW_BEFORE).strftime(form)
                until = (crash.at + _WINDOW_AFTER).strftime(form)
            except OverflowError:  # a log time at the end of the calendar: no window
                pass
            else:
                command = f"`journalctl --unit {unit} --since '{since}' --until '{until}' -o cat`"
                if local:
                    command += (
                        f"; local time, as the log printed it; the year {crash.at.year} is assumed"
                    )
    return {"unit": unit, "journal_command": command}


def generic_text(row: CauseHint, fields: Mapping[str, str] = GENERIC_FIELDS) -> str:
    """A cause row's text without a crash: its fields in their general form (the alert rules
    pass theirs, e.g. the ``unit`` label)."""
    return row.text.format_map(fields)


# --------------------------------------------------------------------------- message hints

MODULE_PACKAGES: Mapping[str, str] = MappingProxyType(
    {
        "cv2": "opencv-python-headless",  # what vLLM itself requires (no GUI libraries)
        "PIL": "pillow",
        "yaml": "PyYAML",
        "sklearn": "scikit-learn",
        "google.protobuf": "protobuf",
        "attr": "attrs",
        "bs4": "beautifulsoup4",
        "dateutil": "python-dateutil",
        "zmq": "pyzmq",
        "Crypto": "pycryptodome",
        "fitz": "PyMuPDF",
        "flashinfer": "flashinfer-python",
        "flash_attn": "flash-attn",
        "flash_attn_2_cuda": "flash-attn",
        "flash_attn_cuda": "flash-attn",
        "mamba_ssm": "mamba-ssm",
        "causal_conv1d": "causal-conv1d",
        "causal_conv1d_cuda": "causal-conv1d",
        "selective_scan_cuda": "mamba-ssm",
        "mistral_common": "mistral-common",
        "triton_kernels": "triton-kernels",
        "deep_gemm": "deep-gemm",
        "deep_ep": "deep-ep",
        "cupy": "cupy-cuda12x",
        "pynvml": "nvidia-ml-py",
        "OpenSSL": "pyOpenSSL",
        "serial": "pyserial",
        "jwt": "PyJWT",
        "magic": "python-magic",
        "dotenv": "python-dotenv",
        "docx": "python-docx",
        "skimage": "scikit-image",
        "Levenshtein": "python-Levenshtein",
    }
)
"""Python module → the PyPI package that installs it, where the names differ."""


def _package_of_module(module: str) -> str:
    """The PyPI package for an import name: the table, by full then top-level name."""
    parts = module.split(".")
    for length in range(len(parts), 0, -1):
        package = MODULE_PACKAGES.get(".".join(parts[:length]))
        if package is not None:
            return package
    return parts[0].replace("_", "-")


def _missing_module(fields: _Fields) -> _Fields:
    return {"package": _package_of_module(fields["module"])}


_PACKAGE_DIR = re.compile(r"/(?:site|dist)-packages/([^/]+)/")
_TOP_LEVEL_SO = re.compile(r"/(?:site|dist)-packages/([A-Za-z_]\w*)[^/]*\.so$")


def _extension(fields: _Fields) -> _Fields:
    path = fields["path"]
    directory = _PACKAGE_DIR.search(path)
    top = _TOP_LEVEL_SO.search(path)
    module = directory.group(1) if directory else top.group(1) if top else ""
    package = _package_of_module(module) if module else "the package that ships it"
    symbol = fields["symbol"]
    short = symbol if len(symbol) <= 60 else symbol[:59] + "…"
    return {"package": package, "file": path.rsplit("/", 1)[-1], "symbol_short": short}


def _driver_cuda(fields: _Fields) -> _Fields:
    found = int(fields["found"])  # CUDA's encoding: 1000 × major + 10 × minor
    return {"cuda": f"{found // 1000}.{found % 1000 // 10}"}


def _kv_fit(fields: _Fields) -> _Fields:
    estimate = fields.get("estimate")
    fit = (
        f"lower `--max-model-len` to {estimate} or less (vLLM's estimate of what fits), "
        if estimate
        else "lower `--max-model-len`, "
    )
    return {"fit": fit}


def _utilization_fit(fields: _Fields) -> _Fields:
    free, total = float(fields["free"]), float(fields["total"])
    fits = int(free / total * 100) / 100 if total > 0 else 0.0
    device = fields.get("device")
    return {
        "where": f"GPU {device}" if device else "The GPU",
        "fits": f"{fits:.2f}",
    }


def _oom_other(fields: _Fields) -> _Fields:
    pid, held = fields.get("pid"), fields.get("held")
    return {"other": f"; process {pid} held {held} there" if pid and held else ""}


def _optional_repo(fields: _Fields) -> _Fields:
    repo = fields.get("repo")
    return {"repo_name": f"`{repo}`" if repo else "The model's repository"}


_PIP_SPEC = r"(?:[<>=!~]=? ?[\w.*+-]+)(?:,\s*[<>=!~]=? ?[\w.*+-]+)*"
_SIZE = r"[\d.]+ ?[KMGT]?i?B"
_D = "dependency_mismatch"

MESSAGE_HINTS: tuple[MessageHint, ...] = (
    # vLLM's engine ready timeout ran out (vllm2026): the message says how long it waited
    MessageHint(
        "engine_ready_timeout",
        frozenset({"timeout"}),
        r"Timed out waiting for (?:new )?engine core processes to start\..*?Waited "
        r"(?P<waited>\d{1,7})s \(configured by VLLM_ENGINE_READY_TIMEOUT_S\)",
        "vLLM gave up after its engine ready timeout, {waited} s, while the engine was still "
        "starting: raise `VLLM_ENGINE_READY_TIMEOUT_S` above the unit's startup time "
        "(`systemctl edit {unit}`, `Environment=VLLM_ENGINE_READY_TIMEOUT_S=SECONDS`) and "
        "restart it; if the start was stuck rather than slow, see a stalled load.",
        "vllm/v1/engine/core_client.py (MPClient, 0.17.1–0.33.0)",
        "TimeoutError: Timed out waiting for engine core processes to start. This is often "
        "caused by slow weight loading for large models. Waited 600s (configured by "
        "VLLM_ENGINE_READY_TIMEOUT_S). To increase the timeout, set the environment variable: "
        "VLLM_ENGINE_READY_TIMEOUT_S=<seconds>",
    ),
    MessageHint(
        "version_pair",
        frozenset({_D}),
        r"(?P<package>[A-Za-z0-9][\w.-]*) version \((?P<have>[^)\s]+)\) does not match "
        r"(?P<other>[A-Za-z0-9][\w.-]*) version \((?P<want>[^)\s]+)\)",
        "`pip install {package}=={want}`: {package} {have} must match {other} {want} (or "
        "install the {other} that matches {package} {have}).",
        "flashinfer/jit/env.py (flashinfer 0.5–0.6: flashinfer-cubin, flashinfer-jit-cache)",
        "RuntimeError: flashinfer-cubin version (0.6.3) does not match flashinfer version "
        "(0.6.4). Please install the same version of both packages.",
    ),
    MessageHint(
        "requirement_conflict",
        frozenset({_D, "unknown"}),
        r"requires (?P<package>[A-Za-z0-9][\w.-]*) ?(?P<spec>" + _PIP_SPEC + r"),? but "
        r"(?:you have|found) (?:(?P=package) )?(?P<have>[\w.+-]+)",
        "`pip install '{package}{spec}'`: {package} {have} is installed.",
        "pip's dependency resolver (pip 20.3+), printed by install scripts before the start",
        "ERROR: vllm 0.11.0 requires torch==2.8.0, but you have torch 2.9.0 which is incompatible.",
    ),
    MessageHint(
        "transformers_requirement",
        frozenset({_D, "import_error"}),
        r"(?P<requirement>(?P<package>[A-Za-z0-9][\w.-]*)" + _PIP_SPEC + r") is required for "
        r"a normal functioning of this module, but found (?P=package)==(?P<have>[\w.+-]+?)\.?$",
        "`pip install '{requirement}'`: {package} {have} is installed.",
        "transformers/utils/versions.py require_version (import-time dependency check)",
        "ImportError: tokenizers>=0.21,<0.22 is required for a normal functioning of this "
        "module, but found tokenizers==0.20.3.",
    ),
    MessageHint(
        "numpy_abi",
        frozenset({_D}),
        r"compiled using NumPy 1\.x cannot be run in\s+NumPy (?P<have>\d[\w.]*)",
        "`pip install 'numpy<2'`: a module built for NumPy 1.x cannot run with NumPy {have} "
        "(or upgrade that module to a build for NumPy 2).",
        "numpy/core/_multiarray_umath.py (NumPy 2.0+)",
        "A module that was compiled using NumPy 1.x cannot be run in NumPy 2.2.6 as it may crash.",
    ),
    MessageHint(
        "numpy_array_api",
        frozenset({_D}),
        r"_ARRAY_API not found",
        "`pip install 'numpy<2'`: a compiled module was built for NumPy 1.x (or upgrade it to "
        "a build for NumPy 2).",
        "numpy C API import (NumPy 2.0+)",
        "ImportError: numpy.core.multiarray failed to import: _ARRAY_API not found",
    ),
    MessageHint(
        "undefined_symbol",
        frozenset({_D, "import_error"}),
        r"(?P<path>/\S+?\.so)\S*: undefined symbol: (?P<symbol>\S+)",
        "Reinstall or rebuild {package} against the installed torch: {file} was built for "
        "another torch/CUDA (undefined symbol {symbol_short}).",
        "Python extension modules (vllm/_C, flash-attn …) built for another torch",
        "ImportError: /usr/local/lib/python3.12/dist-packages/vllm/_C.abi3.so: undefined "
        "symbol: _ZN3c104cuda9SetDeviceEi",
        derive=_extension,
    ),
    # ``No module named 'vllm.X'``: Python imported the package ``vllm`` before it failed on X
    # (a missing ``vllm`` says ``No module named 'vllm'``), so vllm is installed and ``pip
    # install vllm`` changes nothing: what is missing is a part of that installation.
    MessageHint(
        "vllm_shadowed",
        frozenset({"import_error"}),
        r"No module named '(?P<module>vllm(?:\.\w+)+)'; 'vllm' is not a package",
        "`vllm` here is not the installed package but a module of that name (a file "
        "`vllm.py` in the unit's working directory or on `PYTHONPATH`), so {module} cannot be "
        "imported: rename that file, or run the unit from another `WorkingDirectory=`.",
        "Python import system (a module, not a package, imported under the package's name)",
        "ModuleNotFoundError: No module named 'vllm.entrypoints'; 'vllm' is not a package",
    ),
    MessageHint(
        "vllm_extension_missing",
        frozenset({"import_error"}),
        r"No module named '(?P<module>vllm(?:\.\w+)*\._\w*C)'",
        "vLLM's compiled extension {module} is missing: this vllm is not a complete build for "
        "the machine; reinstall the vllm wheel built for the installed torch and CUDA (`pip "
        "install --force-reinstall vllm==VERSION`), or build a source checkout (`pip install "
        "-e .` compiles it); a `vllm/` source directory in the unit's working directory "
        "shadows the installed package.",
        "vllm/_custom_ops.py (0.5–0.33: _C, _moe_C, _rocm_C), vllm/vllm_flash_attn (_vllm_fa2_C)",
        "ModuleNotFoundError: No module named 'vllm._C'",
    ),
    MessageHint(
        "vllm_submodule_missing",
        frozenset({"import_error"}),
        r"No module named '(?P<module>vllm\.[A-Za-z_][\w.]*)'",
        "vLLM is installed but has no module {module}: the code importing it (a plugin, a "
        "model's remote code, a script) was written for another vLLM release, or this vllm is "
        "an incomplete build; check which vllm is installed (`pip show vllm`) and install the "
        "release that code needs, the vllm wheel built for the installed torch and CUDA (`pip "
        "install --force-reinstall vllm==VERSION`); a `vllm/` source directory in the unit's "
        "working directory shadows the installed package.",
        "Python import system; vLLM's modules move between releases (vllm/entrypoints, "
        "vllm/model_executor), plugins import them by name",
        "ModuleNotFoundError: No module named 'vllm.entrypoints.openai.tool_parsers'",
    ),
    MessageHint(
        "missing_module",
        frozenset({"import_error"}),
        r"No module named '(?P<module>[A-Za-z_][\w.]*)'",
        "`pip install {package}` into the unit's environment (module {module} is missing).",
        "Python import system",
        "ModuleNotFoundError: No module named 'cv2'",
        derive=_missing_module,
    ),
    MessageHint(
        "cannot_import_name",
        frozenset({"import_error"}),
        r"cannot import name '(?P<name>\w+)' from '(?P<module>[A-Za-z_][\w.]*)'",
        "{module} has no {name}: the installed {package} is not the version this code "
        "expects; install the version vLLM requires (`pip check` lists conflicts).",
        "Python import system",
        "ImportError: cannot import name 'AutoModelForVision2Seq' from 'transformers'",
        derive=_missing_module,
    ),
    MessageHint(
        "gated_repo",
        frozenset({"model_not_found"}),
        r"(?:GatedRepoError|[Gg]ated repo)"
        r"(?:.*?huggingface\.co/(?:api/models/)?(?P<repo>[\w.-]+/[\w.-]+))?",
        "{repo_name} is gated: accept its licence on huggingface.co with the account whose "
        "token the unit uses (`HF_TOKEN`), or check the model name.",
        "huggingface_hub/utils/_http.py (GatedRepoError)",
        "huggingface_hub.errors.GatedRepoError: 403 Client Error. Cannot access gated repo for "
        "url https://huggingface.co/meta-llama/Llama-3.1-8B-Instruct/resolve/main/config.json.",
        derive=_optional_repo,
    ),
    MessageHint(
        "offline_not_cached",
        frozenset({"model_not_found"}),
        r"LocalEntryNotFoundError|outgoing traffic has been disabled"
        r"|couldn't connect to 'https://huggingface\.co'",
        "The model is not in the local cache and the hub is not reachable (offline mode or no "
        "network): download it first (`huggingface-cli download REPO`) or point the unit at "
        "a local path.",
        "huggingface_hub/file_download.py (HF_HUB_OFFLINE)",
        "huggingface_hub.errors.LocalEntryNotFoundError: Cannot find an appropriate cached "
        "snapshot folder for the specified revision on the local disk and outgoing traffic "
        "has been disabled.",
    ),
    MessageHint(
        "repo_not_found",
        frozenset({"model_not_found"}),
        r"(?:RepositoryNotFoundError|Repository Not Found)"
        r"(?:.*?huggingface\.co/(?:api/models/)?(?P<repo>[\w.-]+/[\w.-]+))?",
        "{repo_name} does not exist on huggingface.co or is private: check the model name, "
        "and `HF_TOKEN` for a private repository.",
        "huggingface_hub/utils/_http.py (RepositoryNotFoundError)",
        "huggingface_hub.errors.RepositoryNotFoundError: 401 Client Error. Repository Not "
        "Found for url: https://huggingface.co/api/models/acme/no-such-model/revision/main.",
        derive=_optional_repo,
    ),
    MessageHint(
        "not_a_model_identifier",
        frozenset({"model_not_found"}),
        r"(?P<path>\S+) is not a local folder and is not a valid model identifier",
        "`{path}` is neither a local directory nor a repository: check the spelling, that its "
        "file system is mounted for the unit, and `HF_TOKEN` for a private repository.",
        "transformers/utils/hub.py",
        "OSError: meta-llama/Llama-3-8B-Instrukt is not a local folder and is not a valid "
        "model identifier listed on 'https://huggingface.co/models'",
    ),
    MessageHint(
        "invalid_model_path",
        frozenset({"model_not_found"}),
        r"Invalid repository ID or local directory specified: '(?P<path>[^']+)'"
        r"|Repo id must be in the form 'repo_name' or 'namespace/repo_name': '(?P<path2>[^']+)'",
        "`{path}` is neither a local directory nor a repository id: check the path (is its "
        "file system mounted for the unit?) and the spelling.",
        "vllm/transformers_utils/config.py (0.9–0.33), huggingface_hub validators",
        "ValueError: Invalid repository ID or local directory specified: '/models'.",
        derive=lambda fields: {"path": fields.get("path") or fields.get("path2") or ""},
    ),
    MessageHint(
        "missing_model_file",
        frozenset({"model_not_found"}),
        r"(?P<path>\S+) does not appear to have a file named (?P<file>[\w.-]+?)\.?(?:\s|$)",
        "`{path}` has no {file}: the download is incomplete, or the path points at the wrong "
        "directory.",
        "transformers/utils/hub.py",
        "OSError: /models/llama does not appear to have a file named config.json. Checkout "
        "'https://huggingface.co//models/llama/tree/None' for available files.",
    ),
    MessageHint(
        "driver_too_old",
        frozenset({"driver_error"}),
        r"NVIDIA driver on your system is too old \(found version (?P<found>\d+)\)",
        "The driver supports CUDA {cuda} at most, older than this PyTorch's CUDA: update the "
        "NVIDIA driver, or install a PyTorch (and vLLM) built for CUDA {cuda}.",
        "torch/cuda/__init__.py",
        "RuntimeError: The NVIDIA driver on your system is too old (found version 11040). "
        "Please update your GPU driver by downloading and installing a new version.",
        derive=_driver_cuda,
    ),
    MessageHint(
        "driver_insufficient",
        frozenset({"driver_error"}),
        r"CUDA driver version is insufficient for CUDA runtime version"
        r"|cudaErrorInsufficientDriver",
        "The driver is older than this environment's CUDA runtime: update the NVIDIA driver, "
        "or install a PyTorch and vLLM built for the CUDA version `nvidia-smi` shows.",
        "CUDA runtime (cudaErrorInsufficientDriver)",
        "RuntimeError: CUDA driver version is insufficient for CUDA runtime version",
    ),
    MessageHint(
        "driver_library_mismatch",
        frozenset({"driver_error"}),
        r"[Dd]river/library version mismatch",
        "The loaded kernel module and the driver's libraries differ (a driver update without "
        "a reboot): reboot the host, or unload and reload the `nvidia` kernel modules.",
        "NVML (nvmlInit), nvidia-smi",
        "pynvml.NVMLError_LibRmVersionMismatch: RM has detected an NVML/RM version mismatch. "
        "Failed to initialize NVML: Driver/library version mismatch",
    ),
    MessageHint(
        "forward_compat",
        frozenset({"driver_error"}),
        r"forward compatibility was attempted on non supported HW",
        "The CUDA forward-compatibility libraries (`cuda-compat`) are loaded on a GPU that "
        "does not support them: remove them from `LD_LIBRARY_PATH`, or update the driver.",
        "CUDA runtime (cudaErrorCompatNotSupportedOnDevice)",
        "RuntimeError: Unexpected error from cudaGetDeviceCount(). Error 804: forward "
        "compatibility was attempted on non supported HW",
    ),
    MessageHint(
        "no_driver",
        frozenset({"driver_error"}),
        r"Found no NVIDIA driver on your system",
        "No NVIDIA driver is visible to the unit: install it on the host, and pass the GPUs "
        "into a container (`--gpus all`, the NVIDIA container runtime).",
        "torch/cuda/__init__.py",
        "RuntimeError: Found no NVIDIA driver on your system. Please check that you have an "
        "NVIDIA GPU and installed a driver from http://www.nvidia.com/Download/index.aspx",
    ),
    MessageHint(
        "kv_cache_tokens",
        frozenset({"kv_cache_insufficient"}),
        r"max seq len \((?P<needed>\d+)\) is larger than the maximum number of tokens that can "
        r"be stored in KV cache \((?P<available>\d+)\)",
        "One sequence of {needed} tokens needs more KV cache than fits ({available} tokens): "
        "lower `--max-model-len` to {available} or less, or raise `--gpu-memory-utilization`.",
        "vllm/worker/worker.py raise_if_cache_size_invalid (0.4–0.10), v1 kv_cache_utils",
        "ValueError: The model's max seq len (4096) is larger than the maximum number of "
        "tokens that can be stored in KV cache (3664). Try increasing `gpu_memory_utilization`"
        " or decreasing `max_model_len` when initializing the engine.",
    ),
    MessageHint(
        "kv_cache_memory",
        frozenset({"kv_cache_insufficient"}),
        r"max seq len \((?P<length>\d+)\),? \((?P<needed>" + _SIZE + r") KV cache is needed, "
        r"which is larger than the available KV cache memory \((?P<available>" + _SIZE + r")\)"
        r"(?:\. Based on the available memory, the estimated maximum model length is "
        r"(?P<estimate>\d+))?",
        "A sequence of {length} tokens needs {needed} of KV cache, {available} is available: "
        "{fit}raise `--gpu-memory-utilization`, or add GPUs.",
        "vllm/v1/core/kv_cache_utils.py check_enough_kv_cache_memory (0.9–0.33)",
        "ValueError: To serve at least one request with the models's max seq len (16384), "
        "(3.0 GiB KV cache is needed, which is larger than the available KV cache memory "
        "(1.87 GiB). Based on the available memory, the estimated maximum model length is "
        "10224. Try increasing `gpu_memory_utilization` or decreasing `max_model_len` when "
        "initializing the engine.",
        derive=_kv_fit,
    ),
    MessageHint(
        "kv_cache_no_blocks",
        frozenset({"kv_cache_insufficient"}),
        r"No available memory for the cache blocks",
        "Nothing was left for the KV cache after the weights and activations: raise "
        "`--gpu-memory-utilization`, lower `--max-num-seqs`, or add GPUs "
        "(`--tensor-parallel-size`).",
        "vllm/v1/core/kv_cache_utils.py, vllm/worker/worker.py",
        "ValueError: No available memory for the cache blocks. Try increasing "
        "`gpu_memory_utilization` when initializing the engine.",
    ),
    MessageHint(
        "free_memory_below_utilization",
        frozenset({"gpu_memory_in_use"}),
        r"Free memory on device(?: (?P<device>\S+))? \((?P<free>[\d.]+)/(?P<total>[\d.]+) GiB\)"
        r" on startup is less than desired GPU memory utilization \((?P<util>[\d.]+), "
        r"(?P<wanted>[\d.]+) GiB\)",
        "{where} had {free} GiB free of {total} GiB; `--gpu-memory-utilization {util}` wants "
        "{wanted} GiB: other processes hold the rest. Stop them, or lower "
        "`--gpu-memory-utilization` to {fits} or less.",
        "vllm/v1/worker/gpu_worker.py (0.9.1–0.33)",
        "ValueError: Free memory on device cuda:0 (54.34/79.18 GiB) on startup is less than "
        "desired GPU memory utilization (0.92, 72.84 GiB). Decrease GPU memory utilization or "
        "reduce GPU memory used by other processes.",
        derive=_utilization_fit,
        names_gpu_processes=True,
    ),
    MessageHint(
        "warmup_oom",
        frozenset({"cuda_oom"}),
        r"out of memory occurred when warming up sampler with (?P<requests>\d+) dummy requests",
        "Warming up the sampler with {requests} requests ran out of memory: lower "
        "`--max-num-seqs` below {requests}, or lower `--gpu-memory-utilization`.",
        "vllm/v1/worker/gpu_model_runner.py _dummy_sampler_run (0.8–0.33)",
        "RuntimeError: CUDA out of memory occurred when warming up sampler with 256 dummy "
        "requests. Please try lowering `max_num_seqs` or `gpu_memory_utilization` when "
        "initializing the engine.",
    ),
    MessageHint(
        "oom_allocation",
        frozenset({"cuda_oom"}),
        r"Tried to allocate (?P<asked>" + _SIZE + r")\. GPU (?P<gpu>\d+) has a total capacity "
        r"of (?P<total>" + _SIZE + r") of which (?P<free>" + _SIZE + r") is free\."
        r"(?: Process (?P<pid>\d+) has (?P<held>" + _SIZE + r") memory in use\.)?",
        "GPU {gpu} had {free} free of {total} when {asked} more was asked{other}.",
        "PyTorch caching allocator (CUDA and HIP)",
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 60.00 MiB. GPU 2 has a "
        "total capacity of 79.22 GiB of which 2.06 MiB is free. Process 3888866 has 71.11 GiB "
        "memory in use. Including non-PyTorch memory, this process has 8.08 GiB memory in use.",
        derive=_oom_other,
        with_cause_hint=True,
        names_gpu_processes=True,
    ),
    MessageHint(
        "oom_allocation_classic",
        frozenset({"cuda_oom"}),
        r"Tried to allocate (?P<asked>" + _SIZE + r") \((?P<device>GPU|NPU|XPU|HPU) "
        r"(?P<gpu>\d+); (?P<total>" + _SIZE + r") total capacity; (?P<held>" + _SIZE + r") "
        r"already allocated;(?: [^;]*;)*? (?P<free>" + _SIZE + r") free",
        "{device} {gpu} had {free} free of {total} ({held} held by this process) when {asked} "
        "more was asked.",
        "PyTorch < 2.1 caching allocator; torch_npu (Ascend)",
        "RuntimeError: NPU out of memory. Tried to allocate 11.50 GiB (NPU 15; 60.97 GiB total "
        "capacity; 55.29 GiB already allocated; 55.29 GiB current active; 4.64 GiB free; 55.51 "
        "GiB reserved in total by PyTorch)",
        with_cause_hint=True,
        names_gpu_processes=True,
    ),
    MessageHint(
        "npu_runtime_error",
        frozenset({"cuda_error", "driver_error"}),
        r"NPU function error: (?P<function>[\w:]+)(?:\([^)]*\))?, error code is (?P<code>\d+)",
        "The Ascend runtime failed in {function} (error code {code}, in CANN's error code "
        "list): check the NPU with `npu-smi info`, and that CANN, the driver and torch_npu are "
        "versions made for each other.",
        "torch_npu (Ascend CANN runtime)",
        "RuntimeError: npuSynchronizeDevice:build/CMakeFiles/torch_npu.dir/compiler_depend.ts:"
        "508 NPU function error: AclrtSynchronizeDeviceWithTimeout, error code is 507013",
    ),
    MessageHint(
        "level_zero_error",
        frozenset({"cuda_error", "cuda_oom"}),
        r"level_zero backend failed with error: \d+ \((?P<code>UR_RESULT_\w+)\)",
        "Intel's Level Zero runtime failed with {code}: check the device with `xpu-smi` and "
        "that the oneAPI runtime matches the PyTorch XPU build; OUT_OF_RESOURCES is usually "
        "device memory (lower `--gpu-memory-utilization` or `--max-num-seqs`).",
        "Unified Runtime / Level Zero (PyTorch XPU)",
        "RuntimeError: level_zero backend failed with error: 40 (UR_RESULT_ERROR_OUT_OF_RESOURCES)",
    ),
    MessageHint(
        "sigkill",
        frozenset({"killed"}),
        r"(?:^|\s)Killed(?:\s|$)|\bsignal KILL\b|status=9/KILL|\bcode 137$",
        "Killed by SIGKILL: most often the kernel's OOM killer (host RAM or the unit's "
        "`MemoryMax` ran out, not GPU memory); " + _OOM_KILLER,
        "bash jobs.c (`Killed`), systemd (`code=killed, status=9/KILL`), docker (exit 137)",
        "./serve.sh: line 12:  4242 Killed                  python -m vllm.entrypoints.openai."
        "api_server --model /models/llama",
    ),
    MessageHint(
        "port_taken",
        frozenset({"port_in_use"}),
        r"bind(?:ing)? (?:on|to) address \('(?P<host>[^']*)', (?P<port>\d+)\)",
        "Port {port} on {host} is taken by another process (often the previous incarnation "
        "still exiting): `ss -ltnp 'sport = :{port}'` shows which; stop it, or give this unit "
        "another `--port`.",
        "uvicorn/server.py startup (vLLM's API server)",
        "OSError: [Errno 98] error while attempting to bind on address ('0.0.0.0', 8000): "
        "address already in use",
    ),
    MessageHint(
        "linker_library",
        frozenset({"compile_error"}),
        r"cannot find -l(?P<library>\w+)",
        "The linker cannot find lib{library}.so (Triton links its helpers against the driver's "
        "library): add the lib{library}.so link next to lib{library}.so.1, or set "
        "`LIBRARY_PATH` to its directory.",
        "triton/runtime/build.py (gcc/ld)",
        "/usr/bin/ld: cannot find -lcuda: No such file or directory",
    ),
    MessageHint(
        "ninja_build",
        frozenset({"jit_build_error"}),
        r"Command '\['ninja'.*?'-C', '(?P<directory>[^']+)'",
        "The JIT build in {directory} failed (the compiler's error is in the lines before): "
        "check `nvcc` and `ninja` against the CUDA version, clear that directory, or install "
        "the prebuilt kernels (`flashinfer-jit-cache` of flashinfer's version).",
        "flashinfer/jit/cpp_ext.py, torch/utils/cpp_extension.py",
        "subprocess.CalledProcessError: Command '['ninja', '-v', '-C', "
        "'/home/user/.cache/flashinfer/86/cached_ops', '-f', "
        "'/home/user/.cache/flashinfer/86/cached_ops/sampling/build.ninja']' returned non-zero "
        "exit status 1.",
    ),
    MessageHint(
        "heads_not_divisible",
        frozenset({"config_error"}),
        r"(?:attention heads|heads) \((?P<heads>\d+)\) must be divisible by tensor parallel "
        r"size \((?P<tp>\d+)\)",
        "`--tensor-parallel-size {tp}` does not divide the model's {heads} attention heads: "
        "use a divisor of {heads}.",
        "vllm/config/model.py verify_with_parallel_config",
        "ValueError: Total number of attention heads (64) must be divisible by tensor "
        "parallel size (3).",
    ),
    MessageHint(
        "max_model_len_too_long",
        frozenset({"config_error"}),
        r"User-specified max_model_len \((?P<asked>\d+)\) is greater than the derived "
        r"max_model_len \((?:\w+)=(?P<limit>\d+)",
        "`--max-model-len {asked}` exceeds the model's {limit}: lower it "
        "(`VLLM_ALLOW_LONG_MAX_MODEL_LEN=1` overrides the check, at your own risk).",
        "vllm/config/model.py _get_and_verify_max_len",
        "ValueError: User-specified max_model_len (300000) is greater than the derived "
        "max_model_len (max_position_embeddings=262144 or model_max_length=None in model's "
        "config.json).",
    ),
    MessageHint(
        "no_bfloat16",
        frozenset({"config_error"}),
        r"Bfloat16 is only supported on GPUs with compute capability of at least 8\.0\. "
        r"Your (?P<gpu_name>.+?) GPU has compute capability (?P<capability>\d+\.\d+)",
        "The {gpu_name} (compute capability {capability}) has no bfloat16: add `--dtype half`.",
        "vllm/platforms/cuda.py check_if_supports_dtype",
        "ValueError: Bfloat16 is only supported on GPUs with compute capability of at least "
        "8.0. Your Tesla T4 GPU has compute capability 7.5. You can use float16 instead by "
        "explicitly setting the `dtype` flag in CLI, for example: --dtype=half.",
    ),
    MessageHint(
        "unrecognized_arguments",
        frozenset({"config_error"}),
        r"unrecognized arguments: (?P<arguments>.+)",
        "This vLLM version does not know `{arguments}`: remove it, or install the version "
        "that has it.",
        "argparse (vllm serve)",
        "vllm serve: error: unrecognized arguments: --kv-cache-memory-bytes 8G",
    ),
    MessageHint(
        "unsupported_architecture",
        frozenset({"unsupported_model"}),
        r"Model architectures \[(?P<architectures>[^\]]*)\] (?:are not supported|failed)",
        "This vLLM does not support {architectures}: upgrade vLLM to a release that lists it, "
        "or look for an import error above that hid the model class.",
        "vllm/model_executor/models/registry.py",
        "ValueError: Model architectures ['Qwen3NextForCausalLM'] are not supported for now.",
        derive=lambda fields: {"architectures": fields["architectures"].replace("'", "")},
    ),
)
"""Well-known message shapes, most specific first."""

_COMPILED = tuple(re.compile(row.pattern) for row in MESSAGE_HINTS)


# --------------------------------------------------------------------------- benign notes

BENIGN_NOTES: tuple[BenignNote, ...] = (
    BenignNote(
        DEFAULT_BENIGN_PATTERNS[0],
        "harmless: only gpt-oss with the Triton MoE kernels needs them, and vLLM falls back; "
        "printed for any model because the module is imported",
        "vllm/model_executor/layers/fused_moe/gpt_oss_triton_kernels_moe.py (0.10.1.1–0.19)",
        "Failed to import Triton kernels. Please make sure your triton version is compatible. "
        "Error: cannot import name 'SparseMatrix' from 'triton_kernels.tensor'",
    ),
    BenignNote(
        DEFAULT_BENIGN_PATTERNS[1],
        "harmless: the ROCm build falls back to its legacy Triton kernels",
        "vllm/model_executor/layers/fused_moe/gpt_oss_triton_kernels_moe.py (0.17–0.19)",
        "Using legacy triton_kernels on ROCm",
    ),
    BenignNote(
        DEFAULT_BENIGN_PATTERNS[2],
        "harmless: flashinfer 0.7 downloads the cubins it needs instead of failing",
        "flashinfer/jit/env.py (flashinfer 0.7)",
        "Ignoring incompatible flashinfer-cubin package (0.6.3 != 0.7.0)",
    ),
)
"""Why each default benign pattern is not a cause (same order as the patterns)."""

_BENIGN = tuple((note, re.compile(note.pattern)) for note in BENIGN_NOTES)
_CONFIGURED_BENIGN = "matches a `benign_patterns` entry of the configuration: counted, not blamed"


# --------------------------------------------------------------------------- lookup


def runbook_anchor(cause: str) -> str:
    """The runbook section of a cause on the daemon's page: ``/runbook#<cause>``."""
    return f"{RUNBOOK_PATH}#{cause}"


def _cause_row(crash: CrashInfo, context: HintContext | None) -> CauseHint:
    """The first row of the crash's cause whose condition and phases fit (``unknown``'s
    default for a cause without rows)."""
    cause = crash.cause.value
    rows = [row for row in CAUSE_HINTS if row.cause == cause] or [
        row for row in CAUSE_HINTS if row.cause == "unknown" and not row.phases and not row.when
    ]
    for row in rows:
        if row.phases and crash.phase not in row.phases:
            continue
        if row.when and not CONDITIONS[row.when].holds(crash, context):
            continue
        return row
    return rows[-1]  # unreachable: every cause has a default row (tests check)


def _cause_text(crash: CrashInfo, context: HintContext | None) -> str:
    """The text of ``_cause_row``, its fields filled."""
    return _cause_row(crash, context).text.format_map(_context_fields(crash, context))


def _bounded(value: str | None) -> str:
    if value is None:
        return ""
    value = " ".join(value.split())
    return value if len(value) <= _MAX_FIELD else value[: _MAX_FIELD - 1] + "…"


def _gib(size: int) -> str:
    return f"{size / _GIB:.1f} GiB"


def _holders(context: HintContext | None) -> str:
    """The other processes holding GPU memory, largest first (at most a few): on the unit's
    GPUs when they are known (its processes now, the GPUs its incarnations used at start),
    else on the whole host."""
    if context is None:
        return ""
    own = {usage.gpu for usage in context.gpu_processes if usage.unit == context.unit}
    for used in context.held_by_others_at_start.values():
        own.update(used)
    others: dict[tuple[int, str | None], dict[int, int]] = {}
    for usage in context.gpu_processes:
        if context.unit is not None and usage.unit == context.unit:
            continue
        if own and usage.gpu not in own:
            continue
        per_gpu = others.setdefault((usage.pid, usage.unit), {})
        per_gpu[usage.gpu] = per_gpu.get(usage.gpu, 0) + usage.used_memory_bytes
    if not others:
        return ""
    ranked = sorted(others.items(), key=lambda item: (-sum(item[1].values()), item[0][0]))
    named = []
    for (pid, unit), per_gpu in ranked[:_MAX_HOLDERS]:
        owner = f"{unit} (pid {pid})" if unit else f"pid {pid}"
        gpus = ", ".join(str(index) for index in sorted(per_gpu))
        label = "GPU" if len(per_gpu) == 1 else "GPUs"
        named.append(f"{owner} holds {_gib(sum(per_gpu.values()))} on {label} {gpus}")
    more = len(ranked) - _MAX_HOLDERS
    tail = f", and {more} more" if more > 0 else ""
    where = "on its GPUs" if own else "on this host"
    return f" Now {where}: " + "; ".join(named) + tail + "."


def hint_for(crash: CrashInfo, context: HintContext | None = None) -> Hint:
    """The hint for a crash: the first message row that matches, else the cause's row.

    Args:
        crash: the crash (its cause, exception class, message and phase are read).
        context: what the daemon knows beyond the log (other GPU processes), if anything.

    Returns:
        A hint; every cause has one (an unknown cause value gets ``unknown``'s text).
    """
    cause = crash.cause.value
    text = f"{crash.exception}: {crash.message}" if crash.exception else crash.message
    evidence = bool(_cause_row(crash, context).when)  # a condition held: it outranks
    for row, pattern in zip(MESSAGE_HINTS, _COMPILED, strict=True):
        if cause not in row.causes or (evidence and not row.with_cause_hint):
            continue
        found = pattern.search(text)
        if found is None:
            continue
        captured = {key: _bounded(value) for key, value in found.groupdict().items()}
        if not all(has_shape(key, value) for key, value in captured.items() if value):
            continue  # a value of the wrong shape never enters a command (value_shapes)
        fields = _context_fields(crash, context)
        fields.update(captured)
        if row.derive is not None:
            fields.update(row.derive(fields))  # built from bounded fields
        hint = row.template.format_map(fields)
        if row.with_cause_hint:
            hint = f"{hint} {_cause_text(crash, context)}"
        if row.names_gpu_processes:
            hint += _holders(context)
        return Hint(hint, cause, row.name, runbook_anchor(cause))
    hint = _cause_text(crash, context)
    if cause in ("gpu_memory_in_use", "cuda_oom") or evidence:
        hint += _holders(context)
    return Hint(hint, cause, f"cause:{cause}", runbook_anchor(cause))


def explain_benign(line: str, notes: Sequence[BenignNote] = BENIGN_NOTES) -> str:
    """Why a line the tracker counted as benign is not a cause (for ``replay`` and the page)."""
    for note, pattern in _BENIGN if notes is BENIGN_NOTES else _compile_notes(notes):
        if pattern.search(line):
            return note.why
    return _CONFIGURED_BENIGN


def _compile_notes(notes: Sequence[BenignNote]) -> tuple[tuple[BenignNote, re.Pattern[str]], ...]:
    return tuple((note, re.compile(note.pattern)) for note in notes)
