"""A slow disk for the chaos test's daemon: ``os.fsync`` waits ``CHAOS_FSYNC_DELAY_SECONDS``.

Python imports ``sitecustomize`` at start-up from the path; the chaos test puts this directory
first on ``PYTHONPATH`` of the daemon it runs, so every cursor write holds its temporary file
open a little longer and a SIGKILL can be aimed at the middle of one. Nothing else changes.
"""

import os
import time

_DELAY = float(os.environ.get("CHAOS_FSYNC_DELAY_SECONDS", "0") or 0)

if _DELAY > 0:
    _fsync = os.fsync

    def _slow_fsync(fd: int) -> None:
        time.sleep(_DELAY)
        _fsync(fd)

    os.fsync = _slow_fsync
