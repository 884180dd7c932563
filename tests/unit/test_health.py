"""The probe's core: where a unit listens, the health state, the unhealthy rule, probe readiness."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from tests.support.snapshots import at, incarnation, unit_snapshot
from vllm_sentinel.engine.catalog.phases import Outcome, Phase
from vllm_sentinel.engine.decode.record import Record
from vllm_sentinel.engine.health import (
    HealthProbeResult,
    HealthTracker,
    ProbeOutcome,
    ProbePolicy,
    ProbeSettings,
    ProbeTarget,
    api_url_from_args,
    incarnation_key,
    probe_target,
    with_probe_readiness,
)
from vllm_sentinel.engine.tracker import UnitTracker

EXAMPLES = Path(__file__).with_name("api_url_examples.tsv")
KEY = ("inv-1", at(0))


def _examples() -> list[tuple[str | None, str]]:
    rows: list[tuple[str | None, str]] = []
    for line in EXAMPLES.read_text(encoding="utf-8").splitlines():
        if line.strip() and not line.startswith("#"):
            url, text = line.split("\t", 1)
            rows.append((None if url == "-" else url, text))
    return rows


def _result(seconds: float, outcome: ProbeOutcome, error: str = "") -> HealthProbeResult:
    return HealthProbeResult(
        host="gpu-a",
        unit="vllm-qwen.service",
        incarnation=KEY,
        at=at(seconds),
        duration_seconds=0.01,
        outcome=outcome,
        error=error,
        status=200 if outcome is ProbeOutcome.UP else None,
        url="http://127.0.0.1:8000",
    )


class TestApiUrl:
    @pytest.mark.parametrize(("url", "line"), _examples())
    def test_tracker_records_where_the_api_server_listens(self, url: str | None, line: str) -> None:
        """Fed one logged line, the tracker's incarnation holds the URL that line gives."""
        tracker = UnitTracker("vllm.service")
        tracker.feed(Record(line, at(1), unit="vllm.service"))
        current = tracker.snapshot().current
        assert current is not None
        assert current.api_url == url

    def test_the_start_line_replaces_the_arguments(self) -> None:
        """Arguments give the port first; the API server's own start line wins after them."""
        tracker = UnitTracker("vllm.service")
        lines = [
            "(APIServer pid=1) INFO 03-10 08:00:01 [utils.py:287] non-default args: {'port': 8091}",
            "(APIServer pid=1) INFO 03-10 08:00:09 [api_server.py:1634] Starting vLLM server on http://127.0.0.1:8092",
            "(APIServer pid=1) INFO 03-10 08:00:10 [utils.py:287] non-default args: {'port': 9999}",
        ]
        urls = []
        for second, line in enumerate(lines):
            tracker.feed(Record(line, at(second), unit="vllm.service"))
            current = tracker.snapshot().current
            assert current is not None
            urls.append(current.api_url)
        assert urls == ["http://0.0.0.0:8091", "http://127.0.0.1:8092", "http://127.0.0.1:8092"]

    def test_out_of_range_port_is_ignored(self) -> None:
        """A port outside 1-65535 gives no URL rather than a wrong one."""
        assert api_url_from_args("args: Namespace(host=None, port=99999)") is None


class TestProbeTarget:
    @pytest.mark.parametrize(
        ("url", "port", "expected"),
        [
            (
                "http://0.0.0.0:8000",
                None,
                ProbeTarget("127.0.0.1", 8000, "", "http://127.0.0.1:8000"),
            ),
            ("http://[::]:9000", None, ProbeTarget("::1", 9000, "", "http://[::1]:9000")),
            (
                "http://10.0.0.5:40042",
                None,
                ProbeTarget("10.0.0.5", 40042, "", "http://10.0.0.5:40042"),
            ),
            (
                "http://0.0.0.0:8000",
                18000,
                ProbeTarget("127.0.0.1", 18000, "", "http://127.0.0.1:18000"),
            ),
            (None, 8002, ProbeTarget("127.0.0.1", 8002, "", "http://127.0.0.1:8002")),
            ("unix:/run/v.sock", None, ProbeTarget("", 0, "/run/v.sock", "unix:/run/v.sock")),
            ("https://0.0.0.0:8443", None, None),
            (
                "https://0.0.0.0:8443",
                8000,
                ProbeTarget("127.0.0.1", 8000, "", "http://127.0.0.1:8000"),
            ),
            (None, None, None),
            ("not a url", None, None),
        ],
    )
    def test_resolves_the_address_to_connect_to(
        self, url: str | None, port: int | None, expected: ProbeTarget | None
    ) -> None:
        """Wildcard binds are probed on loopback; a configured port wins; https is not probed."""
        assert probe_target(url, port) == expected


class TestProbePolicy:
    def test_exact_name_then_globs_then_the_host_default(self) -> None:
        """for_unit takes the first matching override, else the host's settings."""
        default = ProbeSettings(enabled=True)
        exact = ProbeSettings(enabled=True, port=9001)
        glob = ProbeSettings(enabled=False)
        policy = ProbePolicy(default, (("vllm-a.service", exact), ("vllm-*.service", glob)))
        assert policy.for_unit("vllm-a.service") is exact
        assert policy.for_unit("vllm-b.service") is glob
        assert policy.for_unit("other.service") is default
        assert policy.is_enabled_anywhere
        assert not ProbePolicy().is_enabled_anywhere


class TestHealthTracker:
    def test_failures_while_starting_never_make_it_unhealthy(self) -> None:
        """Probes fail while vLLM loads; that is expected and starts no clock."""
        health = HealthTracker(KEY)
        for second in range(0, 600, 10):
            health.apply(_result(second, ProbeOutcome.DOWN, "connection_refused"), is_ready=False)
        assert health.failing_since is None
        assert not health.is_unhealthy(at(600), 60)
        snapshot = health.snapshot(at(600), 60)
        assert snapshot.up is False and snapshot.error == "connection_refused"

    def test_ready_and_failing_longer_than_the_threshold_is_unhealthy(self) -> None:
        """The clock starts at the first failure while ready; a success stops it."""
        health = HealthTracker(KEY)
        health.apply(_result(100, ProbeOutcome.UP), is_ready=True)
        health.apply(_result(110, ProbeOutcome.DOWN, "http_status"), is_ready=True)
        health.apply(_result(120, ProbeOutcome.DOWN, "timeout"), is_ready=True)
        assert health.failing_since == at(110)
        assert not health.is_unhealthy(at(169), 60)
        assert health.is_unhealthy(at(170), 60)
        snapshot = health.snapshot(at(170), 60)
        assert snapshot.unhealthy and snapshot.last_success_at == at(100)
        assert snapshot.ready_at == at(100)
        health.apply(_result(180, ProbeOutcome.UP), is_ready=True)
        assert health.failing_since is None and not health.is_unhealthy(at(999), 60)
        assert health.snapshot(at(999), 60).ready_at == at(100)  # the first success stays

    def test_failures_are_counted_from_the_first_after_the_last_success(self) -> None:
        """``failures``: the probes that failed since the clock started (none while starting,
        unreachable ones not counted), back to 0 after a success."""
        health = HealthTracker(KEY)
        health.apply(_result(0, ProbeOutcome.DOWN, "connection_refused"), is_ready=False)
        assert health.snapshot(at(0), 60).failures == 0  # still starting: expected
        health.apply(_result(100, ProbeOutcome.UP), is_ready=True)
        for second in (110, 120, 130):
            health.apply(_result(second, ProbeOutcome.DOWN, "http_status"), is_ready=True)
        health.apply(_result(135, ProbeOutcome.UNREACHABLE, "host_unreachable"), is_ready=True)
        assert health.snapshot(at(140), 60).failures == 3
        health.apply(_result(150, ProbeOutcome.UP), is_ready=True)
        assert health.snapshot(at(150), 60).failures == 0

    def test_an_unreachable_host_neither_starts_nor_stops_the_clock(self) -> None:
        """A host whose SSH connection is down says nothing about vLLM."""
        health = HealthTracker(KEY)
        health.apply(_result(10, ProbeOutcome.UNREACHABLE, "host_unreachable"), is_ready=True)
        assert health.failing_since is None and health.snapshot(at(10), 60).up is None
        health.apply(_result(20, ProbeOutcome.DOWN, "timeout"), is_ready=True)
        health.apply(_result(30, ProbeOutcome.UNREACHABLE, "host_unreachable"), is_ready=True)
        assert health.failing_since == at(20)

    def test_after_a_probe_success_failures_count_even_if_the_logs_lag(self) -> None:
        """Ready per the probe is ready: its later failures count towards unhealthy."""
        health = HealthTracker(KEY)
        health.apply(_result(10, ProbeOutcome.UP), is_ready=False)
        health.apply(_result(20, ProbeOutcome.DOWN, "connection_reset"), is_ready=False)
        assert health.failing_since == at(20)


class TestProbeReadiness:
    def _loading(self) -> object:
        item = incarnation([(Phase.STARTING, 0), (Phase.LOADING_WEIGHTS, 30)])
        return unit_snapshot("gpu-a", "vllm-qwen.service", item, stalled=True)

    def test_a_probe_success_shows_ready_from_its_time_while_the_logs_lag(self) -> None:
        """/health 200 while the logs say loading: ready at the probe's time, not stalled."""
        unit = self._loading()
        health = HealthTracker(incarnation_key(unit.current))
        health.apply(_result(95, ProbeOutcome.UP), is_ready=False)
        shown = with_probe_readiness(unit, health.snapshot(at(100), 60))
        current = shown.current
        assert current.phase is Phase.READY and current.outcome is Outcome.READY
        assert current.phases[-1].entered_at == at(95)
        assert [entry.phase for entry in current.phases[:-1]] == [
            Phase.STARTING,
            Phase.LOADING_WEIGHTS,
        ]
        assert shown.ready_source == "health_probe" and not shown.stalled

    def test_a_crash_in_the_logs_wins_over_an_earlier_probe_success(self) -> None:
        """Once the logs end the incarnation, the probe's readiness is gone."""
        unit = self._loading()
        health = HealthTracker(incarnation_key(unit.current))
        health.apply(_result(95, ProbeOutcome.UP), is_ready=False)
        crashed = replace(
            unit.current, outcome=Outcome.CRASHED, phase=Phase.CRASHED, ended_at=at(120)
        )
        unit = replace(unit, incarnations=(crashed,))
        shown = with_probe_readiness(unit, health.snapshot(at(130), 60))
        assert shown.current.phase is Phase.CRASHED and shown.ready_source is None

    def test_ready_by_the_logs_says_so(self) -> None:
        """A unit the logs call ready keeps its phases; ready_source is "log"."""
        item = incarnation([(Phase.STARTING, 0), (Phase.READY, 60)], outcome=Outcome.READY)
        unit = unit_snapshot("gpu-a", "vllm-qwen.service", item)
        shown = with_probe_readiness(unit, None)
        assert shown.current is item and shown.ready_source == "log"

    def test_unprobed_starting_unit_is_unchanged(self) -> None:
        """No health, still starting: the same object comes back."""
        unit = self._loading()
        assert with_probe_readiness(unit, None) is unit


def test_probe_results_are_tied_to_their_incarnation() -> None:
    """incarnation_key is the invocation id and the start time."""
    item = incarnation([(Phase.STARTING, 5)], id="abc")
    assert incarnation_key(item) == ("abc", at(5))
