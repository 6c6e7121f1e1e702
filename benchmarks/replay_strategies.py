"""Strategy quality on the recorded H200 landscapes (runs on the CPU: replay, no GPU).

For each shipped landscape, each strategy and each seed, run a search with a budget and
report the fraction of the optimum reached (optimum latency / recorded latency of the
reported best), averaged over seeds, at several budgets.

    python benchmarks/replay_strategies.py --seeds 20 --budgets 25 50 100 [--noise 0.05]
"""

from __future__ import annotations

import argparse
import statistics
import time

from evokernel import Budget, Search
from evokernel.evaluators import ReplayEvaluator
from evokernel.landscape import Landscape, builtin, builtin_names
from evokernel.strategies import strategy_names


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seeds", type=int, default=20)
    ap.add_argument("--budgets", type=int, nargs="+", default=[25, 50, 100])
    ap.add_argument("--noise", type=float, default=0.0)
    ap.add_argument("--strategies", nargs="+", default=strategy_names())
    args = ap.parse_args()
    t0 = time.time()
    rows = []
    for strategy in args.strategies:
        for budget in args.budgets:
            fractions = []
            for name in builtin_names():
                landscape = Landscape.load(builtin(name))
                optimum = landscape.optimum()[1]
                for seed in range(args.seeds):
                    ev = ReplayEvaluator(landscape, noise=args.noise, seed=seed)
                    report = Search(landscape.space, ev, strategy=strategy).run(Budget(evaluations=budget), seed=seed)
                    fractions.append(optimum / ev.true_latency(report.best.genome) if report.best else 0.0)
            rows.append((strategy, budget, statistics.mean(fractions), min(fractions)))
    print(f"| strategy | budget | mean fraction of optimum | worst | (noise {args.noise}, "
          f"{args.seeds} seeds x {len(builtin_names())} landscapes) |")
    print("|---|---|---|---|---|")
    for strategy, budget, mean, worst in rows:
        print(f"| {strategy} | {budget} | {mean:.3f} | {worst:.3f} | |")
    print(f"\n{time.time() - t0:.1f} s")


if __name__ == "__main__":
    main()
