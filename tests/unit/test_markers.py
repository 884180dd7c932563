"""The marker catalog: every example line from the corpus and vLLM's source maps to its event."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from vllm_sentinel.engine.catalog.markers import (
    MARKERS,
    SYSTEMD_MARKERS,
    Event,
    MarkerMatcher,
    SystemdEvent,
    match_systemd,
)
from vllm_sentinel.engine.catalog.phases import Phase
from vllm_sentinel.engine.decode.vllm_line import parse_line

EXAMPLES = Path(__file__).with_name("marker_examples.tsv")


def _examples() -> list[tuple[str, str, str]]:
    rows = []
    for line in EXAMPLES.read_text(encoding="utf-8").splitlines():
        if not line.strip() or line.startswith("#"):
            continue
        event, phase, text = line.split("\t", 2)
        text = text.replace("\\r", "\r").replace("\\x1b", "\x1b")
        rows.append((event, phase, text))
    return rows


MATCHER = MarkerMatcher()


@pytest.mark.parametrize(("event", "phase", "line"), _examples())
def test_example_line_matches_its_event(event: str, phase: str, line: str) -> None:
    """Each example line (from the corpus or vLLM's format strings) gives its event and phase."""
    anatomy = parse_line(line)
    found = MATCHER.match(anatomy.body, anatomy.kind)
    assert found is not None, f"no marker for {anatomy.body!r}"
    assert found.marker.event is Event(event)
    expected_phase = None if phase == "-" else Phase(phase)
    assert found.marker.phase is expected_phase


class TestCatalog:
    """The table itself."""

    def test_every_row_cites_versions_and_source(self) -> None:
        """Each row names the vLLM versions and the source file of its format string."""
        for marker in MARKERS:
            assert marker.versions.strip() and marker.source.strip(), marker.pattern
            assert re.search(r"\d", marker.versions), marker.pattern

    def test_every_event_has_an_example(self) -> None:
        """Every event of the catalog is exercised by at least one example line."""
        seen = {Event(event) for event, _, _ in _examples()}
        assert seen == set(Event)

    def test_traceback_frame_is_not_a_marker(self) -> None:
        """``self.worker.load_model()`` in a frame is not the 'Starting to load model' marker."""
        for body in ("    self.worker.load_model()", '  File "x.py", line 783, in load_model'):
            assert MATCHER.match(body, parse_line(body).kind) is None

    def test_torch_compile_takes_and_took(self) -> None:
        """Both wordings (takes ≤0.17, took ≥0.18) end the compile phase with their seconds."""
        for verb in ("takes", "took"):
            found = MATCHER.match(f"torch.compile {verb} 12.50 s in total", parse_line("").kind)
            assert found is not None and found.groups["s"] == "12.50"

    def test_numbers_are_extracted(self) -> None:
        """Shard counts, GiB, seconds, KV tokens and versions come out as named groups."""
        cases = {
            "Loading safetensors checkpoint shards:  26% Completed | 22/85 [09:23<29:54, 28.49s/it]": {
                "n": "22",
                "total": "85",
            },
            "Model loading took 71.43 GiB memory and 541.002315 seconds": {
                "gib": "71.43",
                "s": "541.002315",
            },
            "GPU KV cache size: 1,312,640 tokens": {"tokens": "1,312,640"},
            "Graph capturing finished in 6 secs, took 0.61 GiB": {"s": "6", "gib": "0.61"},
            "vLLM API server version 0.11.0": {"ver": "0.11.0"},
        }
        for body, groups in cases.items():
            found = MATCHER.match(body, parse_line(body).kind)
            assert found is not None, body
            for key, value in groups.items():
                assert found.groups[key] == value


class TestSystemd:
    """systemd's own messages about a unit."""

    @pytest.mark.parametrize(
        ("message", "event"),
        [
            (
                "Started vllm-assistant.service - vLLM OpenAI Server (assistant).",
                SystemdEvent.UNIT_STARTED,
            ),
            ("Starting vllm.service - vLLM...", SystemdEvent.UNIT_STARTING),
            (
                "Stopping vllm-assistant.service - vLLM OpenAI Server (assistant)...",
                SystemdEvent.UNIT_STOPPING,
            ),
            (
                "Stopped vllm-assistant.service - vLLM OpenAI Server (assistant).",
                SystemdEvent.UNIT_STOPPED,
            ),
            (
                "vllm3.service: Main process exited, code=exited, status=1/FAILURE",
                SystemdEvent.MAIN_PROCESS_EXITED,
            ),
            ("vllm.service: Failed with result 'exit-code'.", SystemdEvent.UNIT_FAILED),
            ("vllm.service: Deactivated successfully.", SystemdEvent.UNIT_DEACTIVATED),
            (
                "vllm.service: Scheduled restart job, restart counter is at 1.",
                SystemdEvent.RESTART_SCHEDULED,
            ),
            (
                "vllm.service: A process of this unit has been killed by the OOM killer.",
                SystemdEvent.OOM_KILLED,
            ),
            (
                "Out of memory: Killed process 4242 (python3) total-vm:1234kB",
                SystemdEvent.OOM_KILLED,
            ),
            ("-- Boot 45b35623d291431fa703c9232d2ea952 --", SystemdEvent.BOOT),
        ],
    )
    def test_message_is_classified(self, message: str, event: SystemdEvent) -> None:
        """The text alone is enough (plain-text journald output has no MESSAGE_ID)."""
        found = match_systemd(message)
        assert found is not None and found[0] is event

    def test_exit_status_is_extracted(self) -> None:
        """Code, status and signal name come out of 'Main process exited'."""
        found = match_systemd("x.service: Main process exited, code=killed, status=9/KILL")
        assert found is not None
        assert dict(found[1]) == {"code": "killed", "status": "9", "name": "KILL"}

    def test_message_id_decides(self) -> None:
        """A MESSAGE_ID picks the row even where the text would be ambiguous."""
        started = next(row for row in SYSTEMD_MARKERS if row.event is SystemdEvent.UNIT_STARTED)
        found = match_systemd("Started vLLM.", started.message_id)
        assert found is not None and found[0] is SystemdEvent.UNIT_STARTED
