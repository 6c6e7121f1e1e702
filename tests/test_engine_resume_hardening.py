"""Resume and end-of-run hardening: non-deterministic operators, the cost cap, flaky
finalists, claims during one long evaluation, and the wall time of the final re-measurement."""

from __future__ import annotations

import random
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from evokernel.core.errors import StoreError
from evokernel.core.genome import Genome
from evokernel.core.result import Result, Status
from evokernel.core.space import IntRange, SearchSpace
from evokernel.engine import claims
from evokernel.engine.landscape import builtin
from evokernel.engine.search import Budget, Search, SearchOptions
from evokernel.evaluators import ReplayEvaluator
from evokernel.mutators import PointMutation, RandomRestart
from evokernel.store import SQLiteStore

LANDSCAPE = "matmul_bf16_h200_M16_N4096_K4096"


class Nondet:
    """Like an LLM: its proposals do not follow from the run's seed (nor its random numbers)."""

    name, arity = "nondet", 1

    def propose(self, parents, ctx):
        return Genome.of(ctx.space.sample(np.random.default_rng(random.randrange(10**9))))


class Paid:
    """Charges $1 a proposal, like an LLM call."""

    name, arity, costly = "paid", 1, True

    def __init__(self) -> None:
        self.calls = 0

    def propose(self, parents, ctx):
        self.calls += 1
        ctx.charge(1.0, "paid")
        return Genome.of(ctx.space.sample(ctx.rng))


class Kill:
    def __init__(self, n: int) -> None:
        self.n = n

    def on_start(self, *a):
        pass

    def on_generation(self, *a):
        pass

    def on_finish(self, *a):
        pass

    def on_evaluation(self, ind, best, n):
        if n == self.n:
            raise KeyboardInterrupt("simulated kill")


class Counting:
    """A replay evaluator that counts how often each genome is measured: when its result is
    taken, one at a time (counting a whole batch up front would count the genomes after a
    kill, never measured, and the non-deterministic operator may propose one of them again)."""

    name = "counting"

    def __init__(self) -> None:
        self.inner = ReplayEvaluator(builtin(LANDSCAPE))
        self.space = self.inner.space
        self.measured: dict[str, int] = {}

    def fingerprint(self):
        return {"counting": 1}

    def evaluate(self, genomes):
        for g in genomes:
            self.measured[g.id] = self.measured.get(g.id, 0) + 1
            yield from self.inner.evaluate([g])


def test_resume_with_a_nondeterministic_operator_completes_measuring_nothing_twice(tmp_path: Path):
    db = str(tmp_path / "x.db")
    ev = Counting()
    opts = SearchOptions(remeasure=0)
    with pytest.raises(KeyboardInterrupt):
        Search(ev.space, ev, [Nondet()], store=SQLiteStore(db), observers=[Kill(20)], options=opts).run(
            Budget(evaluations=40), seed=0
        )
    report = Search(ev.space, ev, [Nondet()], store=SQLiteStore(db), options=opts).run(Budget(evaluations=40), seed=0)
    assert report.evaluations == 40
    assert report.resumed_hits == 20 and report.measured == 20
    assert max(ev.measured.values()) == 1
    history = SQLiteStore(db).history(report.run_id)
    assert sorted(e.seq for e in history if e.kind == "eval") == list(range(40))


def test_a_clash_on_a_stored_position_is_a_store_error(tmp_path: Path):
    store = SQLiteStore(str(tmp_path / "x.db"))
    space = SearchSpace([IntRange("x", 0, 9)])
    store.begin_run("r", name="n", archive_key="a", fingerprint="f", config={}, environment={})
    store.record("r", 0, Genome.of(space.sample(np.random.default_rng(0))), "f", Result.ok(1.0))
    other = next(Genome.of({"x": x}) for x in range(10) if store.lookup("r", Genome.of({"x": x}).id, "f") is None)
    with pytest.raises(StoreError, match="position 0"):
        store.record("r", 0, other, "f", Result.ok(2.0))


def test_the_cost_cap_holds_across_a_resume(tmp_path: Path):
    db = str(tmp_path / "x.db")
    ev = ReplayEvaluator(builtin(LANDSCAPE))
    paid = Paid()
    budget = Budget(evaluations=60, cost=10)
    with pytest.raises(KeyboardInterrupt):
        Search(ev.space, ev, [paid, PointMutation()], store=SQLiteStore(db), observers=[Kill(30)]).run(budget, seed=0)
    before = paid.calls
    assert before == 10
    report = Search(ev.space, ev, [paid, PointMutation()], store=SQLiteStore(db)).run(budget, seed=0)
    assert paid.calls == before  # nothing more spent: the cap was reached before the kill
    assert report.cost == pytest.approx(10.0)


class Flaky:
    """Each genome passes its first measurement and fails every later one."""

    name = "flaky"

    def __init__(self) -> None:
        self.inner = ReplayEvaluator(builtin(LANDSCAPE))
        self.seen: set[str] = set()

    def fingerprint(self):
        return {"flaky": 1}

    def evaluate(self, genomes):
        out = []
        for g in genomes:
            r = next(iter(self.inner.evaluate([g])))
            if g.id in self.seen:
                r = Result.failed(Status.INCORRECT, "wrong answer on re-measurement")
            self.seen.add(g.id)
            out.append(r)
        return out


def test_a_finalist_failing_its_remeasurement_is_not_left_the_stored_elite():
    store = SQLiteStore(":memory:")
    ev = Flaky()
    report = Search(ev.inner.space, ev, store=store, options=SearchOptions(report_elites=3)).run(
        Budget(evaluations=60), seed=0
    )
    failed = {e.genome.id for e in report.elites}
    assert report.best is None
    stored = store.elites(run_id=report.run_id)
    assert all(e.genome.id not in failed for e in stored)


def test_a_finalist_failing_with_no_other_genome_in_its_niche_is_dropped():
    store = SQLiteStore(":memory:")
    ev = Flaky()
    per_genome = lambda g: g.id  # noqa: E731  (a niche per genome)
    report = Search(ev.inner.space, ev, store=store, descriptor=per_genome, options=SearchOptions(report_elites=3)).run(
        Budget(evaluations=30), seed=0
    )
    failed = {e.genome.id for e in report.elites}
    stored = {e.genome.id for e in store.elites(run_id=report.run_id)}
    assert failed and not failed & stored


def test_claims_are_renewed_during_one_long_evaluation(tmp_path: Path, monkeypatch):
    monkeypatch.setattr(claims.Claimer.__init__, "__kwdefaults__", {"lease_s": 0.6})
    db = str(tmp_path / "x.db")
    starts: list[int] = []
    lock = threading.Lock()

    class Slow:
        name = "slow"

        def fingerprint(self):
            return {"slow": 1}

        def evaluate(self, genomes):
            for g in genomes:
                with lock:
                    starts.append(g.params["x"])
                time.sleep(1.5)  # over two leases, no result in between
                yield Result.ok(1.0 + g.params["x"])

    space = SearchSpace([IntRange("x", 0, 50)])

    def run(seed: int) -> None:
        Search(
            space,
            Slow(),
            [RandomRestart()],
            store=SQLiteStore(db),
            seeds=[{"x": 7}],
            options=SearchOptions(population=1, remeasure=0),
        ).run(Budget(evaluations=1), seed=seed)

    first = threading.Thread(target=run, args=(0,))
    first.start()
    time.sleep(0.3)
    run(1)
    first.join()
    assert starts.count(7) == 1


def test_the_final_remeasurement_starts_nothing_after_the_wall_time():
    inner = ReplayEvaluator(builtin(LANDSCAPE))
    starts: list[float] = []

    class Slow:
        name = "slow"

        def fingerprint(self):
            return {"slow": 1}

        def evaluate(self, genomes):
            for g in genomes:
                starts.append(time.monotonic())
                time.sleep(0.05 if len(starts) <= 10 else 0.4)  # re-measurements are slow
                yield from inner.evaluate([g])

    t0 = time.monotonic()
    Search(
        inner.space, Slow(), [RandomRestart()], options=SearchOptions(population=5, remeasure=3, report_elites=3)
    ).run(Budget(evaluations=10, wall_s=1.2), seed=0)
    time.sleep(0.5)
    assert len(starts) > 10  # it did re-measure, within the time
    assert all(s < t0 + 1.25 for s in starts)  # (the run starts its clock a moment after t0)
