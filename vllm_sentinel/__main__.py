"""``python -m vllm_sentinel``: the same as the ``vllm-sentinel`` console script."""

from vllm_sentinel.cli import main

if __name__ == "__main__":
    main()
