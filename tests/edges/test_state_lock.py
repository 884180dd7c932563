"""One daemon per state directory and shard (issue 22 §6): ``CursorStore.lock``."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from vllm_sentinel.errors import StateDirectoryError
from vllm_sentinel.state.cursor_store import CursorStore, lock_name


def test_the_same_lock_is_refused_and_names_its_holder(tmp_path: Path) -> None:
    """A second store taking the same lock fails with the holder's PID; after ``unlock`` it
    succeeds."""
    first, second = CursorStore(tmp_path), CursorStore(tmp_path)
    first.lock()
    with pytest.raises(
        StateDirectoryError, match=rf"in use by another vllm-sentinel \(pid {os.getpid()}\)"
    ):
        second.lock()
    first.unlock()
    second.lock()
    second.unlock()


def test_shards_of_one_fleet_share_a_directory(tmp_path: Path) -> None:
    """Shards watch disjoint hosts: each locks its own file; the same shard twice is refused."""
    assert [lock_name(shard) for shard in ("1/1", "1/2", "2/2")] == [
        "lock",
        "lock.shard-1-of-2",
        "lock.shard-2-of-2",
    ]
    one, two, again = CursorStore(tmp_path), CursorStore(tmp_path), CursorStore(tmp_path)
    one.lock(lock_name("1/2"))
    two.lock(lock_name("2/2"))
    with pytest.raises(StateDirectoryError):
        again.lock(lock_name("2/2"))
    one.unlock()
    two.unlock()
