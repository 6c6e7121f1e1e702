"""`evokernel landscapes`: the landscapes shipped with evokernel."""

from __future__ import annotations

import argparse
from typing import Any


def add_parser(sub: Any) -> None:
    sub.add_parser("landscapes", help="list the landscapes shipped with evokernel")


def run(args: argparse.Namespace) -> int:
    from evokernel.engine.landscape import Landscape, builtin, builtin_names

    for name in builtin_names():
        ls = Landscape.load(builtin(name))
        params, best = ls.optimum()
        print(
            f"{name}: {len(ls)} configurations, optimum {best:.6f} ms at "
            + " ".join(f"{k}={v}" for k, v in params.items())
        )
    return 0
