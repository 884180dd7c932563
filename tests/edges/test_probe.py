"""The readiness probe over real local connections to a scripted stand-in for vLLM's server."""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Iterator
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path

import pytest

from tests.support.fake_vllm import FakeVllmServer
from tests.support.snapshots import at, incarnation, unit_snapshot
from vllm_sentinel.engine.catalog.phases import Outcome, Phase
from vllm_sentinel.engine.health import (
    HealthProbeResult,
    ProbeOutcome,
    ProbePolicy,
    ProbeSettings,
    ProbeTarget,
    probe_target,
)
from vllm_sentinel.engine.snapshot import CollectorState, HostSnapshot, Snapshot
from vllm_sentinel.sources.health_probe import HealthProber, probe_once
from vllm_sentinel.sources.transport import LocalTransport

pytestmark = pytest.mark.asyncio

TIMEOUT = 0.5


@pytest.fixture
def server() -> Iterator[FakeVllmServer]:
    with FakeVllmServer() as running:
        yield running


def _target(server: FakeVllmServer) -> ProbeTarget:
    target = probe_target(server.url)
    assert target is not None
    return target


class TestProbeOnce:
    async def test_200_is_up_and_the_served_models_are_read(self, server: FakeVllmServer) -> None:
        """/health 200: up; /v1/models gives the served ids (asked only when wanted)."""
        outcome, error, status, duration, models = await probe_once(
            LocalTransport(), _target(server), TIMEOUT, served_models=True
        )
        assert (outcome, error, status, models) == (ProbeOutcome.UP, "", 200, ("Qwen/Qwen3-8B",))
        assert 0 < duration < TIMEOUT
        assert server.count("/health") == 1 and server.count("/v1/models") == 1
        outcome, *_, models = await probe_once(LocalTransport(), _target(server), TIMEOUT)
        assert outcome is ProbeOutcome.UP and models is None
        assert server.count("/v1/models") == 1  # never asked unless wanted

    @pytest.mark.parametrize(
        ("mode", "error", "status"),
        [
            ("unavailable", "http_status", 503),
            ("hang", "timeout", None),
            ("reset", "connection_reset", None),
            ("garbage", "bad_response", None),
        ],
    )
    async def test_a_server_that_does_not_serve_is_down(
        self, server: FakeVllmServer, mode: str, error: str, status: int | None
    ) -> None:
        """503, no answer within the timeout, a reset, or not HTTP: down, with the reason."""
        server.mode = mode
        outcome, got_error, got_status, duration, models = await probe_once(
            LocalTransport(), _target(server), TIMEOUT, served_models=True
        )
        assert (outcome, got_error, got_status, models) == (ProbeOutcome.DOWN, error, status, None)
        if mode == "hang":
            assert duration >= TIMEOUT
        assert server.count("/v1/models") == 0

    async def test_nothing_listening_is_refused(self) -> None:
        """A closed port: down, connection_refused."""
        with FakeVllmServer() as gone:
            target = _target(gone)
        outcome, error, *_ = await probe_once(LocalTransport(), target, TIMEOUT)
        assert (outcome, error) == (ProbeOutcome.DOWN, "connection_refused")

    async def test_unix_socket(self, tmp_path: Path) -> None:
        """vLLM's --uds: the probe connects to the socket path."""
        with FakeVllmServer(unix_path=tmp_path / "vllm.sock") as server:
            target = probe_target(server.url)
            assert target is not None and target.path == str(tmp_path / "vllm.sock")
            outcome, error, status, *_ = await probe_once(LocalTransport(), target, TIMEOUT)
        assert (outcome, error, status) == (ProbeOutcome.UP, "", 200)


def _snapshot(api_url: str, phase: Phase = Phase.READY) -> Snapshot:
    outcome = Outcome.CRASHED if phase is Phase.CRASHED else Outcome.READY
    item = incarnation([(Phase.STARTING, 0), (phase, 60)], outcome=outcome)
    unit = unit_snapshot("gpu-a", "vllm-qwen.service", replace(item, api_url=api_url))
    return Snapshot((HostSnapshot("gpu-a", (unit,)),), at(100))


class TestHealthProber:
    async def test_one_probe_in_flight_per_unit_and_models_asked_once(
        self, server: FakeVllmServer
    ) -> None:
        """A hanging server never sees two probes at once; /v1/models is asked once."""
        server.mode = "hang"
        settings = ProbeSettings(enabled=True, interval_seconds=0.5, timeout_seconds=0.3)
        snapshot = _snapshot(server.url)
        results: list[HealthProbeResult] = []
        wanted = 3
        got = asyncio.Event()

        async def emit(result: HealthProbeResult) -> None:
            results.append(result)
            if len(results) >= wanted:
                got.set()

        prober = HealthProber(
            "gpu-a",
            LocalTransport(),
            ProbePolicy(settings),
            lambda: snapshot,
            clock=lambda: datetime.now(UTC),
        )
        task = asyncio.create_task(prober.run(emit))
        try:
            await asyncio.wait_for(got.wait(), 30)
            assert [r.error for r in results[:3]] == ["timeout"] * 3
            server.mode = "ok"
            wanted = len(results) + 3
            got.clear()
            await asyncio.wait_for(got.wait(), 30)
        finally:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
        assert server.max_in_flight == 1
        assert all(r.incarnation == ("inv-1", at(0)) for r in results)
        ups = [r for r in results if r.outcome is ProbeOutcome.UP]
        assert ups and ups[-1].served_models is None
        assert [r.served_models for r in ups if r.served_models] == [("Qwen/Qwen3-8B",)]
        assert server.count("/v1/models") == 1
        # the interval is the time between two starts, not after the end
        starts = [r.at for r in results]
        gaps = [(b - a).total_seconds() for a, b in itertools.pairwise(starts)]
        assert min(gaps) >= 0.45

    @pytest.mark.parametrize("phase", [Phase.CRASHED, Phase.STOPPING])
    async def test_units_not_enabled_or_ended_are_not_probed(
        self, server: FakeVllmServer, phase: Phase
    ) -> None:
        """Probing off, an incarnation crashed or stopping, the host's journal down: none starts."""
        emitted: list[HealthProbeResult] = []

        async def emit(result: HealthProbeResult) -> None:
            emitted.append(result)

        enabled = ProbePolicy(ProbeSettings(enabled=True))
        disabled = ProbePolicy(
            ProbeSettings(enabled=True),
            (("vllm-qwen.service", ProbeSettings(enabled=False)),),
        )
        live = _snapshot(server.url)
        ended = _snapshot(server.url, phase)
        assert HealthProber("gpu-a", LocalTransport(), disabled, lambda: live).start_due(emit) == 0
        assert HealthProber("gpu-a", LocalTransport(), enabled, lambda: ended).start_due(emit) == 0
        down = replace(
            live,
            hosts=(replace(live.hosts[0], collectors={"journal": CollectorState(up=False)}),),
        )
        assert HealthProber("gpu-a", LocalTransport(), enabled, lambda: down).start_due(emit) == 0
        prober = HealthProber("gpu-a", LocalTransport(), enabled, lambda: live)
        assert prober.start_due(emit) == 1
        assert prober.start_due(emit) == 0  # in flight, and not due again before the interval
