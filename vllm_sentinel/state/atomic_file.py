"""Replace a file atomically, so that a crash leaves the old content or the new one (edge).

``replace_file`` writes a unique temporary file next to the target (``tempfile.mkstemp``:
``.<name>.XXXXXXXX.tmp``, mode 0600 unless ``mode`` says otherwise), fsyncs it and renames it
over the target (``os.replace``); on any error the temporary file is removed and the error
raised. ``sync_directory`` fsyncs the directory afterwards, so that the rename itself survives
a power loss: callers writing several files in one directory rename them all, then sync the
directory once. Used by ``cursors.CursorStore``, ``history.HistoryStore`` and ``init-config``.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from pathlib import Path

__all__ = ["replace_file", "sync_directory", "write_atomically"]

_NAME_CHARS = 64  # of the target's name in the temporary file's (file names stay short)


def replace_file(target: Path, data: bytes, *, mode: int | None = None) -> None:
    """Write ``data`` to ``target`` through a temporary file renamed over it.

    Args:
        target: the file to replace (its directory must exist).
        data: the whole new content.
        mode: permission bits of the new file (``None``: ``mkstemp``'s 0600), set whatever the
            umask.

    Raises:
        OSError: the write, the fsync or the rename failed (``target`` is unchanged).
    """
    descriptor, temporary = tempfile.mkstemp(
        prefix=f".{target.name[:_NAME_CHARS]}.", suffix=".tmp", dir=target.parent
    )
    try:
        with open(descriptor, "wb") as stream:
            stream.write(data)
            stream.flush()
            os.fsync(stream.fileno())
        if mode is not None:
            os.chmod(temporary, mode)
        os.replace(temporary, target)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temporary)
        raise


def sync_directory(directory: Path) -> None:
    """fsync ``directory`` so that renames in it are durable (a failing fsync is ignored:
    some file systems refuse it on directories).

    Raises:
        OSError: the directory cannot be opened.
    """
    handle = os.open(directory, os.O_RDONLY)
    try:
        with contextlib.suppress(OSError):
            os.fsync(handle)
    finally:
        os.close(handle)


def write_atomically(target: Path, data: bytes, *, mode: int | None = None) -> None:
    """``replace_file`` then ``sync_directory`` of its directory: one file, durably.

    Raises:
        OSError: as ``replace_file`` and ``sync_directory``.
    """
    replace_file(target, data, mode=mode)
    sync_directory(target.parent)
