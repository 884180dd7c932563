"""What log text and other processes' journal fields may not do (issue 22): unit names from
the journal, manager messages from anyone but the manager."""

from __future__ import annotations

import orjson
import pytest

from vllm_sentinel.engine.decode.journal_json import JournalJsonDecoder
from vllm_sentinel.engine.decode.unit_name import is_unit_name


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
