"""vLLM 0.33's modes end to end: replayed golden logs → ``/units``, the status page, ``status``
and ``/metrics``; the startup history keeps its kinds apart; the rules of ``runtime_modes``.

The logs are ``tests/golden/synthetic/30x-v0.33-*.log``, written from vLLM 0.33.0's own format
strings as its logger prints them (their ``.expected.json`` names each source string).
"""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from tests.golden.scoring import replay_file
from tests.support.snapshots import modes_snapshot
from vllm_sentinel.engine.catalog.causes import CrashCause
from vllm_sentinel.engine.catalog.phases import Phase
from vllm_sentinel.engine.eta import comparable, startup_record
from vllm_sentinel.engine.hints import hint_context, hint_for, without_weight_caches
from vllm_sentinel.engine.modes_report import modes_status_lines
from vllm_sentinel.engine.report import render_status, render_text, status_document
from vllm_sentinel.engine.runtime_modes import read_ready_timeout, wakes_fully
from vllm_sentinel.engine.snapshot import (
    CrashInfo,
    GpuProcessUsage,
    HostSnapshot,
    RuntimeModes,
    Snapshot,
    UnitSnapshot,
)
from vllm_sentinel.serve.metrics import METRICS
from vllm_sentinel.serve.page import render_main
from vllm_sentinel.serve.readiness import HTTP_STATUS, UnitState, unit_document
from vllm_sentinel.state.history_store import HistoryStore

SYNTHETIC = Path(__file__).resolve().parents[1] / "golden" / "synthetic"
GIB = 1 << 30


def _replayed(stem: str, unit: str = "vllm-chat.service") -> UnitSnapshot:
    (replayed,) = replay_file(SYNTHETIC / f"{stem}.log")
    return replace(replayed, unit=unit, host="gpu-c")


def _snapshot(*units: UnitSnapshot) -> Snapshot:
    at = max(
        unit.current.last_record_at
        for unit in units
        if unit.current is not None and unit.current.last_record_at is not None
    ) + timedelta(seconds=30)
    return Snapshot((HostSnapshot("gpu-c", units),), at)


class TestSleeping:
    """302: put to sleep at level 2, only its weights woken: still asleep."""

    def test_units_answers_503_sleeping_with_when_and_the_memory(self) -> None:
        unit = _replayed("302-v0.33-sleep-mode-level2-weights-woken-still-asleep")
        document = unit_document(unit, _snapshot(unit).at)
        assert document["state"] == "sleeping"
        assert HTTP_STATUS[UnitState(document["state"])] == 503
        assert document["sleeping_since"] == "2026-11-30T09:12:03Z"
        assert (document["sleep_freed_bytes"], document["sleep_kept_bytes"]) == (
            int(69.13 * GIB),
            int(0.40 * GIB),
        )
        assert document["detail"] == (
            "sleeping since 2026-11-30T09:12:03Z (vLLM sleep mode): freed 69.13 GiB, 0.40 GiB "
            "still in use; POST /wake_up wakes it"
        )
        assert (document["stalled"], document["slow"]) == (False, False)

    def test_page_status_and_replay_say_it(self) -> None:
        unit = _replayed("302-v0.33-sleep-mode-level2-weights-woken-still-asleep")
        status = status_document(_snapshot(unit))
        page = render_main(status)
        assert 'class="phase phase-sleeping">sleeping<' in page
        assert "asleep: freed 69.13 GiB, 0.40 GiB kept" in page
        table = render_status(status)
        # a replayed text's time, as printed: no zone (report.iso_time)
        assert "sleeping since 2026-11-30T09:12:03: freed 69.13 GiB, 0.40 GiB in use" in table
        text = render_text([unit])
        assert (
            "sleeping since 2026-11-30 09:12:03 (vLLM sleep mode): freed 69.13 GiB, 0.40 GiB "
            "still in use; fell asleep in 2.10s"
        ) in text
        assert "verdict: sleeping for 1m07s" in text

    def test_metrics_carry_the_phase_and_the_figures(self) -> None:
        unit = _replayed("302-v0.33-sleep-mode-level2-weights-woken-still-asleep")
        snapshot = _snapshot(unit)
        by_name = {row.name: dict(row.samples(snapshot)) for row in METRICS}
        key = ("gpu-c", "vllm-chat.service")
        assert by_name["vllm_sentinel_unit_phase"][(*key, "sleeping")] == 1.0
        assert by_name["vllm_sentinel_unit_phase"][(*key, "ready")] == 0.0
        assert by_name["vllm_sentinel_unit_sleep_freed_bytes"][key] == float(int(69.13 * GIB))
        assert by_name["vllm_sentinel_unit_fall_asleep_seconds"][key] == pytest.approx(2.104388)
        assert by_name["vllm_sentinel_unit_wake_up_seconds"][key] == pytest.approx(0.311002)
        assert by_name["vllm_sentinel_unit_sleeping_since_timestamp_seconds"][key] == (
            datetime(2026, 11, 30, 9, 12, 3, tzinfo=UTC).timestamp()
        )

    @pytest.mark.parametrize(
        ("tags", "whole"),
        [
            ("{'weights', 'kv_cache'}", True),  # none named: every sleeping tag, a set
            ("['weights', 'kv_cache']", True),
            ("['kv_cache']", True),  # the cache last: the sleep ends
            ("['weights']", False),  # weights first (an RL trainer updates them)
            ("['scheduling']", False),
        ],
    )
    def test_which_wake_ups_end_the_sleep(self, tags: str, whole: bool) -> None:
        assert wakes_fully(tags) is whole


class TestWeightCache:
    """303: a `vllm preload` daemon; 304: a serve unit that maps its weights."""

    def test_the_daemon_is_shown_serving_weights(self) -> None:
        unit = _replayed("303-v0.33-weight-cache-daemon-preload-serving", "vllm-weights.service")
        document = unit_document(unit, _snapshot(unit).at)
        assert (document["state"], document["role"]) == ("ready", "weight_cache")
        assert document["detail"] == "weight-cache daemon: serving weights"
        status = status_document(_snapshot(unit))
        assert "serving weights (15.27 GiB)" in render_main(status)
        assert modes_status_lines(status["units"][0]) == [
            "weight-cache daemon serving weights on "
            "/run/vllm-weight-cache/vllm_weight_cache_3b1f0c2e9d7a4b58.sock"
        ]

    def test_mapped_starts_are_compared_only_with_mapped_starts(self) -> None:
        unit = _replayed("304-v0.33-ipc-cache-loads-kept-apart-from-full-loads")
        full, first, second = (startup_record(item) for item in unit.incarnations)
        assert full is not None and first is not None and second is not None
        assert (full.startup_kind, first.startup_kind) == ("full", "weight_cache")
        assert full.phase_seconds[Phase.LOADING_WEIGHTS] == pytest.approx(66.0)  # ends at its end
        assert first.phase_seconds[Phase.LOADING_WEIGHTS] == pytest.approx(1.0)  # seconds
        chosen, _ = comparable((full, first), second.model, second.startup_kind)
        assert chosen == (first,)
        chosen, _ = comparable((full, first), full.model, "full")
        assert chosen == (full,)
        text = render_text([unit])
        assert "no earlier start in this input that loaded the same way" in text
        assert "startup 33s against a usual 33s (median of 1 earlier start" in text

    def test_the_history_file_keeps_the_kind(self, tmp_path: Path) -> None:
        unit = _replayed("304-v0.33-ipc-cache-loads-kept-apart-from-full-loads")
        store = HistoryStore(tmp_path)
        for item in unit.incarnations:
            record = startup_record(item)
            assert record is not None
            store.add("gpu-c", unit.unit, record)
        assert store.flush_sync() == 1
        again = HistoryStore(tmp_path)
        again.load()
        kinds = [record.startup_kind for record in again.records("gpu-c", unit.unit)]
        assert kinds == ["full", "weight_cache", "weight_cache"]

    def test_hints_never_blame_the_daemons_memory(self) -> None:
        """A serve unit's OOM on a GPU the daemon holds 15 GiB of: the hint names the other
        process, never the weight-cache daemon."""
        daemon = _replayed("303-v0.33-weight-cache-daemon-preload-serving", "vllm-weights.service")
        crash = CrashInfo(
            CrashCause.CUDA_OOM,
            "torch.OutOfMemoryError",
            "CUDA out of memory. Tried to allocate 2.00 GiB.",
            Phase.LOADING_WEIGHTS,
            None,
        )
        served = UnitSnapshot("gpu-c", "vllm-chat.service", (), last_crash=crash)
        processes = (
            GpuProcessUsage(77, 0, 16 * GIB, "vllm-weights.service"),
            GpuProcessUsage(9911, 0, 30 * GIB, "jupyter.service"),
        )
        named = hint_for(crash, hint_context(served, processes)).text
        assert "vllm-weights.service" in named  # without the filter the daemon is named
        kept = without_weight_caches(processes, (daemon, served))
        assert kept == (processes[1],)
        text = hint_for(crash, hint_context(served, kept)).text
        assert "jupyter.service (pid 9911) holds 30.0 GiB" in text
        assert "vllm-weights.service" not in text


class TestStartupPlan:
    """305: the second boot reuses the first one's plan."""

    def test_a_plan_boot_is_its_own_kind(self) -> None:
        unit = _replayed("305-v0.33-startup-plan-boot-skips-profiling")
        first, second = unit.incarnations
        assert first.modes.startup_plan_path == (
            "/root/.cache/vllm/startup_plans/3f9c2a71d0e4.json"
        )
        assert second.modes.startup_kind == "startup_plan"
        document = status_document(_snapshot(unit))
        assert "startup plan: profiling skipped" in render_main(document)
        assert "booted from a startup plan: memory profiling skipped" in render_text([unit])


class TestWatchdog:
    """306: a stack dump while serving."""

    def test_stalled_with_its_dump_everywhere(self) -> None:
        unit = _replayed("306-v0.33-watchdog-stack-dump-while-serving")
        path = "/var/tmp/vllm-watchdog/VLLM_STACK_DUMP_for_engine_0_4180.log"
        assert (unit.stalled, unit.stall_reason) == (True, "vllm_watchdog")
        snapshot = _snapshot(unit)
        document = unit_document(unit, snapshot.at)
        assert (document["stalled"], document["stall_reason"]) == (True, "vllm_watchdog")
        assert document["watchdog_dump_path"] == path
        assert document["detail"] == f"ready; vLLM's watchdog dumped the stack to {path} (stalled)"
        status = status_document(snapshot)
        assert status["units"][0]["watchdog_dump_path"] == path
        assert status["units"][0]["incarnations"][0]["modes"]["watchdog"] == {
            "dump_path": path,
            "reason": "feed timeout",
            "at": "2026-11-30T09:06:30",  # a replayed text's time, as printed: no zone
        }
        assert f"vLLM watchdog stack dump: {path}" in render_main(status)
        assert f"stalled: vLLM's watchdog dumped the stack to {path}" in render_status(status)
        samples = {row.name: dict(row.samples(snapshot)) for row in METRICS}
        key = ("gpu-c", "vllm-chat.service")
        assert samples["vllm_sentinel_unit_stalled"][key] == 1.0
        assert samples["vllm_sentinel_unit_stalled_by_watchdog"][key] == 1.0
        assert samples["vllm_sentinel_unit_watchdog_dump_info"][(*key, path, "feed timeout")] == 1


class TestReadyTimeout:
    """307: one start under 1800 s, one that timed out under 600 s, one that will."""

    def test_the_timed_out_start_is_cause_timeout_with_the_variables_hint(self) -> None:
        unit = _replayed("307-v0.33-engine-ready-timeout-predicted-and-hit")
        crash = unit.incarnations[1].crash
        assert crash is not None and crash.cause is CrashCause.TIMEOUT
        hint = hint_for(crash, hint_context(unit))
        assert hint.rule == "engine_ready_timeout"
        assert "vLLM gave up after its engine ready timeout, 600 s" in hint.text
        assert "`Environment=VLLM_ENGINE_READY_TIMEOUT_S=SECONDS`" in hint.text

    def test_the_next_start_will_time_out_everywhere(self) -> None:
        unit = _replayed("307-v0.33-engine-ready-timeout-predicted-and-hit")
        assert (unit.will_time_out, unit.ready_timeout_seconds) == (True, 600.0)
        snapshot = _snapshot(unit)
        status = status_document(snapshot)
        assert status["units"][0]["will_time_out"] is True
        document = unit_document(unit, snapshot.at)
        assert document["will_time_out"] is True
        assert document["ready_timeout_remaining_seconds"] == 380.0
        page = render_main(status)
        assert 'class="flag flag-will_time_out"' in page
        assert "past VLLM_ENGINE_READY_TIMEOUT_S=600" in page
        assert (
            "will time out: the ETA is past VLLM_ENGINE_READY_TIMEOUT_S=600.0 (380s left): raise it"
        ) in render_status(status)
        samples = {row.name: dict(row.samples(snapshot)) for row in METRICS}
        key = ("gpu-c", "vllm-chat.service")
        assert samples["vllm_sentinel_unit_startup_will_time_out"][key] == 1.0
        assert samples["vllm_sentinel_unit_ready_timeout_remaining_seconds"][key] == 380.0

    @pytest.mark.parametrize(
        ("line", "seconds"),
        [
            ("+ exec env VLLM_ENGINE_READY_TIMEOUT_S=1800 vllm serve m", 1800.0),
            ("VLLM_ENGINE_READY_TIMEOUT_S: 900", 900.0),
            ("environ: {'VLLM_ENGINE_READY_TIMEOUT_S': '1200', 'HF_HOME': '/data'}", 1200.0),
            ("Waited 600s (configured by VLLM_ENGINE_READY_TIMEOUT_S). To increase …", 600.0),
            ("set the environment variable: VLLM_ENGINE_READY_TIMEOUT_S=<seconds>", None),
            ("VLLM_ENGINE_READY_TIMEOUT_S=0", None),
        ],
    )
    def test_the_timeout_a_line_shows(self, line: str, seconds: float | None) -> None:
        assert read_ready_timeout(RuntimeModes(), line).ready_timeout_seconds == seconds


def test_modes_snapshot_renders_on_the_page() -> None:
    """The hand-built snapshot of every mode renders (escaped) on the page."""
    page = render_main(status_document(modes_snapshot()))
    for unit in ("vllm-weights.service", "vllm-chat.service", "vllm-kimi.service"):
        assert unit in page
    assert "weights mapped from the weight cache" in page
