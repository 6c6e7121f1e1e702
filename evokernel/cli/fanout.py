"""`evokernel fan-out TARGET...`: many independent searches at once, one Ray task (one GPU) each.

Each target (a search file, a landscape CSV or a shipped landscape's name) is loaded where
its task runs and searched with the same options, all stored in one store
(`evokernel.runtime.fan_out`); one line (or JSON object) per search says what it found. A
search that fails is reported as failed and the others go on; the exit status is then 1.
Re-running the same command resumes every search from the store.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import dataclass, replace
from typing import Any

import msgspec

from evokernel.cli._common import add_run_options, load_target, stdout_console
from evokernel.core.errors import ConfigError
from evokernel.engine.assemble import SearchSpec, registered_mutators
from evokernel.engine.options import Promotion


def add_parser(sub: Any) -> None:
    f = sub.add_parser("fan-out", help="run many independent searches at once, one GPU each, on a Ray cluster")
    f.add_argument("targets", nargs="+", help="search files (.py), landscape CSVs or shipped landscapes' names")
    f.add_argument(
        "--ray",
        default=None,
        metavar="ADDRESS",
        help="the Ray cluster's address (auto: the cluster this machine belongs to); default: a local cluster",
    )
    add_run_options(f, db_default="evokernel.db")


@dataclass(frozen=True)
class Target:
    """A target of the fan-out, loaded into a SearchSpec where its task runs (picklable)."""

    name: str
    args: argparse.Namespace

    def __call__(self) -> SearchSpec:
        spec = load_target(self.args, self.name)
        if spec.mutators is not None and self.args.strategy is not None:
            raise ConfigError("the search file sets its own mutators; drop --strategy")
        names = getattr(self.args, "mutator", None)
        if names:  # as `evokernel search --mutator` (evokernel.cli.search.make_search)
            if self.args.strategy is not None:
                raise ConfigError(
                    "--mutator picks the mutators a strategy would: give --mutator or --strategy, not both"
                )
            if spec.mutators is not None:
                raise ConfigError("the search file sets its own mutators; drop --mutator")
            spec = replace(spec, mutators=registered_mutators(names))
        fidelity = getattr(self.args, "fidelity", None)
        return replace(
            spec,
            strategy=self.args.strategy,
            population=self.args.population,
            patience=self.args.patience,
            promotion=None if fidelity is None else Promotion(margin=fidelity),
            train_on_replayed=bool(getattr(self.args, "train_on_replayed", False)),
            fallback=not getattr(self.args, "no_fallback", False),
        )


def run(args: argparse.Namespace) -> int:
    from evokernel.engine.search import Budget
    from evokernel.runtime import fan_out

    if args.db in (None, ":memory:"):
        raise ConfigError("fan-out searches share a store: give --db a file or a database URL")
    fields = {
        k: getattr(args, k)
        for k in ("noise", "seed", "strategy", "population", "patience", "fidelity", "train_on_replayed")
    }
    targets = [Target(t, argparse.Namespace(**fields)) for t in args.targets]
    budget = Budget(evaluations=args.budget, wall_s=args.wall_time)
    summaries = fan_out(targets, args.db, budget, seed=args.seed, address=args.ray)
    if args.json:
        for s in summaries:
            print(json.dumps({**msgspec.to_builtins(s), "db": args.db}))
    else:
        _print(summaries, args.db)
    failed = [s for s in summaries if s.status != "finished"]
    for s in failed:
        print(f"evokernel: {s.name}: failed: {s.error}", file=sys.stderr)
    return 1 if failed else 0


def _print(summaries: list[Any], db: str) -> None:
    from rich.table import Table

    table = Table(title=f"{len(summaries)} searches, stored in {db}")
    for col in ("target", "status", "run", "best ms", "evaluations", "best params"):
        table.add_column(col, justify="right" if col in ("best ms", "evaluations") else "left")
    for s in summaries:
        params = " ".join(f"{k}={v}" for k, v in (s.best_params or {}).items())
        best = f"{s.best_ms:.6f}" if s.best_ms is not None else "-"
        table.add_row(s.name, s.status, s.run_id or "-", best, str(s.evaluations), params or s.error[:80])
    stdout_console().print(table)
