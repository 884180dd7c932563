"""The report: hints and benign lines in the replay verdict and /status, the 24 h counts."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta

from tests.support.snapshots import AT, basic_snapshot
from vllm_sentinel.hints import HintContext
from vllm_sentinel.replay import replay
from vllm_sentinel.report import render_status, render_text, status_document, unit_to_json
from vllm_sentinel.snapshot import GpuProcessUsage, Snapshot
from vllm_sentinel.tracker import RECENT_EVENTS_KEPT

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
            "(see docs/runbook.md#dependency_mismatch)\n"
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
            "runbook": "docs/runbook.md#dependency_mismatch",
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
            "Now on this host: jupyter.service (pid 4242) holds 70.0 GiB on GPU 0."
        )
        assert unit_to_json(host.units[0], HintContext("x"))["last_crash"]["hint"] != hint

    def test_status_table_shows_the_hint_under_the_unit(self) -> None:
        """``vllm-sentinel status``: one ``hint:`` line under a unit with a last crash."""
        text = render_status(status_document(basic_snapshot()))
        lines = text.splitlines()
        index = next(i for i, line in enumerate(lines) if "vllm-llama.service" in line)
        assert "cuda_oom: torch.OutOfMemoryError" in lines[index]
        assert lines[index + 1].startswith(" " * 17 + "hint: GPU 0 had 1.12 GiB free of 79.10")
        assert lines[index + 1].endswith("(see docs/runbook.md#cuda_oom)")
        assert sum(1 for line in lines if "hint:" in line) == 1  # only the crashed unit
