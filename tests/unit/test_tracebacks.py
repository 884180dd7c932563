"""TracebackAssembler: interleaved processes, chains, orphans, bounded state."""

from __future__ import annotations

from vllm_sentinel.engine.tracebacks import TracebackAssembler


def _feed(
    assembler: TracebackAssembler,
    key: object,
    lines: list[str],
    level: str | None = "ERROR",
    header: bool = True,
) -> list:
    events = []
    for line in lines:
        _, event, _ = assembler.feed(key, line, level, header)
        if event is not None:
            events.append(event)
    return events


class TestAssembly:
    """What comes out of tracebacks."""

    def test_interleaved_workers_are_kept_apart(self) -> None:
        """Two ranks printing at once each yield their own exception with their context."""
        assembler = TracebackAssembler()
        a = [
            "WorkerProc hit an exception.",
            "Traceback (most recent call last):",
            '  File "a.py", line 1, in f',
        ]
        b = [
            "WorkerProc failed to start.",
            "Traceback (most recent call last):",
            '  File "b.py", line 2, in g',
        ]
        events = []
        for left, right in zip(a, b, strict=True):
            events += _feed(assembler, 1, [left]) + _feed(assembler, 2, [right])
        events += _feed(assembler, 2, ["RuntimeError: B"]) + _feed(assembler, 1, ["ValueError: A"])
        assert [(e.exception, e.message, e.context) for e in events] == [
            ("RuntimeError", "B", "WorkerProc failed to start."),
            ("ValueError", "A", "WorkerProc hit an exception."),
        ]

    def test_chain_yields_every_link_in_order(self) -> None:
        """The original exception first, then the one it caused, marked chained."""
        assembler = TracebackAssembler()
        events = _feed(
            assembler,
            7,
            [
                "Traceback (most recent call last):",
                '  File "s.py", line 571, in run',
                "subprocess.CalledProcessError: Command '['ninja']' returned non-zero exit status 1.",
                "",
                "The above exception was the direct cause of the following exception:",
                "",
                "Traceback (most recent call last):",
                '  File "c.py", line 699, in run_engine_core',
                "RuntimeError: Engine core initialization failed.",
            ],
            level=None,
            header=False,
        )
        assert [(e.exception, e.chained, e.logged) for e in events] == [
            ("subprocess.CalledProcessError", False, False),
            ("RuntimeError", True, False),
        ]

    def test_orphan_exception_line(self) -> None:
        """An excerpt that starts at the exception line still yields it."""
        events = _feed(
            TracebackAssembler(),
            None,
            ["ValueError: Invalid repository ID or local directory specified: '/models'."],
            level=None,
            header=False,
        )
        assert [(e.exception, e.in_traceback) for e in events] == [("ValueError", False)]

    def test_frames_are_consumed_not_markers(self) -> None:
        """Frame lines are claimed by the assembler so callers never match them as markers."""
        assembler = TracebackAssembler()
        assembler.feed(3, "Traceback (most recent call last):", "ERROR", True)
        consumed, event, _ = assembler.feed(3, "    self.worker.load_model()", "ERROR", True)
        assert consumed and event is None

    def test_never_ending_traceback_keeps_state_small(self) -> None:
        """A million frame lines and a thousand processes keep at most max_streams states."""
        assembler = TracebackAssembler(max_streams=16)
        for pid in range(1000):
            assembler.feed(pid, "Traceback (most recent call last):", None, False)
        for _ in range(10_000):
            assembler.feed(999, '  File "x.py", line 1, in f', None, False)
        assert len(assembler._streams) <= 16


class TestRestartedProcess:
    """A restarted container reuses the PID of a process that died of a raw traceback."""

    LOGO = ("", "       █     █     █▄   ▄█", " ▄▄ ▄█ █     █     █ ▀▄▀ █  version 0.22.1")

    def test_logged_info_line_ends_a_raw_traceback(self) -> None:
        """The new process's logo (INFO lines that start with blanks) is read, not swallowed."""
        assembler = TracebackAssembler()
        _feed(
            assembler,
            1,
            ["Traceback (most recent call last):", "RuntimeError: Engine core init failed."],
            level=None,
            header=False,
        )
        consumed = [assembler.feed(1, line, "INFO", True)[0] for line in self.LOGO]
        assert consumed == [True, False, False]  # the empty line says nothing either way
        assert assembler._streams[1].context == self.LOGO[-1]

    def test_logged_info_line_in_the_frames_of_a_raw_traceback(self) -> None:
        """A raw traceback cut before its exception line does not swallow the logo either."""
        assembler = TracebackAssembler()
        _feed(
            assembler,
            1,
            ["Traceback (most recent call last):", '  File "/usr/local/bin/vllm", line 10'],
            level=None,
            header=False,
        )
        assert not assembler.feed(1, self.LOGO[2], "INFO", True)[0]
        assembler.reset()  # what the tracker does when that banner starts a new incarnation
        consumed, event, _ = assembler.feed(1, "Warning: unauthenticated requests", None, False)
        assert (consumed, event) == (False, None)  # not read as the old exception line

    def test_an_indented_logged_line_inside_a_raw_traceback_does_not_end_it(self) -> None:
        """Another thread's DEBUG dict dump between the frames: passed on, the traceback goes
        on to its exception line with its context (a thread exception stays one)."""
        assembler = TracebackAssembler()
        _feed(
            assembler,
            1,
            ["Exception in thread Thread-3:", "Traceback (most recent call last):",
             '  File "/usr/lib/python3.12/threading.py", line 1075, in _bootstrap_inner'],
            level=None,
            header=False,
        )  # fmt: skip
        assert not assembler.feed(1, '  "max_num_seqs": 256,', "DEBUG", True)[0]
        assert assembler.feed(1, "    self.run()", None, False)[0]
        consumed, event, _ = assembler.feed(1, "RuntimeError: boom", None, False)
        assert consumed and event is not None
        assert (event.exception, event.message) == ("RuntimeError", "boom")
        assert "Exception in thread" in event.context

    def test_continuations_of_an_exception_message_stay_consumed(self) -> None:
        """Raw and ERROR-logged continuation lines still belong to the exception message."""
        assembler = TracebackAssembler()
        _feed(
            assembler,
            1,
            ["Traceback (most recent call last):", "ValueError: first line"],
            level=None,
            header=False,
        )
        assert assembler.feed(1, "  second line", None, False)[0]
        _feed(assembler, 2, ["Traceback (most recent call last):", "ValueError: first line"])
        assert assembler.feed(2, "  second line", "ERROR", True)[0]


class TestCaretLines:
    """Python 3.11+'s ``^``/``~`` marker lines under a frame's source line (PEP 657)."""

    CARETS = (
        "           ^^^^^^^^^^^^^^^^^^^^^^^^^^^^^",
        "    return self.forward(*args)",  # a source line, then its markers
        "                ~~~~~~~~~~^^^^^^^^^^^",
        "    ~~~~~~~~~~~~~~~~~~~~~~~~^~~~~~~~~~~",
    )

    def test_a_marker_line_is_part_of_a_frame_never_context_or_exception(self) -> None:
        """An excerpt starting at a marker line: the line is consumed, never the context."""
        assembler = TracebackAssembler()
        for level, header in (("ERROR", True), (None, False)):
            for line in (self.CARETS[0], self.CARETS[2], self.CARETS[3]):
                consumed, event, _ = assembler.feed(1, line, level, header)
                assert consumed and event is None
        assert assembler.context_of(1) is None

    def test_an_excerpt_starting_at_carets_reports_no_message(self) -> None:
        """The fresh 710 shape: carets, then frames, cut off before the exception line."""
        from vllm_sentinel.replay import replay

        prefix = "(VllmWorkerProcess pid=7) ERROR 03-25 12:23:00 [multiproc_worker_utils.py:238] "
        lines = [
            self.CARETS[0],
            '  File "/x/vllm/model_executor/models/qwen2.py", line 462, in forward',
            "    hidden_states = self.model(input_ids)",
            self.CARETS[2],
        ]
        text = "".join(prefix + line + "\n" for line in lines).encode()
        (unit,) = replay([[text]]).units
        crash = unit.incarnations[-1].crash
        assert crash is not None
        assert (crash.cause.value, crash.exception, crash.message) == ("unknown", "", "")


# chipmuenk/pyfda#253 (a comment's traceback): NumPy 2.0.0 raising ImportError(msg) from
# numpy/core/_multiarray_umath.py, msg starting with a newline; vllm-project/vllm#5594 (the
# same message printed by vLLM 0.5's import, NumPy 2.0.0).
NUMPY_TRACEBACK = [
    "Traceback (most recent call last):",
    '  File "/home/sergei/.local/share/pipx/venvs/pyfda/lib/python3.12/site-packages/numpy/core/'
    '_multiarray_umath.py", line 44, in __getattr__',
    "    raise ImportError(msg)",
    "ImportError: ",
    "A module that was compiled using NumPy 1.x cannot be run in",
    "NumPy 2.0.0 as it may crash. To support both 1.x and 2.x",
    "versions of NumPy, modules must be compiled with NumPy 2.0.",
    "Some module may need to rebuild instead e.g. with 'pybind11>=2.12'.",
    "",
    "If you are a user of the module, the easiest solution will be to",
    "downgrade to 'numpy<2' or try to upgrade the affected module.",
]


class TestMessageOnTheNextLines:
    """``Cls: `` with no message, then ``str(e)`` over the next lines, unindented."""

    def test_the_lines_after_an_empty_message_are_its_message(self) -> None:
        """Each line up to the blank one completes the message (``continued`` events); the
        text after the blank line is no longer the exception's."""
        events = _feed(TracebackAssembler(), 1, NUMPY_TRACEBACK, level=None, header=False)
        assert [e.exception for e in events] == ["ImportError"] * 5
        assert [e.continued for e in events] == [False, True, True, True, True]
        assert events[-1].message == " ".join(NUMPY_TRACEBACK[4:8])
        assert events[1].frame == events[0].frame and events[1].in_traceback

    def test_an_exception_without_a_colon_takes_no_message(self) -> None:
        """``KeyboardInterrupt`` (no ``: ``) and a message on its own line: the next line is
        not its message."""
        events = _feed(
            TracebackAssembler(),
            1,
            ["Traceback (most recent call last):", '  File "a.py", line 1, in f',
             "KeyboardInterrupt", "A module that was compiled using NumPy 1.x cannot be run in"],
            level=None,
            header=False,
        )  # fmt: skip
        assert [(e.exception, e.continued) for e in events] == [("KeyboardInterrupt", False)]

    def test_a_bare_empty_exception_line_takes_the_next_lines(self) -> None:
        """Without its traceback (an excerpt starting at the exception line, as in #5594's
        thread) the next lines are the message too."""
        events = _feed(TracebackAssembler(), 1, NUMPY_TRACEBACK[3:6], level=None, header=False)
        assert events[-1].exception == "ImportError"
        assert events[-1].message.startswith("A module that was compiled using NumPy 1.x")
