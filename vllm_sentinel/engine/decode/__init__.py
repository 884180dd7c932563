"""Decoding: bytes and text into ``Record`` values (pure).

``record`` (one log line and what its source knows), ``line_buffer`` (byte chunks into whole,
bounded lines), ``journal_json`` (``journalctl -o json``), ``text_log`` (docker, kubectl,
journalctl text, pastes), ``paste`` (what a paste did to a log, undone) and ``vllm_line`` (one
line's process prefix, vLLM header and level), ``unit_name`` (systemd's unit-name grammar for
names read from a journal).

May import: the standard library and orjson. Nothing else of the package.
"""
