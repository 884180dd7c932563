"""systemd's unit-name grammar, for names read from a journal (core: pure).

A name that reaches ``journalctl --unit=`` or a fix hint must be a unit name systemd could
have made (systemd.unit(5), ``unit_name_is_valid`` in systemd's src/basic/unit-name.c):
``PREFIX[@INSTANCE].TYPE``, at most 255 characters, the prefix and instance of letters,
digits and ``: - _ . \\``, the type one of ``UNIT_TYPES``. Names read from the journal are
exact names, never globs: ``* ? [ ]`` are refused, so a value another process wrote cannot
become a pattern that matches nothing and makes journalctl fail ("No data available").
"""

from __future__ import annotations

import re
from typing import Final

__all__ = ["MAX_UNIT_NAME", "UNIT_TYPES", "is_unit_name"]

MAX_UNIT_NAME: Final = 255
"""systemd's ``UNIT_NAME_MAX``, the ``.type`` included."""

UNIT_TYPES: Final = frozenset(
    {
        "service",
        "socket",
        "device",
        "mount",
        "automount",
        "swap",
        "target",
        "path",
        "timer",
        "slice",
        "scope",
    }
)
"""The unit types (systemd.unit(5)); a unit name ends in ``.`` and one of them."""

_NAME: Final = re.compile(r"[A-Za-z0-9:_.\\-]+(?:@[A-Za-z0-9:_.\\-]+)?\.(?P<type>[a-z]+)")


def is_unit_name(value: str) -> bool:
    """Whether ``value`` is an exact systemd unit name (a template's instance, not a template).

    Args:
        value: the text read (a journal field value, a hint field).

    Returns:
        True for e.g. ``vllm-a.service`` or ``vllm@7.service``; False for globs, templates
        (``vllm@.service``), a missing or unknown type, a leading ``-``, more than 255
        characters, or any other character.
    """
    if not value or len(value) > MAX_UNIT_NAME or value[0] == "-":
        return False
    found = _NAME.fullmatch(value)
    return found is not None and found.group("type") in UNIT_TYPES
