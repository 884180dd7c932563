"""The shapes of values taken from log text into commands and hints (core: pure).

Log text is untrusted: a unit's own line can say ``flashinfer version (0.6.4;curl …|sh)``. A
value a hint takes from a message (a version, a package name, a port, a path …) goes into a
command the operator may paste into a shell, so each value must match the shape it claims to
be, from this table, before it enters a template; a value of the wrong shape makes the row
give no command (``hints.hint_for`` falls back to the cause's own text, which holds no log
text). One row per *kind* of value; ``FIELD_SHAPES`` maps every field name a hint pattern
captures to its kind (a test checks that no captured field lacks one).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from types import MappingProxyType
from typing import Final

from vllm_sentinel.engine.decode.unit_name import is_unit_name

__all__ = ["FIELD_SHAPES", "SHAPES", "has_shape"]

_PEP440: Final = (
    r"v?(?:\d+!)?\d+(?:\.\d+)*"
    r"(?:[-_.]?(?:a|b|c|rc|alpha|beta|pre|preview)[-_.]?\d*)?"
    r"(?:-\d+|[-_.]?(?:post|rev|r)[-_.]?\d*)?"
    r"(?:[-_.]?dev[-_.]?\d*)?"
    r"(?:\+[a-z0-9]+(?:[-_.][a-z0-9]+)*)?"
)
_PACKAGE: Final = r"[A-Za-z0-9](?:[A-Za-z0-9._-]*[A-Za-z0-9])?"
_CLAUSE: Final = r"(?:~=|===|==|!=|<=|>=|<|>) ?[A-Za-z0-9.*+!_-]{1,64}"
_SPEC: Final = _CLAUSE + r"(?:, ?" + _CLAUSE + r"){0,7}"

SHAPES: Mapping[str, re.Pattern[str]] = MappingProxyType(
    {
        # PEP 440 (packaging's version grammar, public and local parts)
        "version": re.compile(_PEP440, re.IGNORECASE),
        # PEP 508 distribution name
        "package": re.compile(_PACKAGE),
        # PEP 440 version specifiers, one to eight clauses
        "specifier": re.compile(_SPEC),
        "requirement": re.compile(_PACKAGE + _SPEC),
        # a dotted Python import name; one identifier
        "module": re.compile(r"[A-Za-z_]\w{0,63}(?:\.[A-Za-z_]\w{0,63}){0,15}", re.ASCII),
        "identifier": re.compile(r"[A-Za-z_]\w{0,127}", re.ASCII),
        # a count, or an amount with an optional binary/decimal byte unit ("2.06 MiB")
        "integer": re.compile(r"\d{1,12}"),
        "quantity": re.compile(r"\d{1,12}(?:\.\d{1,12})?(?: ?[KMGT]?i?B)?"),
        "port": re.compile(r"(?:6553[0-5]|655[0-2]\d|65[0-4]\d\d|6[0-4]\d{3}|[1-5]?\d{1,4})"),
        # an address a server binds: IPv4, IPv6, a DNS name, or '' (every interface)
        "address": re.compile(r"[A-Za-z0-9.:%_-]{0,253}"),
        # a file path or model id without shell syntax (no space, quote, $, ;, |, &, `)
        "path": re.compile(r"[\w./@+:~=,-]{1,255}", re.ASCII),
        "file_name": re.compile(r"[\w.@+-]{1,255}", re.ASCII),
        "repository": re.compile(r"[\w.-]{1,96}/[\w.-]{1,96}", re.ASCII),
        # command-line options as argparse echoes them ("--kv-cache-memory-bytes 8G")
        "arguments": re.compile(r"-[\w.:/,+=-]{0,63}(?: -{0,2}[\w.:/,+=-]{1,63}){0,15}", re.ASCII),
        # a device or runtime name ("cuda:0", "NPU", "UR_RESULT_ERROR_OUT_OF_RESOURCES")
        "device": re.compile(r"[\w:]{1,64}", re.ASCII),
        # words only shown as prose, never in a command: letters, digits, spaces, a few marks
        "words": re.compile(r"[\w ,.:'()<>+*&~\[\]-]{1,200}"),
    }
)
"""Each kind of value, and the one pattern a value of that kind must match whole."""

FIELD_SHAPES: Mapping[str, str] = MappingProxyType(
    {
        "package": "package",
        "other": "package",
        "have": "version",
        "want": "version",
        "spec": "specifier",
        "requirement": "requirement",
        "module": "module",
        "name": "identifier",
        "library": "identifier",
        "path": "path",
        "path2": "path",
        "directory": "path",
        "file": "file_name",
        "repo": "repository",
        "symbol": "words",
        "found": "integer",
        "pid": "integer",
        "gpu": "integer",
        "heads": "integer",
        "tp": "integer",
        "limit": "integer",
        "requests": "integer",
        "estimate": "integer",
        "length": "integer",
        "asked": "quantity",
        "needed": "quantity",
        "available": "quantity",
        "held": "quantity",
        "free": "quantity",
        "total": "quantity",
        "util": "quantity",
        "wanted": "quantity",
        "capability": "quantity",
        "port": "port",
        "host": "address",
        "device": "device",
        "code": "device",
        "function": "device",
        "gpu_name": "words",
        "architectures": "words",
        "arguments": "arguments",
        "waited": "integer",  # the engine ready timeout's seconds (hints: engine_ready_timeout)
    }
)
"""Every field a ``hints.MESSAGE_HINTS`` pattern captures → the kind of value it must be."""


def has_shape(field: str, value: str) -> bool:
    """Whether ``value``, captured as ``field``, is the kind of value that field is.

    Args:
        field: a captured field's name (a ``FIELD_SHAPES`` key), or ``unit`` (a systemd unit
            name, ``unit_name.is_unit_name``).
        value: the text taken from the log (already cut short by the caller).

    Returns:
        True when it matches its shape whole; False for a field of no known shape (fail
        closed: a new field must be given one).
    """
    if field == "unit":
        return is_unit_name(value)
    kind = FIELD_SHAPES.get(field)
    pattern = SHAPES.get(kind) if kind is not None else None
    return pattern is not None and pattern.fullmatch(value) is not None
