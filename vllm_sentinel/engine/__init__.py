"""The engine: the pure core that turns log records into what a unit is doing and why.

Everything here is synchronous and deterministic. It reads no clock (time is passed in), opens no
file or socket, starts no thread or task, and holds no mutable module state; the same code runs
the daemon, ``replay``, the golden tests and the benchmarks. ``tests/test_architecture.py``
enforces it.

Three layers, each importing only the ones before it:

* ``decode/``: bytes and text into ``Record`` values — journal JSON, plain text and what
  pasting did to it, and the anatomy of one vLLM line (process prefix, header, level).
* ``catalog/``: what vLLM and its stack can print, as data — phases, the progress markers, the
  failure lines and the crash causes, each row with its source.
* this package: deciding — tracebacks, which incarnation a record belongs to, phases and
  crashes (``tracker``), crash settling and counters, stall and slow rules, the ETA, health
  rules, fix hints, the frozen ``snapshot`` handed to readers, and the ``report`` documents.

May import: the standard library (no I/O modules), orjson, and ``vllm_sentinel.errors``.
"""
