"""How journalctl's cost grows with the unit filter of a backfill (issue 22 defect 5).

Writes one real journal file (systemd-journal-remote) holding ``UNITS`` units that each
started, logged ``LINES`` lines and exited, plus unrelated entries, then times three ways to
read the units' window: one ``--unit=`` per unit (journalctl expands each into four match
terms), one match per unit on the two fields the units' records carry (``_SYSTEMD_UNIT=`` …
``+ _PID=1 UNIT=`` …), and no filter at all (routing in-process). Run:
``PYTHONPATH=. python benchmarks/unit_filters.py [UNITS] [LINES]``.
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
import time
from pathlib import Path

from tests.support.journal_writer import (
    JournalWriter,
    LogClock,
    other_unit_line,
    service_line,
    unit_failed,
    unit_started,
)


def _write(directory: Path, units: int, lines: int) -> list[str]:
    clock = LogClock()
    names = [f"vllm-{n}.service" for n in range(units)]
    with JournalWriter(directory, "many") as writer:
        for index, name in enumerate(names):
            invocation = f"{index:032x}"
            entries = [unit_started(name, invocation, clock.us(index))]
            entries += [
                service_line(name, invocation, 1000 + index, f"INFO line {k}", clock.us(index))
                for k in range(lines)
            ]
            entries += unit_failed(name, invocation, clock.us(index))
            entries += [other_unit_line(clock.us(index)) for _ in range(lines)]
            writer.write(entries)
    return names


def _time(argv: list[str]) -> tuple[float, int]:
    start = time.perf_counter()
    result = subprocess.run(argv, capture_output=True, check=True)
    return time.perf_counter() - start, result.stdout.count(b"\n")


def main() -> None:
    units = int(sys.argv[1]) if len(sys.argv) > 1 else 1000
    lines = int(sys.argv[2]) if len(sys.argv) > 2 else 20
    with tempfile.TemporaryDirectory() as folder:
        directory = Path(folder)
        names = _write(directory, units, lines)
        base = ["journalctl", f"--directory={directory}", "-o", "json", "-a", "--no-pager"]
        seconds, count = _time(base)
        print(f"{'unfiltered':32} {seconds:8.2f} s  {count:7d} entries", flush=True)
        for watched in sorted({1, 10, 100, units}):
            chosen = names[:watched]
            per_unit = [*base, *(f"--unit={name}" for name in chosen)]
            by_field = [
                *base,
                *(f"_SYSTEMD_UNIT={name}" for name in chosen),
                "+",
                "_PID=1",
                *(f"UNIT={name}" for name in chosen),
            ]
            for label, argv in (
                ("--unit per unit", per_unit),
                ("match per unit and field", by_field),
            ):
                seconds, count = _time(argv)
                print(
                    f"{watched:5d} units {label:26} {seconds:8.2f} s  {count:7d} entries",
                    flush=True,
                )


if __name__ == "__main__":
    main()
