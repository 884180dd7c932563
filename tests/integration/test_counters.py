"""Counters exactly once across daemon restarts, crash loops and reloads (issue 15's cases).

Every case runs the real daemon on journal files written by ``systemd-journal-remote`` and
read by the real ``journalctl``, and reads ``/metrics`` over HTTP the way Prometheus does:
``CounterSums`` adds what each scrape shows like ``increase()`` (a drop is a reset). What the
journal holds is the truth; the sums must equal it exactly.

Log times start at the daemon's clock (a first start counts what is written after it) and run
ahead of it; a crash is counted once its cause is settled, 30 s of log time after its end, so a
line written later in log time settles it without waiting.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from structlog.testing import capture_logs

from tests.conftest import require_binary
from tests.support.daemon import (
    CounterSums,
    RunningDaemon,
    current_phase,
    daemon_process,
    free_port,
    local_config,
    local_config_text,
    running_daemon,
    scrape,
    value,
)
from tests.support.journal_writer import (
    JournalWriter,
    LogClock,
    manager_line,
    other_unit_line,
    service_line,
    to_realtime_us,
    unit_failed,
    unit_started,
)
from vllm_sentinel.config import load_config

pytestmark = [pytest.mark.integration]

UNIT = "vllm-loop.service"
OTHER = "vllm-other.service"
EXITED = f"{UNIT}: Main process exited, code=exited, status=1/FAILURE"
OOM = "ERROR 11-29 10:00:30 [core.py:1] torch.OutOfMemoryError: CUDA out of memory."


def invocation(n: int) -> str:
    return f"{n + 1:032x}"


def crash_cycle(clock: LogClock, n: int, at: float) -> list[dict[str, str | bytes | int]]:
    """One incarnation: systemd's start, four vLLM lines (INFO ×2, ERROR ×2), the failed exit."""
    inv = invocation(n)
    return [
        unit_started(UNIT, inv, clock.us(at)),
        service_line(UNIT, inv, 100 + n, "INFO 11-29 10:00:01 [core.py:1] Initializing", clock.us(at + 0.1)),
        service_line(UNIT, inv, 100 + n, "INFO 11-29 10:00:02 [gpu_model_runner.py:1] Starting to load model m...", clock.us(at + 0.2)),
        service_line(UNIT, inv, 100 + n, "ERROR 11-29 10:00:03 [core.py:1] EngineCore failed to start.", clock.us(at + 0.3)),
        service_line(UNIT, inv, 100 + n, OOM, clock.us(at + 0.4)),
        *unit_failed(UNIT, inv, clock.us(at + 0.5)),
    ]  # fmt: skip


async def scrape_into(
    daemon: RunningDaemon, sums: CounterSums
) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    samples = await daemon.metrics()
    sums.add(samples)
    return samples


async def settled(daemon: RunningDaemon, sums: CounterSums, crashes: int, records: int) -> None:
    """Scrape until the daemon shows ``crashes`` crashes and ``records`` records in all."""
    await daemon.wait_for(
        lambda s: (
            sum(v for (n, _), v in s.items() if n == "vllm_sentinel_unit_crashes_total") == crashes
            and sum(v for (n, _), v in s.items() if n == "vllm_sentinel_unit_log_records_total")
            == records
        ),
        what=f"{crashes} crashes and {records} records",
    )
    await scrape_into(daemon, sums)


def first_start_marker(journal: JournalWriter) -> None:
    """An unrelated entry, so the journal file exists before the daemon starts."""
    journal.write_readable([other_unit_line(LogClock().us(-60))])


@pytest.mark.asyncio
async def test_log_records_follow_the_history_rule(
    journal_writer: JournalWriter, tmp_path: Path
) -> None:
    """Five crash cycles counted, a clean stop, a restart with nothing written meanwhile: the
    records the restarted daemon reads again are history, not counted again (issue 15 §1: 30
    records became 18 after the restart, which Prometheus read as 18 new ones)."""
    first_start_marker(journal_writer)
    config = local_config(journal_writer.path.parent, tmp_path / "state", units=f'["{UNIT}"]')
    clock = LogClock()
    sums = CounterSums()
    async with running_daemon(config) as daemon:
        entries = [entry for n in range(5) for entry in crash_cycle(clock, n, 1 + 40 * n)]
        journal_writer.write_and_flush(entries)
        # the last crash settles with a line 40 s of log time later (a late line of its own)
        journal_writer.write_and_flush(
            [service_line(UNIT, invocation(4), 104, "INFO 11-29 10:01:00 [core.py:1] bye", clock.us(250))]
        )  # fmt: skip
        await settled(daemon, sums, crashes=5, records=21)
    async with running_daemon(config) as daemon:
        await daemon.wait_for(lambda s: current_phase(s, UNIT) == "crashed", what="state rebuilt")
        await asyncio.sleep(0.5)  # a few more scrapes: nothing may move
        for _ in range(3):
            await scrape_into(daemon, sums)
    records = sums.by("vllm_sentinel_unit_log_records_total", "level", unit=UNIT)
    assert records == {"info": 11, "error": 10}
    assert sums.total("vllm_sentinel_unit_starts_total", unit=UNIT) == 5
    assert sums.by("vllm_sentinel_unit_crashes_total", "cause", unit=UNIT) == {"cuda_oom": 5}
    assert sums.resets == 0  # the restarted daemon went on from its saved counters


@pytest.mark.asyncio
@pytest.mark.parametrize("spacing", [2.0, 8.0], ids=["2s-apart", "8s-apart"])
async def test_a_fast_crash_loop_then_a_restart_counts_each_start_and_crash_once(
    journal_writer: JournalWriter, tmp_path: Path, spacing: float
) -> None:
    """Five crash/restart cycles ``spacing`` seconds apart, a stop 3 s after the last crash
    (none of them settled yet), a restart at once: over both runs, 5 starts and 5 crashes
    (issue 15 §2: 8 starts and 3 crashes at 2 s, 6 and 4 at 8 s)."""
    first_start_marker(journal_writer)
    config = local_config(journal_writer.path.parent, tmp_path / "state", units=f'["{UNIT}"]')
    clock = LogClock()
    sums = CounterSums()
    async with running_daemon(config) as daemon:
        entries = [entry for n in range(5) for entry in crash_cycle(clock, n, 1 + spacing * n)]
        journal_writer.write_readable(entries)
        await daemon.wait_for(
            lambda s: value(s, "vllm_sentinel_unit_incarnation_info", invocation_id=invocation(4)) == 1
            and current_phase(s, UNIT) == "crashed",
            what="the fifth crash applied",
        )  # fmt: skip
        await scrape_into(daemon, sums)
    saved = (tmp_path / "state" / "llm-two.cursor").read_text()
    assert '"carried"' in saved  # crashes applied but not counted yet were saved
    async with running_daemon(config) as daemon:
        journal_writer.write_and_flush(
            [service_line(UNIT, invocation(4), 104, "INFO 11-29 10:01:00 [core.py:1] bye", clock.us(1 + spacing * 4 + 60))]
        )  # fmt: skip
        await settled(daemon, sums, crashes=5, records=21)
    assert sums.total("vllm_sentinel_unit_starts_total", unit=UNIT) == 5
    assert sums.by("vllm_sentinel_unit_crashes_total", "cause", unit=UNIT) == {"cuda_oom": 5}
    assert sums.by("vllm_sentinel_unit_log_records_total", "level", unit=UNIT) == {
        "info": 11,
        "error": 10,
    }


@pytest.mark.asyncio
async def test_late_lines_with_earlier_times_do_not_count_a_crash_again(
    journal_writer: JournalWriter, tmp_path: Path
) -> None:
    """The wrapper and the exit arrive first, the traceback lines after them with times
    slightly earlier (another process's clock, a buffered pipe); the crash is counted, the
    daemon stops and starts again: still counted once (issue 15 §3: counted again, which
    Prometheus reads as a reset when the restarted counter is lower)."""
    first_start_marker(journal_writer)
    state = tmp_path / "state"
    config = local_config(journal_writer.path.parent, state, units=f'["{UNIT}", "{OTHER}"]')
    async with running_daemon(config) as daemon:  # a first run: the cursor of another unit
        await daemon.wait_for(
            lambda s: value(s, "vllm_sentinel_collector_up", collector="journal") == 1, what="up"
        )
        old = to_realtime_us(datetime.now(UTC) - timedelta(seconds=600))  # read live: counted
        journal_writer.write_and_flush(
            [service_line(OTHER, "8" * 32, 78, "INFO 11-29 10:00:01 [x.py:1] x", old)]
        )
        await daemon.wait_for(lambda s: current_phase(s, OTHER) is not None, what="a cursor")
    clock = LogClock(ago=timedelta(seconds=120))  # in the past: the tick settles the crash
    sums = CounterSums()
    inv = invocation(0)
    traceback = [
        "ERROR 11-29 10:00:03 [core.py:1] Traceback (most recent call last):",
        'ERROR 11-29 10:00:03 [core.py:1]   File "core.py", line 1, in run',
        OOM,
    ]
    async with running_daemon(config) as daemon:
        journal_writer.write_and_flush(
            [
                *crash_cycle(clock, 1, 10),  # an earlier crash, in time order
                unit_started(UNIT, inv, clock.us(80)),
                service_line(UNIT, inv, 100, "ERROR 11-29 10:00:03 [core.py:1] EngineCore failed to start.", clock.us(85)),
                manager_line(UNIT, inv, EXITED, None, clock.us(85.2)),
                *(service_line(UNIT, inv, 100, text, clock.us(84.9)) for text in traceback),
            ]
        )  # fmt: skip
        await settled(daemon, sums, crashes=2, records=9)  # the other unit's line included
    async with running_daemon(config) as daemon:
        await daemon.wait_for(lambda s: current_phase(s, UNIT) == "crashed", what="rebuilt")
        await asyncio.sleep(1.5)  # ticks pass: a crash read as new would settle now
        for _ in range(3):
            await scrape_into(daemon, sums)
    assert sums.by("vllm_sentinel_unit_crashes_total", "cause", unit=UNIT) == {"cuda_oom": 2}
    assert sums.total("vllm_sentinel_unit_starts_total", unit=UNIT) == 2
    assert sums.total("vllm_sentinel_unit_log_records_total", unit=UNIT) == 8


@pytest.mark.asyncio
async def test_one_entry_is_one_record_whatever_its_message_holds(
    journal_writer: JournalWriter, tmp_path: Path
) -> None:
    """A 1 MiB binary MESSAGE (newlines, NUL, invalid UTF-8) is one record of level none, and
    a multi-line traceback logged in one entry is one record of its first line's level
    (issue 15 §8: the binary one counted as 4,052 records)."""
    first_start_marker(journal_writer)
    config = local_config(journal_writer.path.parent, tmp_path / "state", units=f'["{UNIT}"]')
    blob = bytes(range(256)) * 4096  # 1 MiB, 4,096 newlines among other control bytes
    clock = LogClock()
    inv = invocation(0)
    async with running_daemon(config) as daemon:
        journal_writer.write_and_flush(
            [
                unit_started(UNIT, inv, clock.us(1)),
                service_line(UNIT, inv, 100, blob, clock.us(2)),
                service_line(UNIT, inv, 100, "ERROR 11-29 10:00:03 [core.py:1] boom\nTraceback (most recent call last):\n  File \"x\", line 1\nValueError: x", clock.us(3)),
            ]
        )  # fmt: skip
        samples = await daemon.wait_for(
            lambda s: sum(v for (n, _), v in s.items() if n == "vllm_sentinel_unit_log_records_total") >= 2,
            what="two records",
        )  # fmt: skip
        await asyncio.sleep(0.5)
        samples = await daemon.metrics()
    levels = {
        dict(labels)["level"]: v
        for (n, labels), v in samples.items()
        if n == "vllm_sentinel_unit_log_records_total" and v
    }
    assert levels == {"none": 1, "error": 1}


# --- reloads -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "text", ["", "# only a comment\n", "[defaults]\nbackfill_max_records = 5\n"], ids=repr
)
@pytest.mark.asyncio
async def test_a_reload_without_hosts_is_refused(
    journal_writer: JournalWriter, tmp_path: Path, text: str
) -> None:
    """An empty or comments-only file (or one without ``[[hosts]]``) on SIGHUP: refused, the
    running hosts kept, ``config_reloads_total{result="failure"}`` counts it (issue 15 §4: every
    host was dropped for the default local one, and old crashes were logged again)."""
    first_start_marker(journal_writer)
    path = tmp_path / "sentinel.toml"
    path.write_text(
        local_config_text(journal_writer.path.parent, tmp_path / "state", units=f'["{UNIT}"]')
    )
    clock = LogClock()
    async with running_daemon(load_config(path), path) as daemon:
        journal_writer.write_and_flush(crash_cycle(clock, 0, 1))
        await daemon.wait_for(lambda s: current_phase(s, UNIT) == "crashed", what="crashed")
        kept = daemon.daemon.config
        path.write_text(text)
        with capture_logs() as logs:
            assert not await daemon.daemon.reload()
        (failed,) = [e for e in logs if e["event"] == "config_reload_failed"]
        assert "no [[hosts]] table" in failed["error"] and failed["log_level"] == "error"
        assert daemon.daemon.config is kept
        samples = await daemon.wait_for(
            lambda s: value(s, "vllm_sentinel_config_reloads_total", result="failure") == 1,
            what="the refused reload counted",
        )
        assert value(samples, "vllm_sentinel_config_reloads_total", result="success") == 0
        assert {dict(ls)["host"] for (n, ls) in samples if n == "vllm_sentinel_collector_up"} == {
            "llm-two"
        }
        path.write_text(
            local_config_text(journal_writer.path.parent, tmp_path / "state", units=f'["{UNIT}"]')
        )
        assert await daemon.daemon.reload()
        await daemon.wait_for(
            lambda s: value(s, "vllm_sentinel_config_reloads_total", result="success") == 1,
            what="the good reload counted",
        )


def test_check_config_warns_about_a_file_without_hosts(tmp_path: Path) -> None:
    """``check-config`` on a comments-only file: valid, with a warning that says what ``run``
    would watch and that a reload refuses it."""
    path = tmp_path / "empty.toml"
    path.write_text("# nothing yet\n")
    result = subprocess.run(
        [sys.executable, "-m", "vllm_sentinel", "check-config", str(path)],
        capture_output=True, text=True, check=False, timeout=60,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert "warning: no [[hosts]] table" in result.stdout
    assert "reload (SIGHUP) refuses such a file" in result.stdout


# --- the state directory -------------------------------------------------------------------


def _run(config: Path, *extra: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "vllm_sentinel", "run", "--config", str(config), *extra],
        capture_output=True, text=True, check=False, timeout=timeout,
        stdin=subprocess.DEVNULL,
    )  # fmt: skip


def test_an_unwritable_state_directory_refuses_to_start(tmp_path: Path) -> None:
    """A state directory that cannot be created: one line on stderr, exit status 2, and no
    directory used elsewhere (issue 15 §6: the daemon moved to ~/.local/state silently, and
    the next start did not find that cursor). A file in the way stops even root."""
    blocker = tmp_path / "not-a-directory"
    blocker.write_text("x")
    config = tmp_path / "sentinel.toml"
    config.write_text(
        local_config_text(tmp_path / "journal", blocker / "state", units=f'["{UNIT}"]')
    )
    home = tmp_path / "home"
    home.mkdir()
    result = subprocess.run(
        [sys.executable, "-m", "vllm_sentinel", "run", "--config", str(config)],
        capture_output=True, text=True, check=False, timeout=20, stdin=subprocess.DEVNULL,
        env={**os.environ, "HOME": str(home), "XDG_STATE_HOME": str(home / "state")},
    )  # fmt: skip
    assert result.returncode == 2
    errors = [line for line in result.stderr.splitlines() if line.startswith("vllm-sentinel:")]
    assert errors == [
        f"vllm-sentinel: state directory {blocker / 'state'}: cannot write there: not a "
        "directory (set defaults.state_directory to a writable directory)"
    ]
    assert not any(home.rglob("*.cursor"))


def _poll(
    port: int, predicate: object, timeout: float = 30
) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        samples = scrape(f"http://127.0.0.1:{port}/metrics")
        if samples is not None and callable(predicate) and predicate(samples):
            return samples
        time.sleep(0.1)
    raise AssertionError("timed out")


def test_saving_failures_are_counted_logged_sparingly_and_fail_the_exit(
    journal_writer: JournalWriter, tmp_path: Path
) -> None:
    """The state directory becomes unusable while running: every failed write is counted
    (``cursor_save_failures_total``), the last good save stays in
    ``cursor_saved_timestamp_seconds``, ``cursor_save_failed`` is logged once (not every
    second), and the daemon exits 1 when its final save fails (issue 15 §6: exit 0)."""
    require_binary("journalctl")
    first_start_marker(journal_writer)
    state = tmp_path / "state"
    port = free_port()
    config = tmp_path / "sentinel.toml"
    config.write_text(
        local_config_text(journal_writer.path.parent, state, units=f'["{UNIT}"]', port=port)
    )
    with daemon_process(config) as process:
        samples = _poll(
            port, lambda s: value(s, "vllm_sentinel_cursor_saved_timestamp_seconds") is not None
        )
        saved_at = value(samples, "vllm_sentinel_cursor_saved_timestamp_seconds")
        assert value(samples, "vllm_sentinel_cursor_save_failures_total") == 0
        # the directory is replaced by a file: every write fails from now on (root included)
        for child in state.iterdir():
            child.unlink()
        state.rmdir()
        state.write_text("in the way")
        clock = LogClock()
        for n in range(4):  # something to save, several flush intervals (0.2 s) apart
            journal_writer.write_and_flush(crash_cycle(clock, n, 1 + 40 * n)[:2])
            time.sleep(0.4)
        samples = _poll(
            port, lambda s: (value(s, "vllm_sentinel_cursor_save_failures_total") or 0) >= 3
        )
        assert value(samples, "vllm_sentinel_cursor_saved_timestamp_seconds") == saved_at
        process.send_signal(signal.SIGTERM)
        code = process.wait(30)
    names = [event["event"] for event in process.events]
    assert names.count("cursor_save_failed") == 1
    assert "daemon_stopped_unsaved" in names
    assert code == 1
