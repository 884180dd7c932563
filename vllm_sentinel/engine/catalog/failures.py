"""The failure catalog: what vLLM and its stack can raise, and a matcher over it (core: pure).

``failures.tsv`` (package data beside this module, built by ``scripts/build-failure-catalog.py``
from the published wheels of vLLM 0.6–0.33, PyTorch, the CUDA runtime, NCCL, HIP,
huggingface_hub, Ray, FlashInfer and Triton) holds one row per *message template*: the text of a
``raise X(…)``, ``assert``, ``logger.error/exception/critical`` or library error string, with
each formatted value written ``{}`` (a literal brace is ``{{``/``}}``), the exception class, where
it is raised (``file:function``), the library, the releases seen, and the cause it means (a
value of ``causes.CrashCause``, or ``unknown``).

Matching (``FailureCatalog.match``) is by a template's **fixed parts**: the message must begin
with the template's head (its first fixed part, or at least ``_HEAD_MIN`` characters of it);
every later fixed part must follow in order, the text between them being a formatted value of
any content; a message cut at any point after the head (a paste cut mid-line) matches as far as
it goes. Dispatch is by the first ``_KEY`` characters of the message (one dict lookup), so a
line that begins no template costs one slice and one lookup; templates that begin with a value
are tried only for exception messages (``match``), never for bare lines (``match_bare``).

Only rows whose cause is known are compiled; the others stay in the data file as the record of
what can fail (``docs/markers.md`` counts both).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Final

__all__ = [
    "FailureCatalog", "FailureRow", "TemplateMatch", "load_rows", "packaged_catalog", "site_of",
    "unknown_sites",
]  # fmt: skip

_DATA: Final = "failures.tsv"
_COLUMNS: Final = (
    "cause", "kind", "exception", "library", "raised_in", "releases", "site_sole", "raise_only",
    "template", "why",
)  # fmt: skip
_KEY: Final = 10  # characters of a message's beginning that select the candidate templates
_HEAD_MIN: Final = 24  # a message cut inside a long head must keep this much of it
_BARE_HEAD: Final = 24  # a bare line needs a head this long to be read as a raise's message
_MAX_VALUE: Final = 240  # a formatted value that runs into a cut is at most this long
_MIN_ANCHOR: Final = 16  # a template beginning with a value needs a fixed part this long
_UNKNOWN: Final = "unknown"
_UNKNOWN_ROW: Final = "unknown\t"  # a row's first column is its cause
# a raise of unknown cause (a row after the header): its fifth column, ``raised_in``
_UNKNOWN_RAISE_SITE: Final = re.compile(rb"\nunknown\traise\t[^\t\n]*\t[^\t\n]*\t([^\t\n]*)\t")


@dataclass(frozen=True, slots=True)
class FailureRow:
    """One row of the catalog (see the module docstring for the fields' meaning)."""

    template: str
    exception: str
    kind: str  # raise | log | message (a library's error string) | class (an exception class)
    library: str
    raised_in: str
    releases: tuple[str, ...]
    cause: str
    site_sole: bool = False  # every template raised at this file:function (this class) means
    # this cause: the raising frame names it even when the message is too cut to match
    raise_only: bool = False  # raised in vLLM and printed by no logger call (any release)
    why: str = ""  # how the cause was decided: reviewed, vocabulary or location


@dataclass(frozen=True, slots=True)
class _Template:
    """The rows of one template text, compiled: its fixed parts and what they mean."""

    parts: tuple[str, ...]
    rows: tuple[FailureRow, ...]
    raise_only: bool  # raised in vLLM, logged nowhere: its text alone says it was raised
    tail_value: bool  # ends with a value after ": " (another message, classified itself)
    fixed: int  # characters of fixed text
    needle: str  # the longest fixed part: a floating template's message holds it whole


@dataclass(frozen=True, slots=True)
class TemplateMatch:
    """A message matched to a template: the row chosen, how much fixed text matched, and the
    message's last value when the template ends with one (``tail``, else ``""``)."""

    row: FailureRow
    matched: int
    tail: str


def _unescape(text: str) -> str:
    return text.replace("\x01", "{").replace("\x02", "}")


def _parts(template: str) -> tuple[str, ...]:
    """A template's fixed parts: ``"a {} b {}"`` → ``("a ", " b ", "")``."""
    raw = template.replace("{{", "\x01").replace("}}", "\x02")
    return tuple(_unescape(part) for part in raw.split("{}"))


def _cut_value(rest: str, part: str) -> bool:
    """Whether ``rest`` is a formatted value, then the beginning of ``part``, cut at its end."""
    limit = min(len(part), len(rest))
    for size in range(limit, 0, -1):
        if rest.endswith(part[:size]):
            return len(rest) - size <= _MAX_VALUE
    return len(rest) <= _MAX_VALUE


def _match_parts(parts: tuple[str, ...], text: str) -> tuple[int, str] | None:
    """Match ``text`` from its start; return (fixed characters matched, last value) or None."""
    head = parts[0]
    if head:
        if not text.startswith(head):
            if len(text) >= _HEAD_MIN and len(text) < len(head) and head.startswith(text):
                return len(text), ""  # cut inside a long head
            return None
        pos = len(head)
    else:
        pos = 0
    matched = len(head)
    last = len(parts) - 1
    for index in range(1, last + 1):
        part = parts[index]
        if not part:
            if index == last:
                return matched, text[pos:]  # ends with a value: the rest of the message
            continue  # two values side by side
        found = text.find(part, pos)
        if found < 0:
            # the message was cut in this value or in this part: only after a whole head
            if head and matched >= _HEAD_MIN and _cut_value(text[pos:], part):
                return matched, ""
            return None
        if head == "" and index == 1 and found > _MAX_VALUE:
            return None  # a leading value this long is not one value
        matched += len(part)
        pos = found + len(part)
    return matched, ""


def site_of(frame: str) -> str | None:
    """The catalog's ``raised_in`` form of a traceback frame line, or ``None``.

    ``  File "/x/site-packages/vllm/config/model.py", line 3, in verify`` →
    ``vllm/config/model.py:verify``; a library's frame → ``torch:torch/cuda/__init__.py:init``.
    """
    start = frame.find('File "')
    end = frame.find('"', start + 6)
    if start < 0 or end < 0:
        return None
    path = frame[start + 6 : end].replace("\\", "/")
    function = frame.rsplit(" in ", 1)[-1].strip() if " in " in frame[end:] else ""
    packages = max(path.rfind("site-packages/"), path.rfind("dist-packages/"))
    if packages >= 0:
        rest = path[packages + 14 :]
    else:
        vllm = path.rfind("/vllm/")
        if vllm < 0:
            return None
        rest = path[vllm + 1 :]
    top = rest.split("/", 1)[0]
    if top == "vllm":
        return f"{rest}:{function}"
    return f"{top}:{rest}:{function}"


class FailureCatalog:
    """The compiled catalog: templates by the first characters of their head.

    Args:
        rows: the catalog's rows (``load_rows()``).
    """

    def __init__(
        self, rows: tuple[FailureRow, ...], mixed_sites: frozenset[str] = frozenset()
    ) -> None:
        self.rows = rows
        by_text: dict[str, list[FailureRow]] = {}
        for row in rows:
            if row.cause != _UNKNOWN:
                by_text.setdefault(row.template, []).append(row)
        keyed: dict[str, list[_Template]] = {}
        floating: list[_Template] = []
        for text, group in by_text.items():
            parts = _parts(text)
            fixed = sum(len(part) for part in parts)
            compiled = _Template(
                parts,
                tuple(group),
                any(row.raise_only for row in group),
                len(parts) > 1 and parts[-1] == "" and parts[-2].endswith(": "),
                fixed,
                max(parts, key=len),
            )
            head = parts[0]
            if len(head) >= _KEY:
                keyed.setdefault(head[:_KEY], []).append(compiled)
            elif len(parts) == 1:
                keyed.setdefault(head[:_KEY], []).append(compiled)  # a short whole message
            elif max(len(part) for part in parts) >= _MIN_ANCHOR:
                floating.append(compiled)
        self._classes = {
            row.template: row.cause for row in rows if row.kind == "class" and row.cause != _UNKNOWN
        }
        self._keyed = {key: tuple(value) for key, value in keyed.items()}
        self._floating = tuple(floating)
        # a raise site whose rows (of one exception class) all mean one known cause
        self._sites = {
            f"{row.raised_in}|{row.exception}": row.cause for row in rows if row.site_sole
        }
        # a raise site whose rows (every class) all mean one known cause: its sole rows agree,
        # and no row there is of another class's mix or of unknown cause (``mixed_sites``)
        by_site: dict[str, set[str]] = {}
        for row in rows:
            if row.kind == "raise":
                by_site.setdefault(row.raised_in, set()).add(row.cause if row.site_sole else "")
        self._whole_sites = {
            site: next(iter(causes))
            for site, causes in by_site.items()
            if len(causes) == 1 and "" not in causes and site not in mixed_sites
        }

    def match(
        self, message: str, exception: str = "", site: str | None = None
    ) -> TemplateMatch | None:
        """The template ``message`` was formatted from (of known cause), or ``None``.

        Args:
            message: the exception's message, or a log line's body.
            exception: the exception class as printed (``torch.OutOfMemoryError``), to prefer
                the rows of that class.
            site: the raising frame in ``site_of`` form, to prefer the rows raised there.
        """
        text = " ".join(message.split()) if "  " in message or "\n" in message else message
        best = self._best(self._keyed.get(text[:_KEY], ()), text, exception, site, False)
        if best is None and self._floating:
            # a floating template's head is shorter than a message cut after a whole head may
            # be, so its message starts with that head; one that begins with a value holds
            # every fixed part whole (no cut is tolerated without a head): both are cheap tests
            # that leave _match_parts the few templates that can match
            candidates = tuple(
                compiled
                for compiled in self._floating
                if (
                    text.startswith(compiled.parts[0])
                    if compiled.parts[0]
                    else compiled.needle in text
                )
            )
            if candidates:
                best = self._best(candidates, text, exception, site, False)
        return best

    def match_bare(self, line: str) -> TemplateMatch | None:
        """The raise-only template (of known cause) a bare line is the message of, or ``None``.

        A line that only a ``raise`` prints (no logger call prints the same text), with a head
        of at least ``_BARE_HEAD`` characters: a paste that kept the message and lost its
        exception class and traceback.
        """
        candidates = self._keyed.get(line[:_KEY])
        if candidates is None:
            return None
        return self._best(candidates, line, "", None, True)

    def class_cause(self, exception: str) -> str | None:
        """The known cause an exception class of the catalog means by itself, or ``None``
        (``huggingface_hub.errors.GatedRepoError`` → ``model_not_found``)."""
        return self._classes.get(exception.rsplit(".", 1)[-1])

    def cause_at(self, site: str, exception: str) -> str | None:
        """The one known cause every catalog row raised at ``site`` with ``exception`` means."""
        short = exception.rsplit(".", 1)[-1]
        return self._sites.get(f"{site}|{short}")

    def cause_at_site(self, site: str) -> str | None:
        """The one known cause every catalog row raised at ``site`` means, whatever its class
        (a traceback cut before its exception line names no class), else ``None``."""
        return self._whole_sites.get(site)

    @staticmethod
    def _best(
        candidates: tuple[_Template, ...],
        text: str,
        exception: str,
        site: str | None,
        bare: bool,
    ) -> TemplateMatch | None:
        best: TemplateMatch | None = None
        best_key = (-1, -1)
        short = exception.rsplit(".", 1)[-1] if exception else ""
        for compiled in candidates:
            if bare and (not compiled.raise_only or len(compiled.parts[0]) < _BARE_HEAD):
                continue
            found = _match_parts(compiled.parts, text)
            if found is None:
                continue
            matched, tail = found
            if bare and matched < _BARE_HEAD:
                continue
            row = compiled.rows[0]
            score = 0
            for candidate in compiled.rows:
                here = (2 if site is not None and candidate.raised_in == site else 0) + (
                    1 if short and candidate.exception == short else 0
                )
                if here > score:
                    row, score = candidate, here
            key = (matched, score)
            if key > best_key:
                best_key = key
                best = TemplateMatch(row, matched, tail if compiled.tail_value else "")
        return best


def load_rows(text: str | None = None, everything: bool = False) -> tuple[FailureRow, ...]:
    """The catalog's rows, from ``text`` (the TSV) or the packaged ``failures.tsv``.

    The first line names the columns (``_COLUMNS``); each other line is one row, its fields
    separated by tabs (templates hold none), ``releases`` comma-separated, ``site_sole`` and
    ``raise_only`` 0 or 1. The script writes the rows of a known cause first.

    Args:
        text: the TSV, or ``None`` for the packaged file.
        everything: keep every row; by default only the rows of a known cause (what matching
            reads: the packaged file is read up to its first row of unknown cause).

    Raises:
        ValueError: the header is not ``_COLUMNS``, or a line has another number of fields.
    """
    if text is None:
        data = _packaged_bytes()
        text = data.decode("utf-8") if everything else _known_text(data)
    elif not everything:
        end = text.find("\n" + _UNKNOWN_ROW)
        if end >= 0:
            text = text[:end]  # the rows of a known cause come first
    return _read_rows(iter(text.split("\n")), everything)


def _packaged_bytes() -> bytes:
    """The packaged ``failures.tsv`` (about 2.7 MB), read when a crash is first classified."""
    from importlib import resources  # here, not at import: most runs never read it

    return resources.files("vllm_sentinel.engine.catalog").joinpath(_DATA).read_bytes()


def _known_text(data: bytes) -> str:
    """The header and the rows of a known cause of the TSV ``data`` (they come first: only they
    are decoded, about a fifth of the file)."""
    end = data.find(b"\n" + _UNKNOWN_ROW.encode())
    return (data if end < 0 else data[:end]).decode("utf-8")


def _read_rows(lines: Iterator[str], everything: bool) -> tuple[FailureRow, ...]:
    header = next(lines, "").rstrip("\n")
    if tuple(header.split("\t")) != _COLUMNS:
        raise ValueError(f"not the failure catalog's header: {header[:80]!r}")
    rows = []
    width = len(_COLUMNS)
    for line in lines:
        if line.startswith(_UNKNOWN_ROW) and not everything:
            break  # the rows of a known cause come first
        row_text = line.rstrip("\n")
        if not row_text:
            continue
        fields = row_text.split("\t")
        if len(fields) != width:
            raise ValueError(f"a catalog row needs {width} fields: {row_text[:80]!r}")
        cause, kind, exception, library, raised_in, releases, sole, raise_only, template, why = (
            fields
        )
        rows.append(
            FailureRow(
                template,
                exception,
                kind,
                library,
                raised_in,
                tuple(releases.split(",")) if releases else (),
                cause,
                sole == "1",
                raise_only == "1",
                why,
            )
        )
    return tuple(rows)


def unknown_sites(text: str | None = None) -> frozenset[str]:
    """The raise sites (``file:function``) of the catalog's rows of unknown cause, from
    ``text`` (the TSV) or the packaged ``failures.tsv`` (``FailureCatalog``'s ``mixed_sites``:
    matching loads only the rows of a known cause)."""
    return _unknown_sites(_packaged_bytes() if text is None else text.encode("utf-8"))


def _unknown_sites(data: bytes) -> frozenset[str]:
    return frozenset(site.decode("utf-8") for site in _UNKNOWN_RAISE_SITE.findall(data))


class _Packaged:
    """Holds the packaged catalog once it is compiled (``packaged_catalog``)."""

    __slots__ = ("catalog",)

    def __init__(self) -> None:
        self.catalog: FailureCatalog | None = None


_PACKAGED: Final = _Packaged()


def packaged_catalog() -> FailureCatalog:
    """The packaged catalog (``failures.tsv``), read and compiled on first use, then the same
    immutable value: a command that never classifies a crash (``--help``, ``check-config``,
    a replay without one) does not pay its ~50 ms."""
    catalog = _PACKAGED.catalog
    if catalog is None:
        data = _packaged_bytes()
        rows = _read_rows(iter(_known_text(data).split("\n")), everything=False)
        catalog = FailureCatalog(rows, _unknown_sites(data))
        _PACKAGED.catalog = catalog
    return catalog
