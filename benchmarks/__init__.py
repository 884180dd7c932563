"""vllm-sentinel's performance suite: CLI start-up against ``python -c pass`` and replay end
to end against mtail (the installed command), engine throughput against mtail and grep,
detection latency, daemon footprint (local and a fleet over SSH), and scrape cost.

Run it from the repository root (it reuses the test helpers in ``tests/support``)::

    python -m benchmarks                 # the full suite: ~20 minutes on 2 cores
    python -m benchmarks --quick         # everything tiny, seconds: a smoke test, not figures
    python -m benchmarks --only throughput,scrape --runs 5 --output report.json

It prints a table and writes a JSON report (``benchmarks/results/latest.json`` unless
``--output`` says otherwise). Every figure with a reference (mtail, grep, prometheus_client's
encoder) is measured in the same run as that reference, and reported as a median of ``--runs``
runs, as an absolute number and as a ratio. ``docs/performance.md`` explains the method, the
figures of one full run and where the time goes.

Nothing here is a timed test: ``tests/test_benchmarks_smoke.py`` runs ``--quick`` and checks
only that the report is well formed.
"""
