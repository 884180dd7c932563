"""The exporter's direct rendering: byte for byte what prometheus_client's encoders write."""

from __future__ import annotations

import dataclasses
import gzip
import io
from collections.abc import Iterable, Iterator
from typing import Any

import pytest
from prometheus_client import Gauge, make_wsgi_app
from prometheus_client.exposition import generate_latest
from prometheus_client.openmetrics.exposition import generate_latest as generate_openmetrics

import vllm_sentinel.serve.exporter as exporter
from tests.support.snapshots import basic_snapshot
from vllm_sentinel.engine.catalog.causes import CrashCause
from vllm_sentinel.engine.snapshot import CrashInfo, Snapshot
from vllm_sentinel.serve.exporter import (
    SentinelCollector,
    SentinelRegistry,
    make_metrics_app,
    make_registry,
    render_exposition,
)
from vllm_sentinel.serve.metrics import METRICS, MetricDefinition, MetricType, Sample

PROMETHEUS_ACCEPT = (
    "application/openmetrics-text;version=1.0.0,application/openmetrics-text;version=0.0.1;"
    "q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1"
)


def _fleet(hosts: int) -> Snapshot:
    base = basic_snapshot()
    host_a = base.hosts[0]
    copies = [
        dataclasses.replace(
            host_a,
            host=f"gpu-{index:03d}",
            units=tuple(
                dataclasses.replace(unit, host=f"gpu-{index:03d}") for unit in host_a.units
            ),
        )
        for index in range(hosts)
    ]
    return Snapshot((*copies, *base.hosts[1:]), base.at)


def _hostile() -> Snapshot:
    """Label text from logs with every character the formats escape, and non-ASCII."""
    base = basic_snapshot()
    host = base.hosts[0]
    unit = host.units[0]
    crash = CrashInfo(
        cause=CrashCause.UNKNOWN,
        exception='weird.Error"\\',
        message='a "quoted" back\\slash\nnew line, tab\t, ünïcode ✓',
        phase=unit.incarnations[0].phase,
        at=None,
        invocation_id=None,
    )
    odd = dataclasses.replace(unit, last_crash=crash)
    return Snapshot(
        (dataclasses.replace(host, units=(odd, *host.units[1:])), *base.hosts[1:]), base.at
    )


def _values(snapshot: Snapshot) -> Iterator[Sample]:
    for value in (0.0, -0.0, 1.0, 0.5, 1e21, 123456789.0, float("inf"), float("-inf"),
                  float("nan"), 7, True, -3.25):  # fmt: skip
        yield (str(value), "x"), value


ODD_VALUES = MetricDefinition(
    "vllm_sentinel_test_values", MetricType.GAUGE, 'Help with "quotes" and \\ too.',
    ("value", "other"), _values,
)  # fmt: skip
ODD_COUNTER = MetricDefinition(
    "vllm_sentinel_test_things_total",
    MetricType.COUNTER,
    "Counted things.",
    (),
    lambda s: [((), 3.0)],
)


@pytest.mark.parametrize(
    ("snapshot", "metrics"),
    [
        (basic_snapshot(), METRICS),
        (_fleet(12), METRICS),
        (_hostile(), METRICS),
        (Snapshot((), basic_snapshot().at), METRICS),
        (basic_snapshot(), (ODD_VALUES, ODD_COUNTER)),
    ],
    ids=["basic", "fleet", "hostile-labels", "empty", "odd-values"],
)
class TestRenderExposition:
    """The direct path gives the same bytes as prometheus_client, in both formats."""

    def test_text_format_is_identical(self, snapshot: Snapshot, metrics: Any) -> None:
        """Text 0.0.4: HELP/TYPE lines, sorted labels, escaping, Go-style floats."""
        registry = make_registry(SentinelCollector(lambda: snapshot, metrics))
        assert isinstance(registry, SentinelRegistry)
        for _ in range(2):  # the second render comes from the prefix and value caches
            assert render_exposition(registry) == generate_latest(registry)

    def test_openmetrics_is_identical(self, snapshot: Snapshot, metrics: Any) -> None:
        """OpenMetrics 1.0.0: counter family names without _total, quoted help, # EOF."""
        registry = make_registry(SentinelCollector(lambda: snapshot, metrics))
        for _ in range(2):
            assert render_exposition(registry, openmetrics=True) == generate_openmetrics(registry)


def test_a_registry_with_another_collector_uses_prometheus_client() -> None:
    """Anything registered besides our collector is still exported (the direct path steps aside)."""
    registry = make_registry(SentinelCollector(basic_snapshot))
    Gauge("other_metric", "Another collector.", registry=registry).set(2)
    output = render_exposition(registry)
    assert b"other_metric 2.0" in output and output == generate_latest(registry)


def _call(
    app: Any, accept: str | None, encoding: str | None, query: str = ""
) -> tuple[str, dict[str, str], bytes]:
    environ: dict[str, Any] = {
        "REQUEST_METHOD": "GET",
        "PATH_INFO": "/metrics",
        "QUERY_STRING": query,
        "wsgi.input": io.BytesIO(),
    }
    if accept is not None:
        environ["HTTP_ACCEPT"] = accept
    if encoding is not None:
        environ["HTTP_ACCEPT_ENCODING"] = encoding
    captured: dict[str, Any] = {}

    def start_response(status: str, headers: list[tuple[str, str]]) -> None:
        captured["status"], captured["headers"] = status, dict(headers)

    body = b"".join(app(environ, start_response))
    if captured["headers"].get("Content-Encoding") == "gzip":
        body = gzip.decompress(body)
    return captured["status"], captured["headers"], body


@pytest.mark.parametrize(
    "accept",
    [None, "", PROMETHEUS_ACCEPT, "application/openmetrics-text", "text/plain;version=1.0.0",
     "text/plain;version=1.0.0;escaping=allow-utf-8", "application/openmetrics-text;version=1.0.0;escaping=dots",
     "application/openmetrics-text;version=0.0.1"],
)  # fmt: skip
@pytest.mark.parametrize("encoding", [None, "gzip"])
def test_metrics_app_answers_as_prometheus_client_does(
    accept: str | None, encoding: str | None
) -> None:
    """Whatever the Accept header: same status, content type and (decompressed) body."""
    registry = make_registry(SentinelCollector(basic_snapshot))
    ours = _call(make_metrics_app(registry), accept, encoding)
    theirs = _call(make_wsgi_app(registry), accept, encoding)
    assert ours[0] == theirs[0]
    assert ours[1].get("Content-Type") == theirs[1].get("Content-Type")
    assert ours[1].get("Content-Encoding") == theirs[1].get("Content-Encoding")
    assert ours[2] == theirs[2]


def test_name_filter_goes_to_prometheus_client() -> None:
    """``?name[]=…`` restricts the families, as prometheus_client's app does."""
    registry = make_registry(SentinelCollector(basic_snapshot))
    query = "name[]=vllm_sentinel_build_info"
    ours = _call(make_metrics_app(registry), None, None, query)
    assert ours == _call(make_wsgi_app(registry), None, None, query)
    assert b"vllm_sentinel_unit_phase" not in ours[2]


def _many_label_sets(snapshot: Snapshot) -> Iterable[Sample]:
    for index in range(50):
        yield (f"message {index} {snapshot.at}",), 1.0


def test_prefix_cache_stays_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    """Label sets that come and go (crash messages) do not pile up in the cache."""
    monkeypatch.setattr(exporter, "_MAX_PREFIXES", 120)
    row = MetricDefinition(
        "vllm_sentinel_test_info", MetricType.GAUGE, "Test.", ("m",), _many_label_sets
    )
    base = basic_snapshot()
    collector = SentinelCollector(lambda: base, (row,))
    for minute in range(10):
        base = dataclasses.replace(base, at=base.at.replace(minute=minute))
        collector.render()
        assert sum(map(len, collector._prefixes)) <= 120 + 50


def test_hosts_republished_unchanged_are_reused_and_changed_ones_rendered_again() -> None:
    """Each host's lines are kept while the Monitor republishes the same ``HostSnapshot``;
    a host replaced, added or removed, and the clock moving, show at the next scrape."""
    fleet = _fleet(3)
    current = [fleet]
    registry = make_registry(SentinelCollector(lambda: current[0]))
    assert render_exposition(registry) == generate_latest(registry)
    hosts = list(fleet.hosts)
    unit = hosts[1].units[0]
    hosts[1] = dataclasses.replace(hosts[1], units=(dataclasses.replace(unit, stalled=True),))
    later = fleet.at.replace(hour=(fleet.at.hour + 1) % 24)
    for changed in (
        Snapshot(tuple(hosts), later),  # one host changed, the clock moved
        Snapshot(tuple(hosts[:1] + hosts[2:]), later),  # one host left
        Snapshot(tuple(reversed(hosts)), later),  # the same hosts in another order
        Snapshot(tuple(hosts), later, fleet.sentinel),
    ):
        current[0] = changed
        for openmetrics, reference in ((False, generate_latest), (True, generate_openmetrics)):
            assert render_exposition(registry, openmetrics=openmetrics) == reference(registry)


def test_rows_that_do_not_read_the_clock_do_not_depend_on_it() -> None:
    """A row without ``reads_clock`` gives the same samples at any ``snapshot.at`` (the
    exporter reuses its per-host lines across scrapes on that promise)."""
    base = basic_snapshot()
    later = dataclasses.replace(base, at=base.at.replace(year=base.at.year + 1))
    for row in METRICS:
        if not row.reads_clock:
            assert list(row.samples(base)) == list(row.samples(later)), row.name
