#!/usr/bin/env python3
"""Print the engine's score on a labelled set of issues 10 and 19: real logs labelled by hand.

Replays every ``NNN-slug.log`` of a set (``--set validation``, the default, ``--set holdout``,
``--set fresh``, ``--set fresh2`` or ``--set fresh3``; or the logs of ``--dir``), compares each
confident label of its ``.expected.json`` and prints a table per log, the totals (labels, right, wrong; per key)
and every miss with its expected and actual value. See ``tests/golden/<set>/README.md`` for how each set was built.

    python scripts/score-validation.py                       # the validation set; exit 0
    python scripts/score-validation.py --set holdout         # the holdout set
    python scripts/score-validation.py --set fresh           # the fresh set
    python scripts/score-validation.py --set fresh2          # issue 19's fresh set
    python scripts/score-validation.py --set fresh3          # issue 19's second fresh set
    python scripts/score-validation.py --fail-under 0.95     # exit 1 below the bar

Exit status: 0, or 1 with ``--fail-under`` when the score is below it; 2 for a bad directory.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

CHECKOUT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(CHECKOUT))

from tests.golden.scoring import BAR, SETS, format_report, score_directory  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    where = parser.add_mutually_exclusive_group()
    where.add_argument(
        "--set", choices=sorted(SETS), default="validation", help="labelled set (validation)"
    )
    where.add_argument("--dir", type=Path, default=None, help="another directory of labelled logs")
    parser.add_argument(
        "--fail-under", type=float, default=None, help="exit 1 when the score is below (0-1)"
    )
    args = parser.parse_args(argv)
    directory: Path = args.dir if args.dir is not None else SETS[args.set]
    if not directory.is_dir() or not any(directory.glob("*.expected.json")):
        print(f"score-validation: no labelled logs in {directory}", file=sys.stderr)
        return 2
    score = score_directory(directory)
    bar = args.fail_under if args.fail_under is not None else BAR
    print(format_report(score, bar=bar))
    if args.fail_under is not None and score.ratio < args.fail_under:
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
