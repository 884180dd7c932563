"""The catalogs: what vLLM and the libraries under it can print, kept as data (pure).

``phases`` (the bounded phase and outcome sets), ``markers`` (progress lines → phase, per vLLM
release and source file), ``failure_lines`` (native, build-tool and process-manager lines that
say a process failed) and ``causes`` (the bounded root-cause set and the rules that classify an
exception into it). Every row names where its text comes from.

May import: ``vllm_sentinel.engine.decode`` and the standard library.
"""
