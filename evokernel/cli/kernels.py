"""`evokernel kernels DB`: query the kernel database (accepted kernels with their own source)."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from evokernel.cli._common import existing_store
from evokernel.core.errors import ConfigError


def add_parser(sub: Any) -> None:
    kd = sub.add_parser("kernels", help="query the kernel database: accepted kernels with their own source")
    kd.add_argument("db", help="the search database: an SQLite file or a postgresql:// URL")
    kd.add_argument("--op", default=None, help="the problem's family (FAMILY) or name")
    kd.add_argument("--gpu", default=None, help="GPU name as recorded")
    kd.add_argument("--shape", default=None, help="e.g. M=64,N=4096: kernels tested on that shape")
    kd.add_argument("--source", default=None, metavar="GENOME", help="print this kernel's source and diff")
    kd.add_argument("--json", action="store_true", help="print JSON on stdout")


def run(args: argparse.Namespace) -> int:
    from evokernel.store.knowledge import kernels

    store = existing_store(args.db)
    shape = None
    if args.shape:
        try:
            shape = {k.strip(): int(v) for k, v in (part.split("=") for part in args.shape.split(","))}
        except ValueError:
            raise ConfigError(f"--shape takes NAME=INT,NAME=INT..., got {args.shape!r}") from None
    rows = kernels(store, op=args.op, gpu=args.gpu, shape=shape)
    if args.source:
        row = next((r for r in rows if r["genome_id"].startswith(args.source)), None)
        if row is None:
            raise ConfigError(f"no kernel {args.source!r} in {args.db} (with these filters)")
        print(row["source"] if not args.json else json.dumps(row))
        if not args.json:
            print(row["diff"], file=sys.stderr)
        return 0
    if args.json:
        print(json.dumps(rows))
        return 0
    for r in rows:
        shapes = "; ".join(",".join(f"{k}={v}" for k, v in s.items()) for s in r["shapes"])
        print(f"{r['genome_id']}  {r['latency_ms']:.5f} ms  {r['op']}  {r['gpu']}  [{shapes}]  run {r['run_id']}")
    if not rows:
        print("no kernels", file=sys.stderr)
    return 0
