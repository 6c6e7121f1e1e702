"""Every registered evaluator passes the same contract suite.

The protocol: a name, a fingerprint (JSON data, stable), and `evaluate` giving one result per
genome, in order, a failed candidate being a result with a failure status. Each optional
capability an evaluator has (evokernel.core.evaluator.CAPABILITIES) is checked for what the
engine relies on. Behaviour is checked where the evaluator runs here (the replay fully, the
kernel evaluator on the CPU through the gate); where it needs a GPU the test says so and skips.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest

from evokernel import Budget, Evaluator, Result, Search, SearchOptions
from evokernel.core.evaluator import (
    CAPABILITIES,
    DescribesEnvironment,
    HasFidelities,
    HasTransferKey,
    JudgesProblem,
    Observes,
    Remeasures,
    Restores,
    Sandboxed,
)
from evokernel.core.genome import canonical_json
from evokernel.core.result import Status
from evokernel.store import SQLiteStore

from ._components import EvaluatorCase, build_evaluator

#: The capabilities each shipped evaluator has: the engine finds them by protocol, so one
#: lost to a rename would silently change a search (no re-measurement, no transfer, ...).
SHIPPED = {
    "replay": {HasTransferKey, Restores, HasFidelities},
    "kernel": {Remeasures, HasTransferKey, DescribesEnvironment, JudgesProblem, Sandboxed, HasFidelities},
    "model": {Remeasures, HasTransferKey, HasFidelities},
    "sglang": set(),
    "cascade": {Remeasures, HasTransferKey, Observes},
}


_UNUSED: dict[str, EvaluatorCase] = {}  # evaluators whose behaviour is not checked here: built once


@pytest.fixture
def case(evaluator_name: str) -> Iterator[EvaluatorCase]:
    if evaluator_name in _UNUSED:
        yield _UNUSED[evaluator_name]
        return
    built = build_evaluator(evaluator_name)
    if built.skip_behaviour is not None:
        _UNUSED[evaluator_name] = built
        yield built
        return
    try:
        yield built
    finally:
        close = getattr(built.evaluator, "close", None)
        if callable(close):
            close()


def behaviour(case: EvaluatorCase) -> None:
    if case.skip_behaviour is not None:
        pytest.skip(case.skip_behaviour)


@contextmanager
def fresh(evaluator_name: str) -> Iterator[Any]:
    """A fresh instance of the evaluator, closed after use (a kernel evaluator's judge)."""
    ev = build_evaluator(evaluator_name).evaluator
    try:
        yield ev
    finally:
        close = getattr(ev, "close", None)
        if callable(close):
            close()


def test_it_is_an_evaluator_with_a_stable_fingerprint(case: EvaluatorCase):
    ev = case.evaluator
    assert isinstance(ev, Evaluator), "needs name, fingerprint() and evaluate()"
    assert isinstance(ev.name, str) and ev.name
    fp = ev.fingerprint()
    assert isinstance(fp, dict) and fp
    json.loads(canonical_json(fp))  # JSON data: results are cached under its hash
    assert canonical_json(ev.fingerprint()) == canonical_json(fp)


def test_its_capabilities_are_declared_and_well_formed(evaluator_name: str, case: EvaluatorCase):
    ev = case.evaluator
    has = {c for c in CAPABILITIES if isinstance(ev, c)}
    if evaluator_name in SHIPPED:
        assert has == SHIPPED[evaluator_name], sorted(c.__name__ for c in has ^ SHIPPED[evaluator_name])
    assert not isinstance(ev, Remeasures) or callable(ev.remeasure)
    assert not isinstance(ev, Restores) or callable(ev.restored)
    if isinstance(ev, HasTransferKey):
        key = ev.transfer_key()
        assert key is None or (
            isinstance(key, dict)
            and isinstance(key["family"], str)
            and all(isinstance(v, (int, float)) for v in key["shape"].values())
        ), key
    if isinstance(ev, JudgesProblem):
        assert isinstance(ev.problem.name, str) and ev.problem.shapes and callable(ev.render)
    if isinstance(ev, DescribesEnvironment):
        json.loads(canonical_json(dict(ev.environment())))
    if isinstance(ev, Sandboxed):
        report = ev.sandbox()
        assert hasattr(report, "on") and hasattr(report, "off")
    if isinstance(ev, HasFidelities):  # built, not run: cheaper levels first, the evaluator itself last
        levels = list(ev.fidelities())
        assert len(levels) >= 2 and levels[-1] is ev and all(isinstance(lv, Evaluator) for lv in levels)
        assert len({canonical_json(lv.fingerprint()) for lv in levels}) == len(levels)
    if isinstance(ev, Observes):
        assert callable(ev.observed)


@pytest.mark.slow
def test_one_result_per_genome_in_order_and_failures_are_values(evaluator_name: str, case: EvaluatorCase):
    behaviour(case)
    genomes = case.genomes + case.failing
    results = list(case.evaluator.evaluate(genomes))
    assert len(results) == len(genomes) and all(isinstance(r, Result) for r in results)
    assert all(not r.is_ok and r.status is not Status.OK and r.error for r in results[len(case.genomes) :])
    assert all(r.latency_ms > 0 and math.isfinite(r.latency_ms) for r in results if r.is_ok)
    assert any(r.is_ok for r in results[: len(case.genomes)]), [r.status for r in results]
    assert list(case.evaluator.evaluate([])) == []
    # in order: a fresh evaluator given them in reverse gives the same results in reverse
    with fresh(evaluator_name) as other:
        again = list(other.evaluate(genomes[::-1]))[::-1]
    if case.deterministic:
        assert again == results
    else:
        assert [r.status for r in again] == [r.status for r in results]


def test_the_same_genomes_on_a_fresh_instance_give_the_same_results(evaluator_name: str, case: EvaluatorCase):
    behaviour(case)
    if not case.deterministic:
        pytest.skip("its results are measurements (or not known to be deterministic): statuses are compared above")
    first = list(case.evaluator.evaluate(case.genomes))
    with fresh(evaluator_name) as other:
        assert list(other.evaluate(case.genomes)) == first
        assert other.fingerprint() == case.evaluator.fingerprint()


@pytest.mark.slow
def test_remeasure_gives_one_result_per_genome(case: EvaluatorCase):
    if not isinstance(case.evaluator, Remeasures):
        pytest.skip("no remeasure(): the engine measures its elites again through evaluate()")
    behaviour(case)
    got = case.evaluator.remeasure(case.genomes[:2])
    assert isinstance(got, list) and len(got) == len(case.genomes[:2]) and all(isinstance(r, Result) for r in got)
    assert all(r.is_ok for r in got), [r.error for r in got]


def test_restored_genomes_count_as_measured(evaluator_name: str, case: EvaluatorCase):
    """A resumed run reads results back instead of measuring: the evaluator then gives the
    next measurement what an uninterrupted run would have had."""
    if not isinstance(case.evaluator, Restores):
        pytest.skip("no restored(): nothing counts measurements")
    behaviour(case)
    g = case.genomes[0]
    _, second = list(case.evaluator.evaluate([g])) + list(case.evaluator.evaluate([g]))
    with fresh(evaluator_name) as resumed:
        resumed.restored([g])
        [after] = list(resumed.evaluate([g]))
    if case.deterministic:
        assert after == second


def test_the_engine_runs_a_search_with_it(case: EvaluatorCase):
    behaviour(case)
    space = case.evaluator.space if evaluator_has_space(case) else None
    if space is None:
        from evokernel.search_spaces import matmul_space

        space = matmul_space()
    store = SQLiteStore(":memory:")
    report = Search(
        space,
        case.evaluator,
        strategy="evolution",
        store=store,
        options=SearchOptions(population=2, remeasure=1, report_elites=1),
    ).run(Budget(evaluations=4), seed=0)
    assert report.evaluations == 4 and report.best is not None
    assert store.count(report.run_id)["evaluations"] >= 4


def evaluator_has_space(case: EvaluatorCase) -> bool:
    from evokernel.core.space import SearchSpace

    return isinstance(getattr(case.evaluator, "space", None), SearchSpace)
