"""``SeenCursors``: journald cursors already applied are recognised, in constant memory."""

from __future__ import annotations

import pytest

from vllm_sentinel.engine.seen_cursors import SeenCursors

_ID = "s=9f0e8d7c6b5a49382716a5b4c3d2e1f0"
_REST = "b=5b3a1c0d9e8f47a6b2c4d6e8f0a1b3c5;m=3e5;t=64748462043e5;x=9e3779b1"


def _cursor(seqnum: str, seqnum_id: str = _ID) -> str:
    return f"{seqnum_id};i={seqnum};{_REST}"


class TestOneJournalFile:
    def test_a_cursor_is_new_once(self) -> None:
        seen = SeenCursors()
        assert [seen.seen(_cursor("1a")), seen.seen(_cursor("1a"))] == [False, True]

    def test_an_earlier_seqnum_of_the_same_file_was_applied(self) -> None:
        """Within one seqnum id sequence numbers only grow: a lower one was read before."""
        seen = SeenCursors()
        assert [seen.seen(_cursor(n)) for n in ("ff", "100", "fe", "101")] == [
            False,
            False,
            True,
            False,
        ]

    def test_a_seqnum_at_the_end_of_the_cursor(self) -> None:
        seen = SeenCursors()
        assert [seen.seen(f"{_ID};i=7"), seen.seen(f"{_ID};i=7"), seen.seen(f"{_ID};i=8")] == [
            False,
            True,
            False,
        ]

    @pytest.mark.parametrize(
        ("odd", "applied"),
        [
            ("", False),  # no seqnum at all: remembered whole
            ("+1f", False),
            (" 1f", False),
            ("1A", True),  # otherwise read as far as it is lowercase hex: 1, then 1f, …
            ("1g", True),
            ("0x1f", True),
            ("1_f", True),
            ("1f ", True),
        ],
    )
    def test_a_seqnum_that_is_no_lowercase_hex_is_not_read_as_one(
        self, odd: str, applied: bool
    ) -> None:
        """journald writes the seqnum in lowercase hex (``%llx``) up to the next ``;``:
        anything else there is never read as a number of the last file (``int(…, 16)`` would
        take ``0x1f``, ``1_f`` or blanks); the cursor is read as far as it has the shape, else
        remembered whole — and the file's own sequence goes on unharmed."""
        seen = SeenCursors()
        assert seen.seen(_cursor("ff")) is False
        assert seen.seen(_cursor(odd)) is applied
        assert seen.seen(_cursor(odd)) is True
        assert seen.seen(_cursor("100")) is False

    def test_another_file_keeps_its_own_sequence(self) -> None:
        other = "s=00000000000000000000000000000001"
        seen = SeenCursors()
        assert [
            seen.seen(_cursor("10")),
            seen.seen(_cursor("5", other)),
            seen.seen(_cursor("f")),
            seen.seen(_cursor("5", other)),
        ] == [False, False, True, True]
