"""Real systemd units, real journald, the installed sentinel, Prometheus and Alertmanager.

Every scenario of ``tests/journald/scenarios.py`` runs as a service of the booted root (systemd
252 as PID 1, its journald), played by the multi-process vLLM stand-in; the sentinel runs as
the installed, hardened service and follows that journal. Each test checks the sentinel's
counters, phases, ``/status``, ``/units`` and the alerts Alertmanager delivered against
systemd's own account: ``systemctl show`` (``NRestarts``, ``Result``, ``ActiveState``,
``InvocationID``) and PID 1's entries in the journal (``Started``, ``Main process exited``).

The scenarios run concurrently (started by the module's ``tier`` fixture); a test waits for its
own unit's end state. Crashes are counted ``crash_settle_seconds`` after the exit (5 s here, 30 s
by default), which bounds the tier's wall time (docs/reliability.md).
"""

from __future__ import annotations

import re
from typing import Any

import pytest

from tests.journald.conftest import Tier
from tests.journald.scenarios import (
    JOURNAL_DROPPED,
    MAIN_EXITED,
    RESTART_SCHEDULED,
    ROOT_CAUSE,
    STARTED,
    message,
)

# on the worker that builds the session's wheelhouse (``built_package``) under pytest-xdist, with
# the other booted-root tests: one wheelhouse, one booted root at a time
pytestmark = [pytest.mark.integration, pytest.mark.xdist_group("built_package")]

SETTLE = 120.0  # seconds to wait for a crash to be counted (5 s window, busy CI machine)


def _current(tier: Tier, unit: str) -> dict[str, Any]:
    entry = tier.unit(unit)
    assert entry is not None, f"{unit} not in /status"
    return entry


def _settled(tier: Tier, unit: str, crashes: int) -> dict[str, Any] | None:
    """The unit's /status entry once ``crashes`` crashes are counted and none is settling."""
    entry = tier.unit(unit)
    if entry is None or entry["crashes_settling"] or sum(entry["crashes_total"].values()) < crashes:
        return None
    return entry


def _phase(entry: dict[str, Any]) -> str:
    return str(entry["incarnations"][-1]["phases"][-1]["phase"])


def _exits(tier: Tier, unit: str) -> list[str]:
    """systemd's ``Main process exited`` messages about ``unit``, in order."""
    return [message(entry) for entry in tier.systemd_messages(unit, MAIN_EXITED)]


def _started(tier: Tier, unit: str) -> list[str]:
    """The invocation ids of systemd's ``Started`` entries about ``unit``, in order."""
    return [str(entry["INVOCATION_ID"]) for entry in tier.systemd_messages(unit, STARTED)]


def _fired(tier: Tier, alertname: str, unit: str, **labels: str) -> bool:
    return any(
        alert["labels"].get("alertname") == alertname
        and alert["labels"].get("unit") == unit
        and all(alert["labels"].get(key) == value for key, value in labels.items())
        and alert["status"] == "firing"
        for alert in tier.webhook.alerts()
    )


def test_systemd_writes_its_own_messages_about_units_to_the_journal(tier: Tier) -> None:
    """PID 1 logs to journald (``--log-target=journal``), as on a host: a restarted unit's
    journal has ``Started``, ``Main process exited`` and ``Scheduled restart job`` from PID 1,
    with the unit's ``UNIT=`` and ``INVOCATION_ID=``."""
    unit = "vllm-crashloop.service"
    tier.wait(lambda: tier.systemd_messages(unit, RESTART_SCHEDULED), "a scheduled restart")
    started = tier.systemd_messages(unit, STARTED)
    exited = tier.systemd_messages(unit, MAIN_EXITED)
    restart = tier.systemd_messages(unit, RESTART_SCHEDULED)
    assert message(started[0]) == f"Started {unit} - vLLM stand-in vllm-crashloop."
    assert message(exited[0]) == f"{unit}: Main process exited, code=exited, status=1/FAILURE"
    assert message(restart[0]) == f"{unit}: Scheduled restart job, restart counter is at 1."
    for entry in (*started, *exited, *restart):
        assert entry["_PID"] == "1" and entry["UNIT"] == unit and len(entry["INVOCATION_ID"]) == 32
    assert started[0]["INVOCATION_ID"] == exited[0]["INVOCATION_ID"]


class TestFoundingIncident:
    """vllm-incident (``KillMode=process``): a worker fails the flashinfer-cubin check, the
    main process exits 1, systemd restarts it; the failed worker, left running, prints the end
    of its traceback (the root cause) after the new start; the operator restarts the slow
    second start by hand (``systemctl restart``) and the third becomes ready."""

    UNIT = "vllm-incident.service"

    def _end(self, tier: Tier) -> dict[str, Any]:
        tier.notes["drivers"]["incident"].check()
        entry: dict[str, Any] = tier.wait(
            lambda: (found := _settled(tier, self.UNIT, 1)) and _phase(found) == "ready" and found,
            "vllm-incident ready, its crash counted",
            timeout=SETTLE,
        )
        return entry

    def test_journald_stamps_the_late_traceback_with_the_new_invocation(self, tier: Tier) -> None:
        """The real shape the sentinel must handle: the left-over worker's root cause comes
        after the second ``Started`` and carries the *second* invocation's id."""
        self._end(tier)
        first, second, third = _started(tier, self.UNIT)
        entries = tier.journal(self.UNIT)
        (late,) = [entry for entry in entries if ROOT_CAUSE in message(entry)]
        assert late["_SYSTEMD_INVOCATION_ID"] == second
        # … but on the stdout stream of the first start, which the worker inherited
        (first_banner, *_) = [e for e in entries if e.get("_SYSTEMD_INVOCATION_ID") == first]
        assert late["_STREAM_ID"] == first_banner["_STREAM_ID"]
        position = {entry["__CURSOR"]: index for index, entry in enumerate(entries)}
        starts = [e for e in entries if e.get("MESSAGE_ID") == STARTED and e.get("_PID") == "1"]
        assert position[starts[1]["__CURSOR"]] < position[late["__CURSOR"]]
        assert first != second != third

    def test_counters_phases_and_units_match_systemd(self, tier: Tier) -> None:
        entry = self._end(tier)
        started = _started(tier, self.UNIT)
        show = tier.show(self.UNIT, "NRestarts", "Result", "ActiveState", "InvocationID")
        scheduled = tier.systemd_messages(self.UNIT, RESTART_SCHEDULED)
        assert [message(item) for item in scheduled] == [
            f"{self.UNIT}: Scheduled restart job, restart counter is at 1."
        ]  # one automatic restart; `systemctl restart` resets NRestarts
        assert show == {
            "NRestarts": "0",
            "Result": "success",
            "ActiveState": "active",
            "InvocationID": started[-1],
        }
        assert _exits(tier, self.UNIT)[0].endswith("code=exited, status=1/FAILURE")
        assert entry["starts_total"] == len(started) == 3
        assert sum(entry["crashes_total"].values()) == 1
        assert [item["id"] for item in entry["incarnations"]] == started
        assert [item["outcome"] for item in entry["incarnations"]] == [
            "crashed",
            "stopped",  # `systemctl restart` while loading: a stop, not a crash
            "ready",
        ]
        assert entry["incarnations"][0]["crash"]["phase"] == "loading_weights"
        units = {item["unit"]: item for item in tier.units()["units"]}
        assert units[self.UNIT]["phase"] == "ready"
        assert units[self.UNIT]["invocation_id"] == started[-1]
        tier.wait(lambda: _fired(tier, "VllmCrashed", self.UNIT), "VllmCrashed for vllm-incident")

    def test_the_crash_is_counted_with_the_late_root_cause(self, tier: Tier) -> None:
        entry = self._end(tier)
        assert entry["crashes_total"] == {"dependency_mismatch": 1}
        assert entry["incarnations"][0]["crash"]["cause"] == "dependency_mismatch"


class TestCrashLoop:
    """vllm-crashloop: CUDA OOM while profiling at every start, ``RestartSec=0.5``, until
    systemd's start limit (``StartLimitBurst=5``, systemd's default burst) refuses the next."""

    UNIT = "vllm-crashloop.service"

    def test_counted_as_systemd_saw_it(self, tier: Tier) -> None:
        tier.wait(
            lambda: tier.show(self.UNIT, "ActiveState")["ActiveState"] == "failed",
            "systemd giving up on vllm-crashloop",
        )
        exits = _exits(tier, self.UNIT)
        started = _started(tier, self.UNIT)
        assert all(text.endswith("status=1/FAILURE") for text in exits)
        assert len(exits) == len(started) == 5
        journal = [message(entry) for entry in tier.journal(self.UNIT)]
        assert f"{self.UNIT}: Start request repeated too quickly." in journal
        show = tier.show(self.UNIT, "NRestarts", "ExecMainStatus")
        assert show["ExecMainStatus"] == "1"
        # systemd 252 counts the restart its start limit refused too
        assert int(show["NRestarts"]) == len(started)
        entry = tier.wait(
            lambda: _settled(tier, self.UNIT, len(exits)), "the crashes counted", timeout=SETTLE
        )
        assert entry["starts_total"] == len(started)
        assert entry["crashes_total"] == {"cuda_oom": len(exits)}
        assert _phase(entry) == "crashed"
        assert [item["id"] for item in entry["incarnations"]] == started
        assert {item["outcome"] for item in entry["incarnations"]} == {"crashed"}

    def test_alerts_crash_looping(self, tier: Tier) -> None:
        tier.wait(
            lambda: _fired(tier, "VllmCrashLooping", self.UNIT),
            "VllmCrashLooping delivered to the webhook",
            timeout=SETTLE,
        )
        firing = tier.query(f'ALERTS{{alertname="VllmCrashed",unit="{self.UNIT}"}}')
        assert {item["metric"]["cause"] for item in firing} == {"cuda_oom"}
        # five starts, the first counted too (the series is born at 1, and a series born in
        # the window counts from 0: tests/rules/test_born_counters.py)


class TestStopMidLoad:
    """vllm-stop (``KillMode=mixed``): ``systemctl stop`` while the weights load."""

    UNIT = "vllm-stop.service"

    def test_stopped_not_crashed(self, tier: Tier) -> None:
        tier.notes["drivers"]["stop"].check()
        show = tier.show(self.UNIT, "Result", "ActiveState", "NRestarts")
        assert show == {"Result": "success", "ActiveState": "inactive", "NRestarts": "0"}
        systemd = [message(entry) for entry in tier.journal(self.UNIT) if entry.get("_PID") == "1"]
        assert systemd[2:] == [
            f"Stopping {self.UNIT} - vLLM stand-in vllm-stop...",
            *systemd[3:-2],  # KillMode=mixed: the engine and workers get SIGKILL after the main
            f"{self.UNIT}: Deactivated successfully.",
            f"Stopped {self.UNIT} - vLLM stand-in vllm-stop.",
        ]
        assert all("with signal SIGKILL." in text for text in systemd[3:-2])
        assert _exits(tier, self.UNIT) == []  # a clean stop: no "Main process exited" entry
        entry = tier.wait(
            lambda: (e := tier.unit(self.UNIT)) and _phase(e) == "stopped" and e,
            "vllm-stop stopped",
        )
        (incarnation,) = entry["incarnations"]
        assert incarnation["id"] == _started(tier, self.UNIT)[0]
        assert incarnation["outcome"] == "stopped"
        assert incarnation["furthest_phase"] == "loading_weights"
        assert entry["crashes_total"] == {} and entry["crashes_settling"] == 0
        assert entry["last_crash"] is None
        assert not _fired(tier, "VllmCrashed", self.UNIT)
        # while it loaded, the fast rules' VllmNotReady was pending or firing; stopped, it ends
        tier.wait(
            lambda: not tier.query(f'ALERTS{{alertname="VllmNotReady",unit="{self.UNIT}"}}'),
            "VllmNotReady to end for the stopped unit",
            timeout=30,
        )


class TestRateLimitedBurst:
    """vllm-burst (``LogRateLimitBurst=50`` per 2 s): worker 0 prints 3,000 progress bars at
    once; journald keeps a few and writes ``Suppressed N messages from vllm-burst.service``."""

    UNIT = "vllm-burst.service"

    def _suppressed(self, tier: Tier) -> int:
        entries = tier.wait(
            lambda: [
                entry
                for entry in tier.journal(self.UNIT, f"MESSAGE_ID={JOURNAL_DROPPED}")
                if entry.get("OBJECT_SYSTEMD_UNIT") == self.UNIT
            ],
            "journald's Suppressed message",
        )
        for entry in entries:
            assert re.fullmatch(rf"Suppressed \d+ messages from {self.UNIT}", message(entry))
            assert entry["_SYSTEMD_UNIT"] == "systemd-journald.service"
        return sum(int(entry["N_DROPPED"]) for entry in entries)

    def test_phases_still_right(self, tier: Tier) -> None:
        dropped = self._suppressed(tier)
        assert 0 < dropped < 3001
        entry = tier.wait(
            lambda: (e := tier.unit(self.UNIT)) and _phase(e) == "ready" and e, "vllm-burst ready"
        )
        (incarnation,) = entry["incarnations"]
        assert [phase["phase"] for phase in incarnation["phases"]] == [
            "starting",
            "initializing",
            "loading_weights",
            "compiling",
            "profiling_kv_cache",
            "capturing_cuda_graphs",
            "starting_api_server",
            "ready",
        ]
        assert entry["starts_total"] == 1 and entry["crashes_total"] == {}

    def test_suppressed_messages_counted_as_skipped(self, tier: Tier) -> None:
        dropped = self._suppressed(tier)
        # journald's entry is in the journal; the sentinel applies it a moment later (a CI run
        # read the status before it had: 0 == 2827)
        skipped = tier.wait(
            lambda: sum(tier.status()["hosts"][0]["records_skipped"].values()),
            "the suppressed messages counted as skipped",
        )
        assert skipped == dropped


class TestWorkerKilled:
    """vllm-oomkill: ready, then ``kill -KILL`` of Worker_TP1 (what the kernel's OOM killer
    does); the engine core reports the dead worker, the API server exits 1, systemd restarts
    the unit and it becomes ready again."""

    UNIT = "vllm-oomkill.service"

    def test_counted_as_a_dead_worker_and_ready_again(self, tier: Tier) -> None:
        tier.notes["drivers"]["oomkill"].check()
        entry = tier.wait(
            lambda: (e := _settled(tier, self.UNIT, 1)) and _phase(e) == "ready" and e,
            "vllm-oomkill ready again, its crash counted",
            timeout=SETTLE,
        )
        started = _started(tier, self.UNIT)
        assert tier.show(self.UNIT, "NRestarts", "ActiveState") == {
            "NRestarts": "1",
            "ActiveState": "active",
        }
        assert _exits(tier, self.UNIT)[0].endswith("code=exited, status=1/FAILURE")
        assert entry["starts_total"] == len(started) == 2
        assert entry["crashes_total"] == {"worker_died": 1}
        crash = entry["incarnations"][0]["crash"]
        assert crash["phase"] == "ready"
        assert (
            crash["message"]
            == "Worker proc VllmWorker-1 died unexpectedly, shutting down executor."
        )
        assert tier.notes["killed_pid"] in entry["incarnations"][0]["pids"]
        tier.wait(
            lambda: _fired(tier, "VllmCrashed", self.UNIT, cause="worker_died"),
            "VllmCrashed{cause=worker_died}",
        )


def test_two_units_are_told_apart(tier: Tier) -> None:
    """vllm-pair-a and vllm-pair-b start together; a is restarted by hand: each unit has its
    own incarnations, PIDs and counters, as systemd says."""
    tier.notes["drivers"]["pair"].check()
    units = ("vllm-pair-a.service", "vllm-pair-b.service")
    for unit in units:
        tier.wait(lambda unit=unit: _phase(_current(tier, unit)) == "ready", f"{unit} ready")  # type: ignore[misc]
    a, b = (_current(tier, unit) for unit in units)
    assert [item["id"] for item in a["incarnations"]] == _started(tier, units[0])
    assert [item["id"] for item in b["incarnations"]] == _started(tier, units[1])
    assert (a["starts_total"], b["starts_total"]) == (2, 1)
    assert [item["outcome"] for item in a["incarnations"]] == ["stopped", "ready"]
    assert a["crashes_total"] == b["crashes_total"] == {}
    pids_a = {pid for item in a["incarnations"] for pid in item["pids"]}
    pids_b = {pid for item in b["incarnations"] for pid in item["pids"]}
    assert pids_a and pids_b and not pids_a & pids_b
    documents = {item["unit"]: item for item in tier.units()["units"]}
    for unit in units:
        show = tier.show(unit, "InvocationID", "ActiveState")
        assert documents[unit]["invocation_id"] == show["InvocationID"]
        assert documents[unit]["phase"] == "ready" and show["ActiveState"] == "active"
    metrics = tier.metrics()
    for unit, starts in zip(units, (2, 1), strict=True):
        line = f'vllm_sentinel_unit_starts_total{{host="booted-root",unit="{unit}"}} {starts}.0'
        assert line in metrics.splitlines()


def test_the_sentinel_does_not_watch_its_own_unit(tier: Tier) -> None:
    tier.wait(lambda: tier.unit("vllm-pair-b.service"), "a unit in /status")
    assert tier.unit("vllm-sentinel.service") is None
