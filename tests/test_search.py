from __future__ import annotations

import math
import time
from collections import Counter
from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest

from evokernel import (
    Budget,
    ConfigError,
    EvaluatorError,
    Genome,
    Observer,
    Result,
    Search,
    SearchOptions,
    Status,
)
from evokernel.core.archive import Archive, Verdict
from evokernel.evaluators import ReplayEvaluator
from evokernel.engine.landscape import Landscape, builtin
from evokernel.mutators import PointMutation, RandomRestart
from evokernel.search_spaces import matmul_space, tile_class
from evokernel.store import SQLiteStore


class Counting:
    """Wraps an evaluator and records every genome it is asked to measure."""

    def __init__(self, inner, fail_after: int | None = None) -> None:
        self.inner = inner
        self.name = "counting"
        self.calls: list[str] = []
        self.fail_after = fail_after

    def fingerprint(self):
        return self.inner.fingerprint()

    def evaluate(self, genomes: Sequence[Genome]) -> Iterator[Result]:
        for g in genomes:
            if self.fail_after is not None and len(self.calls) >= self.fail_after:
                raise RuntimeError("GPU fell off the bus")
            self.calls.append(g.id)
            yield from self.inner.evaluate([g])


def test_finds_the_optimum_of_a_small_landscape(small: Landscape):
    found = 0
    for seed in range(10):
        ev = ReplayEvaluator(small)
        report = Search(small.space, ev).run(Budget(evaluations=30), seed=seed)
        found += report.best.genome.params == {"a": 4, "b": 3, "layout": "col"}
    assert found >= 9


@pytest.mark.slow
def test_beats_random_search_on_recorded_h200_landscapes():
    # benchmarks/search_efficiency.py, 20 seeds at 100 evaluations: the default strategy
    # 0.989 of the optimum on average over the four landscapes, random search 0.928
    for name in ("matmul_bf16_h200_M2048_N6144_K4096", "matmul_bf16_h200_M256_N4096_K14336"):
        ev = ReplayEvaluator(builtin(name))
        optimum = ev.landscape.optimum()[1]
        mean = {}
        for strategy in ("default", "random"):
            fractions = [
                optimum / ev.true_latency(Search(ev.space, ev, strategy=strategy).run(100, seed=seed).best.genome)
                for seed in range(8)
            ]
            mean[strategy] = sum(fractions) / len(fractions)
        assert mean["default"] > 0.94 and mean["default"] > mean["random"] + 0.03, mean


def test_same_seed_same_run_different_seed_different_run(small: Landscape):
    def run(seed):
        ev = ReplayEvaluator(small, noise=0.03, seed=seed)
        store = SQLiteStore(":memory:")
        r = Search(small.space, ev, store=store).run(Budget(evaluations=25), seed=seed)
        return r, [e.genome.id for e in store.history(r.run_id) if e.kind == "eval"]

    (a, ha), (b, hb), (_, hc) = run(3), run(3), run(4)
    assert ha == hb and a.trace == b.trace and a.best_ids == b.best_ids and a.elites == b.elites
    assert ha != hc


def test_no_genome_is_evaluated_twice_and_the_budget_is_exact(small: Landscape):
    ev = Counting(ReplayEvaluator(small))
    report = Search(small.space, ev).run(Budget(evaluations=37), seed=0)
    assert report.evaluations == 37 == len(report.trace) == len(report.best_ids)
    first = ev.calls[:37]
    assert len(set(first)) == 37  # re-measurements of elites come after, and only those
    assert set(ev.calls[37:]) <= {e.genome.id for e in report.elites}


def test_stops_when_the_space_is_exhausted(small: Landscape):
    ev = Counting(ReplayEvaluator(small))
    report = Search(small.space, ev).run(Budget(evaluations=500), seed=1)
    assert report.stop_reason == "space exhausted"
    assert report.evaluations == 48 and report.statuses == {"ok": 42, "compile_error": 6}
    assert report.best.latency_ms == 1.0


def test_results_of_earlier_runs_are_reused_not_measured(tmp_path: Path, small: Landscape):
    store = SQLiteStore(tmp_path / "e.db")
    ev1 = Counting(ReplayEvaluator(small))
    r1 = Search(small.space, ev1, store=store).run(Budget(evaluations=20), seed=1)
    ev2 = Counting(ReplayEvaluator(small))
    r2 = Search(small.space, ev2, store=store).run(Budget(evaluations=20), seed=2)
    assert r1.run_id != r2.run_id
    assert r2.reused > 0 and r2.measured + r2.reused == 20
    assert len(set(ev2.calls[: r2.measured]) & set(ev1.calls)) == 0
    # the earlier run's elite seeds the later run's first generation
    hist = store.history(r2.run_id)
    assert hist[0].genome.id == r1.best.genome.id and hist[0].cached


def test_results_are_not_reused_across_fingerprints(tmp_path: Path, small: Landscape):
    store = SQLiteStore(tmp_path / "e.db")
    Search(small.space, ReplayEvaluator(small), store=store).run(Budget(evaluations=20), seed=1)
    r = Search(small.space, ReplayEvaluator(small, noise=0.1), store=store).run(Budget(evaluations=20), seed=1)
    assert r.reused == 0 and r.measured == 20


def test_patience_stops_a_stalled_search(small: Landscape):
    report = Search(small.space, ReplayEvaluator(small), options=SearchOptions(population=4, patience=2)).run(
        Budget(evaluations=40), seed=0
    )
    assert report.stop_reason == "no improvement in 2 generations" and report.evaluations < 40


def test_wall_time_budget(small: Landscape):
    ev = ReplayEvaluator(small, delay_s=0.02)
    t0 = time.monotonic()
    report = Search(small.space, ev, options=SearchOptions(remeasure=0)).run(Budget(evaluations=48, wall_s=0.3))
    assert report.stop_reason == "budget: wall time" and report.evaluations < 30
    assert time.monotonic() - t0 < 1.5


def test_a_failing_evaluator_stops_the_run_and_loses_nothing(tmp_path: Path, small: Landscape):
    store = SQLiteStore(tmp_path / "e.db")
    bad = Counting(ReplayEvaluator(small), fail_after=13)
    with pytest.raises(EvaluatorError, match="GPU fell off the bus"):
        Search(small.space, bad, store=store).run(Budget(evaluations=30), seed=5)
    [run] = store.runs()
    # the evaluator broke: "failed" (not "interrupted"), with how far it got and its best so far
    assert run.status == "failed" and store.count(run.id)["evaluations"] == 13
    assert run.summary["evaluations"] == 13 and run.summary["best_ms"] > 0
    assert "GPU fell off the bus" in run.summary["error"]
    good = Counting(ReplayEvaluator(small))
    report = Search(small.space, good, store=store).run(Budget(evaluations=30), seed=5)
    assert report.resumed and report.resumed_hits == 13 and report.measured == 17
    assert not set(good.calls[:17]) & set(bad.calls)


def test_candidate_failures_are_values(small: Landscape):
    class AllFail:
        name = "all-fail"

        def fingerprint(self):
            return {"evaluator": "all-fail"}

        def evaluate(self, genomes):
            return [Result.failed(Status.CRASH, "segfault") for _ in genomes]

    report = Search(small.space, AllFail()).run(Budget(evaluations=20), seed=0)
    assert report.best is None and report.statuses == {"crash": 20} and report.trace == [None] * 20


def test_misbehaving_evaluators_are_reported(small: Landscape):
    class Short:
        name = "short"

        def fingerprint(self):
            return {}

        def evaluate(self, genomes):
            return [Result.ok(1.0)]

    class Wrong:
        name = "wrong"

        def fingerprint(self):
            return {"w": 1}

        def evaluate(self, genomes):
            return [1.0 for _ in genomes]

    with pytest.raises(EvaluatorError, match="fewer results"):
        Search(small.space, Short()).run(10)
    with pytest.raises(EvaluatorError, match="returned float for genome [0-9a-f]+, not a Result"):
        Search(small.space, Wrong()).run(10)


def test_broken_mutators_cost_proposals_not_the_run(small: Landscape):
    class Raises:
        name, arity = "raises", 1

        def propose(self, parents, ctx):
            raise ValueError("bug")

    class Garbage:
        name, arity = "garbage", 1

        def propose(self, parents, ctx):
            return {"a": 1}

    class Invalid:
        name, arity = "invalid", 0

        def propose(self, parents, ctx):
            return Genome.of({"a": 3, "b": 1, "layout": "row"})

    report = Search(small.space, ReplayEvaluator(small), [Raises(), Garbage(), Invalid()]).run(
        Budget(evaluations=20), seed=0
    )
    assert report.evaluations == 20
    assert report.skipped["raises raised"] > 0 and report.skipped["garbage returned dict"] > 0
    assert any(k.startswith("invalid: a=3") for k in report.skipped)


def test_cost_cap_switches_off_costly_operators_only(small: Landscape):
    class Paid:
        name, arity, costly = "paid", 1, True

        def __init__(self):
            self.calls = 0
            self.point = PointMutation()

        def propose(self, parents, ctx):
            self.calls += 1
            ctx.charge(1.0, "tokens")
            return self.point.propose(parents, ctx)

    paid = Paid()
    report = Search(small.space, ReplayEvaluator(small), [paid, RandomRestart()]).run(
        Budget(evaluations=40, cost=3.0), seed=0
    )
    assert paid.calls == 3 and report.cost == 3.0 and report.evaluations == 40


def test_noise_aware_archive_and_remeasured_elites(small: Landscape):
    a = Archive(noise_z=1.0)
    g1, g2, g3 = (Genome.of({"x": i}) for i in range(3))
    assert a.consider(g1, Result.ok(1.0, noise=0.05)) is Verdict.NEW_NICHE
    assert a.consider(g2, Result.ok(0.95, noise=0.05)) is Verdict.WITHIN_NOISE
    assert a.best().genome == g1
    assert a.consider(g3, Result.ok(0.85, noise=0.05)) is Verdict.IMPROVED
    assert a.consider(g1, Result.failed(Status.INCORRECT, "wrong")) is Verdict.FAILED

    ev = ReplayEvaluator(small, noise=0.05, seed=0)
    report = Search(small.space, ev, options=SearchOptions(remeasure=4, report_elites=3)).run(30, seed=0)
    assert all(len(e.samples) == 5 for e in report.elites)
    assert report.best.latency_ms == pytest.approx(sorted(report.best.samples)[2])
    assert [e.latency_ms for e in report.elites] == sorted(e.latency_ms for e in report.elites)


def test_archive_keeps_one_elite_per_niche():
    ev = ReplayEvaluator(builtin("matmul_bf16_h200_M2048_N6144_K4096"))
    store = SQLiteStore(":memory:")
    report = Search(matmul_space(), ev, descriptor=tile_class, store=store).run(80, seed=0)
    elites = store.elites(run_id=report.run_id)
    assert len(elites) > 5 and len({e.niche for e in elites}) == len(elites)
    assert all(e.niche == tile_class(e.genome) for e in elites)


def test_observers_see_every_evaluation(small: Landscape):
    class Recorder(Observer):
        def __init__(self):
            self.events = Counter()

        def on_start(self, run_id, budget, resumed):
            self.events["start"] += 1

        def on_evaluation(self, individual, best, evaluations):
            self.events["eval"] += 1

        def on_generation(self, generation, summary):
            self.events["gen"] += 1

        def on_finish(self, report):
            self.events["finish"] += 1

    rec = Recorder()
    report = Search(small.space, ReplayEvaluator(small), observers=[rec]).run(20)
    assert rec.events["start"] == rec.events["finish"] == 1
    assert rec.events["eval"] == 20 and rec.events["gen"] == report.generations + 1


@pytest.mark.parametrize(
    "make",
    [
        lambda: Budget(evaluations=0),
        lambda: Budget(evaluations=-3),
        lambda: Budget(wall_s=0),
        lambda: Budget(),
        lambda: SearchOptions(population=0),
        lambda: SearchOptions(selection="roulette"),
        lambda: SearchOptions(patience=-1),
    ],
)
def test_bad_options_are_config_errors(make):
    with pytest.raises(ConfigError):
        make()


def test_unknown_strategy_and_conflicting_arguments(small: Landscape):
    with pytest.raises(ConfigError, match="unknown strategy 'annealing'"):
        Search(small.space, ReplayEvaluator(small), strategy="annealing")
    with pytest.raises(ConfigError, match="either mutators or a strategy"):
        Search(small.space, ReplayEvaluator(small), [RandomRestart()], strategy="random")
    with pytest.raises(ConfigError, match="unique"):
        Search(small.space, ReplayEvaluator(small), [RandomRestart(), RandomRestart()])


def test_random_strategy_is_selectable(small: Landscape):
    report = Search(small.space, ReplayEvaluator(small), strategy="random").run(20)
    assert set(report.operators) == {"restart"} and report.evaluations == 20
    assert math.isfinite(report.best.latency_ms)


def test_transfer_seeds_a_new_shape_from_the_nearest_stored_shapes(tmp_path):
    from evokernel.engine.transfer import family_of_name

    store = SQLiteStore(tmp_path / "runs.db")
    names = [
        "matmul_bf16_h200_M2048_N6144_K4096",
        "matmul_bf16_h200_M8192_N8192_K1024",
        "matmul_bf16_h200_M16_N4096_K4096",
    ]
    # the default strategy (the matmul family's own, `model`, fills part of the first
    # generation from its cost model: tests/test_cost_model.py)
    for name in names:
        ev = ReplayEvaluator(builtin(name))
        Search(ev.space, ev, store=store, strategy="default").run(Budget(evaluations=60), seed=0)
    target = ReplayEvaluator(builtin("matmul_bf16_h200_M256_N4096_K14336"))
    assert family_of_name(target.landscape.name)[0] == "matmul_bf16_h200"
    report = Search(target.space, target, store=store, strategy="default").run(Budget(evaluations=16), seed=1)
    run = [r for r in store.runs() if r.id == report.run_id][0]
    events = [p for k, p, _ in store.events(run.id) if k == "transfer"]
    assert len(events) == 1 and len(events[0]["genomes"]) == 4  # half the first generation
    first_gen = [e for e in store.history(run.id) if e.kind == "eval" and e.seq < 8]
    assert {e.genome.id for e in first_gen[:4]} == set(events[0]["genomes"])
    assert [e.genome.lineage.operator for e in first_gen] == ["transfer"] * 4 + ["init"] * 4
    # nearest run first: two genomes from it, then one from each of the next two
    assert events[0]["distances"] == sorted(events[0]["distances"]) and len(events[0]["from_runs"]) == 3
    assert events[0]["offered_later"] == 0 and "transfer" not in report.operators
    # with a transfer operator, the rest are offered under the bandit
    more = Search(target.space, target, store=store, options=SearchOptions(transfer_operator=8)).run(
        Budget(evaluations=24), seed=2
    )
    (ev_more,) = [p for k, p, _ in store.events(more.run_id) if k == "transfer"]
    assert ev_more["offered_later"] == 8 and "transfer" in more.operators
    # a run with transfer turned off starts from random points instead
    off = Search(target.space, target, store=store, options=SearchOptions(transfer=0)).run(
        Budget(evaluations=8), seed=1
    )
    assert not [p for k, p, _ in store.events(off.run_id) if k == "transfer"]


def test_learned_constraints_skip_points_predicted_to_run_out_of_shared_memory():
    """The replay space of a landscape holds the 112 configurations that failed on the H200
    (no static constraint rules them out): the run learns from the failures it meets."""
    failed = {}
    for learn in (True, False):
        ev = ReplayEvaluator(builtin("matmul_bf16_h200_M2048_N6144_K4096"))
        store = SQLiteStore(":memory:")
        # patience=0: the comparison needs both runs' whole budget (the default early stop would end them)
        opts = SearchOptions(learn_failures=learn, patience=0)
        report = Search(ev.space, ev, strategy="random", store=store, options=opts).run(Budget(evaluations=300), seed=2)
        failed[learn] = report.statuses.get("compile_error", 0)
        skips = [p for k, p, _ in store.events(report.run_id) if k == "skip"]
        if learn:
            assert report.skipped.get("learned: predicted to run out of shared memory", 0) > 0
            assert skips and all(p["reason"].startswith("predicted to run out of shared memory like ") for p in skips)
            # every skipped point really fails on the H200
            assert all(ev.true_latency(Genome.of(p["params"])) == math.inf for p in skips)
        else:
            assert not skips
    assert failed[True] < 0.8 * failed[False], failed  # measured: 23 against 35 (seed 2)


def test_a_new_run_learns_the_failures_of_earlier_runs_before_proposing():
    ev = ReplayEvaluator(builtin("matmul_bf16_h200_M2048_N6144_K4096"))
    store = SQLiteStore(":memory:")
    first = Search(ev.space, ev, strategy="random", store=store).run(Budget(evaluations=200), seed=3)
    assert first.statuses.get("compile_error", 0) > 0
    second = Search(ev.space, ev, strategy="random", store=store).run(Budget(evaluations=200), seed=4)
    (event,) = [p for k, p, _ in store.events(second.run_id) if k == "prior_failures"]
    assert event["learned"] > 0
    fresh = Search(ev.space, ev, strategy="random", store=SQLiteStore(":memory:")).run(Budget(evaluations=200), seed=4)
    assert second.statuses.get("compile_error", 0) < fresh.statuses.get("compile_error", 0)


def test_seeds_open_the_first_generation_and_invalid_ones_are_left_out(small: Landscape, caplog):
    ev = ReplayEvaluator(small)
    valid = [dict(p) for p in ev.space.valid_points()[:2]]
    bad = {k: -1 for k in valid[0]}
    with caplog.at_level("WARNING", logger="evokernel.engine.search"):
        search = Search(ev.space, ev, seeds=[valid[0], bad, valid[1], valid[0]])
    assert "seed" in caplog.text and "left out" in caplog.text and len(search.seeds) == 2
    report = search.run(Budget(evaluations=10), seed=0)
    first = [e for e in search.store.history(report.run_id) if e.kind == "eval"][:2]
    assert [e.genome.params for e in first] == [ev.space.canonical(v) for v in valid]
    assert all(e.genome.lineage.operator == "seed" for e in first)
    assert search.run_id(0) != Search(ev.space, ev).run_id(0)  # the seeds are part of what defines the run


def test_a_run_resumed_after_another_shape_of_its_family_ran_retraces_its_start():
    """Transfer seeds a run from the runs begun before it, with what they had measured then:
    resuming it after a nearer shape's run (a fan-out of shapes, at once) does not change its
    first generation, which the store already holds."""
    store = SQLiteStore(":memory:")
    small, large = (
        ReplayEvaluator(builtin(n)) for n in ("matmul_bf16_h200_M16_N4096_K4096", "matmul_bf16_h200_M2048_N6144_K4096")
    )
    first = Search(small.space, small, store=store).run(Budget(evaluations=15), seed=0)
    Search(large.space, large, store=store).run(Budget(evaluations=15), seed=0)
    again = Search(small.space, small, store=store).run(Budget(evaluations=15), seed=0)
    assert again.resumed and again.best_ids == first.best_ids and again.measured == 0
