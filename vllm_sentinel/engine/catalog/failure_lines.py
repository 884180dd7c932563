"""Lines that say a process failed without a Python exception (core: pure, data).

vLLM's own failures arrive as Python tracebacks or as its logger's lines (``markers``). Many
real crashes do not: C++ and CUDA code print a line and abort, build tools print their error,
and when a process dies of a signal only the program that started it says so. This module is
the vocabulary of those lines, one table row per *shape* of line (never one log's sentence):

* **native** — C++/CUDA/NCCL code: the C++ runtime's ``terminate called after throwing`` and
  its ``what():`` line, the ``Failed: Cuda error <file>:<line> '<reason>'`` of vLLM's custom
  kernels and all-reduce (``CUDACHECK``), NCCL's ``NCCL WARN Cuda failure '<reason>'``, c10's
  glog error lines, a bare ``CUDA error:``/``HIP error:`` line;
* **build** — linker and ninja output of JIT builds (Triton/inductor, FlashInfer, torch
  extensions), whose Python exception is often cut off;
* **exit** — the process manager's word: a shell's job notice (``./serve.sh: line 12:  4242
  Killed  python -m vllm…``, a bare ``Killed``, ``Segmentation fault (core dumped)``), a
  container runtime's ``exited with code 137``, ``kubectl``'s ``command terminated with exit
  code``, CPython's ``Fatal Python error: Segmentation fault``; a batch scheduler's (Slurm's
  ``*** JOB N ON host CANCELLED AT … DUE TO TIME LIMIT ***`` and srun's task report, PBS's
  ``=>> PBS: job killed: walltime …``, LSF's ``TERM_RUNLIMIT``). These end the incarnation, in
  any phase: the process is gone. A scheduler's time limit, preemption, requeue or cancel is
  the operator's scheduler stopping the job (``outcome`` stopped); a node failure, a memory
  limit or a signal is a crash.

Where a row's cause depends on what the line says (the reason of a CUDA failure), ``cause`` is
``None`` and the reason is classified by ``causes.classify_exception``, so every accelerator's
vocabulary (``out of memory``, ``illegal memory access``…) is written once, in ``causes``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from enum import Enum
from typing import Final, NamedTuple

from vllm_sentinel.engine.catalog.causes import CrashCause, EvidenceKind, classify_exception
from vllm_sentinel.engine.catalog.phases import Outcome

__all__ = [
    "FAILURE_LINES",
    "Effect",
    "FailureLine",
    "FailureMatch",
    "classify_failure_line",
    "signal_cause",
]


class Effect(Enum):
    """What a failure line does to its incarnation besides adding evidence."""

    EVIDENCE = 0  # only evidence: the process may survive (a warning, a build step)
    FATAL = 1  # the process is aborting: a crash is pending, confirmed by its exit
    ENDS = 2  # the process is gone: the incarnation ends now, in any phase
    STOP = 3  # the process was asked to stop (a signal handler's report): no evidence


@dataclass(frozen=True, slots=True)
class FailureLine:
    """One shape of failure line.

    Attributes:
        name: a short name for tests and docs.
        pattern: regex searched (``re.search``) in the line body; ``reason`` names the part
            that says what failed, when the cause depends on it.
        cause: the cause the shape always means, or ``None`` to classify ``reason`` (the
            whole line without one) with the cause rules, ``fallback`` when nothing matches.
        kind: how direct the evidence is.
        effect: what it does to the incarnation.
        source: the program and file that print it.
        example: a real line of this shape (tests check each row against its example).
        fallback: the cause when ``cause`` is ``None`` and the reason matches no rule.
        survivable: the line may be one the process outlives (a caller logging an error it
            then handles): if the process makes progress afterwards, it is noise
            (``CrashBook.survived``).
        recognized: the line belongs to vLLM's stack (vLLM itself, torch's C++, NCCL): a log
            whose only lines are of this shape is still a vLLM log in ``replay``.
        outcome: how an ``ENDS`` row ends the incarnation when its line gives no signal word
            or exit status: ``CRASHED``, or ``STOPPED`` for a scheduler's stop (time limit,
            cancel).
    """

    name: str
    pattern: str
    cause: CrashCause | None
    kind: EvidenceKind
    effect: Effect
    source: str
    example: str
    fallback: CrashCause = CrashCause.UNKNOWN
    recognized: bool = False
    outcome: Outcome = Outcome.CRASHED
    survivable: bool = False
    regex: re.Pattern[str] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "regex", re.compile(self.pattern))


class FailureMatch(NamedTuple):
    """A failure line read: the row, the cause, how it ends the process, and its text."""

    row: FailureLine
    cause: CrashCause
    outcome: Outcome
    message: str


_C: Final = CrashCause
_K: Final = EvidenceKind
_E: Final = Effect
# Signal descriptions as strsignal(3) words them, which bash prints for a job killed by one.
_SIGNAL_WORDS: Final = (
    r"Killed|Segmentation fault|Aborted|Bus error|Illegal instruction"
    r"|Floating point exception|Terminated|Hangup|Trace/breakpoint trap"
)

FAILURE_LINES: tuple[FailureLine, ...] = (
    # --- native: C++ / CUDA / NCCL ---------------------------------------------------------
    FailureLine(
        "cxx_terminate",
        r"^terminate called after throwing an instance of '(?P<reason>[^']{1,200})'",
        None,
        _K.WRAPPER,
        _E.FATAL,
        "libstdc++ verbose terminate handler (an uncaught C++ exception: c10, NCCL, CUDA)",
        "terminate called after throwing an instance of 'c10::Error'",
    ),
    FailureLine(
        "cxx_what",
        r"^\s*what\(\):\s+(?P<reason>\S.*)",
        None,
        _K.REAL,
        _E.FATAL,
        "libstdc++ verbose terminate handler: the exception's what() after 'terminate called'",
        "  what():  CUDA error: device-side assert triggered",
    ),
    FailureLine(
        "cuda_check_failed",
        r"^Failed[:,] (?:Cuda|CUDA|HIP|hip) error \S+:\d+ '(?P<reason>[^']*)'",
        None,
        _K.REAL,
        _E.FATAL,
        "CUDACHECK macros of vLLM's csrc/custom_all_reduce.cuh and CUDA samples "
        "(printf then exit(EXIT_FAILURE))",
        "Failed: Cuda error /workspace/csrc/custom_all_reduce.cuh:164 'invalid argument'",
        fallback=_C.CUDA_ERROR,
        recognized=True,
    ),
    FailureLine(
        "nccl_check_failed",
        r"^Failed[:,] NCCL error \S+:\d+ '(?P<reason>[^']*)'",
        _C.NCCL_ERROR,
        _K.REAL,
        _E.FATAL,
        "NCCLCHECK macros beside CUDACHECK (printf then exit(EXIT_FAILURE))",
        "Failed, NCCL error /workspace/csrc/custom_all_reduce_test.cu:52 'unhandled cuda error'",
        recognized=True,
    ),
    FailureLine(
        "nccl_cuda_failure",
        r"\bNCCL WARN (?:Cuda|CUDA|HIP) failure(?: \d+)? '(?P<reason>[^']*)'",
        None,
        _K.REAL,
        _E.EVIDENCE,
        "NCCL src/include/checks.h CUDACHECK: WARN(\"Cuda failure '%s'\")",
        "host1:7:7 [0] enqueue.cc:1556 NCCL WARN Cuda failure 'out of memory'",
        fallback=_C.NCCL_ERROR,
        recognized=True,
    ),
    FailureLine(
        "nccl_warn",
        r"\bNCCL WARN (?P<reason>.*(?:[Ff]ail|[Ee]rror|[Tt]imeout|[Aa]bort).*)",
        _C.NCCL_ERROR,
        _K.NOISE,  # often followed by the real error; alone it still says "NCCL failed"
        _E.EVIDENCE,
        "NCCL src/debug.cc (host:pid:tid [rank] file:line NCCL WARN …)",
        "host1:235:1021 [1] misc/socket.cc:484 NCCL WARN socketStartConnect: Connect to "
        "10.0.0.2<45107> failed : Software caused connection abort",
        recognized=True,
    ),
    FailureLine(
        "c10_watchdog_terminated",
        r"^(?:\[?rank\d+\]:)?\[E\d{3,4} [\d:.]+(?: +\d+)? [\w.]+:\d+\] (?:\[PG [^\]]*\] )?"
        r"(?P<reason>Process group watchdog thread terminated with exception: .+)",
        None,
        _K.REAL,
        _E.FATAL,
        "torch ProcessGroupNCCL watchdog (c10d): it terminates the process after logging this",
        "[rank0]:[E811 01:10:50.482336908 ProcessGroupNCCL.cpp:1515] [PG 3 Rank 0] Process "
        "group watchdog thread terminated with exception: CUDA error: an illegal memory access "
        "was encountered",
        fallback=_C.NCCL_ERROR,
        recognized=True,
    ),
    FailureLine(
        "c10_error_log",
        r"^(?:\[?rank\d+\]:)?\[E\d{3,4} [\d:.]+(?: +\d+)? [\w.]+:\d+\] (?P<reason>.+)",
        None,
        _K.REAL,
        _E.EVIDENCE,
        "c10/glog error lines of torch's C++ (ProcessGroupNCCL, CUDA caching allocator); the "
        "thread id is absent in torch 2.4's format",
        "[rank0]:[E1110 01:25:24.123456 5536 ProcessGroupNCCL.cpp:616] [Rank 0] Watchdog "
        "caught collective operation timeout: WorkNCCL(SeqNum=1, OpType=ALLREDUCE) ran for "
        "600000 milliseconds before timing out.",
        recognized=True,
    ),
    FailureLine(
        "device_critical_error",
        r"^(?P<reason>Synapse detected a device critical error\b.*)",
        _C.CUDA_ERROR,
        _K.REAL,
        _E.FATAL,
        "Habana Synapse runtime (Gaudi HPU): the process is killed seconds later",
        "Synapse detected a device critical error that requires a restart. Killing process in 5 "
        "seconds (hl: 6) 10:29:11 [No progress error]",
    ),
    FailureLine(
        "device_runtime_error",
        r"^(?P<reason>(?:CUDA|HIP|cuda|hip) error: \S.*)",
        None,
        _K.REAL,
        _E.EVIDENCE,
        "c10 CUDA/HIP error text printed on its own (C10_CUDA_CHECK message, raw stderr)",
        "CUDA error: an illegal memory access was encountered",
        fallback=_C.CUDA_ERROR,
    ),
    FailureLine(
        "signal_handler_report",
        r"\*\*\* SIG(?:TERM|INT|HUP) received at time=\d+",
        None,
        _K.SIGNAL,
        _E.STOP,
        "absl/glog failure-signal handler of Ray and other C++ runtimes (logging.cc)",
        "*** SIGTERM received at time=1748300290 on cpu 8 ***",
    ),
    # --- a vLLM config rejected, in another logger's words --------------------------------
    FailureLine(
        "config_validation_summary",
        r"\b\d{1,4} validation errors? for [A-Z]\w{0,60}Config\b",
        None,
        _K.REAL,
        _E.EVIDENCE,
        "pydantic-core's ValidationError title ('N validation error(s) for <class>') of a vLLM "
        "config dataclass (ModelConfig, VllmConfig, …, vllm/config/), stated in a caller's own "
        "log line (a serving wrapper's `logger.error(f\"…: {e}\")`) without the exception's "
        "class; pydantic's field error ('Value error, …') follows on the next lines",
        "pydantic_core._pydantic_core.ValidationError: 1 validation error for ModelConfig",
        fallback=_C.CONFIG_ERROR,
        survivable=True,
    ),
    # --- build tools -----------------------------------------------------------------------
    FailureLine(
        "linker_error",
        r"^/\S*ld(?:\.\w+)?: cannot find -l\w+|^collect2: error:",
        _C.COMPILE_ERROR,
        _K.NOISE,
        _E.EVIDENCE,
        "linker output of Triton/inductor builds (e.g. cuda_utils needs libcuda.so)",
        "/usr/bin/ld: cannot find -lcuda: No such file or directory",
    ),
    FailureLine(
        "ninja_failed",
        r"^ninja: build stopped|^FAILED: (?:\[code=\d+\] )?\S+\.(?:o|cuda\.o|so)\b"
        r"|^error: command '[^']+' failed|^nvcc fatal\s*:",
        _C.JIT_BUILD_ERROR,
        _K.NOISE,
        _E.EVIDENCE,
        "ninja / setuptools / nvcc output of JIT extension builds (FlashInfer, torch)",
        "ninja: build stopped: subcommand failed.",
    ),
    # --- exit: the process manager's word --------------------------------------------------
    FailureLine(
        "shell_job_signal",
        r"^(?:\S+: line \d+: +|\[\d+\][+-]? +)?(?:\d+ +)?(?P<reason>" + _SIGNAL_WORDS + r")"
        r"(?: \(core dumped\))?(?:\s{2,}\S.*)?$",
        _C.KILLED,
        _K.SIGNAL,
        _E.ENDS,
        "bash jobs.c: a job killed by a signal (strsignal words; ' (core dumped)' on a dump)",
        "./serve.sh: line 12:  4242 Killed                  python -m vllm.entrypoints."
        "openai.api_server --model /models/llama",
    ),
    FailureLine(
        "container_exit",
        r"^(?:\S+ )?exited with code (?P<code>\d{1,3})$|^command terminated with exit code "
        r"(?P<code2>\d{1,3})$",
        _C.KILLED,
        _K.SIGNAL,
        _E.ENDS,
        "docker compose (`<service> exited with code N`), kubectl exec/logs",
        "vllm-1 exited with code 137",
    ),
    # --- exit: batch schedulers (the job's process ended by its scheduler) -----------------
    FailureLine(
        "slurm_cancelled",
        r"^(?:\S+: (?:error: )?)?\*\*\* (?:JOB|STEP) [\w.+]+ (?:ON \S+ )?CANCELLED AT \S+"
        r"(?: DUE TO (?:TIME LIMIT|PREEMPTION|JOB REQUEUE))? \*\*\*",
        None,
        _K.SIGNAL,
        _E.ENDS,
        "Slurm src/slurmd/slurmstepd/req.c (time limit, preemption, requeue, scancel) and "
        "srun's step timeout, every release since 2.x",
        "slurmstepd: error: *** JOB 5858 ON gpuh05 CANCELLED AT 2025-12-21T02:31:17 DUE TO "
        "TIME LIMIT ***",
        outcome=Outcome.STOPPED,
    ),
    FailureLine(
        "slurm_node_failure",
        r"^(?:\S+: (?:error: )?)?\*\*\* (?:JOB|STEP) [\w.+]+ (?:ON \S+ )?(?P<reason>CANCELLED "
        r"AT \S+ DUE TO NODE FAILURE|FAILED \(non-zero exit code|UNCORRECTABLE MEMORY ERROR)",
        _C.KILLED,
        _K.SIGNAL,
        _E.ENDS,
        "Slurm src/slurmd/slurmstepd/req.c (node failure, step failure, uncorrectable memory "
        "error)",
        "slurmstepd: error: *** JOB 77 ON gpu3 CANCELLED AT 2025-02-02T02:02:02 DUE TO NODE "
        "FAILURE, SEE SLURMCTLD LOG FOR DETAILS ***",
    ),
    FailureLine(
        "slurm_oom_kill",
        r"^(?:\S+: (?:error: )?)?Detected \d+ oom[_-]kill event",
        _C.HOST_OOM,
        _K.REAL,
        _E.ENDS,
        "Slurm task/cgroup plugin at step end (cgroup v1 `oom-kill event(s) in step`, v2 "
        "`oom_kill event in StepId=`)",
        "slurmstepd: error: Detected 1 oom_kill event in StepId=4242.batch. Some of the step "
        "tasks have been OOM Killed.",
    ),
    FailureLine(
        "srun_task_oom",
        r"^srun: error: \S+: tasks? [\d,-]+: Out Of Memory$",
        _C.HOST_OOM,
        _K.REAL,
        _E.ENDS,
        "Slurm srun launch plugin _task_finish (`%s: %s %s: Out Of Memory`)",
        "srun: error: node3: task 0: Out Of Memory",
    ),
    FailureLine(
        "srun_task_exit",
        r"^srun: error: \S+: tasks? [\d,-]+: (?:Exited with exit code (?P<code>\d{1,3})|"
        r"(?P<reason>" + _SIGNAL_WORDS + r")(?: \(core dumped\))?)$",
        _C.KILLED,
        _K.SIGNAL,
        _E.ENDS,
        "Slurm srun launch plugin _task_finish (`%s: %s %s: %s%s` with strsignal, `Exited with "
        "exit code %d`)",
        "srun: error: gpu-a-12: task 1: Killed",
    ),
    FailureLine(
        "pbs_time_limit",
        r"^(?:=>> )?PBS: job killed: (?:walltime|cput) \d+ exceeded limit \d+",
        None,
        _K.SIGNAL,
        _E.ENDS,
        "OpenPBS / Torque pbs_mom (mom_main.c: a job over its walltime or CPU time limit)",
        "=>> PBS: job killed: walltime 7236 exceeded limit 7200",
        outcome=Outcome.STOPPED,
    ),
    FailureLine(
        "pbs_memory_limit",
        r"^(?:=>> )?PBS: job killed: [pv]?mem \d+\w* exceeded limit",
        _C.HOST_OOM,
        _K.REAL,
        _E.ENDS,
        "OpenPBS / Torque pbs_mom (a job over its mem/vmem/pmem limit)",
        "=>> PBS: job killed: mem 33554432kb exceeded limit 16777216kb",
    ),
    FailureLine(
        "lsf_stop",
        r"^TERM_(?:RUNLIMIT|CPULIMIT|OWNER|PREEMPT|REQUEUE_OWNER|REQUEUE_ADMIN|ADMIN|"
        r"FORCE_OWNER|FORCE_ADMIN|DEADLINE|WINDOW): job killed\b",
        None,
        _K.SIGNAL,
        _E.ENDS,
        "IBM Spectrum LSF job report (lsb.events TERM_* exit reasons: limits, owner, admin)",
        "TERM_RUNLIMIT: job killed after reaching LSF run time limit.",
        outcome=Outcome.STOPPED,
    ),
    FailureLine(
        "lsf_memory_limit",
        r"^TERM_(?:MEMLIMIT|SWAP): job killed\b",
        _C.HOST_OOM,
        _K.REAL,
        _E.ENDS,
        "IBM Spectrum LSF job report (memory or swap limit)",
        "TERM_MEMLIMIT: job killed after reaching LSF memory usage limit.",
    ),
    FailureLine(
        "lsf_exit",
        r"^Exited with (?:signal termination: (?P<reason>" + _SIGNAL_WORDS + r"|\d+)|exit code "
        r"(?P<code>\d{1,3}))\.$",
        _C.KILLED,
        _K.SIGNAL,
        _E.ENDS,
        "IBM Spectrum LSF job report (lsf sbatchd: `Exited with signal termination: %s`, "
        "strsignal)",
        "Exited with signal termination: Killed.",
    ),
    FailureLine(
        "vllm_not_installed",
        r"^\S*python[\d.]*: (?:Error while finding module specification for '(?:vllm[\w.]*)' "
        r"\((?P<reason>[^)]*)\)|No module named '?vllm\b)"
        r"|^(?:\S+: )?(?:line \d+: )?vllm: (?:command )?not found$",
        _C.IMPORT_ERROR,
        _K.REAL,
        _E.ENDS,
        "CPython runpy (`python -m vllm…` without vLLM installed), the shell (`vllm` not on PATH)",
        "/srv/app/.venv/bin/python: Error while finding module specification for "
        "'vllm.entrypoints.openai.api_server' (ModuleNotFoundError: No module named 'vllm')",
        recognized=True,
    ),
    FailureLine(
        "python_fatal_signal",
        r"^Fatal Python error: (?P<reason>Segmentation fault|Aborted|Bus error|Floating point "
        r"exception|Illegal instruction)",
        _C.KILLED,
        _K.SIGNAL,
        _E.ENDS,
        "CPython faulthandler (PYTHONFAULTHANDLER, vLLM workers)",
        "Fatal Python error: Segmentation fault",
    ),
)
"""Every failure-line shape; the first row that matches a line wins."""

# The cheap test every failure line passes before the table is searched (raw lines are common:
# progress bars, native stack frames, Python warnings). Most shapes begin the line: one
# anchored match fails at its first characters; the few that do not are found by substrings.
_LINE_START: Final = re.compile(
    r"\s*what\(\)|terminate called|Failed[:,] |\[?rank\d+\]:\[E|\[E\d|(?:CUDA|HIP|cuda|hip) "
    r"error: |Synapse detected|collect2:|ninja:|FAILED: |error: command|nvcc fatal|\[\d+\][+-]? "
    r"|(?:\d+ +)?(?:" + _SIGNAL_WORDS + r")|command terminated|Fatal Python error|srun: error: "
    r"|(?:=>> )?PBS: job killed|TERM_|Exited with "
)


def _may_fail(body: str) -> bool:
    """True when ``body`` may be a failure line (the cheap test before the table)."""
    return (
        _LINE_START.match(body) is not None
        or "NCCL WARN" in body
        or "received at time=" in body
        or ": line " in body
        or "exited with code" in body
        or "not found" in body
        or "cannot find -l" in body
        or "module specification" in body
        or "No module named" in body
        or "*** JOB " in body
        or "*** STEP " in body
        or "kill event" in body
        or " validation error" in body
    )


_STOP_WORDS: Final = frozenset({"Terminated", "Hangup"})
_STOP_CODES: Final = frozenset({0, 143, 129})  # exit 0, SIGTERM, SIGHUP: somebody stopped it


def signal_cause(code: int) -> tuple[CrashCause, Outcome]:
    """The cause and outcome a process exit status (a shell's or container's) implies."""
    if code in _STOP_CODES:
        return CrashCause.UNKNOWN, Outcome.STOPPED
    if code > 128:
        return CrashCause.KILLED, Outcome.CRASHED  # died of signal code - 128
    return CrashCause.UNKNOWN, Outcome.CRASHED  # exited with an error status: see above it


def classify_failure_line(body: str) -> FailureMatch | None:
    """Read a line that is not vLLM's as a failure line, or ``None``.

    Args:
        body: the line after any prefix (vLLM's process prefix, a log wrapper).

    Returns:
        The row, the cause (the row's, or its reason classified; for exit rows with a status
        the status decides), how an ``ENDS`` row ends the incarnation, and the line itself as
        the evidence text.
    """
    if not _may_fail(body):
        return None
    for row in FAILURE_LINES:
        found = row.regex.search(body)
        if found is None:
            continue
        groups = found.groupdict()
        code_text = groups.get("code") or groups.get("code2")
        if code_text is not None:
            cause, outcome = signal_cause(int(code_text))
            return FailureMatch(row, cause, outcome, body)
        reason = groups.get("reason")
        if row.effect is Effect.ENDS and (reason in _STOP_WORDS or row.outcome is Outcome.STOPPED):
            return FailureMatch(row, CrashCause.UNKNOWN, Outcome.STOPPED, body)
        if row.cause is not None:
            return FailureMatch(row, row.cause, Outcome.CRASHED, body)
        cause, _ = classify_exception("", reason if reason is not None else body)
        if cause is CrashCause.UNKNOWN:
            cause = row.fallback
        return FailureMatch(row, cause, Outcome.CRASHED, body)
    return None
