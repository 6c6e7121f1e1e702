"""The search loop: propose, deduplicate, evaluate, select, keep elites; resumable.

A run is deterministic for a seed: given the same results, it makes the same choices.
Resuming a killed run is re-running it: every result already stored is read back instead
of measured again, so the run retraces its steps for free and carries on from where it
was killed. At most the evaluations in flight at the kill are lost.

This module is the loop; its steps live beside it: `options` (Budget, SearchOptions),
`seeding` (the first generation: earlier elites, seeds, transfer, learned failures),
`propose` (the next genome), `remeasure` (the final pick), `report` (what a run tells).

>>> from evokernel.evaluators import ReplayEvaluator
>>> from evokernel.engine.landscape import builtin
>>> ev = ReplayEvaluator(builtin("matmul_bf16_h200_M16_N4096_K4096"))
>>> report = Search(ev.space, ev).run(Budget(evaluations=100), seed=0)
>>> report.evaluations, report.stop_reason, report.best.latency_ms < 0.021
(88, 'no improvement in 8 generations', True)
"""

# One module on purpose, though over 400 lines: the search loop itself (generations, evaluation, survivors, credit to
# mutators); what it calls (options, seeding, proposals, re-measurement, reports) lives in its own engine modules.

from __future__ import annotations

import contextlib
import hashlib
import math
import os
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict
from typing import Any

import msgspec
import numpy as np

from evokernel.core.archive import Archive, Descriptor, significant_gain
from evokernel.core.errors import ConfigError, StoreError
from evokernel.core.evaluator import DescribesEnvironment, Evaluator, Observes, Restores, fingerprint_hash
from evokernel.core.genome import Genome, canonical_json
from evokernel.core.mutator import Mutator, observe, reset
from evokernel.core.result import Result
from evokernel.core.space import SearchSpace
from evokernel.engine._stream import TooManyResults
from evokernel.engine.bandit import OperatorBandit
from evokernel.engine.claims import Claimer, RenewingStream
from evokernel.engine.learned import FailureModel
from evokernel.engine.propose import propose
from evokernel.engine.options import MIN_IMPROVEMENT, NOTHING_NEW, Budget, SearchOptions, no_improvement
from evokernel.engine.remeasure import remeasure
from evokernel.engine.report import Individual, Observer, ReportedElite, SearchReport, count_statuses, run_summary
from evokernel.engine.seeding import first_generation, valid_seeds
from evokernel.engine.strategies import default_for, get_strategy
from evokernel.engine.transfer import transfer_key
from evokernel.judge.env import environment
from evokernel.store import ForgetsMeasured, SQLiteStore, Store

__all__ = ["Budget", "SearchOptions", "Search", "SearchReport", "ReportedElite", "Individual", "Observer"]


class Search:
    """An evolutionary search of `space`, judged by `evaluator`, stored in `store`.

    mutators: the operators (default: the chosen strategy's); options: loop knobs;
    descriptor: maps a genome to its niche in the elite archive (default: one niche);
    seeds: known-good points (genomes or parameter dicts: a library's defaults, a serving
    engine's tuned config) evaluated in the first generation, after earlier runs' elites,
    so a search starts no worse than what the user would otherwise run (an invalid seed is
    left out with a warning)."""

    def __init__(
        self,
        space: SearchSpace,
        evaluator: Evaluator,
        mutators: Sequence[Mutator] | None = None,
        *,
        strategy: str | None = None,
        options: SearchOptions | None = None,
        store: Store | None = None,
        descriptor: Descriptor | None = None,
        name: str | None = None,
        observers: Iterable[Observer] = (),
        seeds: Iterable[Genome | Mapping[str, Any]] = (),
    ) -> None:
        if mutators is not None and strategy is not None:
            raise ConfigError("give either mutators or a strategy, not both")
        chosen = get_strategy(strategy or default_for(space))
        self.strategy = "custom" if mutators is not None else chosen.name
        self.mutators = list(mutators) if mutators is not None else chosen.mutators(space)
        if not self.mutators:
            raise ConfigError("a search needs at least one mutator")
        names = [m.name for m in self.mutators]
        if len(set(names)) != len(names):
            raise ConfigError(f"mutator names must be unique, got {names}")
        self.options = options or chosen.options
        if self.options.promotion is not None:  # judge cheaply first, promote the promising
            from evokernel.evaluators.cascade import cascade_of

            evaluator = cascade_of(evaluator, self.options.promotion)
        self.space = space
        self.evaluator = evaluator
        self.store = store if store is not None else SQLiteStore(":memory:")
        self.descriptor = descriptor
        self.name = name or space.name
        self.observers = list(observers)
        self.seeds = valid_seeds(space, seeds)

    def config(self, seed: int) -> dict[str, Any]:
        """What defines the run (its id is a hash of this); budgets are not part of it."""
        config = {
            "name": self.name,
            "space": self.space.describe(),
            "evaluator": self.evaluator.fingerprint(),
            "strategy": self.strategy,
            "mutators": [m.name for m in self.mutators],
            "options": _options_identity(self.options),
            "seed": seed,
        }
        key = transfer_key(self.evaluator)
        if key is not None:
            config["transfer"] = key
        if self.seeds:
            config["seeds"] = [g.id for g in self.seeds]
        return config

    def run_id(self, seed: int) -> str:
        return hashlib.sha256(canonical_json(self.config(seed))).hexdigest()[:16]

    def run(self, budget: Budget | int, *, seed: int = 0) -> SearchReport:
        """Run (or resume) the search until the budget, patience or the space runs out."""
        if isinstance(budget, int):
            budget = Budget(evaluations=budget)
        return _Run(self, budget, seed).execute()


class _Run:
    """The state of one run of a Search."""

    def __init__(self, search: Search, budget: Budget, seed: int) -> None:
        self.s = search
        self.opt = search.options
        self.budget = budget
        self.seed = seed
        self.rng = np.random.default_rng(seed)
        try:
            self.fingerprint = fingerprint_hash(search.evaluator.fingerprint())
        except (TypeError, ValueError, OverflowError) as exc:  # what the canonical encoder refuses
            name = getattr(search.evaluator, "name", type(search.evaluator).__name__)
            raise ConfigError(
                f"evaluator {name!r}: fingerprint() must return JSON-like values (str, numbers, lists, dicts): {exc}"
            ) from None
        self.archive_key = hashlib.sha256(
            canonical_json({"space": search.space.describe(), "evaluator": self.fingerprint})
        ).hexdigest()[:16]
        self.archive = Archive(search.descriptor, noise_z=self.opt.noise_z)
        self.mutators: list[Any] = list(search.mutators)  # plus run-local operators (transfer)
        self.bandit = OperatorBandit([m.name for m in search.mutators])
        for m in search.mutators:
            reset(m)
        self.failures = FailureModel(search.space) if self.opt.learn_failures else None
        self.history: list[Individual] = []
        self.seen: dict[str, Individual] = {}
        self.trace: list[float | None] = []
        self.best_ids: list[str] = []
        self.skipped: dict[str, int] = {}
        self.cost = 0.0
        self.replay: dict[int, Genome] = {}  # on resume: the stored genome at each position
        self.generation = 0
        self.counts = {"measured": 0, "resumed": 0, "reused": 0}
        self.fallbacks = 0  # proposals no operator made: random unseen points (propose.unseen_random)
        self.t0 = time.monotonic()
        self.stop_reason = ""
        self.priors: dict[str, Any] | None = None  # what a primed mutator learned from (seeding)

    # -- bookkeeping -------------------------------------------------------------------
    def charge(self, amount: float, what: str) -> None:
        """Spend money (an LLM call): counted against `Budget.cost`, and logged as a `charge`
        event, so that a resumed run starts from what the run spent before it was killed."""
        self.cost += float(amount)
        self.s.store.log_event(self.run.id, "charge", {"amount": float(amount), "what": what})

    def _skip(self, why: str) -> None:
        self.skipped[why] = self.skipped.get(why, 0) + 1

    def _out_of_budget(self) -> str:
        b = self.budget
        if b.evaluations is not None and len(self.history) >= b.evaluations:
            return "budget: evaluations"
        if b.wall_s is not None and time.monotonic() - self.t0 >= b.wall_s:
            return "budget: wall time"
        return ""

    def _out_of_time(self) -> bool:
        """Whether the wall-time budget is spent (whatever else is)."""
        return self.budget.wall_s is not None and time.monotonic() - self.t0 >= self.budget.wall_s

    def _left(self) -> int:
        if self.budget.evaluations is None:
            return self.opt.children
        return max(0, self.budget.evaluations - len(self.history))

    # -- evaluation --------------------------------------------------------------------
    def evaluate(self, genomes: list[Genome]) -> list[Individual]:
        """Results for `genomes`, in order: from the store when known, else measured.

        Genomes the store does not know are claimed (evokernel.engine.claims) and go to the
        evaluator as one batch; each result is stored the moment it arrives. Genomes another
        driver sharing the store is measuring come last: their results are waited for and
        reused. Stops early (returning fewer individuals) when the wall-time budget runs out
        mid-batch, abandoning an evaluation still in flight (logged as a `wall_time_stop`
        event, not stored as a result: a later run with more time measures it)."""
        store, run_id = self.s.store, self.run.id
        out: list[Individual] = []
        hits = {g.id: store.lookup(run_id, g.id, self.fingerprint) for g in genomes}
        todo = [g for g in genomes if hits[g.id] is None]
        elsewhere = self.claims.claim([g.id for g in todo])  # being measured by another driver
        todo = [g for g in todo if g.id not in elsewhere]
        self._restored([g for g in genomes if (hit := hits[g.id]) is not None and hit.in_run])
        results = RenewingStream(self.s.evaluator, todo, self._deadline(), self.claims)
        measured: list[str] = []
        waiting: list[Genome] = []
        done = False
        try:
            for g in genomes:
                if self._out_of_time():
                    break
                hit = hits[g.id]
                if hit is not None:
                    if hit.in_run:
                        self.cost += hit.result.cost  # spent by this run before a restart
                    else:
                        store.record(run_id, len(self.history), g, self.fingerprint, hit.result, reuse=hit.result_id)
                    self._accept(g, hit.result, "resumed" if hit.in_run else "reused", out)
                    continue
                if g.id in elsewhere:
                    waiting.append(g)
                    continue
                result = results.next()
                if result is None:  # the wall time ran out while `g` was being measured
                    self._stopped(g)
                    break
                store.record(run_id, len(self.history), g, self.fingerprint, result)
                measured.append(g.id)
                self.cost += result.cost
                self._accept(g, result, "measured", out)
                self.claims.renew()
            else:
                results.expect_end()
                done = True
        except TooManyResults:
            # which result belongs to which genome is unknown: none of the batch's is kept
            if isinstance(store, ForgetsMeasured):
                store.forget_measured(run_id, measured)
            raise
        finally:
            results.close()
            self.claims.release([g.id for g in todo])
        return out + self._await(waiting) if done else out

    def _await(self, genomes: list[Genome]) -> list[Individual]:
        """Results of genomes other drivers were measuring, reused once stored; measured here
        where their claim ran out (the other driver died) or was given up without a result."""
        out: list[Individual] = []
        lookup = lambda gid: self.s.store.lookup(self.run.id, gid, self.fingerprint)  # noqa: E731
        for g in genomes:
            hit = self.claims.wait(g.id, lookup, self._out_of_time)
            if hit is None:
                if self._out_of_time():
                    break
                out += self.evaluate([g])  # this run holds its claim now
                continue
            self.s.store.record(self.run.id, len(self.history), g, self.fingerprint, hit.result, reuse=hit.result_id)
            self._accept(g, hit.result, "reused", out)
        return out

    def _stopped(self, genome: Genome) -> None:
        self._skip("stopped by the wall time")
        self.s.store.log_event(
            self.run.id,
            "wall_time_stop",
            {
                "genome": genome.id,
                "params": genome.params,
                "reason": f"still being measured when the wall-time budget ({self.budget.wall_s} s) ran out",
            },
        )

    def _restored(self, genomes: list[Genome]) -> None:
        """Tell the evaluator which genomes' results this run read back from the store instead
        of measuring them again (an evaluator whose draws count measurements, such as the
        replay's noise, advances as if it had measured them, so a resumed run retraces the
        uninterrupted one)."""
        if isinstance(self.s.evaluator, Restores) and genomes:
            self.s.evaluator.restored(genomes)

    def _deadline(self) -> float | None:
        return None if self.budget.wall_s is None else self.t0 + self.budget.wall_s

    def _money_left(self) -> float | None:
        return None if self.budget.cost is None else max(0.0, self.budget.cost - self.cost)

    def _accept(self, genome: Genome, result: Result, origin: str, out: list[Individual]) -> None:
        ind = Individual(genome, result, len(self.history), origin)
        self.history.append(ind)
        self.seen[genome.id] = ind
        self.counts[origin] += 1
        self.archive.consider(genome, result, self.run.id)
        if self.failures is not None:
            self.failures.learn(genome, result)
        if isinstance(self.s.evaluator, Observes):
            self.s.evaluator.observed(genome, result, origin)
        for m in self.mutators:
            observe(m, genome, result)
        best = self.archive.best()
        self.trace.append(best.latency_ms if best else None)
        self.best_ids.append(best.genome.id if best else "")
        out.append(ind)
        for o in self.s.observers:
            o.on_evaluation(ind, best, len(self.history))

    # -- credit and survival -----------------------------------------------------------
    def _credit(self, children: list[Individual], population: list[Individual], best_before: float) -> None:
        ok = sorted(p.fitness for p in population if p.result.is_ok)
        median = ok[len(ok) // 2] if ok else math.inf
        for c in children:
            op = c.genome.lineage.operator
            if op not in self.bandit.names:
                continue
            parents = [self.seen[pid] for pid in c.genome.lineage.parents if pid in self.seen]
            ref = min((p for p in parents), key=lambda p: p.fitness, default=None)
            ref_ms, ref_noise = (ref.fitness, ref.result.noise) if ref else (median, c.result.noise)
            beat_parent = c.result.is_ok and significant_gain(
                c.fitness, c.result.noise, ref_ms, ref_noise, self.opt.noise_z
            )
            beat_elite = c.result.is_ok and significant_gain(
                c.fitness, c.result.noise, best_before, c.result.noise, self.opt.noise_z
            )
            self.bandit.credit(op, 1.0 if (beat_parent or beat_elite) else 0.0)

    def _survivors(self, population: list[Individual], children: list[Individual]) -> list[Individual]:
        key = lambda p: (p.fitness, p.seq)  # noqa: E731
        pool = sorted((p for p in population + children if p.result.is_ok), key=key)
        elite = pool[: self.opt.elitism]
        kids = [c for c in pool if c in children and c not in elite]
        olds = [p for p in pool if p not in children and p not in elite]
        return (elite + kids + olds)[: self.opt.population]

    # -- the loop ----------------------------------------------------------------------
    def execute(self) -> SearchReport:
        s = self.s
        self.run = s.store.begin_run(
            s.run_id(self.seed),
            name=s.name,
            archive_key=self.archive_key,
            fingerprint=self.fingerprint,
            config={**s.config(self.seed), "budget": asdict(self.budget)},
            environment={**environment(), **_evaluator_environment(s.evaluator), "pid": os.getpid()},
        )
        self.claims = Claimer(s.store, self.run.id, self.fingerprint)
        if self.run.resumed:
            self._resume_state()
        try:
            for o in s.observers:
                o.on_start(self.run.id, self.budget, self.run.resumed)
            report = self._loop()
        except BaseException as exc:
            # stopped from outside (Ctrl-C, a signal, sys.exit) is "interrupted"; the evaluator
            # or the search itself breaking is "failed"; either way with what it had found
            status = "interrupted" if isinstance(exc, (KeyboardInterrupt, SystemExit)) else "failed"
            with contextlib.suppress(Exception):  # (the store may be what failed)
                self.claims.release()
            try:
                s.store.finish_run(self.run.id, status, {**self._partial(), "error": f"{type(exc).__name__}: {exc}"})
            except StoreError:
                if not isinstance(exc, StoreError):
                    raise
                # the store is what failed (its server gone): its own error says so, not this one
            raise
        self.claims.release()
        s.store.finish_run(self.run.id, "finished", msgspec.to_builtins(run_summary(report)))
        spent = report.cost
        for o in s.observers:
            o.on_finish(report)
        if report.cost > spent:  # an observer spent money for the run (the lesson summary's LLM call)
            self.cost = report.cost
            s.store.log_event(
                self.run.id, "charge", {"amount": report.cost - spent, "what": "observers at the run's end"}
            )
            s.store.finish_run(self.run.id, "finished", msgspec.to_builtins(run_summary(report)))
        return report

    def _resume_state(self) -> None:
        """What a resumed run takes from the store besides results: the genome at each
        position of its history (proposed again, an operator may propose another: the stored
        one is evaluated) and the money it was charged (its proposals' results' costs are
        added back as they are read)."""
        store, run_id = self.s.store, self.run.id
        self.replay = {e.seq: e.genome for e in store.history(run_id) if e.kind == "eval"}
        self.cost = sum(float(p.get("amount", 0.0)) for kind, p, _ in store.events(run_id) if kind == "charge")

    def _partial(self) -> dict[str, Any]:
        """The summary of a run that did not finish: how far it got and its best so far."""
        best = self.archive.best()
        return {
            "evaluations": len(self.history),
            "generations": self.generation,
            "statuses": count_statuses(self.history),
            "best": best.genome.id if best else None,
            "best_ms": best.latency_ms if best else None,
            "best_params": best.genome.params if best else None,
            "wall_s": time.monotonic() - self.t0,
            "cost": self.cost,
            "fallbacks": self.fallbacks,
        }

    def _best_ms(self) -> float:
        best = self.archive.best()
        return best.latency_ms if best is not None else math.inf

    def _loop(self) -> SearchReport:
        s, opt = self.s, self.opt
        first = first_generation(self)
        population = [p for p in self.evaluate(first) if p.result.is_ok]
        self._end_generation(population, [])
        stale = 0
        mark = self._best_ms()  # the best when the patience count last restarted
        while not (reason := self._out_of_budget()):
            self.generation += 1
            best_before = self._best_ms()
            taken: set[str] = set()
            batch: list[Genome] = []
            for _ in range(min(opt.children, self._left())):
                child = propose(self, population, taken, self.replay.get(len(self.history) + len(batch)))
                if child is None:
                    break
                batch.append(child)
                taken.add(child.id)
            if not batch:
                reason = "space exhausted" if self.opt.fallback else NOTHING_NEW
                break
            children = self.evaluate(batch)
            self._credit(children, population, best_before)
            population = self._survivors(population, children)
            best_after = self._best_ms()
            if best_after < mark * (1 - opt.min_improvement):  # the first finite best counts (mark inf)
                stale, mark = 0, best_after
            else:
                stale += 1
            self._end_generation(population, children)
            if opt.stop_after is not None and stale >= opt.stop_after:
                reason = no_improvement(opt.stop_after)
                break
        self.stop_reason = reason
        elites = remeasure(self)
        return SearchReport(
            run_id=self.run.id,
            name=s.name,
            resumed=self.run.resumed,
            stop_reason=reason,
            evaluations=len(self.history),
            measured=self.counts["measured"],
            resumed_hits=self.counts["resumed"],
            reused=self.counts["reused"],
            generations=self.generation,
            statuses=count_statuses(self.history),
            best=elites[0] if elites and math.isfinite(elites[0].latency_ms) else None,
            elites=elites,
            trace=self.trace,
            best_ids=self.best_ids,
            operators=self.bandit.stats(),
            skipped=dict(self.skipped),
            wall_s=time.monotonic() - self.t0,
            cost=self.cost,
            priors=self.priors,
            fallbacks=self.fallbacks,
        )

    def _end_generation(self, population: list[Individual], children: list[Individual]) -> None:
        self.s.store.save_elites(self.run.id, self.archive_key, self.archive.take_changes())
        best = self.archive.best()
        summary = {
            "generation": self.generation,
            "evaluations": len(self.history),
            "children": len(children),
            "failed": sum(not c.result.is_ok for c in children),
            "best_ms": best.latency_ms if best else None,
            "best": best.genome.id if best else None,
            "population": len(population),
        }
        self.s.store.log_event(self.run.id, "generation", summary, key=f"generation:{self.generation}")
        for o in self.s.observers:
            o.on_generation(self.generation, summary)


def _options_identity(options: SearchOptions) -> dict[str, Any]:
    """The options as part of a run's identity; a knob added later is left out at its
    off value, so runs configured before it existed keep their ids (and resume)."""
    out = asdict(options)
    if out.get("promotion") is None:
        out.pop("promotion", None)
    if not out.get("train_on_replayed"):
        out.pop("train_on_replayed", None)
    if out.get("fallback", True):
        out.pop("fallback", None)
    # the early stop only ends a run sooner (as its budget does): the default (None) and off (0)
    # are both recorded as None, what runs before the default early stop recorded, so those keep
    # their ids, and a run stopped early resumes with --patience 0 to spend the rest of its budget
    if not out.get("patience"):
        out["patience"] = None
    if out.get("min_improvement") == MIN_IMPROVEMENT:
        out.pop("min_improvement", None)
    return out


def _evaluator_environment(evaluator: Any) -> dict[str, Any]:
    """What an evaluator says about where it runs (a kernel evaluator: which sandbox
    protections its candidates get), recorded with the run."""
    if isinstance(evaluator, DescribesEnvironment) and callable(evaluator.environment):
        return dict(evaluator.environment())
    return {}
