"""Plain text names no unit: replay names it after systemd's lines, and says when they name
several (lines shaped as `journalctl -u … --no-pager` prints them; systemd 252 wording)."""

from __future__ import annotations

from vllm_sentinel.replay import replay


def _text(lines: list[str]) -> list[list[bytes]]:
    return [["\n".join(lines).encode() + b"\n"]]


A_START = "Mar 08 08:20:01 host1 systemd[1]: Started vllm-a.service - vLLM A."
A_LINE = (
    "Mar 08 08:20:05 host1 vllm[4242]: INFO 03-08 08:20:05 [api_server.py:1043] vLLM API "
    "server version 0.17.0"
)
B_START = "Mar 08 08:21:01 host1 systemd[1]: Started vllm-b.service - vLLM B."
B_EXIT = (
    "Mar 08 08:21:30 host1 systemd[1]: vllm-b.service: Main process exited, code=exited, "
    "status=1/FAILURE"
)


def test_the_unit_systemd_names_is_the_units_name() -> None:
    result = replay(_text([A_START, A_LINE]))
    assert [unit.unit for unit in result.units] == ["vllm-a.service"]
    assert result.warnings == ()


def test_several_units_in_one_text_are_said_not_guessed() -> None:
    result = replay(_text([A_START, A_LINE, B_START, B_EXIT]))
    (unit,) = result.units
    assert unit.unit == "vllm"  # one timeline, as before: nothing tells the lines apart
    (warning,) = result.warnings
    assert "vllm-a.service, vllm-b.service" in warning and "journalctl -o json" in warning


def test_a_name_given_by_the_user_is_kept() -> None:
    result = replay(_text([A_START, A_LINE]), unit="mine")
    assert [unit.unit for unit in result.units] == ["mine"]


def test_journal_json_units_are_untouched() -> None:
    record = (
        b'{"__CURSOR":"s=1;i=1","__REALTIME_TIMESTAMP":"1772958001000000","_SYSTEMD_UNIT":'
        b'"vllm-a.service","MESSAGE":"INFO 03-08 08:20:05 [api_server.py:1043] vLLM API server '
        b'version 0.17.0"}\n'
    )
    result = replay([[record]])
    assert [unit.unit for unit in result.units] == ["vllm-a.service"]
    assert result.warnings == ()


def test_a_unit_filter_that_matches_nothing_says_which_units_there_are() -> None:
    """``--unit 'nomatch*'`` on a journal: no unit matched, and the output says so and names
    the units the input holds (a new user's trial read only ``no vLLM records found``)."""
    record = (
        b'{"__CURSOR":"s=1;i=1","__REALTIME_TIMESTAMP":"1772958001000000","_SYSTEMD_UNIT":'
        b'"vllm-a.service","MESSAGE":"INFO 03-08 08:20:05 [api_server.py:1043] vLLM API server '
        b'version 0.17.0"}\n'
    )
    result = replay([[record]], unit="nomatch*")
    assert result.units == ()
    (warning,) = result.warnings
    assert warning == "no unit matches 'nomatch*'; the input holds vllm-a.service"
    assert replay([[record]], unit="vllm-*").warnings == ()
