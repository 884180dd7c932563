"""Sources: the edges that read a host — journal, GPUs, ``/health`` — and hand values inward.

``replay_input`` (a recorded log opened for ``replay``: decompressed by magic bytes, text
sniffed), ``transport`` (a command locally or over SSH with asyncssh; argv, never a shell string),
``journal`` (backfill, follow, resume by cursor), ``gpu`` (NVML, ``nvidia-smi`` streams),
``nvidia_smi`` and ``attribution`` (pure parsers of ``nvidia-smi`` CSV and
``/proc/PID/cgroup``), ``health_probe`` (vLLM's ``GET /health`` over TCP or an SSH channel).

May import: ``vllm_sentinel.engine``, ``vllm_sentinel.errors`` and ``vllm_sentinel.log``;
never ``state``, ``serve`` or the commands.
"""
