"""The metric table and the collector built over it."""

from __future__ import annotations

import re
import unicodedata
from dataclasses import replace
from datetime import timedelta

import pytest
from prometheus_client import REGISTRY, generate_latest
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.openmetrics.exposition import generate_latest as generate_openmetrics
from prometheus_client.openmetrics.parser import text_string_to_metric_families

from tests.support.snapshots import (
    AT,
    at,
    basic_snapshot,
    incarnation,
    modes_snapshot,
    unit_snapshot,
)
from vllm_sentinel.engine.catalog.causes import CrashCause
from vllm_sentinel.engine.catalog.phases import STARTUP_PHASES, Phase
from vllm_sentinel.engine.decode.journal_json import SKIP_REASONS
from vllm_sentinel.engine.snapshot import CollectorState, CrashInfo, HostSnapshot, Snapshot
from vllm_sentinel.serve.exporter import SentinelCollector, make_registry
from vllm_sentinel.serve.metrics import (
    LABEL_VALUE_LIMIT,
    LOG_LEVELS,
    METRICS,
    MetricDefinition,
    MetricType,
    bound_label,
    metrics_markdown_table,
)
from vllm_sentinel.state.history_store import HISTORY_SKIP_REASON

NAME = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*")
LABEL = re.compile(r"[a-zA-Z_][a-zA-Z0-9_]*")
ROWS = {row.name: row for row in METRICS}

_DAEMON_FAMILIES = ("vllm_sentinel_build_", "vllm_sentinel_config_", "vllm_sentinel_cursor_")


def samples(name: str, snapshot: Snapshot) -> dict[tuple[str, ...], float]:
    """The samples of one row over a snapshot, keyed by label values."""
    out: dict[tuple[str, ...], float] = {}
    for labels, value in ROWS[name].samples(snapshot):
        assert labels not in out, f"duplicate series {labels} in {name}"
        out[labels] = value
    return out


def single_host(*units: object, journal_up: bool = True) -> Snapshot:
    host = HostSnapshot(
        host="h",
        units=units,  # type: ignore[arg-type]
        collectors={"journal": CollectorState(up=journal_up)},
    )
    return Snapshot(hosts=(host,), at=AT)


class TestMetricTable:
    def test_names_are_valid_and_unique(self) -> None:
        """Every name is a valid Prometheus name under our prefix, and appears once."""
        names = [row.name for row in METRICS]
        assert len(names) == len(set(names))
        for name in names:
            assert NAME.fullmatch(name), name
            assert name.startswith("vllm_sentinel_"), name
            assert "__" not in name, name
            GaugeMetricFamily(name, "x")  # prometheus_client's own validation

    def test_counters_end_in_total_and_gauges_do_not(self) -> None:
        """Counters, and only counters, end in ``_total``."""
        for row in METRICS:
            assert row.name.endswith("_total") == (row.type is MetricType.COUNTER), row.name

    def test_help_is_one_sentence_ending_with_a_period(self) -> None:
        """Help text is one line ending with a period."""
        for row in METRICS:
            assert row.help.endswith("."), row.name
            assert "\n" not in row.help, row.name
            assert row.help[0].isupper() or row.help[0].isdigit(), row.name

    def test_subjects_are_the_known_ones(self) -> None:
        """Names follow ``vllm_sentinel_<subject>_…`` with a subject from the style guide."""
        subjects = ("unit_", "gpu_", "collector_", "records_", "build_", "config_", "cursor_")
        for row in METRICS:
            assert row.name.removeprefix("vllm_sentinel_").startswith(subjects), row.name

    def test_units_are_spelled_out(self) -> None:
        """Times end in ``_seconds``, sizes in ``_bytes``; no non-base units."""
        for row in METRICS:
            if "timestamp" in row.name:
                assert row.name.endswith("_timestamp_seconds"), row.name
            if "memory" in row.name or "weights_bytes" in row.name:
                assert row.name.endswith(("_bytes", "_bytes_total")), row.name
            for bad in ("_milliseconds", "_minutes", "_hours", "_mib", "_gib", "_kb", "_percent"):
                assert bad not in row.name, row.name

    def test_host_and_unit_are_the_first_labels(self) -> None:
        """Unit families start with ``host, unit``; host-level families with ``host``; the
        daemon's own (build, config reloads, the state directory) have no host."""
        for row in METRICS:
            if row.name.startswith("vllm_sentinel_unit_"):
                assert row.labels[:2] == ("host", "unit"), row.name
            elif not row.name.startswith(_DAEMON_FAMILIES):
                assert row.labels[0] == "host", row.name
            else:
                assert "host" not in row.labels

    def test_label_names_are_valid(self) -> None:
        """Label names are valid, unique per family and never reserved."""
        for row in METRICS:
            assert len(row.labels) == len(set(row.labels)), row.name
            for label in row.labels:
                assert LABEL.fullmatch(label), (row.name, label)
                assert not label.startswith("__"), (row.name, label)
                assert label not in ("le", "quantile"), (row.name, label)

    def test_info_families_are_gauges_of_value_one(self) -> None:
        """``_info`` families are plain gauges whose every sample is 1."""
        snapshot = basic_snapshot()
        for row in METRICS:
            if row.name.endswith("_info"):
                assert row.type is MetricType.GAUGE
                values = list(samples(row.name, snapshot).values()) or list(
                    samples(row.name, modes_snapshot()).values()  # vLLM 0.33's modes
                )
                assert values, row.name
                assert set(values) == {1.0}, row.name

    def test_every_row_yields_label_values_matching_its_label_names(self) -> None:
        """Each sample carries exactly one string value per label name."""
        snapshot = basic_snapshot()
        for row in METRICS:
            for labels, value in row.samples(snapshot):
                assert len(labels) == len(row.labels), row.name
                assert all(isinstance(item, str) for item in labels), row.name
                assert isinstance(value, float), row.name

    def test_every_family_has_samples_on_the_basic_snapshot(self) -> None:
        """The shared snapshots exercise every row (so the golden files cover them all): the
        basic one, and for vLLM 0.33's modes ``modes_snapshot``."""
        snapshot, modes = basic_snapshot(), modes_snapshot()
        for row in METRICS:
            assert list(row.samples(snapshot)) or list(row.samples(modes)), row.name

    def test_markdown_table_has_one_row_per_family(self) -> None:
        """The docs table lists every family with its type and labels, in table order."""
        lines = metrics_markdown_table().splitlines()
        assert lines[0].startswith("| Metric |")
        body = lines[2:]
        assert len(body) == len(METRICS)
        for line, row in zip(body, METRICS, strict=True):
            assert line.startswith(f"| `{row.name}` | {row.type.value} |")
            assert row.help in line
            for label in row.labels:
                assert f"`{label}`" in line


class TestBoundLabel:
    def test_cuts_to_the_limit(self) -> None:
        """A 10 kB message becomes a 120-character label value."""
        assert len(bound_label("x" * 10_000)) == LABEL_VALUE_LIMIT == 120

    def test_unknown_becomes_empty(self) -> None:
        """``None`` and empty strings are the empty label value."""
        assert bound_label(None) == ""
        assert bound_label("") == ""

    def test_collapses_whitespace_and_control_characters(self) -> None:
        """Newlines, tabs and runs of spaces become single spaces."""
        assert bound_label("  a\nb\t\tc\r\n d ") == "a b c d"

    def test_makes_invalid_unicode_encodable(self) -> None:
        """A lone surrogate (from surrogateescape decoding) never breaks the exposition."""
        value = bound_label("bad \udcff byte")
        value.encode("utf-8")
        assert value.startswith("bad ")

    def test_long_crash_message_is_cut_in_the_exposition(self) -> None:
        """A crash with a 10 kB exception and message exports labels of 120 characters."""
        crash = CrashInfo(
            cause=CrashCause.UNKNOWN,
            exception="E" * 10_000,
            message="m" * 10_000,
            phase=Phase.STARTING,
            at=at(1),
        )
        snapshot = single_host(
            unit_snapshot("h", "u.service", incarnation([(Phase.STARTING, 0)]), last_crash=crash)
        )
        (labels,) = samples("vllm_sentinel_unit_last_crash_info", snapshot)
        assert labels[4] == "E" * 119 + "…"  # 120 characters, the cut marked
        assert labels[5] == "m" * 119 + "…"
        text = generate_latest(make_registry(SentinelCollector(lambda: snapshot))).decode()
        assert max(len(line) for line in text.splitlines()) < 600


class TestSampleValues:
    def test_phase_is_one_hot_over_every_phase(self) -> None:
        """Each unit with an incarnation has one series per phase: the current is 1."""
        got = samples("vllm_sentinel_unit_phase", basic_snapshot())
        expected_current = {
            ("gpu-a", "vllm-llama.service"): Phase.LOADING_WEIGHTS,
            ("gpu-a", "vllm-qwen.service"): Phase.READY,
            ("gpu-b", "vllm-mixtral.service"): Phase.COMPILING,
        }
        assert len(got) == len(expected_current) * len(Phase)
        for (host, unit), current in expected_current.items():
            for phase in Phase:
                assert got[(host, unit, phase.value)] == (1.0 if phase is current else 0.0)

    def test_unit_without_incarnation_has_no_phase_series(self) -> None:
        """A unit with no records yet has no phase, but still has its counters."""
        snapshot = basic_snapshot()
        assert not any(
            key[1] == "vllm-idle.service" for key in samples("vllm_sentinel_unit_phase", snapshot)
        )
        assert (
            samples("vllm_sentinel_unit_starts_total", snapshot)[("gpu-a", "vllm-idle.service")]
            == 0.0
        )

    def test_phase_seconds_is_snapshot_time_minus_phase_entry(self) -> None:
        """Seconds in phase = snapshot.at − when the current phase began."""
        got = samples("vllm_sentinel_unit_phase_seconds", basic_snapshot())
        assert got[("gpu-a", "vllm-llama.service")] == (AT - at(620)).total_seconds() == 1180.0
        assert got[("gpu-a", "vllm-qwen.service")] == (AT - at(135)).total_seconds()
        assert got[("gpu-b", "vllm-mixtral.service")] == (AT - at(400)).total_seconds()

    def test_phase_seconds_follows_the_snapshot_clock(self) -> None:
        """A later snapshot of the same state reports more seconds in phase."""
        snapshot = basic_snapshot()
        later = replace(snapshot, at=snapshot.at + timedelta(seconds=90))
        before = samples("vllm_sentinel_unit_phase_seconds", snapshot)
        after = samples("vllm_sentinel_unit_phase_seconds", later)
        assert {key: after[key] - before[key] for key in before} == dict.fromkeys(before, 90.0)

    def test_phase_seconds_is_never_negative(self) -> None:
        """Log time ahead of the daemon's clock (host skew) gives 0, not a negative age."""
        unit = unit_snapshot("h", "u.service", incarnation([(Phase.STARTING, 3600)]))
        assert samples("vllm_sentinel_unit_phase_seconds", single_host(unit)) == {
            ("h", "u.service"): 0.0
        }

    def test_timestamps_are_unix_seconds(self) -> None:
        """Phase entry and incarnation start are exported as Unix seconds."""
        snapshot = basic_snapshot()
        entered = samples("vllm_sentinel_unit_phase_entered_timestamp_seconds", snapshot)
        started = samples("vllm_sentinel_unit_incarnation_started_timestamp_seconds", snapshot)
        assert entered[("gpu-a", "vllm-llama.service")] == at(620).timestamp()
        assert started[("gpu-a", "vllm-llama.service")] == at(600).timestamp()

    def test_crash_counters_cover_every_cause(self) -> None:
        """Every cause has a series (0 until seen) so ``increase()`` works from the first."""
        got = samples("vllm_sentinel_unit_crashes_total", basic_snapshot())
        llama = {key[2]: value for key, value in got.items() if key[1] == "vllm-llama.service"}
        assert set(llama) == {c.value for c in CrashCause if c is not CrashCause.PENDING}
        assert llama.pop("cuda_oom") == 1.0
        assert set(llama.values()) == {0.0}

    def test_last_crash_info_and_time(self) -> None:
        """The last crash carries cause, phase, exception and message, and its time."""
        snapshot = basic_snapshot()
        (labels,) = samples("vllm_sentinel_unit_last_crash_info", snapshot)
        assert labels[:4] == ("gpu-a", "vllm-llama.service", "cuda_oom", "profiling_kv_cache")
        assert labels[4] == "torch.OutOfMemoryError"
        assert labels[5].startswith("CUDA out of memory.")
        assert samples("vllm_sentinel_unit_last_crash_timestamp_seconds", snapshot) == {
            ("gpu-a", "vllm-llama.service"): at(300).timestamp()
        }

    def test_incarnation_info_uses_empty_strings_for_unknowns(self) -> None:
        """Unknown version, model, id and TP size are empty label values."""
        got = samples("vllm_sentinel_unit_incarnation_info", basic_snapshot())
        assert ("gpu-b", "vllm-mixtral.service", "", "", "", "") in got
        assert (
            "gpu-a",
            "vllm-llama.service",
            "inv-2",
            "0.8.5",
            "meta-llama/Llama-3.1-8B-Instruct",
            "1",
        ) in got

    def test_state_known_follows_the_journal_collector(self) -> None:
        """state_known is 1 where the host's journal collector is up, 0 where it is down."""
        got = samples("vllm_sentinel_unit_state_known", basic_snapshot())
        assert got[("gpu-a", "vllm-llama.service")] == 1.0
        assert got[("gpu-b", "vllm-mixtral.service")] == 0.0
        unit = unit_snapshot("h", "u.service")
        no_state = Snapshot(hosts=(HostSnapshot("h", (unit,)),), at=AT)
        assert samples("vllm_sentinel_unit_state_known", no_state) == {("h", "u.service"): 0.0}

    def test_log_records_cover_every_level(self) -> None:
        """Every level has a series per unit."""
        got = samples("vllm_sentinel_unit_log_records_total", basic_snapshot())
        llama = {key[2]: value for key, value in got.items() if key[1] == "vllm-llama.service"}
        assert llama == {
            "debug": 0.0,
            "info": 120.0,
            "warning": 3.0,
            "error": 7.0,
            "critical": 0.0,
            "none": 40.0,
        }
        assert tuple(llama) == LOG_LEVELS

    def test_progress_figures_come_from_the_current_incarnation(self) -> None:
        """Weights ratio, weights bytes and KV tokens are the current incarnation's."""
        snapshot = basic_snapshot()
        ratio = samples("vllm_sentinel_unit_weights_loaded_ratio", snapshot)
        assert ratio[("gpu-a", "vllm-llama.service")] == 0.25
        weights = samples("vllm_sentinel_unit_model_weights_bytes", snapshot)
        assert ("gpu-a", "vllm-llama.service") not in weights  # only the crashed one knew it
        assert weights[("gpu-a", "vllm-qwen.service")] == 14.25 * 1024**3
        tokens = samples("vllm_sentinel_unit_kv_cache_tokens", snapshot)
        assert tokens == {("gpu-a", "vllm-qwen.service"): 421_632.0}

    def test_last_progress_is_the_later_of_log_and_gpu_growth(self) -> None:
        """GPU memory growth after the last log line counts as progress."""
        got = samples("vllm_sentinel_unit_last_progress_timestamp_seconds", basic_snapshot())
        assert got[("gpu-a", "vllm-llama.service")] == at(1700).timestamp()

    def test_gpu_series(self) -> None:
        """Per-GPU memory and info, and per-unit GPU memory by GPU index."""
        snapshot = basic_snapshot()
        total = samples("vllm_sentinel_gpu_memory_total_bytes", snapshot)
        assert total[("gpu-a", "2", "GPU-aaaaaaaa-0002")] == 80 * 1024**3
        per_unit = samples("vllm_sentinel_unit_gpu_memory_used_bytes", snapshot)
        assert per_unit[("gpu-a", "vllm-qwen.service", "2")] == 70 * 1024**3

    def test_collector_series(self) -> None:
        """Collector health and reconnects per host and collector; skipped records by reason."""
        snapshot = basic_snapshot()
        assert samples("vllm_sentinel_collector_up", snapshot)[("gpu-b", "journal")] == 0.0
        reconnects = samples("vllm_sentinel_collector_reconnects_total", snapshot)
        assert reconnects[("gpu-b", "journal")] == 4.0
        skipped = samples("vllm_sentinel_records_skipped_total", snapshot)
        counted = {"invalid_json": 3.0, "line_too_long": 1.0}
        # every reason of the fixed set is there from the first scrape, 0 until counted
        assert skipped == {
            (host, reason): counted.get(reason, 0.0) if host == "gpu-a" else 0.0
            for host in ("gpu-a", "gpu-b")
            for reason in (*SKIP_REASONS, HISTORY_SKIP_REASON)
        }

    def test_slow_is_one_hot_over_startup_phases(self) -> None:
        """The slow unit has 1 for its current phase only; other units 0 for every phase."""
        slow = samples("vllm_sentinel_unit_slow", basic_snapshot())
        assert {key for key, value in slow.items() if value == 1.0} == {
            ("gpu-a", "vllm-llama.service", "loading_weights")
        }
        phases = {key[2] for key in slow}
        assert phases == {phase.value for phase in STARTUP_PHASES}
        assert len(slow) == 3 * len(STARTUP_PHASES)  # the unit without records has none

    def test_eta_series_carry_the_basis_and_are_absent_without_one(self) -> None:
        """ETA, expected ready time and usual phase duration: only where the snapshot has them."""
        snapshot = basic_snapshot()
        assert samples("vllm_sentinel_unit_startup_eta_seconds", snapshot) == {
            ("gpu-a", "vllm-llama.service", "both"): 420.0
        }
        assert samples("vllm_sentinel_unit_expected_ready_timestamp_seconds", snapshot) == {
            ("gpu-a", "vllm-llama.service", "both"): (AT + timedelta(seconds=420)).timestamp()
        }
        assert samples("vllm_sentinel_unit_phase_usual_seconds", snapshot) == {
            ("gpu-a", "vllm-llama.service"): 120.0
        }

    def test_empty_snapshot_has_only_build_info(self) -> None:
        """Hosts and units absent from the snapshot produce no series."""
        empty = Snapshot(hosts=(), at=AT)
        for row in METRICS:
            got = list(row.samples(empty))
            assert bool(got) == (row.name == "vllm_sentinel_build_info"), row.name


class TestSentinelCollector:
    def test_collect_renders_the_table(self) -> None:
        """The registry answers with the table's values."""
        registry = make_registry(SentinelCollector(basic_snapshot))
        labels = {"host": "gpu-a", "unit": "vllm-llama.service"}
        assert (
            registry.get_sample_value(
                "vllm_sentinel_unit_crashes_total", {**labels, "cause": "cuda_oom"}
            )
            == 1.0
        )
        assert (
            registry.get_sample_value(
                "vllm_sentinel_unit_phase", {**labels, "phase": "loading_weights"}
            )
            == 1.0
        )
        assert registry.get_sample_value("vllm_sentinel_unit_phase_seconds", labels) == 1180.0

    def test_reads_the_snapshot_once_per_scrape(self) -> None:
        """All families of one scrape come from one snapshot."""
        calls: list[int] = []

        def get_snapshot() -> Snapshot:
            calls.append(1)
            return basic_snapshot()

        registry = make_registry(SentinelCollector(get_snapshot))
        assert calls == []  # registering only describes
        generate_latest(registry)
        assert len(calls) == 1

    def test_describe_has_every_family_and_no_samples(self) -> None:
        """describe() names every family without reading a snapshot."""

        def fail() -> Snapshot:
            raise AssertionError("describe must not read the snapshot")

        families = list(SentinelCollector(fail).describe())
        assert [family.samples for family in families] == [[] for _ in METRICS]
        assert len(families) == len(METRICS)

    def test_counter_and_info_names_are_not_doubled(self) -> None:
        """No ``_total_total`` or ``_info_info``: the client_python traps are avoided."""
        text = generate_latest(make_registry(SentinelCollector(basic_snapshot))).decode()
        assert "_total_total" not in text
        assert "_info_info" not in text
        assert "_created" not in text
        assert "# TYPE vllm_sentinel_unit_starts_total counter" in text
        assert "# TYPE vllm_sentinel_unit_incarnation_info gauge" in text
        for row in METRICS:
            assert f"# HELP {row.name} {row.help}\n" in text

    def test_openmetrics_exposition_parses(self) -> None:
        """The OpenMetrics rendering parses back with every family."""
        registry = make_registry(SentinelCollector(basic_snapshot))
        text = generate_openmetrics(registry).decode()
        assert text.endswith("# EOF\n")
        names = {family.name for family in text_string_to_metric_families(text)}
        expected = {
            row.name.removesuffix("_total") if row.type is MetricType.COUNTER else row.name
            for row in METRICS
        }
        assert names == expected

    def test_registry_is_fresh_and_not_global(self) -> None:
        """make_registry never touches the global REGISTRY; each call is independent."""
        collector = SentinelCollector(basic_snapshot)
        first = make_registry(collector)
        second = make_registry(SentinelCollector(basic_snapshot))
        assert first is not REGISTRY
        assert first is not second
        assert REGISTRY.get_sample_value("vllm_sentinel_build_info", {"version": "x"}) is None
        with pytest.raises(ValueError, match="Duplicated"):
            first.register(SentinelCollector(basic_snapshot))

    def test_a_narrowed_table(self) -> None:
        """A collector may render a subset of rows (tests, future feature flags)."""
        row = ROWS["vllm_sentinel_build_info"]
        collector = SentinelCollector(basic_snapshot, metrics=[row])
        families = list(collector.collect())
        assert [family.name for family in families] == [row.name]
        assert isinstance(row, MetricDefinition)


class TestBoundLabelCut:
    MESSAGE = (
        "CUDA out of memory. Tried to allocate 60.00 MiB. GPU 2 has a total capacity of 79.22 "
        "GiB of which 2.06 MiB is free. Process 3888866 has 71.11 GiB memory in use."
    )

    def test_cuts_at_the_last_word_boundary_with_an_ellipsis(self) -> None:
        """A long message ends on a whole word and ``…``, within the limit."""
        value = bound_label(self.MESSAGE)
        assert len(value) <= LABEL_VALUE_LIMIT and value.endswith("…")
        kept = value.removesuffix("…")
        assert self.MESSAGE.startswith(kept) and not kept.endswith(" ")
        assert self.MESSAGE[len(kept)] == " ", "cut inside a word"
        assert value == (
            "CUDA out of memory. Tried to allocate 60.00 MiB. GPU 2 has a total capacity of 79.22 "
            "GiB of which 2.06 MiB is free.…"
        )

    def test_a_value_within_the_limit_is_kept_whole(self) -> None:
        """Exactly the limit: no ellipsis, nothing cut."""
        value = "a " * 59 + "bc"
        assert len(value) == LABEL_VALUE_LIMIT and bound_label(value) == value

    def test_one_long_word_is_cut_at_the_limit(self) -> None:
        """No space to cut at (a path, a hash): cut at the limit, still ``…``."""
        value = bound_label("/" + "x" * 500)
        assert len(value) == LABEL_VALUE_LIMIT and value.endswith("x…")

    @pytest.mark.parametrize(
        "text",
        [
            "显存不足" * 60,  # CJK: no spaces, 3 UTF-8 bytes each
            "e\u0301" * 200,  # e + a combining acute accent: one character, two code points
            "🙂" * 200,  # 4 UTF-8 bytes each
        ],
        ids=["cjk", "combining", "emoji"],
    )
    def test_never_cuts_inside_a_character(self, text: str) -> None:
        """Multi-byte characters and combining marks stay whole, the value valid UTF-8."""
        value = bound_label(text)
        kept = value.removesuffix("…")
        assert len(value) <= LABEL_VALUE_LIMIT and value.endswith("…")
        assert text.startswith(kept)
        assert not unicodedata.combining(text[len(kept)]), "a mark cut off its letter"
        assert value.encode("utf-8").decode("utf-8") == value
