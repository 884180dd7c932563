"""Generate golden journal incident 001 with the real tools.

    python -m tests.support.make_incident tests/golden/journal/001-kimi-k25-flashinfer-restart.jsonl

Writes the incident below through ``JournalWriter`` (systemd-journal-remote) into a journal
file in a temporary directory, reads it back with ``journalctl --file=F -o json -a -n all``
and saves journalctl's raw output lines to OUT. Cursors (``s=…`` file id, ``x=…`` hash) and
JSON key order come from the tools, so a regenerated file differs in those and nothing else.

The incident, host ``llm-two``, unit ``vllm-kimi-k25.service``, TP=8, 2026-11-28 UTC:

* invocation A (23:35:58): vLLM 0.17.1 starts, Worker_TP0 starts loading at 23:36:21, then
  Worker_TP7 dies at 23:36:40 with ``RuntimeError: flashinfer-cubin version (0.6.3) does not
  match flashinfer version (0.6.4)…`` (worker lines carry an ANSI-coloured prefix, so
  journald stores them as byte arrays); EngineCore's ``WorkerProc initialization failed``
  wrapper and the APIServer's ``Engine core initialization failed`` traceback follow; the
  main process exits 1 at 23:37:20; systemd schedules a restart;
* invocation B (23:37:31): a benign Triton-kernels import ERROR, 64 safetensors shards over
  ~9 minutes (``\\r``-prefixed progress bars from Worker_TP0), compile, KV cache, CUDA
  graphs, API server ready at ~23:49:00;
* late delivery: the last four lines of A's Worker_TP7 traceback (the root cause included)
  are written after B's ``Started`` entry, still with A's invocation id and ~23:36:40 times.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from datetime import UTC, datetime, timedelta
from pathlib import Path

from tests.support.journal_writer import (
    JOURNAL_REMOTE,
    MESSAGE_ID_FAILED,
    MESSAGE_ID_MAIN_PROCESS_EXITED,
    MESSAGE_ID_RESOURCES,
    MESSAGE_ID_RESTART_SCHEDULED,
    MESSAGE_ID_STARTED,
    MESSAGE_ID_STARTING,
    MESSAGE_ID_STOPPED,
    JournalWriter,
    manager_line,
    read_journal,
    service_line,
    to_realtime_us,
)

__all__ = ["INVOCATION_A", "INVOCATION_B", "build_incident", "main"]

HOST = "llm-two"
UNIT = "vllm-kimi-k25.service"
DESCRIPTION = "vLLM Kimi K2.5"
INVOCATION_A = "3f1c9a7be2d44c0a9b61f0d2c8e4a517"
INVOCATION_B = "b7e2d95c14a84f6e8d3c2a1f0e9b7d64"
BOOT_ID = "9c2e7f41d0a84b6e9f3a51c7d2e8b046"
BOOTED_AT = datetime(2026, 11, 20, 8, 12, 3, tzinfo=UTC)
MODEL = "/shared/kimi-k2.5-nvfp4"
SITE = "/opt/vllm/lib/python3.12/site-packages"
IDENTIFIER = "vllm"  # ExecStart=/opt/vllm/bin/vllm serve …; children share the stream
CYAN, RESET = "\x1b[1;36m", "\x1b[0;0m"
DAY = datetime(2026, 11, 28, tzinfo=UTC)

Entry = dict[str, str | bytes | int]


def _at(clock: str) -> datetime:
    """``HH:MM:SS[.ffffff]`` on the incident day, UTC."""
    return datetime.fromisoformat(f"{DAY.date().isoformat()}T{clock}+00:00")


class _Incident:
    """Collects entries in write order; every line gets a strictly later time than the last
    one of its own stream unless a time is forced (late delivery)."""

    def __init__(self) -> None:
        self.entries: list[Entry] = []
        self._last = datetime.min.replace(tzinfo=UTC)

    def _time(self, when: datetime, *, forced: bool = False) -> datetime:
        if not forced:
            when = max(when, self._last + timedelta(microseconds=173))
            self._last = when
        return when

    def _stamp(self, when: datetime) -> dict[str, str | bytes | int]:
        return {"__MONOTONIC_TIMESTAMP": to_realtime_us(when) - to_realtime_us(BOOTED_AT)}

    def manager(
        self,
        clock: str,
        invocation: str,
        message: str,
        message_id: str | None,
        priority: int = 6,
        **fields: str | int,
    ) -> None:
        when = self._time(_at(clock))
        extra = self._stamp(when) | fields
        self.entries.append(
            manager_line(
                UNIT,
                invocation,
                message,
                message_id,
                to_realtime_us(when),
                priority=priority,
                hostname=HOST,
                boot_id=BOOT_ID,
                extra=extra,
            )
        )

    def vllm(
        self,
        clock: str,
        invocation: str,
        role: str,
        pid: int,
        lines: list[str],
        *,
        level: str | None = "INFO",
        src: str = "",
        color: bool = False,
        comm: str = "vllm",
        forced: bool = False,
    ) -> None:
        """vLLM log lines: ``(ROLE pid=N) LEVEL MM-DD HH:MM:SS [src] text``, one entry each.

        ``level=None`` writes raw lines (``print``/uncaught tracebacks) with the prefix only.
        """
        when = _at(clock)
        for index, text in enumerate(lines):
            moment = when + timedelta(microseconds=211 * index) if forced else when
            moment = self._time(moment, forced=forced)
            prefix = f"({role} pid={pid})"
            if color:
                prefix = f"{CYAN}{prefix}{RESET}"
            if level is None:
                message = f"{prefix} {text}" if text else prefix
            else:
                stamp = moment.strftime("%m-%d %H:%M:%S")
                message = f"{prefix} {level} {stamp} [{src}] {text}"
            self.raw(moment, invocation, pid, message, comm=comm, forced=True)

    def raw(
        self,
        when: datetime,
        invocation: str,
        pid: int,
        message: str,
        *,
        comm: str = "vllm",
        forced: bool = False,
    ) -> None:
        moment = self._time(when, forced=forced)
        body: str | bytes = message
        extra = self._stamp(moment) | {"_COMM": comm}
        self.entries.append(
            service_line(
                UNIT,
                invocation,
                pid,
                body,
                to_realtime_us(moment),
                IDENTIFIER,
                hostname=HOST,
                boot_id=BOOT_ID,
                extra=extra,
            )
        )


# ---------------------------------------------------------------------------------------
# Invocation A: crash on the flashinfer-cubin / flashinfer version check

A_API, A_CORE = 221200, 221290
A_RESOURCE_TRACKER = 221288
A_WORKERS = {rank: 221343 + rank for rank in range(8)}  # Worker_TP0 … Worker_TP7

WORKER_TRACEBACK_HEAD = [
    "WorkerProc failed to start.",
    "Traceback (most recent call last):",
    f'  File "{SITE}/vllm/v1/executor/multiproc_executor.py", line 754, in worker_main',
    "    worker = WorkerProc(*args, **kwargs)",
    "             ^^^^^^^^^^^^^^^^^^^^^^^^^^^",
    f'  File "{SITE}/vllm/v1/executor/multiproc_executor.py", line 590, in __init__',
    "    self.worker.load_model()",
    f'  File "{SITE}/vllm/v1/worker/gpu_worker.py", line 289, in load_model',
    "    self.model_runner.load_model(eep_scale_up=eep_scale_up)",
    f'  File "{SITE}/vllm/v1/worker/gpu_model_runner.py", line 3441, in load_model',
    "    self.model = model_loader.load_model(",
    "                 ^^^^^^^^^^^^^^^^^^^^^^^^",
    f'  File "{SITE}/vllm/model_executor/model_loader/base_loader.py", line 50, in load_model',
    "    model = initialize_model(",
    "            ^^^^^^^^^^^^^^^^^",
    f'  File "{SITE}/vllm/model_executor/model_loader/utils.py", line 55, in initialize_model',
    "    return model_class(vllm_config=vllm_config, prefix=prefix)",
    "           ^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^",
    f'  File "{SITE}/vllm/model_executor/layers/quantization/modelopt.py", line 1497, in __init__',
    "    if has_flashinfer_cutlass_fused_moe():",
    "       ^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^",
    f'  File "{SITE}/vllm/utils/flashinfer.py", line 203, in has_flashinfer_cutlass_fused_moe',
    "    if not has_flashinfer_moe():",
    "           ^^^^^^^^^^^^^^^^^^^^",
    f'  File "{SITE}/vllm/utils/flashinfer.py", line 62, in has_flashinfer',
    '    importlib.import_module("flashinfer")',
    f'  File "{SITE}/flashinfer/__init__.py", line 23, in <module>',
    "    from .jit import env as jit_env",
    f'  File "{SITE}/flashinfer/jit/__init__.py", line 22, in <module>',
    "    from .env import *",
    f'  File "{SITE}/flashinfer/jit/env.py", line 82, in <module>',
]
WORKER_TRACEBACK_LATE = [  # the last four lines, delivered after invocation B started
    "    _check_cubin_version()",
    f'  File "{SITE}/flashinfer/jit/env.py", line 71, in _check_cubin_version',
    "    raise RuntimeError(",
    "RuntimeError: flashinfer-cubin version (0.6.3) does not match flashinfer version (0.6.4). "
    "Please install the same version of both packages. Set FLASHINFER_DISABLE_VERSION_CHECK=1 "
    "to bypass this check.",
]

ENGINE_TRACEBACK = [
    "EngineCore failed to start.",
    "Traceback (most recent call last):",
    f'  File "{SITE}/vllm/v1/engine/core.py", line 1079, in run_engine_core',
    "    engine_core = EngineCoreProc(*args, engine_index=dp_rank, **kwargs)",
    "                  ^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^",
    f'  File "{SITE}/vllm/v1/engine/core.py", line 840, in __init__',
    "    super().__init__(",
    f'  File "{SITE}/vllm/v1/engine/core.py", line 110, in __init__',
    "    self.model_executor = executor_class(vllm_config)",
    "                          ^^^^^^^^^^^^^^^^^^^^^^^^^^^",
    f'  File "{SITE}/vllm/v1/executor/abstract.py", line 103, in __init__',
    "    self._init_executor()",
    f'  File "{SITE}/vllm/v1/executor/multiproc_executor.py", line 194, in _init_executor',
    "    self.workers = WorkerProc.wait_for_ready(unready_workers)",
    "                   ^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^",
    f'  File "{SITE}/vllm/v1/executor/multiproc_executor.py", line 675, in wait_for_ready',
    "    raise e from None",
    "Exception: WorkerProc initialization failed due to an exception in a background process. "
    "See stack trace for root cause.",
]

API_TRACEBACK = [
    "Traceback (most recent call last):",
    '  File "/opt/vllm/bin/vllm", line 10, in <module>',
    "    sys.exit(main())",
    "             ^^^^^^",
    f'  File "{SITE}/vllm/entrypoints/cli/main.py", line 73, in main',
    "    args.dispatch_function(args)",
    f'  File "{SITE}/vllm/entrypoints/cli/serve.py", line 111, in cmd',
    "    uvloop.run(run_server(args))",
    f'  File "{SITE}/uvloop/__init__.py", line 96, in run',
    "    return __asyncio.run(",
    "           ^^^^^^^^^^^^^^",
    '  File "/usr/lib/python3.12/asyncio/runners.py", line 195, in run',
    "    return runner.run(main)",
    "           ^^^^^^^^^^^^^^^^",
    f'  File "{SITE}/vllm/entrypoints/openai/api_server.py", line 1902, in run_server',
    "    await run_server_worker(listen_address, sock, args, **uvicorn_kwargs)",
    f'  File "{SITE}/vllm/entrypoints/openai/api_server.py", line 1918, in run_server_worker',
    "    async with build_async_engine_client(",
    f'  File "{SITE}/vllm/entrypoints/openai/api_server.py", line 182, in '
    "build_async_engine_client_from_engine_args",
    "    async_llm = AsyncLLM.from_vllm_config(",
    "                ^^^^^^^^^^^^^^^^^^^^^^^^^^",
    f'  File "{SITE}/vllm/v1/engine/core_client.py", line 97, in make_async_mp_client',
    "    return AsyncMPClient(*client_args)",
    f'  File "{SITE}/vllm/v1/engine/utils.py", line 938, in wait_for_engine_startup',
    "    raise RuntimeError(",
    "RuntimeError: Engine core initialization failed. See root cause above. "
    "Failed core proc(s): {}",
]


def _banner(inc: _Incident, clock: str, invocation: str, pid: int) -> None:
    inc.vllm(
        clock,
        invocation,
        "APIServer",
        pid,
        [
            "",
            "       █     █     █▄   ▄█",
            " ▄▄ ▄█ █     █     █ ▀▄▀ █  version 0.17.1",
            f"  █▄█▀ █     █     █     █  model   {MODEL}",
            "   ▀▀  ▀▀▀▀▀ ▀▀▀▀▀ ▀     ▀",
            "",
        ],
        src="utils.py:302",
    )
    inc.vllm(
        clock,
        invocation,
        "APIServer",
        pid,
        [
            f"non-default args: {{'model_tag': '{MODEL}', 'host': '0.0.0.0', 'port': 8000, "
            f"'model': '{MODEL}', 'trust_remote_code': True, 'max_model_len': 262144, "
            "'tensor_parallel_size': 8, 'gpu_memory_utilization': 0.92}",
        ],
        src="utils.py:238",
    )


def _engine_start(inc: _Incident, clock: str, invocation: str, api: int) -> None:
    inc.vllm(
        clock,
        invocation,
        "APIServer",
        api,
        [
            "Resolved architecture: KimiK25ForConditionalGeneration",
        ],
        src="model.py:541",
    )
    inc.vllm(
        clock, invocation, "APIServer", api, ["Using max model len 262144"], src="model.py:1561"
    )
    inc.vllm(
        clock,
        invocation,
        "APIServer",
        api,
        [
            "Chunked prefill is enabled with max_num_batched_tokens=8192.",
        ],
        src="scheduler.py:231",
    )


def _engine_config(inc: _Incident, clock: str, invocation: str, core: int) -> None:
    inc.vllm(
        clock,
        invocation,
        "EngineCore_DP0",
        core,
        [
            f"Initializing a V1 LLM engine (v0.17.1) with config: model='{MODEL}', "
            f"speculative_config=None, tokenizer='{MODEL}', skip_tokenizer_init=False, "
            "tokenizer_mode=auto, revision=None, tokenizer_revision=None, trust_remote_code=True, "
            "dtype=torch.bfloat16, max_seq_len=262144, download_dir=None, load_format=auto, "
            "tensor_parallel_size=8, pipeline_parallel_size=1, data_parallel_size=1, "
            "disable_custom_all_reduce=False, quantization=modelopt_fp4, enforce_eager=False, "
            "kv_cache_dtype=auto, device_config=cuda, seed=0, served_model_name=" + MODEL + ", "
            "enable_prefix_caching=True, enable_chunked_prefill=True",
        ],
        src="core.py:93",
        comm="VLLM::EngineCor",
    )


def _workers_init(inc: _Incident, clock: str, invocation: str, workers: dict[int, int]) -> None:
    for rank, pid in workers.items():
        inc.vllm(
            clock,
            invocation,
            f"Worker_TP{rank}",
            pid,
            [
                f"world_size=8 rank={rank} local_rank={rank} "
                "distributed_init_method=tcp://127.0.0.1:41517 backend=nccl",
            ],
            src="parallel_state.py:1325",
            color=True,
            comm="VLLM::Worker_TP",
        )
    inc.vllm(
        clock,
        invocation,
        "Worker_TP0",
        workers[0],
        [
            "rank 0 in world size 8 is assigned as DP rank 0, PP rank 0, PCP rank 0, TP rank 0, "
            "EP rank 0",
        ],
        src="parallel_state.py:1573",
        color=True,
        comm="VLLM::Worker_TP",
    )


def _invocation_a(inc: _Incident) -> None:
    inv = INVOCATION_A
    inc.manager("23:35:58.104233", inv, f"Starting {UNIT} - {DESCRIPTION}...", MESSAGE_ID_STARTING)
    inc.manager("23:35:58.107911", inv, f"Started {UNIT} - {DESCRIPTION}.", MESSAGE_ID_STARTED)
    _banner(inc, "23:36:02.418000", inv, A_API)
    _engine_start(inc, "23:36:02.903000", inv, A_API)
    _engine_config(inc, "23:36:08.230000", inv, A_CORE)
    _workers_init(inc, "23:36:17.512000", inv, A_WORKERS)
    inc.vllm(
        "23:36:21.044000",
        inv,
        "Worker_TP0",
        A_WORKERS[0],
        [
            f"Starting to load model {MODEL}...",
        ],
        src="gpu_model_runner.py:3425",
        color=True,
        comm="VLLM::Worker_TP",
    )
    inc.vllm(
        "23:36:40.311000",
        inv,
        "Worker_TP7",
        A_WORKERS[7],
        WORKER_TRACEBACK_HEAD,
        level="ERROR",
        src="multiproc_executor.py:783",
        color=True,
        comm="VLLM::Worker_TP",
    )
    inc.vllm(
        "23:36:41.020000",
        inv,
        "EngineCore_DP0",
        A_CORE,
        ENGINE_TRACEBACK,
        level="ERROR",
        src="core.py:1102",
        comm="VLLM::EngineCor",
    )
    inc.vllm("23:36:42.377000", inv, "APIServer", A_API, API_TRACEBACK, level=None)
    inc.raw(
        _at("23:37:19.662000"),
        inv,
        A_RESOURCE_TRACKER,
        "/usr/lib/python3.12/multiprocessing/resource_tracker.py:279: UserWarning: "
        "resource_tracker: There appear to be 1 leaked shared_memory objects to clean up "
        "at shutdown",
        comm="python3",
    )
    inc.manager(
        "23:37:20.118402",
        inv,
        f"{UNIT}: Main process exited, code=exited, status=1/FAILURE",
        MESSAGE_ID_MAIN_PROCESS_EXITED,
        priority=5,
        EXIT_CODE="exited",
        EXIT_STATUS=1,
    )
    inc.manager(
        "23:37:20.118902",
        inv,
        f"{UNIT}: Failed with result 'exit-code'.",
        MESSAGE_ID_FAILED,
        priority=4,
        UNIT_RESULT="exit-code",
    )
    inc.manager(
        "23:37:20.121011",
        inv,
        f"{UNIT}: Consumed 6min 41.214s CPU time.",
        MESSAGE_ID_RESOURCES,
        CPU_USAGE_NSEC=401214000000,
    )
    inc.manager(
        "23:37:31.204117",
        inv,
        f"{UNIT}: Scheduled restart job, restart counter is at 1.",
        MESSAGE_ID_RESTART_SCHEDULED,
        N_RESTARTS=1,
    )
    inc.manager("23:37:31.206330", inv, f"Stopped {UNIT} - {DESCRIPTION}.", MESSAGE_ID_STOPPED)


# ---------------------------------------------------------------------------------------
# Invocation B: slow but successful start

B_API, B_CORE = 222500, 222590
B_WORKERS = {rank: 222636 + rank for rank in range(8)}
SHARDS = 64
LOAD_START = _at("23:37:55.402000")
LOAD_SECONDS = 537.31


def _mmss(seconds: float) -> str:
    whole = int(seconds)
    return f"{whole // 60:02d}:{whole % 60:02d}"


def _shard_bars(inc: _Incident, inv: str) -> None:
    """tqdm bars as vLLM 0.17 prints them, one ``\\r``-prefixed entry per update."""
    pid = B_WORKERS[0]
    # uneven per-shard times (page cache, bigger expert shards) summing to LOAD_SECONDS
    weights = [1.0 + 0.35 * ((i * 37) % 11) / 10 for i in range(SHARDS)]
    scale = LOAD_SECONDS / sum(weights)
    done_at = 0.0
    inc.raw(
        LOAD_START,
        inv,
        pid,
        "\rLoading safetensors checkpoint shards:   0% Completed | 0/64 [00:00<?, ?it/s]",
        comm="VLLM::Worker_TP",
    )
    for shard in range(1, SHARDS + 1):
        done_at += weights[shard - 1] * scale
        rate = done_at / shard
        remaining = rate * (SHARDS - shard)
        bar = (
            f"\rLoading safetensors checkpoint shards: {100 * shard / SHARDS:3.0f}% Completed | "
            f"{shard}/{SHARDS} [{_mmss(done_at)}<{_mmss(remaining)}, {rate:5.2f}s/it]"
        )
        moment = LOAD_START + timedelta(seconds=done_at)
        inc.raw(moment, inv, pid, bar, comm="VLLM::Worker_TP")
        if shard == SHARDS:  # tqdm's close() prints the final state once more
            inc.raw(moment + timedelta(milliseconds=2), inv, pid, bar, comm="VLLM::Worker_TP")
    inc.vllm(
        "23:46:52.713000",
        inv,
        "Worker_TP0",
        pid,
        [""],
        level=None,
        color=True,
        comm="VLLM::Worker_TP",
    )


def _graph_bars(
    inc: _Incident, inv: str, start: str, label: str, total: int, seconds: float
) -> datetime:
    pid = B_WORKERS[0]
    begin = _at(start)
    steps = [0, total // 4, total // 2, 3 * total // 4, total]
    for step in steps:
        elapsed = seconds * step / total
        rate = f"{total / seconds:5.2f}it/s" if step else "?it/s"
        left = _mmss(seconds - elapsed) if step else "?"
        filled = round(10 * step / total)
        bar = "█" * filled + " " * (10 - filled)
        inc.raw(
            begin + timedelta(seconds=elapsed),
            inv,
            pid,
            f"\rCapturing CUDA graphs ({label}): {100 * step / total:3.0f}%|{bar}| "
            f"{step}/{total} [{_mmss(elapsed)}<{left}, {rate}]",
            comm="VLLM::Worker_TP",
        )
    return begin + timedelta(seconds=seconds)


def _invocation_b(inc: _Incident) -> None:
    inv = INVOCATION_B
    inc.manager("23:37:31.209846", inv, f"Starting {UNIT} - {DESCRIPTION}...", MESSAGE_ID_STARTING)
    inc.manager("23:37:31.214563", inv, f"Started {UNIT} - {DESCRIPTION}.", MESSAGE_ID_STARTED)

    # LATE DELIVERY: the end of invocation A's root-cause traceback, flushed only now.
    late_at = _at("23:36:40.311000") + timedelta(microseconds=173 * len(WORKER_TRACEBACK_HEAD))
    inc.vllm(
        late_at.strftime("%H:%M:%S.%f"),
        INVOCATION_A,
        "Worker_TP7",
        A_WORKERS[7],
        WORKER_TRACEBACK_LATE,
        level="ERROR",
        src="multiproc_executor.py:783",
        color=True,
        comm="VLLM::Worker_TP",
        forced=True,
    )

    _banner(inc, "23:37:35.860000", inv, B_API)
    inc.vllm(
        "23:37:40.122000",
        inv,
        "APIServer",
        B_API,
        [
            "Failed to import Triton kernels. Please make sure your triton version is compatible. "
            "Error: cannot import name 'SparseMatrix' from 'triton_kernels.tensor' "
            "(/usr/local/lib/python3.12/dist-packages/triton_kernels/tensor.py)",
        ],
        level="ERROR",
        src="gpt_oss_triton_kernels_moe.py:60",
    )
    _engine_start(inc, "23:37:40.540000", inv, B_API)
    _engine_config(inc, "23:37:44.615000", inv, B_CORE)
    _workers_init(inc, "23:37:50.930000", inv, B_WORKERS)
    tp0 = B_WORKERS[0]
    inc.vllm(
        "23:37:52.118000",
        inv,
        "Worker_TP0",
        tp0,
        [
            f"Starting to load model {MODEL}...",
        ],
        src="gpu_model_runner.py:3425",
        color=True,
        comm="VLLM::Worker_TP",
    )
    inc.vllm(
        "23:37:53.407000",
        inv,
        "Worker_TP0",
        tp0,
        [
            "Using FLASHINFER_MLA attention backend out of potential backends: ('FLASHINFER_MLA', "
            "'CUTLASS_MLA', 'FLASH_ATTN_MLA', 'TRITON_MLA')",
        ],
        src="cuda.py:367",
        color=True,
        comm="VLLM::Worker_TP",
    )
    inc.vllm(
        "23:37:53.912000",
        inv,
        "Worker_TP0",
        tp0,
        [
            "Using FlashInfer CUTLASS kernels for ModelOptNvFp4FusedMoE.",
        ],
        src="modelopt.py:1502",
        color=True,
        comm="VLLM::Worker_TP",
    )
    _shard_bars(inc, inv)
    inc.vllm(
        "23:46:52.901000",
        inv,
        "Worker_TP0",
        tp0,
        ["Loading weights took 538.20 seconds"],
        src="default_loader.py:291",
        color=True,
        comm="VLLM::Worker_TP",
    )
    inc.vllm(
        "23:46:53.120000",
        inv,
        "Worker_TP0",
        tp0,
        [
            "Model loading took 71.43 GiB memory and 541.002315 seconds",
        ],
        src="gpu_model_runner.py:3530",
        color=True,
        comm="VLLM::Worker_TP",
    )
    inc.vllm(
        "23:47:04.880000",
        inv,
        "Worker_TP0",
        tp0,
        [
            "Using cache directory: /root/.cache/vllm/torch_compile_cache/5d1f0c7a9e/rank_0_0/"
            "backbone for vLLM's torch.compile",
        ],
        src="backends.py:812",
        color=True,
        comm="VLLM::Worker_TP",
    )
    inc.vllm(
        "23:47:04.881000",
        inv,
        "Worker_TP0",
        tp0,
        ["Dynamo bytecode transform time: 11.87 s"],
        src="backends.py:872",
        color=True,
        comm="VLLM::Worker_TP",
    )
    inc.vllm(
        "23:47:22.310000",
        inv,
        "Worker_TP0",
        tp0,
        [
            "Compiling a graph for compile range (1, 8192) takes 15.42 s",
        ],
        src="backends.py:393",
        color=True,
        comm="VLLM::Worker_TP",
    )
    inc.vllm(
        "23:47:24.502000",
        inv,
        "Worker_TP0",
        tp0,
        ["torch.compile takes 29.61 s in total"],
        src="monitor.py:34",
        color=True,
        comm="VLLM::Worker_TP",
    )
    inc.vllm(
        "23:47:26.640000",
        inv,
        "Worker_TP0",
        tp0,
        [
            "Initial profiling/warmup run took 1.92 s",
        ],
        src="monitor.py:81",
        color=True,
        comm="VLLM::Worker_TP",
    )
    inc.vllm(
        "23:47:31.077000",
        inv,
        "Worker_TP0",
        tp0,
        ["Available KV cache memory: 52.10 GiB"],
        src="gpu_worker.py:356",
        color=True,
        comm="VLLM::Worker_TP",
    )
    inc.vllm(
        "23:47:32.015000",
        inv,
        "EngineCore_DP0",
        B_CORE,
        [
            "GPU KV cache size: 1,312,640 tokens",
        ],
        src="kv_cache_utils.py:1291",
        comm="VLLM::EngineCor",
    )
    inc.vllm(
        "23:47:32.016000",
        inv,
        "EngineCore_DP0",
        B_CORE,
        [
            "Maximum concurrency for 262,144 tokens per request: 5.01x",
        ],
        src="kv_cache_utils.py:1296",
        comm="VLLM::EngineCor",
    )
    end = _graph_bars(inc, inv, "23:47:33.410000", "mixed prefill-decode, PIECEWISE", 51, 41.7)
    _graph_bars(
        inc, inv, (end + timedelta(seconds=0.4)).strftime("%H:%M:%S.%f"), "decode, FULL", 35, 21.5
    )
    inc.vllm(
        "23:48:38.209000",
        inv,
        "Worker_TP0",
        tp0,
        [
            "Graph capturing finished in 64 secs, took 3.41 GiB",
        ],
        src="gpu_model_runner.py:4587",
        color=True,
        comm="VLLM::Worker_TP",
    )
    inc.vllm(
        "23:48:39.540000",
        inv,
        "EngineCore_DP0",
        B_CORE,
        [
            "init engine (profile, create kv cache, warmup model) took 105.87 s "
            "(compilation: 29.61 s)",
        ],
        src="core.py:247",
        comm="VLLM::EngineCor",
    )
    inc.vllm(
        "23:48:52.004000",
        inv,
        "APIServer",
        B_API,
        ["Supported tasks: ['generate']"],
        src="api_server.py:1658",
    )
    inc.vllm(
        "23:48:58.731000",
        inv,
        "APIServer",
        B_API,
        [
            "Starting vLLM API server 0 on http://0.0.0.0:8000",
        ],
        src="api_server.py:1995",
    )
    inc.vllm(
        "23:48:58.732000", inv, "APIServer", B_API, ["Available routes are:"], src="launcher.py:37"
    )
    routes = [
        ("/openapi.json", "HEAD, GET"),
        ("/docs", "HEAD, GET"),
        ("/health", "GET"),
        ("/load", "GET"),
        ("/tokenize", "POST"),
        ("/detokenize", "POST"),
        ("/v1/models", "GET"),
        ("/version", "GET"),
        ("/v1/responses", "POST"),
        ("/v1/chat/completions", "POST"),
        ("/v1/completions", "POST"),
        ("/metrics", "GET"),
    ]
    inc.vllm(
        "23:48:58.733000",
        inv,
        "APIServer",
        B_API,
        [f"Route: {path}, Methods: {methods}" for path, methods in routes],
        src="launcher.py:46",
    )
    inc.vllm(
        "23:48:59.602000",
        inv,
        "APIServer",
        B_API,
        [
            f"INFO:     Started server process [{B_API}]",
            "INFO:     Waiting for application startup.",
            "INFO:     Application startup complete.",
        ],
        level=None,
    )


def build_incident() -> list[Entry]:
    """The incident's entries in the order they are written to the journal file."""
    inc = _Incident()
    _invocation_a(inc)
    _invocation_b(inc)
    return inc.entries


def main(argv: list[str] | None = None) -> int:
    """Write the incident with journal-remote, read it back with journalctl, save OUT."""
    parser = argparse.ArgumentParser(prog="python -m tests.support.make_incident")
    parser.add_argument("out", type=Path, help="where to write journalctl -o json lines")
    parser.add_argument("--journal-remote", default=JOURNAL_REMOTE)
    parser.add_argument("--journalctl", default="journalctl")
    args = parser.parse_args(argv)
    entries = build_incident()
    with tempfile.TemporaryDirectory(prefix="incident-") as directory:
        with JournalWriter(
            directory, "incident", binary=args.journal_remote, journalctl=args.journalctl
        ) as writer:
            writer.write(entries)
        lines = read_journal(writer.path, journalctl=args.journalctl)
    if len(lines) != len(entries):
        print(f"wrote {len(entries)} entries but journalctl read {len(lines)}", file=sys.stderr)
        return 1
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_bytes(b"".join(line + b"\n" for line in lines))
    print(f"{args.out}: {len(lines)} entries", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
