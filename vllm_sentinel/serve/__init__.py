"""Serving: what readers see of the latest snapshot — ``/metrics``, ``/units``, the status page.

``metrics`` (the metric table), ``exporter`` (a prometheus_client collector over the snapshot),
``http`` (threaded WSGI with TLS and basic auth), ``page`` and ``static/`` (the status page),
``readiness`` (the ``/units`` documents and their HTTP status), ``runbook`` (``/runbook``) and
``web_config`` (the exporter's TLS and basic-auth files).

May import: ``vllm_sentinel.engine``, ``vllm_sentinel.state``, ``vllm_sentinel.errors`` and
``vllm_sentinel.log``; never ``sources`` or the commands.
"""
