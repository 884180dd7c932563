"""Shared test helpers: journal writers and entry builders, the daemon in-process or as a child,
an HTTP client, fake NVML and vLLM, SSH servers (in-process, threaded, OpenSSH), headless
Chromium, record builders and a Monitor driver."""
