"""Startup history arithmetic and the ETA to ready."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime

import pytest

from tests.support.snapshots import at, incarnation
from vllm_sentinel.engine.catalog.phases import Outcome, Phase
from vllm_sentinel.engine.eta import (
    HISTORY_SIZE,
    comparable,
    compare_startup,
    estimate_ready,
    log_remaining_seconds,
    remember,
    same_model,
    startup_record,
    usual_phase_seconds,
)
from vllm_sentinel.engine.snapshot import (
    EtaBasis,
    IncarnationSnapshot,
    Progress,
    ProgressBar,
    StartupRecord,
)

P = Phase
MODEL = "meta-llama/Llama-3.1-8B-Instruct"
OTHER = "Qwen/Qwen3-32B"


def record(
    start: float,
    durations: dict[Phase, float],
    *,
    model: str | None = MODEL,
    id: str | None = None,
) -> StartupRecord:
    """A start at T0 + ``start`` seconds that passed ``durations`` in phase order."""
    total = sum(durations.values())
    return StartupRecord(
        started_at=at(start),
        ready_at=at(start + total),
        phase_seconds=durations,
        invocation_id=id,
        model=model,
    )


FULL = {
    P.STARTING: 10.0,
    P.INITIALIZING: 20.0,
    P.LOADING_WEIGHTS: 300.0,
    P.COMPILING: 60.0,
    P.PROFILING_KV_CACHE: 10.0,
    P.CAPTURING_CUDA_GRAPHS: 30.0,
    P.STARTING_API_SERVER: 5.0,
}


class TestStartupRecord:
    """What an incarnation that reached ready leaves in the history."""

    def test_phase_durations_of_a_whole_start(self) -> None:
        """Each passed phase lasts until the next one began; skipped phases are absent."""
        item = incarnation(
            [
                (P.STARTING, 0),
                (P.INITIALIZING, 10),
                (P.LOADING_WEIGHTS, 30),
                (P.PROFILING_KV_CACHE, 330),
                (P.STARTING_API_SERVER, 340),
                (P.READY, 345),
                (P.STOPPING, 4000),
                (P.STOPPED, 4001),
            ],
            outcome=Outcome.STOPPED,
        )
        got = startup_record(replace(item, start_seen=True))
        assert got is not None
        assert dict(got.phase_seconds) == {
            P.STARTING: 10.0,
            P.INITIALIZING: 20.0,
            P.LOADING_WEIGHTS: 300.0,
            P.PROFILING_KV_CACHE: 10.0,
            P.STARTING_API_SERVER: 5.0,
        }
        assert (got.started_at, got.ready_at, got.startup_seconds) == (at(0), at(345), 345.0)
        assert (got.invocation_id, got.model, got.tensor_parallel_size) == ("inv-1", MODEL, 1)

    def test_not_ready_or_start_unseen_is_not_recorded(self) -> None:
        """A crash before ready, a start still running, or a log read from its middle: none."""
        crashed = incarnation([(P.STARTING, 0), (P.LOADING_WEIGHTS, 5), (P.CRASHED, 9)])
        running = incarnation([(P.STARTING, 0), (P.LOADING_WEIGHTS, 5)])
        ready = incarnation([(P.STARTING, 0), (P.READY, 5)], outcome=Outcome.READY)
        assert startup_record(replace(crashed, start_seen=True)) is None
        assert startup_record(replace(running, start_seen=True)) is None
        assert startup_record(ready) is None  # start_seen False: an excerpt
        assert startup_record(replace(ready, start_seen=True)) is not None


class TestRemember:
    """Adding to a history: once per start, in ready order, bounded."""

    def test_the_same_start_counts_once(self) -> None:
        """Same invocation id, or without ids the same start time: already there."""
        first = record(0, FULL, id="a")
        history = remember((), first)
        assert history == (first,)
        assert remember(history, record(0, {P.STARTING: 1.0}, id="a")) is None
        assert remember(history, record(5, FULL, id="b")) is not None
        plain = remember((), record(0, FULL))
        assert plain is not None and remember(plain, record(0, FULL)) is None

    def test_ordered_by_ready_time_and_bounded(self) -> None:
        """A backfilled older start goes in its place; only the newest HISTORY_SIZE stay."""
        history: tuple[StartupRecord, ...] = ()
        for index in range(HISTORY_SIZE + 5):
            added = remember(history, record(1000.0 * (index + 1), FULL, id=f"id{index}"))
            assert added is not None
            history = added
        assert len(history) == HISTORY_SIZE
        assert history[0].invocation_id == "id5"
        late = remember(history, record(7500, FULL, id="late"))  # between id6 and id7
        assert late is not None
        assert [item.invocation_id for item in late[:3]] == ["id6", "late", "id7"]
        assert remember(history, record(10, FULL, id="ancient")) is None  # older than all kept


class TestBasis:
    """Which starts a new start is compared with, and their usual durations."""

    def test_same_model_first_then_any_model(self) -> None:
        """The model's own starts when there are any, else every start of the unit."""
        mine, other = record(0, FULL), record(1000, FULL, model=OTHER)
        assert comparable((mine, other), MODEL) == ((mine,), True)
        assert comparable((other,), MODEL) == ((other,), False)
        assert comparable((mine, other), None) == ((mine, other), False)
        assert same_model((mine, other), None) == ()

    def test_usual_is_the_median_of_recent_starts_that_passed_the_phase(self) -> None:
        """Median over the newest five that passed it; starts that skipped it do not count."""
        loads = [100.0, 900.0, 200.0, 300.0, 400.0, 500.0]
        records = [record(1000.0 * i, {P.LOADING_WEIGHTS: s}) for i, s in enumerate(loads)]
        records.append(record(9000, {P.STARTING: 3.0}))  # skipped loading (a stub)
        assert usual_phase_seconds(records, P.LOADING_WEIGHTS) == 400.0  # 900 200 300 400 500
        assert usual_phase_seconds(records, P.COMPILING) is None
        assert usual_phase_seconds((), P.LOADING_WEIGHTS) is None


def loading(
    *,
    entered: float = 100.0,
    bar: ProgressBar | None = None,
    model: str | None = MODEL,
    phase: Phase = P.LOADING_WEIGHTS,
    **progress: object,
) -> IncarnationSnapshot:
    """An incarnation in ``phase`` since T0 + ``entered`` with the given progress figures."""
    item = incarnation([(P.STARTING, 0), (P.INITIALIZING, 10), (phase, entered)], model=model)
    return replace(item, progress=Progress(bar=bar, **progress))  # type: ignore[arg-type]


class TestLogRemaining:
    """vLLM's own word on the rest of the current phase."""

    def test_tqdm_remaining_counts_down_from_the_line(self) -> None:
        """'[09:23<29:54, …]' at t: 1794 s left then, 1794 - 60 a minute later; below 0 once
        that time has run out (how long ago: overdue, never "0 s left")."""
        bar = ProgressBar(P.LOADING_WEIGHTS, at(200), 22, 85, 1794.0)
        item = loading(bar=bar)
        assert log_remaining_seconds(item, at(200)) == 1794.0
        assert log_remaining_seconds(item, at(260)) == 1734.0
        assert log_remaining_seconds(item, at(5000)) == 1794.0 - 4800.0  # ran out: overdue

    def test_measured_shard_rate_when_tqdm_says_question_mark(self) -> None:
        """10 → 30 shards in 100 s is 0.2/s: 70 left take 350 s, less the 50 s since."""
        bar = ProgressBar(P.LOADING_WEIGHTS, at(300), 30, 100, None)
        item = loading(
            bar=bar,
            weights_progress_first_at=at(200),
            weights_progress_first_loaded=10,
            weights_progress_at=at(300),
        )
        assert log_remaining_seconds(item, at(350)) == pytest.approx(300.0)

    def test_no_word_from_another_phase_a_complete_bar_or_a_single_reading(self) -> None:
        """A graph bar while loading, a finished bar, or one reading give no estimate."""
        graphs = ProgressBar(P.CAPTURING_CUDA_GRAPHS, at(200), 2, 5, 3.0)
        done = ProgressBar(P.LOADING_WEIGHTS, at(200), 85, 85, 0.0)
        single = ProgressBar(P.LOADING_WEIGHTS, at(200), 3, 85, None)
        for bar in (graphs, done, single):
            assert log_remaining_seconds(loading(bar=bar), at(210)) is None


class TestEstimateReady:
    """The ETA and its basis."""

    def test_history_only(self) -> None:
        """In loading for 100 s of a usual 300: 200 left plus the 105 s of later phases."""
        item = loading(entered=100.0)
        got = estimate_ready(item, (record(-5000, FULL),), at(200))
        assert got is not None
        assert (got.eta_seconds, got.basis) == (305.0, EtaBasis.HISTORY)
        assert got.expected_ready_at == at(505)

    def test_history_counts_down_and_overrun_leaves_the_later_phases(self) -> None:
        """The expected time holds while on schedule; past the usual, only later phases stay."""
        item = loading(entered=100.0)
        history = (record(-5000, FULL),)
        on_time = estimate_ready(item, history, at(300))
        late = estimate_ready(item, history, at(1000))
        assert on_time is not None and on_time.expected_ready_at == at(505)
        assert late is not None and late.eta_seconds == 105.0

    def test_median_of_per_start_remaining(self) -> None:
        """Three earlier starts: the middle one's remaining time."""
        fast = {**FULL, P.LOADING_WEIGHTS: 100.0}
        slow = {**FULL, P.LOADING_WEIGHTS: 900.0}
        history = (record(-9000, fast), record(-6000, FULL), record(-3000, slow))
        got = estimate_ready(loading(entered=100.0), history, at(150))
        assert got is not None and got.eta_seconds == 250.0 + 105.0

    def test_both_vllm_for_this_phase_history_for_the_rest(self) -> None:
        """tqdm says 600 s for the shards; history adds compile, KV, graphs and API server."""
        bar = ProgressBar(P.LOADING_WEIGHTS, at(200), 10, 85, 600.0)
        got = estimate_ready(loading(bar=bar), (record(-5000, FULL),), at(200))
        assert got is not None
        assert (got.eta_seconds, got.basis) == (705.0, EtaBasis.BOTH)

    def test_vllm_only_without_history(self) -> None:
        """No earlier start: the end of the bar, a lower bound."""
        bar = ProgressBar(P.LOADING_WEIGHTS, at(200), 10, 85, 600.0)
        got = estimate_ready(loading(bar=bar), (), at(260))
        assert got is not None
        assert (got.eta_seconds, got.basis) == (540.0, EtaBasis.VLLM)

    def test_a_bar_whose_time_ran_out_is_overdue_not_imminent(self) -> None:
        """tqdm said 3 s left 10 s ago and nothing came since: no ETA of 0 as if imminent, but
        an estimate overdue by 7 s (its time in the past) on vLLM's basis."""
        bar = ProgressBar(P.CAPTURING_CUDA_GRAPHS, at(200), 26, 35, 3.0)
        item = loading(entered=190.0, bar=bar, phase=P.CAPTURING_CUDA_GRAPHS)
        got = estimate_ready(item, (), at(210))
        assert got is not None
        assert (got.eta_seconds, got.overdue_seconds, got.basis) == (None, 7.0, EtaBasis.VLLM)
        assert got.expected_ready_at == at(203)
        on_time = estimate_ready(item, (), at(201))
        assert on_time is not None and (on_time.eta_seconds, on_time.overdue_seconds) == (2.0, None)

    def test_an_overdue_bar_leaves_the_history_basis(self) -> None:
        """With history, a bar that ran out says nothing more: history's rest of the phase (30 s
        usual, 20 spent) and the API server's 5 s."""
        bar = ProgressBar(P.CAPTURING_CUDA_GRAPHS, at(500), 26, 35, 3.0)
        item = loading(entered=490.0, bar=bar, phase=P.CAPTURING_CUDA_GRAPHS)
        got = estimate_ready(item, (record(-5000, FULL),), at(510))
        assert got is not None
        assert (got.eta_seconds, got.overdue_seconds, got.basis) == (15.0, None, EtaBasis.HISTORY)

    def test_history_that_ran_out_in_the_last_phase_is_overdue(self) -> None:
        """In the API server start for 65 s of a usual 5: overdue by 60 s, not 'ready in 0 s'."""
        item = loading(entered=1000.0, phase=P.STARTING_API_SERVER)
        got = estimate_ready(item, (record(-5000, FULL),), at(1065))
        assert got is not None
        assert (got.eta_seconds, got.overdue_seconds, got.basis) == (None, 60.0, EtaBasis.HISTORY)

    def test_other_models_history_when_the_model_is_new(self) -> None:
        """No start of this model: the unit's other starts are the basis; with one, only it."""
        other = record(-9000, {**FULL, P.LOADING_WEIGHTS: 1000.0}, model=OTHER)
        mine = record(-5000, FULL)
        item = loading(entered=100.0)
        only_other = estimate_ready(item, (other,), at(100))
        both = estimate_ready(item, (other, mine), at(100))
        assert only_other is not None and only_other.eta_seconds == 1105.0
        assert both is not None and both.eta_seconds == 405.0

    def test_no_basis_no_estimate(self) -> None:
        """Without history or a bar there is no number; nor when not starting."""
        assert estimate_ready(loading(), (), at(200)) is None
        ready = incarnation([(P.STARTING, 0), (P.READY, 5)], outcome=Outcome.READY)
        assert estimate_ready(ready, (record(-5000, FULL),), at(200)) is None

    def test_no_time_past_year_9999(self) -> None:
        """An estimate that would end after datetime's range is no estimate, not a crash."""
        far = record(-5000, {**FULL, P.COMPILING: 1e8})
        assert estimate_ready(loading(), (far,), datetime(9999, 12, 1, tzinfo=UTC)) is None

    def test_phase_after_the_current_one_only(self) -> None:
        """In CUDA graph capture, loading and compile are behind: 30 - 10 + 5 left."""
        item = loading(entered=500.0, phase=P.CAPTURING_CUDA_GRAPHS)
        got = estimate_ready(item, (record(-5000, FULL),), at(510))
        assert got is not None and got.eta_seconds == 25.0


class TestCompareStartup:
    """A ready start against the earlier ones (replay's comparison)."""

    def test_phases_and_total_against_the_median(self) -> None:
        """Each phase gets the usual seconds; the total the usual startup."""
        earlier = (record(-9000, FULL), record(-5000, {**FULL, P.LOADING_WEIGHTS: 500.0}))
        now = record(0, {**FULL, P.LOADING_WEIGHTS: 900.0})
        got = compare_startup(now, earlier)
        assert got.compared_starts == 2 and got.same_model
        assert got.startup_seconds == 1035.0
        assert got.usual_startup_seconds == pytest.approx(535.0)
        loading_row = next(row for row in got.phases if row.phase is P.LOADING_WEIGHTS)
        assert (loading_row.seconds, loading_row.usual_seconds) == (900.0, 400.0)
        assert [row.phase for row in got.phases] == list(FULL)

    def test_nothing_to_compare(self) -> None:
        """The first start: no usual values."""
        got = compare_startup(record(0, FULL), ())
        assert got.compared_starts == 0 and not got.same_model
        assert got.usual_startup_seconds is None
        assert all(row.usual_seconds is None for row in got.phases)
