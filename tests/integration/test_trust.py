"""Trust boundaries against real parts: what other processes write into the journal.

A local user can write any field but journald's own (``_PID``, ``_UID``, ``_SYSTEMD_UNIT`` …:
systemd.journal-fields(7), "trusted fields") with ``logger --journald``; the daemon must take
unit names only from journald's fields and from PID 1's ``UNIT=`` (systemd's word).
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.daemon import (
    current_phase,
    local_config,
    local_config_text,
    running_daemon,
    value,
)
from tests.support.journal_writer import JournalWriter, LogClock, service_line, unit_started
from vllm_sentinel.sources.journal import MAX_UNIT_FILTERS

pytestmark = [pytest.mark.integration, pytest.mark.asyncio]

UNIT = "vllm-kimi-k25.service"
A = "1" * 32
LOADING = "INFO 11-29 10:00:21 [gpu_model_runner.py:1] Starting to load model m..."


def _forged(unit_field: str, at: int) -> dict[str, str | bytes | int]:
    """A line of another user's process (cron's job, uid 1000) that names a unit in ``UNIT=``,
    as ``logger --journald`` writes it."""
    return service_line(
        "cron.service",
        "2" * 32,
        4242,
        "hello",
        at,
        "logger",
        extra={"UNIT": unit_field, "_UID": 1000},
    )


async def test_forged_unit_fields_neither_blind_the_host_nor_add_units(
    journal_writer: JournalWriter, tmp_path: Path
) -> None:
    """``UNIT=vllm-[xy].service`` and 200 ``UNIT=vllm-evil-N.service`` from a user's process:
    the real unit is read and followed, no forged unit gets a series, the collector is up."""
    clock = LogClock()
    forged = [_forged("vllm-[xy].service", clock.us(0))]
    forged += [_forged(f"vllm-evil-{n}.service", clock.us(0)) for n in range(200)]
    journal_writer.write_readable(
        [
            *forged,
            unit_started(UNIT, A, clock.us(1)),
            service_line(UNIT, A, 7, LOADING, clock.us(2)),
        ]
    )
    config = local_config(journal_writer.path.parent, tmp_path / "state")
    async with running_daemon(config) as daemon:
        samples = await daemon.wait_for(
            lambda s: (
                current_phase(s, UNIT) == "loading_weights"
                and value(s, "vllm_sentinel_collector_up", collector="journal") == 1
            ),
            what="the real unit read despite forged UNIT= fields",
        )
        units = {dict(labels).get("unit") for (_, labels) in samples} - {None}
        assert units == {UNIT}
        journal_writer.write_and_flush(
            [
                service_line(
                    UNIT,
                    A,
                    7,
                    "INFO 11-29 10:00:50 [gpu_model_runner.py:1] Model loading took 9.38 GiB "
                    "memory and 14.1 seconds",
                    clock.us(3),
                )
            ]
        )
        await daemon.wait_for(
            lambda s: value(s, "vllm_sentinel_unit_model_weights_bytes", unit=UNIT) is not None,
            what="followed",
        )
        # never down since it came up: no backfill failed and was retried
        samples = await daemon.metrics()
        assert value(samples, "vllm_sentinel_collector_reconnects_total", collector="journal") == 0
        assert value(samples, "vllm_sentinel_collector_up", collector="journal") == 1


async def test_a_second_daemon_on_the_same_state_directory_is_refused(
    journal_writer: JournalWriter, tmp_path: Path
) -> None:
    """The real ``run`` command against a state directory a running daemon holds: one line on
    stderr naming the directory and the holder's PID, exit 2; the first keeps the lock."""
    clock = LogClock()
    journal_writer.write_readable([unit_started(UNIT, A, clock.us(0))])
    state = tmp_path / "state"
    config_file = tmp_path / "second.toml"
    config_file.write_text(local_config_text(journal_writer.path.parent, state))
    async with running_daemon(local_config(journal_writer.path.parent, state)) as daemon:
        await daemon.wait_for(lambda s: current_phase(s, UNIT) == "starting", what="first up")
        second = await asyncio.to_thread(
            subprocess.run,
            [sys.executable, "-m", "vllm_sentinel", "run", "--config", str(config_file)],
            capture_output=True,
            timeout=60,
            check=False,
        )
        holder = (state / "lock").read_text().strip()
    assert second.returncode == 2
    lines = second.stderr.decode().strip().splitlines()
    assert len(lines) == 1
    assert (
        f"the state directory {state} is in use by another vllm-sentinel (pid {os.getpid()})"
        in lines[0]
    )
    assert holder == str(os.getpid())  # the first daemon still holds it


async def test_many_units_are_backfilled_without_unit_filters(
    journal_writer: JournalWriter, tmp_path: Path
) -> None:
    """40 units (over ``MAX_UNIT_FILTERS``): the backfill reads the window unfiltered and every
    unit's phase is right at the first scrape; an unwatched unit's lines are not counted."""
    clock = LogClock()
    names = [f"vllm-m{n}.service" for n in range(40)]
    entries = []
    for n, name in enumerate(names):
        invocation = f"{n + 1:032x}"
        entries += [
            unit_started(name, invocation, clock.us(0)),
            service_line(name, invocation, 7, LOADING, clock.us(1)),
        ]
    entries.append(service_line("cron.service", "3" * 32, 9, LOADING, clock.us(1)))
    journal_writer.write_readable(entries)
    assert len(names) > MAX_UNIT_FILTERS
    config = local_config(journal_writer.path.parent, tmp_path / "state")
    async with running_daemon(config) as daemon:
        samples = await daemon.wait_for(
            lambda s: all(current_phase(s, name) == "loading_weights" for name in names),
            what="every unit backfilled",
        )
    units = {dict(labels).get("unit") for (_, labels) in samples} - {None}
    assert units == set(names)
