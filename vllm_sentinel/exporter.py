"""The Prometheus collector over the latest snapshot, and its registry (edge).

``SentinelCollector.collect()`` runs on an HTTP server thread: it calls ``get_snapshot()`` once
(the Monitor's ``latest``, a frozen value rebound, never mutated), then builds one family per
row of ``metrics.METRICS``. It does no I/O and takes no locks on live state.

Traps of prometheus_client avoided here: ``CounterMetricFamily`` strips ``_total`` from the
name and adds it back to the sample, so counter rows keep the full name; ``_info`` families are
plain gauges of value 1 (``InfoMetricFamily`` would append a second ``_info``); the one-hot phase
is a plain gauge with a ``phase`` label (``StateSetMetricFamily`` would name the label after the
metric). The registry is a fresh ``CollectorRegistry``, never the global ``REGISTRY``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector, CollectorRegistry

from vllm_sentinel.metrics import METRICS, MetricDefinition, MetricType
from vllm_sentinel.snapshot import Snapshot

__all__ = ["SentinelCollector", "make_registry"]


def _family(row: MetricDefinition) -> GaugeMetricFamily | CounterMetricFamily:
    if row.type is MetricType.COUNTER:
        return CounterMetricFamily(row.name, row.help, labels=row.labels)
    return GaugeMetricFamily(row.name, row.help, labels=row.labels)


class SentinelCollector(Collector):
    """A prometheus_client collector that renders the metric table over a snapshot.

    Args:
        get_snapshot: returns the snapshot to render (called once per scrape).
        metrics: the rows to render; the full table unless a test narrows it.
    """

    def __init__(
        self,
        get_snapshot: Callable[[], Snapshot],
        metrics: Sequence[MetricDefinition] = METRICS,
    ) -> None:
        self._get_snapshot = get_snapshot
        self._metrics = tuple(metrics)

    def collect(self) -> Iterator[Metric]:
        """Yield every family with its samples, all read from one snapshot."""
        snapshot = self._get_snapshot()
        for row in self._metrics:
            family = _family(row)
            for labels, value in row.samples(snapshot):
                family.add_metric(labels, value)
            yield family

    def describe(self) -> Iterator[Metric]:
        """Yield every family without samples (names only, for the registry)."""
        for row in self._metrics:
            yield _family(row)


def make_registry(collector: Collector) -> CollectorRegistry:
    """Make a fresh registry holding only ``collector`` (never the global one)."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(collector)
    return registry
