"""Log text made safe for a terminal (core: pure).

A unit's log line may hold terminal control sequences: ``ESC c`` resets the terminal, an OSC
sets its title or writes the clipboard, a DCS talks to the terminal itself, ``CSI``
(``ESC [`` or the one-byte C1 ``\\x9b``) moves the cursor or repaints lines, a backspace or
carriage return hides what came before. ``status``, ``replay`` and ``watch`` print log text,
so everything they print goes through ``printable``: escape sequences are removed whole and
every other C0/C1 control but tab and newline is dropped. A JSON document they print goes
through ``printable_values`` first (``jq -r`` writes a value as it is), then
``json_for_terminal``, which writes any C1 control and DEL left as ``\\u`` escapes (orjson
already escapes C0). Log text kept or shown to a length is cut by ``shortened``, which always
ends a cut with ``…``: a message that stops mid-word must not read as whole.
"""

from __future__ import annotations

import re
from typing import Final

__all__ = ["ELLIPSIS", "json_for_terminal", "printable", "printable_values", "shortened"]

_SEQUENCE: Final = re.compile(
    r"(?:\x1b\[|\x9b)[0-?]*[ -/]*[@-~]?"  # CSI … final byte
    # OSC, DCS, SOS, PM, APC … to BEL or ST
    r"|(?:\x1b[\]PX^_]|[\x90\x98\x9d\x9e\x9f])[^\x07\x1b\x9c]*(?:\x07|\x1b\\|\x9c)?"
    r"|\x1b[ -/]*[0-~]?"  # any other escape (ESC c, ESC 7, charset selection …)
)
_CONTROL: Final = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")
_JSON_C1: Final = re.compile("[\x7f-\x9f]")

ELLIPSIS: Final = "…"
"""What ends a text that was cut: one character, so a cut text keeps its limit."""


def shortened(text: str, limit: int) -> str:
    """``text`` as it is when it has at most ``limit`` characters; else its first
    ``limit - 1`` (blanks at the cut dropped) and ``ELLIPSIS``, at most ``limit`` in all.

    Every cut of log text the engine keeps (an exception's message, a failure line) or a
    renderer shows (a table cell) goes through here, so that no cut is silent.
    """
    if len(text) <= limit:
        return text
    return text[: max(limit - 1, 0)].rstrip() + ELLIPSIS


def printable(text: str) -> str:
    """``text`` without terminal control sequences or control characters (tab and newline
    are kept).

    Args:
        text: anything about to be written to a terminal (log text included).

    Returns:
        The text with every escape sequence (CSI, OSC, DCS, SOS, PM, APC, two-byte escapes,
        their C1 forms) removed whole and every other C0/C1 control and DEL dropped.
    """
    if text.isprintable():
        return text
    return _CONTROL.sub("", _SEQUENCE.sub("", text))


def json_for_terminal(document: bytes) -> bytes:
    """A UTF-8 JSON document with DEL and C1 controls written as ``\\u00XX`` escapes."""
    text = document.decode("utf-8")
    return _JSON_C1.sub(lambda found: f"\\u{ord(found.group()):04x}", text).encode("utf-8")


def printable_values(document: object) -> object:
    """``document`` (JSON-shaped: dicts, lists, strings, numbers) with ``printable`` applied
    to every string in it, keys included; other values are returned as they are."""
    if isinstance(document, str):
        return printable(document)
    if isinstance(document, dict):
        return {printable(str(key)): printable_values(value) for key, value in document.items()}
    if isinstance(document, list | tuple):
        return [printable_values(value) for value in document]
    return document
