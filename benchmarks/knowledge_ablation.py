"""What a store of earlier runs is worth (issue 6 ablation, CPU replay of recorded landscapes).

For each landscape and seed: a first run of `--first` evaluations goes into a store; then a
second run (another seed) of `--budget` evaluations, once with that store (its elites seed
the first generation, its failures teach the failure model) and once with an empty store.
Reported: evaluations the second run needs to reach the first run's best latency (and
within 1% of the landscape's optimum), and its failed evaluations.

    python benchmarks/knowledge_ablation.py --seeds 10 --first 60 --budget 100
"""

from __future__ import annotations

import argparse
import math
import statistics
from concurrent.futures import ProcessPoolExecutor
from typing import Any

from evokernel import Budget, Search, SearchOptions
from evokernel.evaluators import ReplayEvaluator
from evokernel.engine.landscape import Landscape, builtin, builtin_names
from evokernel.store import SQLiteStore


def _evals_to(trace: list[float], target: float) -> float:
    return next((i + 1 for i, x in enumerate(trace) if x <= target), math.inf)


def one(name: str, seed: int, first: int, budget: int) -> dict[str, Any]:
    L = Landscape.load(builtin(name))
    optimum = L.optimum()[1]
    truth = ReplayEvaluator(L)
    out: dict[str, Any] = {}
    store = SQLiteStore(":memory:")
    no_stop = SearchOptions(patience=0)  # fixed budgets: no early stop
    a = Search(L.space, ReplayEvaluator(L), store=store, options=no_stop).run(Budget(evaluations=first), seed=seed)
    target = truth.true_latency(a.best.genome)
    for label, st in (("with store", store), ("empty store", SQLiteStore(":memory:"))):
        r = Search(L.space, ReplayEvaluator(L), store=st, options=no_stop).run(
            Budget(evaluations=budget), seed=seed + 1000
        )
        history = st.history(r.run_id)
        best, trace = math.inf, []
        for e in history:
            if e.kind == "eval" and e.result.is_ok:
                best = min(best, truth.true_latency(e.genome))
            if e.kind == "eval":
                trace.append(best)
        out[label] = {
            "to_first_best": _evals_to(trace, target * (1 + 1e-9)),
            "to_1pct": _evals_to(trace, optimum * 1.01),
            "failed": sum(1 for e in history if e.kind == "eval" and not e.result.is_ok),
        }
    return out


def _star(job: tuple) -> dict[str, Any]:
    return one(*job)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--landscapes", nargs="+", default=[n for n in builtin_names() if n.startswith("matmul_")])
    ap.add_argument("--seeds", type=int, default=10)
    ap.add_argument("--first", type=int, default=60)
    ap.add_argument("--budget", type=int, default=100)
    ap.add_argument("--jobs", type=int, default=2)
    args = ap.parse_args()
    jobs = [(n, s, args.first, args.budget) for n in args.landscapes for s in range(args.seeds)]
    with ProcessPoolExecutor(args.jobs) as pool:
        results = list(pool.map(_star, jobs))
    print(
        "| landscape | second run | median evals to the first run's best | median evals to 1% | "
        "reached 1% | mean failed evals |"
    )
    print("|---|---|---|---|---|---|")
    for name in args.landscapes:
        rows = [r for (n, *_), r in zip(jobs, results) if n == name]
        for label in ("with store", "empty store"):
            to_best = [r[label]["to_first_best"] for r in rows]
            to_1 = [r[label]["to_1pct"] for r in rows]
            fmt = lambda x: "-" if math.isinf(x) else f"{x:.0f}"  # noqa: E731
            print(
                f"| {name.removeprefix('matmul_bf16_h200_')} | {label} | {fmt(statistics.median(to_best))} | "
                f"{fmt(statistics.median(to_1))} | {sum(math.isfinite(x) for x in to_1)}/{len(rows)} | "
                f"{statistics.fmean(r[label]['failed'] for r in rows):.1f} |"
            )


if __name__ == "__main__":
    main()
