"""``/units`` and ``/units/{host}/{unit}`` on the real threaded server: codes, JSON, auth."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path

import pytest

from tests.edges.test_http import PASSWORD
from tests.support.http_client import basic, bcrypt_hash, fetch
from tests.support.snapshots import at, basic_snapshot, incarnation, unit_snapshot
from vllm_sentinel.engine.catalog.causes import CrashCause
from vllm_sentinel.engine.catalog.phases import Outcome, Phase
from vllm_sentinel.engine.snapshot import CrashInfo, HostSnapshot, Snapshot
from vllm_sentinel.serve.exporter import SentinelCollector, make_registry
from vllm_sentinel.serve.http import (
    DEFAULT_LISTEN_HOST,
    BasicAuthenticator,
    load_web_config,
    make_app,
    start_http_server,
)


def _with_more_units() -> Snapshot:
    """The basic snapshot plus a crashed unit and a template instance on gpu-a."""
    snapshot = basic_snapshot()
    crash = CrashInfo(
        CrashCause.CUDA_OOM,
        "torch.OutOfMemoryError",
        "CUDA out of memory",
        Phase.PROFILING_KV_CACHE,
        at(90),
    )
    crashed = unit_snapshot(
        "gpu-a",
        "vllm-crashed.service",
        incarnation(
            [(Phase.STARTING, 0), (Phase.PROFILING_KV_CACHE, 60), (Phase.CRASHED, 90)],
            outcome=Outcome.CRASHED,
            crash=crash,
            ended=90,
        ),
        last_crash=crash,
    )
    stopped = unit_snapshot(
        "gpu-a",
        "vllm@gpu0.service",
        incarnation([(Phase.STARTING, 0), (Phase.STOPPED, 50)], outcome=Outcome.STOPPED),
    )
    first, *rest = snapshot.hosts
    host = replace(first, units=(*first.units, crashed, stopped))
    return Snapshot((host, *rest), snapshot.at)


@contextmanager
def serving(
    snapshot: Callable[[], Snapshot] = _with_more_units,
    authenticator: BasicAuthenticator | None = None,
) -> Iterator[str]:
    registry = make_registry(SentinelCollector(snapshot))
    app = make_app(registry, dict, authenticator=authenticator, snapshot=snapshot)
    handle = start_http_server(DEFAULT_LISTEN_HOST, 0, app)
    try:
        yield f"http://127.0.0.1:{handle.port}"
    finally:
        handle.shutdown()


class TestUnitsEndpoint:
    @pytest.mark.parametrize(
        ("path", "status", "state"),
        [
            ("/units/gpu-a/vllm-qwen.service", 200, "ready"),
            ("/units/gpu-a/vllm-llama.service", 503, "starting"),
            ("/units/gpu-a/vllm-crashed.service", 500, "crashed"),
            ("/units/gpu-a/vllm%40gpu0.service", 503, "stopped"),
            ("/units/gpu-b/vllm-mixtral.service", 503, "starting"),
        ],
    )
    def test_status_code_follows_the_state(self, path: str, status: int, state: str) -> None:
        """200 ready, 503 starting or stopped, 500 crashed; the body is the unit's JSON."""
        with serving() as base:
            reply = fetch(base + path)
        assert reply.status == status
        assert reply.headers["Content-Type"] == "application/json"
        assert reply.headers["Cache-Control"] == "no-store"
        document = json.loads(reply.body)
        assert document["state"] == state
        assert document["host"] == path.split("/")[2]

    def test_crashed_unit_names_its_cause(self) -> None:
        """The 500's body carries the root cause."""
        with serving() as base:
            document = json.loads(fetch(base + "/units/gpu-a/vllm-crashed.service").body)
        assert (
            document["detail"] == "crashed in profiling_kv_cache: cuda_oom (torch.OutOfMemoryError)"
        )
        assert document["last_crash"]["cause"] == "cuda_oom"

    def test_all_units(self) -> None:
        """/units is 200 with every unit of every host, whatever their states."""
        with serving() as base:
            reply = fetch(base + "/units")
        assert reply.status == 200
        units = json.loads(reply.body)["units"]
        assert len(units) == 6
        assert {unit["state"] for unit in units} == {"starting", "ready", "crashed", "stopped"}

    @pytest.mark.parametrize(
        "path",
        ["/units/gpu-a/nope.service", "/units/nope/vllm-qwen.service", "/units/gpu-a", "/units/"],
    )
    def test_unknown_unit_is_404(self, path: str) -> None:
        """An unknown host or unit, or a path without both, is 404 with a JSON error."""
        with serving() as base:
            reply = fetch(base + path)
        assert reply.status == 404
        assert json.loads(reply.body)["error"] == "unknown unit"

    def test_head_and_other_methods(self) -> None:
        """HEAD gets the status without a body; POST is 405."""
        with serving() as base:
            head = fetch(base + "/units/gpu-a/vllm-llama.service", method="HEAD")
            post = fetch(base + "/units/gpu-a/vllm-llama.service", method="POST")
        assert head.status == 503 and head.body == b""
        assert post.status == 405

    def test_without_a_snapshot_the_paths_do_not_exist(self) -> None:
        """An app made without ``snapshot`` serves no /units."""
        registry = make_registry(SentinelCollector(basic_snapshot))
        handle = start_http_server(DEFAULT_LISTEN_HOST, 0, make_app(registry, dict))
        try:
            assert fetch(f"http://127.0.0.1:{handle.port}/units").status == 404
        finally:
            handle.shutdown()

    def test_same_basic_auth_as_the_rest(self, tmp_path: Path) -> None:
        """Without credentials 401; with them the unit's status code."""
        web = tmp_path / "web.yml"
        web.write_text(f"basic_auth_users:\n  deploy: '{bcrypt_hash(PASSWORD)}'\n")
        authenticator = BasicAuthenticator(load_web_config(web).basic_auth_users)
        with serving(authenticator=authenticator) as base:
            for path in ("/units", "/units/gpu-a/vllm-qwen.service"):
                reply = fetch(base + path)
                assert reply.status == 401 and b"vllm" not in reply.body
            assert fetch(base + "/units", headers=basic("deploy", PASSWORD)).status == 200
            reply = fetch(
                base + "/units/gpu-a/vllm-llama.service", headers=basic("deploy", PASSWORD)
            )
            assert reply.status == 503


def test_host_snapshot_is_the_known_flag_source() -> None:
    """A host whose journal collector is down serves its units' last known state."""
    snapshot = _with_more_units()
    host_b = next(host for host in snapshot.hosts if host.host == "gpu-b")
    assert isinstance(host_b, HostSnapshot) and not host_b.collectors["journal"].up
    with serving(lambda: snapshot) as base:
        document = json.loads(fetch(base + "/units/gpu-b/vllm-mixtral.service").body)
    assert document["state_known"] is False
