"""vllm-sentinel: watch vLLM systemd units and say what phase they are in, and why they crashed.

The package has two floors (see ``docs/architecture.md``):

* the *core* (``record``, ``journal_json``, ``text_log``, ``vllm_line``, ``markers``,
  ``tracebacks``, ``causes``, ``phases``, ``tracker``, ``stall``, ``attribution``,
  ``nvidia_smi``, ``snapshot``, ``report``, ``replay``) is pure and synchronous: no I/O, no
  clocks, no asyncio;
* the *edges* (``transport``, ``journal``, ``gpu``, ``cursors``, ``monitor``, ``metrics``,
  ``exporter``, ``http``, ``daemon``, ``cli``) move bytes in and metrics out.
"""

__version__ = "0.1.0"

__all__ = ["__version__"]
