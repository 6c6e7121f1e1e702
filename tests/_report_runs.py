"""A recorded search for the report's tests: a few runs of the replayed H200 matmul landscape
(strategies and seeds side by side) in one SQLite store."""

from __future__ import annotations

from pathlib import Path

from evokernel import Budget, Search
from evokernel.engine.landscape import builtin
from evokernel.evaluators import ReplayEvaluator
from evokernel.store import SQLiteStore

LANDSCAPE = "matmul_bf16_h200_M16_N4096_K4096"
RUNS = (("default", 0), ("default", 1), ("random", 2))


def recorded_store(path: Path, *, budget: int = 40, runs=RUNS) -> tuple[SQLiteStore, list]:
    """`runs` (strategy, seed) searched into a store at `path`; the store and the reports."""
    store = SQLiteStore(str(path))
    reports = []
    for strategy, seed in runs:
        ev = ReplayEvaluator(builtin(LANDSCAPE), noise=0.03)
        reports.append(Search(ev.space, ev, strategy=strategy, store=store).run(Budget(evaluations=budget), seed=seed))
    return store, reports
