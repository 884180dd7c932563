"""The scenario units of the real-journald tier, and what each driver does to its unit.

Every scenario is one systemd service (two for ``pair``) running the vLLM stand-in
(``tests/support/vllm_standin.py``) with a plan per start, and a driver thread that acts on it
as an operator or the kernel would (``systemctl restart``, ``systemctl stop``, ``kill -9`` of a
worker) once the unit got there. All scenarios start together (``start_all``) and their drivers
run concurrently; each test then waits for its own unit's end state.
"""

from __future__ import annotations

import re
import sys
import threading
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from tests.support.make_incident import WORKER_TRACEBACK_LATE

if TYPE_CHECKING:
    from tests.journald.conftest import Tier

__all__ = ["SCENARIOS", "Driver", "Scenario", "start_all", "unit_text"]

STARTED = "39f53479d3a045ac8e11786248231fbf"  # systemd's catalog (SD_MESSAGE_UNIT_STARTED)
MAIN_EXITED = "98e322203f7a4ed290d09fe03c09fe15"
RESTART_SCHEDULED = "5eb03494b6584870a536b337290809b3"
JOURNAL_DROPPED = "a596d6fe7bfa4994828e72309e95d61e"
ROOT_CAUSE = WORKER_TRACEBACK_LATE[-1]
CHECKOUT = "/mnt/checkout"
# The stand-in runs on the tests' own interpreter (it needs orjson): its venv and the Python it
# was made from are bound into the root at their own paths (``INTERPRETER_BINDS``), since the
# root's /tmp is empty and a checkout (CI's) may live there.
STANDIN_PYTHON = Path(sys.prefix).resolve() / "bin" / Path(sys.executable).name
INTERPRETER_BINDS = {
    str(path): path
    for path in sorted({Path(sys.prefix).resolve(), Path(sys.base_prefix).resolve()})
}


@dataclass(frozen=True)
class Scenario:
    """One unit: its name, the stand-in's plan and arguments, and its [Unit]/[Service] lines."""

    unit: str
    plan: str
    kill_mode: str = "mixed"
    service: tuple[str, ...] = ()
    unit_section: tuple[str, ...] = ()
    args: tuple[str, ...] = ()

    @property
    def name(self) -> str:
        return self.unit.removesuffix(".service")


SCENARIOS: tuple[Scenario, ...] = (
    # crash (flashinfer-cubin mismatch), the late traceback after the restart, fix, restart, ready
    Scenario("vllm-incident.service", "flashinfer,hang,ready", kill_mode="process"),
    # OOM at every start: five starts (systemd's default burst), then the start limit
    Scenario(
        "vllm-crashloop.service",
        "oom",
        service=("RestartSec=0.5",),
        unit_section=("StartLimitIntervalSec=300", "StartLimitBurst=5"),
    ),
    # `systemctl stop` while loading weights
    Scenario("vllm-stop.service", "hang"),
    # journald drops most of a burst of progress bars (its per-unit rate limit)
    Scenario(
        "vllm-burst.service",
        "burst",
        service=("LogRateLimitIntervalSec=2s", "LogRateLimitBurst=50"),
        args=("--burst", "3000", "--burst-pause", "2.5"),
    ),
    # ready, then a worker is SIGKILLed (what the kernel's OOM killer does), restart, ready
    Scenario("vllm-oomkill.service", "ready"),
    # two units starting together; one is restarted by hand
    Scenario("vllm-pair-a.service", "ready", kill_mode="process"),
    Scenario("vllm-pair-b.service", "ready"),
)
BY_NAME = {scenario.name: scenario for scenario in SCENARIOS}


def unit_text(scenario: Scenario) -> str:
    """The unit file of ``scenario``: ``Restart=on-failure`` and its ``KillMode``."""
    command = [
        str(STANDIN_PYTHON), "-m", "tests.support.vllm_standin", "serve",
        "--plan", scenario.plan, "--state", f"/var/lib/vllm-standin/{scenario.name}",
        *scenario.args,
    ]  # fmt: skip
    lines = [
        "[Unit]",
        f"Description=vLLM stand-in {scenario.name}",
        *scenario.unit_section,
        "",
        "[Service]",
        "Type=exec",
        f"ExecStart={' '.join(command)}",
        f"WorkingDirectory={CHECKOUT}",
        f"Environment=PYTHONPATH={CHECKOUT} PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1",
        "Restart=on-failure",
        "RestartSec=1",
        f"KillMode={scenario.kill_mode}",
        "TimeoutStopSec=10",
        *scenario.service,
    ]
    return "\n".join(lines) + "\n"


@dataclass
class Driver:
    """A scenario's driver thread; ``error`` is its traceback if it failed."""

    name: str
    thread: threading.Thread
    error: str | None = None
    done: threading.Event = field(default_factory=threading.Event)

    def join(self, timeout: float) -> None:
        self.thread.join(timeout)

    def check(self, timeout: float = 120.0) -> None:
        """Wait for the driver and fail with its error, if any."""
        assert self.done.wait(timeout), f"driver {self.name} still running after {timeout} s"
        assert self.error is None, f"driver {self.name} failed:\n{self.error}"


def _phase(tier: Tier, unit: str) -> str | None:
    entry = tier.unit(unit)
    if entry is None or not entry["incarnations"]:
        return None
    return str(entry["incarnations"][-1]["phases"][-1]["phase"])


def _messages(tier: Tier, unit: str) -> list[str]:
    return [message(entry) for entry in tier.journal(unit)]


def message(entry: dict[str, object]) -> str:
    """An entry's ``MESSAGE`` as text (journalctl gives a byte array for ANSI-coloured lines)."""
    value = entry.get("MESSAGE")
    if isinstance(value, list):
        return bytes(value).decode("utf-8", errors="replace")
    return str(value)


def _incident(tier: Tier) -> None:
    unit = "vllm-incident.service"
    # the left-over worker's root cause arrives after systemd started the unit again
    tier.wait(
        lambda: (
            len(tier.systemd_messages(unit, STARTED)) == 2
            and any(ROOT_CAUSE in text for text in _messages(tier, unit))
        ),
        "the late traceback after the restart",
    )
    tier.wait(lambda: _phase(tier, unit) == "loading_weights", "the second start loading")
    tier.root.run(["touch", "/var/lib/vllm-standin/vllm-incident/fixed"])  # pip install …
    tier.notes["incident_restart"] = tier.systemctl("restart", unit)


def _stop(tier: Tier) -> None:
    unit = "vllm-stop.service"
    tier.wait(lambda: _phase(tier, unit) == "loading_weights", "vllm-stop loading weights")
    tier.systemctl("stop", unit)


def _oomkill(tier: Tier) -> None:
    unit = "vllm-oomkill.service"
    tier.wait(lambda: _phase(tier, unit) == "ready", "vllm-oomkill ready")
    pids = [
        int(found[1])
        for text in _messages(tier, unit)
        if (found := re.search(r"\(Worker_TP1 pid=(\d+)\)", text))
    ]
    assert pids, "no Worker_TP1 line"
    tier.notes["killed_pid"] = pids[-1]
    result = tier.root.run(["kill", "-KILL", str(pids[-1])])
    assert result.returncode == 0, result.stderr.decode()


def _pair(tier: Tier) -> None:
    for unit in ("vllm-pair-a.service", "vllm-pair-b.service"):
        tier.wait(lambda unit=unit: _phase(tier, unit) == "ready", f"{unit} ready")  # type: ignore[misc]
    tier.systemctl("restart", "vllm-pair-a.service")


_DRIVERS: dict[str, Callable[[Tier], None]] = {
    "incident": _incident,
    "stop": _stop,
    "oomkill": _oomkill,
    "pair": _pair,
}


def start_all(tier: Tier) -> dict[str, Driver]:
    """Start every scenario unit at once and a driver thread for each that has one."""
    tier.systemctl("daemon-reload")
    tier.systemctl("start", "--no-block", *(scenario.unit for scenario in SCENARIOS))
    drivers: dict[str, Driver] = {}
    for name, act in _DRIVERS.items():

        def run(act: Callable[[Tier], None] = act, name: str = name) -> None:
            driver = drivers[name]
            try:
                act(tier)
            except BaseException:  # reported by the scenario's test
                driver.error = traceback.format_exc()
            finally:
                driver.done.set()

        drivers[name] = Driver(name, threading.Thread(target=run, name=f"driver-{name}"))
    for driver in drivers.values():
        driver.thread.start()
    return drivers
