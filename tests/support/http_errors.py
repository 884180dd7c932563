"""Close what an ``HTTPError`` holds when a test swallows one.

``urllib``'s ``HTTPError`` carries the response, and with it the socket. A test that catches it
(a 503 while a server starts, a 401 on purpose) and drops it unclosed leaves the socket to the
garbage collector, which may run during a later test: that test then fails on an unraisable
``ResourceWarning`` (the suite turns warnings into errors). Pass caught errors through
``closed``.
"""

from __future__ import annotations

import urllib.error
from typing import TypeVar

__all__ = ["closed"]

E = TypeVar("E", bound=BaseException)


def closed(error: E) -> E:
    """Return ``error``, its HTTP response closed when it is an ``HTTPError``."""
    if isinstance(error, urllib.error.HTTPError):
        error.close()
    return error
