"""Paste artefacts: each repair on real lines from the corpus, mangled the way the artefact does.

Every line below is copied from ``/work/shared/corpus`` (the file is named in the test) and
then damaged as the artefact damages text; the expected result is the original line.
"""

from __future__ import annotations

import html
from pathlib import Path

from vllm_sentinel.engine.decode.paste import (
    PASTE_ARTEFACTS,
    TRANSLATED_LEVELS,
    normalize_fullwidth,
    split_glued_traceback,
    split_records,
    strip_html,
)
from vllm_sentinel.engine.decode.text_log import TextLogDecoder
from vllm_sentinel.engine.decode.vllm_line import LineKind, parse_line
from vllm_sentinel.replay import replay

ROOT = Path(__file__).resolve().parents[2]

# 302-v0.13-tp2-ansi-ready-then-worker-died-executor-failed.log
WORKER_LINE = (
    "(Worker_TP0 pid=2958443) INFO 01-18 20:15:06 [gpu_model_runner.py:3467] "
    "Starting to load model /data/user/model/Qwen3-30B-A3B-Instruct-2507-Int4-W4A16..."
)
# 035-v1-0.10-free-memory-less-than-utilization.log
ENGINE_LINES = [
    "(EngineCore_DP0 pid=17374) ERROR 09-28 15:47:24 [core.py:718]     raise ValueError(",
    "(EngineCore_DP0 pid=17374) ERROR 09-28 15:47:24 [core.py:718] ValueError: Free memory on "
    "device (3.22/4.0 GiB) on startup is less than desired GPU memory utilization (0.9, 3.6 "
    "GiB). Decrease GPU memory utilization or reduce GPU memory used by other processes.",
    "(EngineCore_DP0 pid=17374) Process EngineCore_DP0:",
    "(EngineCore_DP0 pid=17374) Traceback (most recent call last):",
]
# 033-v1-0.8.5-illegal-memory-access-after-kv-cache.log
V085_LINES = [
    "INFO 05-05 14:35:19 [loader.py:458] Loading weights took 0.75 seconds",
    "INFO 05-05 14:35:20 [gpu_model_runner.py:1347] Model loading took 3.3188 GiB and "
    "20.758864 seconds",
    "ERROR 05-05 14:36:28 [core.py:396] Traceback (most recent call last):",
]
# 037-v0-0.7-docker-no-gpu-failed-to-infer-device.log (raw stderr, no header)
RAW_TRACEBACK = [
    "Traceback (most recent call last):",
    '  File "/usr/local/lib/python3.12/dist-packages/vllm/engine/arg_utils.py", line 1126, '
    "in create_engine_config",
    "    device_config = DeviceConfig(device=self.device)",
    '  File "/usr/local/lib/python3.12/dist-packages/vllm/config.py", line 1660, in __init__',
    '    raise RuntimeError("Failed to infer device type")',
    "RuntimeError: Failed to infer device type",
]
# 101-journald-v0.15.1-boot-kv-too-small-restart-then-ready.log
JOURNALD_LINE = (
    "Feb 21 19:48:21 host1 vllm[3035]: (APIServer pid=3035) INFO 02-21 19:48:21 "
    "[api_server.py:1272] vLLM API server version 0.15.1"
)


def _decode(text: str) -> list[str]:
    decoder = TextLogDecoder(reference_year=2026)
    return [r.message for r in decoder.feed(text.encode()) + decoder.flush()]


class TestTable:
    """The artefact table is documentation a user can trust."""

    def test_every_row_has_a_source_an_example_and_a_repair(self) -> None:
        """Rows name what makes the artefact, show it, and say how it is undone."""
        names = [row.name for row in PASTE_ARTEFACTS]
        assert len(names) == len(set(names)) == 10
        for row in PASTE_ARTEFACTS:
            assert row.scope in ("line", "document")
            assert row.source and row.example and row.repair

    def test_every_artefact_is_documented(self) -> None:
        """docs/markers.md lists every row of the table by its name."""
        doc = (ROOT / "docs/markers.md").read_text(encoding="utf-8")
        for row in PASTE_ARTEFACTS:
            assert f"| `{row.name}` |" in doc, row.name

    def test_translated_levels_cover_every_level(self) -> None:
        """Each language of the table maps to all five vLLM levels."""
        assert TRANSLATED_LEVELS["信息"] == "INFO"
        assert TRANSLATED_LEVELS["エラー"] == "ERROR"
        assert TRANSLATED_LEVELS["предупреждение"] == "WARNING"
        assert set(TRANSLATED_LEVELS.values()) == {"DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"}


class TestHtml:
    """ANSI colour rendered as HTML, entities, ``<br>``."""

    def test_span_around_the_prefix_and_entities(self) -> None:
        """aha/ansi2html's span around the prefix goes; ``&gt;`` becomes ``>`` (302)."""
        rendered = '<span style="color: #00aaaa">(Worker_TP0 pid=2958443)</span>' + html.escape(
            WORKER_LINE.removeprefix("(Worker_TP0 pid=2958443)"), quote=False
        )
        assert strip_html(rendered) == [WORKER_LINE]

    def test_bold_font_and_br(self) -> None:
        """``<b>``, ``<font color=…>`` and ``<br>`` line breaks (035)."""
        first, second = ENGINE_LINES[2], ENGINE_LINES[3]
        rendered = (
            f'<font color="#0aa">{first[:26]}</font>{first[26:]}<br/>'
            f"<b>{second[:26]}</b>{second[26:]}<BR>"
        )
        assert strip_html(rendered) == [first, second, ""]

    def test_module_and_stdin_in_frames_are_kept(self) -> None:
        """``<module>`` in a frame, escaped or not, is text, not a tag (037)."""
        frame = '  File "/usr/local/bin/vllm", line 8, in <module>'
        assert strip_html(html.escape(frame, quote=True)) == [frame]
        assert strip_html(frame) == [frame]
        assert strip_html('  File "<stdin>", line 1, in <module>') == [
            '  File "<stdin>", line 1, in <module>'
        ]

    def test_escaped_tag_text_comes_back_as_text(self) -> None:
        """Tags are removed before entities are decoded: ``&lt;b&gt;`` stays ``<b>``."""
        assert strip_html("<span>token &lt;b&gt; &amp; &#39;x&#x27;&nbsp;y</span>") == [
            "token <b> & 'x' y"
        ]

    def test_plain_log_with_angle_brackets_is_not_html(self) -> None:
        """A tqdm bar's ``<`` and a real log's ``<module>`` never turn the HTML repair on."""
        text = "\n".join(
            [
                "Loading safetensors checkpoint shards:   0% Completed | 0/16 [00:00<?, ?it/s]",
                *RAW_TRACEBACK,
                '  File "/usr/local/bin/vllm", line 8, in <module>',
            ]
        )
        decoder = TextLogDecoder()
        decoder.feed(text.encode())
        decoder.flush()
        assert decoder.repaired == {}


class TestMarkdownAndSpacing:
    """``> `` quotes, double spacing, terminal hard-wrapping."""

    def test_nested_quote_markers(self) -> None:
        """``> ``, ``> > ``, ``>>`` in front of real lines are removed (101, 033)."""
        assert _decode(f"> {JOURNALD_LINE}\n> > {V085_LINES[0]}\n>>{V085_LINES[1]}\n") == [
            JOURNALD_LINE.split(": ", 1)[1],
            V085_LINES[0],
            V085_LINES[1],
        ]

    def test_double_spacing_is_removed(self) -> None:
        """A blank line after every line (035) goes; the records are the original ones."""
        assert _decode("\n\n".join(ENGINE_LINES) + "\n\n") == ENGINE_LINES

    def test_hard_wrapped_lines_are_joined(self) -> None:
        """Lines cut at 80 columns as a terminal does (035, 033): continuations join; records
        stay apart."""
        lines = [*V085_LINES, *ENGINE_LINES]
        wrapped = "\n".join(line[i : i + 80] for line in lines for i in range(0, len(line), 80))
        assert max(len(piece) for piece in wrapped.split("\n")) == 80
        assert _decode(wrapped + "\n") == lines

    def test_quoted_double_spaced_wrapped_journald_paste(self) -> None:
        """All three at once, around a journald wrapper (101): the record comes out whole."""
        pieces = [JOURNALD_LINE[i : i + 90] for i in range(0, len(JOURNALD_LINE), 90)]
        other = "Feb 21 19:48:22 host1 vllm[3035]: " + V085_LINES[0]
        pieces += [other[i : i + 90] for i in range(0, len(other), 90)]
        pieces += [JOURNALD_LINE[:90]]  # a third line of exactly the width, then the end
        text = "".join(f"> {piece}\n>\n" for piece in pieces)
        assert _decode(text)[:2] == [JOURNALD_LINE.split(": ", 1)[1], V085_LINES[0]]

    def test_lines_of_equal_length_that_start_records_are_not_joined(self) -> None:
        """Idle stats lines of the same length (022) are not a wrap: each has its header."""
        line = (
            "INFO 08-14 09:41:03 metrics.py:406] Avg prompt throughput: 0.0 tokens/s, Avg "
            "generation throughput: 0.0 tokens/s, Running: 0 reqs, Swapped: 0 reqs, Pending: 0 "
            "reqs, GPU KV cache usage: 0.0%, CPU KV cache usage: 0.0%."
        )
        assert _decode("\n".join([line] * 5) + "\n") == [line] * 5


# Real lines of threads in no set here: LMCache/LMCache#1998 (turn 0, an EngineCore's ERROR
# line) and vllm-project/vllm#11721 (the pull request's log: uvicorn's access line and a V0
# header); vllm-project/vllm#23176's paste is wrapped in single backticks (its last line ends
# with the closing one), the shape put on them here.
CODE_ENGINE_LINE = (
    "(EngineCore_DP0 pid=975) ERROR 11-14 08:06:26 [core.py:708] Exception: WorkerProc "
    "initialization failed due to an exception in a background process. See stack trace for "
    "root cause."
)
CODE_ACCESS_LINE = 'INFO:     127.0.0.1:40178 - "GET /v1/models HTTP/1.1" 200 OK'
CODE_V0_LINE = (
    "INFO 01-03 18:37:00 logger.py:37] Received request cmpl-8304a46139974ffaa6b29bd39ab8dbf6-0: "
    "prompt: 'Hello my name is'"
)


class TestMarkdownCode:
    """Backticks of Markdown inline code or a glued fence in front of a record."""

    def test_one_line_paste_in_inline_code(self) -> None:
        """A one-line paste led by a backtick, cut before its closing one, parses as vLLM's."""
        decoder = TextLogDecoder(reference_year=2026)
        records = decoder.feed(f"`{CODE_ENGINE_LINE}".encode()) + decoder.flush()
        assert [r.message for r in records] == [CODE_ENGINE_LINE]
        assert decoder.repaired == {"markdown_code": 1}
        assert parse_line(records[0].message).kind is not LineKind.RAW

    def test_closing_backtick_and_glued_fence(self) -> None:
        """Inline code closed on the same line, a fence glued on, uvicorn's ``INFO:`` and a V0
        header: the backticks go, the text is the original."""
        text = f"`{CODE_ACCESS_LINE}`\n```{CODE_V0_LINE}\n{CODE_ENGINE_LINE}\n`\n"
        assert _decode(text) == [CODE_ACCESS_LINE, CODE_V0_LINE, CODE_ENGINE_LINE, "`"]

    def test_quoted_code_line(self) -> None:
        """``> `…`` (a quoted inline-code line): both go."""
        assert _decode(f"> `{CODE_ENGINE_LINE}`\n") == [CODE_ENGINE_LINE]

    def test_backticks_before_other_text_stay(self) -> None:
        """A backtick before a command or a word is prose, not the artefact."""
        text = f"`pip install vllm` first\n````{CODE_ENGINE_LINE}\n{CODE_ACCESS_LINE}\n"
        decoder = TextLogDecoder(reference_year=2026)
        records = decoder.feed(text.encode()) + decoder.flush()
        assert records[0].message == "`pip install vllm` first"
        assert decoder.repaired == {}

    def test_one_line_paste_replays_the_crash(self) -> None:
        """The repaired one-line paste is a crash with its exception, as the line says."""
        result = replay([[f"`{CODE_ENGINE_LINE}\n".encode()]], reference_year=2025)
        assert result.repaired.get("markdown_code") == 1
        (unit,) = result.units
        crash = unit.incarnations[-1].crash
        assert crash is not None
        assert crash.exception == "Exception"
        assert crash.message.startswith("WorkerProc initialization failed")


class TestGlued:
    """Records whose newlines were lost."""

    def test_prefixed_records_glued_with_spaces(self) -> None:
        """035's records joined by spaces split again at each process prefix."""
        assert split_records(" ".join(ENGINE_LINES)) == ENGINE_LINES

    def test_header_records_glued(self) -> None:
        """033's header lines (``[file:line]``) glued: each header starts a record."""
        assert split_records(" ".join(V085_LINES)) == V085_LINES

    def test_old_header_era_and_uvicorn(self) -> None:
        """Up-to-0.7 headers (``file:line]``) and uvicorn's padded level (024, 044)."""
        lines = [
            "INFO 09-26 02:07:03 launcher.py:19] Available routes are:",
            "INFO:     Started server process [12625]",
            "INFO:     Waiting for application startup.",
        ]
        assert split_records("  ".join(lines)) == lines

    def test_a_header_after_a_non_space_is_text(self) -> None:
        """A message quoting a log line is one record (the quote follows a non-space)."""
        quoting = f'ERROR 05-05 14:36:28 [core.py:396] unexpected line: "{V085_LINES[0]}"'
        assert split_records(quoting) == [quoting]
        assert split_records(f"{V085_LINES[0]}|{V085_LINES[1]}") == [
            f"{V085_LINES[0]}|{V085_LINES[1]}"
        ]

    def test_prefixed_records_glued_with_nothing_between(self) -> None:
        """Newlines lost with nothing in their place: each record right after the last one's
        text (vast-ai/base-image#128, the paste's lines after the exception; and 035's
        records so glued). The line's own process prefix, pid and all, starts a record."""
        lines = [
            "(APIServer pid=2960) use of the following exception:",
            "(APIServer pid=2960) Traceback (most recent call last):",
            '(APIServer pid=2960)   File "/usr/local/bin/vllm", line 10, in <module>',
            "(APIServer pid=2960)     sys.exit(main())",
            "(APIServer pid=2960)              ^^^^^^",
        ]
        assert split_records("".join(lines)) == lines
        assert split_records("".join(ENGINE_LINES)) == ENGINE_LINES

    def test_another_process_prefix_after_text_is_text(self) -> None:
        """Only the line's own prefix is a glue without a blank: a message that quotes
        another process's line right after a quote mark stays one record."""
        quoting = (
            "(APIServer pid=1) ERROR 05-05 14:36:28 [core.py:396] unexpected line:"
            '"(EngineCore_DP0 pid=17374) Process EngineCore_DP0:"'
        )
        assert split_records(quoting) == [quoting]

    def test_glued_with_nothing_between_replays_the_crash(self) -> None:
        """035's records glued with nothing between: the crash and its cause come back."""
        (unit,) = replay([["".join(ENGINE_LINES).encode() + b"\n"]]).units
        crash = unit.incarnations[-1].crash
        assert crash is not None
        assert crash.exception == "ValueError"
        assert crash.message.startswith("Free memory on device (3.22/4.0 GiB) on startup")

    def test_a_prefix_and_its_header_are_one_head(self) -> None:
        """``(Worker_TP0 pid=N) INFO …`` is one record, as are stacked Ray/vLLM prefixes."""
        assert split_records(WORKER_LINE) == [WORKER_LINE]
        ray = "(RayWorkerWrapper pid=3, ip=10.0.0.2) (VllmWorkerProcess pid=7) " + V085_LINES[0]
        assert split_records(ray) == [ray]

    def test_a_foreign_prefix_before_a_record_is_not_a_glue(self) -> None:
        """313's Lemonade prefix ``… [Error] (Process)`` in front of vLLM's prefix stays."""
        line = (
            "2026-05-08 11:47:02.257 [Error] (Process) (EngineCore pid=2651) ERROR 05-08 "
            "11:47:02 [core.py:1136] torch.OutOfMemoryError: HIP out of memory."
        )
        assert split_records(line) == [line]

    def test_journald_wrapped_records_glued_keep_their_wrappers(self) -> None:
        """101's journald lines glued: the cut is before the next wrapper, not inside it."""
        second = "Feb 21 19:48:22 host1 vllm[3035]: (APIServer pid=3035) " + V085_LINES[0]
        records = _decode(f"{JOURNALD_LINE} {second}\n")
        assert records == [JOURNALD_LINE.split(": ", 1)[1], second.split(": ", 1)[1]]

    def test_raw_traceback_glued(self) -> None:
        """037's raw traceback on one line comes back line by line, indentation included."""
        glued = " ".join(line.strip() for line in RAW_TRACEBACK)
        assert split_glued_traceback(glued) == RAW_TRACEBACK

    def test_traceback_with_carets_and_a_chain(self) -> None:
        """Python 3.11+ caret lines and a chained exception (shapes of 011's traceback)."""
        lines = [
            "Traceback (most recent call last):",
            '  File "/x/cpp_extension.py", line 2104, in _run_ninja_build',
            "    subprocess.run(",
            "    ^^^^^^^^^^^^^^^",
            "subprocess.CalledProcessError: Command '['ninja', '-v']' returned non-zero exit "
            "status 1.",
            "The above exception was the direct cause of the following exception:",
            "Traceback (most recent call last):",
            '  File "/x/core.py", line 9, in run_engine_core',
            '    raise RuntimeError("Error building extension")',
            "RuntimeError: Error building extension 'sampling'",
        ]
        assert split_glued_traceback(" ".join(line.strip() for line in lines)) == lines

    def test_single_frames_are_not_glued(self) -> None:
        """One frame line (303's C++ frame has blanks in its function name) is left alone."""
        frame = (
            '  File "<unknown>", line 0, in BatchPrefillWithPagedKVCacheRun(tvm::ffi::TensorView,'
            " tvm::ffi::TensorView, long, bool)"
        )
        assert split_glued_traceback(frame) is None
        assert split_glued_traceback(RAW_TRACEBACK[0]) is None

    def test_glued_paste_replays_like_the_original(self) -> None:
        """035 with every newline lost gives the same crash as the original."""
        text = " ".join(
            [
                "(EngineCore_DP0 pid=17374) ERROR 09-28 15:47:24 [core.py:718] EngineCore "
                "failed to start.",
                "(EngineCore_DP0 pid=17374) ERROR 09-28 15:47:24 [core.py:718] Traceback (most "
                "recent call last):",
                *ENGINE_LINES,
            ]
        )
        (unit,) = replay([[text.encode()]], reference_year=2026).units
        crash = unit.incarnations[-1].crash
        assert crash is not None
        assert (crash.cause.value, crash.exception) == ("gpu_memory_in_use", "ValueError")


class TestTranslation:
    """A browser's machine translation next to the original."""

    def test_full_width_forms_become_ascii(self) -> None:
        """Full-width ``（ ） ： ， ＝`` and the ideographic space, nothing else (302)."""
        mangled = WORKER_LINE.replace("(", "（").replace(")", "）").replace(":", "：")
        assert normalize_fullwidth(mangled.replace(" ", "\u3000", 1)) == WORKER_LINE
        assert normalize_fullwidth("µs … ﬁ ①") == "µs … ﬁ ①"

    def test_translation_glued_after_each_line_is_cut(self) -> None:
        """033's lines with their Chinese twin after them: the original half comes out."""
        twins = [
            "信息 05-05 14:35:19 [loader.py：458] 加载权重耗时 0.75 秒",
            "信息 05-05 14:35:20 [gpu_model_runner.py:1347] 模型加载占用 3.3188 GiB，耗时 20.75 秒",
            "错误 05-05 14:36:28 [core.py:396] 回溯（最近一次调用）：",
        ]
        text = "".join(f"{line} {twin}\n" for line, twin in zip(V085_LINES, twins, strict=True))
        assert _decode(text) == V085_LINES
        anatomy = parse_line(_decode(text)[0])
        assert (anatomy.kind, anatomy.level) == (LineKind.VLLM, "INFO")

    def test_translated_twin_lines_are_dropped(self) -> None:
        """A bilingual view puts the translation on its own line: it goes, the original stays
        (a translated traceback line must never be read as an exception line)."""
        twins = [
            "（EngineCore_DP0 pid=17374） 错误 09-28 15:47:24 [core.py:718]     引发 ValueError（",
            "（EngineCore_DP0 pid=17374） 错误 09-28 15:47:24 [core.py:718] 值错误：设备上的可用内存不足",
        ]
        text = "".join(
            f"{line}\n{twin}\n" for line, twin in zip(ENGINE_LINES[:2], twins, strict=True)
        )
        assert _decode(text) == ENGINE_LINES[:2]

    def test_translated_in_place_gets_the_english_level(self) -> None:
        """A line whose level word was translated and whose original is gone parses again."""
        text = "ОШИБКА 05-05 14:36:28 [core.py:396] EngineCore не удалось запустить.\n" + (
            f"{V085_LINES[0]} 信息 05-05 14:35:19 [loader.py:458] 加载权重耗时 0.75 秒\n"
        )
        first = parse_line(_decode(text)[0])
        assert (first.kind, first.level, first.source) == (LineKind.VLLM, "ERROR", "core.py:396")

    def test_raw_line_tail_in_another_script_is_cut(self) -> None:
        """In a translated paste, a raw line's translated tail goes (037's exception line)."""
        text = (
            f"{V085_LINES[0]} 信息 05-05 14:35:19 [loader.py:458] 加载权重耗时 0.75 秒\n"
            f"{RAW_TRACEBACK[-1]} 运行时错误：无法推断设备类型\n"
        )
        assert _decode(text) == [V085_LINES[0], RAW_TRACEBACK[-1]]

    def test_real_non_english_logs_are_not_translations(self) -> None:
        """Russian journald month names (015) and Chinese text in a message turn nothing on."""
        data = ROOT / "tests/golden/logs/015-journald-ru-locale-fork-api-server-starting.log"
        text = data.read_bytes() + (
            "INFO 05-05 14:35:19 [utils.py:1] Loading model /models/通义千问-7B：ok\n".encode()
        )
        decoder = TextLogDecoder()
        records = decoder.feed(text) + decoder.flush()
        assert not decoder.paste_traits.any
        assert records[-1].message.endswith("/models/通义千问-7B：ok")
