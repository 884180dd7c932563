#!/usr/bin/env python3
"""Print the engine's score on the validation set (issue 10): real logs labelled by hand.

Replays every ``tests/golden/validation/NNN-slug.log`` (or the logs of ``--dir``), compares each
confident label of its ``.expected.json`` and prints a table per log, the totals (labels, right,
wrong; per key) and every miss with its expected and actual value. See
``tests/golden/validation/README.md`` for how the set was built.

    python scripts/score-validation.py                  # the table; exit 0
    python scripts/score-validation.py --fail-under 0.95   # exit 1 below the bar

Exit status: 0, or 1 with ``--fail-under`` when the score is below it; 2 for a bad directory.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

CHECKOUT = Path(__file__).resolve().parent.parent
DEFAULT_DIR = CHECKOUT / "tests" / "golden" / "validation"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dir", type=Path, default=DEFAULT_DIR, help="labelled logs")
    parser.add_argument(
        "--fail-under", type=float, default=None, help="exit 1 when the score is below (0-1)"
    )
    args = parser.parse_args(argv)
    if not args.dir.is_dir() or not any(args.dir.glob("*.expected.json")):
        print(f"score-validation: no labelled logs in {args.dir}", file=sys.stderr)
        return 2
    sys.path.insert(0, str(CHECKOUT))
    from tests.golden.scoring import format_report, score_directory

    score = score_directory(args.dir)
    bar = args.fail_under if args.fail_under is not None else 0.95
    print(format_report(score, bar=bar))
    if args.fail_under is not None and score.ratio < args.fail_under:
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
