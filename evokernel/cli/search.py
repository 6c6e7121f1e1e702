"""`evokernel search TARGET`: run (or resume) a search and print its elites.

The search is built by `evokernel.engine.assemble`, the same function the Python API calls;
this module only reads the command line, shows progress and prints the report.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from dataclasses import replace
from typing import Any

import msgspec

from evokernel.cli._common import (
    add_run_options,
    load_target,
    plural,
    positive_float,
    positive_int,
    say_sandbox,
    stdout_console,
)
from evokernel.cli._progress import SearchProgress
from evokernel.core.errors import ConfigError
from evokernel.engine.assemble import SearchSpec, assemble, registered_mutators
from evokernel.engine.options import NOTHING_NEW, Promotion
from evokernel.engine.search import Budget, Observer, Search, SearchReport
from evokernel.engine.strategies import get_strategy


def add_parser(sub: Any) -> None:
    s = sub.add_parser(
        "search",
        help="run (or resume) a search and print its elites",
        description="Run (or resume) a search and print its elites. Each new genome is proposed by a mutator "
        "(the strategy's, --mutator's or the search file's); when none proposes one the run has not seen, in 32 "
        "tries, the search takes a random unseen point instead: the fallback. Its proposals are recorded with "
        "operator 'fallback' (or 'restart', credited to a restart mutator where one runs), counted in the "
        "report ('N proposals of M came from the fallback'; 'fallbacks' in --json and in the stored run's "
        "summary); --no-fallback turns it off.",
    )
    s.add_argument(
        "target",
        help="a search file (.py defining `space` and `evaluator`), a landscape "
        "CSV, or the name of a shipped landscape",
    )
    s.add_argument("--name", default=None, help="run name (default: the space's name)")
    s.add_argument(
        "--llm",
        nargs="?",
        const="claude-sonnet-5",
        default=None,
        metavar="MODEL",
        help="add the LLM rewrite operator (Anthropic; needs ANTHROPIC_API_KEY; default model "
        "claude-sonnet-5); off, with one line saying why, when it cannot run",
    )
    s.add_argument(
        "--llm-dollars",
        type=positive_float,
        default=None,
        help="stop LLM calls once they cost this much (the search goes on)",
    )
    s.add_argument(
        "--require-sandbox",
        action="store_true",
        help="refuse to judge candidates unless every sandbox protection holds on this machine",
    )
    add_ray_options(s)
    add_run_options(s, db_default="evokernel.db")


def add_ray_options(s: Any) -> None:
    """`--ray [ADDRESS]` and `--gpus N`: evaluate on the GPUs of a Ray cluster."""
    s.add_argument(
        "--ray",
        nargs="?",
        const="local",
        default=None,
        metavar="ADDRESS",
        help="evaluate on the GPUs of a Ray cluster, one actor per GPU: its address (auto: the cluster this "
        "machine belongs to); without one, a local cluster (needs pip install 'evokernel[ray]')",
    )
    s.add_argument(
        "--gpus", type=positive_int, default=None, help="with --ray: how many GPUs (default: every GPU of the cluster)"
    )
    s.add_argument(
        "--ray-timeout",
        type=positive_float,
        default=20.0,
        metavar="SECONDS",
        help="with --ray ADDRESS: how long joining the cluster may take before the command ends (default: 20)",
    )


def run(args: argparse.Namespace) -> int:
    from evokernel.store import open_store

    if args.require_sandbox:  # read by every sandbox the search file's evaluator starts
        os.environ["EVOKERNEL_SANDBOX"] = "require"
    spec = load_target(args, args.target)
    if args.gpus is not None and args.ray is None:
        raise ConfigError("--gpus picks GPUs of a Ray cluster: add --ray (or --ray ADDRESS)")
    if args.ray is None:
        _say_sandbox(spec.evaluator)
    store = open_store(args.db)
    progress = None if (args.quiet or args.json) else SearchProgress(args.budget)
    search = make_search(args, spec, store, [progress] if progress else [])
    try:
        if args.ray is not None:  # where candidates run: in the actors
            _say_sandbox(search.evaluator)
        report = run_search(search, args, progress)
    finally:
        if args.ray is not None:  # the actors, and the local cluster this run started
            search.evaluator.close()  # type: ignore[attr-defined]
    if args.json:
        print(json.dumps({**msgspec.to_builtins(report), "db": args.db}))
    else:
        print_report(report, args.db)
    return 0


def _say_sandbox(evaluator: Any) -> None:
    sandbox = getattr(evaluator, "sandbox", None)
    if callable(sandbox):
        say_sandbox(sandbox())


def make_search(args: argparse.Namespace, spec: SearchSpec, store: Any, observers: list[Observer]) -> Search:
    """The search that the target's `spec` and the options in `args` describe, built by
    `evokernel.engine.assemble` (as the Python API builds it); the command's own words for
    what it refuses."""
    if (args.population is not None or args.patience is not None) and spec.options is None:
        get_strategy(args.strategy or "default")  # an unknown strategy is the first thing said
    if spec.mutators is not None and args.strategy is not None:
        raise ConfigError("the search file sets its own mutators; drop --strategy")
    names = getattr(args, "mutator", None)
    if names:
        if args.strategy is not None:
            raise ConfigError("--mutator picks the mutators a strategy would: give --mutator or --strategy, not both")
        if spec.mutators is not None:
            raise ConfigError("the search file sets its own mutators; drop --mutator")
        spec = replace(spec, mutators=registered_mutators(names))
    if getattr(args, "train_on_replayed", False) and not _replays(spec.evaluator):
        raise ConfigError("--train-on-replayed applies to landscape replays; this evaluator measures kernels")
    llm = getattr(args, "llm", None)
    if llm and (getattr(spec.evaluator, "problem", None) is None or getattr(spec.evaluator, "render", None) is None):
        raise ConfigError(
            "--llm rewrites kernel sources: it needs a search file whose evaluator judges a problem "
            "(a KernelEvaluator), not a landscape replay"
        )
    spec = replace(
        spec,
        strategy=args.strategy,
        population=args.population,
        patience=args.patience,
        promotion=None if getattr(args, "fidelity", None) is None else Promotion(margin=args.fidelity),
        train_on_replayed=bool(getattr(args, "train_on_replayed", False)),
        fallback=not getattr(args, "no_fallback", False),
        name=getattr(args, "name", None) or spec.name,
        llm=llm,
        ray=getattr(args, "ray", None),
        gpus=getattr(args, "gpus", None),
        ray_timeout_s=getattr(args, "ray_timeout", 20.0),
    )
    return assemble(
        spec, store=store, observers=observers, say=lambda line: print(f"evokernel: {line}", file=sys.stderr)
    )


def _replays(evaluator: Any) -> bool:
    from evokernel.engine.transfer import transfer_key

    key = transfer_key(evaluator)
    return key is not None and key["family"].startswith("replay:")


def budget(args: argparse.Namespace) -> Budget:
    return Budget(evaluations=args.budget, wall_s=args.wall_time, cost=getattr(args, "llm_dollars", None))


def run_search(search: Search, args: argparse.Namespace, progress: SearchProgress | None) -> SearchReport:
    try:
        return search.run(budget(args), seed=args.seed)
    finally:
        if progress is not None:
            progress.close()


def generations_run(report: SearchReport) -> int:
    """How many generations ran: `report.generations` is the last one's number, counting the
    first population as generation 0 (a search that found nothing new to try numbered one more
    and stopped before evaluating it)."""
    return report.generations + (report.stop_reason not in ("space exhausted", NOTHING_NEW))


def said_fallbacks(report: SearchReport) -> str:
    """The line on the proposals no mutator made (the fallback's random unseen points)."""
    n = report.fallbacks
    return (
        f"{plural(n, 'proposal')} of {report.evaluations} came from the fallback: no mutator proposed a new "
        "genome in its tries, so the search took a random unseen point (--no-fallback turns it off)"
    )


def print_report(report: SearchReport, db: str | None) -> None:
    from rich.table import Table

    console = stdout_console()
    table = Table(title=f"elites of run {report.run_id} ({report.stop_reason})")
    for col in ("#", "niche", "latency ms", "noise", "n", "genome", "params"):
        table.add_column(col, justify="right" if col in ("#", "latency ms", "noise", "n") else "left")
    for i, e in enumerate(report.elites, 1):
        table.add_row(
            str(i),
            e.niche,
            f"{e.latency_ms:.6f}",
            f"{100 * e.noise:.1f}%",
            str(len(e.samples)),
            e.genome.id,
            e.genome.short(),
        )
    console.print(table)
    statuses = ", ".join(f"{k} {v}" for k, v in sorted(report.statuses.items()))
    where = f"; stored in {db}" if db else ""
    console.print(
        f"{report.evaluations} evaluations ({report.measured} measured, {report.resumed_hits} resumed, "
        f"{report.reused} reused from earlier runs) in {plural(generations_run(report), 'generation')}: "
        f"{statuses}{where}",
        highlight=False,
    )
    if report.fallbacks:
        console.print(said_fallbacks(report), highlight=False, soft_wrap=True)
    if report.priors is not None:
        from evokernel.engine.priors import trained_on

        console.print(trained_on(report.priors), highlight=False, soft_wrap=True)
