"""Anatomy of one vLLM log line: process prefix, header, body (core: pure, no I/O).

vLLM writes (``vllm/logger.py``, every release 0.2 → 0.33)::

    [(<process> pid=<N>) ]<LEVEL> <MM-DD HH:MM:SS> [<file>:<line>] <message>     0.8.0+
    [(<process> pid=<N>) ]<LEVEL> <MM-DD HH:MM:SS> <file>:<line>] <message>      up to 0.7.3

The timestamp has no year and no zone (container-local time). The process prefix was added by
wrapping stdout/stderr (0.4.3–0.30, so it also precedes raw tracebacks, tqdm bars and uvicorn
lines) and moved into the format in 0.31; Ray adds its own ``(Actor pid=N[, ip=A])`` prefix.
Up to 0.11 the worker prefix always carries ANSI colour, which is why journald stores those
lines as byte arrays. ``NewLineFormatter`` repeats the header on every physical line of a
multi-line message and ends all but the last with ``\\r``; tqdm bars refresh with ``\\r``.
vLLM 0.32+ can log JSON (``--logging-config.formatter json``, python-json-logger fields
``asctime levelname name processName process message``, ``exc_info`` for a traceback): the
``asctime`` becomes the stamp, a traceback stays in the body after ``\\n``.

torch.distributed (seen in logs of vLLM 0.5 → current) prefixes the stderr lines of a process
in a process group with its global rank, ``[rankN]:`` (c10's log prefix on its C++ lines,
``[rank0]:[W… ProcessGroupNCCL.cpp:…]``, and the same prefix on Python's traceback and exception
lines, ``[rank0]: KeyboardInterrupt``): a wrapper, stripped after vLLM's process prefix so the
line beneath reads as if unprefixed (``TORCH_RANK_PREFIX``). The rank is a global rank, not the
tensor-parallel one: not kept.

``parse_line`` undoes all of that and returns a ``LineAnatomy``; it never raises.
"""

from __future__ import annotations

import re
from enum import StrEnum
from functools import lru_cache
from types import MappingProxyType
from typing import Final, NamedTuple

import orjson

__all__ = [
    "LEVELS",
    "TORCH_RANK_PREFIX",
    "LineAnatomy",
    "LineKind",
    "Role",
    "collapse_carriage_returns",
    "parse_line",
    "parse_process_name",
    "strip_ansi",
]

LEVELS: tuple[str, ...] = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")


class Role(StrEnum):
    """Which vLLM process wrote a line, from its prefix."""

    API_SERVER = "api_server"
    ENGINE_CORE = "engine_core"
    WORKER = "worker"
    MAIN = "main"
    OTHER = "other"


class LineKind(StrEnum):
    """What shape the line had."""

    VLLM = "vllm"  # vLLM's own header: LEVEL MM-DD HH:MM:SS [file:line]
    UVICORN = "uvicorn"  # uvicorn's default formatter: "INFO:     message"
    JSON = "json"  # vLLM 0.32+ JSON formatter
    RAW = "raw"  # anything else: tqdm, tracebacks on stderr, foreign tools


class LineAnatomy(NamedTuple):
    """A parsed line.

    Attributes:
        body: the message after every prefix and header; ``\\n`` only for a JSON record with
            ``exc_info``.
        kind: the header shape.
        level: ``DEBUG`` … ``CRITICAL`` from the header, else ``None``.
        stamp: the line's time as text: vLLM's ``MM-DD HH:MM:SS`` header (no year, no zone),
            or a JSON record's ``asctime`` (``MM-DD HH:MM:SS``, or a full date as
            python-json-logger writes it without a date format), else ``None``.
        source: ``file.py:123`` from the header, else ``None``.
        role: the process role from the innermost prefix, else ``None``.
        rank: the tensor-parallel rank from the prefix (``TP3``, ``rank=3``), else ``None``.
        pid: the PID from the prefix, else ``None``.
        prefix_name: the prefix's process name (``Worker_TP3``), else ``None``.
    """

    body: str
    kind: LineKind = LineKind.RAW
    level: str | None = None
    stamp: str | None = None
    source: str | None = None
    role: Role | None = None
    rank: int | None = None
    pid: int | None = None
    prefix_name: str | None = None


_ANSI: Final = re.compile(
    r"\x1b\[[0-9;?]*[A-Za-z]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)|\x1b[()][A-Za-z0-9]"
)
_PREFIX: Final = re.compile(
    r"\((?:(?P<name>[^()]*?) )?pid=(?P<pid>\d{1,10})(?:, ip=[^)]{1,64})?\) ?"
)
_HEADER: Final = re.compile(
    r"(?P<level>DEBUG|INFO|WARNING|ERROR|CRITICAL) (?P<stamp>\d\d-\d\d \d\d:\d\d:\d\d)(?:\.\d+)?"
    r" \[?(?P<source>[\w./-]{1,200}?:\d{1,7})\] ?"
)
_RANK: Final = re.compile(r"(?:rank=|TP)(\d{1,4})")
TORCH_RANK_PREFIX: Final = re.compile(r"\[rank\d{1,6}\]: ?")
"""torch.distributed's rank prefix (vLLM 0.5 → current logs); examples:
``[rank0]: Traceback (most recent call last):``, ``[rank1]:[W1110 01:25:11.637762572
compiler_depend.ts:62] Warning: …`` (shared corpus)."""
_TORCH_RANK_MATCH: Final = TORCH_RANK_PREFIX.match
_STAMP_LENGTH: Final = len("MM-DD HH:MM:SS")

_ROLE_RULES: Final[tuple[tuple[re.Pattern[str], Role], ...]] = (
    (re.compile(r"(?:APIServer|ApiServer)(?:_(?:DP)?\d+)?$"), Role.API_SERVER),
    (
        re.compile(r"(?:EngineCore(?:_(?:DP)?\d+)?|(?:DP)?(?:MoE)?EngineCoreActor)$"),
        Role.ENGINE_CORE,
    ),
    (
        re.compile(
            r"(?:VllmWorkerProcess|VllmWorker|RayWorkerWrapper|RayWorkerProc|Worker)(?:\b|_)"
        ),
        Role.WORKER,
    ),
    (re.compile(r"MainProcess$"), Role.MAIN),
)


# What a tqdm refresh shows (``{l_bar}{bar}| {n}/{total} [{elapsed}<{remaining}, {rate}]``,
# vLLM's ``Loading safetensors checkpoint shards:  50% Completed | 1/2 [...]``, a bar without a
# total ``5it [00:01, 3.2it/s]``): a segment holding one is a redraw (tqdm, every version).
_PROGRESS: Final = re.compile(r"\d{1,3}%|\d+/\d+ \[|\d(?:it|s)/(?:s|it)\b|\d+it \[")


def strip_ansi(text: str) -> str:
    """Remove ANSI/VT100 escape sequences (colours, cursor moves, OSC titles)."""
    return _ANSI.sub("", text) if "\x1b" in text else text


def collapse_carriage_returns(text: str) -> str:
    """Keep what a terminal would show of a line that contains ``\\r``.

    tqdm refreshes a bar with ``\\r``; vLLM's ``NewLineFormatter`` ends lines with ``\\r``.
    A redraw (one of the non-blank segments is a progress bar, ``_PROGRESS``) keeps its last
    non-blank segment; a process prefix that stood alone before the first ``\\r`` (vLLM
    0.10.1–0.30 prefixes only the start of a physical line) is kept in front. Any other
    ``\\r`` between text (inside an exception line: a path, a stray byte) reads as a space, so
    that the head of the line (``ValueError: …``) is never thrown away.
    """
    if "\r" not in text:
        return text
    parts = text.split("\r")
    shown = [part for part in parts if part.strip()]
    if len(shown) > 1 and not any(_PROGRESS.search(part) for part in shown):
        return " ".join([shown[0].rstrip(), *(p.strip() for p in shown[1:-1]), shown[-1].lstrip()])
    last = ""
    for part in reversed(parts):
        if part.strip():
            last = part
            break
    first = parts[0]
    if last is not first and first.startswith("("):
        match = _PREFIX.match(first)
        if match is not None and not first[match.end() :].strip():
            return first[: match.end()].rstrip() + " " + last.lstrip()
    return last


@lru_cache(maxsize=1024)
def parse_process_name(name: str) -> tuple[Role, int | None]:
    """Map a prefix's process name to its role and tensor-parallel rank.

    ``Worker_DP0_TP5_EP5`` → (worker, 5); ``VllmWorker rank=1`` → (worker, 1);
    ``EngineCore_DP0`` → (engine_core, None); unknown names → (other, None).
    """
    role = Role.OTHER
    for pattern, candidate in _ROLE_RULES:
        if pattern.match(name):
            role = candidate
            break
    rank_match = _RANK.search(name) if role is Role.WORKER else None
    return role, int(rank_match.group(1)) if rank_match else None


def _parse_json(text: str) -> LineAnatomy | None:
    try:
        data = orjson.loads(text)
    except orjson.JSONDecodeError:
        return None
    if not isinstance(data, dict) or "message" not in data:
        return None
    message = data.get("message")
    body = message if isinstance(message, str) else str(message)
    exc = data.get("exc_info")
    if isinstance(exc, str) and exc:
        body = f"{body}\n{exc}"
    level = data.get("levelname")
    level = level if isinstance(level, str) and level in LEVELS else None
    pid_value = data.get("process")
    pid = pid_value if isinstance(pid_value, int) and pid_value > 0 else None
    name = data.get("processName")
    role: Role | None = None
    rank: int | None = None
    if isinstance(name, str) and name:
        role, rank = parse_process_name(name)
    else:
        name = None
    return LineAnatomy(body, LineKind.JSON, level, _asctime(data), None, role, rank, pid, name)


def _asctime(data: dict[str, object]) -> str | None:
    """A JSON record's ``asctime`` as a stamp: ``MM-DD HH:MM:SS`` (vLLM's date format) cut to
    the second like the text header, a full date kept (at most 40 characters), else ``None``."""
    asctime = data.get("asctime")
    if not isinstance(asctime, str) or len(asctime) < _STAMP_LENGTH:
        return None
    if asctime[2:3] == "-":
        return asctime[:_STAMP_LENGTH]
    return asctime[:40] if asctime[4:5] == "-" else None


# The level word a header or uvicorn line starting with this character can have, and the
# separator after it that each needs: " " for vLLM's header, ":" for uvicorn's (hot path: one
# regex tried instead of two, none for a line that cannot be either).
_LEVEL_BY_FIRST: Final = MappingProxyType({level[0]: level for level in LEVELS})
_HEADER_MATCH: Final = _HEADER.match  # bound once: no method lookup per line (hot path)
_VLLM: Final = LineKind.VLLM
_UVICORN_KIND: Final = LineKind.UVICORN
_RAW: Final = LineKind.RAW
_MAX_CACHED_PREFIX: Final = 160
_new_anatomy: Final = tuple.__new__  # LineAnatomy without the keyword-default wrapper (hot path)


_Prefix = tuple[int, Role | None, int | None, int, str | None]
_NOT_A_PREFIX: Final[_Prefix] = (0, None, None, 0, None)


@lru_cache(maxsize=4096)
def _parse_prefix(text: str) -> _Prefix:
    """Parse one process prefix ``(name pid=N)`` (text up to its ``)`` and one more character);
    ``_NOT_A_PREFIX`` (length 0) when it is none.

    Cached: the prefix of a process repeats on nearly every line (a host has few processes).
    """
    match = _PREFIX.match(text)
    if match is None:
        return _NOT_A_PREFIX
    name, pid_text = match.group("name", "pid")
    role, rank = parse_process_name(name) if name else (None, None)
    return (match.end(), role, rank, int(pid_text), name)


def parse_line(line: str) -> LineAnatomy:
    """Split a physical line into prefix, header and body; never raises.

    Args:
        line: one physical line as logged (ANSI codes and ``\\r`` allowed), without wrapper
            (journald/docker prefixes are the decoders' job).

    Returns:
        The ``LineAnatomy``; foreign lines come back as ``LineKind.RAW`` with the body
        unchanged except for ANSI removal and ``\\r`` collapsing.
    """
    if "\x1b" in line:
        line = _ANSI.sub("", line)
    if "\r" in line:
        line = collapse_carriage_returns(line)
    role: Role | None = None
    rank: int | None = None
    pid: int | None = None
    name: str | None = None
    position = 0
    while line[position : position + 1] == "(":
        # A prefix ends at its first ")": its name, PID and ip parts hold none.
        close = line.find(")", position)
        if 0 <= close - position <= _MAX_CACHED_PREFIX:
            found = _parse_prefix(line[position : close + 2])
        else:
            match = _PREFIX.match(line, position)
            found = _parse_prefix(match.group()) if match is not None else _NOT_A_PREFIX
        length, found_role, found_rank, found_pid, found_name = found
        if not length:
            break
        pid, name = found_pid, found_name
        if name:
            role, rank = found_role, found_rank
        position += length
    if line.startswith("[rank", position):
        torch_rank = _TORCH_RANK_MATCH(line, position)
        if torch_rank is not None:
            position = torch_rank.end()
    first = line[position : position + 1]
    level_word = _LEVEL_BY_FIRST.get(first)
    after = position + len(level_word) if level_word is not None else 0
    if level_word is not None and line[position:after] == level_word:
        separator = line[after : after + 1]
        header = _HEADER_MATCH(line, position) if separator == " " else None
        if header is not None:
            level, stamp, source = header.group(1, 2, 3)
            return _new_anatomy(
                LineAnatomy,
                (line[header.end() :], _VLLM, level, stamp, source, role, rank, pid, name),
            )
        if separator == ":":
            # uvicorn's default format, ``LEVEL:`` then blanks (regex ``LEVEL:\s+``): str.lstrip
            # strips what ``\s`` matches (``str.isspace``), without a regex call per line
            rest = line[after + 1 :]
            body = rest.lstrip()
            if len(body) < len(rest):
                return _new_anatomy(
                    LineAnatomy,
                    (body, _UVICORN_KIND, level_word, None, None, role, rank, pid, name),
                )
    elif first == "{" and line.startswith('{"', position):
        parsed = _parse_json(line[position:])
        if parsed is not None:
            return parsed
    body = line[position:] if position else line
    return _new_anatomy(LineAnatomy, (body, _RAW, None, None, None, role, rank, pid, name))
