"""The startup endpoint's documents: state, HTTP status, detail, times, crash and health."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta

import pytest

from tests.support.snapshots import AT, at, basic_snapshot, incarnation, unit_snapshot
from vllm_sentinel.engine.catalog.causes import CrashCause
from vllm_sentinel.engine.catalog.phases import Outcome, Phase
from vllm_sentinel.engine.report import iso_utc
from vllm_sentinel.engine.snapshot import CrashInfo, EtaBasis, Progress, UnitHealth
from vllm_sentinel.serve.readiness import (
    HTTP_STATUS,
    UnitState,
    find_unit,
    unit_document,
    unit_state,
    units_document,
)


def _loading(**fields: object) -> object:
    item = incarnation(
        [(Phase.STARTING, 0), (Phase.INITIALIZING, 10), (Phase.LOADING_WEIGHTS, 60)],
        progress=Progress(weights_shards_loaded=41, weights_shards_total=64),
    )
    return unit_snapshot("gpu-a", "vllm-kimi.service", item, **fields)


def _ready(**fields: object) -> object:
    item = incarnation([(Phase.STARTING, 0), (Phase.READY, 300)], outcome=Outcome.READY)
    return unit_snapshot("gpu-a", "vllm-kimi.service", item, ready_source="log", **fields)


CRASH = CrashInfo(
    CrashCause.DEPENDENCY_MISMATCH,
    "RuntimeError",
    "flashinfer-cubin version (0.6.3) does not match flashinfer version (0.6.4)",
    Phase.LOADING_WEIGHTS,
    at(80),
    "inv-1",
)


class TestStates:
    def test_every_state_has_its_status_code(self) -> None:
        """200 ready; 503 starting, unhealthy, stopped; 500 crashed."""
        assert dict(HTTP_STATUS) == {
            UnitState.READY: 200,
            UnitState.STARTING: 503,
            UnitState.UNHEALTHY: 503,
            UnitState.STOPPED: 503,
            UnitState.CRASHED: 500,
            UnitState.SLEEPING: 503,
        }

    def test_loading_unit_is_starting_with_shards_as_detail(self) -> None:
        """A unit loading weights: starting, its phase, shards done, elapsed since start."""
        document = unit_document(_loading(), AT)
        assert document["state"] == "starting"
        assert document["phase"] == "loading_weights"
        assert document["detail"] == "weights 41/64 shards"
        assert document["progress"] == pytest.approx(41 / 64)
        assert document["elapsed_seconds"] == 1800.0
        assert document["phase_elapsed_seconds"] == 1740.0
        assert document["eta_seconds"] is None
        assert document["last_crash"] is None and document["health"] is None

    def test_starting_unit_carries_its_eta_and_slow_flag(self) -> None:
        """The Monitor's ETA and slow verdict: in the document and the detail."""
        unit = replace(
            _loading(),
            slow=True,
            usual_phase_seconds=600.0,
            eta_seconds=420.0,
            expected_ready_at=AT + timedelta(seconds=420),
            eta_basis=EtaBasis.BOTH,
        )
        document = unit_document(unit, AT)
        assert document["detail"] == "weights 41/64 shards; slower than usual (10m00s)"
        assert (document["eta_seconds"], document["eta_basis"], document["slow"]) == (
            420.0,
            "both",
            True,
        )
        assert document["expected_ready_at"] == iso_utc(AT + timedelta(seconds=420))
        assert document["eta_lower_bound"] is False

    def test_an_eta_of_the_current_bar_only_is_a_lower_bound(self) -> None:
        """Basis ``vllm``: the document says the ETA is a lower bound; no ETA, no claim."""
        unit = replace(
            _loading(),
            eta_seconds=18.0,
            expected_ready_at=AT + timedelta(seconds=18),
            eta_basis=EtaBasis.VLLM,
        )
        document = unit_document(unit, AT)
        assert (document["eta_basis"], document["eta_lower_bound"]) == ("vllm", True)
        assert unit_document(_loading(), AT)["eta_lower_bound"] is None

    def test_stalled_unit_says_for_how_long_nothing_moved(self) -> None:
        """The detail of a stalled unit names its idle time."""
        document = unit_document(_loading(stalled=True), AT)
        assert document["detail"] == "weights 41/64 shards; no progress for 29m00s (stalled)"

    def test_ready_and_unhealthy(self) -> None:
        """Ready per logs; with /health failing past the threshold it is unhealthy."""
        assert unit_state(_ready()) is UnitState.READY
        failing = UnitHealth(
            url="http://127.0.0.1:8000",
            up=False,
            error="http_status",
            status=503,
            failing_since=at(1700),
            failures=10,
            unhealthy=True,
        )
        document = unit_document(_ready(health=failing), AT)
        assert document["state"] == "unhealthy"
        assert document["phase"] == "ready"
        assert document["detail"] == (
            "ready per its logs, but /health has failed for 1m40s (10 probes): HTTP 503"
        )
        assert document["health"]["failing_since"] == "2025-03-01T12:28:20Z"
        assert (document["health"]["failures"], document["health"]["unhealthy"]) == (10, True)

    def test_crashed_unit_carries_its_root_cause(self) -> None:
        """Crashed: 500, the cause in the detail, last_crash with its fix hint."""
        item = incarnation(
            [(Phase.STARTING, 0), (Phase.LOADING_WEIGHTS, 60), (Phase.CRASHED, 80)],
            outcome=Outcome.CRASHED,
            crash=CRASH,
            ended=80,
        )
        unit = unit_snapshot(
            "gpu-a", "vllm-kimi.service", item, last_crash=CRASH, recent_crashes=(at(80),)
        )
        document = unit_document(unit, AT)
        assert unit_state(unit) is UnitState.CRASHED
        assert (
            document["detail"] == "crashed in loading_weights: dependency_mismatch (RuntimeError)"
        )
        assert document["elapsed_seconds"] == 80.0  # from start to the end, not to now
        assert document["last_crash"] == {
            "cause": "dependency_mismatch",
            "exception": "RuntimeError",
            "message": CRASH.message,
            "phase": "loading_weights",
            "at": "2025-03-01T12:01:20Z",
            "invocation_id": "inv-1",
            "settled": True,
            "hint": {
                "text": "`pip install flashinfer-cubin==0.6.4`: flashinfer-cubin 0.6.3 must "
                "match flashinfer 0.6.4 (or install the flashinfer that matches "
                "flashinfer-cubin 0.6.3).",
                "runbook": "/runbook#dependency_mismatch",
                "rule": "version_pair",
            },
        }

    @pytest.mark.parametrize(
        ("outcome", "phase"),
        [(Outcome.STOPPED, Phase.STOPPED), (Outcome.READY, Phase.STOPPING)],
    )
    def test_stopped_or_stopping_is_stopped(self, outcome: Outcome, phase: Phase) -> None:
        """A planned stop (or one under way) is stopped."""
        item = incarnation([(Phase.STARTING, 0), (phase, 100)], outcome=outcome)
        assert unit_state(unit_snapshot("h", "u.service", item)) is UnitState.STOPPED

    def test_ready_by_probe_says_so(self) -> None:
        """Shown ready from a /health probe while the logs lag."""
        unit = replace(_ready(), ready_source="health_probe")
        document = unit_document(unit, AT)
        assert document["state"] == "ready" and document["ready_source"] == "health_probe"
        assert document["detail"] == "ready: /health answered 200 before the logs said so"
        assert document["ready_at"] == "2025-03-01T12:05:00Z"


class TestDocuments:
    def test_units_document_lists_every_unit_with_state_known(self) -> None:
        """/units: every host's units; a host whose journal is down is state_known false."""
        document = units_document(basic_snapshot())
        assert document["at"] == "2025-03-01T12:30:00Z"
        states = {(item["host"], item["unit"]): item["state"] for item in document["units"]}
        assert states == {
            ("gpu-a", "vllm-llama.service"): "starting",
            ("gpu-a", "vllm-qwen.service"): "ready",
            ("gpu-a", "vllm-idle.service"): "starting",
            ("gpu-b", "vllm-mixtral.service"): "starting",
        }
        known = {item["unit"]: item["state_known"] for item in document["units"]}
        assert known["vllm-mixtral.service"] is False and known["vllm-qwen.service"] is True
        qwen = next(item for item in document["units"] if item["unit"] == "vllm-qwen.service")
        assert qwen["health"]["served_models"] == ["Qwen/Qwen2.5-7B-Instruct"]

    def test_find_unit(self) -> None:
        """find_unit returns the unit's document, None for an unknown host or unit."""
        snapshot = basic_snapshot()
        found = find_unit(snapshot, "gpu-a", "vllm-qwen.service")
        assert found is not None and found["state"] == "ready"
        assert find_unit(snapshot, "gpu-b", "vllm-qwen.service") is None
        assert find_unit(snapshot, "gpu-a", "nope.service") is None
