"""The real daemon as a child process, the journal lines it reads, and a small scraper.

The daemon runs as ``python -m vllm_sentinel run --config …`` in its own process, so its CPU
time and memory are its own (the benchmark's writer, SSH server and scraper live elsewhere).
"""

from __future__ import annotations

import http.client
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from benchmarks.corpus import ROOT
from benchmarks.measure import wait_until
from tests.support.daemon import free_port
from tests.support.journal_writer import manager_line, service_line

__all__ = [
    "PHASE_LINES",
    "DaemonProcess",
    "Scraper",
    "free_port",
    "host_table",
    "serving_lines",
    "startup_entries",
]

PHASE_LINES: tuple[tuple[str, str], ...] = (
    ("initializing", "INFO 01-02 12:00:01 [core.py:58] Initializing a V1 LLM engine (v0.9.0) "
     "with config: model='bench/model', tensor_parallel_size=1"),
    ("loading_weights", "INFO 01-02 12:00:02 [gpu_model_runner.py:1] Starting to load model "
     "bench/model..."),
    ("compiling", "INFO 01-02 12:00:03 [backends.py:1] Using cache directory: /tmp/cache for "
     "vLLM's torch.compile"),
    ("profiling_kv_cache", "INFO 01-02 12:00:04 [gpu_worker.py:1] Available KV cache memory: "
     "10.50 GiB"),
    ("capturing_cuda_graphs", "Capturing CUDA graphs (mixed prefill-decode, PIECEWISE): 100%|"
     "##########| 67/67 [00:02<00:00, 25.10it/s]"),
    ("starting_api_server", "INFO 01-02 12:00:06 [api_server.py:1] Starting vLLM API server 0 "
     "on http://0.0.0.0:8000"),
    ("ready", "INFO:     Application startup complete."),
)  # fmt: skip
"""A healthy start after systemd's ``Started``: one line per phase, as vLLM 0.9 logs them."""

STARTED = "39f53479d3a045ac8e11786248231fbf"
STOPPING = "de5b426a63be47a7b6ac3eaac82e2f6f"
STOPPED = "9d1aaa27d60140bd96365438aad20286"


def now_us() -> int:
    """Now, in µs since the epoch (journald's ``__REALTIME_TIMESTAMP``)."""
    return time.time_ns() // 1000


def startup_entries(unit: str, invocation: str, pid: int) -> list[dict[str, str | bytes | int]]:
    """systemd's ``Started`` then one line per startup phase, up to ready."""
    entries = [manager_line(unit, invocation, f"Started {unit} - vLLM.", STARTED, now_us())]
    entries += [service_line(unit, invocation, pid, line, now_us()) for _, line in PHASE_LINES]
    return entries


def serving_lines() -> Iterator[str]:
    """What a busy, ready vLLM server writes, forever: access lines and periodic stats."""
    count = 0
    while True:
        count += 1
        if count % 10 == 0:
            yield (
                "INFO 01-02 12:00:10 [loggers.py:123] Engine 000: Avg prompt throughput: "
                f"{count % 997}.5 tokens/s, Avg generation throughput: 1234.0 tokens/s, "
                "Running: 12 reqs, Waiting: 0 reqs, GPU KV cache usage: 4.2%, Prefix cache hit "
                "rate: 61.0%"
            )
        else:
            yield (
                f"INFO:     10.0.{count % 250}.{count % 199}:{32768 + count % 28000} - "
                '"POST /v1/chat/completions HTTP/1.1" 200 OK'
            )


def host_table(
    name: str, units: Sequence[str], journal_dir: Path, *, ssh: dict[str, object] | None = None
) -> str:
    """One ``[[hosts]]`` TOML table: local, or reached over SSH with ``ssh`` settings."""
    lines = ["[[hosts]]", f'name = "{name}"']
    if ssh is None:
        lines += ["local = true", 'gpu = "none"']
    else:
        lines += [
            'address = "127.0.0.1"',
            f"port = {ssh['port']}",
            f'user = "{ssh["user"]}"',
            f'client_keys = ["{ssh["client_key"]}"]',
            f'known_hosts = "{ssh["known_hosts"]}"',
            'gpu = "nvidia-smi"',
        ]
    lines.append("units = [" + ", ".join(f'"{unit}"' for unit in units) + "]")
    lines.append(f'journalctl_args = ["--directory={journal_dir}"]')
    return "\n".join(lines) + "\n"


@dataclass
class DaemonProcess:
    """``vllm-sentinel run`` as a child; ``stop()`` sends SIGTERM and waits."""

    process: subprocess.Popen[bytes]
    port: int
    log: Path

    @classmethod
    def start(cls, workdir: Path, hosts: str, *, name: str = "daemon") -> DaemonProcess:
        """Write a config for ``hosts`` (TOML tables) and start the daemon on a free port."""
        port = free_port()
        state = workdir / f"{name}-state"
        state.mkdir(parents=True, exist_ok=True)
        config = workdir / f"{name}.toml"
        config.write_text(
            f'[exporter]\nlisten = "127.0.0.1:{port}"\n'
            f'[defaults]\nstate_directory = "{state}"\n\n{hosts}'
        )
        log = workdir / f"{name}.log"
        env = dict(os.environ)
        env["PYTHONPATH"] = str(ROOT)
        with log.open("wb") as output:
            process = subprocess.Popen(
                [sys.executable, "-m", "vllm_sentinel", "run", "--config", str(config),
                 "--log-level", "info", "--log-format", "json"],
                stdin=subprocess.DEVNULL, stdout=output, stderr=subprocess.STDOUT, env=env,
                cwd=ROOT,
            )  # fmt: skip
        daemon = cls(process, port, log)
        scraper = Scraper(port)
        wait_until(lambda: daemon.alive() and scraper.try_get() is not None, 60, "the daemon")
        return daemon

    def alive(self) -> bool:
        if self.process.poll() is not None:
            raise RuntimeError(f"the daemon exited: {self.log.read_text()[-2000:]}")
        return True

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


class Scraper:
    """GET ``/metrics`` from 127.0.0.1:port (plain text format, no compression)."""

    def __init__(self, port: int) -> None:
        self.port = port

    def get(self, path: str = "/metrics", headers: dict[str, str] | None = None) -> bytes:
        connection = http.client.HTTPConnection("127.0.0.1", self.port, timeout=30)
        try:
            connection.request("GET", path, headers=headers or {})
            response = connection.getresponse()
            body = response.read()
            if response.status != 200:
                raise RuntimeError(f"GET {path}: {response.status}")
            return body
        finally:
            connection.close()

    def try_get(self) -> bytes | None:
        try:
            return self.get()
        except OSError:
            return None

    def count(self, needle: str) -> int:
        """How many lines of one scrape contain ``needle``."""
        return self.get().decode().count(needle)
