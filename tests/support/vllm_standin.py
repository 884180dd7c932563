"""A stand-in for a ``vllm serve`` service: real processes writing a vLLM 0.17 log, compressed.

Run as a systemd unit's ``ExecStart`` (``tests/journald``), it behaves like vLLM's process tree
as journald and systemd see it:

* the **main process** is the API server (``APIServer pid=N``); it starts an **EngineCore**
  process and **workers** (``Worker_TP0`` …), each a separate process that names itself
  (``/proc/self/comm``: ``VLLM::EngineCor``, ``VLLM::Worker_TP``) and writes its own lines to the
  stdout it inherited — the unit's one journal stream, so journald stamps every line with the
  main process's ``_PID`` and only vLLM's ``(ROLE pid=N)`` prefix tells the writers apart, as on
  a host;
* the lines are those of a real vLLM 0.17.1 start (the golden incident's text,
  ``tests/support/make_incident.py``), with their header times taken from the clock and their
  pauses compressed from minutes to fractions of a second;
* a child exits when its parent does (its command pipe closes: vLLM's death pipe), except a
  worker that is still printing its traceback: it lingers, and prints the traceback's end after
  the unit's next start (``KillMode=process`` leaves it running), as in the founding incident.

Each start reads and bumps a counter in ``--state DIR/starts`` and plays the ``--plan`` entry
of that start (the last entry repeats):

* ``ready`` — start, load, compile, KV cache, CUDA graphs, API server ready, then serve until
  SIGTERM (uvicorn's shutdown lines, exit 0) or until a worker dies (``Worker proc … died
  unexpectedly``, the engine core's death, exit 1: a SIGKILLed worker as the OOM killer leaves
  it);
* ``hang`` — start and load weights slowly (one shard bar every 0.5 s) until SIGTERM, which kills
  the main process by that signal (a stop mid-load);
* ``flashinfer`` — a worker fails the flashinfer-cubin version check while loading; the engine
  core and the API server print their wrappers and the main process exits 1; the failed worker
  prints the last lines of its traceback (the root cause) only after the next start;
* ``oom`` — the KV-cache profiling run fails with ``torch.OutOfMemoryError`` (exit 1);
* ``burst`` — like ``ready``, but worker 0 prints ``--burst`` progress-bar lines at once while
  loading (journald's rate limit drops some), then pauses ``--burst-pause`` seconds so that
  the rest of the start is logged.

    python -m tests.support.vllm_standin serve --plan flashinfer,hang,ready --state DIR
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

from tests.support.make_incident import (
    API_TRACEBACK,
    CYAN,
    ENGINE_TRACEBACK,
    RESET,
    WORKER_TRACEBACK_HEAD,
    WORKER_TRACEBACK_LATE,
)

__all__ = ["MODEL", "PLANS", "VERSION", "main"]

VERSION = "0.17.1"
MODEL = "/models/qwen3-8b"
SITE = "/opt/vllm/lib/python3.12/site-packages"
PLANS = ("ready", "hang", "flashinfer", "oom", "burst")

OOM_TRACEBACK = [
    "Traceback (most recent call last):",
    f'  File "{SITE}/vllm/v1/worker/gpu_worker.py", line 322, in determine_available_memory',
    "    self.model_runner.profile_run()",
    f'  File "{SITE}/vllm/v1/worker/gpu_model_runner.py", line 4215, in profile_run',
    "    hidden_states, last_hidden_states = self._dummy_run(self.max_num_tokens, is_profile=True)",
    f'  File "{SITE}/torch/nn/modules/module.py", line 1775, in _call_impl',
    "    return forward_call(*args, **kwargs)",
    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total "
    "capacity of 79.19 GiB of which 1.06 GiB is free. Including non-PyTorch memory, this process "
    "has 78.12 GiB memory in use.",
]


def _header(role: str, level: str | None, src: str, *, color: bool = False) -> str:
    prefix = f"({role} pid={os.getpid()})"
    if color:
        prefix = f"{CYAN}{prefix}{RESET}"
    if level is None:
        return prefix
    return f"{prefix} {level} {datetime.now().strftime('%m-%d %H:%M:%S')} [{src}]"


def _print(role: str, lines: Sequence[str], level: str | None, src: str, color: bool) -> None:
    for text in lines:
        if text.startswith("\r"):  # a tqdm bar: written as is, the prefix after the \r
            head = _header(role, None, src, color=color)
            sys.stdout.write(f"\r{head} {text[1:]}\n")
        else:
            head = _header(role, level, src, color=color)
            sys.stdout.write(f"{head} {text}\n" if text or level else f"{head}\n")
    sys.stdout.flush()


# --- a child process (EngineCore, workers): prints what its parent sends ---------------------


def _puppet(role: str, comm: str) -> int:
    """A child: print each command's lines as ``role``; ack each on stderr; exit when the
    pipe closes (the parent died), or go on alone after a ``linger`` command.

    Commands (one JSON object a line on stdin): ``{"lines", "src", "level"}`` prints;
    ``{"exit": N}`` exits with N; ``{"linger": PATH, "lines", …}`` acks, then waits until the
    file PATH changes (the unit's next start), sleeps ``after`` seconds, prints and exits 1.
    """
    with contextlib.suppress(OSError):
        Path("/proc/self/comm").write_text(comm)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    color = role.startswith("Worker")
    for raw in sys.stdin:
        command = json.loads(raw)
        if "exit" in command:
            return int(command["exit"])
        if "linger" in command:  # go on after the parent died; print the rest later
            watch = Path(command["linger"])
            seen = watch.read_text()
            sys.stderr.write("ok\n")
            sys.stderr.flush()
            while watch.read_text() == seen:
                time.sleep(0.05)
            time.sleep(command.get("after", 0.3))
            _print(role, command["lines"], command.get("level"), command.get("src", ""), color)
            return 1
        _print(role, command["lines"], command.get("level", "INFO"), command["src"], color)
        sys.stderr.write("ok\n")
        sys.stderr.flush()
    return 0  # parent gone


class _Child:
    """A child process of the stand-in, told what to print over a pipe."""

    def __init__(self, role: str, comm: str) -> None:
        self.role = role
        self.process = subprocess.Popen(
            [sys.executable, "-m", "tests.support.vllm_standin", "puppet", role, comm],
            stdin=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )

    def send(self, **command: Any) -> None:
        stdin, acks = self.process.stdin, self.process.stderr
        assert stdin is not None and acks is not None
        stdin.write(json.dumps(command) + "\n")
        stdin.flush()
        if "exit" not in command:
            acks.readline()

    def say(self, lines: Sequence[str], src: str, level: str | None = "INFO") -> None:
        self.send(lines=list(lines), src=src, level=level)


class _StopRequestedError(Exception):
    """SIGTERM arrived."""


class StandIn:
    """One start of the stand-in: the API server (this process) and its children."""

    def __init__(self, tp: int, *, burst: int, burst_pause: float) -> None:
        self.tp = tp
        self.burst = burst
        self.burst_pause = burst_pause
        self.core: _Child | None = None
        self.workers: list[_Child] = []
        self.serving = False

    def api(self, lines: Sequence[str], src: str, level: str | None = "INFO") -> None:
        _print("APIServer", lines, level, src, False)

    # --- the start, phase by phase -------------------------------------------------------

    def banner(self) -> None:
        self.api(
            [
                "",
                "       █     █     █▄   ▄█",
                f" ▄▄ ▄█ █     █     █ ▀▄▀ █  version {VERSION}",
                f"  █▄█▀ █     █     █     █  model   {MODEL}",
                "   ▀▀  ▀▀▀▀▀ ▀▀▀▀▀ ▀     ▀",
                "",
            ],
            "utils.py:302",
        )
        self.api(
            [
                f"non-default args: {{'model_tag': '{MODEL}', 'port': 8000, 'model': '{MODEL}', "
                f"'tensor_parallel_size': {self.tp}}}"
            ],
            "utils.py:238",
        )
        self.api(["Resolved architecture: Qwen3ForCausalLM"], "model.py:541")
        self.api(["Using max model len 40960"], "model.py:1561")

    def engine(self) -> None:
        self.core = _Child("EngineCore_DP0", "VLLM::EngineCore")
        self.core.say(
            [
                f"Initializing a V1 LLM engine (v{VERSION}) with config: model='{MODEL}', "
                f"tokenizer='{MODEL}', dtype=torch.bfloat16, max_seq_len=40960, "
                f"tensor_parallel_size={self.tp}, quantization=None, enforce_eager=False"
            ],
            "core.py:93",
        )
        for rank in range(self.tp):
            worker = _Child(f"Worker_TP{rank}", "VLLM::Worker_TP")
            worker.say(
                [
                    f"world_size={self.tp} rank={rank} local_rank={rank} "
                    "distributed_init_method=tcp://127.0.0.1:41517 backend=nccl"
                ],
                "parallel_state.py:1325",
            )
            self.workers.append(worker)

    def load(self, shards: int = 4, pause: float = 0.1) -> None:
        tp0 = self.workers[0]
        tp0.say([f"Starting to load model {MODEL}..."], "gpu_model_runner.py:3425")
        for shard in range(shards + 1):
            if shard:
                time.sleep(pause)
            tp0.say(
                [
                    f"\rLoading safetensors checkpoint shards: {100 * shard // shards:3d}% "
                    f"Completed | {shard}/{shards} [00:0{shard}<00:00,  1.00s/it]"
                ],
                "",
                level=None,
            )
        tp0.say(["Loading weights took 4.12 seconds"], "default_loader.py:291")
        tp0.say(
            ["Model loading took 15.27 GiB memory and 4.51 seconds"], "gpu_model_runner.py:3530"
        )

    def burst_load(self) -> None:
        tp0 = self.workers[0]
        tp0.say([f"Starting to load model {MODEL}..."], "gpu_model_runner.py:3425")
        bars = [
            f"\rLoading safetensors checkpoint shards: {100 * i // self.burst:3d}% Completed | "
            f"{i}/{self.burst} [00:00<00:00, 900.00it/s]"
            for i in range(self.burst + 1)
        ]
        tp0.say(bars, "", level=None)
        time.sleep(self.burst_pause)  # the rate-limit window ends; the rest is logged
        tp0.say(["Loading weights took 1.02 seconds"], "default_loader.py:291")
        tp0.say(
            ["Model loading took 15.27 GiB memory and 1.40 seconds"], "gpu_model_runner.py:3530"
        )

    def compile_and_profile(self) -> None:
        tp0 = self.workers[0]
        tp0.say(["Dynamo bytecode transform time: 3.87 s"], "backends.py:872")
        tp0.say(["torch.compile takes 9.61 s in total"], "monitor.py:34")
        tp0.say(["Available KV cache memory: 52.10 GiB"], "gpu_worker.py:356")
        assert self.core is not None
        self.core.say(["GPU KV cache size: 379,392 tokens"], "kv_cache_utils.py:1291")

    def graphs_and_serve(self) -> None:
        tp0 = self.workers[0]
        for step in range(0, 68, 17):
            tp0.say(
                [f"\rCapturing CUDA graphs (mixed prefill-decode, PIECEWISE): {step}/67"],
                "",
                level=None,
            )
        tp0.say(["Graph capturing finished in 2 secs, took 0.41 GiB"], "gpu_model_runner.py:4587")
        assert self.core is not None
        self.core.say(
            ["init engine (profile, create kv cache, warmup model) took 14.87 s"], "core.py:247"
        )
        self.api(["Starting vLLM API server 0 on http://0.0.0.0:8000"], "api_server.py:1995")
        self.api(["Available routes are:"], "launcher.py:37")
        self.api(
            [
                f"INFO:     Started server process [{os.getpid()}]",
                "INFO:     Waiting for application startup.",
                "INFO:     Application startup complete.",
            ],
            "",
            level=None,
        )
        self.serving = True

    # --- endings -------------------------------------------------------------------------

    def serve(self) -> int:
        """Serve until SIGTERM (exit 0) or a worker's death (exit 1)."""
        try:
            while True:
                for rank, worker in enumerate(self.workers):
                    if worker.process.poll() is not None:
                        return self.worker_died(rank)
                time.sleep(0.05)
        except _StopRequestedError:
            self.api(
                [
                    "INFO:     Shutting down",
                    "INFO:     Waiting for application shutdown.",
                    "INFO:     Application shutdown complete.",
                ],
                "",
                level=None,
            )
            return 0

    def worker_died(self, rank: int) -> int:
        assert self.core is not None
        self.core.say(
            [f"Worker proc VllmWorker-{rank} died unexpectedly, shutting down executor."],
            "multiproc_executor.py:262",
            level="ERROR",
        )
        self.core.send(exit=1)
        self.core.process.wait()
        self.api(
            ["Engine core proc EngineCore_DP0 died unexpectedly, shutting down client."],
            "core_client.py:692",
            level="ERROR",
        )
        return 1

    def flashinfer(self, starts: Path) -> int:
        failing = self.workers[-1]
        self.workers[0].say([f"Starting to load model {MODEL}..."], "gpu_model_runner.py:3425")
        failing.say(WORKER_TRACEBACK_HEAD, "multiproc_executor.py:783", level="ERROR")
        failing.send(
            linger=str(starts),
            lines=WORKER_TRACEBACK_LATE,
            level="ERROR",
            src="multiproc_executor.py:783",
        )
        assert self.core is not None
        self.core.say(ENGINE_TRACEBACK, "core.py:1102", level="ERROR")
        self.api(API_TRACEBACK, "", level=None)
        return 1

    def oom(self) -> int:
        tp0 = self.workers[0]
        tp0.say(["torch.compile takes 9.61 s in total"], "monitor.py:34")
        tp0.say(OOM_TRACEBACK, "multiproc_executor.py:783", level="ERROR")
        assert self.core is not None
        self.core.say(ENGINE_TRACEBACK, "core.py:1102", level="ERROR")
        self.api(API_TRACEBACK, "", level=None)
        return 1

    def hang(self) -> int:
        tp0 = self.workers[0]
        tp0.say([f"Starting to load model {MODEL}..."], "gpu_model_runner.py:3425")
        shard = 0
        while True:  # until SIGTERM
            tp0.say(
                [f"\rLoading safetensors checkpoint shards: {shard}/1000 [00:00<?, ?s/it]"],
                "",
                level=None,
            )
            shard += 1
            time.sleep(0.5)


def _serve(args: argparse.Namespace) -> int:
    state = Path(args.state)
    state.mkdir(parents=True, exist_ok=True)
    starts = state / "starts"
    number = int(starts.read_text()) + 1 if starts.exists() else 1
    starts.write_text(str(number))
    plans = args.plan.split(",")
    plan = plans[min(number, len(plans)) - 1]
    if plan not in PLANS:
        print(f"unknown plan {plan!r}", file=sys.stderr)
        return 2
    run = StandIn(args.tp, burst=args.burst, burst_pause=args.burst_pause)

    def stop(signum: int, frame: object) -> None:
        if run.serving:
            raise _StopRequestedError
        signal.signal(signal.SIGTERM, signal.SIG_DFL)  # mid-start: die by the signal
        os.kill(os.getpid(), signal.SIGTERM)

    signal.signal(signal.SIGTERM, stop)
    run.banner()
    time.sleep(0.1)
    run.engine()
    if plan == "flashinfer":
        return run.flashinfer(starts)
    if plan == "hang":
        return run.hang()
    if plan == "burst":
        run.burst_load()
    else:
        run.load()
    if plan == "oom":
        return run.oom()
    run.compile_and_profile()
    run.graphs_and_serve()
    return run.serve()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.support.vllm_standin")
    sub = parser.add_subparsers(dest="command", required=True)
    serve = sub.add_parser("serve", help="the API server: the unit's main process")
    serve.add_argument("--plan", default="ready", help="comma-separated plan per start")
    serve.add_argument("--state", required=True, help="directory for the start counter")
    serve.add_argument("--tp", type=int, default=2, help="workers (tensor parallel size)")
    serve.add_argument("--burst", type=int, default=2000, help="bars printed at once (burst)")
    serve.add_argument("--burst-pause", type=float, default=2.5)
    puppet = sub.add_parser("puppet", help="a child process (internal)")
    puppet.add_argument("role")
    puppet.add_argument("comm")
    args = parser.parse_args(argv)
    if args.command == "puppet":
        return _puppet(args.role, args.comm)
    return _serve(args)


if __name__ == "__main__":
    sys.exit(main())
