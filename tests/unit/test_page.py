"""The status page's HTML, rendered from /status documents: what a person reads, escaped."""

from __future__ import annotations

import json
import re
from dataclasses import replace
from datetime import timedelta
from html.parser import HTMLParser
from importlib import resources
from pathlib import Path
from typing import Any

import pytest

from tests.support.snapshots import AT, at, basic_snapshot, incarnation
from vllm_sentinel.engine.catalog.causes import CrashCause
from vllm_sentinel.engine.catalog.phases import Outcome, Phase
from vllm_sentinel.engine.report import status_document
from vllm_sentinel.engine.snapshot import CrashInfo, EtaBasis, Snapshot, UnitHealth
from vllm_sentinel.serve.page import render_main, render_page

ROOT = Path(__file__).resolve().parents[2]
DASHBOARD = ROOT / "deploy" / "grafana" / "vllm-sentinel.json"
STATIC = resources.files("vllm_sentinel.serve").joinpath("static")
HIDDEN = ("script", "style", "title", "progress")  # a progress bar's text is its fallback
BLOCKS = ("td", "th", "div", "p", "li", "h2", "span", "tr", "section")
HOSTILE = "<script>alert('x')</script><img src=x onerror=alert(1)>"

# Grafana's named colours as its themes draw them (grafana packages/grafana-data
# src/themes/createVisualizationColors.ts, getDarkHues / getLightHues); hex colours are used as
# they are. Only the names the dashboard uses for phases.
GRAFANA = {
    "super-light-blue": ("#8ab8ff", "#c0d8ff"),
    "light-blue": ("#5794f2", "#8ab8ff"),
    "blue": ("#3274d9", "#5794f2"),
    "super-light-purple": ("#ca95e5", "#deb6f2"),
    "light-purple": ("#b877d9", "#ca95e5"),
    "purple": ("#a352cc", "#b877d9"),
    "yellow": ("#f2cc0c", "#fade2a"),
    "green": ("#56a64b", "#73bf69"),
    "red": ("#e02f44", "#f2495c"),
}


def document(snapshot: Snapshot | None = None) -> dict[str, Any]:
    return status_document(snapshot or basic_snapshot())


def text_of(markup: str) -> str:
    """The visible text, whitespace collapsed (what a person reads without styles)."""

    class Text(HTMLParser):
        def __init__(self) -> None:
            super().__init__()
            self.parts: list[str] = []
            self.skip = 0

        def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
            self.skip += tag in HIDDEN
            if tag in BLOCKS:
                self.parts.append(" ")

        def handle_endtag(self, tag: str) -> None:
            self.skip -= tag in HIDDEN

        def handle_data(self, data: str) -> None:
            if not self.skip:
                self.parts.append(data)

    parser = Text()
    parser.feed(markup)
    return " ".join("".join(parser.parts).split())


def tags(markup: str, name: str) -> list[dict[str, str | None]]:
    """The attributes of every ``name`` element."""

    class Tags(HTMLParser):
        def __init__(self) -> None:
            super().__init__()
            self.found: list[dict[str, str | None]] = []

        def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
            if tag == name:
                self.found.append(dict(attrs))

    parser = Tags()
    parser.feed(markup)
    return parser.found


def row(markup: str, unit: str) -> str:
    """The ``<tr>`` of one unit."""
    found = re.search(rf'<tr data-key="unit:[^"]*/{re.escape(unit)}".*?</tr>', markup, re.DOTALL)
    assert found, f"no row for {unit}"
    return found.group(0)


class TestWhatAPersonSees:
    def test_loading_unit_shows_its_progress(self) -> None:
        """Phase (slower than usual), a progress bar with the shards and the ETA, time in
        phase, GPU memory, model facts."""
        llama = row(render_main(document()), "vllm-llama.service")
        assert tags(llama, "progress") == [{"max": "4", "value": "1"}]
        assert text_of(llama).startswith(
            "vllm-llama.service meta-llama/Llama-3.1-8B-Instruct · vLLM 0.8.5 · TP=1 "
            "loading_weights slow 1/4 shards (25%) ETA 7m00s · ready at 12:37:00 UTC, this "
            "phase's bar, then earlier starts 19m40s "
            "12.0 GiB on 2 GPUs"
        )
        assert 'class="phase phase-loading_weights"' in llama

    def test_crashed_unit_shows_cause_exception_and_hint(self) -> None:
        """The last crash: cause linked to its runbook section, exception, message, fix."""
        llama = row(render_main(document()), "vllm-llama.service")
        links = [attrs["href"] for attrs in tags(llama, "a")]
        assert links == ["runbook#cuda_oom"]  # the daemon's own /runbook, relative to the page
        assert (
            "cuda_oom in profiling_kv_cache, 25m00s ago torch.OutOfMemoryError: CUDA out of "
            "memory. Tried to allocate 2.00 GiB." in text_of(llama)
        )
        assert "Fix: GPU 0 had 1.12 GiB free of 79.10 GiB when 2.00 GiB more was asked." in (
            text_of(llama)
        )
        assert "<code>--max-num-seqs</code>" in llama  # commands in the hint set as code

    def test_collector_down_is_said_plainly(self) -> None:
        """The host's journal and GPU collectors are down: how long, why, and what it means."""
        main = render_main(document())
        text = text_of(main)
        assert (
            "gpu-b journal: DOWN for 10m00s (cannot connect over SSH) gpu: DOWN for 10m00s "
            "(cannot connect over SSH) The journal collector is down: the phases below are the "
            "last known" in text
        )
        mixtral = row(main, "vllm-mixtral.service")
        assert "compiling stalled last known" in text_of(mixtral)
        assert "2 collectors down" in text

    def test_summary_and_title_count_what_matters(self) -> None:
        """Hosts, units, crashed, stalled, ready; the title counts crashed units."""
        snapshot = basic_snapshot()
        host = snapshot.hosts[0]
        llama = host.units[0]
        crash = CrashInfo(llama.last_crash.cause, "E", "m", Phase.LOADING_WEIGHTS, AT)  # type: ignore[union-attr]
        current = replace(llama.incarnations[-1], phase=Phase.CRASHED, crash=crash)
        current = replace(
            current, phases=(*current.phases, replace(current.phases[-1], phase=Phase.CRASHED))
        )
        crashed = replace(llama, incarnations=(llama.incarnations[0], current))
        snapshot = Snapshot(
            (replace(host, units=(crashed, *host.units[1:])), snapshot.hosts[1]), AT
        )
        page = render_page(document(snapshot), version="9.9")
        assert "<title>(1 crashed) vllm-sentinel</title>" in page
        assert "2 hosts · 4 units · 1 crashed · 1 stalled · 1 ready · 2 collectors down" in (
            text_of(page)
        )

    def test_starts_and_crashes_of_the_last_day(self) -> None:
        """From the document's 24 h counts; a capped count shows as a floor."""
        doc = document()
        doc["units"][0] |= {"starts_last_24h": 7, "crashes_last_24h": 3}
        doc["units"][1] |= {
            "starts_last_24h": 100,
            "crashes_last_24h": 100,
            "last_24h_capped": True,
        }
        main = render_main(doc)
        assert "7 starts · 3 crashes" in text_of(row(main, "vllm-llama.service"))
        assert "100+ starts · 100+ crashes" in text_of(row(main, "vllm-qwen.service"))

    def test_a_host_without_units_says_so(self) -> None:
        """A configured host whose units never logged is still listed."""
        doc = document()
        doc["units"] = [unit for unit in doc["units"] if unit["host"] != "gpu-b"]
        assert "gpu-b journal: DOWN" in text_of(render_main(doc))
        assert "No unit seen yet on this host." in text_of(render_main(doc))


class TestFactsThatMayComeLater:
    """Fields other work adds to the document (ETA, slow) render when present, one row each."""

    def test_eta_shows_when_the_document_has_it(self) -> None:
        """An ETA (unit or progress level) and the expected ready time next to the bar."""
        doc = document()
        for unit in doc["units"]:  # the basic snapshot's loading unit has an ETA: none here
            unit.pop("eta_seconds", None)
            unit.pop("expected_ready_at", None)
        assert "ETA" not in text_of(render_main(doc))
        doc["units"][0]["eta_seconds"] = 270.0
        doc["units"][0]["incarnations"][-1]["progress"]["expected_ready_at"] = (
            "2025-03-01T12:34:30Z"
        )
        text = text_of(row(render_main(doc), "vllm-llama.service"))
        assert "1/4 shards (25%) ETA 4m30s · ready at 12:34:30 UTC, this phase's bar" in text

    def test_no_eta_for_a_unit_that_is_not_starting(self) -> None:
        """A ready unit shows no ETA even if one is left in its document."""
        doc = document()
        doc["units"][1]["eta_seconds"] = 10.0
        assert "ETA" not in text_of(row(render_main(doc), "vllm-qwen.service"))

    def test_slow_flag(self) -> None:
        """``slow: true`` shows a flag next to the phase, ``false`` nothing."""
        doc = document()
        doc["units"][0]["slow"] = True
        doc["units"][1]["slow"] = False
        main = render_main(doc)
        assert "loading_weights slow" in text_of(row(main, "vllm-llama.service"))
        assert "slow" not in text_of(row(main, "vllm-qwen.service"))


def _with_unit(index: int, **fields: Any) -> Snapshot:
    """The basic snapshot with unit ``index`` of host gpu-a changed."""
    snapshot = basic_snapshot()
    host = snapshot.hosts[0]
    units = list(host.units)
    units[index] = replace(units[index], **fields)
    return Snapshot((replace(host, units=tuple(units)), *snapshot.hosts[1:]), AT)


FAILING = UnitHealth(
    url="http://127.0.0.1:8000",
    up=False,
    error="http_status",
    status=503,
    last_probe_at=at(1790),
    failing_since=at(1700),
    failures=10,
    unhealthy=True,
)


class TestReadyButUnhealthy:
    """Ready per its logs, /health failing: said in words on the row, not only a colour."""

    def test_the_row_says_ready_but_health_failing_since_and_how_often(self) -> None:
        main = render_main(document(_with_unit(1, health=FAILING)))
        qwen = row(main, "vllm-qwen.service")
        text = text_of(qwen)
        assert "ready unhealthy" in text  # the phase stays ready, flagged
        assert "ready, but /health failing since 12:28:20 UTC (10 failures): HTTP 503" in text
        assert "row-unhealthy" in qwen

    def test_the_summary_counts_it_unhealthy_not_ready(self) -> None:
        text = text_of(render_main(document(_with_unit(1, health=FAILING))))
        assert "1 unhealthy" in text and "ready ·" not in text.split("·", 2)[-1]
        assert "1 crashed" not in text

    def test_a_healthy_ready_unit_says_nothing_of_health(self) -> None:
        qwen = text_of(row(render_main(document()), "vllm-qwen.service"))
        assert "/health" not in qwen and "unhealthy" not in qwen


def _pending() -> Snapshot:
    """The llama unit's only start crashed; its cause is pending (traceback open)."""
    crash = CrashInfo(CrashCause.PENDING, "", "", Phase.LOADING_WEIGHTS, at(1500), "inv-2")
    second = incarnation(
        [(Phase.STARTING, 600), (Phase.LOADING_WEIGHTS, 620), (Phase.CRASHED, 1500)],
        id="inv-2",
        outcome=Outcome.CRASHED,
        crash=crash,
        ended=1500,
    )
    return _with_unit(
        0,
        incarnations=(second,),
        last_crash=crash,
        crashes_total={},
        counted_crashes=(),
        recent_crashes=(),  # not settled: not counted
        recent_starts=(at(600),),
        eta_seconds=None,
        expected_ready_at=None,
        eta_basis=None,
    )


class TestCrashNotCountedYet:
    """A crash whose cause is pending is not counted yet: the page says so, never '0 crashes'
    next to it."""

    def test_pending_cause_is_shown_as_pending(self) -> None:
        text = text_of(row(render_main(document(_pending())), "vllm-llama.service"))
        assert "pending in loading_weights" in text
        assert (
            "cause pending: only a wrapper or a signal so far, the traceback may still be "
            "arriving; not counted until its cause is settled"
        ) in text

    def test_the_day_count_says_counted_and_settling(self) -> None:
        text = text_of(row(render_main(document(_pending())), "vllm-llama.service"))
        assert "1 start · 0 crashes counted + 1 settling" in text
        assert "0 crashes ·" not in text and not text.endswith("0 crashes")

    def test_a_settled_crash_has_no_settling_words(self) -> None:
        text = text_of(row(render_main(document()), "vllm-llama.service"))
        assert "settling" not in text and "pending" not in text
        assert "2 starts · 1 crash" in text


class TestEtaBasis:
    """The ETA says what it rests on; vLLM's bar alone is a lower bound, never a firm time."""

    def test_a_lower_bound_has_no_firm_ready_time(self) -> None:
        """Basis ``vllm``: the current bar only (compiling, graph capture still to come)."""
        snapshot = _with_unit(
            0,
            eta_seconds=18.0,
            expected_ready_at=AT + timedelta(seconds=18),
            eta_basis=EtaBasis.VLLM,
        )
        text = text_of(row(render_main(document(snapshot)), "vllm-llama.service"))
        assert "ETA ≥ 18s, this phase's bar only" in text
        assert "ready at" not in text

    def test_history_and_both_name_their_basis(self) -> None:
        """A firm ready time, with the basis in words."""
        for basis, words in (
            (EtaBasis.HISTORY, "from earlier starts"),
            (EtaBasis.BOTH, "this phase's bar, then earlier starts"),
        ):
            snapshot = _with_unit(
                0, eta_seconds=18.0, expected_ready_at=AT + timedelta(seconds=18), eta_basis=basis
            )
            text = text_of(row(render_main(document(snapshot)), "vllm-llama.service"))
            assert f"ETA 18s · ready at 12:30:18 UTC, {words}" in text


class TestOverdueEta:
    def test_an_overdue_estimate_says_so_not_zero(self) -> None:
        """An ETA that ran out shows how long ago, never 'ETA 0s'."""
        snapshot = _with_unit(
            0,
            eta_seconds=None,
            expected_ready_at=None,
            eta_basis=EtaBasis.VLLM,
            eta_overdue_seconds=42.0,
        )
        text = text_of(row(render_main(document(snapshot)), "vllm-llama.service"))
        assert "ETA overdue by 42s, this phase's bar only" in text
        assert "ETA 0s" not in text


class TestHostileText:
    def test_log_text_is_escaped_everywhere(self) -> None:
        """Exception, message, hint, model, host and unit names from a hostile log or config
        come out as text: no element, attribute or script of theirs reaches the page."""
        doc = document()
        doc["hosts"][0]["host"] = HOSTILE
        unit = doc["units"][0]
        unit["host"] = HOSTILE
        unit["unit"] = f'x"><svg onload=alert(1)>{HOSTILE}'
        unit["last_crash"] |= {"exception": HOSTILE, "message": HOSTILE, "cause": HOSTILE}
        unit["last_crash"]["hint"]["text"] = f"`{HOSTILE}` {HOSTILE}"
        unit["incarnations"][-1]["model"] = HOSTILE
        unit["incarnations"][-1]["phases"][-1]["phase"] = HOSTILE
        page = render_page(doc, version="1")
        assert [attrs["src"] for attrs in tags(page, "script")] == ["static/status.js?v=1"]
        assert tags(page, "img") == [] and tags(page, "svg") == []
        assert "onerror" not in re.sub(r"&[^;]+;|&#x27;", "", page).split("<body")[0]
        assert "&lt;script&gt;alert(&#x27;x&#x27;)&lt;/script&gt;" in page
        assert text_of(page).count("<script>alert('x')</script>") >= 5
        assert 'class="phase phase-unknown"' in page  # an unknown phase gets no class of its own


class TestAssets:
    def test_phase_colours_are_the_dashboards(self) -> None:
        """Each phase's CSS colour is the Grafana colour the dashboard maps it to, in the
        light theme and in the dark one (``prefers-color-scheme: dark``)."""
        mapping = {}

        def walk(node: Any) -> None:
            if isinstance(node, dict):
                options = node.get("options")
                if node.get("type") == "value" and isinstance(options, dict):
                    texts = {
                        value.get("text") for value in options.values() if isinstance(value, dict)
                    }
                    if {phase.value for phase in Phase} <= texts:
                        mapping.update({v["text"]: v["color"] for v in options.values()})
                for value in node.values():
                    walk(value)
            elif isinstance(node, list):
                for value in node:
                    walk(value)

        walk(json.loads(DASHBOARD.read_text(encoding="utf-8")))
        css = STATIC.joinpath("status.css").read_text(encoding="utf-8")
        light, dark = (
            css.split("@media (prefers-color-scheme: dark)")[0],
            css.split("@media (prefers-color-scheme: dark)")[1].split("\n}\n")[0],
        )
        for phase in Phase:
            colour = mapping[phase.value]
            wanted = GRAFANA.get(colour, (colour.lower(), colour.lower()))
            for theme, block in zip(wanted, (light, dark), strict=True):
                found = re.search(rf"--phase-{phase.value}: (#[0-9a-f]{{6}});", block)
                assert found and found.group(1) == theme, (phase, colour, theme)

    @pytest.mark.parametrize(("name", "limit"), [("status.css", 12_000), ("status.js", 6_000)])
    def test_assets_are_small_and_load_nothing_from_elsewhere(self, name: str, limit: int) -> None:
        """No CDN: the assets reference no other host, and stay small."""
        text = STATIC.joinpath(name).read_text(encoding="utf-8")
        assert len(text.encode()) < limit
        assert not re.search(r"https?://|@import|url\(", text)

    def test_page_links_only_its_own_assets(self) -> None:
        """Stylesheet and script are the daemon's own, by relative URL (works under a prefix)."""
        page = render_page(document(), version="0.1.0")
        assert [attrs["href"] for attrs in tags(page, "link") if attrs["rel"] == "stylesheet"] == [
            "static/status.css?v=0.1.0"
        ]
        assert '<noscript><meta http-equiv="refresh" content="15"></noscript>' in page
        assert '<meta name="viewport" content="width=device-width, initial-scale=1">' in page
