"""Read through what pasting did to a log (core: pure, no I/O).

Logs reach ``replay`` pasted from bug reports, chats and web pages, mangled on the way. Each
kind of damage is a row of ``PASTE_ARTEFACTS`` (what makes it, an example, how it is undone),
recognised by its structure, never by the words of one log:

* rendered HTML: ANSI colour turned into tags (``<span style=…>(Worker_TP0 pid=7)</span>``),
  entities (``&gt;``), ``<br>`` for line breaks;
* Markdown quote markers (``> ``, ``> > ``);
* Markdown code backticks glued to a line's start (inline code, a fence on the line itself);
* double spacing (a blank line after every line);
* terminal hard-wrapping at a fixed width (continuation lines without their own prefix);
* lost newlines: records glued onto one line, split again at vLLM's process prefixes, level
  headers and traceback parts;
* a browser's machine translation glued after each line or given as a line of its own
  (translated level words, full-width punctuation): the original half keeps the markers.

``PasteReader`` takes physical lines (decoded, ANSI removed) and gives logical lines. It first
holds a window of the input (``window_lines`` lines or ``window_chars`` characters; a GitHub
issue body is at most 65,536 characters, so a paste is read whole) and decides from it which
artefacts the input shows (``PasteTraits``); only those repairs run afterwards, so an ordinary
log costs one check per block once the window is read. Lines are never dropped except blank
lines of a double-spaced paste and translated duplicates of a line already read; joined lines
stay within ``max_line_chars``.
"""

from __future__ import annotations

import re
import unicodedata
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from itertools import pairwise
from types import MappingProxyType

from vllm_sentinel.engine.decode.vllm_line import LEVELS, LineKind, parse_line

__all__ = [
    "PASTE_ARTEFACTS",
    "TRANSLATED_LEVELS",
    "PasteArtefact",
    "PasteReader",
    "PasteTraits",
    "TranslatedLevels",
    "normalize_fullwidth",
    "split_glued_traceback",
    "split_records",
    "strip_html",
]


@dataclass(frozen=True, slots=True)
class PasteArtefact:
    """One kind of damage a paste shows: its counter name, cause, an example, the repair."""

    name: str
    scope: str  # "line": seen on one line; "document": seen over the window
    source: str
    example: str
    repair: str


PASTE_ARTEFACTS: tuple[PasteArtefact, ...] = (
    PasteArtefact(
        "html_markup",
        "line",
        "ANSI colour rendered as HTML by a terminal-to-HTML tool (aha, ansi2html, a CI console "
        "page) or a rich-text copy; HTML-escaped text (`&lt;module&gt;`)",
        '<span style="color:#0aa">(Worker_TP0 pid=7)</span> INFO 04-27 18:09:47 [core.py:1] …',
        "once a line shows a closing formatting tag, a tag with attributes, `<br>` or an entity, "
        "formatting tags are removed, `<br>`/`</p>`/`</div>` end a line, entities are decoded "
        "(stdlib `html.unescape`); other `<…>` (`<module>`, `<stdin>`) is kept",
    ),
    PasteArtefact(
        "markdown_quote",
        "line",
        "a log quoted in Markdown (GitHub, GitLab, mail replies)",
        "> > (APIServer pid=1) INFO 04-27 18:09:47 [api_server.py:1] vLLM API server version …",
        "leading `>` markers (nested, with or without a space) are removed",
    ),
    PasteArtefact(
        "markdown_code",
        "line",
        "a log line put in Markdown inline code or with its code fence glued on (a one-line "
        "paste in an issue's prose, `` ```(APIServer pid=1) … ``); a paste wrapped in single "
        "backticks whose closing one ends its last line (vllm-project/vllm#23176)",
        "`(EngineCore_DP0 pid=975) ERROR 11-14 08:06:26 [core.py:708] Exception: WorkerProc …",
        "one to three backticks at a line's start (after any quote markers) go when a record "
        "head (process prefix, level header of either era, uvicorn `LEVEL:` with its padding, "
        "`Traceback …:`) follows them; the same run closing that line goes with them; a "
        "backtick before other text (`` `pip install` ``) stays",
    ),
    PasteArtefact(
        "double_spacing",
        "document",
        "CRLF turned into two line breaks, or one paragraph per line in a web editor",
        "INFO 04-27 … line one / (blank) / INFO 04-27 … line two / (blank)",
        "when nine in ten lines of the window are followed by a blank line, blank lines go",
    ),
    PasteArtefact(
        "hard_wrap",
        "document",
        "a terminal or `fold` wrapping at a fixed width before the copy",
        "…[gpu_model_runner.py:1] Model loading took 15.2 GiB memory and 12.3 second / s",
        "the width W is the longest line length when at least 3 lines are exactly W ≥ 80 "
        "characters and at least 2 of them are followed by a line that starts no record; a "
        "line of length W then takes the next line that starts no record (no wrapper, "
        "process prefix, level header, `Traceback`, `  File`)",
    ),
    PasteArtefact(
        "glued_records",
        "line",
        "newlines lost (collapsed whitespace, a web form, an old editor)",
        "… took 5.2 s (Worker_TP0 pid=7) INFO 04-27 18:09:47 [gpu_worker.py:1] Memory profiling …",
        "a record head (process prefix, vLLM level header of either era, uvicorn `LEVEL:` with "
        "its padding, `Traceback (most recent call last):`) preceded by whitespace, after the "
        "current record's body has begun, starts a new line; a head after a non-space (a quoted "
        "log line) does not",
    ),
    PasteArtefact(
        "glued_traceback",
        "line",
        "a raw Python traceback (stderr, no header per line) whose newlines were lost",
        'Traceback (most recent call last): File "/a.py", line 9, in <module> main() '
        "RuntimeError: boom",
        'split at `Traceback …:`, the chain sentences and each `File "…", line N, in f`; the '
        "last frame's tail gives its source line, caret line and the exception line",
    ),
    PasteArtefact(
        "machine_translation",
        "line",
        "a browser's page translation copied with the original (bilingual view), or in place",
        "INFO 04-27 18:09:47 [api_server.py:1] Starting vLLM API server 信息 04-27 18:09:47 "
        "[api_server.py:1] 正在启动 vLLM API 服务器",
        "a level header repeating the record's time and source after another word (a "
        "translated level) cuts the line there; a line made only of it is dropped; a line with "
        "a translated level and no original gets the English level; in a translated paste a "
        "tail in another script after an ASCII line is cut",
    ),
    PasteArtefact(
        "fullwidth_punctuation",
        "line",
        "machine translation into Chinese/Japanese/Korean turning `:` `(` `)` `,` into their "
        "full-width forms",
        "（Worker_TP0 pid＝7） INFO 04-27 18:09:47 [core.py：12] …",
        "in a translated paste, full-width ASCII variants (U+FF01–U+FF5E) and the ideographic "
        "space become ASCII (their NFKC form); nothing else is normalised",
    ),
    PasteArtefact(
        "outer_prefix",
        "document",
        "a prefix a tool put before every line that no wrapper row knows: a CI console's gutter "
        "and clock (Buildkite `  | [2025-03-10T15:07:20Z] `, vllm-project/vllm#14574), a "
        "box-drawing gutter, `kubectl logs --prefix`'s `[pod/name/container] `",
        "  | [2025-03-10T15:07:20Z] ERROR 03-10 08:07:20 [core.py:302] EngineCore hit an …",
        "the text before each line's first record head (process prefix, level header, "
        "`Traceback`), its digits taken as any digit, when one such shape starts nine in ten of "
        "the window's lines that are no known wrapper's, and the lines it starts then parse as "
        "vLLM's (a header they did not have, never a prefix vLLM's line parser reads itself: "
        "`(EngineCore pid=1) `, `[rank0]: `), is removed from every line it starts; an input "
        "of only 1–2 lines with a head (a notebook's `vLLM STDOUT: ` on a two-line paste) needs "
        "total evidence: every headed line has the shape and every line it starts gains a parse",
    ),
)


@dataclass(frozen=True, slots=True)
class TranslatedLevels:
    """Python's level names as a translator renders them in one language."""

    language: str
    debug: tuple[str, ...]
    info: tuple[str, ...]
    warning: tuple[str, ...]
    error: tuple[str, ...]
    critical: tuple[str, ...]
    source: str


_TRANSLATOR = "Google Translate / Microsoft Translator renderings of the level names"
_TRANSLATED_ROWS: tuple[TranslatedLevels, ...] = (
    TranslatedLevels(
        "zh-Hans", ("调试",), ("信息",), ("警告",), ("错误",), ("严重", "关键", "致命"), _TRANSLATOR
    ),
    TranslatedLevels(
        "zh-Hant",
        ("調試", "除錯"),
        ("資訊", "信息"),
        ("警告",),
        ("錯誤",),
        ("嚴重", "關鍵"),
        _TRANSLATOR,
    ),
    TranslatedLevels(
        "ja", ("デバッグ",), ("情報",), ("警告",), ("エラー",), ("重大", "致命的"), _TRANSLATOR
    ),
    TranslatedLevels(
        "ko", ("디버그",), ("정보",), ("경고",), ("오류", "에러"), ("치명적", "심각"), _TRANSLATOR
    ),
    TranslatedLevels(
        "ru",
        ("ОТЛАДКА",),
        ("ИНФОРМАЦИЯ", "ИНФО"),
        ("ПРЕДУПРЕЖДЕНИЕ",),
        ("ОШИБКА",),
        ("КРИТИЧЕСКИЙ", "КРИТИЧНО"),
        _TRANSLATOR,
    ),
    TranslatedLevels(
        "de", ("DEBUGGEN",), ("INFORMATION",), ("WARNUNG",), ("FEHLER",), ("KRITISCH",), _TRANSLATOR
    ),
    TranslatedLevels(
        "fr",
        ("DÉBOGAGE", "DÉBOGUER"),
        ("INFORMATIONS",),
        ("AVERTISSEMENT",),
        ("ERREUR",),
        ("CRITIQUE",),
        _TRANSLATOR,
    ),
    TranslatedLevels(
        "es",
        ("DEPURACIÓN", "DEPURAR"),
        ("INFORMACIÓN",),
        ("ADVERTENCIA",),
        ("ERROR",),
        ("CRÍTICO",),
        _TRANSLATOR,
    ),
    TranslatedLevels(
        "pt",
        ("DEPURAÇÃO", "DEPURAR"),
        ("INFORMAÇÃO", "INFORMAÇÕES"),
        ("AVISO",),
        ("ERRO",),
        ("CRÍTICO",),
        _TRANSLATOR,
    ),
)

TRANSLATED_LEVELS: Mapping[str, str] = MappingProxyType(
    {
        word.casefold(): level
        for row in _TRANSLATED_ROWS
        for level, words in zip(
            LEVELS, (row.debug, row.info, row.warning, row.error, row.critical), strict=True
        )
        for word in words
    }
)
"""A translated level word (casefolded) → vLLM's level name."""

# Full-width ASCII variants (U+FF01–U+FF5E) and the ideographic space: their NFKC form is ASCII.
_FULLWIDTH = MappingProxyType(
    {
        code: unicodedata.normalize("NFKC", chr(code))
        for code in (*range(0xFF01, 0xFF5F), 0x3000)
        if unicodedata.normalize("NFKC", chr(code)).isascii()
    }
)
_HAS_FULLWIDTH = re.compile("[\uff01-\uff5e\u3000]")

_FORMATTING_TAGS = (
    "span|font|b|strong|i|em|u|s|strike|del|ins|code|pre|tt|kbd|samp|mark|small|big|a|div|p|"
    "blockquote|li|ul|ol|table|tr|td|th|tbody|thead|body|html|head|style|h[1-6]"
)
_HTML_EVIDENCE = re.compile(
    r"</(?:span|font|b|strong|em|code|pre|div|p|a|tt|kbd|samp)\s*>"
    r"|<(?:span|font|div|a|p|pre|code)\s+(?:style|class|color|href|face)\s*="
    r"|<br\s*/?>"
    r"|&(?:gt|lt|amp|quot|apos|nbsp|#\d{1,7}|#[xX][0-9a-fA-F]{1,6});",
    re.IGNORECASE,
)
_HTML_BREAK = re.compile(r"<br\s*/?>|</(?:p|div|li|tr)\s*>", re.IGNORECASE)
_HTML_TAG = re.compile(rf"</?(?:{_FORMATTING_TAGS})(?:\s[^<>]*)?/?>", re.IGNORECASE)
_HTML_ENTITY = re.compile(r"&(?:#\d{1,7}|#[xX][0-9a-fA-F]{1,6}|[A-Za-z][A-Za-z0-9]{1,31});")
_QUOTE = re.compile(r"(?:>[ \t]?)+")
_MAX_BACKTICKS = 3  # inline code (one or two) or a fence (three) glued before a record

# What starts a record (a line of its own): vLLM's process prefix (and Ray's), a vLLM level
# header (0.8+ ``[file:line]``, up to 0.7 ``file:line]``), uvicorn's padded ``LEVEL:``, a raw
# traceback's first line.
_HEAD = re.compile(
    r"\((?:[^()\s][^()]{0,80}? )?pid=\d{1,10}(?:, ip=[^)]{1,64})?\)"
    r"|(?:DEBUG|INFO|WARNING|ERROR|CRITICAL) \d\d-\d\d \d\d:\d\d:\d\d(?:[.,]\d+)?"
    r" \[?[\w./-]{1,200}?:\d{1,7}\]"
    r"|(?:DEBUG|INFO|WARNING|ERROR):[ \t]{2,}|CRITICAL:[ \t]"
    r"|Traceback \(most recent call last\):"
)
# Every head holds one of these (``_HEAD``'s branches: the prefix's ``pid=``, a level word,
# the traceback's first line): a line without them after its own head holds no second record.
_HEAD_LITERALS = ("pid=", "DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL", "Traceback (most")
_HEAD_FIRST = frozenset("(DIWECT")  # the characters a head can start with
_FRAME_START = '  File "'
# A level header whose level word is anything (a translation): the twin of a record's header.
_MAX_LEVEL_WORD = 24
_STAMPED_SOURCE = re.compile(
    r"(?P<stamp>\d\d-\d\d \d\d:\d\d:\d\d)(?:[.,]\d+)?[ \t]+\[?(?P<source>[\w./-]{1,200}?:\d{1,7})\]"
)
_STAMP_TAIL = re.compile(r"-\d\d \d\d:\d\d:\d\d")  # in every stamp; a literal to search for
_ANY_LEVEL_HEADER = re.compile(
    r"(?P<word>[^\s\d()\[\]]{1,24}+)[ \t]?(?P<stamp>\d\d-\d\d \d\d:\d\d:\d\d)(?:[.,]\d+)?"
    r"[ \t]+\[?(?P<source>[\w./-]{1,200}?:\d{1,7})\]"
)

# Raw traceback parts, for a traceback whose newlines were lost.
_TRACEBACK_PART = re.compile(
    r"Traceback \(most recent call last\):"
    r"|The above exception was the direct cause of the following exception:"
    r"|During handling of the above exception, another exception occurred:"
    r'|File "[^"\n]{1,4096}", line \d{1,9}, in [^\s]{1,256}'
)
_EXCEPTION_START = re.compile(
    r"(?<![\w.])(?:[A-Za-z_]\w*\.){0,8}(?:[A-Z]\w*(?:Error|Exception|Exit|Interrupt|Fault|Failure)"
    r"|Exception|KeyboardInterrupt)(?=:\s|:?$)"
)
_CARETS = re.compile(r"(?<=\s)[~^]{2,}(?=\s|$)")
_TRACEBACK_SENTENCES = frozenset(
    {
        "Traceback (most recent call last):",
        "The above exception was the direct cause of the following exception:",
        "During handling of the above exception, another exception occurred:",
    }
)

_MIN_WRAP_WIDTH = 80
_MAX_PREFIX = 120  # an outer prefix is shorter than this (characters)
_MIN_PREFIXED_LINES = 3
_PREFIXED_SHARE = 0.9
_DIGIT = re.compile(r"\d")
_MIN_WRAPPED_LINES = 3
_MIN_CONTINUATIONS = 2
_DOUBLE_SPACED_SHARE = 0.9
_MIN_DOUBLE_SPACED = 3
_FOREIGN_SCRIPT_START = 0x0370  # Greek and above: scripts other than Latin


def normalize_fullwidth(line: str) -> str:
    """Replace full-width ASCII variants and the ideographic space by ASCII (their NFKC form)."""
    if line.isascii() or _HAS_FULLWIDTH.search(line) is None:
        return line
    return line.translate(_FULLWIDTH)


def strip_html(line: str) -> list[str]:
    """Undo HTML rendering of one line: tags removed, ``<br>`` splits, entities decoded.

    Only formatting tags go (``span``, ``font``, ``b`` …): ``<module>`` or ``<stdin>`` in a
    traceback frame stays. Tags are removed before entities are decoded, so an escaped
    ``&lt;b&gt;`` comes back as the text ``<b>``. A non-breaking space becomes a space.
    """
    if "<" in line:
        line = _HTML_BREAK.sub("\n", line)
        line = _HTML_TAG.sub("", line)
    if "&" in line:
        import html  # only HTML pastes need it: replay starts without it

        line = _HTML_ENTITY.sub(lambda found: html.unescape(found.group()), line)
    if "\xa0" in line:
        line = line.replace("\xa0", " ")
    return line.split("\n") if "\n" in line else [line]


def _head_end(line: str, position: int, own: str | None = None) -> int:
    """The end of the run of record heads at ``position`` (blanks between heads allowed).

    ``own``: the line's own process prefix (``_own_prefix``); it again, after the run's first
    head, starts the next record (newlines lost with nothing in their place)."""
    end = position
    while True:
        start = end
        while start < len(line) and line[start] in " \t":
            start += 1
        if line[start : start + 1] not in _HEAD_FIRST:
            return end  # no head starts so (saves a regex call on every line's body)
        found = _HEAD.match(line, start)
        if found is None or (own is not None and end > position and found.group() == own):
            return end
        end = found.end()


def split_records(line: str, wrapper_length: Callable[[str], int] | None = None) -> list[str]:
    """Split a line that holds several records (newlines lost) at each record head.

    A head (process prefix, level header, uvicorn level, ``Traceback …:``) starts a new record
    when whitespace precedes it and the current record's body has begun; heads that follow
    one another (a prefix and its header) belong together, and a head right after a non-space
    is text (a message quoting a log line). A line that does not start with a head (after its
    wrapper) takes its first head as its own, after a prefix of a tool unknown here
    (``2026-05-08 11:47:02.257 [Error] (Process) (EngineCore pid=7) …``). When
    ``wrapper_length`` is given and the line starts with a wrapper (journald, docker), a
    wrapper that ends right before a new head moves the cut to its start.

    Returns:
        The records, in order; ``[line]`` when it holds one.
    """
    offset = wrapper_length(line) if wrapper_length is not None else 0
    own = _own_prefix(line, offset)
    body_from = _head_end(line, offset, own)
    if not any(line.find(literal, body_from) >= 0 for literal in _HEAD_LITERALS):
        return [line]  # no head after the line's own: one record (most lines; no scan)
    foreign = body_from == offset  # no head of its own: text before a head is a foreign prefix
    pieces: list[str] = []
    piece_start = 0
    for found in _HEAD.finditer(line, body_from):
        start = found.start()
        if start < body_from:
            continue
        if not line[start - 1].isspace() and (own is None or found.group() != own):
            continue
        if foreign or (
            not line[body_from:start].strip() and found.group() != own
        ):  # still this record's head (its own prefix again starts the next record)
            body_from = _head_end(line, found.end(), own)
            foreign = False
            continue
        cut = start
        if offset:
            cut = _wrapper_start(line, piece_start, start, wrapper_length)
        pieces.append(line[piece_start:cut].rstrip())
        piece_start = cut
        body_from = _head_end(line, start, own)
    if not pieces:
        return [line]
    pieces.append(line[piece_start:])
    return [piece for piece in pieces if piece.strip()]


def _own_prefix(line: str, offset: int) -> str | None:
    """The process prefix a line starts with (``(APIServer pid=2960)``), if any.

    Newlines lost with nothing in their place glue each record right after the last one's
    text (``…hf_raise_for_status(response)(APIServer pid=2960)   File "…``): a head right
    after a non-space is a new record when it is this line's own process prefix again, pid
    and all (a message that quotes a log line quotes another process's, not its own prefix).
    """
    start = offset
    while start < len(line) and line[start] in " \t":
        start += 1
    if line[start : start + 1] != "(":
        return None
    found = _HEAD.match(line, start)
    if found is None or "pid=" not in found.group():
        return None
    return found.group()


def _wrapper_start(
    line: str, floor: int, head: int, wrapper_length: Callable[[str], int] | None
) -> int:
    """Where a wrapper that ends at ``head`` begins (whitespace before it), else ``head``."""
    if wrapper_length is None:
        return head
    for start in range(max(floor + 1, head - 120), head):
        if line[start - 1].isspace() and not line[start].isspace():
            text = line[start:head]
            if wrapper_length(text) == len(text):
                return start
    return head


def split_glued_traceback(body: str) -> list[str] | None:
    """Split a raw traceback whose newlines were lost into its lines, or ``None``.

    ``Traceback (most recent call last): File "/a.py", line 9, in <module> main() File
    "/b.py", line 2, in main raise RuntimeError("boom") RuntimeError: boom`` gives the header,
    each frame (two spaces in front, as Python prints it), its source line (four spaces), a
    caret line, and the exception line. Text before the first part is kept as its own line
    (``Process EngineCore_DP0:``). A body with one frame and nothing else (an ordinary
    traceback line; a C++ frame's function name holds blanks) or only ``Traceback …:`` is not
    glued.
    """
    parts = list(_TRACEBACK_PART.finditer(body))
    if not parts or (len(parts) == 1 and not parts[0].group().startswith("Traceback")):
        return None  # one frame: C++ frames have blanks in their function name
    if len(parts) == 1 and not body[parts[0].end() :].strip():
        return None
    lines: list[str] = []
    head = body[: parts[0].start()].strip()
    if head:
        lines.append(head)
    for index, part in enumerate(parts):
        text = part.group()
        following = parts[index + 1] if index + 1 < len(parts) else None
        tail = body[part.end() : following.start() if following is not None else len(body)]
        tail = tail.strip()
        if text in _TRACEBACK_SENTENCES:
            lines.append(text)
            if tail:
                lines.append(tail)
            continue
        lines.append("  " + text)
        if not tail:
            continue
        last_frame = following is None or not following.group().startswith("File ")
        exception = _EXCEPTION_START.search(tail) if last_frame else None
        source = tail[: exception.start()] if exception is not None else tail
        carets = _CARETS.search(source)
        if carets is not None:
            lines.append("    " + source[: carets.start()].strip())
            lines.append("    " + carets.group())
            if source[carets.end() :].strip():
                lines.append("    " + source[carets.end() :].strip())
        elif source.strip():
            lines.append("    " + source.strip())
        if exception is not None:
            lines.append(tail[exception.start() :].strip())
    return lines


@dataclass(frozen=True, slots=True)
class PasteTraits:
    """Which artefacts the window of an input showed (what repairs run on the rest)."""

    html: bool = False
    quoted: bool = False
    double_spaced: bool = False
    wrap_width: int | None = None
    glued: bool = False
    translated: bool = False
    outer_prefix: str | None = None  # the inferred prefix's regex (``_outer_prefix``)
    code: bool = False  # a line starts with backticks before a record head (``_code_ticks``)

    @property
    def any(self) -> bool:
        """Whether any repair runs."""
        return (
            self.outer_prefix is not None
            or self.html
            or self.quoted
            or self.double_spaced
            or self.wrap_width is not None
            or self.glued
            or self.translated
            or self.code
        )


_NO_TRAITS = PasteTraits()


class PasteReader:
    """Physical lines in, logical lines out, with a paste's artefacts undone.

    Args:
        wrapper_length: the length of the outer wrapper (journald, docker …) a line starts
            with, 0 when none: wrapped lines start a record, and a wrapper glued before a
            record head moves with it.
        repaired: the counter to add one to per repair, keyed by ``PasteArtefact.name``.
        window_lines / window_chars: how much of the input decides its traits.
        max_line_chars: a joined (hard-wrapped) line is never longer.
    """

    def __init__(
        self,
        wrapper_length: Callable[[str], int],
        repaired: Counter[str],
        *,
        window_lines: int = 1024,
        window_chars: int = 256 * 1024,
        max_line_chars: int = 1 << 20,
    ) -> None:
        self._wrapper_length = wrapper_length
        self.repaired = repaired
        self._window: list[str] | None = []
        self._window_chars = 0
        self._window_limit = (window_lines, window_chars)
        self._max = max_line_chars
        self.traits = _NO_TRAITS
        self._open: str | None = None  # a hard-wrapped line that may continue
        self._previous_header: tuple[str, str] | None = None  # (stamp, source) of the last
        self._prefix: re.Pattern[str] | None = None  # the inferred outer prefix (traits)

    @property
    def passthrough(self) -> bool:
        """True once the window was read and showed nothing to repair: lines pass as they are."""
        return self._window is None and not self.traits.any

    def push(self, lines: Iterable[str]) -> list[str]:
        """Take physical lines; return the logical lines that are complete."""
        window = self._window
        if window is None:
            return self._repair(lines)
        for line in lines:
            window.append(line)
            self._window_chars += len(line)
        if len(window) < self._window_limit[0] and self._window_chars < self._window_limit[1]:
            return []
        return self._close_window()

    def flush(self) -> list[str]:
        """End of input: everything held."""
        out = self._close_window() if self._window is not None else []
        if self._open is not None:
            out.extend(self._finish(self._open))
            self._open = None
        return out

    # --- the window -------------------------------------------------------------------

    def _close_window(self) -> list[str]:
        window = self._window or []
        self.traits = self._detect(window)  # the window still open: its lines not counted
        self._window = None
        return self._repair(window) if self.traits.any else window

    def _detect(self, window: list[str]) -> PasteTraits:
        html_found = any(
            ("<" in line or "&" in line) and _HTML_EVIDENCE.search(line) is not None
            for line in window
        )
        quoted = any(line.startswith(">") for line in window)
        code = any(
            "`" in line[:8] and _code_ticks(_unquote(line) if quoted else line) for line in window
        )
        lines = [
            piece
            for line in window
            for piece in self._clean(
                line, html=html_found, quoted=quoted, translated=True, code=code
            )
        ]
        prefix = self._outer_prefix(lines)
        if prefix is not None:
            self._prefix = re.compile(prefix)
            lines = [self._strip_prefix(line, counting=False) for line in lines]
        double = _is_double_spaced(lines)
        if double:
            lines = [line for line in lines if line.strip()]
        width = self._wrap_width(lines)
        translated = _shows_translation(lines)
        glued = any(self._is_glued(line) for line in lines)
        return PasteTraits(html_found, quoted, double, width, glued, translated, prefix, code)

    def _outer_prefix(self, lines: list[str]) -> str | None:
        """The regex of a prefix (nearly) every line shares before vLLM's lines, or ``None``.

        Each line's prefix is the text before its first record head (``_HEAD``) that no
        wrapper row explains; its shape is that text with every digit as ``0``. The most
        common shape is a wrapper when it starts nine in ten of the lines with a head, and
        the lines it starts become vLLM-shaped lines by losing it (``parse_line``). With
        fewer than ``_MIN_PREFIXED_LINES`` headed lines a share means little: the prefix is
        taken only when every headed line has its shape and every line it starts (headed or
        not) turns from raw text into a vLLM line without it.
        """
        shapes: Counter[str] = Counter()
        headed = 0
        for line in lines:
            head = _HEAD.search(line, 0, _MAX_PREFIX + 80)
            if head is None:
                continue
            headed += 1
            start = head.start()
            if start == 0 or start > _MAX_PREFIX or self._wrapper_length(line) >= start:
                continue
            shapes[_DIGIT.sub("0", line[:start])] += 1
        if not shapes:
            return None
        short = headed < _MIN_PREFIXED_LINES  # 1–2 headed lines: the evidence must be total
        shape, count = shapes.most_common(1)[0]
        if count < (headed if short else _PREFIXED_SHARE * headed) or not shape.strip(" "):
            return None  # too few lines; or indentation only (a dict dump, frames)
        pattern = "".join(r"\d" if char == "0" else re.escape(char) for char in shape)
        regex = re.compile(pattern)
        gained = kept = matched = 0
        for line in lines:
            found = regex.match(line)
            if found is None:
                continue
            matched += 1
            before = parse_line(line).kind
            after = parse_line(line[found.end() :]).kind
            if before is LineKind.RAW and after is not LineKind.RAW:
                gained += 1
            elif after is before:
                kept += 1
        if short:  # every line the prefix starts becomes a vLLM line by losing it
            return pattern if gained == matched else None
        return pattern if gained > kept or (gained and gained * 2 >= count) else None

    def _strip_prefix(self, line: str, *, counting: bool = True) -> str:
        prefix = self._prefix
        if prefix is None:
            return line
        found = prefix.match(line)
        if found is None:
            return line
        if counting:
            self.repaired["outer_prefix"] += 1
        return line[found.end() :]

    def _is_glued(self, line: str) -> bool:
        if len(split_records(line, self._wrapper_length)) > 1:
            return True
        return 'File "' in line and split_glued_traceback(line) is not None

    def _wrap_width(self, lines: list[str]) -> int | None:
        lengths = Counter(len(line) for line in lines)
        if not lengths:
            return None
        width = max(lengths)
        if width < _MIN_WRAP_WIDTH or lengths[width] < _MIN_WRAPPED_LINES:
            return None
        continued = sum(
            1
            for line, following in pairwise(lines)
            if len(line) == width and self._continues(following)
        )
        return width if continued >= _MIN_CONTINUATIONS else None

    def _continues(self, line: str) -> bool:
        """Whether ``line`` can be the rest of a wrapped line: it starts no record."""
        if not line.strip() or line.startswith(_FRAME_START):
            return False
        return self._wrapper_length(line) == 0 and _HEAD.match(line) is None

    # --- repairs ----------------------------------------------------------------------

    def _clean(
        self, line: str, *, html: bool, quoted: bool, translated: bool, code: bool = False
    ) -> list[str]:
        """Character-level repairs of one physical line (may give several lines)."""
        counting = self._window is None  # the window is read twice: count the second time
        pieces = strip_html(line) if html and ("<" in line or "&" in line) else [line]
        if counting and pieces != [line]:
            self.repaired["html_markup"] += 1
        out = []
        for piece in pieces:
            text = piece
            if quoted and text.startswith(">"):
                quote = _QUOTE.match(text)
                text = text[quote.end() :] if quote is not None else text
                if counting:
                    self.repaired["markdown_quote"] += 1
            if code and text.startswith("`"):
                ticks = _code_ticks(text)
                if ticks:
                    text = text[ticks:]
                    if text.endswith("`" * ticks) and not text.endswith("`" * (ticks + 1)):
                        text = text[:-ticks].rstrip()
                    if counting:
                        self.repaired["markdown_code"] += 1
            if counting and self._prefix is not None:
                text = self._strip_prefix(text)
            if translated and not text.isascii():
                normal = normalize_fullwidth(text)
                if counting and normal is not text:
                    self.repaired["fullwidth_punctuation"] += 1
                text = normal
            out.append(text)
        return out

    def _repair(self, lines: Iterable[str]) -> list[str]:
        traits = self.traits
        out: list[str] = []
        width = traits.wrap_width
        for raw in lines:
            for line in self._clean(
                raw,
                html=traits.html,
                quoted=traits.quoted,
                translated=traits.translated,
                code=traits.code,
            ):
                if traits.double_spaced and not line.strip():
                    self.repaired["double_spacing"] += 1
                    continue
                if width is None:
                    out.extend(self._finish(line))
                    continue
                held = self._open
                if held is not None:
                    if self._continues(line) and len(held) + len(line) <= self._max:
                        self.repaired["hard_wrap"] += 1
                        held += line
                        if len(line) == width:
                            self._open = held
                            continue
                        self._open = None
                        out.extend(self._finish(held))
                        continue
                    self._open = None
                    out.extend(self._finish(held))
                if len(line) == width:
                    self._open = line
                else:
                    out.extend(self._finish(line))
        return out

    def _finish(self, line: str) -> list[str]:
        """Record-level repairs of one logical line: glued records, translations."""
        traits = self.traits
        pieces = [line]
        if traits.glued:
            pieces = split_records(line, self._wrapper_length)
            if len(pieces) > 1:
                self.repaired["glued_records"] += len(pieces) - 1
            if '"' in line:
                pieces = self._split_tracebacks(pieces)
        if traits.translated:
            pieces = [kept for piece in pieces for kept in self._untranslate(piece)]
        return pieces

    def _split_tracebacks(self, pieces: list[str]) -> list[str]:
        out: list[str] = []
        for piece in pieces:
            if 'File "' not in piece and "Traceback (most" not in piece:
                out.append(piece)
                continue
            head = _head_end(piece, self._wrapper_length(piece))
            lines = split_glued_traceback(piece[head:])
            if lines is None:
                out.append(piece)
                continue
            self.repaired["glued_traceback"] += len(lines) - 1
            prefix = piece[:head].rstrip()
            out.extend(f"{prefix} {text}" if prefix else text for text in lines)
        return out

    def _untranslate(self, piece: str) -> list[str]:
        """Cut a translated twin glued after the original; drop or mend a translated line."""
        start = _head_end(piece, self._wrapper_length(piece))
        own = _ANY_LEVEL_HEADER.match(piece, _after_prefixes(piece, self._wrapper_length(piece)))
        if own is not None and own.group("word") not in LEVELS:
            key = (own.group("stamp"), own.group("source"))
            if key == self._previous_header:
                self.repaired["machine_translation"] += 1
                return []  # the translation of the line before
            level = TRANSLATED_LEVELS.get(own.group("word").casefold())
            if level is not None:
                self.repaired["machine_translation"] += 1
                piece = piece[: own.start("word")] + level + piece[own.end("word") :]
                start = _head_end(piece, self._wrapper_length(piece))
        elif own is not None:
            self._previous_header = (own.group("stamp"), own.group("source"))
        twin = _ANY_LEVEL_HEADER.search(piece, max(start, 1))
        if (
            twin is not None
            and twin.group("word") not in LEVELS
            and piece[twin.start() - 1].isspace()
        ):
            self.repaired["machine_translation"] += 1
            return [piece[: twin.start()].rstrip()]
        cut = _foreign_tail(piece, start)
        if cut is not None:
            self.repaired["machine_translation"] += 1
            return [piece[:cut].rstrip()]
        return [piece]


def _unquote(line: str) -> str:
    """``line`` without its leading Markdown quote markers."""
    if not line.startswith(">"):
        return line
    quote = _QUOTE.match(line)
    return line[quote.end() :] if quote is not None else line


def _code_ticks(line: str) -> int:
    """How many backticks (1–3) a line starts with before a record head; 0 when it does not."""
    ticks = len(line) - len(line.lstrip("`"))
    if not 0 < ticks <= _MAX_BACKTICKS or _HEAD.match(line, ticks) is None:
        return 0
    return ticks


def _shows_translation(lines: list[str]) -> bool:
    """A level header with a translated level word: in the table, or repeating the time and
    source of a header on the same line or the line before (a twin)."""
    previous: set[tuple[str, str]] = set()
    for raw in lines:
        if ":" not in raw and "：" not in raw:
            previous = set()
            continue
        line = normalize_fullwidth(raw)
        if _STAMP_TAIL.search(line) is None:  # no stamp, no header (faster than finditer)
            previous = set()
            continue
        keys: set[tuple[str, str]] = set()
        translated: list[tuple[str, str]] = []
        for found in _STAMPED_SOURCE.finditer(line):
            key = (found.group("stamp"), found.group("source"))
            word = _word_before(line, found.start())
            if word in LEVELS:
                keys.add(key)
            elif word.casefold() in TRANSLATED_LEVELS:
                return True
            elif word:
                translated.append(key)
        if any(key in keys or key in previous for key in translated):
            return True
        previous = keys
    return False


def _word_before(line: str, end: int) -> str:
    """The level word of a header whose stamp starts at ``end`` (one blank between allowed)."""
    if end and line[end - 1] in " \t":
        end -= 1
    start = end
    while start > 0 and end - start < _MAX_LEVEL_WORD:
        char = line[start - 1]
        if char.isspace() or char.isdigit() or char in "()[]":
            break
        start -= 1
    return line[start:end]


def _after_prefixes(line: str, position: int) -> int:
    """The position after the process prefixes at ``position`` (and the spaces after them)."""
    while True:
        found = _HEAD.match(line, position)
        if found is None or not found.group().startswith("("):
            return position
        position = found.end()
        while position < len(line) and line[position] == " ":
            position += 1


def _foreign_tail(line: str, start: int) -> int | None:
    """Where a tail in a non-Latin script begins after an ASCII original, else ``None``."""
    if line.isascii():
        return None
    for index in range(start, len(line)):
        char = line[index]
        code = ord(char)
        if code >= _FOREIGN_SCRIPT_START and (
            unicodedata.category(char).startswith("L") or 0x3000 <= code <= 0x303F
        ):
            cut = line.rfind(" ", start, index) + 1
            original = line[start:cut]
            if cut > start and original.strip() and original.isascii():
                return cut
            return None
    return None


def _is_double_spaced(lines: list[str]) -> bool:
    """Nine in ten non-blank lines are followed by a blank one."""
    followed = written = 0
    for line, following in pairwise(lines):
        if line.strip():
            written += 1
            followed += not following.strip()
    return written >= _MIN_DOUBLE_SPACED and followed >= _DOUBLE_SPACED_SHARE * written
