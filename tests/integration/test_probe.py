"""The readiness probe end to end: through a real OpenSSH sshd's direct-tcpip forwarding, and
in the real daemon following real journal files, checked over HTTP (/metrics and /units)."""

from __future__ import annotations

import asyncio
import json
import socket
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import require_binary
from tests.support.daemon import (
    RunningDaemon,
    current_phase,
    free_port,
    local_config,
    running_daemon,
    value,
)
from tests.support.fake_vllm import FakeVllmServer
from tests.support.http_client import fetch
from tests.support.journal_writer import (
    JournalWriter,
    LogClock,
    service_line,
    unit_failed,
    unit_started,
)
from tests.support.ssh_server import OpenSshServer
from vllm_sentinel.config import Config, parse_config
from vllm_sentinel.engine.health import ProbeOutcome, probe_target
from vllm_sentinel.sources.health_probe import probe_once
from vllm_sentinel.sources.transport import SshTransport

pytestmark = [pytest.mark.integration, pytest.mark.asyncio]

UNIT = "vllm-qwen.service"
A = "a" * 32
B = "b" * 32
PID = 4100
RECENT = timedelta(seconds=30)  # log times of a fresh start, inside the backfill window
HOST = "gpu-node-7"
TIMEOUT = 0.5


@pytest.fixture
def fake_vllm() -> Iterator[FakeVllmServer]:
    with FakeVllmServer("ok", models=("qwen3-8b",)) as server:
        yield server


def _api(text: str) -> str:
    return f"(APIServer pid={PID}) INFO 11-29 10:00:00 [api_server.py:1] {text}"


def _start(clock: LogClock, invocation: str, port: int) -> list[dict[str, str | bytes | int]]:
    """systemd starts the unit; vLLM logs its arguments and begins loading."""
    return [
        unit_started(UNIT, invocation, clock.us(0), "vLLM"),
        service_line(
            UNIT,
            invocation,
            PID,
            _api(f"non-default args: {{'model_tag': 'Qwen/Qwen3-8B', 'port': {port}}}"),
            clock.us(1),
        ),
        service_line(
            UNIT,
            invocation,
            PID,
            "(Worker pid=4101) INFO 11-29 10:00:05 [gpu_model_runner.py:1] Starting to load model Qwen/Qwen3-8B...",
            clock.us(5),
        ),
    ]


def _ready(clock: LogClock, invocation: str, port: int) -> list[dict[str, str | bytes | int]]:
    return [
        service_line(
            UNIT,
            invocation,
            PID,
            _api(f"Starting vLLM server on http://127.0.0.1:{port}"),
            clock.us(20),
        ),
        service_line(
            UNIT, invocation, PID, "INFO:     Application startup complete.", clock.us(21)
        ),
    ]


def _crash(clock: LogClock, invocation: str) -> list[dict[str, str | bytes | int]]:
    return [
        service_line(
            UNIT,
            invocation,
            PID,
            "(EngineCore pid=4102) ERROR 11-29 10:00:30 [core.py:1] EngineCore encountered a fatal error.",
            clock.us(25),
        ),
        *unit_failed(UNIT, invocation, clock.us(26)),
    ]


def _probe_toml(**keys: object) -> str:
    values = {
        "enabled": "true",
        "interval_seconds": "0.5",
        "timeout_seconds": str(TIMEOUT),
        "unhealthy_after_seconds": "1.5",
        **{key: str(value) for key, value in keys.items()},
    }
    return "\n".join(f"{key} = {value}" for key, value in values.items())


def _local_config(journal_dir: Path, state_dir: Path, **keys: object) -> Config:
    return local_config(
        journal_dir,
        state_dir,
        host=HOST,
        host_extra=f"[hosts.health_probe]\n{_probe_toml(**keys)}",
    )


def _ssh_config(server: OpenSshServer, journal_dir: Path, state_dir: Path) -> str:
    return f"""
[exporter]
listen = "127.0.0.1:{free_port()}"
[defaults]
state_directory = "{state_dir}"
[[hosts]]
name = "{HOST}"
address = "127.0.0.1"
port = {server.port}
client_keys = ["{server.client_key_path}"]
known_hosts = "{server.known_hosts_path}"
connect_timeout_seconds = 20.0
units = ["vllm-*.service"]
journalctl_args = ["--directory={journal_dir}"]
gpu = "none"
[hosts.health_probe]
{_probe_toml()}
"""


async def _unit(daemon: RunningDaemon) -> tuple[int, dict[str, Any]]:
    """GET /units/HOST/UNIT: status code and JSON body."""

    reply = await asyncio.to_thread(fetch, f"{daemon.url}/units/{HOST}/{UNIT}")
    return reply.status, reply.json()


async def _until_unit(
    daemon: RunningDaemon,
    predicate: Callable[[int, dict[str, Any]], bool],
    what: str,
    timeout: float = 30.0,
) -> tuple[int, dict[str, Any]]:
    """Poll /units/HOST/UNIT until ``predicate(code, body)`` holds (deadline, no fixed sleep)."""
    deadline = time.monotonic() + timeout
    code, body = await _unit(daemon)
    while not predicate(code, body):
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}: last {code} {body}")
        await asyncio.sleep(0.1)
        code, body = await _unit(daemon)
    return code, body


class TestThroughOpenSsh:
    """``probe_once`` over ``SshTransport.open_tcp``: sshd connects to 127.0.0.1 on its side."""

    @pytest.mark.parametrize(
        ("mode", "outcome", "error", "status"),
        [
            ("ok", ProbeOutcome.UP, "", 200),
            ("unavailable", ProbeOutcome.DOWN, "http_status", 503),
            ("hang", ProbeOutcome.DOWN, "timeout", None),
            ("reset", ProbeOutcome.DOWN, "connection_reset", None),
        ],
    )
    async def test_health_answers_come_through_the_forwarding(
        self,
        openssh_server: OpenSshServer,
        fake_vllm: FakeVllmServer,
        mode: str,
        outcome: ProbeOutcome,
        error: str,
        status: int | None,
    ) -> None:
        """200, 503, a hang and a reset reach the probe as they would over local TCP."""
        fake_vllm.mode = mode
        target = probe_target(f"http://0.0.0.0:{fake_vllm.port}")
        assert target is not None
        transport = SshTransport(HOST, openssh_server.settings(connect_timeout_seconds=20))
        try:
            # the first call also opens the SSH connection: give it time, then time the probe
            assert (await transport.run(["true"], timeout=20)) == b""
            got = await probe_once(transport, target, TIMEOUT, served_models=True)
        finally:
            await transport.close()
        assert (got[0], got[1], got[2]) == (outcome, error, status)
        assert got[4] == (("qwen3-8b",) if mode == "ok" else None)
        # one request, and it came through sshd: with forwarding off none arrives (below)
        assert fake_vllm.count("/health") == 1

    async def test_nothing_listening_is_refused_by_the_remote_end(
        self, openssh_server: OpenSshServer
    ) -> None:
        """A closed port on the host: sshd's connect fails, the probe says connection_refused."""
        with FakeVllmServer() as gone:
            target = probe_target(gone.url)
        assert target is not None
        transport = SshTransport(HOST, openssh_server.settings(connect_timeout_seconds=20))
        try:
            outcome, error, *_ = await probe_once(transport, target, 20)
        finally:
            await transport.close()
        assert (outcome, error) == (ProbeOutcome.DOWN, "connection_refused")

    async def test_a_silent_host_is_unreachable_not_a_timeout(
        self, openssh_server: OpenSshServer, fake_vllm: FakeVllmServer
    ) -> None:
        """An SSH peer that never answers: unreachable, whatever the probe's own timeout."""
        with socket.socket() as silent:  # accepts TCP (backlog), never speaks SSH
            silent.bind(("127.0.0.1", 0))
            silent.listen(8)
            settings = openssh_server.settings(
                port=silent.getsockname()[1], connect_timeout_seconds=1.0
            )
            transport = SshTransport(HOST, settings)
            target = probe_target(fake_vllm.url)
            assert target is not None
            try:
                outcome, error, status, duration, _ = await probe_once(transport, target, 0.2)
            finally:
                await transport.close()
        assert (outcome, error, status) == (ProbeOutcome.UNREACHABLE, "host_unreachable", None)
        assert duration == 0.0 and fake_vllm.count("/health") == 0

    async def test_forwarding_disabled_says_nothing_about_vllm(
        self, tmp_path: Path, fake_vllm: FakeVllmServer
    ) -> None:
        """AllowTcpForwarding no: unreachable (forwarding_refused), not down."""
        sshd = require_binary("/usr/sbin/sshd")
        server = OpenSshServer(
            tmp_path / "sshd", sshd=sshd, extra_config=("AllowTcpForwarding no",)
        )
        server.start()
        transport = SshTransport(HOST, server.settings(connect_timeout_seconds=20))
        try:
            target = probe_target(fake_vllm.url)
            assert target is not None
            outcome, error, *_ = await probe_once(transport, target, 20)
        finally:
            await transport.close()
            server.stop()
        assert (outcome, error) == (ProbeOutcome.UNREACHABLE, "forwarding_refused")
        assert fake_vllm.count("/health") == 0


async def test_daemon_over_openssh_starting_ready_unhealthy_crashed(
    journal_writer: JournalWriter,
    openssh_server: OpenSshServer,
    fake_vllm: FakeVllmServer,
    tmp_path: Path,
) -> None:
    """The real daemon probes through sshd: 503 starting, 200 ready, 503 unhealthy, 500 crashed."""
    clock = LogClock(RECENT)
    port = fake_vllm.port
    fake_vllm.mode = "unavailable"  # the socket is bound while vLLM loads
    journal_writer.write_readable(_start(clock, A, port))
    config = parse_config(_ssh_config(openssh_server, journal_writer.path.parent, tmp_path / "st"))
    async with running_daemon(config) as daemon:
        code, body = await _until_unit(
            daemon, lambda c, b: b.get("health") is not None, "a first probe", timeout=60
        )
        assert code == 503 and body["state"] == "starting"
        assert body["phase"] == "loading_weights"
        assert body["health"]["url"] == f"http://127.0.0.1:{port}"
        assert body["health"]["status"] == 503 and body["health"]["up"] is False
        samples = await daemon.metrics()
        assert value(samples, "vllm_sentinel_unit_health_up", unit=UNIT) == 0
        assert value(samples, "vllm_sentinel_unit_unhealthy", unit=UNIT) == 0

        fake_vllm.mode = "ok"
        journal_writer.write_and_flush(_ready(clock, A, port))
        code, body = await _until_unit(
            daemon, lambda c, b: c == 200 and b["health"]["served_models"], "ready and models"
        )
        assert body["state"] == "ready" and body["phase"] == "ready"
        assert body["ready_source"] == "log"
        assert body["health"]["served_models"] == ["qwen3-8b"]
        samples = await daemon.metrics()
        assert value(samples, "vllm_sentinel_unit_health_up", unit=UNIT) == 1
        success = value(
            samples, "vllm_sentinel_unit_health_last_success_timestamp_seconds", unit=UNIT
        )
        assert success is not None and abs(success - time.time()) < 30

        fake_vllm.mode = "hang"
        code, body = await _until_unit(daemon, lambda c, b: b["state"] == "unhealthy", "unhealthy")
        assert code == 503 and body["phase"] == "ready"
        assert body["health"]["error"] == "timeout"
        samples = await daemon.metrics()
        assert value(samples, "vllm_sentinel_unit_unhealthy", unit=UNIT) == 1
        assert current_phase(samples, UNIT) == "ready"  # the phase stays ready
        duration = value(samples, "vllm_sentinel_unit_health_probe_duration_seconds", unit=UNIT)
        assert duration is not None and duration >= TIMEOUT

        journal_writer.write_and_flush(_crash(clock, A))
        code, body = await _until_unit(daemon, lambda c, b: b["state"] == "crashed", "crashed")
        assert code == 500 and body["health"] is None
        samples = await daemon.metrics()
        assert value(samples, "vllm_sentinel_unit_unhealthy", unit=UNIT) == 0
        assert value(samples, "vllm_sentinel_unit_health_up", unit=UNIT) is None
    assert fake_vllm.max_in_flight == 1


async def test_daemon_shows_ready_from_the_probe_while_the_logs_lag(
    journal_writer: JournalWriter, fake_vllm: FakeVllmServer, tmp_path: Path
) -> None:
    """/health answers while the logs still say loading: ready from the probe; a crash wins."""
    clock = LogClock(RECENT)
    journal_writer.write_readable(_start(clock, A, fake_vllm.port))
    config = _local_config(journal_writer.path.parent, tmp_path / "state")
    async with running_daemon(config) as daemon:
        code, body = await _until_unit(daemon, lambda c, b: c == 200, "ready from the probe")
        assert body["state"] == "ready" and body["phase"] == "ready"
        assert body["ready_source"] == "health_probe"
        assert body["detail"] == "ready: /health answered 200 before the logs said so"
        samples = await daemon.metrics()
        assert current_phase(samples, UNIT) == "ready"
        assert value(samples, "vllm_sentinel_unit_stalled", unit=UNIT) == 0
        ready_at = datetime.fromisoformat(body["ready_at"])
        assert datetime.now(UTC) - ready_at < timedelta(seconds=30)
        # the logs catch up: still ready; then the crash in the logs wins
        journal_writer.write_and_flush(_ready(clock, A, fake_vllm.port))
        code, body = await _until_unit(daemon, lambda c, b: b["ready_source"] == "log", "log")
        assert code == 200
        journal_writer.write_and_flush(_crash(clock, A))
        code, body = await _until_unit(daemon, lambda c, b: c == 500, "crashed")
        assert body["state"] == "crashed" and body["last_crash"]["cause"] is not None
        # the restart is a new incarnation: starting again until its own probe or logs say ready
        fake_vllm.mode = "unavailable"
        journal_writer.write_and_flush([unit_started(UNIT, B, clock.us(40), "vLLM")])
        code, body = await _until_unit(daemon, lambda c, b: c == 503, "starting again")
        assert body["state"] == "starting" and body["invocation_id"] == B


async def test_units_endpoint_lists_units_and_404s_unknown_ones(
    journal_writer: JournalWriter, fake_vllm: FakeVllmServer, tmp_path: Path
) -> None:
    """/units lists the unit; an unknown host or unit is 404 with a JSON error."""
    clock = LogClock(RECENT)
    journal_writer.write_readable(_start(clock, A, fake_vllm.port))
    config = _local_config(journal_writer.path.parent, tmp_path / "state", enabled="false")
    async with running_daemon(config) as daemon:
        await _until_unit(daemon, lambda c, b: c == 503, "the unit")
        document = json.loads(await daemon.get("/units"))
        assert [(u["host"], u["unit"], u["state"]) for u in document["units"]] == [
            (HOST, UNIT, "starting")
        ]
        assert document["units"][0]["health"] is None  # probing is off
        for path in (f"/units/{HOST}/nope.service", f"/units/other/{UNIT}", f"/units/{HOST}"):
            with pytest.raises(urllib.error.HTTPError) as error:
                await daemon.get(path)
            assert error.value.code == 404
            assert json.loads(error.value.read())["error"] == "unknown unit"
    assert fake_vllm.count("/health") == 0
