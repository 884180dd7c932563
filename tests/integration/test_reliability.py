"""Nothing lost: SSH drops, a host that stops answering, rotation and vacuum, reloads, restarts.

Every test uses real parts: journal files written by ``systemd-journal-remote`` and read by the
real ``journalctl``, the in-process asyncssh server relaying that ``journalctl`` (or a TCP proxy
in front of it that can go silent), the real ``Monitor``/trackers, and the daemon over HTTP.

What the engine applied is read with a test-only sink on ``Monitor.apply`` (``AppliedRecords``):
every record of every journal batch, in the order the Monitor applied them. Each written record
carries ``seq=N`` in its message, so "exactly those written, each once, in order" is
``applied.seqs() == list(range(N))``. The trackers' own per-level counts are checked as well.
No fixed sleeps: every wait polls a condition against a deadline; reconnect pauses are injected.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import functools
import itertools
import json
import os
import random
import re
import signal
import subprocess
import threading
import time
import urllib.request
from collections.abc import (
    AsyncGenerator,
    AsyncIterator,
    Awaitable,
    Callable,
    MutableMapping,
    Sequence,
)
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, cast

import orjson
import pytest
from structlog.testing import capture_logs

from tests.conftest import require_binary
from tests.support.daemon import (
    RunningDaemon,
    Samples,
    current_phase,
    daemon_process,
    free_port,
    local_config,
    parse_metrics,
    value,
)
from tests.support.journal_writer import (
    JournalWriter,
    manager_line,
    service_line,
    to_realtime_us,
    unit_started,
)
from tests.support.ssh_server import SshTestServer
from tests.support.tcp_proxy import BlackholeProxy
from vllm_sentinel.config import Config, load_config, parse_config
from vllm_sentinel.daemon import HOST_DOWN_DETECTION_RATIO, Daemon, effective_ssh_settings
from vllm_sentinel.engine.decode.record import Record
from vllm_sentinel.engine.snapshot import UnitSnapshot
from vllm_sentinel.errors import TransportError
from vllm_sentinel.monitor import HostPlan, Monitor
from vllm_sentinel.sources.journal import (
    FollowerSettings,
    HistoryBoundary,
    JournalBatch,
    JournalFollower,
)
from vllm_sentinel.sources.transport import LocalTransport, SshTransport, Transport
from vllm_sentinel.state.cursor_store import CursorStore

pytestmark = [pytest.mark.integration, pytest.mark.asyncio]

HOST = "gpu-node-7"
UNIT = "vllm-kimi-k25.service"
INVOCATION = "5" * 32
PID = 4242
SEQ = re.compile(r" seq=(\d+)$")
STUB_BIN = Path(__file__).resolve().parents[1] / "support" / "bin"

DROPS = 150
"""SSH connections killed during the fast stream (the issue asks for at least 50)."""


# --- helpers ---------------------------------------------------------------------------------


BOOT_US = to_realtime_us(datetime.now(UTC) - timedelta(days=3))
"""When the (one) boot of the test entries began: journald stores a monotonic time with every
entry, and journalctl uses it to place a cursor among files of another sequence-number id."""


def monotonic(realtime_us: int) -> dict[str, str | bytes | int]:
    return {"__MONOTONIC_TIMESTAMP": realtime_us - BOOT_US}


def info_line(seq: int, realtime_us: int, unit: str = UNIT) -> dict[str, str | bytes | int]:
    """A vLLM INFO line carrying its sequence number."""
    text = f"(EngineCore_DP0 pid={PID}) INFO 11-29 10:00:00 [stream_test.py:1] seq={seq}"
    return service_line(unit, INVOCATION, PID, text, realtime_us, extra=monotonic(realtime_us))


def started(realtime_us: int, unit: str = UNIT, invocation: str = INVOCATION) -> dict[str, Any]:
    return unit_started(unit, invocation, realtime_us, extra=monotonic(realtime_us))


def hour_ago_us() -> int:
    return to_realtime_us(datetime.now(UTC) - timedelta(hours=1))


class AppliedRecords:
    """Test-only sink: every journal record the Monitor applied, in the order it applied them."""

    def __init__(self, monitor: Monitor) -> None:
        self.records: list[Record] = []
        apply = monitor.apply

        def spy(item: Any) -> None:
            apply(item)
            if isinstance(item, JournalBatch):
                self.records.extend(item.records)

        monitor.apply = spy  # type: ignore[method-assign]

    def seqs(self) -> list[int]:
        """The ``seq=N`` numbers of the applied records, in order."""
        return [int(m.group(1)) for r in self.records if (m := SEQ.search(r.message))]

    def check(self, count: int) -> None:
        """Assert that exactly ``seq=0 … count-1`` were applied, once each, in order."""
        seqs = self.seqs()
        if seqs != list(range(count)):
            missing = sorted(set(range(count)) - set(seqs))
            twice = sorted(s for s, n in collections.Counter(seqs).items() if n > 1)
            disorder = [(a, b) for a, b in itertools.pairwise(seqs) if b <= a]
            raise AssertionError(
                f"{len(seqs)} applied for {count} written: missing {missing[:20]}, "
                f"twice {twice[:20]}, out of order {disorder[:10]}"
            )

    def last_seq(self) -> int:
        for record in reversed(self.records):
            if found := SEQ.search(record.message):
                return int(found.group(1))
        return -1


async def until(predicate: Callable[[], bool], limit: float, what: str) -> float:
    """Poll ``predicate`` every 5 ms until it holds; return the seconds waited; fail late."""
    start = time.monotonic()
    while not predicate():
        if time.monotonic() - start > limit:
            raise AssertionError(f"timed out after {limit}s waiting for {what}")
        await asyncio.sleep(0.005)
    return time.monotonic() - start


def unit_snapshot(monitor: Monitor, host: str = HOST, unit: str = UNIT) -> UnitSnapshot:
    snapshot = monitor.publish()
    (found,) = [u for h in snapshot.hosts if h.host == host for u in h.units if u.unit == unit]
    return found


class PacedWriter(threading.Thread):
    """Write ``info_line``s as fast as journal-remote takes them, in small flushed batches."""

    def __init__(self, writer: JournalWriter, first_seq: int, base_us: int, batch: int = 20):
        super().__init__(daemon=True)
        self.writer = writer
        self.next_seq = first_seq
        self.base_us = base_us
        self.batch = batch
        self.stopping = threading.Event()
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            while not self.stopping.is_set():
                seqs = range(self.next_seq, self.next_seq + self.batch)
                self.writer.write_and_flush([info_line(s, self.base_us + s * 100) for s in seqs])
                self.next_seq += self.batch
                self.stopping.wait(0.005)  # pacing of the producer, not synchronisation
        except BaseException as error:  # surfaced by stop()
            self.error = error

    def stop(self) -> int:
        """Stop writing; return how many records were written in all (``next_seq``)."""
        self.stopping.set()
        self.join(10)
        if self.error is not None:
            raise self.error
        return self.next_seq


@contextlib.asynccontextmanager
async def following(
    monitor: Monitor,
    transport: Transport,
    settings: FollowerSettings,
    *,
    host: str = HOST,
    cursor: str | None = None,
    sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
) -> AsyncIterator[JournalFollower]:
    """Run a ``JournalFollower`` into ``monitor`` as the daemon does (one queue, one writer)."""
    queue: asyncio.Queue[Any] = asyncio.Queue(4096)
    follower = JournalFollower(host, transport, settings, cursor=cursor, sleep=sleep)
    monitor.register_collector(host, "journal", lambda: follower.state)
    tasks = [asyncio.create_task(monitor.run(queue)), asyncio.create_task(follower.run(queue.put))]
    try:
        yield follower
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await transport.close()
        for task in tasks:
            if task.done() and not task.cancelled() and task.exception() is not None:
                raise cast(BaseException, task.exception())


def proxy_known_hosts(server: SshTestServer, port: int, directory: Path) -> Path:
    """A known_hosts file naming the server's key for ``[127.0.0.1]:port`` (the proxy)."""
    text = server.known_hosts_path.read_text()
    path = directory / f"known_hosts_{port}"
    path.write_text(text.replace(f"[127.0.0.1]:{server.port}", f"[127.0.0.1]:{port}"))
    return path


@contextlib.asynccontextmanager
async def daemon_with_sink(
    config: Config, config_path: Path | None = None
) -> AsyncIterator[tuple[RunningDaemon, AppliedRecords]]:
    """``running_daemon`` with an ``AppliedRecords`` sink installed before the first record."""
    daemon = Daemon(config, config_path)
    applied = AppliedRecords(daemon.monitor)
    task = asyncio.create_task(daemon.run())
    await until(lambda: daemon.http is not None or task.done(), 10, "the HTTP server")
    if task.done():
        task.result()
    try:
        yield RunningDaemon(daemon, task), applied
    finally:
        daemon.request_stop()
        await asyncio.wait_for(task, 30)


def log_events(logs: list[MutableMapping[str, Any]], event: str) -> list[MutableMapping[str, Any]]:
    return [entry for entry in logs if entry.get("event") == event]


def levels_of(samples: Samples, unit: str = UNIT) -> dict[str, float]:
    return {
        dict(labels)["level"]: v
        for (name, labels), v in samples.items()
        if name == "vllm_sentinel_unit_log_records_total" and ("unit", unit) in labels
    }


# --- SSH drops --------------------------------------------------------------------------------


def _has_read_more(follower: JournalFollower, than: int) -> bool:
    return follower.state.up and follower.records_total > than


def _has_reconnected(follower: JournalFollower, reconnects_before: int) -> bool:
    return follower.state.reconnects_total > reconnects_before


class TestSshDrops:
    """Connections killed mid-stream: every record applied once, in order."""

    async def test_fifty_drops_during_a_fast_stream_lose_and_double_nothing(
        self, journal_writer: JournalWriter, ssh_server: SshTestServer, tmp_path: Path
    ) -> None:
        """150 TCP resets while records stream in: the engine applied exactly 0..N-1, once each."""
        base = hour_ago_us()
        backfilled = 200
        journal_writer.write_and_flush(
            [started(base), *(info_line(s, base + s * 100) for s in range(backfilled))]
        )
        journal_writer.wait_until_readable(backfilled + 1)
        cursors = CursorStore(tmp_path / "state")
        monitor = Monitor([HostPlan(HOST, (UNIT,))], cursors=cursors)
        applied = AppliedRecords(monitor)
        settings = FollowerSettings(
            units=(UNIT,),
            journalctl_args=(f"--directory={journal_writer.path.parent}",),
            reconnect_initial_seconds=0.02,
            reconnect_max_seconds=0.2,
        )
        transport = SshTransport(HOST, ssh_server.settings(connect_timeout_seconds=5.0))
        producer = PacedWriter(journal_writer, backfilled, base)
        started_at = time.monotonic()
        async with following(monitor, transport, settings) as follower:
            await until(lambda: applied.last_seq() == backfilled - 1, 20, "the backfill")
            producer.start()
            drops = 0
            while drops < DROPS:
                # each drop hits a live stream: reconnected after the last one, reading again
                await until(
                    functools.partial(_has_read_more, follower, follower.records_total + 5),
                    20,
                    f"records after reconnect {drops}",
                )
                before = follower.state.reconnects_total
                if ssh_server.drop_all_connections():
                    drops += 1
                    await until(
                        functools.partial(_has_reconnected, follower, before),
                        20,
                        f"reconnect {drops}",
                    )
            written = producer.stop()
            await until(lambda: applied.last_seq() == written - 1, 30, f"all {written} records")
            reconnects = follower.state.reconnects_total
        elapsed = time.monotonic() - started_at
        applied.check(written)
        assert len(applied.records) == written + 1  # and the "Started" line, once
        unit = unit_snapshot(monitor)
        # the backfilled records were history (written before the follower ran): not counted
        assert unit.records_by_level["info"] == written - backfilled
        assert len(unit.incarnations) == 1  # 150 resumes never made a second incarnation
        assert unit.starts_total == 0  # its start was history (written before the follower ran)
        assert reconnects >= DROPS
        assert monitor.applied_cursor(HOST) == applied.records[-1].cursor
        monitor.checkpoint()
        assert cursors.marked(HOST) == applied.records[-1].cursor
        print(f"\nssh drops: {drops} drops, {written} records checked, {elapsed:.1f}s")


# --- a host that stops answering ------------------------------------------------------------


async def _run_true(transport: SshTransport) -> None:
    await transport.run(["true"], 30)


async def _stream_true(transport: SshTransport) -> None:
    stream = transport.stream(["true"])
    async with contextlib.aclosing(stream):
        await anext(stream)


class TestSilentPeer:
    """A peer that stops answering (blackholed by a TCP proxy) is noticed in bounded time."""

    async def test_connection_setup_times_out(
        self, ssh_server: SshTestServer, tmp_path: Path
    ) -> None:
        """TCP connects but the SSH handshake is never answered: fails after connect_timeout."""
        async with BlackholeProxy(ssh_server.port) as proxy:
            proxy.blackhole()
            known = proxy_known_hosts(ssh_server, proxy.port, tmp_path)
            settings = ssh_server.settings(
                port=proxy.port, known_hosts=str(known), connect_timeout_seconds=1.0
            )
            transport = SshTransport(HOST, settings)
            for attempt in ("run", "stream"):
                start = time.monotonic()
                with pytest.raises(TransportError) as error:
                    await (_run_true if attempt == "run" else _stream_true)(transport)
                elapsed = time.monotonic() - start
                assert error.value.reason == "ssh_connect_failed", attempt
                assert 0.9 <= elapsed < 2.0, (attempt, elapsed)
                print(f"\nconnect_timeout 1s, silent peer, {attempt}: failed after {elapsed:.2f}s")
            assert proxy.accepted_total == 2
            await transport.close()

    async def test_keepalive_drops_a_silent_peer_within_its_bound(
        self, ssh_server: SshTestServer, tmp_path: Path
    ) -> None:
        """A quiet, open stream fails with ssh_connection_lost within interval × (count + 1)."""
        argv = ["sh", "-c", "echo following; exec sleep 60"]  # like journalctl -f with no news
        interval, count = 0.25, 3
        bound = interval * (count + 1)
        async with BlackholeProxy(ssh_server.port) as proxy:
            known = proxy_known_hosts(ssh_server, proxy.port, tmp_path)
            settings = ssh_server.settings(
                port=proxy.port,
                known_hosts=str(known),
                keepalive_interval_seconds=interval,
                keepalive_count_max=count,
            )
            transport = SshTransport(HOST, settings)
            stream = transport.stream(argv)
            async with contextlib.aclosing(stream):
                assert await anext(stream) == b"following\n"
                proxy.blackhole()
                start = time.monotonic()
                with pytest.raises(TransportError) as error:
                    async for _chunk in stream:
                        pass
                elapsed = time.monotonic() - start
            await transport.close()
        assert error.value.reason == "ssh_connection_lost"
        assert elapsed <= bound + 0.3, elapsed
        print(f"\nkeepalive {interval}s x ({count}+1): silent peer dropped after {elapsed:.2f}s")

    async def test_run_is_bounded_by_its_timeout_on_a_silent_peer(
        self, ssh_server: SshTestServer, tmp_path: Path
    ) -> None:
        """Without keepalives, run() on a connection gone silent still ends at its timeout."""
        async with BlackholeProxy(ssh_server.port) as proxy:
            known = proxy_known_hosts(ssh_server, proxy.port, tmp_path)
            settings = ssh_server.settings(
                port=proxy.port, known_hosts=str(known), keepalive_interval_seconds=0
            )
            transport = SshTransport(HOST, settings)
            assert await transport.run(["echo", "hi"], 5) == b"hi\n"
            proxy.blackhole()
            start = time.monotonic()
            with pytest.raises(TransportError) as error:
                await transport.run(["echo", "hi"], 0.5)
            elapsed = time.monotonic() - start
            await transport.close()
        assert error.value.reason == "timeout"
        assert elapsed < 0.9, elapsed
        print(f"\nrun(timeout=0.5) on a silent peer, keepalives off: failed after {elapsed:.2f}s")


def _remote_config(
    proxy_port: int,
    server: SshTestServer,
    known_hosts: Path,
    journal_dir: Path,
    state_dir: Path,
    poll_seconds: float,
) -> Config:
    return parse_config(
        f"""
[exporter]
listen = "127.0.0.1:{free_port()}"
[defaults]
state_directory = "{state_dir}"
cursor_flush_interval_seconds = 0.2
gpu_poll_interval_seconds = {poll_seconds}
[[hosts]]
name = "{HOST}"
address = "127.0.0.1"
port = {proxy_port}
client_keys = ["{server.client_key_path}"]
known_hosts = "{known_hosts}"
connect_timeout_seconds = 1.0
units = ["{UNIT}"]
journalctl_args = ["--directory={journal_dir}"]
gpu = "nvidia-smi"
"""
    )


class TestHostDown:
    """A remote host stops answering, then comes back, while the daemon runs."""

    async def test_down_within_two_poll_intervals_then_picked_up_again(
        self,
        journal_writer: JournalWriter,
        tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch,
    ) -> None:
        """collector_up 0 within 2 intervals, phase kept, state_known 0; back: resumes from cursor."""
        poll = 1.0
        gpu_state = tmp_path / "gpus.json"
        gpu_state.write_text(
            json.dumps(
                {
                    "gpus": [
                        {
                            "index": 0,
                            "uuid": "GPU-0",
                            "name": "NVIDIA H200",
                            "memory.used": 1000,
                            "memory.total": 143771,
                        },
                        {  # a GPU nvidia-smi cannot read: skipped, counted, exported
                            "index": 1,
                            "uuid": "GPU-1",
                            "name": "NVIDIA GB10",
                            "memory.used": "[N/A]",
                            "memory.total": "[N/A]",
                        },
                    ],
                    "apps": [],
                }
            )
        )
        monkeypatch.setenv("FAKE_NVIDIA_SMI_STATE", str(gpu_state))
        base = hour_ago_us()
        loading = (
            f"(Worker_TP0 pid={PID}) INFO 11-29 10:00:21 [gpu_model_runner.py:3425] "
            "Starting to load model /shared/kimi-k2.5..."
        )
        journal_writer.write_and_flush(
            [started(base), service_line(UNIT, INVOCATION, PID, loading, base + 10)]
        )
        journal_writer.wait_until_readable(2)
        async with (
            SshTestServer(tmp_path / "ssh", path_prepend=(STUB_BIN,)) as server,
            BlackholeProxy(server.port) as proxy,
        ):
            known = proxy_known_hosts(server, proxy.port, tmp_path)
            config = _remote_config(
                proxy.port, server, known, journal_writer.path.parent, tmp_path / "state", poll
            )
            settings = effective_ssh_settings(config.hosts[0])
            assert settings is not None
            detect = settings.keepalive_interval_seconds * (settings.keepalive_count_max + 1)
            assert detect == pytest.approx(HOST_DOWN_DETECTION_RATIO * poll)

            def all_up(s: Samples) -> bool:
                return (
                    value(s, "vllm_sentinel_collector_up", collector="journal") == 1
                    and value(s, "vllm_sentinel_collector_up", collector="gpu") == 1
                    and value(s, "vllm_sentinel_unit_state_known", unit=UNIT) == 1
                )

            async with daemon_with_sink(config) as (daemon, applied):
                samples = await daemon.wait_for(
                    lambda s: all_up(s) and current_phase(s, UNIT) == "loading_weights",
                    what="up and loading",
                )
                skipped = value(
                    samples, "vllm_sentinel_records_skipped_total", reason="gpu_line_not_available"
                )
                assert skipped is not None and skipped >= 1
                proxy.blackhole()
                start = time.monotonic()
                samples = await daemon.wait_for(
                    lambda s: (
                        value(s, "vllm_sentinel_collector_up", collector="journal") == 0
                        and value(s, "vllm_sentinel_collector_up", collector="gpu") == 0
                    ),
                    timeout=10,
                    what="collectors down",
                )
                down_after = time.monotonic() - start
                assert down_after <= 2 * poll, f"down after {down_after:.2f}s"
                assert value(samples, "vllm_sentinel_unit_state_known", unit=UNIT) == 0
                assert current_phase(samples, UNIT) == "loading_weights"
                # written while the host is unreachable: must arrive once it is back
                journal_writer.write_and_flush([info_line(s, base + 100 + s) for s in range(50)])
                journal_writer.wait_until_readable(52)
                proxy.restore()
                start = time.monotonic()
                samples = await daemon.wait_for(all_up, timeout=30, what="collectors up again")
                up_after = time.monotonic() - start
                await until(lambda: applied.last_seq() == 49, 10, "records written while down")
                journal_writer.write_and_flush(
                    [info_line(s, base + 100 + s) for s in range(50, 60)]
                )
                await until(lambda: applied.last_seq() == 59, 10, "records after the return")
                # counters show what was saved with the cursor (at most a flush interval later)
                samples = await daemon.wait_for(
                    lambda s: levels_of(s).get("info") == 60, what="60 records counted"
                )
            applied.check(60)
            # the 60 written while it ran; "Starting to load model" was history (before its start)
            assert levels_of(samples)["info"] == 60
            assert current_phase(samples, UNIT) == "loading_weights"
            # the start was written before the daemon started (history, not counted) and the
            # reconnect did not make a second incarnation of it
            assert value(samples, "vllm_sentinel_unit_starts_total", unit=UNIT) == 0
            (unit,) = daemon.daemon.monitor.latest.hosts[0].units
            assert len(unit.incarnations) == 1
        print(
            f"\nhost down: collector_up 0 after {down_after:.2f}s (bound {2 * poll:g}s); "
            f"picked up {up_after:.2f}s after it answered again"
        )


# --- rotation and vacuum -----------------------------------------------------------------------


def _children(match: str) -> list[int]:
    """PIDs of this process's children whose command line contains ``match``."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            continue
        parent = int(stat.rsplit(")", 1)[1].split()[1])
        if parent == os.getpid() and match in cmdline:
            found.append(int(entry.name))
    return found


class Gate:
    """An injected reconnect pause that waits until the test opens it."""

    def __init__(self) -> None:
        self.opened = asyncio.Event()
        self.opened.set()
        self.waiting = 0

    async def sleep(self, seconds: float) -> None:
        self.waiting += 1
        await self.opened.wait()
        await asyncio.sleep(min(seconds, 0.05))  # a short real pause once open


class TestRotation:
    """A new journal file in the directory, the old one archived and deleted, while following."""

    def _settings(self, directory: Path) -> FollowerSettings:
        return FollowerSettings(units=(UNIT,), journalctl_args=(f"--directory={directory}",))

    async def test_rotation_and_vacuum_while_following(
        self, journal_writer: JournalWriter, journal_remote: str, tmp_path: Path
    ) -> None:
        """Records go to a new file, the old one is renamed then deleted: all applied once."""
        directory = journal_writer.path.parent
        base = hour_ago_us()
        journal_writer.write_and_flush(
            [started(base), *(info_line(s, base + 10 + s) for s in range(100))]
        )
        head = orjson.loads(journal_writer.wait_until_readable(101)[0])
        seqnum_id = re.search(r"s=([0-9a-f]{32})", head["__CURSOR"])
        assert seqnum_id is not None
        # journald's name for an archived file: NAME@SEQNUM_ID-HEAD_SEQNUM-HEAD_REALTIME.journal
        archived = directory / (
            f"test@{seqnum_id.group(1)}-{1:016x}-{int(head['__REALTIME_TIMESTAMP']):016x}.journal"
        )
        monitor = Monitor([HostPlan(HOST, (UNIT,))])
        applied = AppliedRecords(monitor)
        async with following(monitor, LocalTransport(HOST), self._settings(directory)):
            await until(lambda: applied.last_seq() == 99, 20, "the first file")
            with JournalWriter(directory, "rotated", binary=journal_remote) as second:
                second.write_and_flush([info_line(s, base + 10 + s) for s in range(100, 200)])
                await until(lambda: applied.last_seq() == 199, 20, "the new file")
                journal_writer.close()
                journal_writer.path.rename(archived)  # archived while followed
                second.write_and_flush([info_line(s, base + 10 + s) for s in range(200, 300)])
                await until(lambda: applied.last_seq() == 299, 20, "after archiving")
                archived.unlink()  # vacuum
                second.write_and_flush([info_line(s, base + 10 + s) for s in range(300, 400)])
                await until(lambda: applied.last_seq() == 399, 20, "after vacuum")
        applied.check(400)
        # the first file's 100 were history (written before the follower ran): not counted
        assert unit_snapshot(monitor).records_by_level["info"] == 300

    async def test_reconnect_after_the_cursor_was_vacuumed_resumes_at_its_position(
        self, journal_writer: JournalWriter, journal_remote: str, journalctl: str
    ) -> None:
        """journalctl dies; the cursor's file is rotated and deleted meanwhile; nothing is lost.

        systemd 252 ``--after-cursor`` skips the first entry after a cursor that is gone;
        the follower resumes with ``--cursor`` and keeps it.
        """
        directory = journal_writer.path.parent
        base = hour_ago_us()
        journal_writer.write_and_flush(
            [started(base), *(info_line(s, base + 10 + s) for s in range(100))]
        )
        journal_writer.wait_until_readable(101)
        monitor = Monitor([HostPlan(HOST, (UNIT,))])
        applied = AppliedRecords(monitor)
        gate = Gate()
        with capture_logs() as logs:
            async with following(
                monitor, LocalTransport(HOST), self._settings(directory), sleep=gate.sleep
            ) as follower:
                await until(lambda: applied.last_seq() == 99, 20, "the first file")
                last_cursor = follower.cursor
                gate.opened.clear()
                paused = gate.waiting

                def kill_followers() -> bool:
                    for child in _children("--follow"):  # journalctl dies: a reconnect is due
                        with contextlib.suppress(ProcessLookupError):
                            os.kill(child, signal.SIGKILL)
                    return gate.waiting > paused

                await until(kill_followers, 10, "the follower in its reconnect pause")
                with JournalWriter(directory, "rotated", binary=journal_remote) as second:
                    second.write_and_flush([info_line(s, base + 10 + s) for s in range(100, 200)])
                    second.wait_until_readable(100)
                    journal_writer.close()
                    journal_writer.path.unlink()  # rotated and vacuumed while disconnected
                    gate.opened.set()
                    await until(lambda: applied.last_seq() == 199, 20, "the new file")
        applied.check(200)
        (unknown,) = log_events(logs, "journal_cursor_unknown")
        assert unknown["action"] == "resume_at_position"
        assert last_cursor is not None
        # the same resume with --after-cursor loses the first record of the new file
        argv = [
            journalctl,
            f"--directory={directory}",
            "-o",
            "json",
            f"--after-cursor={last_cursor}",
        ]
        after = await asyncio.to_thread(subprocess.run, argv, capture_output=True, check=True)
        first = orjson.loads(after.stdout.splitlines()[0])["MESSAGE"]
        assert first.endswith("seq=101"), "systemd's --after-cursor changed: revisit the note"


class TestCancellation:
    """Stopping a follower (host removed, daemon stopping) always works, whenever it comes."""

    async def test_a_cancellation_landing_as_a_query_completes_is_not_lost(
        self, journal_writer: JournalWriter, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """The follower is cancelled just as its journalctl query returns: it stops.

        Regression: ``asyncio.wait_for`` (Python 3.11) returns the result and swallows a
        cancellation that lands as the awaited call completes; the follower then went on
        following a removed host, and the daemon's shutdown waited 30 s for it.
        """
        journal_writer.write_and_flush([started(hour_ago_us())])
        journal_writer.wait_until_readable(1)
        target: list[asyncio.Task[None]] = []
        communicate = asyncio.subprocess.Process.communicate

        async def cancelled_on_return(process: Any, input: bytes | None = None) -> Any:
            result = await communicate(process, input)
            if target and not target[0].done():
                target[0].cancel()  # the stop request arrives as the command completes
            return result

        monkeypatch.setattr(asyncio.subprocess.Process, "communicate", cancelled_on_return)
        settings = FollowerSettings(
            units=(UNIT,), journalctl_args=(f"--directory={journal_writer.path.parent}",)
        )
        follower = JournalFollower(HOST, LocalTransport(HOST), settings)
        queue: asyncio.Queue[Any] = asyncio.Queue()
        target.append(asyncio.create_task(follower.run(queue.put)))
        done, _ = await asyncio.wait(target, timeout=5)
        assert done, "the follower lost its cancellation and kept running"
        assert target[0].cancelled()
        assert queue.empty()  # stopped before the backfill

    async def test_a_follower_stops_promptly_whenever_it_is_cancelled(
        self, journal_writer: JournalWriter
    ) -> None:
        """60 cancellations at random points of backfill and follow: each stops within 2 s."""
        base = hour_ago_us()
        journal_writer.write_and_flush(
            [started(base), *(info_line(s, base + 10 + s) for s in range(50))]
        )
        lines = journal_writer.wait_until_readable(51)
        stored = orjson.loads(lines[10])["__CURSOR"]  # the probe and backfill queries run too
        settings = FollowerSettings(
            units=(UNIT,), journalctl_args=(f"--directory={journal_writer.path.parent}",)
        )
        rng = random.Random(4)  # test timing only
        slowest = 0.0
        for attempt in range(60):
            monitor = Monitor([HostPlan(HOST, (UNIT,))])
            follower = JournalFollower(HOST, LocalTransport(HOST), settings, cursor=stored)
            queue: asyncio.Queue[Any] = asyncio.Queue()
            task = asyncio.create_task(follower.run(queue.put))
            await asyncio.sleep(rng.uniform(0, 0.03))  # where the cancellation lands
            task.cancel()
            start = time.monotonic()
            done, _ = await asyncio.wait({task}, timeout=2)
            slowest = max(slowest, time.monotonic() - start)
            assert done, f"attempt {attempt}: the follower ignored its cancellation"
            assert task.cancelled(), f"attempt {attempt}: {task}"
            while not queue.empty():
                monitor.apply(queue.get_nowait())
        await until(lambda: not _children("journalctl"), 5, "no journalctl left behind")
        assert slowest < 1.0


# --- config reload -----------------------------------------------------------------------------


def _two_host_config(
    state: Path, hosts: dict[str, tuple[Path, list[str]]], *, extra: str = ""
) -> str:
    text = f"""
[exporter]
listen = "127.0.0.1:{{port}}"
[defaults]
state_directory = "{state}"
cursor_flush_interval_seconds = 0.2
{extra}
"""
    for name, (directory, units) in hosts.items():
        text += f"""
[[hosts]]
name = "{name}"
local = true
units = {json.dumps(units)}
journalctl_args = ["--directory={directory}"]
gpu = "none"
"""
    return text


OTHER = "vllm-qwen3.service"
THIRD = "vllm-llama.service"


def _crash(unit: str, invocation: str, base_us: int) -> list[dict[str, Any]]:
    """A start, an OOM crash and its exit, 30 min in the past (settled by log time)."""
    return [
        started(base_us, unit, invocation),
        service_line(unit, invocation, PID, "ERROR 11-29 10:00:30 [core.py:1] EngineCore failed to start.", base_us + 10),
        service_line(unit, invocation, PID, "ERROR 11-29 10:00:30 [core.py:1] torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB.", base_us + 20),
        manager_line(unit, invocation, f"{unit}: Main process exited, code=exited, status=1/FAILURE", None, base_us + 30),
    ]  # fmt: skip


def _hosts_in(samples: Samples) -> set[str]:
    return {dict(labels).get("host", "") for (_n, labels), _v in samples.items()} - {""}


def _units_in(samples: Samples, host: str) -> set[str]:
    return {
        dict(labels)["unit"]
        for (_n, labels), _v in samples.items()
        if ("host", host) in labels and "unit" in dict(labels)
    }


class TestConfigReload:
    """SIGHUP / ``Daemon.reload()``: add and remove hosts and units, keep the rest."""

    async def test_reload_adds_and_removes_hosts_and_units_keeping_the_others(
        self, journal_remote: str, journalctl: str, tmp_path: Path
    ) -> None:
        """Kept hosts keep their crash counters; removed series vanish; a bad file is refused."""
        base = to_realtime_us(datetime.now(UTC) - timedelta(minutes=30))
        dirs = {name: tmp_path / name for name in ("alpha", "beta", "gamma")}
        writers = {}
        for name, directory in dirs.items():
            directory.mkdir()
            writers[name] = JournalWriter(directory, name, binary=journal_remote)
        state = tmp_path / "state"
        state.mkdir()
        # alpha and beta: the daemon had reported up to a minute before the crashes (a stored
        # cursor), so the crashes are new to it and counted; gamma has no stored cursor
        for name in ("alpha", "beta"):
            writers[name].write_and_flush([info_line(0, base - 60_000_000, unit="sshd.service")])
            marker = orjson.loads(writers[name].wait_until_readable(1)[0])["__CURSOR"]
            (state / f"{name}.cursor").write_text(marker + "\n")
        writers["alpha"].write_and_flush(
            [*_crash(UNIT, "a" * 32, base), started(base + 100, OTHER, "b" * 32)]
        )
        writers["beta"].write_and_flush(_crash(UNIT, "c" * 32, base))
        writers["gamma"].write_and_flush([started(base, THIRD, "d" * 32)])
        for name, count in (("alpha", 6), ("beta", 5), ("gamma", 1)):
            writers[name].wait_until_readable(count)
        path = tmp_path / "sentinel.toml"
        port = free_port()

        def write(hosts: dict[str, list[str]]) -> None:
            text = _two_host_config(state, {h: (dirs[h], u) for h, u in hosts.items()})
            path.write_text(text.replace("{port}", str(port)))

        write({"alpha": [UNIT], "beta": [UNIT]})
        crashed = "vllm_sentinel_unit_crashes_total"
        try:
            async with daemon_with_sink(load_config(path), path) as (daemon, applied):
                samples = await daemon.wait_for(
                    lambda s: (
                        value(s, crashed, host="alpha", unit=UNIT, cause="cuda_oom") == 1
                        and value(s, crashed, host="beta", unit=UNIT, cause="cuda_oom") == 1
                    ),
                    what="both crashes counted",
                )
                assert _units_in(samples, "alpha") == {UNIT}
                before = len(applied.records)

                # alpha gains a unit (so it is restarted), beta goes, gamma comes
                write({"alpha": [UNIT, OTHER], "gamma": [THIRD]})
                with capture_logs() as logs:
                    assert await daemon.daemon.reload()
                (reloaded,) = log_events(logs, "config_reloaded")
                assert (reloaded["hosts"], reloaded["restarted"], reloaded["removed"]) == (
                    ["alpha", "gamma"],
                    ["alpha"],
                    ["beta"],
                )
                samples = await daemon.wait_for(
                    lambda s: (
                        _units_in(s, "alpha") == {UNIT, OTHER} and _units_in(s, "gamma") == {THIRD}
                    ),
                    what="alpha's new unit and gamma",
                )
                assert "beta" not in _hosts_in(samples)
                assert value(samples, crashed, host="alpha", unit=UNIT, cause="cuda_oom") == 1
                assert (
                    value(samples, "vllm_sentinel_unit_starts_total", host="alpha", unit=UNIT) == 1
                )
                # alpha's records were read again from its window; the tracker kept them once
                assert len(applied.records) > before

                # a unit removed: its series go, the other unit's state stays
                write({"alpha": [OTHER], "gamma": [THIRD]})
                assert await daemon.daemon.reload()
                samples = await daemon.wait_for(
                    lambda s: (
                        _units_in(s, "alpha") == {OTHER}
                        and value(s, "vllm_sentinel_unit_starts_total", host="alpha", unit=OTHER)
                        == 1
                    ),
                    what="alpha's unit removed",
                )
                assert (
                    value(samples, "vllm_sentinel_unit_starts_total", host="alpha", unit=OTHER) == 1
                )

                # a bad file: refused with a clear error, the running config stays
                kept = daemon.daemon.config
                path.write_text(path.read_text().replace('gpu = "none"', 'gpu = "tpu"', 1))
                with capture_logs() as logs:
                    assert not await daemon.daemon.reload()
                (failed,) = log_events(logs, "config_reload_failed")
                assert failed["log_level"] == "error"
                assert "hosts[0].gpu" in failed["error"] and str(path) in failed["error"]
                assert daemon.daemon.config is kept
                samples = await daemon.metrics()
                assert _hosts_in(samples) == {"alpha", "gamma"}
                assert value(samples, "vllm_sentinel_collector_up", host="gamma") is not None
        finally:
            for writer in writers.values():
                writer.close()

    async def test_sighup_reloads_and_sigterm_flushes_the_cursor(
        self, journal_writer: JournalWriter, journal_remote: str, tmp_path: Path
    ) -> None:
        """``vllm-sentinel run``: SIGHUP swaps hosts, refuses a bad file; SIGTERM saves cursors."""
        require_binary("journalctl")  # what the child daemon runs, found on PATH
        base = hour_ago_us()
        journal_writer.write_and_flush([started(base)])
        other_dir = tmp_path / "other"
        other_dir.mkdir()
        state = tmp_path / "state"
        port = free_port()
        path = tmp_path / "sentinel.toml"

        def write(hosts: dict[str, tuple[Path, list[str]]]) -> None:
            # flushes only at shutdown: the cursor files prove that SIGTERM wrote them
            text = _two_host_config(state, hosts).replace("{port}", str(port))
            path.write_text(text.replace("= 0.2", "= 3600"))

        write({"alpha": (journal_writer.path.parent, [UNIT])})
        with JournalWriter(other_dir, "other", binary=journal_remote) as other:
            other.write_and_flush([started(base, OTHER, "b" * 32), info_line(1, base + 5, OTHER)])
            last = orjson.loads(other.wait_until_readable(2)[-1])["__CURSOR"]
            journal_writer.wait_until_readable(1)
            with daemon_process(path) as process:
                url = f"http://127.0.0.1:{port}/metrics"
                await _wait_metrics(process, url, lambda s: _units_in(s, "alpha") == {UNIT})
                write({"beta": (other_dir, [OTHER])})
                process.send_signal(signal.SIGHUP)
                samples = await _wait_metrics(
                    process,
                    url,
                    lambda s: _hosts_in(s) == {"beta"} and _units_in(s, "beta") == {OTHER},
                )
                path.write_text("[exporter\n")  # not TOML
                process.send_signal(signal.SIGHUP)
                await until(
                    lambda: any(e.get("event") == "config_reload_failed" for e in process.events),
                    10,
                    "config_reload_failed",
                )
                samples = parse_metrics(await asyncio.to_thread(_get, url))
                assert _hosts_in(samples) == {"beta"}
                process.send_signal(signal.SIGTERM)
                code = await asyncio.to_thread(process.wait, 30)
            assert code == 0
            (failed,) = [e for e in process.events if e.get("event") == "config_reload_failed"]
            assert failed["level"] == "error" and str(path) in failed["error"]
            (stopped,) = [e for e in process.events if e.get("event") == "daemon_stopped"]
            # alpha's state was saved when the reload removed it (and beta's first start was
            # saved before beta read anything); SIGTERM saved beta's last cursor
            assert stopped["cursors_written_at_stop"] == 1
            assert stopped["cursors_stored"] == 1  # beta, the one host left after the reload
            assert CursorStore(state).load("beta") == last


def _get(url: str) -> str:
    with urllib.request.urlopen(url, timeout=5) as response:
        return str(response.read().decode())


async def _wait_metrics(
    process: subprocess.Popen[bytes], url: str, predicate: Callable[[Samples], bool]
) -> Samples:
    deadline = time.monotonic() + 30
    samples: Samples = {}
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise AssertionError(f"vllm-sentinel exited with {process.returncode}")
        with contextlib.suppress(OSError):
            samples = parse_metrics(await asyncio.to_thread(_get, url))
            if predicate(samples):
                return samples
        await asyncio.sleep(0.05)
    raise AssertionError(f"timed out; hosts seen: {_hosts_in(samples)}")


# --- restart with an unknown cursor ---------------------------------------------------------


class TestUnknownCursor:
    """A stored cursor the journal does not hold: the window backfill, said in the log."""

    @pytest.mark.parametrize("kind", ["garbage", "other_machine", "vacuumed"])
    async def test_unknown_cursor_falls_back_to_the_window(
        self, kind: str, journal_writer: JournalWriter, journal_remote: str, tmp_path: Path
    ) -> None:
        """Records older than the window are not read; the window's are, once each."""
        now = datetime.now(UTC)
        old = to_realtime_us(now - timedelta(hours=30))  # before the 24 h window
        recent = to_realtime_us(now - timedelta(hours=1))
        directory = journal_writer.path.parent
        elsewhere = tmp_path / "elsewhere"
        elsewhere.mkdir()
        if kind == "garbage":
            cursor = "s=not-a-cursor;i=zz"
        elif kind == "other_machine":
            far = to_realtime_us(now - timedelta(days=2))
            with JournalWriter(elsewhere, "other", binary=journal_remote) as other:
                other.write_and_flush(
                    [service_line(UNIT, "e" * 32, 1, "hi", far, boot_id="e" * 32, hostname="other")]
                )
                cursor = orjson.loads(other.wait_until_readable(1)[0])["__CURSOR"]
        else:  # the entry was in this directory, in a file since rotated away and deleted
            far = to_realtime_us(now - timedelta(days=2))
            with JournalWriter(directory, "vacuumed", binary=journal_remote) as gone:
                gone.write_and_flush([info_line(-1, far)])
                cursor = orjson.loads(gone.wait_until_readable(1)[0])["__CURSOR"]
            (directory / "vacuumed.journal").unlink()
        journal_writer.write_and_flush(
            [started(old, invocation="0" * 32), info_line(0, old + 10)]
            + [started(recent)] + [info_line(s, recent + 10 + s) for s in range(1, 21)]
        )  # fmt: skip
        journal_writer.wait_until_readable(23)
        state = tmp_path / "state"
        state.mkdir()
        (state / "llm-two.cursor").write_text(cursor + "\n")
        config = local_config(directory, state, units=f'["{UNIT}"]')
        with capture_logs() as logs:
            async with daemon_with_sink(config) as (daemon, applied):
                await until(lambda: applied.last_seq() == 20, 20, "the window backfill")
                # counted: what follows the time inside the stored cursor (2 days ago); a
                # cursor with no readable time says nothing, so the window is history, as on
                # a first start
                counted = 0 if kind == "garbage" else 20
                samples = await daemon.wait_for(
                    lambda s: (
                        levels_of(s).get("info") == counted
                        and value(s, "vllm_sentinel_cursor_saved_timestamp_seconds") is not None
                    ),
                    what=f"{counted} info records",
                )
        assert applied.seqs() == list(range(1, 21))
        starts = 0 if kind == "garbage" else 1
        assert value(samples, "vllm_sentinel_unit_starts_total", unit=UNIT) == starts
        (unknown,) = log_events(logs, "journal_cursor_unknown")
        assert unknown["action"] == "window_backfill" and unknown["host"] == "llm-two"
        (backfill,) = log_events(logs, "journal_backfill_started")
        assert backfill["reads_from"] == "window_start"
        assert CursorStore(state).load("llm-two") == applied.records[-1].cursor


class LineByLineTransport(LocalTransport):
    """``LocalTransport`` whose streams hand over one line per chunk: a loaded machine, where
    ``journalctl``'s output arrives in pieces and each becomes a batch of its own."""

    async def stream(self, argv: Sequence[str]) -> AsyncGenerator[bytes, None]:
        async for chunk in super().stream(argv):
            for line in chunk.splitlines(keepends=True):
                yield line


async def _backfill_batches(
    transport: Transport, settings: FollowerSettings, stored: str, last: str
) -> list[JournalBatch]:
    """What a follower restarted from ``stored`` (the history boundary too) hands over until
    it has read the journal's ``last`` record."""
    follower = JournalFollower(
        HOST, transport, settings, cursor=stored,
        history=HistoryBoundary(stored, datetime.now(UTC)),
    )  # fmt: skip
    batches: list[JournalBatch] = []

    async def emit(batch: JournalBatch) -> None:
        batches.append(batch)

    task = asyncio.create_task(follower.run(emit))
    try:
        await until(lambda: follower.cursor == last, 10, "the backfill")
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
    return batches


class TestHistoryPosition:
    """The records an earlier run counted (history) never move the saved position back."""

    async def test_history_read_in_pieces_keeps_the_stored_cursor(
        self, journal_writer: JournalWriter
    ) -> None:
        """Regression (chaos seed 188 under load): the backfill's first piece, all history,
        moved the position to its last record, before the stored cursor; a flush saved that
        cursor with the counters as of the stored one, and the next start counted the records
        between the two again (a unit's start and records twice)."""
        base = hour_ago_us()
        journal_writer.write_and_flush(
            [started(base), *(info_line(s, base + 10 + s) for s in range(1, 30))]
        )
        lines = journal_writer.wait_until_readable(30)
        cursors = [orjson.loads(line)["__CURSOR"] for line in lines]
        stored = cursors[20]  # what the last run saved with its counters
        settings = FollowerSettings(
            units=(UNIT,), journalctl_args=(f"--directory={journal_writer.path.parent}",)
        )
        batches = await _backfill_batches(LineByLineTransport(HOST), settings, stored, cursors[-1])
        history = [record.cursor for b in batches if b.history for record in b.records]
        new = [record.cursor for b in batches if not b.history for record in b.records]
        assert history == cursors[:21] and new == cursors[21:]
        positions = [b.cursor for b in batches if b.cursor is not None]
        assert positions, "no batch carried a position"
        # the position a batch hands over is never before the stored cursor
        assert all(cursors.index(c) >= 20 for c in positions), [cursors.index(c) for c in positions]

    async def test_records_after_the_stored_cursor_are_read_whatever_their_stamps(
        self, journal_writer: JournalWriter
    ) -> None:
        """Regression (chaos seed 114 under load): a record written after the stored cursor
        may bear an earlier stamp (another writer's clock, a clock stepped back). The backfill
        read the window by time only (``--since`` its start, the latest starts' stamps), so an
        incarnation written after the cursor but stamped before the window was never read,
        and its start, crash and records never counted."""
        base = hour_ago_us()
        other = "filler.service"
        journal_writer.write_and_flush(
            [
                started(base + 100_000_000, invocation="1" * 32),
                *(info_line(s, base + 100_000_000 + s) for s in range(1, 4)),
                info_line(99, base + 900_000_000, unit=other),  # stamped late: the cursor
                # written after it, stamped before it: an incarnation the last run never saw
                started(base + 200_000_000, invocation="2" * 32),
                *(info_line(s, base + 200_000_000 + s) for s in range(4, 8)),
                started(base + 300_000_000, invocation="3" * 32),
                *(info_line(s, base + 300_000_000 + s) for s in range(8, 10)),
            ]
        )
        lines = journal_writer.wait_until_readable(13)
        cursors = [orjson.loads(line)["__CURSOR"] for line in lines]
        stored = cursors[4]  # the other unit's record: what the last run saved
        settings = FollowerSettings(
            units=(UNIT,),
            journalctl_args=(f"--directory={journal_writer.path.parent}",),
            backfill_max_invocations=1,  # the window: from the latest start on
        )
        batches = await _backfill_batches(LocalTransport(HOST), settings, stored, cursors[-1])
        new = [record.cursor for b in batches if not b.history for record in b.records]
        assert new == cursors[5:], [cursors.index(c) for c in new]  # each once, in order
        assert all(cursors.index(c) < 4 for b in batches if b.history for c in
                   (record.cursor for record in b.records))  # fmt: skip


# --- the cursor store: concurrent and failing writes ----------------------------------------


def _state_files(directory: Path) -> list[str]:
    return sorted(path.name for path in directory.iterdir())


class TestCursorStore:
    """``CursorStore.flush``: one valid file whoever writes, nothing pending lost on a failure."""

    async def test_concurrent_flushes_write_a_valid_file_and_no_temporaries(
        self, tmp_path: Path
    ) -> None:
        """Two threads marking and flushing 300 times each: no error, one whole cursor."""
        store = CursorStore(tmp_path / "state")
        start = threading.Barrier(2)
        errors: list[BaseException] = []

        def writer(name: str) -> None:
            start.wait()
            try:
                for n in range(300):
                    store.mark(HOST, f"s={name};i={n:x}")
                    store.flush_sync()
            except BaseException as error:  # reported by the assertion below
                errors.append(error)

        threads = [threading.Thread(target=writer, args=(name,)) for name in ("a", "b")]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(60)
        assert errors == []
        assert _state_files(tmp_path / "state") == [f"{HOST}.cursor"]
        text = (tmp_path / "state" / f"{HOST}.cursor").read_text()
        assert text.splitlines()[0] == store.marked(HOST)
        assert re.fullmatch(r"s=[ab];i=[0-9a-f]+", store.load(HOST) or "")

    async def test_the_final_flush_waits_for_the_one_in_flight(
        self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """The periodic flush cancelled mid-write (as on shutdown): the final flush waits for
        it, then writes the newest cursor; no write fails and no temporary file is left."""
        store = CursorStore(tmp_path / "state")
        real_replace = os.replace
        inside = threading.Event()
        release = threading.Event()
        writing: list[str] = []
        failures: list[BaseException] = []

        def replace(source: Any, target: Any) -> None:
            writing.append(Path(source).read_text().splitlines()[0])
            if len(writing) == 1:
                inside.set()
                release.wait(10)
            try:
                real_replace(source, target)
            except OSError as error:
                failures.append(error)
                raise

        monkeypatch.setattr(os, "replace", replace)
        store.mark(HOST, "s=x;i=1")
        periodic = asyncio.create_task(store.flush())
        assert await asyncio.to_thread(inside.wait, 10)
        periodic.cancel()  # what the daemon does to its flusher on SIGTERM
        with contextlib.suppress(asyncio.CancelledError):
            await periodic
        store.mark(HOST, "s=x;i=2")
        waiting = asyncio.create_task(store.flush())
        await asyncio.sleep(0.05)
        waiting.cancel()  # a flush cancelled while it waits is cancelled, not left running
        with pytest.raises(asyncio.CancelledError):
            await asyncio.wait_for(waiting, 1)
        final = asyncio.create_task(store.flush())
        await asyncio.sleep(0.2)
        assert writing == ["s=x;i=1"]  # the final flush has not started writing
        release.set()
        assert await asyncio.wait_for(final, 10) == 1
        assert writing == ["s=x;i=1", "s=x;i=2"]
        assert failures == []
        assert store.load(HOST) == "s=x;i=2"
        assert _state_files(tmp_path / "state") == [f"{HOST}.cursor"]

    @pytest.mark.parametrize("how", ["flush", "flush_sync"])
    async def test_a_failed_write_keeps_the_cursor_for_the_next_flush(
        self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, how: str
    ) -> None:
        """The rename fails once: nothing written, no temporary left, the next flush writes it."""
        store = CursorStore(tmp_path / "state")
        real_replace = os.replace
        calls: list[str] = []

        def replace(source: Any, target: Any) -> None:
            calls.append(str(source))
            if len(calls) == 1:
                raise OSError(28, "No space left on device")
            real_replace(source, target)

        monkeypatch.setattr(os, "replace", replace)

        async def flush() -> int:
            return await store.flush() if how == "flush" else store.flush_sync()

        store.mark(HOST, "s=x;i=7")
        with capture_logs() as logs:
            assert await flush() == 0
        assert [e["event"] for e in logs] == ["cursor_save_failed"]
        assert store.load(HOST) is None
        assert _state_files(tmp_path / "state") == []
        assert await flush() == 1
        assert store.load(HOST) == "s=x;i=7"
        assert _state_files(tmp_path / "state") == [f"{HOST}.cursor"]
        assert await flush() == 0  # nothing pending any more
