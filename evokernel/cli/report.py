"""`evokernel report DB --out report.html`: a stored search as one self-contained HTML page;
`evokernel report --results benchmarks/results --out bench.html`: the benchmark records.
`--png DIR` writes the same figures as PNG files. Needs the `report` extra."""

from __future__ import annotations

import argparse
import os
from typing import Any

from evokernel.core.errors import ConfigError


def add_parser(sub: Any) -> None:
    rp = sub.add_parser(
        "report",
        help="write a self-contained HTML report of stored runs (or of benchmark records), with PNG figures",
        description="A search's report: run header, convergence, operators, statuses, elites, landscape; "
        "or, with --results, the benchmark view. Needs: pip install 'evokernel[report]'.",
    )
    rp.add_argument("db", nargs="?", default=None, help="the search database (SQLite), e.g. evokernel.db")
    rp.add_argument(
        "--run",
        action="append",
        default=None,
        metavar="ID",
        help="a run id or prefix (repeat to overlay runs); default: every run of the latest run's problem",
    )
    rp.add_argument("--results", default=None, metavar="DIR", help="draw the benchmark records in DIR instead of a DB")
    rp.add_argument("--out", default="report.html", help="the HTML file to write (default report.html)")
    rp.add_argument("--png", default=None, metavar="DIR", help="also write every figure as DIR/<figure id>.png")


def run(args: argparse.Namespace) -> int:
    from evokernel.report import require

    if (args.db is None) == (args.results is None):
        raise ConfigError("give a database or --results DIR (one of them)")
    if args.results is not None and args.run:
        raise ConfigError("--run names runs of a database, not benchmark records")
    require()
    if args.results is not None:
        from evokernel.report.bench import write_bench

        if not os.path.isdir(args.results):
            raise ConfigError(f"no such folder: {args.results}")
        out = write_bench(args.results, args.out, png=args.png)
    else:
        from evokernel.report.html import write_report
        from evokernel.store import SQLiteStore

        if not os.path.exists(args.db):
            raise ConfigError(f"no such database: {args.db}")
        out = write_report(SQLiteStore(args.db, create=False), args.out, runs=args.run, png=args.png)
    print(f"wrote {out}" + (f" and PNG figures in {args.png}" if args.png else ""))
    return 0
