"""Chaos: the real daemon through random, seeded schedules of failures; counters equal the truth.

One ``vllm-sentinel run`` process (restarted as the schedules say), one journal directory
written live by ``systemd-journal-remote``, one real SSH server on 127.0.0.1 relaying the real
``journalctl``. Each schedule (``random.Random(seed)``) gets two hosts of its own — one local,
one over SSH — with three units, switched to by a config reload (SIGHUP), and then, in random
order:

* unit steps: crash loops at various speeds (causes ``cuda_oom``, ``dependency_mismatch``,
  ``kv_cache_insufficient``, ``killed``), half of them with the traceback written after
  systemd's exit and stamped earlier than the wrapper (late and out of order); starts to
  ready with traffic (every level, raw lines, multi-line entries); clean stops;
* daemon SIGTERM (exit status 0 asserted) and SIGKILL — at a random moment, in the middle of
  a cursor write (a temporary file of the state directory seen; ``fsync`` slowed), or during
  the backfill of the restart (right after ``journal_backfill_started``) — each followed by
  random downtime in which the units go on writing;
* SSH sessions killed (TCP reset, no SSH disconnect);
* config reloads: the same file, a changed SSH host (restarted), an invalid file, an empty one.

``/metrics`` is scraped at random moments, as Prometheus would, and ``CounterSums`` adds up
each counter the way ``increase()`` does (a drop counts as a reset). At the end of every
schedule, once one line a minute of log time later has settled every crash, the summed
``starts_total``, ``crashes_total`` by cause and ``log_records_total`` by level of every unit
must equal the truth exactly, and its phase and last crash cause must be the truth's.

``CHAOS_SCHEDULES`` (default 200 in CI, 20 elsewhere) and ``CHAOS_BASE_SEED`` choose the
seeds; ``CHAOS_SEED=N`` runs schedule N alone. A failing seed is printed with that command.
Figures (schedules, restarts, kills and where they landed, drops, reloads, records) are
printed at the end (``-s``) and written to ``CHAOS_REPORT`` when set.
"""

from __future__ import annotations

import collections
import os
import random
import signal
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson
import pytest

from tests.chaos.harness import (
    CAUSES,
    LogClock,
    SentinelProcess,
    UnitScript,
    UnitTruth,
)
from tests.conftest import require_binary
from tests.support.daemon import CounterSums, Samples, free_port
from tests.support.journal_writer import JOURNAL_REMOTE, JournalWriter, service_line
from tests.support.ssh_server import SshServerThread
from vllm_sentinel.engine.decode.journal_json import JournalJsonDecoder
from vllm_sentinel.engine.tracker import UnitTracker

pytestmark = [pytest.mark.integration, pytest.mark.slow]

FSYNC_DELAY_SECONDS = 0.02
CONVERGE_SECONDS = 45.0


def _seeds() -> list[int]:
    alone = os.environ.get("CHAOS_SEED")
    if alone:
        return [int(alone)]
    default = "200" if os.environ.get("CI") == "true" else "20"
    count = int(os.environ.get("CHAOS_SCHEDULES", default))
    base = int(os.environ.get("CHAOS_BASE_SEED", "1"))
    return list(range(base, base + count))


@dataclass
class Environment:
    """What every schedule shares: the journal, the SSH server, the daemon and its files."""

    directory: Path
    journal: JournalWriter
    ssh: SshServerThread
    daemon: SentinelProcess
    config: Path
    sums: CounterSums = field(default_factory=CounterSums)
    stats: collections.Counter[str] = field(default_factory=collections.Counter)
    timing: collections.Counter[str] = field(default_factory=collections.Counter)

    def config_text(self, seed: int, units: dict[str, list[str]], variant: int = 0) -> str:
        local, remote = (f"l{seed}", f"r{seed}")
        server = self.ssh.server
        assert server is not None
        journal = f'journalctl_args = ["--directory={self.journal.path.parent}"]'
        return f"""
[exporter]
listen = "127.0.0.1:{self.daemon.port}"
[defaults]
state_directory = "{self.daemon.state}"
cursor_flush_interval_seconds = 0.1
gpu_poll_interval_seconds = 1.0

[[hosts]]
name = "{local}"
local = true
gpu = "none"
units = {orjson.dumps(units[local]).decode()}
{journal}

[[hosts]]
name = "{remote}"
address = "127.0.0.1"
port = {server.port}
user = "sentinel"
client_keys = ["{server.client_key_path}"]
known_hosts = "{server.known_hosts_path}"
connect_timeout_seconds = {5 + variant}
gpu = "none"
units = {orjson.dumps(units[remote]).decode()}
{journal}
"""


@pytest.fixture(scope="module")
def environment(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Environment]:
    require_binary("journalctl")
    require_binary(JOURNAL_REMOTE)
    directory = tmp_path_factory.mktemp("chaos")
    (directory / "journal").mkdir()
    journal = JournalWriter(directory / "journal", "chaos")
    journal.write_and_flush(
        [service_line("filler.service", "f" * 32, 9, "begin", to_realtime_us_now())]
    )
    journal.wait_until_readable(1)
    ssh = SshServerThread(directory / "ssh")
    daemon = SentinelProcess(
        directory / "sentinel.toml", directory / "state", free_port(), FSYNC_DELAY_SECONDS
    )
    environment = Environment(directory, journal, ssh, daemon, directory / "sentinel.toml")
    try:
        yield environment
    finally:
        daemon.kill()
        ssh.close()
        journal.close()
        report = os.environ.get("CHAOS_REPORT")
        summary = dict(sorted(environment.stats.items()))
        print(f"\nchaos: {summary}")
        print(f"chaos seconds: { {k: round(v, 1) for k, v in environment.timing.items()} }")
        if report:
            Path(report).write_text(orjson.dumps(summary, option=orjson.OPT_INDENT_2).decode())


def to_realtime_us_now() -> int:
    return time.time_ns() // 1000


class Schedule:
    """One seeded schedule against the shared environment."""

    def __init__(self, environment: Environment, seed: int) -> None:
        self.env = environment
        self.seed = seed
        self.rng = random.Random(seed)
        self.clock = LogClock(self.rng)
        self.local, self.remote = f"l{seed}", f"r{seed}"
        self.units = {
            self.local: [f"vllm-s{seed}-a.service", f"vllm-s{seed}-b.service"],
            self.remote: [f"vllm-s{seed}-c.service"],
        }
        self.scripts: list[UnitScript] = []
        for host, units in self.units.items():
            for unit in units:
                ident = f"{seed:012x}{len(self.scripts):04x}"
                self.scripts.append(UnitScript(UnitTruth(host, unit), self.rng, self.clock, ident))
        self.variant = 0
        self.log: list[str] = []

    # --- the daemon ----------------------------------------------------------------------

    @property
    def daemon(self) -> SentinelProcess:
        return self.env.daemon

    def _write_config(self) -> None:
        self.env.config.write_text(self.env.config_text(self.seed, self.units, self.variant))

    def _start(self) -> None:
        began = time.monotonic()
        self.daemon.start()
        self.daemon.wait_serving({self.local, self.remote})
        self.env.timing["daemon_start"] += time.monotonic() - began

    def begin(self) -> None:
        """Switch the daemon to this schedule's hosts (a reload), or start it with them."""
        began = time.monotonic()
        self._write_config()
        if self.daemon.alive:
            self.daemon.clear_events()
            self.daemon.signal(signal.SIGHUP)
            self._expect("config_reloaded")
            self.env.stats["reloads_to_next_schedule"] += 1
            self.daemon.wait_serving({self.local, self.remote})
        else:
            self._start()
        self.clock.catch_up()
        self.env.timing["begin"] += time.monotonic() - began

    def _expect(self, event: str, timeout: float = 30) -> dict[str, Any]:
        found = self.daemon.wait_event(lambda e: e.get("event") == event, timeout)
        assert found is not None, f"no {event} from the daemon"
        return found

    def scrape(self) -> Samples | None:
        samples = self.daemon.scrape()
        if samples is not None:
            self.env.sums.add(samples)
            self.env.stats["scrapes"] += 1
        return samples

    # --- steps ---------------------------------------------------------------------------

    def write(self, entries: list[dict[str, str | bytes | int]]) -> None:
        if entries:
            self.env.journal.write_and_flush(entries)
            self.env.stats["records_written"] += len(entries)

    def unit_step(self) -> None:
        script = self.rng.choice(self.scripts)
        self.clock.advance(self.rng.choice((0.5, 2, 5, 10, 40)))  # loops fast and slow
        self.write(script.step())
        self.log.append(f"unit {script.truth.unit} -> {script.truth.phase}")

    def downtime(self) -> None:
        for _ in range(self.rng.randint(0, 3)):
            self.unit_step()
        time.sleep(self.rng.uniform(0, 0.3))

    def sigterm(self) -> None:
        self.daemon.signal(signal.SIGTERM)
        code = self.daemon.wait()
        assert code == 0, f"SIGTERM: exit status {code}: {self.daemon.errors[-3:]}"
        self.env.stats["sigterm"] += 1
        self.downtime()
        self._start()

    def sigkill(self) -> None:
        mode = self.rng.choices(("random", "cursor_write", "backfill"), weights=(4, 4, 2))[0]
        self.log.append(f"sigkill {mode}")
        if mode == "cursor_write":
            self.unit_step()  # something to save
            hit = self._kill_in_a_cursor_write()
            self.env.stats["sigkill_in_cursor_write" if hit else "sigkill_cursor_write_missed"] += 1
        else:
            time.sleep(self.rng.uniform(0, 0.4))
            self.daemon.kill()
            self.env.stats["sigkill_random"] += 1
        self.downtime()
        if mode == "backfill":
            for _ in range(self.rng.randint(2, 6)):
                self.unit_step()  # a backfill with something in it
            self.daemon.start()
            started = self.daemon.wait_event(
                lambda e: e.get("event") == "journal_backfill_started", 30
            )
            assert started is not None, "no backfill after a restart"
            self.daemon.kill()
            finished = [
                e
                for e in self.daemon.events
                if e.get("event") == "journal_backfill_finished"
                and e.get("pid") == self.daemon.process.pid  # type: ignore[union-attr]
            ]
            self.env.stats[
                "sigkill_in_backfill" if len(finished) < 2 else "sigkill_after_backfill"
            ] += 1
            self.downtime()
        self._start()

    def _kill_in_a_cursor_write(self) -> bool:
        """SIGKILL while a temporary file of the state directory exists (a write in progress)."""
        deadline = time.monotonic() + 2.0
        state = self.daemon.state
        while time.monotonic() < deadline:
            if any(state.glob(".*.tmp")):
                self.daemon.kill()
                return True
            time.sleep(0.0005)
        self.daemon.kill()
        return False

    def ssh_kill(self) -> None:
        dropped = self.env.ssh.drop_all_connections()
        self.env.stats["ssh_sessions_killed"] += dropped
        self.log.append(f"ssh kill {dropped}")

    def reload(self) -> None:
        kind = self.rng.choice(("same", "changed", "invalid", "empty"))
        self.log.append(f"reload {kind}")
        self.daemon.clear_events()
        if kind == "same":
            self._write_config()
        elif kind == "changed":
            self.variant = 1 - self.variant  # the SSH host's settings: it is restarted
            self._write_config()
        elif kind == "invalid":
            self.env.config.write_text("[exporter\n")
        else:
            self.env.config.write_text("# emptied by mistake\n")
        self.daemon.signal(signal.SIGHUP)
        self._expect("config_reloaded" if kind in ("same", "changed") else "config_reload_failed")
        self.env.stats[f"reload_{kind}"] += 1
        self._write_config()  # what the next start reads

    def run(self) -> None:
        self.daemon.seed = self.seed
        self.begin()
        for _ in range(self.rng.randint(3, 8)):
            action = self.rng.choices(
                ("unit", "scrape", "sigterm", "sigkill", "ssh", "reload"),
                weights=(6, 2, 0.35, 0.6, 0.7, 0.7),
            )[0]
            if action != "unit":
                self.log.append(action)
            if action == "unit":
                self.unit_step()
            elif action == "scrape":
                self.scrape()
            elif action == "sigterm":
                self.sigterm()
            elif action == "sigkill":
                self.sigkill()
            elif action == "ssh":
                self.ssh_kill()
            else:
                self.reload()
            if self.rng.random() < 0.4:
                self.scrape()
        for script in self.scripts:
            self.write(script.settle())
        if not self.daemon.alive:
            self._start()
        self.converge()
        self.env.stats["schedules"] += 1
        self.env.stats["restarts"] = self.daemon.starts - 1

    # --- the invariant -------------------------------------------------------------------

    def _differences(self, samples: Samples) -> list[str]:
        sums = self.env.sums
        wrong: list[str] = []
        for script in self.scripts:
            truth = script.truth
            labels = {"host": truth.host, "unit": truth.unit}
            starts = sums.total("vllm_sentinel_unit_starts_total", **labels)
            crashes = sums.by("vllm_sentinel_unit_crashes_total", "cause", **labels)
            records = sums.by("vllm_sentinel_unit_log_records_total", "level", **labels)
            if starts != truth.starts:
                wrong.append(f"{truth.unit}: starts {starts} != {truth.starts}")
            if crashes != {cause: float(n) for cause, n in truth.crashes.items() if n}:
                wrong.append(f"{truth.unit}: crashes {crashes} != {dict(truth.crashes)}")
            if records != {level: float(n) for level, n in truth.records.items() if n}:
                wrong.append(f"{truth.unit}: records {records} != {dict(truth.records)}")
            phase = _one_hot(samples, "vllm_sentinel_unit_phase", "phase", labels)
            if phase != truth.phase:
                wrong.append(f"{truth.unit}: phase {phase} != {truth.phase}")
            last = _one_hot(samples, "vllm_sentinel_unit_last_crash_info", "cause", labels)
            if last != truth.last_crash:
                wrong.append(f"{truth.unit}: last crash {last} != {truth.last_crash}")
        return wrong

    def _replayed(self) -> list[str]:
        directory = self.env.journal.path.parent
        return [_replay(directory, script.truth.unit) for script in self.scripts]

    def converge(self) -> None:
        """Scrape until the sums equal the truth (or fail with what differs)."""
        began = time.monotonic()
        deadline = began + CONVERGE_SECONDS
        wrong: list[str] = ["no scrape"]
        nudge = 0.0
        while time.monotonic() < deadline:
            samples = self.scrape()
            if samples is not None:
                wrong = self._differences(samples)
                if not wrong:
                    for script in self.scripts:
                        truth = script.truth
                        self.env.stats["starts"] += truth.starts
                        self.env.stats["crashes"] += sum(truth.crashes.values())
                        self.env.stats["records_counted"] += sum(truth.records.values())
                    self.env.timing["converge"] += time.monotonic() - began
                    return
            if time.monotonic() > nudge:  # journal-remote may hold the tail of a burst
                self.env.journal.write_and_flush(
                    [service_line("filler.service", "f" * 32, 9, "nudge", to_realtime_us_now())]
                )
                nudge = time.monotonic() + 1.0
            time.sleep(0.05)
        raise AssertionError(
            f"chaos seed {self.seed} failed (re-run alone: CHAOS_SEED={self.seed} "
            f"python -m pytest tests/chaos -s):\n  "
            + "\n  ".join(wrong)
            + "\n  one tracker fed each unit's whole journal (no restart) counts: "
            + "; ".join(self._replayed())
            + "\n  steps: "
            + "; ".join(self.log)
            + f"\n  daemon errors: {self.daemon.errors[-5:]}"
        )


def _replay(directory: Path, unit: str) -> str:
    """What one ``UnitTracker`` makes of a unit's whole journal, read in one go."""
    output = subprocess.run(
        ["journalctl", f"--directory={directory}", f"--unit={unit}", "-o", "json", "-a"],
        capture_output=True, check=True, timeout=60,
    ).stdout  # fmt: skip
    decoder = JournalJsonDecoder("replay")
    tracker = UnitTracker(unit, "replay")
    tracker.feed_many([*decoder.feed(output), *decoder.flush()])
    tracker.finish()
    snapshot = tracker.snapshot()
    crashes = {cause.value: n for cause, n in snapshot.crashes_total.items() if n}
    return f"{unit}: starts {snapshot.starts_total} crashes {crashes}"


def _one_hot(samples: Samples, name: str, label: str, labels: dict[str, str]) -> str | None:
    wanted = set(labels.items())
    for (metric, series), value in samples.items():
        if metric == name and wanted <= series and value == 1:
            return dict(series)[label]
    return None


@pytest.mark.timeout(3600)
def test_counters_equal_the_truth_through_chaos(environment: Environment) -> None:
    """Every schedule: summed counters of every unit equal what its journal holds, exactly."""
    seeds = _seeds()
    started = time.monotonic()
    for seed in seeds:
        Schedule(environment, seed).run()
    environment.stats["seconds"] = int(time.monotonic() - started)
    assert environment.stats["schedules"] == len(seeds)
    unexpected = [
        e for e in environment.daemon.errors if e.get("event") not in ("config_reload_failed",)
    ]
    assert unexpected == [], [
        (e.get("seed"), e.get("event"), str(e.get("text", e.get("error", "")))[:200])
        for e in unexpected[:20]
    ]
    assert not list(environment.daemon.state.glob(".*.tmp")) or environment.daemon.alive
    assert CAUSES  # every cause is drawn from the table the truth uses
