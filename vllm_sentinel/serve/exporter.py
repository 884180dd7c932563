"""The Prometheus collector over the latest snapshot, and its registry (edge).

``SentinelCollector.collect()`` runs on an HTTP server thread: it calls ``get_snapshot()`` once
(the Monitor's ``latest``, a frozen value rebound, never mutated), then builds one family per
row of ``metrics.METRICS``. It does no I/O and takes no locks on live state.

Traps of prometheus_client avoided here: ``CounterMetricFamily`` strips ``_total`` from the
name and adds it back to the sample, so counter rows keep the full name; ``_info`` families are
plain gauges of value 1 (``InfoMetricFamily`` would append a second ``_info``); the one-hot phase
is a plain gauge with a ``phase`` label (``StateSetMetricFamily`` would name the label after the
metric). The registry is a fresh ``CollectorRegistry``, never the global ``REGISTRY``.

Scrapes are rendered by ``render_exposition``, which writes the text formats straight from the
table (byte for byte what prometheus_client's encoders write for these families, checked by
``tests/unit/test_exposition.py``) without building a ``Metric``/``Sample`` object per series:
for 200 hosts × 8 units (~100,000 series) that is ~15× faster. The Monitor republishes a host
that has no news as the same ``HostSnapshot`` object, so each row's lines of each host are kept
as bytes and reused while that object comes back (rows whose samples read the snapshot's clock,
``MetricDefinition.reads_clock``, and rows without a ``host`` label are rendered whole every
scrape; their series' ``name{labels} `` prefixes are kept instead, bounded). Only the hosts that
changed are rendered again; the output is joined as bytes, never as one large ``str`` (a single
non-ASCII character, such as a cut label's ``…``, made that 2–4 bytes a character).
``make_metrics_app`` serves it, and falls back to prometheus_client's own WSGI app for every
request it does not handle itself (``name[]`` filters, other escapings and methods).
"""

from __future__ import annotations

import gzip
import math
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from operator import itemgetter
from types import MappingProxyType
from urllib.parse import parse_qs
from wsgiref.types import StartResponse, WSGIApplication, WSGIEnvironment

from prometheus_client import make_wsgi_app
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.exposition import (
    CONTENT_TYPE_PLAIN_0_0_4,
    choose_encoder,
    gzip_accepted,
)
from prometheus_client.exposition import generate_latest as generate_text
from prometheus_client.openmetrics.exposition import CONTENT_TYPE_LATEST as OPENMETRICS_TYPE
from prometheus_client.openmetrics.exposition import generate_latest as generate_openmetrics
from prometheus_client.registry import Collector, CollectorRegistry
from prometheus_client.utils import floatToGoString

from vllm_sentinel.engine.snapshot import HostSnapshot, Snapshot
from vllm_sentinel.serve.metrics import METRICS, MetricDefinition, MetricType, Sample

__all__ = [
    "SentinelCollector",
    "SentinelRegistry",
    "make_metrics_app",
    "make_registry",
    "render_exposition",
]

_SAME_NAMES = ("underscores", "allow-utf-8")
# Content types (as prometheus_client negotiates them) rendered directly: is it OpenMetrics?
# Our metric and label names are valid legacy names, so "underscores" and "allow-utf-8"
# escapings write them unchanged; any other escaping goes to prometheus_client.
_DIRECT_FORMATS: Mapping[str, bool] = MappingProxyType(
    {
        CONTENT_TYPE_PLAIN_0_0_4: False,
        OPENMETRICS_TYPE: True,
        **{f"text/plain; version=1.0.0; charset=utf-8; escaping={e}": False for e in _SAME_NAMES},
        **{f"{OPENMETRICS_TYPE}; escaping={e}": True for e in _SAME_NAMES},
    }
)
_GZIP_LEVEL = 1  # ~15× faster than gzip's default 9 on a large scrape, ~40% larger
_MAX_PREFIXES = 1 << 18  # series prefixes kept between scrapes (~100,000 in a large fleet)


def _family(row: MetricDefinition) -> GaugeMetricFamily | CounterMetricFamily:
    if row.type is MetricType.COUNTER:
        return CounterMetricFamily(row.name, row.help, labels=row.labels)
    return GaugeMetricFamily(row.name, row.help, labels=row.labels)


class _RowFormat:
    """How one table row is written: its sample name, headers and label order."""

    __slots__ = ("openmetrics_header", "ordered", "sample_name", "template", "text_header")

    def __init__(self, row: MetricDefinition) -> None:
        family = _family(row)  # prometheus_client's own naming (counters: _total trimmed)
        self.sample_name = family.name + "_total" if row.type is MetricType.COUNTER else family.name
        text_name = self.sample_name
        text_help = row.help.replace("\\", r"\\").replace("\n", r"\n")
        self.text_header = (
            f"# HELP {text_name} {text_help}\n# TYPE {text_name} {family.type}\n".encode()
        )
        om_help = _escape(row.help)
        self.openmetrics_header = (
            f"# HELP {family.name} {om_help}\n# TYPE {family.name} {family.type}\n".encode()
        )
        # prometheus_client writes labels sorted by name; ``template % label_values`` (in the
        # row's order, escaped) is a series' "name{labels} "
        order = sorted(range(len(row.labels)), key=lambda index: row.labels[index])
        inner = ",".join(f'{row.labels[index]}="%s"' for index in order)
        self.template = f"{self.sample_name}{{{inner}}} " if row.labels else self.sample_name + " "
        self.ordered: Callable[[Sequence[str]], object] = (
            itemgetter(*order) if order else _no_labels
        )


def _no_labels(labels: Sequence[str]) -> tuple[()]:
    return ()


def _escape(value: str) -> str:
    return value.replace("\\", r"\\").replace("\n", r"\n").replace('"', r"\"")


def _value_text(value: float) -> str:
    """The value as prometheus_client writes it (``floatToGoString``), and a newline."""
    text: str = floatToGoString(value)  # type: ignore[no-untyped-call]
    return text + "\n"


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
        self._formats = tuple(_RowFormat(row) for row in self._metrics)
        # per row: label values → the series' "name{labels} " (label sets repeat every scrape)
        self._prefixes: tuple[dict[tuple[str, ...], str], ...] = tuple({} for _ in self._metrics)
        self._values: dict[float, str] = {}  # value → its text, but 0.0 and 1.0 (see render)
        self._escaped: set[str] = set()  # label values seen that need no escaping
        # per row whose samples are per host (host first label, not reading the clock): host
        # name → (the HostSnapshot rendered, its lines); None for rows rendered whole
        self._blocks: list[dict[str, tuple[HostSnapshot, bytes]] | None] = [
            {} if row.labels[:1] == ("host",) and not row.reads_clock else None
            for row in self._metrics
        ]

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

    def render(self, *, openmetrics: bool = False) -> bytes:
        """The exposition of one snapshot: the text format 0.0.4, or OpenMetrics 1.0.0."""
        snapshot = self._get_snapshot()
        if sum(map(len, self._prefixes)) > _MAX_PREFIXES:
            for cache in self._prefixes:
                cache.clear()  # label sets that come and go (crash messages) must not pile up
        if len(self._values) > _MAX_PREFIXES:
            self._values.clear()
        if len(self._escaped) >= _MAX_PREFIXES:
            self._escaped.clear()
        hosts = snapshot.hosts
        parts: list[bytes] = []
        append = parts.append
        for index, (row, form) in enumerate(zip(self._metrics, self._formats, strict=True)):
            append(form.openmetrics_header if openmetrics else form.text_header)
            blocks = self._blocks[index]
            if blocks is None:  # rendered whole, every scrape
                lines = self._lines(index, row.samples(snapshot))
                append("".join(text for _, text in lines).encode("utf-8"))
                continue
            kept: dict[str, tuple[HostSnapshot, bytes]] = {}
            missed = []
            for host in hosts:
                block = blocks.get(host.host)
                if block is not None and block[0] is host:
                    kept[host.host] = block
                else:
                    missed.append(host)
            if missed:
                fresh = self._host_lines(index, Snapshot(tuple(missed), snapshot.at))
                for host in missed:
                    kept[host.host] = (host, fresh.get(host.host, b""))
            self._blocks[index] = kept  # hosts that left the snapshot are dropped here
            for host in hosts:
                append(kept[host.host][1])
        if openmetrics:
            append(b"# EOF\n")
        return b"".join(parts)

    def _host_lines(self, index: int, snapshot: Snapshot) -> dict[str, bytes]:
        """A per-host row's lines over ``snapshot``, cut by host (its first label)."""
        lines: dict[str, bytes] = {}
        host: str | None = None
        parts: list[str] = []
        for labels, text in self._lines(index, self._metrics[index].samples(snapshot)):
            if labels[0] != host:
                if host is not None:
                    lines[host] = "".join(parts).encode("utf-8")
                host, parts = labels[0], []
            parts.append(text)
        if host is not None:
            lines[host] = "".join(parts).encode("utf-8")
        return lines

    def _lines(self, index: int, samples: Iterable[Sample]) -> Iterator[tuple[Sequence[str], str]]:
        """Each sample of row ``index`` with its line: ``name{labels} value``.

        Rows rendered whole keep each series' prefix (``name{labels} ``) between scrapes; the
        per-host rows keep whole hosts' lines instead, so their prefixes are formatted when a
        host changed (a prefix cache for ~100,000 series held ~25 MB).
        """
        form, values = self._formats[index], self._values
        prefixes = self._prefixes[index] if self._blocks[index] is None else None
        template, ordered, escaped = form.template, form.ordered, self._escaped
        copysign = math.copysign
        for labels, value in samples:
            if prefixes is None:
                if escaped.issuperset(labels):
                    prefix = template % ordered(labels)
                else:
                    prefix = template % ordered(self._escape_all(labels))
            else:
                known = prefixes.get(labels)
                if known is None:
                    known = prefixes[labels] = template % ordered(self._escape_all(labels))
                prefix = known
            # floatToGoString, with the one-hot values (most series) short-cut
            if value == 1.0:
                yield labels, prefix + "1.0\n"
            elif value == 0.0 and copysign(1.0, value) > 0:
                yield labels, prefix + "0.0\n"
            else:  # timestamps, bytes: most repeat from scrape to scrape
                text = values.get(value)
                if text is None:
                    text = _value_text(value)
                    if not math.isnan(value):  # NaN is never found again: not kept
                        values[value] = text
                yield labels, prefix + text

    def _escape_all(self, labels: Sequence[str]) -> tuple[str, ...]:
        """``labels`` escaped; those that need no escaping are remembered (bounded set)."""
        escaped = tuple(map(_escape, labels))
        if len(self._escaped) < _MAX_PREFIXES:
            kept = (value for value, done in zip(labels, escaped, strict=True) if value == done)
            self._escaped.update(kept)
        return escaped


class SentinelRegistry(CollectorRegistry):
    """A registry holding one ``SentinelCollector``, which it can render directly."""

    def __init__(self, collector: SentinelCollector) -> None:
        super().__init__(auto_describe=False)
        self.collector = collector
        self.register(collector)
        self._only_ours = True

    def register(self, collector: Collector) -> None:
        """Register a collector (any other than ours turns the direct rendering off)."""
        super().register(collector)
        if collector is not getattr(self, "collector", None):
            self._only_ours = False

    def render(self, *, openmetrics: bool = False) -> bytes | None:
        """The exposition, or ``None`` when other collectors need prometheus_client's encoder."""
        return self.collector.render(openmetrics=openmetrics) if self._only_ours else None


def render_exposition(registry: CollectorRegistry, *, openmetrics: bool = False) -> bytes:
    """Render ``registry`` as prometheus_client would (direct when it is a SentinelRegistry)."""
    if isinstance(registry, SentinelRegistry):
        direct = registry.render(openmetrics=openmetrics)
        if direct is not None:
            return direct
    encode = generate_openmetrics if openmetrics else generate_text
    output: bytes = encode(registry)  # type: ignore[no-untyped-call, unused-ignore]
    return output


def make_registry(collector: Collector) -> CollectorRegistry:
    """Make a fresh registry holding only ``collector`` (never the global one)."""
    if isinstance(collector, SentinelCollector):
        return SentinelRegistry(collector)
    registry = CollectorRegistry(auto_describe=False)
    registry.register(collector)
    return registry


def make_metrics_app(registry: CollectorRegistry) -> WSGIApplication:
    """The ``/metrics`` WSGI app: prometheus_client's, with GETs rendered directly.

    The format is chosen as prometheus_client chooses it (``Accept``); gzip when accepted
    (level 1). Anything else (other methods, ``name[]`` filters, newer escapings) goes to
    prometheus_client's own app unchanged.
    """
    fallback: WSGIApplication = make_wsgi_app(registry)
    if not isinstance(registry, SentinelRegistry):
        return fallback

    def app(environ: WSGIEnvironment, start_response: StartResponse) -> Iterable[bytes]:
        if environ.get("REQUEST_METHOD") != "GET" or environ.get("PATH_INFO") == "/favicon.ico":
            return fallback(environ, start_response)
        if "name[]" in parse_qs(environ.get("QUERY_STRING", "")):
            return fallback(environ, start_response)
        _, content_type = choose_encoder(environ.get("HTTP_ACCEPT", ""))
        openmetrics = _DIRECT_FORMATS.get(content_type)
        if openmetrics is None:
            return fallback(environ, start_response)
        output = registry.render(openmetrics=openmetrics)
        if output is None:
            return fallback(environ, start_response)
        headers = [("Content-Type", content_type)]
        if gzip_accepted(environ.get("HTTP_ACCEPT_ENCODING", "")):
            output = gzip.compress(output, compresslevel=_GZIP_LEVEL)
            headers.append(("Content-Encoding", "gzip"))
        start_response("200 OK", headers)
        return [output]

    return app
