"""`evokernel sweep FILE --out CSV`: measure every valid point of a search file's space into a landscape."""

from __future__ import annotations

import argparse
from typing import Any

from evokernel.cli._common import load_target, nonneg_int, positive_float, positive_int
from evokernel.core.errors import ConfigError


def add_parser(sub: Any) -> None:
    sw = sub.add_parser("sweep", help="measure every valid point of a search file's space into a landscape CSV")
    sw.add_argument("target", help="a search file (.py defining `space` and `evaluator`)")
    sw.add_argument("--out", required=True, help="landscape CSV to write (appended to: a re-run resumes)")
    sw.add_argument("--limit", type=positive_int, default=None, help="at most this many new points")
    sw.add_argument("--wall-time", type=positive_float, default=None, help="stop after this many seconds")
    sw.add_argument("--seed", type=nonneg_int, default=0, help="order of the points (shuffled by this seed)")
    sw.add_argument("--quiet", action="store_true", help="no progress display")


def run(args: argparse.Namespace) -> int:
    from evokernel.engine.sweep import sweep

    if not args.target.endswith(".py"):
        raise ConfigError(f"{args.target}: sweep takes a search file (.py defining `space` and `evaluator`)")
    args.noise = None
    spec = load_target(args, args.target)
    space, evaluator = spec.space, spec.evaluator
    from rich.console import Console

    console = Console(stderr=True, soft_wrap=True)  # one line per message, however long its path (no wrapping)
    count = {"n": 0, "failed": 0}

    def on_result(genome: Any, result: Any) -> None:
        count["n"] += 1
        count["failed"] += not result.is_ok
        if not args.quiet and (count["n"] % 25 == 0):
            console.print(f"sweep: {count['n']} measured ({count['failed']} failed)", highlight=False)

    report = sweep(
        space, evaluator, args.out, limit=args.limit, shuffle=args.seed, wall_s=args.wall_time, on_result=on_result
    )
    left = report.points - report.already - report.measured
    console.print(
        f"sweep: {report.measured} measured ({report.failed} failed) in {report.wall_s:.0f} s; "
        f"{report.already + report.measured} of {report.points} points in {report.path}"
        + (f"; {left} left (re-run to continue)" if left > 0 else ""),
        highlight=False,
    )
    return 0
