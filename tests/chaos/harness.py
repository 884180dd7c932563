"""The chaos test's parts: ground truth, unit scripts, the daemon process, the SSH server.

* ``UnitTruth`` — what a unit really did (every start, crash with its cause, record by level,
  the phase it ends in, its last crash), updated by the same code that writes its journal
  entries (``UnitScript``), so the truth is what the journal holds.
* ``UnitScript`` — builds journal entries of one unit, as journald would store them: crash
  cycles (with late traceback lines whose timestamps are earlier than the exit that arrived
  first), starts to ready with serving traffic, clean stops. Log time runs ahead of the
  daemon's clock, so a crash settles once later log time is read (no waiting).
* ``SentinelProcess`` — ``python -m vllm_sentinel run`` as a child, its JSON log read by a
  thread; SIGTERM, SIGKILL, SIGHUP; its ``os.fsync`` slowed (``slowdisk/sitecustomize.py``) so
  that a SIGKILL can land in the middle of a cursor write.

The SSH server is ``tests.support.ssh_server.SshServerThread``: real SSH on 127.0.0.1 relaying
the real ``journalctl`` on its own event loop; ``drop_all_connections`` kills sessions.
"""

from __future__ import annotations

import collections
import os
import random
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import orjson

from tests.support.daemon import Samples, scrape
from tests.support.journal_writer import (
    MESSAGE_ID_STARTED,
    MESSAGE_ID_STOPPED,
    MESSAGE_ID_STOPPING,
    manager_line,
    service_line,
    to_realtime_us,
)

Entry = dict[str, str | bytes | int]

SLOW_DISK = Path(__file__).resolve().parent / "slowdisk"
ROOT = Path(__file__).resolve().parents[2]

EXCEPTIONS: dict[str, str] = {
    "cuda_oom": "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB.",
    "dependency_mismatch": "RuntimeError: flashinfer-cubin version (0.6.3) does not match "
    "flashinfer version (0.6.4). Please install the same version of both packages.",
    "kv_cache_insufficient": "ValueError: No available memory for the cache blocks. Try "
    "increasing `gpu_memory_utilization` when initializing the engine.",
}
"""Root causes a crash cycle can have, with the exception line that says so (and ``killed``:
SIGKILL from outside, no traceback)."""
CAUSES = (*EXCEPTIONS, "killed")

_HEADER = "{level} 11-29 10:00:{second:02d} [{file}:1] "


def vllm_line(level: str, text: str, file: str = "core.py", second: int = 0) -> str:
    """A line with vLLM's header (its level is what the daemon counts)."""
    return _HEADER.format(level=level, file=file, second=second % 60) + text


@dataclass
class UnitTruth:
    """What one unit really did, as written to the journal."""

    host: str
    unit: str
    starts: int = 0
    crashes: collections.Counter[str] = field(default_factory=collections.Counter)
    records: collections.Counter[str] = field(default_factory=collections.Counter)
    phase: str | None = None
    last_crash: str | None = None


class UnitScript:
    """Journal entries of one unit (``UnitTruth`` updated as they are made).

    Args:
        truth: the unit's truth.
        rng: the schedule's random source.
        clock: log time of the next entry (µs), shared by the schedule, advanced by each step.
        ident: 16 hex digits naming the unit in its invocation ids (unique in the run).
    """

    def __init__(self, truth: UnitTruth, rng: random.Random, clock: LogClock, ident: str) -> None:
        self.truth = truth
        self._ident = ident
        self._rng = rng
        self._clock = clock
        self._serial = 0
        self.invocation: str | None = None
        self._pid = 1000
        self.running = False

    def _service(self, text: str, level: str, at: int | None = None) -> Entry:
        assert self.invocation is not None
        self.truth.records[level] += 1
        return service_line(
            self.truth.unit,
            self.invocation,
            self._pid,
            text,
            self._clock.tick() if at is None else at,
        )

    def _manager(self, text: str, message_id: str | None = None) -> Entry:
        assert self.invocation is not None
        return manager_line(self.truth.unit, self.invocation, text, message_id, self._clock.tick())

    def _start(self) -> list[Entry]:
        self._serial += 1
        self.invocation = f"{self._ident}{self._serial:016x}"
        self._pid += 1
        self.running = True
        self.truth.starts += 1
        self.truth.phase = "starting"
        unit = self.truth.unit
        entries = [self._manager(f"Started {unit} - vLLM.", MESSAGE_ID_STARTED)]
        entries.append(self._service(vllm_line("INFO", "Initializing a V1 LLM engine (v0.9.0) with config: model='m', tensor_parallel_size=1"), "info"))  # fmt: skip
        entries.append(self._service(vllm_line("INFO", "Starting to load model m...", "gpu_model_runner.py"), "info"))  # fmt: skip
        self.truth.phase = "loading_weights"
        entries.extend(self._chatter(self._rng.randint(0, 3)))
        return entries

    def _chatter(self, count: int) -> list[Entry]:
        """Lines of every level, a raw one (no header: level none) and a multi-line one."""
        entries = []
        for _ in range(count):
            kind = self._rng.choice(("debug", "info", "warning", "none", "multi"))
            if kind == "none":
                text = "Loading safetensors checkpoint shards:  50% Completed | 1/2 [00:01<00:01]"
                entries.append(self._service(text, "none"))
            elif kind == "multi":  # one entry, two lines: one record of its first line's level
                text = vllm_line("WARNING", "a warning\nwith a second line")
                entries.append(self._service(text, "warning"))
            else:
                entries.append(self._service(vllm_line(kind.upper(), f"{kind} chatter"), kind))
        return entries

    def crash(self, cause: str, *, late: bool) -> list[Entry]:
        """A start that crashes with ``cause``; with ``late``, the traceback lines arrive after
        systemd's exit, with timestamps earlier than the wrapper line before them."""
        entries = self._chatter(1) if self.running else self._start()  # crash what runs
        unit = self.truth.unit
        if cause == "killed":
            entries.append(
                self._manager(f"{unit}: Main process exited, code=killed, status=9/KILL")
            )
            entries.append(self._manager(f"{unit}: Failed with result 'signal'."))
        else:
            wrapper_at = self._clock.tick()
            entries.append(
                self._service(
                    vllm_line("ERROR", "EngineCore failed to start."), "error", wrapper_at
                )
            )
            trace = [
                vllm_line("ERROR", "Traceback (most recent call last):"),
                vllm_line("ERROR", '  File "/usr/lib/python3/dist-packages/vllm/v1/engine/core.py", line 1, in run'),
                vllm_line("ERROR", EXCEPTIONS[cause]),
            ]  # fmt: skip
            exits = [
                self._manager(f"{unit}: Main process exited, code=exited, status=1/FAILURE"),
                self._manager(f"{unit}: Failed with result 'exit-code'."),
            ]
            if late:  # written after the exit, logged (by the process) just before the wrapper
                earlier = wrapper_at - self._rng.randint(1, 500_000)
                entries += exits
                entries += [
                    self._service(text, "error", earlier + n) for n, text in enumerate(trace)
                ]
            else:
                entries += [self._service(text, "error") for text in trace]
                entries += exits
        self.running = False
        self.truth.crashes[cause] += 1
        self.truth.last_crash = cause
        self.truth.phase = "crashed"
        return entries

    def serve(self, requests: int) -> list[Entry]:
        """Up to ready (starting first if needed), then ``requests`` access and stat lines."""
        entries = [] if self.running else self._start()
        if self.truth.phase != "ready":
            entries.append(self._service(vllm_line("INFO", "Starting vLLM API server 0 on http://0.0.0.0:8000", "api_server.py"), "info"))  # fmt: skip
            entries.append(self._service("INFO:     Application startup complete.", "info"))
            self.truth.phase = "ready"
        for n in range(requests):
            if n % 5 == 4:
                text = vllm_line(
                    "INFO", "Engine 000: Avg prompt throughput: 1.0 tokens/s", "loggers.py"
                )
            else:
                text = f'INFO:     10.0.0.{n % 250}:4000 - "POST /v1/completions HTTP/1.1" 200 OK'
            entries.append(self._service(text, "info"))
        entries.extend(self._chatter(self._rng.randint(0, 2)))
        return entries

    def stop(self) -> list[Entry]:
        """A clean stop by systemd (starting first if nothing runs)."""
        entries = [] if self.running else self._start()
        unit = self.truth.unit
        entries.append(self._manager(f"Stopping {unit} - vLLM...", MESSAGE_ID_STOPPING))
        entries.append(self._service(vllm_line("INFO", "Shutting down FastAPI HTTP server.", "launcher.py"), "info"))  # fmt: skip
        entries.append(self._manager(f"{unit}: Deactivated successfully."))
        entries.append(self._manager(f"Stopped {unit} - vLLM.", MESSAGE_ID_STOPPED))
        self.running = False
        self.truth.phase = "stopped"
        return entries

    def settle(self) -> list[Entry]:
        """One line of the last incarnation a minute of log time later: every crash settles."""
        if self.invocation is None:
            return []
        self._clock.advance(60)
        return [self._service(vllm_line("INFO", "still here"), "info")]

    def step(self) -> list[Entry]:
        """One random step of this unit."""
        roll = self._rng.random()
        if roll < 0.55:
            return self.crash(self._rng.choice(CAUSES), late=self._rng.random() < 0.5)
        if roll < 0.85:
            return self.serve(self._rng.randint(0, 12))
        return self.stop()


class LogClock:
    """Log times (µs) of one schedule: from the daemon's clock on, ahead of it; each entry a
    little later than the one before, each step some seconds later (a fast or a slow loop)."""

    def __init__(self, rng: random.Random) -> None:
        self._rng = rng
        self.now = to_realtime_us(datetime.now(UTC))

    def tick(self) -> int:
        self.now += self._rng.randint(1_000, 200_000)
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += int(seconds * 1_000_000)

    def catch_up(self) -> None:
        """Never behind the daemon's clock (a first start counts from it)."""
        self.now = max(self.now, to_realtime_us(datetime.now(UTC)))


# --- the daemon process ------------------------------------------------------------------------


class SentinelProcess:
    """``python -m vllm_sentinel run`` as a child process, its JSON log events collected."""

    def __init__(self, config: Path, state: Path, port: int, fsync_delay: float) -> None:
        self.config = config
        self.state = state
        self.port = port
        self._fsync_delay = fsync_delay
        self.process: subprocess.Popen[bytes] | None = None
        self.events: collections.deque[dict[str, Any]] = collections.deque(maxlen=5000)
        self.errors: list[dict[str, Any]] = []  # error-level events (a bug unless expected)
        self._lock = threading.Condition()
        self._reader: threading.Thread | None = None
        self.starts = 0
        self.seed: int | None = None  # the schedule running now (kept with each error)

    def start(self) -> None:
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join([str(SLOW_DISK), str(ROOT), env.get("PYTHONPATH", "")])
        env["CHAOS_FSYNC_DELAY_SECONDS"] = str(self._fsync_delay)
        argv = [sys.executable, "-m", "vllm_sentinel", "run", "--config", str(self.config)]
        self.process = subprocess.Popen(
            [*argv, "--log-format", "json"],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
            env=env, cwd=ROOT,
        )  # fmt: skip
        self.starts += 1
        process = self.process
        self._reader = threading.Thread(target=self._read, args=(process,), daemon=True)
        self._reader.start()

    def _read(self, process: subprocess.Popen[bytes]) -> None:
        assert process.stderr is not None
        log = (self.state.parent / "daemon.log").open("ab")
        for line in process.stderr:
            log.write(line)
            try:
                event = orjson.loads(line)
            except orjson.JSONDecodeError:
                event = {"event": "stderr", "level": "error", "text": line.decode(errors="replace")}
            if not isinstance(event, dict):
                continue
            event["pid"] = process.pid
            event["seed"] = self.seed
            with self._lock:
                self.events.append(event)
                if event.get("level") in ("error", "critical"):
                    self.errors.append(event)
                self._lock.notify_all()
        log.close()
        process.stderr.close()

    @property
    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def wait_event(
        self, predicate: Callable[[dict[str, Any]], bool], timeout: float
    ) -> dict[str, Any] | None:
        """The first event of the running process matching ``predicate`` (waits for it)."""
        deadline = time.monotonic() + timeout
        pid = self.process.pid if self.process else None
        with self._lock:
            while True:
                for event in self.events:
                    if event.get("pid") == pid and predicate(event):
                        return event
                left = deadline - time.monotonic()
                if left <= 0:
                    return None
                self._lock.wait(left)

    def clear_events(self) -> None:
        with self._lock:
            self.events.clear()

    def signal(self, signum: int) -> None:
        assert self.process is not None
        self.process.send_signal(signum)

    def wait(self, timeout: float = 30) -> int:
        assert self.process is not None
        code = self.process.wait(timeout)
        if self._reader is not None:
            self._reader.join(10)
        return code

    def kill(self) -> None:
        if self.alive:
            self.signal(signal.SIGKILL)
        if self.process is not None:
            self.wait()

    def scrape(self) -> Samples | None:
        """One scrape of /metrics, as Prometheus does; ``None`` while nothing answers."""
        return scrape(f"http://127.0.0.1:{self.port}/metrics")

    def wait_serving(self, hosts: set[str], timeout: float = 60) -> Samples:
        """Scrape until the journal collector of every host in ``hosts`` is up."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if not self.alive:
                code = self.process.poll() if self.process else None
                raise AssertionError(f"the daemon exited ({code}): {list(self.events)[-5:]}")
            samples = self.scrape()
            if samples is not None:
                up = {
                    dict(labels)["host"]
                    for (name, labels), value in samples.items()
                    if name == "vllm_sentinel_collector_up" and value == 1
                }
                if hosts <= up:
                    return samples
            time.sleep(0.05)
        raise AssertionError(f"hosts {sorted(hosts)} not up within {timeout}s")
