"""Golden tests: every corpus log replayed must give its labelled answers."""

from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from tests.golden.scoring import REFERENCE_YEAR, exception_line, last_crash, replay_file
from vllm_sentinel.engine.catalog.phases import Phase
from vllm_sentinel.engine.report import to_json
from vllm_sentinel.engine.snapshot import UnitSnapshot
from vllm_sentinel.replay import replay

HERE = Path(__file__).parent
LOGS = sorted((HERE / "logs").glob("*.log"))
ORDER = list(Phase)


def check_golden(golden: Path, text: str, *, update: bool) -> None:
    """Compare ``text`` with the golden file; ``update`` (``--update-golden``) (re)writes it.

    A missing golden file fails: a new corpus log passes only once its output was written with
    ``--update-golden`` and the file reviewed in the git diff.
    """
    if update:
        golden.write_text(text)
    elif not golden.exists():
        pytest.fail(
            f"{golden.name} is missing: run pytest tests/golden --update-golden, "
            "review the new file and commit it"
        )
    assert text == golden.read_text()


class TestCheckGolden:
    """The comparison itself: a golden file is reviewed, never made up by the test run."""

    def test_a_missing_golden_file_fails_and_is_not_written(self, tmp_path: Path) -> None:
        """A new corpus log without its ``.replay.json`` fails, naming the option."""
        golden = tmp_path / "999-new.replay.json"
        with pytest.raises(pytest.fail.Exception, match="--update-golden"):
            check_golden(golden, "{}\n", update=False)
        assert not golden.exists()

    def test_update_writes_a_missing_or_different_file(self, tmp_path: Path) -> None:
        """With ``--update-golden`` the file is (re)written and the check passes."""
        golden = tmp_path / "999-new.replay.json"
        check_golden(golden, "{}\n", update=True)
        assert golden.read_text() == "{}\n"
        check_golden(golden, '{"a": 1}\n', update=True)
        assert golden.read_text() == '{"a": 1}\n'

    def test_a_different_document_fails(self, tmp_path: Path) -> None:
        """Without the option a changed output is a failure, and the file is left alone."""
        golden = tmp_path / "999-new.replay.json"
        golden.write_text("{}\n")
        with pytest.raises(AssertionError):
            check_golden(golden, '{"a": 1}\n', update=False)
        assert golden.read_text() == "{}\n"


@pytest.mark.parametrize("log", LOGS, ids=[path.stem for path in LOGS])
class TestCorpus:
    """Replay each real log and compare with the labels that carry no '?'."""

    def test_labelled_answers(self, log: Path) -> None:
        """Furthest phase, outcome, crash cause and root-cause exception match the labels."""
        expected: dict[str, Any] = json.loads(log.with_suffix(".expected.json").read_text())[
            "expect"
        ]
        (unit,) = replay_file(log)
        furthest = max((item.furthest_phase for item in unit.incarnations), key=ORDER.index)
        crash = last_crash(unit)
        current = unit.current
        assert current is not None
        if "furthest_phase" in expected:
            assert furthest.value == expected["furthest_phase"]
        if "outcome" in expected:
            assert current.outcome.value == expected["outcome"]
        if "crash_cause" in expected:
            if expected["crash_cause"] is None:
                assert crash is None, f"unexpected crash: {crash}"
            else:
                assert crash is not None
                assert crash.cause.value == expected["crash_cause"]
        if "root_cause_exception" in expected:
            assert crash is not None
            assert exception_line(crash) == expected["root_cause_exception"]
        if "root_cause_exception_prefix" in expected:
            assert crash is not None
            assert exception_line(crash).startswith(expected["root_cause_exception_prefix"])
        if "vllm_version" in expected:
            assert current.vllm_version == expected["vllm_version"]
        if "tensor_parallel_size" in expected:
            assert current.tensor_parallel_size == expected["tensor_parallel_size"]
        if "incarnations" in expected:
            assert len(unit.incarnations) == expected["incarnations"]

    def test_full_replay_document(self, log: Path, update_golden: bool) -> None:
        """The whole replay JSON equals the reviewed golden file (``--update-golden`` rewrites)."""
        document = to_json(replay_file(log))
        text = json.dumps(document, indent=2, ensure_ascii=False, sort_keys=True) + "\n"
        check_golden(log.with_suffix(".replay.json"), text, update=update_golden)


JOURNALS = sorted((HERE / "journal").glob("*.jsonl"))


def _journal_units(path: Path, until: datetime | None) -> tuple[UnitSnapshot, ...]:
    lines = path.read_bytes().splitlines(keepends=True)
    if until is not None:
        cutoff = int(until.timestamp() * 1_000_000)
        lines = [line for line in lines if int(json.loads(line)["__REALTIME_TIMESTAMP"]) <= cutoff]
    return replay([[b"".join(lines)]], reference_year=REFERENCE_YEAR).units


@pytest.mark.parametrize("journal", JOURNALS, ids=[path.stem for path in JOURNALS])
def test_journal_checkpoints(journal: Path) -> None:
    """Real journalctl JSON: at each checkpoint the incarnations are exactly as expected."""
    expected = json.loads(journal.with_suffix(".expected.json").read_text())
    for checkpoint in expected["checkpoints"]:
        until = datetime.fromisoformat(checkpoint["until"]) if checkpoint["until"] else None
        (unit,) = _journal_units(journal, until)
        # the journal names its machine (_HOSTNAME=llm-two): replay shows it as the host
        assert (unit.unit, unit.host) == (expected["unit"], "llm-two")
        assert len(unit.incarnations) == len(checkpoint["incarnations"])
        for actual, wanted in zip(unit.incarnations, checkpoint["incarnations"], strict=True):
            document = {
                "outcome": actual.outcome.value,
                "phase": actual.phase.value,
                "furthest_phase": actual.furthest_phase.value,
                "benign_errors": actual.benign_errors,
                "vllm_version": actual.vllm_version,
                "tensor_parallel_size": actual.tensor_parallel_size,
                "phase_entered_at": actual.phase_entered_at.isoformat().replace("+00:00", "Z")
                if actual.phase_entered_at
                else None,
                "crash": None
                if actual.crash is None
                else {
                    "cause": actual.crash.cause.value,
                    "exception": actual.crash.exception,
                    "phase": actual.crash.phase.value,
                    "message": actual.crash.message,
                },
            }
            for key, value in wanted.items():
                if key == "crash":
                    assert document["crash"] is not None
                    for crash_key, crash_value in value.items():
                        assert document["crash"][crash_key] == crash_value, crash_key
                else:
                    assert document[key] == value, key
        if "crashes_total" in checkpoint:
            assert {c.value: n for c, n in unit.crashes_total.items()} == checkpoint[
                "crashes_total"
            ]
        for key in ("starts_total", "benign_errors_total"):
            if key in checkpoint:
                assert getattr(unit, key) == checkpoint[key]
