"""Which journal units a host's configured names and globs select (core: pure).

A glob selects the units whose names it matches, except the sentinel's own: the documented
install names the daemon's unit ``vllm-sentinel.service``, which the default glob
``vllm*.service`` (and ``vllm-*.service``) matches, and the daemon is no vLLM server (it would
be a unit that never becomes ready). Units whose name starts with ``vllm-sentinel`` are
therefore selected only when named exactly (no glob characters).
"""

from __future__ import annotations

from collections.abc import Iterable
from fnmatch import fnmatchcase
from typing import Final

__all__ = ["OWN_UNIT_PREFIX", "is_own_unit", "selects"]

OWN_UNIT_PREFIX: Final = "vllm-sentinel"
"""Units named so are the sentinel's (``deploy/systemd/vllm-sentinel.service`` and variants)."""

_GLOB_CHARS: Final = frozenset("*?[")


def is_own_unit(unit: str) -> bool:
    """True when ``unit`` is named like the sentinel's own unit (``vllm-sentinel*``)."""
    return unit.startswith(OWN_UNIT_PREFIX)


def selects(patterns: Iterable[str], unit: str) -> bool:
    """True when a name in ``patterns`` is ``unit``, or a glob matches it and it is not the
    sentinel's own unit (``is_own_unit``).

    Args:
        patterns: configured unit names and globs (``fnmatch`` syntax, case-sensitive).
        unit: a unit name from the journal.
    """
    own = is_own_unit(unit)
    for pattern in patterns:
        if pattern == unit:
            return True
        if own and _GLOB_CHARS.intersection(pattern):
            continue
        if fnmatchcase(unit, pattern):
            return True
    return False
