"""The stall rule: slow is not stuck."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from vllm_sentinel.engine.catalog.phases import Phase
from vllm_sentinel.engine.stall import GpuGrowth, is_slow, is_stalled

T0 = datetime(2026, 11, 28, 23, 37, 52, tzinfo=UTC)
MIN = timedelta(minutes=1)


class TestRule:
    """is_stalled over phases, log progress and GPU growth."""

    def test_silent_and_flat_past_threshold_is_stalled(self) -> None:
        """Ten minutes without a line or memory growth in loading_weights is a stall."""
        assert is_stalled(Phase.LOADING_WEIGHTS, T0, T0, T0 + 11 * MIN)
        assert not is_stalled(Phase.LOADING_WEIGHTS, T0, T0, T0 + 9 * MIN)

    def test_gpu_growth_is_progress(self) -> None:
        """A silent load that keeps filling GPU memory is not stalled."""
        assert not is_stalled(Phase.LOADING_WEIGHTS, T0, T0 + 8 * MIN, T0 + 15 * MIN)

    def test_ready_and_ended_are_never_stalled(self) -> None:
        """Only startup phases are watched."""
        for phase in (Phase.READY, Phase.CRASHED, Phase.STOPPED, Phase.STOPPING):
            assert not is_stalled(phase, T0, T0, T0 + 60 * MIN)

    def test_thresholds_are_per_phase(self) -> None:
        """compile gets 15 minutes by default, and overrides apply."""
        assert not is_stalled(Phase.COMPILING, T0, T0, T0 + 14 * MIN)
        assert is_stalled(Phase.COMPILING, T0, T0, T0 + 14 * MIN, {Phase.COMPILING: 60})


class TestSlowRule:
    """is_slow: past factor x usual and the floor over usual; nothing without history."""

    def test_factor_applies_to_long_phases(self) -> None:
        """A load that usually takes 10 minutes is slow after 15, not before."""
        usual = 600.0
        assert not is_slow(Phase.LOADING_WEIGHTS, T0, usual, T0 + 15 * MIN)
        assert is_slow(Phase.LOADING_WEIGHTS, T0, usual, T0 + 15 * MIN + timedelta(seconds=1))

    def test_floor_applies_to_short_phases(self) -> None:
        """A 4 s phase is not slow at 7 s (1.75x): it needs 64 s, the usual plus the floor."""
        assert not is_slow(Phase.STARTING_API_SERVER, T0, 4.0, T0 + timedelta(seconds=7))
        assert not is_slow(Phase.STARTING_API_SERVER, T0, 4.0, T0 + timedelta(seconds=64))
        assert is_slow(Phase.STARTING_API_SERVER, T0, 4.0, T0 + timedelta(seconds=65))

    def test_configured_factor_and_floor(self) -> None:
        """factor 2 and floor 0: a 100 s phase is slow after 200 s."""
        assert not is_slow(Phase.COMPILING, T0, 100.0, T0 + 200 * timedelta(seconds=1), 2.0, 0.0)
        assert is_slow(Phase.COMPILING, T0, 100.0, T0 + 201 * timedelta(seconds=1), 2.0, 0.0)

    def test_no_history_or_not_starting_is_never_slow(self) -> None:
        """Without a usual duration, or in ready/ended phases, nothing is slow."""
        assert not is_slow(Phase.LOADING_WEIGHTS, T0, None, T0 + 600 * MIN)
        assert not is_slow(Phase.LOADING_WEIGHTS, None, 10.0, T0 + 600 * MIN)
        for phase in (Phase.READY, Phase.STOPPING, Phase.CRASHED):
            assert not is_slow(phase, T0, 10.0, T0 + 600 * MIN)


class TestGpuGrowth:
    """Growth above the threshold moves the reference; drops lower it."""

    def test_growth_steps(self) -> None:
        """Only rises of at least min_growth_bytes count."""
        growth = GpuGrowth(min_growth_bytes=256 << 20)
        assert not growth.update(1 << 30, T0)
        assert not growth.update((1 << 30) + (100 << 20), T0 + MIN)
        assert growth.update((1 << 30) + (300 << 20), T0 + 2 * MIN)
        assert growth.last_growth_at == T0 + 2 * MIN
        assert not growth.update(0, T0 + 3 * MIN)
        assert growth.reference_bytes == 0
