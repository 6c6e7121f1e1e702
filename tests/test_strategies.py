"""The contract every registered strategy and mutator keeps, on a recorded landscape:
proposals are valid genomes, no genome is evaluated twice in a run, a run is deterministic
for its seed, and the budget is respected exactly."""

from __future__ import annotations

import math

import pytest

from evokernel import Budget, Search
from evokernel.evaluators import ReplayEvaluator
from evokernel.engine.landscape import builtin
from evokernel.mutators import SAMPLERS, OptunaSampler, RandomRestart
from evokernel.store import SQLiteStore
from evokernel.engine.strategies import strategy_names

LANDSCAPE = builtin("matmul_bf16_h200_M2048_N6144_K4096")
BUDGET = 40


# Optuna's GP sampler fits a Gaussian process per ask (seconds each on a CI machine): it gets
# a budget that still leaves it 8 asks after its 8 random start-up trials
SLOW = {"optuna-gp": 16}


def _run(strategy: str | None = None, mutators=None, seed: int = 0, noise: float = 0.03, budget: int = BUDGET):
    ev = ReplayEvaluator(LANDSCAPE, noise=noise, seed=seed)
    store = SQLiteStore(":memory:")
    report = Search(ev.space, ev, mutators, strategy=strategy, store=store).run(Budget(evaluations=budget), seed=seed)
    history = [e for e in store.history(report.run_id) if e.kind == "eval"]
    return ev, report, history


def _check_contract(ev, report, history, budget: int = BUDGET) -> None:
    assert report.evaluations == budget == len(history)
    ids = [e.genome.id for e in history]
    assert len(set(ids)) == len(ids), "a genome was evaluated twice"
    for e in history:
        assert ev.space.is_valid(e.genome.params), e.genome.params


@pytest.mark.slow
@pytest.mark.parametrize("strategy", strategy_names())
def test_every_strategy_keeps_the_contract(strategy):
    budget = SLOW.get(strategy, BUDGET)
    ev, report, history = _run(strategy, budget=budget)
    _check_contract(ev, report, history, budget)
    _, again, history2 = _run(strategy, budget=budget)
    assert [e.genome.id for e in history] == [e.genome.id for e in history2], "not deterministic for a seed"
    assert report.best_ids == again.best_ids
    _, _, other = _run(strategy, seed=1, budget=budget)
    assert [e.genome.id for e in history] != [e.genome.id for e in other]


# every registered mutator alone: tests/contracts/test_mutators.py; here each of Optuna's samplers
SAMPLER_MUTATORS = {f"optuna-{name}": (lambda name=name: OptunaSampler(name)) for name in SAMPLERS}


@pytest.mark.parametrize("name", sorted(SAMPLER_MUTATORS))
def test_every_optuna_sampler_alone_keeps_the_contract(name):
    budget = SLOW.get(name, BUDGET)
    ev, report, history = _run(mutators=[SAMPLER_MUTATORS[name]()], budget=budget)
    _check_contract(ev, report, history, budget)
    assert [e for e in history if e.genome.lineage.operator == name], f"{name} never contributed a genome"


def test_optuna_learns_from_every_evaluation_and_failures_are_failures():
    sampler = OptunaSampler("tpe")
    ev = ReplayEvaluator(LANDSCAPE)
    store = SQLiteStore(":memory:")
    report = Search(ev.space, ev, [sampler, RandomRestart()], store=store).run(Budget(evaluations=60), seed=3)
    history = [e for e in store.history(report.run_id) if e.kind == "eval"]
    ok = [e for e in history if e.result.is_ok]
    failed = [e for e in history if not e.result.is_ok]
    trials = sampler.study.trials
    complete = [t for t in trials if t.state.name == "COMPLETE"]
    # every good evaluation, whichever operator proposed it, is a completed trial with log(latency)
    assert len(complete) == len(ok)
    assert sorted(round(t.value, 9) for t in complete) == sorted(round(math.log(e.result.fitness), 9) for e in ok)
    # evaluations that failed are failed trials, never a made-up latency
    assert failed, "this landscape and seed should evaluate some configurations that do not fit"
    assert sum(t.state.name == "FAIL" for t in trials) >= len(failed)
    assert {e.genome.lineage.operator for e in history} >= {"optuna-tpe", "restart"}


def test_optuna_sampler_repairs_invalid_and_seen_points():
    """A sampler that insists on one point gets the nearest unseen valid point instead."""
    import numpy as np
    import optuna

    from evokernel.core.archive import Archive
    from evokernel.core.mutator import Context
    from evokernel.core.result import Result

    ev = ReplayEvaluator(LANDSCAPE)
    fixed = {"BM": 4, "BN": 3, "BK": 2, "GROUP_M": 1, "num_warps": 1, "num_stages": 3}  # indices: 256x256x128 s5
    stubborn = optuna.samplers.PartialFixedSampler(fixed, optuna.samplers.RandomSampler(seed=0))
    mut = OptunaSampler(stubborn, name="stubborn")
    ctx = Context(ev.space, np.random.default_rng(0), 0, Archive())
    seen = set()
    for _ in range(3):
        g = mut.propose([], ctx)
        assert g is not None and ev.space.is_valid(g.params) and g.id not in seen
        seen.add(g.id)
        mut.observe(g, Result.ok(1.0))
    assert sum(t.state.name == "FAIL" for t in mut.study.trials) >= 1
