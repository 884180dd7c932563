"""Startup history through the real daemon: kept across a restart, an ETA and slow on /metrics.

Run 1 follows a journal (real files, real journalctl) in which unit U starts and becomes
ready; the daemon records that start in its state directory. Run 2 — a restarted daemon with
the same state directory — follows *another* journal in which U starts again and is loading:
it never saw the first start in its journal, so the ETA, the usual duration and the slow flag
it serves can only come from the history kept on disk.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import orjson
import pytest
from structlog.testing import capture_logs

from tests.support.daemon import current_phase, local_config, running_daemon, value
from tests.support.journal_writer import JournalWriter, service_line, to_realtime_us, unit_started

pytestmark = [pytest.mark.integration, pytest.mark.asyncio]

UNIT = "vllm-qwen-32b.service"
MODEL = "Qwen/Qwen3-32B"
A = "a1" * 16
B = "b2" * 16
# Start A: phase → seconds it took (ready 135 s after systemd's Started).
A_PHASES = {
    "starting": 10.0,
    "initializing": 5.0,
    "loading_weights": 60.0,
    "compiling": 30.0,
    "profiling_kv_cache": 5.0,
    "capturing_cuda_graphs": 20.0,
    "starting_api_server": 5.0,
}
LATER = 30.0 + 5.0 + 20.0 + 5.0  # A's phases after loading_weights


def _start(invocation: str, started: datetime, *, until_loading: bool = False) -> list[dict]:
    """One start of U as vLLM 0.11 logs it; ``until_loading``: it stops at loading_weights."""

    def at(seconds: float) -> int:
        return to_realtime_us(started + timedelta(seconds=seconds))

    def line(seconds: float, text: str) -> dict:
        stamp = (started + timedelta(seconds=seconds)).strftime("%m-%d %H:%M:%S")
        return service_line(UNIT, invocation, 4100, f"INFO {stamp} [x.py:1] {text}", at(seconds))

    entries = [
        unit_started(UNIT, invocation, at(0)),
        line(10, f"Initializing a V1 LLM engine (v0.11.0) with config: model='{MODEL}'"),
        line(15, f"Starting to load model {MODEL}..."),
    ]
    if until_loading:
        return entries
    return [
        *entries,
        line(75, "Dynamo bytecode transform time: 6.12 s"),
        line(105, "Available KV cache memory: 20.5 GiB"),
        line(110, "Capturing CUDA graphs (decode, FULL): 100%|██████████| 35/35 [00:19<00:00]"),
        line(130, "Starting vLLM API server 0 on http://0.0.0.0:8000"),
        service_line(UNIT, invocation, 4100, "INFO:     Application startup complete.", at(135)),
    ]


def _history_file(state: Path) -> Path:
    return state / "history" / "llm-two" / f"{UNIT}.json"


async def test_history_survives_a_restart_and_gives_an_eta_and_slow(
    journal_writer: JournalWriter, tmp_path: Path, journalctl: str, journal_remote: str
) -> None:
    """A's durations reach the state directory; after a restart B's ETA and slow use them."""
    state = tmp_path / "state"
    a_started = datetime.now(UTC) - timedelta(minutes=10)
    journal_writer.write_readable(_start(A, a_started))
    async with running_daemon(local_config(journal_writer.path.parent, state)) as daemon:
        await daemon.wait_for(lambda s: current_phase(s, UNIT) == "ready", what="A ready")
        # the history file is flushed with the cursors (every 0.2 s here)
        await daemon.wait_for(lambda s: _history_file(state).exists(), what="history saved")
    document = orjson.loads(_history_file(state).read_bytes())
    ((start),) = document["starts"]
    assert (document["host"], document["unit"]) == ("llm-two", UNIT)
    assert (start["invocation_id"], start["model"], start["vllm_version"]) == (A, MODEL, "0.11.0")
    assert start["phase_seconds"] == pytest.approx(A_PHASES)
    assert start["started_at"] == a_started.isoformat().replace("+00:00", "Z")

    # Run 2: another journal, where only B appears; a second unit's history file is corrupt.
    other = tmp_path / "journal-2"
    other.mkdir()
    broken = state / "history" / "llm-two" / "vllm-other.service.json"
    broken.write_text('{"format": 1, "host": "llm-two"', encoding="utf-8")
    loading_for = 200.0  # past max(1.5 x 60, 60 + 60) = 120 s: slower than usual
    b_started = datetime.now(UTC) - timedelta(seconds=15 + loading_for)
    with JournalWriter(other, "second", binary=journal_remote, journalctl=journalctl) as writer:
        writer.write_readable(_start(B, b_started, until_loading=True))
        with capture_logs() as logs:
            async with running_daemon(local_config(other, state)) as daemon:
                samples = await daemon.wait_for(
                    lambda s: (
                        value(s, "vllm_sentinel_unit_startup_eta_seconds", unit=UNIT) is not None
                        and value(s, "vllm_sentinel_unit_slow", unit=UNIT, phase="loading_weights")
                        == 1
                    ),
                    what="B's ETA and slow flag from A's history",
                )
                status = await daemon.status()
    assert current_phase(samples, UNIT) == "loading_weights"
    eta = value(samples, "vllm_sentinel_unit_startup_eta_seconds", unit=UNIT, basis="history")
    assert eta == pytest.approx(LATER)  # overrun: the rest of loading is 0, the later phases stay
    ready_at = value(
        samples, "vllm_sentinel_unit_expected_ready_timestamp_seconds", unit=UNIT, basis="history"
    )
    assert ready_at is not None and ready_at == pytest.approx(
        datetime.now(UTC).timestamp() + LATER, abs=30
    )
    assert value(samples, "vllm_sentinel_unit_phase_usual_seconds", unit=UNIT) == 60.0
    assert value(samples, "vllm_sentinel_unit_stalled", unit=UNIT) == 0
    assert value(samples, "vllm_sentinel_unit_slow", unit=UNIT, phase="compiling") == 0
    skipped = value(samples, "vllm_sentinel_records_skipped_total", reason="history_file_corrupt")
    assert skipped == 1
    corrupt = [entry for entry in logs if entry["event"] == "history_file_corrupt"]
    assert [entry["path"] for entry in corrupt] == [str(broken)]
    (unit,) = [item for item in status["units"] if item["unit"] == UNIT]
    assert (unit["slow"], unit["eta_basis"], unit["usual_phase_seconds"]) == (True, "history", 60.0)
    # B is not ready: the history still holds A only
    assert [
        s["invocation_id"] for s in orjson.loads(_history_file(state).read_bytes())["starts"]
    ] == [A]
