"""The report: hints and benign lines in the replay verdict and /status, the 24 h counts; the
status table of a daemon without units; verdicts wrapped to a width."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from tests.support.snapshots import AT, basic_snapshot
from vllm_sentinel.engine.catalog.causes import CrashCause
from vllm_sentinel.engine.catalog.phases import Outcome, Phase
from vllm_sentinel.engine.hints import HintContext
from vllm_sentinel.engine.report import render_status, render_text, status_document, unit_to_json
from vllm_sentinel.engine.snapshot import (
    CrashInfo,
    EtaBasis,
    GpuProcessUsage,
    PhaseEntry,
    Snapshot,
    UnitHealth,
)
from vllm_sentinel.engine.tracker import RECENT_EVENTS_KEPT
from vllm_sentinel.replay import replay

INCIDENT = "\n".join(
    [
        "INFO 11-28 23:36:20 [api_server.py:1043] vLLM API server version 0.17.1",
        "(Worker_TP0 pid=1) INFO 11-28 23:36:21 [gpu_model_runner.py:3425] Starting to load "
        "model /shared/kimi...",
        "(Worker_TP7 pid=221350) ERROR 11-28 23:36:40 [multiproc_executor.py:783] Traceback "
        "(most recent call last):",
        '(Worker_TP7 pid=221350) ERROR 11-28 23:36:40 [multiproc_executor.py:783]   File "x.py",'
        " line 1, in load_model",
        "(Worker_TP7 pid=221350) ERROR 11-28 23:36:40 [multiproc_executor.py:783] RuntimeError: "
        "flashinfer-cubin version (0.6.3) does not match flashinfer version (0.6.4). Please "
        "install the same version of both packages.",
        "INFO 11-28 23:37:31 [api_server.py:1043] vLLM API server version 0.17.1",
        "(APIServer pid=2) ERROR 11-28 23:37:40 [gpt_oss_triton_kernels_moe.py:60] Failed to "
        "import Triton kernels. Please make sure your triton version is compatible. Error: cannot "
        "import name 'SparseMatrix' from 'triton_kernels.tensor'",
        "(Worker_TP0 pid=3) INFO 11-28 23:37:52 [gpu_model_runner.py:3425] Starting to load "
        "model /shared/kimi...",
    ]
)


def _units() -> tuple:
    return replay([[INCIDENT.encode()]], reference_year=2026).units


class TestReplayVerdict:
    def test_text_gives_the_hint_and_the_discounted_benign_lines(self) -> None:
        """The crashed incarnation's verdict is followed by its fix; the benign ERROR line of
        the next one is listed with why it was not blamed."""
        text = render_text(_units())
        assert (
            "    hint: `pip install flashinfer-cubin==0.6.4`: flashinfer-cubin 0.6.3 must match "
            "flashinfer 0.6.4 (or install the flashinfer that matches flashinfer-cubin 0.6.3). "
            "(see /runbook#dependency_mismatch)\n"
        ) in text
        assert "    benign errors: 1 (discounted, not a cause)\n" in text
        assert "      Failed to import Triton kernels. Please make sure your triton" in text
        assert "        why: harmless: only gpt-oss with the Triton MoE kernels needs them" in text

    def test_json_carries_hint_and_benign_lines(self) -> None:
        """``replay --output json``: the crash's hint object and each benign line with why."""
        (unit,) = _units()
        document = unit_to_json(unit)
        first, second = document["incarnations"]
        assert first["crash"]["hint"] == {
            "text": "`pip install flashinfer-cubin==0.6.4`: flashinfer-cubin 0.6.3 must match "
            "flashinfer 0.6.4 (or install the flashinfer that matches flashinfer-cubin 0.6.3).",
            "runbook": "/runbook#dependency_mismatch",
            "rule": "version_pair",
        }
        assert document["last_crash"] == first["crash"]
        (benign,) = second["benign_lines"]
        assert benign["line"].startswith("Failed to import Triton kernels.")
        assert benign["why"].startswith("harmless:")
        assert "starts_last_24h" not in document  # replay: no reference time


class TestStatus:
    def test_last_24_hours_counts_only_the_window(self) -> None:
        """Start and crash times older than 24 h before the snapshot are not counted."""
        snapshot = basic_snapshot()
        host = snapshot.hosts[0]
        unit = replace(
            host.units[0],
            recent_starts=(AT - timedelta(hours=30), AT - timedelta(hours=2), AT),
            recent_crashes=(AT - timedelta(hours=25), AT - timedelta(minutes=5)),
        )
        snapshot = Snapshot((replace(host, units=(unit,)),), AT)
        (document,) = status_document(snapshot)["units"]
        assert (document["starts_last_24h"], document["crashes_last_24h"]) == (2, 1)
        assert document["last_24h_capped"] is False

    def test_a_full_ring_inside_the_window_says_capped(self) -> None:
        """More starts than the ring keeps: the count is a floor, and says so."""
        host = basic_snapshot().hosts[0]
        times = tuple(AT - timedelta(minutes=index) for index in range(RECENT_EVENTS_KEPT))
        unit = replace(host.units[0], recent_starts=times[::-1])
        (document,) = status_document(Snapshot((replace(host, units=(unit,)),), AT))["units"]
        assert document["starts_last_24h"] == RECENT_EVENTS_KEPT
        assert document["last_24h_capped"] is True

    def test_hints_get_the_hosts_gpu_processes(self) -> None:
        """``/status`` hints of memory causes name the other processes on the unit's host."""
        host = basic_snapshot().hosts[0]
        host = replace(
            host,
            gpu_processes=(
                GpuProcessUsage(4242, 0, 70 << 30, "jupyter.service"),
                GpuProcessUsage(9, 0, 1 << 30, "vllm-llama.service"),
            ),
        )
        document = status_document(Snapshot((host,), AT))
        llama = next(unit for unit in document["units"] if unit["unit"] == "vllm-llama.service")
        hint = llama["last_crash"]["hint"]
        assert hint["rule"] == "oom_allocation"
        assert hint["text"].endswith(
            "Now on its GPUs: jupyter.service (pid 4242) holds 70.0 GiB on GPU 0."
        )
        assert unit_to_json(host.units[0], HintContext("x"))["last_crash"]["hint"] != hint

    def test_unhealthy_unit_in_the_document_and_the_table(self) -> None:
        """``/status`` carries the unit's probes; ``status`` says ready but failing, in words."""
        host = basic_snapshot().hosts[0]
        failing = UnitHealth(
            url="http://127.0.0.1:8000",
            up=False,
            error="timeout",
            last_probe_at=AT,
            failing_since=AT - timedelta(seconds=75),
            failures=8,
            unhealthy=True,
        )
        qwen = replace(host.units[1], health=failing)
        document = status_document(Snapshot((replace(host, units=(qwen,)),), AT))
        (unit,) = document["units"]
        assert unit["unhealthy"] is True
        assert unit["health"]["failures"] == 8
        assert unit["health"]["failing_since"] == "2025-03-01T12:28:45Z"
        lines = render_status(document).splitlines()
        index = next(i for i, line in enumerate(lines) if "vllm-qwen.service" in line)
        assert lines[index].split()[2:4] == ["ready", "unhealthy"]  # PHASE, STATE
        assert lines[index + 1] == (
            " " * 7 + "health: ready, but /health failing since 12:28:45 UTC (8 failures): timeout"
        )

    def test_a_healthy_unit_has_health_but_no_health_line(self) -> None:
        document = status_document(basic_snapshot())
        qwen = next(unit for unit in document["units"] if unit["unit"] == "vllm-qwen.service")
        assert qwen["unhealthy"] is False and qwen["health"]["up"] is True
        assert "health:" not in render_status(document)

    def test_pending_crash_is_not_counted_and_says_why(self) -> None:
        """A crash held while its traceback is open: ``settled`` false, counted as settling,
        and the table says its cause is pending and not counted yet."""
        host = basic_snapshot().hosts[0]
        llama = host.units[0]
        crash = CrashInfo(CrashCause.PENDING, "", "", Phase.LOADING_WEIGHTS, AT, "inv-2")
        current = replace(llama.incarnations[-1], outcome=Outcome.CRASHED, crash=crash, ended_at=AT)
        unit = replace(llama, incarnations=(llama.incarnations[0], current), last_crash=crash)
        document = status_document(Snapshot((replace(host, units=(unit,)),), AT))
        (entry,) = document["units"]
        assert entry["last_crash"]["settled"] is False
        assert entry["incarnations"][0]["crash"]["settled"] is True
        assert (entry["crashes_settling"], entry["crashes_last_24h"]) == (1, 1)
        lines = render_status(document).splitlines()
        index = next(i for i, line in enumerate(lines) if "vllm-llama.service" in line)
        assert lines[index].endswith("pending (not counted yet)")
        assert lines[index + 1].startswith(" " * 7 + "crash: cause pending: only a wrapper")

    def test_status_table_shows_the_hint_under_the_unit(self) -> None:
        """``vllm-sentinel status``: one ``hint:`` line under a unit with a last crash."""
        text = render_status(status_document(basic_snapshot()))
        lines = text.splitlines()
        index = next(i for i, line in enumerate(lines) if "vllm-llama.service" in line)
        assert "cuda_oom: torch.OutOfMemoryError" in lines[index]
        assert lines[index + 1].startswith(" " * 7 + "hint: GPU 0 had 1.12 GiB free of 79.10")
        assert lines[index + 1].endswith("(see /runbook#cuda_oom)")
        assert sum(1 for line in lines if "hint:" in line) == 1  # only the crashed unit


class TestStatusEta:
    """``vllm-sentinel status``: the ETA column, and a line with its basis under the unit."""

    def _lines(self, basis: EtaBasis) -> tuple[str, str]:
        host = basic_snapshot().hosts[0]
        llama = replace(
            host.units[0],
            eta_seconds=18.0,
            expected_ready_at=AT + timedelta(seconds=18),
            eta_basis=basis,
        )
        document = status_document(Snapshot((replace(host, units=(llama,)),), AT))
        lines = render_status(document).splitlines()
        index = next(i for i, line in enumerate(lines) if "vllm-llama.service" in line)
        eta = next(line for line in lines[index + 1 :] if line.lstrip().startswith("eta:"))
        return lines[index], eta

    def test_a_lower_bound_is_marked_and_has_no_ready_time(self) -> None:
        row, eta = self._lines(EtaBasis.VLLM)
        assert " ≥18s " in row
        assert eta == " " * 7 + "eta: ≥ 18s, this phase's bar only"

    def test_history_gives_a_ready_time_and_its_basis(self) -> None:
        row, eta = self._lines(EtaBasis.HISTORY)
        assert " 18s " in row and "≥" not in row
        assert eta == " " * 7 + "eta: 18s · ready at 12:30:18 UTC, from earlier starts"


class TestRunbookLinks:
    """Issue 21: hints point at a runbook a user can open, not the repository's docs/."""

    def test_replay_text_names_the_runbook_it_is_given(self) -> None:
        """``render_text(runbook=PATH)``: the installed copy, with the cause's anchor."""
        text = render_text(_units(), runbook="/opt/x/runbook.md")
        assert "(see /opt/x/runbook.md#dependency_mismatch)\n" in text

    def test_status_links_the_daemons_page(self) -> None:
        """``render_status(runbook=URL)``: the daemon's /runbook page, with the anchor."""
        text = render_status(
            status_document(basic_snapshot()), runbook="https://gpu-a:9842/runbook"
        )
        assert "(see https://gpu-a:9842/runbook#cuda_oom)" in text


class TestStatusColumns:
    """Issue 21: columns as wide as their content; no OUTCOME column repeating PHASE."""

    def _table(self) -> list[str]:
        host = basic_snapshot().hosts[0]
        llama = replace(
            host.units[0], stalled=True, eta_overdue_seconds=466.0, eta_basis=EtaBasis.HISTORY
        )
        document = status_document(Snapshot((replace(host, units=(llama, *host.units[1:])),), AT))
        return render_status(document).splitlines()

    def test_an_overdue_eta_does_not_run_into_the_next_column(self) -> None:
        """``overdue by 7m46s`` has its column's width: the crash cell starts after a gap,
        at the same offset as the LAST CRASH header."""
        lines = self._table()
        header = next(line for line in lines if line.startswith("HOST"))
        row = next(line for line in lines if "vllm-llama.service" in line)
        start = header.index("LAST CRASH")
        assert row[start:].startswith("cuda_oom: torch.OutOfMemoryError")
        assert row[:start].rstrip().endswith("overdue by 7m46s")
        assert row[start - 2 : start] == "  "

    def test_state_says_what_phase_does_not(self) -> None:
        """No OUTCOME column (``running`` beside a stalled unit, ``ready`` beside ``ready``):
        a STATE column says stalled, slow or unhealthy, ``-`` otherwise."""
        lines = self._table()
        header = next(line for line in lines if line.startswith("HOST"))
        assert header.split() == ["HOST", "UNIT", "PHASE", "STATE", "ETA", "LAST", "CRASH"]
        row = next(line for line in lines if "vllm-llama.service" in line)
        assert row.split()[2:4] == ["loading_weights", "stalled"]
        ready = next(line for line in lines if "vllm-qwen.service" in line)
        assert ready.split()[2:5] == ["ready", "-", "-"]


def _host(**fields: Any) -> dict[str, Any]:
    return {"host": "gpu-a", "collectors": {}, "units": [], **fields}


def _journal(up: bool, reason: str = "") -> dict[str, Any]:
    return {"journal": {"up": up, "reason": reason, "since": None, "reconnects_total": 0}}


class TestStatusWithoutUnits:
    def test_each_host_says_why(self) -> None:
        """Per host: not started, cannot read, nothing matches, or followed but silent."""
        document = {
            "at": "2026-12-01T12:00:00Z",
            "units": [],
            "hosts": [
                _host(
                    host="a",
                    unit_patterns=["vllm*.service"],
                    collectors=_journal(False, "starting"),
                ),
                _host(
                    host="b",
                    unit_patterns=["vllm*.service"],
                    collectors=_journal(False, "ssh_auth_failed"),
                ),
                _host(
                    host="c",
                    unit_patterns=["vllm*.service", "llm.service"],
                    collectors=_journal(True),
                ),
                _host(
                    host="d",
                    unit_patterns=["vllm-x.service"],
                    units_followed=["vllm-x.service"],
                    collectors=_journal(True),
                ),
            ],
        }
        assert render_status(document).splitlines()[5:] == [
            "no units seen yet:",
            "  a: the journal collector is starting; it will look for vllm*.service",
            "  b: the journal cannot be read (ssh_auth_failed), so vllm*.service cannot be looked for",
            "  c: no unit in its journal matches vllm*.service, llm.service yet",
            "  d: follows vllm-x.service, which logged nothing in the backfill window yet",
        ]

    def test_no_host_at_all(self) -> None:
        """An instance whose shard holds no host says so."""
        text = render_status({"at": "t", "hosts": [], "units": []})
        assert (
            text
            == "vllm-sentinel at t\nno units seen yet:\n  no host is watched (an empty shard?)\n"
        )

    def test_units_keep_the_table(self) -> None:
        """With units, the table is printed as before (header first)."""
        text = render_status(status_document(basic_snapshot()))
        assert "HOST" in text and "no units seen yet" not in text


class TestVerdictWidth:
    def test_width_none_keeps_one_line_and_a_width_wraps(self) -> None:
        """Without a width a verdict is one line; with one, lines fit and say the same."""
        units = [unit for host in basic_snapshot().hosts for unit in host.units]
        one = [line for line in render_text(units).splitlines() if "verdict:" in line]
        wrapped = render_text(units, width=40)
        verdict_lines = [
            line
            for line in wrapped.splitlines()
            if line.startswith(("    verdict:", "      ")) and not line.startswith("       ")
        ]
        assert len(verdict_lines) > len(one)  # something was wrapped
        assert all(len(line) <= 40 or " " not in line.strip() for line in verdict_lines)
        assert " ".join(wrapped.split()) == " ".join(render_text(units).split())
        assert len(one) == len([line for line in wrapped.splitlines() if "verdict:" in line])


JOURNAL = (
    Path(__file__).resolve().parents[1] / "golden/journal/001-kimi-k25-flashinfer-restart.jsonl"
)


class TestCrashIdentity:
    def test_last_crash_names_the_crashed_invocation(self) -> None:
        """Journal JSON: ``last_crash.invocation_id`` is the dead incarnation's
        ``_SYSTEMD_INVOCATION_ID``, and every incarnation's crash carries its own id."""
        (unit,) = replay([[JOURNAL.read_bytes()]]).units
        document = unit_to_json(unit)
        crashed = next(item for item in document["incarnations"] if item["crash"])
        assert document["last_crash"]["invocation_id"] == crashed["id"]
        assert crashed["id"] == "3f1c9a7be2d44c0a9b61f0d2c8e4a517"  # the first invocation
        assert crashed["crash"]["invocation_id"] == crashed["id"]

    def test_unknown_id_is_null(self) -> None:
        """A plain-text log names no invocation: the key is there, ``null``."""
        (unit,) = _units()
        assert unit_to_json(unit)["last_crash"]["invocation_id"] is None

    def test_unknown_cause_gives_the_journalctl_command_of_the_dead_incarnation(self) -> None:
        """With the id: ``journalctl _SYSTEMD_INVOCATION_ID=<id> -o cat``, in JSON and text."""
        crash = CrashInfo(
            CrashCause.UNKNOWN,
            "",
            "",
            Phase.LOADING_WEIGHTS,
            AT,
            "0123456789abcdef0123456789abcdef",
        )
        unit = replace(basic_snapshot().hosts[0].units[0], last_crash=crash)
        hint = unit_to_json(unit)["last_crash"]["hint"]
        assert (
            "`journalctl _SYSTEMD_INVOCATION_ID=0123456789abcdef0123456789abcdef -o cat`"
            in (hint["text"])
        )
        assert "…" not in hint["text"]

    def test_unknown_cause_without_an_id_gives_the_unit_and_a_time_window(self) -> None:
        """Without the id: the unit and the minutes before the crash (journalctl's UTC form)."""
        crash = CrashInfo(CrashCause.UNKNOWN, "", "", Phase.LOADING_WEIGHTS, AT, None)
        unit = replace(basic_snapshot().hosts[0].units[0], last_crash=crash)
        hint = unit_to_json(unit)["last_crash"]["hint"]
        assert (
            f"`journalctl --unit {unit.unit} --since '2025-03-01 12:20:00 UTC' "
            "--until '2025-03-01 12:31:00 UTC' -o cat`"
        ) in hint["text"], hint["text"]


def test_a_verdict_without_a_message_ends_at_the_exception() -> None:
    """``TimeoutError`` raised with no message: the verdict names the class and stops there
    (a new user's trial read ``root cause timeout: TimeoutError: ``, a dangling colon)."""
    from vllm_sentinel.engine.report import verdict

    crash = CrashInfo(CrashCause.TIMEOUT, "TimeoutError", "", Phase.STARTING, AT, None)
    item = replace(basic_snapshot().hosts[0].units[0].incarnations[-1], crash=crash)
    item = replace(item, outcome=Outcome.CRASHED)
    assert verdict(item) == "crashed during starting — root cause timeout: TimeoutError"


def test_a_timeline_row_without_a_time_keeps_the_columns() -> None:
    """A phase entered on a line without a time shows ``?`` padded to the date's width, so the
    phase column stays where the dated rows have it (a new user's trial saw it jump left)."""
    from vllm_sentinel.replay import replay

    log = (
        b"Traceback (most recent call last):\n"
        b'  File "/usr/lib/python3/dist-packages/vllm/v1/engine/core.py", line 1, in run\n'
        b"torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB.\n"
    )
    (unit,) = replay([[log]]).units
    rows = [line for line in render_text([unit]).splitlines() if line.startswith("    ?")]
    assert rows, render_text([unit])
    assert all(row.startswith("    ?" + " " * 18 + "  ") for row in rows), rows
    assert all(row[4 + 19 + 2] != " " for row in rows), rows


def test_the_reason_for_no_comparison_is_true_with_last() -> None:
    """``--last 2`` on a log of three starts: the last start's reason for comparing with none
    is about the incarnations shown before it, and says the summed-up one was not compared
    with (it was told about the shown ones up to its display number, itself included, and
    said "loaded the same way": false)."""
    from vllm_sentinel.replay import replay

    log = next((Path(__file__).parents[1] / "golden" / "logs").glob("101-*.log")).read_bytes()
    every = render_text(replay([[log]], keep=None).units)
    last_two = render_text(replay([[log]], keep=2).units)
    (reason,) = [line for line in every.splitlines() if line.startswith("    startup ")]
    assert reason.endswith("that became ready with its start seen (one read from its middle "
                           "has no whole durations)")  # fmt: skip
    (shown,) = [line for line in last_two.splitlines() if line.startswith("    startup ")]
    assert shown == (
        "    startup 31s: no earlier start in this input that became ready (1 earlier "
        "incarnation summed up is not compared with: --all compares with every one)"
    )


_KEYS = ", ".join(f"'model.layers.{n}.mlp.experts.w13_weight'" for n in range(40))  # 1.7 KB
_NCCL_INFO = " ".join(
    f"gpu-3:{n}:{n} [0] NCCL INFO Channel {n:02d}/24 : 0 1 2 3 4 5 6 7" for n in range(30)
)


_TRACEBACK = (
    "Traceback (most recent call last):",
    '  File "/usr/lib/python3/dist-packages/vllm/model_executor/utils.py", line 1, in f',
)


def _crashed_with(*lines: str) -> str:
    """The verdict line of a start that crashed with ``lines`` (a traceback, a failure line),
    as ``replay`` prints it to a pipe (one line)."""
    log = "\n".join(
        [
            "INFO 11-04 18:02:50 [api_server.py:1] vLLM API server version 0.11.0",
            "INFO 11-04 18:02:51 [model_runner.py:1] Starting to load model foo/bar...",
            *lines,
        ]
    )
    (unit,) = replay([[log.encode() + b"\n"]], reference_year=2026).units
    (line,) = [row for row in render_text([unit]).splitlines() if "verdict:" in row]
    return line


def test_a_message_cut_short_ends_with_an_ellipsis() -> None:
    """A 1.7 KB ``dict_keys([...])`` and a message with NCCL INFO lines glued to it are kept
    to 1,000 characters; the cut ends with ``…`` so that the reader knows there was more (a new
    user's trial read a verdict that stopped mid-word, ``… 0 1 2 3 4``, as if it were whole)."""
    keys = _crashed_with(*_TRACEBACK, f"KeyError: dict_keys([{_KEYS}])")
    assert keys.endswith("…"), keys[-80:]
    message = keys.split(": KeyError: ", 1)[1]
    assert len(message) == 1000  # 999 of the message's own characters and the ellipsis
    assert message[:-1] == f"dict_keys([{_KEYS}])"[:999]
    nccl = _crashed_with(
        *_TRACEBACK,
        "RuntimeError: NCCL error in: ProcessGroupNCCL.cpp:1970, unhandled cuda error, NCCL "
        f"version 2.21.5 {_NCCL_INFO}",
    )
    assert " root cause nccl_error: RuntimeError: NCCL error in: " in nccl
    assert nccl.endswith("…"), nccl[-80:]
    message = nccl.split(": RuntimeError: ", 1)[1]
    assert 990 < len(message) <= 1000  # blanks at the cut are dropped before the ellipsis
    assert f"{_NCCL_INFO}".startswith(message.split(" 2.21.5 ", 1)[1][:-1])


def test_a_failure_line_cut_short_ends_with_an_ellipsis() -> None:
    """A native failure line (libstdc++'s ``what():``) is evidence as it is, not an exception
    line: its cut, made where the evidence is kept, ends with ``…`` too."""
    line = _crashed_with(
        "terminate called after throwing an instance of 'c10::DistBackendError'",
        "  what():  [PG ID 0 PG GUID 0 Rank 0] NCCL watchdog thread terminated with exception: "
        f"NCCL error: unhandled cuda error {_NCCL_INFO}",
    )
    assert " root cause nccl_error: " in line
    assert line.endswith("…"), line[-80:]
    kept = line.split(" root cause nccl_error: ", 1)[1]  # the line less its indent
    assert kept.startswith("what():  [PG ID 0 PG GUID 0 Rank 0] NCCL watchdog thread")
    assert len(kept) == 1000 - len("  ")


def test_a_whole_message_gets_no_ellipsis() -> None:
    """A message under the limit is printed as it is, with no ``…``."""
    line = _crashed_with(*_TRACEBACK, "KeyError: 'model.layers.0.mlp.experts.w13_weight'")
    assert line.endswith("KeyError: 'model.layers.0.mlp.experts.w13_weight'")


def test_a_phase_lasts_what_its_printed_times_say() -> None:
    """Times are printed to the second, cut as journalctl and vLLM print them; a phase's
    duration is the difference of the printed times beside it: entered at 10:00:00.9 and
    left at 10:00:02.1 reads 10:00:00, 10:00:02 and 2s (a new user's trial read 1s, rounded
    from 1.2 s, beside times 2 s apart), and 0.2 s inside one second reads 0s."""
    from tests.support.snapshots import incarnation, unit_snapshot

    start = datetime(2026, 3, 1, 10, 0, 0, 900_000, tzinfo=UTC)
    item = incarnation([(Phase.STARTING, 0)])
    moments = [start + timedelta(seconds=s) for s in (0, 1.2, 1.4, 61.3)]
    phases = (Phase.STARTING, Phase.INITIALIZING, Phase.LOADING_WEIGHTS, Phase.COMPILING)
    item = replace(
        item,
        started_at=start,
        phases=tuple(PhaseEntry(p, t) for p, t in zip(phases, moments, strict=True)),
        phase=Phase.COMPILING,
        furthest_phase=Phase.COMPILING,
        last_record_at=moments[-1],
    )
    rows = [
        line
        for line in render_text([unit_snapshot("h", "u", item)]).splitlines()
        if line.startswith("    2026-")
    ]
    assert rows == [
        "    2026-03-01 10:00:00  starting               2s",
        "    2026-03-01 10:00:02  initializing           0s",
        "    2026-03-01 10:00:02  loading_weights        1m00s",
        "    2026-03-01 10:01:02  compiling",
    ]
