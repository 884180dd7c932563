"""The daemon following real journal files with the real journalctl, checked over HTTP."""

from __future__ import annotations

import asyncio
import sys
from datetime import timedelta
from pathlib import Path

import orjson
import pytest
from structlog.testing import capture_logs

from tests.support.daemon import (
    current_phase,
    free_port,
    local_config,
    local_config_text,
    running_daemon,
    value,
)
from tests.support.journal_writer import (
    JournalWriter,
    LogClock,
    manager_line,
    other_unit_line,
    read_journal,
    service_line,
    unit_failed,
    unit_started,
)
from vllm_sentinel.config import load_config
from vllm_sentinel.state.cursor_store import CursorStore

pytestmark = [pytest.mark.integration, pytest.mark.asyncio]

UNIT = "vllm-kimi-k25.service"
A = "1" * 32
B = "2" * 32
FLASHINFER = (
    "flashinfer-cubin version (0.6.3) does not match flashinfer version (0.6.4). "
    "Please install the same version of both packages."
)


def _tp7(text: str) -> str:
    return f"\x1b[1;36m(Worker_TP7 pid=221350)\x1b[0;0m ERROR 11-29 10:00:40 [multiproc_executor.py:783] {text}"


async def test_flashinfer_incident_step_by_step(
    journal_writer: JournalWriter, tmp_path: Path
) -> None:
    """Crash, restart, late lines of the dead incarnation, benign ERROR, load: /metrics at each step."""
    clock = LogClock(timedelta(seconds=30))  # live crashes settle by log time only
    journal_writer.write_readable(
        [
            unit_started(UNIT, A, clock.us(0), "vLLM Kimi K2.5"),
            service_line(
                UNIT,
                A,
                221200,
                "(Worker_TP0 pid=221343) INFO 11-29 10:00:21 [gpu_model_runner.py:3425] Starting to load model /shared/kimi-k2.5-nvfp4...",
                clock.us(21),
            ),
        ]
    )
    write = journal_writer.write_and_flush
    config = local_config(journal_writer.path.parent, tmp_path / "state")
    async with running_daemon(config) as daemon:
        samples = await daemon.wait_for(
            lambda s: current_phase(s, UNIT) == "loading_weights", what="loading"
        )
        # A's start was written before the daemon started: history rebuilds the state but is
        # not counted (a restarted daemon must not count again what it reported before)
        assert value(samples, "vllm_sentinel_unit_starts_total", unit=UNIT) == 0
        assert value(samples, "vllm_sentinel_collector_up", collector="journal") == 1

        write(
            [
                service_line(UNIT, A, 221200, _tp7(text), clock.us(40))
                for text in ("WorkerProc failed to start.", "Traceback (most recent call last):")
            ]
        )
        write(unit_failed(UNIT, A, clock.us(80)))
        samples = await daemon.wait_for(
            lambda s: current_phase(s, UNIT) == "crashed", what="crashed"
        )

        write([unit_started(UNIT, B, clock.us(91), "vLLM Kimi K2.5")])
        # late delivery: the dead incarnation's last traceback lines arrive after the restart
        write(
            [
                service_line(UNIT, A, 221200, _tp7(text), clock.us(40))
                for text in (
                    '  File "/usr/lib/python3/dist-packages/vllm/v1/executor/multiproc_executor.py", line 783, in worker_main',
                    "    self.worker.load_model()",
                    f"RuntimeError: {FLASHINFER}",
                )
            ]
        )
        write(
            [
                service_line(
                    UNIT,
                    B,
                    222500,
                    "(APIServer pid=222500) ERROR 11-29 10:01:40 [gpt_oss_triton_kernels_moe.py:60] Failed to import Triton kernels. Please make sure your triton version is compatible. Error: cannot import name 'SparseMatrix' from 'triton_kernels.tensor'",
                    clock.us(100),
                ),
                service_line(
                    UNIT,
                    B,
                    222500,
                    "(Worker_TP0 pid=222636) INFO 11-29 10:01:52 [gpu_model_runner.py:3425] Starting to load model /shared/kimi-k2.5-nvfp4...",
                    clock.us(112),
                ),
                service_line(
                    UNIT,
                    B,
                    222500,
                    "(Worker_TP0 pid=222636) \rLoading safetensors checkpoint shards:  50% Completed | 32/64 [04:30<04:30, 8.4s/it]",
                    clock.us(382),
                ),
            ]
        )
        samples = await daemon.wait_for(
            lambda s: (
                value(s, "vllm_sentinel_unit_weights_loaded_ratio", unit=UNIT) == 0.5
                # counters show what was saved with the cursor, up to a flush interval later
                and value(s, "vllm_sentinel_unit_benign_errors_total", unit=UNIT) == 1
            ),
            what="ratio",
        )
        assert current_phase(samples, UNIT) == "loading_weights"
        assert value(
            samples, "vllm_sentinel_unit_phase_entered_timestamp_seconds", unit=UNIT
        ) == pytest.approx((clock.base + timedelta(seconds=112)).timestamp())
        assert value(samples, "vllm_sentinel_unit_starts_total", unit=UNIT) == 1  # B, seen live
        assert value(samples, "vllm_sentinel_unit_benign_errors_total", unit=UNIT) == 1
        assert (
            value(
                samples,
                "vllm_sentinel_unit_last_crash_info",
                unit=UNIT,
                cause="dependency_mismatch",
                exception="RuntimeError",
                phase="loading_weights",
            )
            == 1
        )
        info = [
            labels
            for (name, labels), _ in samples.items()
            if name == "vllm_sentinel_unit_incarnation_info"
        ]
        assert [dict(labels)["invocation_id"] for labels in info] == [B]
        status = await daemon.status()
        (unit,) = status["units"]
        first, second = unit["incarnations"]
        assert (first["id"], first["outcome"], first["crash"]["message"]) == (
            A,
            "crashed",
            FLASHINFER,
        )
        assert (second["id"], second["outcome"]) == (B, "running")
        assert unit["last_crash"]["hint"]["text"].startswith(
            "`pip install flashinfer-cubin==0.6.4`"
        )
        (benign,) = second["benign_lines"]  # the SparseMatrix line, discounted and explained
        assert benign["why"].startswith("harmless: only gpt-oss with the Triton MoE kernels")
        # settling: the crash is counted once, under the cause the late lines gave
        write(
            [
                service_line(
                    UNIT,
                    B,
                    222500,
                    "(Worker_TP0 pid=222636) INFO 11-29 10:02:52 [default_loader.py:291] Loading weights took 538.20 seconds",
                    clock.us(650),
                )
            ]
        )
        samples = await daemon.wait_for(
            lambda s: (
                value(s, "vllm_sentinel_unit_crashes_total", unit=UNIT, cause="dependency_mismatch")
                == 1
            ),
            what="crash counted",
        )
        assert (
            sum(v for (n, _), v in samples.items() if n == "vllm_sentinel_unit_crashes_total") == 1
        )


async def test_restart_does_not_count_a_reported_crash_again(
    journal_writer: JournalWriter, tmp_path: Path
) -> None:
    """A crash counted by the first run is history for the second: the last crash is still
    known, and the counters go on from what the first run saved, neither the crash nor its
    start counted again (a reset would make Prometheus count them again, and fire
    VllmCrashed for an old crash)."""
    clock = LogClock()  # records written now: after the first run started
    journal_writer.write_readable([other_unit_line(clock.us(-60))])
    config = local_config(journal_writer.path.parent, tmp_path / "state", units=f'["{UNIT}"]')
    async with running_daemon(config) as daemon:
        await daemon.wait_for(
            lambda s: value(s, "vllm_sentinel_collector_up", collector="journal") == 1, what="up"
        )
        journal_writer.write_and_flush(
            [
                unit_started(UNIT, A, clock.us(1)),
                service_line(
                    UNIT,
                    A,
                    7,
                    "ERROR 11-29 10:00:30 [core.py:1] torch.OutOfMemoryError: CUDA out of memory.",
                    clock.us(2),
                ),
                manager_line(
                    UNIT,
                    A,
                    f"{UNIT}: Main process exited, code=exited, status=1/FAILURE",
                    None,
                    clock.us(3),
                ),
                # the restart, a minute of log time later: A's crash settles by log time
                unit_started(UNIT, B, clock.us(63)),
            ]
        )
        samples = await daemon.wait_for(
            lambda s: (
                value(s, "vllm_sentinel_unit_crashes_total", unit=UNIT, cause="cuda_oom") == 1
            ),
            what="crash counted live",
        )
        assert value(samples, "vllm_sentinel_unit_starts_total", unit=UNIT) == 2
    async with running_daemon(config) as daemon:
        samples = await daemon.wait_for(
            lambda s: (
                value(s, "vllm_sentinel_unit_last_crash_info", unit=UNIT, cause="cuda_oom") == 1
                and current_phase(s, UNIT) == "starting"
            ),
            what="state rebuilt from history",
        )
        await asyncio.sleep(1.0)  # ticks and saves: nothing may move
        samples = await daemon.metrics()
        assert value(samples, "vllm_sentinel_unit_starts_total", unit=UNIT) == 2
        assert (
            sum(v for (n, _), v in samples.items() if n == "vllm_sentinel_unit_crashes_total") == 1
        )


@pytest.mark.parametrize(
    ("invocations", "from_cursor"),
    [(3, False), (1, False)],
    ids=["window-covers-the-cursor", "window-after-the-cursor"],
)
async def test_restart_resumes_from_cursor(
    journal_writer: JournalWriter, tmp_path: Path, invocations: int, from_cursor: bool
) -> None:
    """Records written while the daemon was down are applied exactly once after it restarts.

    With 3 invocations kept the backfill window (24 h) starts before the stored cursor and is
    read again from its start; with 1 it starts at the last "Started", after the cursor, but
    A was still running when the first run saved, so the backfill reads again from A's start
    (the oldest incarnation still open): A is rebuilt whole, its crash cause included.
    """
    clock = LogClock(timedelta(minutes=15))
    journal_writer.write_readable([unit_started(UNIT, A, clock.us(0))])
    config = local_config(
        journal_writer.path.parent,
        tmp_path / "state",
        extra=f"backfill_max_invocations = {invocations}",
    )
    async with running_daemon(config) as daemon:
        await daemon.wait_for(lambda s: current_phase(s, UNIT) == "starting", what="starting")
    cursor_file = tmp_path / "state" / "llm-two.cursor"
    assert cursor_file.exists()
    stored = CursorStore(tmp_path / "state").load("llm-two")
    # while the daemon is down: a crash and a restart
    readable = journal_writer.write_readable(
        [
            service_line(
                UNIT,
                A,
                7,
                "INFO 11-29 10:00:21 [gpu_model_runner.py:1] Starting to load model m...",
                clock.us(10),
            ),
            service_line(
                UNIT,
                A,
                7,
                "ERROR 11-29 10:00:30 [core.py:1] EngineCore failed to start.",
                clock.us(20),
            ),
            service_line(
                UNIT,
                A,
                7,
                "ERROR 11-29 10:00:30 [core.py:1] Traceback (most recent call last):",
                clock.us(20),
            ),
            service_line(
                UNIT,
                A,
                7,
                "ERROR 11-29 10:00:30 [core.py:1] torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB.",
                clock.us(20),
            ),
            manager_line(
                UNIT,
                A,
                f"{UNIT}: Main process exited, code=exited, status=1/FAILURE",
                None,
                clock.us(21),
            ),
            unit_started(UNIT, B, clock.us(30)),
        ]
    )
    last = orjson.loads(readable[-1])["__CURSOR"]
    with capture_logs() as logs:
        async with running_daemon(config) as daemon:
            samples = await daemon.wait_for(
                lambda s: (
                    value(s, "vllm_sentinel_unit_crashes_total", unit=UNIT, cause="cuda_oom") == 1
                ),
                what="crash while down counted",
            )
            assert current_phase(samples, UNIT) == "starting"
            # B only: A's start is before the stored cursor (the first run saw it), whether the
            # backfill re-reads A's "Started" (window) or meets A midway (from the cursor)
            assert value(samples, "vllm_sentinel_unit_starts_total", unit=UNIT) == 1
            levels = {
                dict(labels)["level"]: v
                for (n, labels), v in samples.items()
                if n == "vllm_sentinel_unit_log_records_total"
            }
            assert levels == {
                "debug": 0,
                "info": 1,
                "warning": 0,
                "error": 3,
                "critical": 0,
                "none": 0,
            }
            assert (
                sum(v for (n, _), v in samples.items() if n == "vllm_sentinel_unit_crashes_total")
                == 1
            )
    (backfill,) = [e for e in logs if e["event"] == "journal_backfill_started"]
    assert backfill["reads_from"] == ("stored_cursor" if from_cursor else "window_start")
    assert not [e for e in logs if e["event"] == "journal_cursor_unknown"]
    # shut down (as SIGTERM does): the last applied cursor was flushed
    assert stored != last
    assert CursorStore(tmp_path / "state").load("llm-two") == last


async def test_unit_matching_a_glob_later_is_followed(
    journal_writer: JournalWriter, tmp_path: Path
) -> None:
    """A glob that matches no unit yet keeps the collector up; the unit is followed once it logs."""
    clock = LogClock()  # written now: after the daemon started, so counted
    journal_writer.write_readable([other_unit_line(clock.us(0))])
    config = local_config(
        journal_writer.path.parent,
        tmp_path / "state",
        extra="unit_discovery_interval_seconds = 0.2",
    )
    async with running_daemon(config) as daemon:
        samples = await daemon.wait_for(
            lambda s: value(s, "vllm_sentinel_collector_up", collector="journal") == 1, what="up"
        )
        assert current_phase(samples, UNIT) is None
        journal_writer.write_and_flush(
            [
                unit_started(UNIT, A, clock.us(5)),
                service_line(
                    UNIT,
                    A,
                    7,
                    "INFO 11-29 10:00:21 [gpu_model_runner.py:1] Starting to load model m...",
                    clock.us(6),
                ),
            ]
        )
        samples = await daemon.wait_for(
            lambda s: (
                current_phase(s, UNIT) == "loading_weights"
                and value(s, "vllm_sentinel_unit_starts_total", unit=UNIT) == 1
            ),
            what="new unit",
        )
        journal_writer.write_and_flush(
            [
                service_line(
                    UNIT,
                    A,
                    7,
                    "INFO 11-29 10:00:50 [gpu_model_runner.py:1] Model loading took 9.38 GiB memory and 14.1 seconds",
                    clock.us(7),
                )
            ]
        )
        await daemon.wait_for(
            lambda s: value(s, "vllm_sentinel_unit_model_weights_bytes", unit=UNIT) is not None,
            what="followed after discovery",
        )


async def test_a_unit_quiet_for_longer_than_the_window_keeps_its_state(
    journal_writer: JournalWriter, tmp_path: Path
) -> None:
    """An idle server that started 30 h ago (outside the 24 h window) and logged nothing since
    is backfilled from its latest ``Started``: ready at the first scrape, not absent."""
    idle = "vllm-idle.service"
    clock = LogClock(timedelta(hours=30))
    recent = LogClock(timedelta(minutes=5))
    journal_writer.write_readable(
        [
            unit_started(idle, "c" * 32, clock.us(0)),
            service_line(
                idle,
                "c" * 32,
                100,
                "(APIServer pid=100) INFO 11-28 10:00:30 [api_server.py:1] vLLM API server "
                "version 0.11.0",
                clock.us(1),
            ),
            service_line(
                idle,
                "c" * 32,
                100,
                "(APIServer pid=100) INFO:     Application startup complete.",
                clock.us(60),
            ),
            unit_started(UNIT, A, recent.us(0)),
        ]
    )
    config = local_config(journal_writer.path.parent, tmp_path / "state")
    with capture_logs() as logs:
        async with running_daemon(config) as daemon:
            samples = await daemon.wait_for(
                lambda s: (
                    current_phase(s, idle) == "ready" and current_phase(s, UNIT) == "starting"
                ),
                what="the idle unit ready, the other starting",
            )
    assert value(samples, "vllm_sentinel_unit_starts_total", unit=idle) == 0  # history
    assert value(
        samples, "vllm_sentinel_unit_phase_entered_timestamp_seconds", unit=idle
    ) == pytest.approx((clock.base + timedelta(seconds=60)).timestamp())
    (quiet,) = [e for e in logs if e["event"] == "journal_backfill_quiet_unit"]
    assert quiet["unit"] == idle


async def test_a_backfill_cut_short_keeps_history_uncounted(
    journal_writer: JournalWriter, tmp_path: Path
) -> None:
    """More history than ``backfill_max_records`` before the stored cursor: the rest arrives in
    the follow stream, and is still history (not counted as if it happened now)."""
    clock = LogClock(timedelta(hours=2))
    access = '(APIServer pid=7) INFO:     10.0.0.1:1 - "POST /v1/completions HTTP/1.1" 200 OK'
    exited = f"{UNIT}: Main process exited, code=exited, status=1/FAILURE"
    written = [
        unit_started(UNIT, A, clock.us(0)),
        *(service_line(UNIT, A, 7, access, clock.us(1 + i / 100)) for i in range(50)),
        manager_line(UNIT, A, exited, None, clock.us(100)),
        unit_started(UNIT, B, clock.us(110)),
        service_line(
            UNIT,
            B,
            8,
            "INFO 11-29 10:00:21 [gpu_model_runner.py:1] Starting to load model m...",
            clock.us(120),
        ),
    ]
    last = orjson.loads(journal_writer.write_readable(written)[-1])["__CURSOR"]
    state = tmp_path / "state"
    state.mkdir()
    (state / "llm-two.cursor").write_text(last + "\n")  # the last run reported all of it
    config = local_config(journal_writer.path.parent, state, extra="backfill_max_records = 20")
    with capture_logs() as logs:
        async with running_daemon(config) as daemon:
            samples = await daemon.wait_for(
                lambda s: (
                    current_phase(s, UNIT) == "loading_weights"
                    and value(s, "vllm_sentinel_unit_last_crash_info", unit=UNIT, cause="unknown")
                    == 1
                ),
                what="A crashed and B loading, from history",
            )
    assert [e for e in logs if e["event"] == "journal_backfill_truncated"]
    assert value(samples, "vllm_sentinel_unit_starts_total", unit=UNIT) == 0
    assert sum(v for (n, _), v in samples.items() if n == "vllm_sentinel_unit_crashes_total") == 0


async def test_a_reload_keeps_what_counts_as_history(
    journal_writer: JournalWriter, tmp_path: Path
) -> None:
    """A host whose journal directory was wrong at start and is fixed by a reload: what was
    written after the daemon started is counted (the reload does not move the boundary)."""
    clock = LogClock()
    journal_writer.write_readable([other_unit_line(clock.us(-60))])
    path = tmp_path / "sentinel.toml"
    state = tmp_path / "state"
    port = free_port()

    def write_config(directory: Path) -> None:
        path.write_text(local_config_text(directory, state, units=f'["{UNIT}"]', port=port))

    write_config(tmp_path / "typo")
    async with running_daemon(load_config(path), path) as daemon:
        journal_writer.write_readable(
            [
                unit_started(UNIT, A, clock.us(0.5)),
                manager_line(
                    UNIT,
                    A,
                    f"{UNIT}: Main process exited, code=exited, status=1/FAILURE",
                    None,
                    clock.us(1),
                ),
                unit_started(UNIT, B, clock.us(62)),
            ]
        )
        await asyncio.sleep(2.5)  # the reload comes well after A's records were written
        write_config(journal_writer.path.parent)
        assert await daemon.daemon.reload()
        samples = await daemon.wait_for(
            lambda s: value(s, "vllm_sentinel_unit_crashes_total", unit=UNIT, cause="unknown") == 1,
            what="the crash written after the start, counted",
        )
        assert value(samples, "vllm_sentinel_unit_starts_total", unit=UNIT) == 2


async def test_a_crash_not_yet_counted_at_shutdown_is_counted_after_the_restart(
    journal_writer: JournalWriter, tmp_path: Path
) -> None:
    """The daemon stops seconds after a crash, before it settled (and counted): the cursor
    file carries the crash, and the next run counts it, once."""
    clock = LogClock()
    journal_writer.write_readable([other_unit_line(clock.us(-60))])
    config = local_config(journal_writer.path.parent, tmp_path / "state", units=f'["{UNIT}"]')
    exited = f"{UNIT}: Main process exited, code=exited, status=1/FAILURE"
    async with running_daemon(config) as daemon:
        journal_writer.write_and_flush(
            [
                unit_started(UNIT, A, clock.us(1)),
                manager_line(UNIT, A, exited, None, clock.us(2)),
            ]
        )
        samples = await daemon.wait_for(
            lambda s: current_phase(s, UNIT) == "crashed", what="crashed, not settled yet"
        )
        assert value(samples, "vllm_sentinel_unit_crashes_total", unit=UNIT, cause="unknown") == 0
    saved = CursorStore(tmp_path / "state").load_state("llm-two")
    assert saved is not None
    (carried,) = saved.units[UNIT].carried
    assert (carried.key, saved.units[UNIT].starts) == (A, 1)
    # while the daemon is down, systemd restarts the unit (log time moves past the settling)
    journal_writer.write_readable([unit_started(UNIT, B, clock.us(45))])
    async with running_daemon(config) as daemon:
        samples = await daemon.wait_for(
            lambda s: value(s, "vllm_sentinel_unit_crashes_total", unit=UNIT, cause="unknown") == 1,
            what="the crash counted by the next run",
        )
        assert value(samples, "vllm_sentinel_unit_starts_total", unit=UNIT) == 2  # A, then B
    saved = CursorStore(tmp_path / "state").load_state("llm-two")
    assert saved is not None and saved.units[UNIT].carried == ()


async def test_a_directory_of_several_machines_is_followed_whole(
    journal_writer: JournalWriter, journal_remote: str, tmp_path: Path
) -> None:
    """A journal-remote directory holds the files of several machines, each with its own boot:
    the unit of the machine that did not boot last is followed live too (systemd ≥ 250's
    ``--follow`` would keep to the newest boot without ``--merge``)."""
    clock = LogClock()
    other = "vllm-other.service"
    config = local_config(
        journal_writer.path.parent, tmp_path / "state", units=f'["{UNIT}", "{other}"]'
    )
    journal_writer.write_readable([unit_started(UNIT, A, clock.us(0))])
    with JournalWriter(journal_writer.path.parent, "newer-boot", binary=journal_remote) as newer:
        newer.write_readable(
            [
                unit_started(other, B, clock.us(1), boot_id="e" * 32)
            ]
        )  # fmt: skip
        async with running_daemon(config) as daemon:
            await daemon.wait_for(
                lambda s: (
                    current_phase(s, UNIT) == "starting" and current_phase(s, other) == "starting"
                ),
                what="both machines' units",
            )
            journal_writer.write_and_flush(  # the older boot's machine goes on logging
                [
                    service_line(
                        UNIT,
                        A,
                        7,
                        "INFO 11-29 10:00:21 [gpu_model_runner.py:1] Starting to load model m...",
                        clock.us(2),
                    )
                ]
            )
            await daemon.wait_for(
                lambda s: current_phase(s, UNIT) == "loading_weights",
                what="a live line of the machine that did not boot last",
            )


def _late_restart_entries(
    clock: LogClock, gap: float
) -> tuple[list[bytes], list[bytes], list[bytes], list[bytes]]:
    """The flashinfer incident with the restart ``gap`` s after the exit (issue 10, class 1):
    (start + load, head of the worker's traceback + exit, B's Started, the traceback's rest
    with the root cause, delivered after B's Started with A's invocation id)."""
    start = [
        unit_started(UNIT, A, clock.us(0), "vLLM Kimi K2.5"),
        service_line(
            UNIT,
            A,
            221343,
            "(Worker_TP0 pid=221343) INFO 11-29 10:00:21 [gpu_model_runner.py:3425] Starting to load model /shared/kimi-k2.5-nvfp4...",
            clock.us(21),
        ),
    ]
    head = [
        service_line(UNIT, A, 221350, _tp7(text), clock.us(40))
        for text in (
            "WorkerProc failed to start.",
            "Traceback (most recent call last):",
            '  File "/usr/lib/python3/dist-packages/vllm/v1/executor/multiproc_executor.py", line 783, in worker_main',
        )
    ] + [
        *unit_failed(UNIT, A, clock.us(80)),
    ]
    restart = [unit_started(UNIT, B, clock.us(80 + gap), "vLLM Kimi K2.5")]
    rest = [
        service_line(UNIT, A, 221350, _tp7(text), clock.us(80 + gap + 1))
        for text in ("    self.worker.load_model()", f"RuntimeError: {FLASHINFER}")
    ]
    return start, head, restart, rest


async def test_split_traceback_across_a_restart_70_s_later(
    journal_writer: JournalWriter, tmp_path: Path
) -> None:
    """last_crash_info says pending (never a made-up cause) until the late root cause arrives,
    although both log time and the daemon's clock are past the 30 s settle; then the real one."""
    clock = LogClock(ago=timedelta(seconds=160))  # the restart is 10 s ago: ticks are past settle
    start, head, restart, rest = _late_restart_entries(clock, gap=70)
    journal_writer.write_readable(start)
    write = journal_writer.write_and_flush
    config = local_config(journal_writer.path.parent, tmp_path / "state")
    async with running_daemon(config) as daemon:
        await daemon.wait_for(lambda s: current_phase(s, UNIT) == "loading_weights", what="load")
        write(head)
        write(restart)
        samples = await daemon.wait_for(
            lambda s: any(
                name == "vllm_sentinel_unit_incarnation_info" and ("invocation_id", B) in labels
                for name, labels in s
            ),
            what="B",
        )
        await asyncio.sleep(2.5)  # a few ticks: wall clock 80 s after the exit
        samples = await daemon.metrics()
        assert value(samples, "vllm_sentinel_unit_last_crash_info", unit=UNIT, cause="pending")
        assert (
            sum(v for (n, _), v in samples.items() if n == "vllm_sentinel_unit_crashes_total") == 0
        )
        write(rest)
        samples = await daemon.wait_for(
            lambda s: (
                value(s, "vllm_sentinel_unit_crashes_total", unit=UNIT, cause="dependency_mismatch")
                == 1
            ),
            what="root cause counted",
        )
        assert (
            value(
                samples,
                "vllm_sentinel_unit_last_crash_info",
                unit=UNIT,
                cause="dependency_mismatch",
                exception="RuntimeError",
                phase="loading_weights",
            )
            == 1
        )
        assert (
            sum(v for (n, _), v in samples.items() if n == "vllm_sentinel_unit_crashes_total") == 1
        )


async def test_replay_reads_a_split_traceback_across_a_restart_70_s_later(
    journal_writer: JournalWriter, tmp_path: Path
) -> None:
    """``journalctl -o json | vllm-sentinel replay -``: the verdict names the late root cause."""
    clock = LogClock(ago=timedelta(days=1))
    entries = [entry for part in _late_restart_entries(clock, gap=70) for entry in part]
    journal_writer.write_readable(entries)
    exported = b"\n".join(read_journal(journal_writer.path)) + b"\n"
    result = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "vllm_sentinel",
        "replay",
        "--output",
        "json",
        "-",
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    stdout, stderr = await result.communicate(exported)
    assert result.returncode == 0, stderr.decode()
    (unit,) = orjson.loads(stdout)["units"]
    first, second = unit["incarnations"]
    assert (first["id"], first["outcome"]) == (A, "crashed")
    assert (first["crash"]["cause"], first["crash"]["message"]) == (
        "dependency_mismatch",
        FLASHINFER,
    )
    assert (second["id"], second["outcome"]) == (B, "running")
