"""Golden tests on made-up logs of shapes the corpus lacks: each replay gives its answers.

``synthetic/NNN-slug.log`` (or ``.jsonl``, journalctl JSON) beside ``NNN-slug.expected.json``:
``incarnations`` lists, in order, what each incarnation must show (only the keys given are
compared; ``phases`` is the list of phases entered, ``crash.message_prefix`` the start of the
root-cause message, ``modes`` the given keys of its ``RuntimeModes``), plus unit-wide
``starts_total``, ``crashes_total`` and ``unit`` (attributes of the ``UnitSnapshot``: stalled,
stall_reason…). Whatever the file says, every phase of every incarnation must have a time and no timeline may go back in time.
"""

from __future__ import annotations

import dataclasses
import json
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from tests.golden.scoring import replay_file
from vllm_sentinel.engine.snapshot import IncarnationSnapshot, UnitSnapshot

HERE = Path(__file__).parent / "synthetic"
CASES = sorted(path for path in HERE.iterdir() if path.suffix in (".log", ".jsonl"))


def _unit(path: Path) -> UnitSnapshot:
    (unit,) = replay_file(path)
    return unit


def _iso(value: Any) -> str | None:
    return value.isoformat().replace("+00:00", "Z") if value is not None else None


def _document(incarnation: IncarnationSnapshot) -> dict[str, Any]:
    crash = incarnation.crash
    return {
        "outcome": incarnation.outcome.value,
        "phase": incarnation.phase.value,
        "furthest_phase": incarnation.furthest_phase.value,
        "phases": [entry.phase.value for entry in incarnation.phases],
        "started_at": _iso(incarnation.started_at),
        "ended_at": _iso(incarnation.ended_at),
        "vllm_version": incarnation.vllm_version,
        "tensor_parallel_size": incarnation.tensor_parallel_size,
        "pids": list(incarnation.pids),
        "modes": {
            f.name: getattr(incarnation.modes, f.name)
            for f in dataclasses.fields(incarnation.modes)
        },
        "crash": None
        if crash is None
        else {
            "cause": crash.cause.value,
            "exception": crash.exception,
            "phase": crash.phase.value,
            "message": crash.message,
        },
    }


@pytest.mark.parametrize("log", CASES, ids=[path.stem for path in CASES])
class TestSynthetic:
    """Replay each made-up log."""

    def test_expected_incarnations(self, log: Path) -> None:
        """Each incarnation shows what the expected file lists, in order."""
        expected = json.loads(log.with_suffix(".expected.json").read_text())
        unit = _unit(log)
        assert len(unit.incarnations) == len(expected["incarnations"])
        for index, (actual, wanted) in enumerate(
            zip(unit.incarnations, expected["incarnations"], strict=True)
        ):
            document = _document(actual)
            for key, value in wanted.items():
                if key == "modes":  # vLLM 0.33's modes (runtime_modes): the keys given
                    modes = {
                        name: _iso(item) if isinstance(item, datetime) else item
                        for name, item in document["modes"].items()
                    }
                    assert {name: modes[name] for name in value} == value, index
                    continue
                if key != "crash" or value is None:
                    assert document[key] == value, (index, key)
                    continue
                assert document["crash"] is not None, index
                for crash_key, crash_value in value.items():
                    if crash_key == "message_prefix":
                        assert document["crash"]["message"].startswith(crash_value), index
                    else:
                        assert document["crash"][crash_key] == crash_value, (index, crash_key)
        for key, value in expected.get("unit", {}).items():  # unit-wide verdicts (vllm2026)
            assert getattr(unit, key) == value, key
        if "starts_total" in expected:
            assert unit.starts_total == expected["starts_total"]
        if "crashes_total" in expected:
            assert {c.value: n for c, n in unit.crashes_total.items()} == expected["crashes_total"]

    def test_timelines_have_times_and_go_forward(self, log: Path) -> None:
        """Every phase has a time; phases, ends and successive starts never go back."""
        unit = _unit(log)
        starts = []
        for incarnation in unit.incarnations:
            times = [entry.entered_at for entry in incarnation.phases]
            assert all(time is not None for time in times), incarnation.phases
            assert times == sorted(times), incarnation.phases  # type: ignore[type-var]
            if incarnation.ended_at is not None:
                assert incarnation.ended_at == times[-1]
            starts.append(incarnation.started_at)
        assert starts == sorted(starts)  # type: ignore[type-var]
