"""Assemble Python tracebacks from interleaved log lines, one stream per process (core: pure).

vLLM prints a traceback two ways (``docs/markers.md`` §8): through its logger
(``logger.exception``: every physical line carries the ``ERROR … [file:line]`` header, so the
assembler sees the raw traceback text as the line body), and raw on stderr (an uncaught
exception, or CPython's ``multiprocessing`` bootstrap re-raising in a child:
``Process EngineCore_DP0:`` + ``Traceback …``). Workers of a tensor-parallel group print at the
same time, so lines are keyed by process (PID from vLLM's prefix or the journal).

The assembler keeps a few words of state per stream, never the frames: a traceback that never
ends costs nothing. It yields an ``ExceptionEvent`` for each exception line, including every
link of a chain (``The above exception was the direct cause…``, ``During handling…``), and for
an exception line met without its traceback (excerpts often start there).

A traceback logged at INFO/DEBUG/WARNING level (``logger.warning(…, exc_info=True)``: an
exception the process handled) is read as one record and yields nothing: it is never the
failure, and it ends at the first line that is not part of that record. A line with vLLM's
header at INFO/DEBUG/WARNING level ends a traceback after its exception line, and a raw one in
its frames: after a container restart the same PID prints the new process's logo, whose lines
start with blanks like a frame or a continuation of the exception message.
"""

from __future__ import annotations

import re
from enum import Enum
from typing import Final, NamedTuple

from vllm_sentinel.engine.catalog.announcements import is_announcement
from vllm_sentinel.engine.catalog.frames import frame_phase
from vllm_sentinel.engine.catalog.phases import Phase
from vllm_sentinel.engine.terminal_text import shortened

__all__ = ["CutTraceback", "ExceptionEvent", "TracebackAssembler"]

_TRACEBACK: Final = "Traceback (most recent call last):"
_CHAIN_STARTS: Final = (
    "The above exception was the direct cause of the following exception:",
    "During handling of the above exception, another exception occurred:",
)
_EXCEPTION_LINE: Final = re.compile(r"(?P<cls>[A-Za-z_][\w.]{0,200}?)(?::\s?(?P<msg>.*))?$")
_ORPHAN_EXCEPTION_LINE: Final = re.compile(
    r"(?P<cls>(?:[A-Za-z_]\w*\.){0,8}(?:[A-Z]\w*(?:Error|Exception|Exit|Interrupt|Fault|Failure)"
    r"|Exception|KeyboardInterrupt))(?:: (?P<msg>.*))?$"
)
# A tqdm bar ("Loading safetensors checkpoint shards:  50% Completed | 1/2 [00:01<00:01, …]",
# "Capturing CUDA graphs: 100%|██████████| 67/67 [00:10<00:00, 6.1it/s]"): another process's
# progress printed in the middle of a traceback, never its exception line.
_PROGRESS_BAR: Final = re.compile(r"\d{1,3}%(?: Completed)? ?\||\| *\d+/\d+ \[\d")
# Python 3.11+'s position markers (PEP 657: ``^`` under the failing expression, ``~`` around
# it) under a frame's source line: part of that frame, never an exception line, a message or a
# context (an excerpt often starts on one).
_MARKER_LINE: Final = re.compile(r"[ \t]+[~^][~^ \t]*$")
_ERROR_LEVELS: Final = frozenset({"ERROR", "CRITICAL"})
_MAX_CLASS: Final = 200  # an exception "class" may be a whole hostile line: keep it short
_MAX_FRAME: Final = 300
_QUIET_LEVELS: Final = frozenset({"DEBUG", "INFO", "WARNING"})
_OPENINGS: Final = (_TRACEBACK, '  File "')  # lines that open a traceback even without a stream


class _State(Enum):
    IDLE = 0
    FRAMES = 1  # inside "Traceback …", reading frames until the exception line
    AFTER_EXCEPTION = 2  # just read an exception line: a chain may follow
    CHAIN = 3  # read a chain sentence: a "Traceback" must follow


class ExceptionEvent(NamedTuple):
    """One exception line, with where it came from.

    Attributes:
        exception: the class as printed (``RuntimeError``, ``torch.OutOfMemoryError``).
        message: the first line of the message, cut to ``max_message`` characters (a cut ends
            with ``…``).
        context: the last non-traceback line the same stream printed before the traceback
            (``EngineCore failed to start.``, ``Process EngineCore_DP0:``), or ``None``.
        logged: True when printed through vLLM's logger (the process handled it and logged
            it), False for raw stderr (uncaught, the process is exiting).
        chained: True for the second and later exceptions of a chain.
        in_traceback: False when the exception line was seen without its traceback.
        frame: the innermost frame line read (``  File "…/chat_utils.py", line 1033, in
            validate_chat_template``): where the exception was raised, if known.
        phase: the startup phase the innermost vLLM frame that names one ran in
            (``frames.FRAME_PHASES``: ``profile_run`` → profiling_kv_cache), if any.
        continued: True when this event only completes the message of the exception line
            before it, which had none (``ImportError: `` and then ``str(e)`` on the lines
            after it, unindented: NumPy's ABI error); it replaces that event.
    """

    exception: str
    message: str
    context: str | None
    logged: bool
    chained: bool
    in_traceback: bool
    frame: str | None = None
    phase: Phase | None = None
    continued: bool = False


class CutTraceback(NamedTuple):
    """The innermost frames of a traceback still open (no exception line yet).

    A paste, a search index or a dying process often ends a traceback before its exception
    line; its innermost frames still say where it was raised.

    Attributes:
        frames: the last ``_INNER_FRAMES`` frame lines read, outermost first
            (``  File "…/kv_cache_utils.py", line 699, in check_enough_kv_cache_memory``).
        source: the source line printed under the innermost frame, stripped
            (``raise ValueError("No available memory for the cache blocks. "``), or ``None``.
        phase: the startup phase the innermost vLLM frame that names one ran in
            (``frames.FRAME_PHASES``), if any.
        entry: an uncaught (raw, not logged) traceback that ran through a process's entry
            frame (``_ENTRY_FRAMES``: multiprocessing's ``_bootstrap``, the engine core's
            ``run_engine_core``): the process itself is dying of it.
    """

    frames: tuple[str, ...]
    source: str | None
    phase: Phase | None = None
    entry: bool = False


_OPEN: Final = frozenset({_State.FRAMES, _State.CHAIN})
_INNER_FRAMES: Final = 3  # innermost frames kept per open traceback (bounded state)
# A process's entry frames: an uncaught exception through them ends that process
# (CPython's multiprocessing/process.py ``BaseProcess._bootstrap``; vLLM's
# v1/engine/core.py ``EngineCoreProc.run_engine_core``, 0.8–0.33).
_ENTRY_FRAMES: Final = ("in _bootstrap", "in run_engine_core")
_MARKS: Final = frozenset("^~ ")  # CPython 3.11+ position marks under a source line


class _Stream:
    __slots__ = (
        "blank", "chained", "context", "entry", "frame", "frames", "logged", "phase", "quiet",
        "source", "state", "survivor",
    )  # fmt: skip

    def __init__(self) -> None:
        self.frame: str | None = None  # the last ``  File "…"`` line of the traceback
        self.frames: tuple[str, ...] = ()  # the innermost frames (``_INNER_FRAMES``)
        self.source: str | None = None  # the source line under the innermost frame
        self.phase: Phase | None = None  # the phase its innermost vLLM frame with one names
        self.quiet: str | None = None  # the level of a traceback logged at INFO/WARNING/DEBUG
        self.survivor = False  # kept open across a new process's banner (``reset``)
        self.state = _State.IDLE
        self.context: str | None = None
        self.logged = False
        self.chained = False
        # the last exception line ended in ``Cls: `` with no message: its message may follow
        # on the next lines, unindented (``str(e)`` starting with a newline)
        self.blank: ExceptionEvent | None = None
        self.entry = False  # a raw traceback's frames passed a process entry (``CutTraceback``)


class TracebackAssembler:
    """Per-process traceback state machine: ``feed`` one line body at a time.

    Args:
        max_streams: processes tracked at once; the oldest is forgotten beyond it.
        max_message: exception messages are cut to this many characters (``…`` ends a cut).
    """

    def __init__(self, max_streams: int = 256, max_message: int = 1000) -> None:
        self._streams: dict[object, _Stream] = {}
        self._max_streams = max_streams
        self._max_message = max_message

    def _stream(self, key: object) -> _Stream:
        stream = self._streams.get(key)
        if stream is None:
            if len(self._streams) >= self._max_streams:
                del self._streams[next(iter(self._streams))]
            stream = self._streams[key] = _Stream()
        return stream

    def reset(self) -> None:
        """Forget the streams of processes that are gone (a new process started in their
        place, as after a container restart that reuses the PIDs).

        A traceback still open (header and frames read, no exception line yet) is kept: the
        dying process is still printing it, and its rest may arrive after the new process's
        first lines. As its PID may belong to a new process by then, such a traceback takes
        only a line shaped like its rest (a frame, or an exception line naming an exception
        class); any other line ends it.
        """
        open_streams = {
            key: s for key, s in self._streams.items() if s.state in _OPEN and s.quiet is None
        }
        self._streams.clear()
        for key, stream in open_streams.items():
            stream.survivor = True  # its PID may be a new process's now: see ``feed``
            self._streams[key] = stream

    def is_open(self, key: object) -> bool:
        """True while stream ``key`` is inside a traceback that has no exception line yet."""
        stream = self._streams.get(key)
        return stream is not None and stream.state in _OPEN and stream.quiet is None

    def cut(self, key: object) -> CutTraceback | None:
        """The innermost frames of stream ``key``'s open traceback, or ``None`` when it has no
        open traceback with a frame (see ``CutTraceback``)."""
        stream = self._streams.get(key)
        if stream is None or stream.state is not _State.FRAMES or stream.quiet is not None:
            return None
        if not stream.frames:
            return None
        return CutTraceback(stream.frames, stream.source, stream.phase, stream.entry)

    def context_of(self, key: object) -> str | None:
        """The last plain line the stream printed (what a traceback would be about)."""
        stream = self._streams.get(key)
        return stream.context if stream is not None else None

    def feed(
        self, key: object, body: str, level: str | None, has_header: bool
    ) -> tuple[bool, ExceptionEvent | None, bool]:
        """Read one line body of stream ``key``.

        Args:
            key: the writing process (PID), or any hashable that tells streams apart.
            body: the line after prefix and header.
            level: the vLLM level from the header, if any.
            has_header: whether the line carried vLLM's header (logged, not raw stderr).

        Returns:
            ``(consumed, event, started)``: ``consumed`` is True when the line belongs to a
            traceback (callers must not read it as a marker); ``event`` is set on an
            exception line; ``started`` is True when this line opened a new traceback (not a
            chained one), so a caller can act before the exception line arrives (excerpts and
            crashes often cut it off).
        """
        stream = self._streams.get(key)
        if (
            stream is None
            and has_header
            and level in _QUIET_LEVELS
            and not body.startswith(_OPENINGS)
        ):
            return False, None, False  # hot path: a logged INFO line of a quiet process
        if body.startswith(_TRACEBACK):
            stream = stream or self._stream(key)
            stream.survivor = False
            stream.chained = stream.state is _State.CHAIN
            stream.state = _State.FRAMES
            stream.frame = None
            stream.frames = ()
            stream.source = None
            stream.phase = None
            stream.entry = False
            stream.logged = has_header
            stream.quiet = level if has_header and level in _QUIET_LEVELS else None
            return True, None, not stream.chained and stream.quiet is None
        if stream is None or stream.state is _State.IDLE:
            return self._idle(key, stream, body, level, has_header)
        state = stream.state
        if stream.quiet is not None:
            if has_header and level == stream.quiet:
                return True, None, False  # the rest of a handled exception's logged record
            stream.quiet = None  # that record is complete: this line is something else
            stream.state = _State.IDLE
            return self._idle(key, stream, body, level, has_header)
        if state is _State.FRAMES:
            if not body or body[0] in " \t" or body.startswith("[Previous line repeated"):
                if body and has_header and level in _QUIET_LEVELS:
                    # A logged INFO/DEBUG/WARNING line is never a frame, even indented (a dict
                    # dump, a new process's logo): not ours, and the traceback goes on. A new
                    # process (banner) makes the caller ``reset`` the streams.
                    return False, None, False
                if body.startswith('  File "'):
                    stream.frame = body[:_MAX_FRAME]
                    stream.frames = (*stream.frames[1 - _INNER_FRAMES :], stream.frame)
                    stream.source = None
                    phase = frame_phase(body)
                    if phase is not None:
                        stream.phase = phase  # frames run outermost first: the last one wins
                    if not stream.logged and body.endswith(_ENTRY_FRAMES):
                        stream.entry = True
                elif stream.source is None and stream.frames:
                    source = body.strip()
                    if source and not _MARKS.issuperset(source):
                        stream.source = source[:_MAX_FRAME]  # the frame's first source line
                return True, None, False
            if has_header and level not in _ERROR_LEVELS:
                return False, None, False  # another thread's log line in between: not ours
            if stream.survivor and _ORPHAN_EXCEPTION_LINE.match(body) is None:
                stream.state = _State.IDLE  # a new process's line, not the old exception line
                stream.survivor = False
                return self._idle(key, stream, body, level, has_header)
            if is_announcement(body):
                # "EngineCore failed to start." says a failure happened, never which: another
                # process's open traceback (no PID prefixes, 0.8–0.9) does not take it as its
                # exception line
                stream.state = _State.IDLE
                return self._idle(key, stream, body, level, has_header)
            found = _EXCEPTION_LINE.match(body)
            if found is None and _PROGRESS_BAR.search(body) is not None:
                return False, None, False  # another process's progress bar: not ours
            exception, message = (
                (found.group("cls"), found.group("msg") or "") if found else (body, "")
            )
            stream.state = _State.AFTER_EXCEPTION
            event = ExceptionEvent(
                exception[:_MAX_CLASS],
                shortened(message, self._max_message),
                stream.context,
                stream.logged,
                stream.chained,
                True,
                stream.frame,
                stream.phase,
            )
            blank = found is not None and found.group("msg") is not None and not message.strip()
            stream.blank = event if blank else None
            return True, event, False
        if not body:
            stream.blank = None  # a message on the lines after its class ends at a blank line
            return True, None, False
        if state is _State.AFTER_EXCEPTION:
            if body.startswith(_CHAIN_STARTS):
                stream.state = _State.CHAIN
                stream.blank = None
                return True, None, False
            if body[0] in " \t" and not (has_header and level in _QUIET_LEVELS):
                return True, None, False  # continuation of a multi-line exception message
            if stream.blank is not None and (not has_header or level in _ERROR_LEVELS):
                return True, self._message_after(stream, body), False
            # Anything else ends the traceback, a logged INFO/DEBUG/WARNING line included:
            # after a container restart the same PID prints the new process's logo, whose
            # lines start with blanks.
        stream.state = _State.IDLE
        stream.blank = None
        return self._idle(key, stream, body, level, has_header)

    def _message_after(self, stream: _Stream, body: str) -> ExceptionEvent:
        """A line after an exception line with no message (``ImportError: ``): Python
        printed ``str(e)``, which began with a newline, over the next lines, unindented.
        They are the message, joined, until a blank line (``blank`` is cleared there) or
        another traceback part; each gives the exception again, ``continued``."""
        blank = stream.blank
        assert blank is not None
        message = f"{blank.message} {body.strip()}" if blank.message else body.strip()
        event = blank._replace(message=message[: self._max_message], continued=True)
        stream.blank = event if len(message) < self._max_message else None
        return event

    def _idle(
        self, key: object, stream: _Stream | None, body: str, level: str | None, has_header: bool
    ) -> tuple[bool, ExceptionEvent | None, bool]:
        if body[:1] in " \t" and _MARKER_LINE.match(body) is not None:
            return True, None, False  # a frame's position markers (excerpt cut above them)
        if body.startswith('  File "'):
            stream = stream or self._stream(key)
            stream.state = _State.FRAMES
            stream.frame = body[:_MAX_FRAME]
            stream.frames = (stream.frame,)
            stream.source = None
            stream.phase = frame_phase(body)
            stream.logged = has_header
            stream.entry = not has_header and body.endswith(_ENTRY_FRAMES)
            stream.chained = False
            stream.quiet = level if has_header and level in _QUIET_LEVELS else None
            return True, None, stream.quiet is None
        if level is None or level in _ERROR_LEVELS:
            found = _ORPHAN_EXCEPTION_LINE.match(body)
            if found is not None:
                stream = stream or self._stream(key)
                stream.state = _State.AFTER_EXCEPTION
                event = ExceptionEvent(
                    found.group("cls")[:_MAX_CLASS],
                    shortened(found.group("msg") or "", self._max_message),
                    stream.context,
                    has_header,
                    False,
                    False,
                )
                blank = found.group("msg") is not None and not found.group("msg").strip()
                stream.blank = event if blank else None
                return True, event, False
        if body and (stream is not None or level in _ERROR_LEVELS or not has_header):
            stream = stream or self._stream(key)
            stream.context = body[:200]
        return False, None, False
