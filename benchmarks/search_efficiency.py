"""Search efficiency on recorded landscapes (CPU: replay, no GPU).

For each landscape, strategy and seed, one search of `--budget` evaluations; at each
checkpoint, the fraction of the optimum reached by the genome the search believed best at
that point (optimum latency / that genome's recorded latency), and the evaluations it took
to come within 1% of the optimum. With `--noise`, every evaluation is drawn with that much
log-normal multiplicative noise (0.03 is about 3%), and the search only sees noisy figures.

    python benchmarks/search_efficiency.py --seeds 20 --budget 200 --noise 0 0.03 --jobs 2 \\
        --out benchmarks/results/search_efficiency.json

A strategy with a primed mutator (`model`: the cost model) learns from the shipped landscapes
of the other shapes only: the landscape under test is left out of its training data unless
`--no-holdout` (leave one shape out).

Writes one JSON record per (landscape, strategy, noise) and prints a Markdown table.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import os
import statistics
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

from evokernel import Budget, Search
from evokernel.evaluators import ReplayEvaluator
from evokernel.core.genome import Genome
from evokernel.engine.landscape import Landscape, builtin, builtin_names
from evokernel.engine.options import SearchOptions
from evokernel.engine.strategies import get_strategy, strategy_names

DEFAULT_STRATEGIES = [
    "random",
    "evolution",
    "local",
    "optuna-tpe",
    "optuna-cmaes",
    "optuna-gp",
    "optuna-nsga2",
    "optuna-qmc",
    "default",
    "model",
]


def _landscape(name: str) -> Landscape:
    return Landscape.load(builtin(name) if name in builtin_names() else name)


def _mutators(spec: str) -> list[Any]:
    """`mutators:optuna-tpe+local+point`: a custom operator set under the default loop
    (`cost-model@0.5`: the cost model filling half of the first generation's open places)."""
    from evokernel.mutators import LocalSearch, OptunaSampler, PointMutation, RandomRestart, UniformCrossover

    make = {"local": LocalSearch, "point": PointMutation, "crossover": UniformCrossover, "restart": RandomRestart}
    out = []
    for name in spec.removeprefix("mutators:").split("+"):
        if name.startswith("cost-model"):  # cost-model or cost-model@SHARE (of the first generation)
            from evokernel.mutators import CostModel

            # cost-model@SHARE or cost-model@SHARE@MIN_OWN
            share, _, min_own = name.partition("@")[2].partition("@")
            out.append(CostModel(first_share=float(share or 1.0), min_own=int(min_own or 2)))
            continue
        out.append(OptunaSampler(name.removeprefix("optuna-")) if name.startswith("optuna-") else make[name]())
    return out


_TRUTH: dict[str, dict[str, float]] = {}


def _truth(name: str, L: Landscape) -> dict[str, float]:
    """Recorded latency of every valid point, by genome id (inf where it failed)."""
    if name not in _TRUTH:
        ev = ReplayEvaluator(L)
        _TRUTH[name] = {(g := Genome.of(p)).id: ev.true_latency(g) for p in L.space.valid_points()}
    return _TRUTH[name]


def one_run(
    landscape: str,
    strategy: str,
    seed: int,
    budget: int,
    noise: float,
    checkpoints: list[int],
    transfer_from: tuple[str, ...] = (),
    prior_budget: int = 100,
    holdout: bool = True,
) -> dict[str, Any]:
    """One search; with `transfer_from`, searches of `prior_budget` evaluations on those
    landscapes (same seed, same noise) go into the store first, so this one is seeded from
    the nearest of them."""
    from evokernel.store import SQLiteStore

    L = _landscape(landscape)
    truth = _truth(landscape, L)
    optimum = L.optimum()[1]
    store = SQLiteStore(":memory:")
    for other in transfer_from:
        O = _landscape(other)
        Search(
            O.space,
            ReplayEvaluator(O, noise=noise, seed=seed),
            strategy="default",
            store=store,
            options=SearchOptions(patience=0),
        ).run(Budget(evaluations=prior_budget), seed=seed)
    ev = ReplayEvaluator(L, noise=noise, seed=seed)
    t0 = time.process_time()
    # leave one shape out: a primed mutator (the cost model) never sees a shipped landscape
    # of the shape under test (a replay holds its own landscape out anyway; --no-holdout lets
    # the model see it: train_on_replayed)
    held = {"prior_holdout": holdout, "train_on_replayed": not holdout, "patience": 0}  # fixed budgets: no early stop
    if strategy.startswith("mutators:"):
        search = Search(L.space, ev, _mutators(strategy), store=store, options=SearchOptions(**held))
    else:
        options = dataclasses.replace(get_strategy(strategy).options, **held)
        search = Search(L.space, ev, strategy=strategy, store=store, options=options)
    report = search.run(Budget(evaluations=budget), seed=seed)
    cpu = time.process_time() - t0
    fits = [t for m in search.mutators for t in getattr(m, "fit_seconds", [])]
    trace = [optimum / truth.get(g, math.inf) if g else 0.0 for g in report.best_ids]
    fractions = [trace[min(n, len(trace)) - 1] if trace else 0.0 for n in checkpoints]
    within = next((i + 1 for i, f in enumerate(trace) if f >= 1 / 1.01), None)
    final = optimum / truth.get(report.best.genome.id, math.inf) if report.best else 0.0
    return {
        "fractions": fractions,
        "within_1pct": within,
        "final": final,
        "cpu_s": cpu,
        "evaluations": report.evaluations,
        "model_fits": len(fits),
        "model_fit_s": statistics.mean(fits) if fits else None,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--landscapes", nargs="+", default=builtin_names())
    ap.add_argument("--strategies", nargs="+", default=DEFAULT_STRATEGIES)
    ap.add_argument("--seeds", type=int, default=20)
    ap.add_argument("--budget", type=int, default=200)
    ap.add_argument("--checkpoints", type=int, nargs="+", default=[25, 50, 100, 200])
    ap.add_argument("--noise", type=float, nargs="+", default=[0.0])
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--out", default="")
    ap.add_argument(
        "--transfer",
        action="store_true",
        help="leave one out: before each search, searches on the other landscapes fill the store",
    )
    ap.add_argument(
        "--no-holdout",
        action="store_true",
        help="let the cost model train on the shipped landscape of the shape under test too "
        "(by default it is left out: leave one shape out)",
    )
    args = ap.parse_args()
    unknown = [s for s in args.strategies if s not in strategy_names() and not s.startswith("mutators:")]
    if unknown:
        sys.exit(f"unknown strategies: {unknown} (known: {strategy_names()})")
    checkpoints = [c for c in args.checkpoints if c <= args.budget]
    jobs = [
        (
            ls,
            st,
            seed,
            args.budget,
            nz,
            checkpoints,
            tuple(o for o in args.landscapes if o != ls) if args.transfer else (),
            100,
            not args.no_holdout,
        )
        for nz in args.noise
        for ls in args.landscapes
        for st in args.strategies
        for seed in range(args.seeds)
    ]
    t0 = time.time()
    with ProcessPoolExecutor(max_workers=args.jobs) as pool:
        results = list(pool.map(_star, jobs, chunksize=1))
    records = []
    for nz in args.noise:
        for ls in args.landscapes:
            for st in args.strategies:
                runs = [r for j, r in zip(jobs, results) if j[0] == ls and j[1] == st and j[4] == nz]
                within = [r["within_1pct"] for r in runs]
                reached = [w for w in within if w is not None]
                records.append(
                    {
                        "landscape": ls,
                        "strategy": st,
                        "noise": nz,
                        "seeds": len(runs),
                        "transfer": args.transfer,
                        "mean_fraction": {
                            str(c): statistics.fmean(r["fractions"][i] for r in runs) for i, c in enumerate(checkpoints)
                        },
                        "reached_1pct": len(reached),
                        "median_evals_to_1pct": statistics.median(within_sorted(within)) if reached else None,
                        "mean_final": statistics.fmean(r["final"] for r in runs),
                        "cpu_s_per_run": statistics.fmean(r["cpu_s"] for r in runs),
                        "model_fit_s": (
                            statistics.fmean(fit)
                            if (fit := [r["model_fit_s"] for r in runs if r.get("model_fit_s")])
                            else None
                        ),
                        "holdout": not args.no_holdout,
                    }
                )
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        with open(args.out, "w") as f:
            for rec in records:
                f.write(json.dumps(rec) + "\n")
    print_table(records, checkpoints)
    print(f"\n{len(jobs)} runs in {time.time() - t0:.0f} s")


def within_sorted(within: list[int | None]) -> list[float]:
    """Evaluations to within 1%, with runs that never got there counted as infinite (so the
    median says 'never' when fewer than half did)."""
    return sorted(math.inf if w is None else float(w) for w in within)


def _star(job: tuple) -> dict[str, Any]:
    return one_run(*job)


def print_table(records: list[dict[str, Any]], checkpoints: list[int]) -> None:
    for nz in sorted({r["noise"] for r in records}):
        transfer = " (transfer: the other landscapes' runs in the store)" if records[0].get("transfer") else ""
        print(f"\n### noise {nz}{transfer}")
        head = " | ".join(f"@{c}" for c in checkpoints)
        print(f"| strategy | landscape | {head} | reached 1% | median evals to 1% | cpu s/run | model fit s |")
        print("|---" * (6 + len(checkpoints)) + "|")
        strategies = list(dict.fromkeys(r["strategy"] for r in records))
        for st in strategies:
            rows = [r for r in records if r["strategy"] == st and r["noise"] == nz]
            for r in rows:
                cells = " | ".join(f"{r['mean_fraction'][str(c)]:.3f}" for c in checkpoints)
                med = r["median_evals_to_1pct"]
                print(
                    f"| {st} | {r['landscape'].replace('matmul_bf16_h200_', '')} | {cells} | "
                    f"{r['reached_1pct']}/{r['seeds']} | {'-' if med in (None, math.inf) else int(med)} | "
                    f"{r['cpu_s_per_run']:.2f} | {'-' if not r.get('model_fit_s') else format(r['model_fit_s'], '.3f')} |"
                )
            means = " | ".join(
                f"**{statistics.fmean(r['mean_fraction'][str(c)] for r in rows):.3f}**" for c in checkpoints
            )
            print(f"| {st} | **mean** | {means} | | | | |")


if __name__ == "__main__":
    main()
