"""replay compares each start that reached ready with the earlier ones, and gives an ETA.

Corpus log 103 (vLLM 0.22.1, docker, gemma-4-E4B) is one whole start that becomes ready at
08:56:59; fed twice, the second copy is a second start with the first as its history.
"""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

from vllm_sentinel.engine.catalog.phases import Phase
from vllm_sentinel.engine.report import render_text, to_json
from vllm_sentinel.engine.snapshot import EtaBasis, UnitSnapshot
from vllm_sentinel.replay import replay

LOG = (
    Path(__file__).parents[1]
    / "golden/logs/103-docker-v0.22.1-full-startup-compile-graphs-ready.log"
)
READY = datetime(2026, 6, 7, 8, 56, 59, tzinfo=UTC)
CUT = 38  # the copy ends at 08:56:00 in loading_weights (shards loaded, 3 s into the phase)


def _replay(*parts: bytes) -> UnitSnapshot:
    (unit,) = replay([[b"".join(parts)]], reference_year=2026).units
    return unit


def _head(lines: int) -> bytes:
    return b"".join(LOG.read_bytes().splitlines(keepends=True)[:lines])


class TestComparison:
    """A start that reached ready, against the earlier ones of the same input."""

    def test_the_first_start_has_nothing_to_compare_with(self) -> None:
        """One start: its startup is shown, with no usual values."""
        unit = _replay(LOG.read_bytes())
        (item,) = to_json([unit])["units"][0]["incarnations"]
        startup = item["startup"]
        assert startup["seconds"] == 125.0 and startup["compared_starts"] == 0
        assert startup["usual_seconds"] is None
        assert [row["phase"] for row in startup["phases"]] == [
            phase.value for phase in list(Phase)[:7]
        ]
        text = render_text([unit])
        assert "startup 2m05s: no earlier start in this input to compare with" in text

    def test_a_second_start_against_the_first(self) -> None:
        """Each phase beside the usual; the startup against the median of earlier starts."""
        unit = _replay(LOG.read_bytes(), LOG.read_bytes())
        first, second = to_json([unit])["units"][0]["incarnations"]
        assert first["startup"]["compared_starts"] == 0
        startup = second["startup"]
        assert (startup["compared_starts"], startup["same_model"]) == (1, True)
        assert startup["usual_seconds"] == startup["seconds"] == 125.0
        loading = next(row for row in startup["phases"] if row["phase"] == "loading_weights")
        assert loading == {"phase": "loading_weights", "seconds": 3.0, "usual_seconds": 3.0}
        text = render_text([unit])
        assert "loading_weights        3s        usual 3s" in text
        assert "startup 2m05s against a usual 2m05s (median of 1 earlier start of this model)" in (
            text
        )


class TestEta:
    """An unfinished start at the end of input: its ETA from the earlier ones."""

    def test_unfinished_start_gets_the_eta_of_its_history(self) -> None:
        """3 s into a usual 3 s load (`Model loading took` ends it), 59 s of later phases:
        ready in 59 s, at 08:56:59."""
        unit = _replay(LOG.read_bytes(), _head(CUT))
        assert unit.current is not None and unit.current.phase is Phase.LOADING_WEIGHTS
        assert (unit.eta_seconds, unit.eta_basis) == (59.0, EtaBasis.HISTORY)
        assert unit.expected_ready_at == READY
        assert unit.usual_phase_seconds == 3.0 and not unit.slow
        document = to_json([unit])["units"][0]
        assert document["eta_seconds"] == 59.0
        assert document["expected_ready_at"] == "2026-06-07T08:56:59"  # text: no zone
        assert document["eta_basis"] == "history"
        assert document["incarnations"][1]["startup"] is None
        assert (
            "    eta: ready in about 59s at 2026-06-07 08:56:59, as the log ends (basis history)"
            in (render_text([unit]))
        )

    def test_no_history_no_eta(self) -> None:
        """The same unfinished start alone: no basis, no ETA line, no number."""
        unit = _replay(_head(CUT))
        assert (unit.eta_seconds, unit.expected_ready_at, unit.eta_basis) == (None, None, None)
        assert "eta:" not in render_text([unit])
        assert to_json([unit])["units"][0]["eta_seconds"] is None


class TestTheEndOfTheLog:
    """Corpus 101: a start crashed, the restart became ready on the log's last line."""

    LOG_101 = LOG.parents[0] / "101-journald-v0.15.1-boot-kv-too-small-restart-then-ready.log"

    def test_ready_on_the_last_line_is_not_ready_for_0s(self) -> None:
        text = render_text(replay([[self.LOG_101.read_bytes()]]).units)
        assert "verdict: ready (the log ends here)" in text
        assert "ready for 0s" not in text

    def test_earlier_starts_that_never_became_ready_are_said_so(self) -> None:
        """Two earlier incarnations (a stop, a crash), none became ready with its start seen."""
        text = render_text(replay([[self.LOG_101.read_bytes()]]).units)
        assert "startup 31s: no earlier start in this input that became ready" in text
        assert "to compare with" not in text


class TestEndedPhase:
    """A phase a line said ended is never slow: the next one is under way (markers.PHASE_ENDS)."""

    def test_after_model_loading_took_loading_is_not_slow(self) -> None:
        """Five minutes after `Model loading took` (a long Dynamo trace, no compile line yet),
        against a usual 3 s load: not slow in loading; the ETA counts the time against the
        later phases (59 s of them, all spent: overdue)."""
        waiting = (
            b"(APIServer pid=1) INFO 06-07 09:01:00 [utils.py:807] Waiting for 1 local, 0 "
            b"remote core engine proc(s) to start.\n"
        )
        unit = _replay(LOG.read_bytes(), _head(CUT), waiting)
        assert unit.current is not None and unit.current.phase is Phase.LOADING_WEIGHTS
        assert unit.usual_phase_seconds == 3.0
        assert not unit.slow
        assert unit.eta_seconds is None and unit.eta_overdue_seconds == 241.0
