"""Run the real daemon for tests (in-process, or as ``python -m vllm_sentinel run``), and read
its /metrics and /status over HTTP."""

from __future__ import annotations

import asyncio
import contextlib
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import AsyncIterator, Callable, Iterator, Mapping
from pathlib import Path
from typing import Any, cast

import orjson
from prometheus_client.parser import text_string_to_metric_families

from tests.support.http_errors import closed
from vllm_sentinel.config import Config, parse_config
from vllm_sentinel.daemon import Daemon

Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


def free_port() -> int:
    """A TCP port free on 127.0.0.1 right now."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def local_config_text(
    journal_dir: Path,
    state_dir: Path,
    *,
    host: str = "llm-two",
    extra: str = "",
    units: str = '["vllm-*.service"]',
    port: int | None = None,
    gpu: str = "none",
    host_extra: str = "",
) -> str:
    """The TOML of a config that follows ``journal_dir`` as a local host (for config files).

    ``extra`` goes into ``[defaults]``, ``host_extra`` after the host's keys (its own tables,
    such as ``[hosts.health_probe]``).
    """
    return f"""
[exporter]
listen = "127.0.0.1:{port or free_port()}"
[defaults]
state_directory = "{state_dir}"
cursor_flush_interval_seconds = 0.2
{extra}
[[hosts]]
name = "{host}"
local = true
units = {units}
journalctl_args = ["--directory={journal_dir}"]
gpu = "{gpu}"
{host_extra}
"""


def local_config(journal_dir: Path, state_dir: Path, **options: Any) -> Config:
    """A config that follows ``journal_dir`` as a local host without GPU collection
    (``options``: those of ``local_config_text``)."""
    return parse_config(local_config_text(journal_dir, state_dir, **options))


def parse_metrics(text: str) -> Samples:
    """Exposition text → {(sample name, labels): value}."""
    samples: Samples = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            samples[(sample.name, frozenset(sample.labels.items()))] = sample.value
    return samples


def scrape(url: str, timeout: float = 10.0) -> Samples | None:
    """One scrape of ``url`` (a ``/metrics``), parsed as Prometheus would; ``None`` while
    nothing answers there (``OSError``: the daemon is starting, or gone)."""
    try:
        with urllib.request.urlopen(url, timeout=timeout) as response:
            return parse_metrics(response.read().decode())
    except OSError as error:
        closed(error)  # an HTTPError holds its socket
        return None


def value(samples: Samples, name: str, **labels: str) -> float | None:
    """The value of the one sample named ``name`` whose labels include ``labels``."""
    found = [v for (n, ls), v in samples.items() if n == name and set(labels.items()) <= ls]
    if len(found) > 1:
        raise AssertionError(f"{name}{labels} matches {len(found)} samples")
    return found[0] if found else None


def current_phase(samples: Samples, unit: str) -> str | None:
    """The phase whose one-hot gauge is 1 for ``unit``."""
    for (name, labels), sample in samples.items():
        if name == "vllm_sentinel_unit_phase" and ("unit", unit) in labels and sample == 1:
            return dict(labels)["phase"]
    return None


class RunningDaemon:
    """A ``Daemon`` running as a task in the test's event loop."""

    def __init__(self, daemon: Daemon, task: asyncio.Task[int]) -> None:
        self.daemon = daemon
        self.task = task

    @property
    def url(self) -> str:
        assert self.daemon.http is not None
        return f"http://{self.daemon.http.host}:{self.daemon.http.port}"

    async def get(self, path: str) -> bytes:
        def fetch() -> bytes:
            with urllib.request.urlopen(self.url + path, timeout=10) as response:
                return bytes(response.read())

        return await asyncio.to_thread(fetch)

    async def metrics(self) -> Samples:
        return parse_metrics((await self.get("/metrics")).decode())

    async def status(self) -> Mapping[str, Any]:
        return dict(orjson.loads(await self.get("/status")))

    async def wait_for(
        self, predicate: Callable[[Samples], bool], timeout: float = 20.0, what: str = ""
    ) -> Samples:
        """Poll /metrics until ``predicate`` holds (deadline, no fixed sleep)."""
        deadline = time.monotonic() + timeout
        samples: Samples = {}
        while time.monotonic() < deadline:
            samples = await self.metrics()
            if predicate(samples):
                return samples
            await asyncio.sleep(0.05)
        raise AssertionError(
            f"timed out waiting for {what or predicate}: last scrape had "
            f"{sorted({n for n, _ in samples})[:40]}"
        )


@contextlib.asynccontextmanager
async def running_daemon(
    config: Config, config_path: Path | None = None
) -> AsyncIterator[RunningDaemon]:
    """Start the daemon; stop it (as SIGTERM would) and wait for it on the way out."""
    daemon = Daemon(config, config_path)
    task = asyncio.create_task(daemon.run())
    deadline = time.monotonic() + 10
    while daemon.http is None:
        if task.done():
            task.result()
        if time.monotonic() > deadline:
            raise TimeoutError("daemon did not start its HTTP server")
        await asyncio.sleep(0.01)
    try:
        yield RunningDaemon(daemon, task)
    finally:
        daemon.request_stop()
        await asyncio.wait_for(task, 30)


class CounterSums:
    """Counters summed across scrapes the way Prometheus's ``increase()`` reads them.

    Each scrape is compared with the previous one of the same series: a rise adds the
    difference, a drop is a counter reset (a restarted process) and adds the new value whole.
    A series seen for the first time adds its value (it counted from zero). ``total(name,
    **labels)`` sums what every series of ``name`` matching ``labels`` added so far.
    """

    def __init__(self) -> None:
        self._last: dict[tuple[str, frozenset[tuple[str, str]]], float] = {}
        self._added: dict[tuple[str, frozenset[tuple[str, str]]], float] = {}
        self.resets = 0

    def add(self, samples: Samples) -> None:
        """Take one scrape (only ``*_total`` series are counters)."""
        for key, current in samples.items():
            if not key[0].endswith("_total"):
                continue
            previous = self._last.get(key)
            if previous is None:
                increase = current
            elif current >= previous:
                increase = current - previous
            else:
                increase = current
                self.resets += 1
            self._added[key] = self._added.get(key, 0.0) + increase
            self._last[key] = current

    def total(self, name: str, **labels: str) -> float:
        """What the series of ``name`` whose labels include ``labels`` added in all."""
        wanted = set(labels.items())
        return sum(v for (n, ls), v in self._added.items() if n == name and wanted <= ls)

    def by(self, name: str, label: str, **labels: str) -> dict[str, float]:
        """``total`` per value of ``label`` (values that added nothing left out)."""
        wanted = set(labels.items())
        out: dict[str, float] = {}
        for (n, ls), v in self._added.items():
            if n == name and wanted <= ls and v:
                key = dict(ls)[label]
                out[key] = out.get(key, 0.0) + v
        return out


class DaemonProcess(subprocess.Popen[bytes]):
    """``python -m vllm_sentinel run`` as a child; ``events``: its JSON log events so far."""

    events: list[dict[str, Any]]


@contextlib.contextmanager
def daemon_process(config: Path) -> Iterator[DaemonProcess]:
    """``python -m vllm_sentinel run --config CONFIG --log-format json``, its stderr read by a
    thread into ``events``; killed if still running on the way out, and its log read to the
    end (``events`` is complete after the ``with``)."""
    argv = [sys.executable, "-m", "vllm_sentinel", "run", "--config", str(config)]
    process = cast(
        DaemonProcess,
        subprocess.Popen(
            [*argv, "--log-format", "json"],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        ),
    )
    process.events = []

    def read() -> None:
        assert process.stderr is not None
        for line in process.stderr:
            with contextlib.suppress(orjson.JSONDecodeError):
                process.events.append(orjson.loads(line))

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        yield process
    finally:
        if process.poll() is None:
            process.kill()
        process.wait(10)
        reader.join(10)
        assert process.stderr is not None
        process.stderr.close()
