"""`evokernel plugins`: the registered mutators, evaluators, search spaces and strategies."""

from __future__ import annotations

import argparse
from typing import Any

from evokernel.cli._common import stdout_console


def add_parser(sub: Any) -> None:
    sub.add_parser("plugins", help="list registered mutators, evaluators, search spaces, strategies")


def run(args: argparse.Namespace) -> int:
    from rich.table import Table

    from evokernel.core.plugins import GROUPS, registered
    from evokernel.engine.strategies import strategy_names

    t = Table(title="registered plugins")
    for col in ("group", "name", "object", "from"):
        t.add_column(col)
    for group in GROUPS:
        for name, ep in sorted(registered(group).items()):
            dist = getattr(ep, "dist", None)
            t.add_row(group, name, ep.value, f"{dist.name} {dist.version}" if dist else "?")
    for name in strategy_names():
        if name not in registered("evokernel.strategies"):
            t.add_row("evokernel.strategies", name, "built in", "evokernel")
    stdout_console().print(t)
    return 0
