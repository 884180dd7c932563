"""Child process for the throughput benchmark: replay one input file through the full engine.

``python -m benchmarks.engine MODE FILE`` reads ``FILE`` in 64 KiB chunks (as the CLI and the
journal follower get their bytes) and prints one JSON line: lines read, seconds of CPU spent on
the work itself (import and start-up excluded), and what the engine found (units,
incarnations, crashes) so a run that did nothing shows. Modes:

* ``text`` / ``json``: ``replay`` with that input format — decoder, line anatomy, tracebacks,
  markers, tracker, snapshots;
* ``orjson``: only split lines and ``orjson.loads`` each (the JSON parsing floor).
"""

from __future__ import annotations

import sys
import time
from collections.abc import Iterator
from pathlib import Path

import orjson

from vllm_sentinel.replay import InputFormat, replay

_CHUNK = 1 << 16


def _chunks(path: Path) -> Iterator[bytes]:
    with path.open("rb") as stream:
        while chunk := stream.read(_CHUNK):
            yield chunk


def main(argv: list[str]) -> int:
    """Run one mode over one file and print the JSON result."""
    mode, path = argv[0], Path(argv[1])
    started = time.process_time()
    if mode == "orjson":
        lines = 0
        loads = orjson.loads
        pending = b""
        for chunk in _chunks(path):
            pieces = (pending + chunk).split(b"\n")
            pending = pieces.pop()
            for piece in pieces:
                loads(piece)
            lines += len(pieces)
        result: dict[str, object] = {"lines": lines}
    else:
        found = replay(
            [_chunks(path)], input_format=InputFormat.TEXT if mode == "text" else InputFormat.JSON
        )
        result = {
            "lines": found.lines,
            "units": len(found.units),
            "starts": sum(unit.starts_total for unit in found.units),
            "crashes": sum(sum(unit.crashes_total.values()) for unit in found.units),
            "skipped": sum(found.skipped.values()),
        }
    result["cpu_seconds"] = time.process_time() - started
    sys.stdout.write(orjson.dumps(result).decode() + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
