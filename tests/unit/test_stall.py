"""The stall rule: slow is not stuck."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from vllm_sentinel.phases import Phase
from vllm_sentinel.stall import GpuGrowth, is_stalled

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
