"""The cost model's fit and predict path (the "model" strategy, the default for matmul spaces)
raises no warning: every warning is an error here. A guard for the issue's report of 48
scikit-learn warnings from `examples/gemm_search.py` (not reproduced on this machine's
scikit-learn 1.9.1 / numpy 2.4.6: the example's replay emits none)."""

from __future__ import annotations

import warnings

from evokernel import Budget, Search
from evokernel.engine.landscape import Landscape, builtin
from evokernel.evaluators import ReplayEvaluator
from evokernel.store import SQLiteStore


def test_the_model_strategy_fits_and_predicts_without_warnings(tmp_path):
    store = SQLiteStore(tmp_path / "w.db")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for shape in ("M16_N4096_K4096", "M2048_N6144_K4096"):  # the second primed by the first's rows
            L = Landscape.load(builtin(f"matmul_bf16_h200_{shape}"))
            ev = ReplayEvaluator(L, noise=0.03, seed=1)
            report = Search(L.space, ev, strategy="model", store=store).run(Budget(evaluations=40), seed=1)
            assert report.evaluations == 40 and report.best is not None
