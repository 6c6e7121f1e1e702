"""`evokernel report DB --out report.html`: a stored search as one self-contained HTML page;
`evokernel report --results benchmarks/results --out bench.html`: the benchmark records.
`--png DIR` writes the same figures as PNG files. Needs the `report` extra."""

from __future__ import annotations

import argparse
import os
from typing import Any

from evokernel.cli._common import existing_store, output_file, output_folder
from evokernel.core.errors import ConfigError


def add_parser(sub: Any) -> None:
    rp = sub.add_parser(
        "report",
        help="write a self-contained HTML report of stored runs (or of benchmark records), with PNG figures",
        description="A search's report: run header, convergence, operators, statuses, elites, landscape; "
        "or, with --results, the benchmark view. Needs: pip install 'evokernel-search[report]'.",
    )
    rp.add_argument(
        "db",
        nargs="?",
        default=None,
        help="the search database: an SQLite file (e.g. evokernel.db) or a postgresql:// URL",
    )
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
    if args.results is not None and not os.path.isdir(args.results):
        raise ConfigError(f"no such folder: {args.results}")
    store = existing_store(args.db) if args.db is not None else None
    output_file(args.out, "the report")  # before any work: no folder is made above it
    if args.png is not None:
        output_folder(args.png, "the PNG folder")
    try:
        if store is None:
            from evokernel.report.bench import write_bench

            out = write_bench(args.results, args.out, png=args.png)
        else:
            from evokernel.report.html import write_report

            out = write_report(store, args.out, runs=args.run, png=args.png)
    except OSError as exc:  # a disk that fills, a folder made read-only meanwhile
        where = f" {exc.filename}" if exc.filename else ""
        raise ConfigError(f"cannot write the report{where}: {exc.strerror or exc}") from None
    print(f"wrote {out}" + (f" and PNG figures in {args.png}" if args.png else ""))
    return 0
