"""State: the files the daemon keeps between runs, written atomically.

``cursor_store`` (each host's journal cursor with its units' counters), ``history_store`` (each
unit's startup history), ``atomic_file`` (temporary file, fsync, rename, fsync of the directory)
and ``serial_flush`` (a store's flush in a worker thread, one at a time).

May import: ``vllm_sentinel.engine``, ``vllm_sentinel.errors`` and ``vllm_sentinel.log``;
never ``sources``, ``serve`` or the commands.
"""
