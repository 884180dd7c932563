"""GPU memory over SSH from long-lived ``nvidia-smi -lms`` streams, end to end.

The in-process asyncssh server runs the stub ``nvidia-smi`` (tests/support/bin) for real, in
its loop mode, as sshd would run the real one: readings come round after round from two
channels opened once; a stream that dies is restarted by the poller's backoff; a malformed
line is counted and exported in ``vllm_sentinel_records_skipped_total``.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from tests.integration.test_reliability import (
    HOST,
    UNIT,
    daemon_with_sink,
    hour_ago_us,
    started,
    until,
)
from tests.support.daemon import Samples, free_port, value
from tests.support.journal_writer import JournalWriter
from tests.support.ssh_server import SshTestServer
from vllm_sentinel.config import parse_config
from vllm_sentinel.engine.snapshot import GpuReading
from vllm_sentinel.errors import GpuCollectorError
from vllm_sentinel.sources.gpu import GpuPoller, NvidiaSmiStreamReader
from vllm_sentinel.sources.nvidia_smi import MIB
from vllm_sentinel.sources.transport import SshTransport

STUB_BIN = Path(__file__).resolve().parents[1] / "support" / "bin"
pytestmark = [pytest.mark.integration, pytest.mark.asyncio]

UUIDS = [f"GPU-8d1d4a5c-7f36-2e1b-94b8-3a6f0c2e5d{index:02d}" for index in range(2)]


def smi_state(used_mib: int, *, apps: bool = True, **extra: Any) -> str:
    """The stub's state: two H200s, one vLLM worker on each (or none)."""
    return json.dumps(
        {
            "gpus": [
                {"index": index, "uuid": uuid, "name": "NVIDIA H200",
                 "memory.used": used_mib, "memory.total": 143771}
                for index, uuid in enumerate(UUIDS)
            ],
            "apps": [
                {"gpu_uuid": uuid, "pid": 4121 + index, "used_memory": used_mib - 500}
                for index, uuid in enumerate(UUIDS)
            ] if apps else [],
            **extra,
        }
    )  # fmt: skip


def smi_children(server: SshTestServer) -> list[str]:
    """The nvidia-smi commands the server has run so far."""
    return [child.command for child in server.children if "nvidia-smi" in child.command]


def stub_state(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, text: str) -> Path:
    """The stub nvidia-smi's state file, holding ``text``, named in ``FAKE_NVIDIA_SMI_STATE``
    (the test rewrites it to change what the next rounds print)."""
    state = tmp_path / "smi.json"
    state.write_text(text)
    monkeypatch.setenv("FAKE_NVIDIA_SMI_STATE", str(state))
    return state


@contextlib.asynccontextmanager
async def stream_reader(
    server: SshTestServer, timeout_seconds: float = 10
) -> AsyncIterator[NvidiaSmiStreamReader]:
    """A reader of 0.1 s rounds over SSH to ``server``; closed, with its transport, after."""
    transport = SshTransport(HOST, server.settings())
    reader = NvidiaSmiStreamReader(transport, interval_seconds=0.1, timeout_seconds=timeout_seconds)
    try:
        yield reader
    finally:
        await reader.close()
        await transport.close()


async def read_until(
    reader: NvidiaSmiStreamReader, predicate: Any, timeout: float = 20.0
) -> GpuReading:
    """Read rounds until one satisfies ``predicate``."""
    deadline = time.monotonic() + timeout
    while True:
        reading = await reader.read()
        if predicate(reading) or time.monotonic() > deadline:
            return reading


class TestNvidiaSmiStreams:
    async def test_rounds_come_from_two_channels_opened_once(
        self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """Ten readings, two nvidia-smi processes: each round's memory as the stub prints it,
        processes gone from the readings once none are printed."""
        state = stub_state(tmp_path, monkeypatch, smi_state(1000))
        async with SshTestServer(tmp_path / "ssh", path_prepend=(STUB_BIN,)) as server:
            async with stream_reader(server) as reader:
                first = await reader.read()
                assert [d.memory_used_bytes for d in first.devices] == [1000 * MIB] * 2
                assert [(p.pid, p.used_memory_bytes) for p in first.processes] == [
                    (4121, 500 * MIB),
                    (4122, 500 * MIB),
                ]
                for _ in range(8):
                    reading = await reader.read()
                    assert len(reading.devices) == 2
                state.write_text(smi_state(2000, apps=False))
                later = await read_until(
                    reader, lambda r: r.devices[0].memory_used_bytes == 2000 * MIB
                )
                assert later.devices[1].memory_used_bytes == 2000 * MIB
                # no process printed any more: gone within 1.5 intervals + 0.5 s
                gone = await read_until(reader, lambda r: not r.processes, timeout=5)
                assert gone.processes == ()
                commands = smi_children(server)
                assert len(commands) == 2, commands
                assert all(command.endswith("-lms 100") for command in commands)
                assert reader.streams_started == 1
                assert reader.skipped() == {}
            await server.wait_children_exited()  # closing the reader ended both on the host

    async def test_a_dead_stream_fails_the_read_and_is_restarted(
        self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """nvidia-smi exiting 9 mid-stream is ``command_failed``; the next read starts both
        streams again and reads the new rounds."""
        state = stub_state(tmp_path, monkeypatch, smi_state(1000))
        async with (
            SshTestServer(tmp_path / "ssh", path_prepend=(STUB_BIN,)) as server,
            stream_reader(server) as reader,
        ):
            await reader.read()
            state.write_text(json.dumps({"exit_code": 9, "message": "driver gone"}))
            with pytest.raises(GpuCollectorError) as failed:
                await read_until(reader, lambda _reading: False)
            assert failed.value.reason == "command_failed"
            assert "driver gone" in failed.value.detail
            state.write_text(smi_state(3000))
            reading = await reader.read()
            assert reading.devices[0].memory_used_bytes == 3000 * MIB
            assert reader.streams_started == 2
            assert len(smi_children(server)) == 4

    async def test_silent_stream_times_out(
        self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """A stream that prints nothing (no GPU rows) fails the read with ``timeout``."""
        stub_state(tmp_path, monkeypatch, json.dumps({"gpus": [], "apps": []}))
        async with SshTestServer(tmp_path / "ssh", path_prepend=(STUB_BIN,)) as server:
            async with stream_reader(server, timeout_seconds=0.5) as reader:
                started_at = time.monotonic()
                with pytest.raises(GpuCollectorError) as failed:
                    await reader.read()
                assert failed.value.reason == "timeout"
                assert time.monotonic() - started_at < 5
            await server.wait_children_exited()

    async def test_poller_marks_down_and_up_again_with_backoff(
        self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """Through ``GpuPoller``: the dead stream sets the collector down (reason from the
        transport), the restart after the backoff brings it up with one reconnect."""
        state = stub_state(tmp_path, monkeypatch, smi_state(1000))
        async with (
            SshTestServer(tmp_path / "ssh", path_prepend=(STUB_BIN,)) as server,
            stream_reader(server) as reader,
        ):
            poller = GpuPoller(
                HOST, reader, 0.1, backoff_initial_seconds=0.2, backoff_max_seconds=0.5,
                reader_paced=True,
            )  # fmt: skip
            readings: list[GpuReading] = []

            async def emit(reading: GpuReading) -> None:
                readings.append(reading)

            task = asyncio.create_task(poller.run(emit))
            try:
                await until(
                    lambda: len(readings) >= 3 and poller.state.up, 20, "three readings, up"
                )
                state.write_text(json.dumps({"exit_code": 6, "message": "No devices found"}))
                await until(lambda: not poller.state.up, 20, "down")
                assert poller.state.reason == "command_failed"
                state.write_text(smi_state(1500))
                await until(lambda: poller.state.up, 20, "up again")
                assert poller.state.reconnects_total == 1
                assert readings[-1].devices[0].memory_used_bytes == 1500 * MIB
            finally:
                task.cancel()
                await asyncio.gather(task, return_exceptions=True)


async def test_daemon_exports_malformed_lines_and_keeps_two_streams(
    journal_writer: JournalWriter, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The daemon over SSH: a malformed nvidia-smi line is in ``records_skipped_total`` with
    its ``gpu_line_`` reason, GPU memory is exported, and polling at 0.1 s for seconds has
    started two nvidia-smi processes in all (before the streams: two per poll)."""
    stub_state(
        tmp_path, monkeypatch, smi_state(1000, lines=["0, GPU-bad, NVIDIA H200, 12x, 143771"])
    )
    journal_writer.write_readable([started(hour_ago_us())])
    async with SshTestServer(tmp_path / "ssh", path_prepend=(STUB_BIN,)) as server:
        config = parse_config(
            f"""
[exporter]
listen = "127.0.0.1:{free_port()}"
[defaults]
state_directory = "{tmp_path / "state"}"
gpu_poll_interval_seconds = 0.1
[[hosts]]
name = "{HOST}"
address = "127.0.0.1"
port = {server.port}
client_keys = ["{server.client_key_path}"]
known_hosts = "{server.known_hosts_path}"
units = ["{UNIT}"]
journalctl_args = ["--directory={journal_writer.path.parent}"]
gpu = "nvidia-smi"
"""
        )
        async with daemon_with_sink(config) as (daemon, _applied):

            def skipped_twice(s: Samples) -> bool:
                count = value(
                    s, "vllm_sentinel_records_skipped_total", reason="gpu_line_invalid_number"
                )
                return count is not None and count >= 20

            samples = await daemon.wait_for(skipped_twice, what="malformed lines counted")
            assert value(samples, "vllm_sentinel_collector_up", collector="gpu") == 1
            assert value(samples, "vllm_sentinel_gpu_memory_used_bytes", gpu="0") == 1000 * MIB
        commands = smi_children(server)
        assert len(commands) == 2, commands
