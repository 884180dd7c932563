"""Reach a booted root's private network from the test process: one thread inside its namespace.

A network namespace belongs to a thread, not to a process (``setns(2)`` with ``CLONE_NEWNET``
moves only the calling thread), and a socket stays in the namespace it was made in. So
``NetnsThread`` keeps one worker thread that entered the namespace of ``/proc/PID/ns/net``:
callables submitted to it (``call``) open their sockets there — ``urllib`` requests to
``127.0.0.1`` of the root, or a server's listening socket, whose accepted connections stay in
the namespace whichever thread serves them. Child processes reach it with
``nsenter --net=/proc/PID/ns/net`` (``command``). Needs ``CAP_SYS_ADMIN`` (root).
"""

from __future__ import annotations

import ctypes
import os
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

__all__ = ["NetnsThread"]

_CLONE_NEWNET = 0x40000000
T = TypeVar("T")


class NetnsThread:
    """One thread in the network namespace of process ``pid``; ``close`` ends it.

    Raises:
        OSError: the namespace could not be entered (from the first ``call``).
    """

    def __init__(self, pid: int) -> None:
        self.path = f"/proc/{pid}/ns/net"
        self._fd = os.open(self.path, os.O_RDONLY | os.O_CLOEXEC)
        self._executor = ThreadPoolExecutor(1, "netns", initializer=self._enter)

    def _enter(self) -> None:
        libc = ctypes.CDLL(None, use_errno=True)
        if libc.setns(self._fd, _CLONE_NEWNET) != 0:
            errno = ctypes.get_errno()
            raise OSError(errno, f"setns({self.path}): {os.strerror(errno)}")

    def call(self, function: Callable[[], T]) -> T:
        """Run ``function`` in the namespace's thread and return (or raise) what it does."""
        return self._executor.submit(function).result()

    def command(self, argv: list[str]) -> list[str]:
        """``argv`` to run as a process of this machine that uses the namespace's network."""
        return ["nsenter", f"--net={self.path}", "--", *argv]

    def close(self) -> None:
        self._executor.shutdown(wait=True)
        os.close(self._fd)
