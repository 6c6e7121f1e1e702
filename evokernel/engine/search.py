"""The search loop: propose, deduplicate, evaluate, select, keep elites; resumable.

A run is deterministic for a seed: given the same results, it makes the same choices.
Resuming a killed run is re-running it: every result already stored is read back instead
of measured again, so the run retraces its steps for free and carries on from where it
was killed. At most the evaluations in flight at the kill are lost.

>>> from evokernel.evaluators import ReplayEvaluator
>>> from evokernel.engine.landscape import builtin
>>> ev = ReplayEvaluator(builtin("matmul_bf16_h200_M16_N4096_K4096"))
>>> report = Search(ev.space, ev).run(Budget(evaluations=100), seed=0)
>>> report.evaluations, report.best.latency_ms < 0.021
(100, True)
"""

from __future__ import annotations

import hashlib
import logging
import math
import os
import statistics
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence, Sized
from dataclasses import asdict, dataclass
from typing import Any

import msgspec
import numpy as np

from evokernel.core.archive import Archive, Descriptor, Elite, significant_gain
from evokernel.engine.bandit import OperatorBandit
from evokernel.judge.env import environment
from evokernel.core.errors import ConfigError, EvaluatorError
from evokernel.core.evaluator import DescribesEnvironment, Evaluator, Remeasures, Restores, fingerprint_hash
from evokernel.core.genome import Genome, canonical_json
from evokernel.engine.learned import FailureModel
from evokernel.engine.transfer import TransferOperator, transfer_key, transfer_seeds
from evokernel.core.mutator import Context, Costly, Exhaustible, Mutator, observe, reset
from evokernel.core.result import Result
from evokernel.core.space import SearchSpace
from evokernel.store import ForgetsMeasured, SQLiteStore, Store

__all__ = ["Budget", "SearchOptions", "Search", "SearchReport", "ReportedElite", "Individual", "Observer"]

log = logging.getLogger("evokernel.search")


@dataclass(frozen=True)
class Budget:
    """When to stop: after `evaluations` genomes, `wall_s` seconds, or `cost` spent by
    costly operators (the cost cap switches those operators off; the search goes on)."""

    evaluations: int | None = None
    wall_s: float | None = None
    cost: float | None = None

    def __post_init__(self) -> None:
        for name in ("evaluations", "wall_s", "cost"):
            value = getattr(self, name)
            if value is not None and not (isinstance(value, (int, float)) and value > 0):
                raise ConfigError(f"budget {name} must be positive, got {value!r}")
        if self.evaluations is None and self.wall_s is None:
            raise ConfigError("a budget needs a number of evaluations or a wall time")


@dataclass(frozen=True)
class SearchOptions:
    """Knobs of the generational loop, with defaults in one place."""

    population: int = 8
    offspring: int = 0  # children per generation; 0 means `population`
    selection: str = "tournament"  # or "rank"
    tournament_size: int = 3
    elitism: int = 8  # best individuals that always survive; = population gives (mu + lambda)
    patience: int | None = None  # stop after this many generations without a better elite
    noise_z: float = 1.0  # an elite is replaced only by a gain > noise_z * combined noise
    report_elites: int = 5  # elites re-measured and reported at the end
    remeasure: int = 2  # extra measurements of each reported elite (0: none)
    retries: int = 32  # proposals tried before falling back to a random unseen point
    seed_elites: int = 4  # elites of earlier runs put in the first generation
    learn_failures: bool = True  # skip points predicted to run out of resources like failed ones
    # genomes of the nearest other shapes' runs put in the first generation (0: none); half the
    # population: on the matmul landscapes 4 beat 8 (a far shape's elites crowd out exploration)
    transfer: int = 4
    # more of them offered later by a "transfer" bandit operator (0: none). Off by default: on
    # the matmul landscapes (leave one out, 10 seeds, budget 100) 24 gave 0.920 / 0.967 / 0.980
    # at 25 / 50 / 100, 8 gave 0.928 / 0.973 / 0.983, none 0.943 / 0.976 / 0.985: far shapes'
    # genomes beat a young population's median, earn credit, and crowd out the search
    transfer_operator: int = 0

    def __post_init__(self) -> None:
        if self.population < 1:
            raise ConfigError("population must be >= 1")
        if self.offspring < 0 or self.elitism < 0 or self.remeasure < 0 or self.report_elites < 1:
            raise ConfigError("offspring, elitism and remeasure must be >= 0, report_elites >= 1")
        if self.selection not in ("tournament", "rank"):
            raise ConfigError(f"selection must be 'tournament' or 'rank', got {self.selection!r}")
        if self.tournament_size < 1:
            raise ConfigError("tournament_size must be >= 1")
        if self.patience is not None and self.patience < 1:
            raise ConfigError("patience must be >= 1 generation")

    @property
    def children(self) -> int:
        return self.offspring or self.population


@dataclass(frozen=True)
class Individual:
    genome: Genome
    result: Result
    seq: int  # position in the run's history
    origin: str  # "measured", "resumed" (this run, before a restart) or "reused" (an earlier run)

    @property
    def fitness(self) -> float:
        return self.result.fitness


class ReportedElite(msgspec.Struct, frozen=True, kw_only=True):
    niche: str
    genome: Genome
    latency_ms: float  # median of all measurements, after re-measurement
    noise: float
    samples: tuple[float, ...]
    first_ms: float  # what the search saw when it found it


class SearchReport(msgspec.Struct, kw_only=True):
    run_id: str
    name: str
    resumed: bool
    stop_reason: str
    evaluations: int
    measured: int
    resumed_hits: int
    reused: int
    generations: int
    statuses: dict[str, int]
    best: ReportedElite | None
    elites: list[ReportedElite]
    trace: list[float | None]  # best-so-far latency (the archive's) after each evaluation
    best_ids: list[str]  # the genome the search believed best after each evaluation
    operators: dict[str, dict[str, float]]
    skipped: dict[str, int]
    wall_s: float
    cost: float


class Observer:
    """Hooks for progress displays and logs; every method is optional."""

    def on_start(self, run_id: str, budget: Budget, resumed: bool) -> None: ...

    def on_evaluation(self, individual: Individual, best: Elite | None, evaluations: int) -> None: ...

    def on_generation(self, generation: int, summary: dict[str, Any]) -> None: ...

    def on_finish(self, report: SearchReport) -> None: ...


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
        from evokernel.engine.strategies import get_strategy

        if mutators is not None and strategy is not None:
            raise ConfigError("give either mutators or a strategy, not both")
        chosen = get_strategy(strategy or "default")
        self.strategy = "custom" if mutators is not None else chosen.name
        self.mutators = list(mutators) if mutators is not None else chosen.mutators(space)
        if not self.mutators:
            raise ConfigError("a search needs at least one mutator")
        names = [m.name for m in self.mutators]
        if len(set(names)) != len(names):
            raise ConfigError(f"mutator names must be unique, got {names}")
        self.options = options or chosen.options
        self.space = space
        self.evaluator = evaluator
        self.store = store if store is not None else SQLiteStore(":memory:")
        self.descriptor = descriptor
        self.name = name or space.name
        self.observers = list(observers)
        self.seeds: list[Genome] = []
        for seed in seeds:
            params = seed.params if isinstance(seed, Genome) else dict(seed)
            reason = space.why_invalid(params)
            if reason is not None:
                log.warning("seed %s left out: %s", params, reason)
                continue
            g = Genome.of(space.canonical(params), seed.source if isinstance(seed, Genome) else None)
            if all(g.id != h.id for h in self.seeds):
                self.seeds.append(g)

    def config(self, seed: int) -> dict[str, Any]:
        """What defines the run (its id is a hash of this); budgets are not part of it."""
        config = {
            "name": self.name,
            "space": self.space.describe(),
            "evaluator": self.evaluator.fingerprint(),
            "strategy": self.strategy,
            "mutators": [m.name for m in self.mutators],
            "options": asdict(self.options),
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
        self.fingerprint = fingerprint_hash(search.evaluator.fingerprint())
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
        self.generation = 0
        self.counts = {"measured": 0, "resumed": 0, "reused": 0}
        self.t0 = time.monotonic()
        self.stop_reason = ""

    # -- bookkeeping -------------------------------------------------------------------
    def charge(self, amount: float, what: str) -> None:
        self.cost += float(amount)

    def _skip(self, why: str) -> None:
        self.skipped[why] = self.skipped.get(why, 0) + 1

    def _out_of_budget(self) -> str:
        b = self.budget
        if b.evaluations is not None and len(self.history) >= b.evaluations:
            return "budget: evaluations"
        if b.wall_s is not None and time.monotonic() - self.t0 >= b.wall_s:
            return "budget: wall time"
        return ""

    def _left(self) -> int:
        if self.budget.evaluations is None:
            return self.opt.children
        return max(0, self.budget.evaluations - len(self.history))

    # -- evaluation --------------------------------------------------------------------
    def evaluate(self, genomes: list[Genome]) -> list[Individual]:
        """Results for `genomes`, in order: from the store when known, else measured.

        Genomes the store does not know go to the evaluator as one batch; each result is
        stored the moment it arrives. Stops early (returning fewer individuals) when the
        wall-time budget runs out mid-batch, abandoning an evaluation still in flight (logged
        as a `wall_time_stop` event, not stored as a result: a later run with more time
        measures it)."""
        store, run_id, out = self.s.store, self.run.id, []
        hits = {g.id: store.lookup(run_id, g.id, self.fingerprint) for g in genomes}
        todo = [g for g in genomes if hits[g.id] is None]
        self._restored([g for g in genomes if hits[g.id] is not None and hits[g.id].in_run])
        results = _Stream(self, todo)
        measured: list[str] = []
        try:
            for g in genomes:
                if self._out_of_budget() == "budget: wall time":
                    break
                hit = hits[g.id]
                if hit is not None:
                    if hit.in_run:
                        self.cost += hit.result.cost  # spent by this run before a restart
                    else:
                        store.record(run_id, len(self.history), g, self.fingerprint, hit.result, reuse=hit.result_id)
                    self._accept(g, hit.result, "resumed" if hit.in_run else "reused", out)
                    continue
                result = results.next()
                if result is None:  # the wall time ran out while `g` was being measured
                    self._stopped(g)
                    break
                store.record(run_id, len(self.history), g, self.fingerprint, result)
                measured.append(g.id)
                self.cost += result.cost
                self._accept(g, result, "measured", out)
            else:
                results.expect_end()
        except _TooManyResults:
            # which result belongs to which genome is unknown: none of the batch's is kept
            if isinstance(store, ForgetsMeasured):
                store.forget_measured(run_id, measured)
            raise
        finally:
            results.close()
        return out

    def _stopped(self, genome: Genome) -> None:
        self._skip("stopped by the wall time")
        self.s.store.log_event(self.run.id, "wall_time_stop", {
            "genome": genome.id, "params": genome.params,
            "reason": f"still being measured when the wall-time budget ({self.budget.wall_s} s) ran out"})

    def _restored(self, genomes: list[Genome]) -> None:
        """Tell the evaluator which genomes' results this run read back from the store instead
        of measuring them again (an evaluator whose draws count measurements, such as the
        replay's noise, advances as if it had measured them, so a resumed run retraces the
        uninterrupted one)."""
        if isinstance(self.s.evaluator, Restores) and genomes:
            self.s.evaluator.restored(genomes)

    def _deadline(self) -> float | None:
        return None if self.budget.wall_s is None else self.t0 + self.budget.wall_s

    def _accept(self, genome: Genome, result: Result, origin: str, out: list[Individual]) -> None:
        ind = Individual(genome, result, len(self.history), origin)
        self.history.append(ind)
        self.seen[genome.id] = ind
        self.counts[origin] += 1
        self.archive.consider(genome, result, self.run.id)
        if self.failures is not None:
            self.failures.learn(genome, result)
        for m in self.mutators:
            observe(m, genome, result)
        best = self.archive.best()
        self.trace.append(best.latency_ms if best else None)
        self.best_ids.append(best.genome.id if best else "")
        out.append(ind)
        for o in self.s.observers:
            o.on_evaluation(ind, best, len(self.history))

    # -- proposal ----------------------------------------------------------------------
    def _select(self, pool: list[Individual], k: int) -> list[Individual]:
        """k parents (distinct where the pool allows) by tournament or rank selection."""
        chosen: list[Individual] = []
        for _ in range(k):
            cands = [p for p in pool if p not in chosen] or pool
            if self.opt.selection == "rank":
                ranked = sorted(cands, key=lambda p: (p.fitness, p.seq))
                w = np.arange(len(ranked), 0, -1, dtype=float)
                chosen.append(ranked[int(self.rng.choice(len(ranked), p=w / w.sum()))])
            else:
                size = min(self.opt.tournament_size, len(cands))
                picks = self.rng.choice(len(cands), size=size, replace=False)
                chosen.append(min((cands[int(i)] for i in picks), key=lambda p: (p.fitness, p.seq)))
        return chosen

    def _allowed(self, pool: list[Individual]) -> list[str]:
        capped = self.budget.cost is not None and self.cost >= self.budget.cost
        return [
            m.name for m in self.mutators
            if m.arity <= len(pool) and not (capped and isinstance(m, Costly) and m.costly)
            and not (isinstance(m, Exhaustible) and m.exhausted)
        ]

    def propose(self, population: list[Individual], taken: set[str]) -> Genome | None:
        pool = [p for p in population if p.result.is_ok]
        ctx = Context(self.s.space, self.rng, self.generation, self.archive, self.charge, deadline=self._deadline())
        by_name = {m.name: m for m in self.mutators}
        for _ in range(self.opt.retries):
            allowed = self._allowed(pool)  # a charge may have just hit the cost cap
            if not allowed:
                break
            op = by_name[self.bandit.choose(self.rng, allowed)]
            parents = self._select(pool, op.arity)
            try:
                child = op.propose([p.genome for p in parents], ctx)
            except Exception as exc:  # a broken operator costs a proposal, not the run
                log.warning("mutator %s raised %s: %s", op.name, type(exc).__name__, exc)
                self._skip(f"{op.name} raised")
                continue
            if child is None:
                self._skip(f"{op.name} had nothing")
                continue
            if not isinstance(child, Genome):
                self._skip(f"{op.name} returned {type(child).__name__}")
                continue
            reason = self.s.space.why_invalid(child.params)
            if reason is not None:
                self._skip(f"invalid: {reason.split(':')[0]}")
                continue
            proposed = child
            child = Genome.of(self.s.space.canonical(child.params), child.source)
            if child.id in self.seen or child.id in taken:
                self._skip("duplicate")
                continue
            if self._predicted_failure(child):
                continue
            # an operator may name other parents than those it was given (a repair names the
            # failed genome it fixed), as long as the run has seen them
            named = getattr(proposed, "lineage", None)
            ids = tuple(named.parents) if named is not None and named.parents and all(
                p in self.seen for p in named.parents) else tuple(p.genome.id for p in parents)
            return child.with_lineage(ids, op.name, self.generation)
        return self._unseen_random(taken)

    def _learn_prior_failures(self) -> None:
        """Known dead ends: the evaluations of earlier runs of this space and evaluator (the
        same archive key) teach the failure model before this run proposes anything."""
        if self.failures is None:
            return
        taught = 0
        for info in self.s.store.runs():
            if info.archive_key != self.archive_key or info.seq >= self.run.seq:
                continue
            for e in self.s.store.history(info.id):
                if e.kind == "eval" and self.s.space.is_valid(e.genome.params):
                    taught += self.failures.learn(e.genome, e.result)
        if taught:
            self.s.store.log_event(self.run.id, "prior_failures", {"learned": taught, "model": len(self.failures)},
                                   key="prior_failures")

    def _predicted_failure(self, genome: Genome) -> bool:
        """Skip (and record) a genome the learned failures say would run out of resources."""
        why = self.failures.predict(genome.params) if self.failures is not None else None
        if why is None:
            return False
        self._skip("learned: " + why.split(" like ")[0])
        self.s.store.log_event(self.run.id, "skip", {"genome": genome.id, "params": genome.params, "reason": why},
                               key=f"skip:{genome.id}")
        return True

    def _unseen_random(self, taken: set[str]) -> Genome | None:
        """A random valid point not looked at yet (nor predicted to fail), or None when the
        space is exhausted."""
        space = self.s.space
        for _ in range(self.opt.retries):
            g = Genome.of(space.sample(self.rng))
            if g.id not in self.seen and g.id not in taken and not self._predicted_failure(g):
                return g.with_lineage((), "restart", self.generation)
        if space.size > space.ENUMERABLE:
            return None
        left = [g for g in map(Genome.of, space.valid_points()) if g.id not in self.seen and g.id not in taken]
        if self.failures is not None and len(self.failures):
            fine = [g for g in left if self.failures.predict(g.params) is None]
            left = fine or left  # predicted failures only once nothing else is left
        if not left:
            return None
        return left[int(self.rng.integers(len(left)))].with_lineage((), "restart", self.generation)

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
        try:
            for o in s.observers:
                o.on_start(self.run.id, self.budget, self.run.resumed)
            report = self._loop()
        except BaseException as exc:
            # stopped from outside (Ctrl-C, a signal, sys.exit) is "interrupted"; the evaluator
            # or the search itself breaking is "failed"; either way with what it had found
            status = "interrupted" if isinstance(exc, (KeyboardInterrupt, SystemExit)) else "failed"
            s.store.finish_run(self.run.id, status, {**self._partial(), "error": f"{type(exc).__name__}: {exc}"})
            raise
        s.store.finish_run(self.run.id, "finished", msgspec.to_builtins(_summary(report)))
        for o in s.observers:
            o.on_finish(report)
        return report

    def _partial(self) -> dict[str, Any]:
        """The summary of a run that did not finish: how far it got and its best so far."""
        best = self.archive.best()
        return {"evaluations": len(self.history), "generations": self.generation,
                "statuses": _statuses(self.history), "best": best.genome.id if best else None,
                "best_ms": best.latency_ms if best else None, "best_params": best.genome.params if best else None,
                "wall_s": time.monotonic() - self.t0, "cost": self.cost}

    def _loop(self) -> SearchReport:
        s, opt = self.s, self.opt
        prior = s.store.elites(archive_key=self.archive_key, before_seq=self.run.seq)
        prior = [e for e in prior if s.space.is_valid(e.genome.params)]
        self.archive.seed(prior)
        self._learn_prior_failures()
        first: list[Genome] = []
        for e in prior[: opt.seed_elites]:
            if len(first) < self._left():
                first.append(Genome.of(s.space.canonical(e.genome.params), e.genome.source)
                             .with_lineage((), "archive", 0))
        taken = {g.id for g in first}
        for g in s.seeds:
            if g.id not in taken and len(first) < self._left():
                first.append(g.with_lineage((), "seed", 0))
                taken.add(g.id)
        key = transfer_key(s.evaluator)
        if key is not None and opt.transfer and len(first) < self._left():
            # the nearest shapes' best genomes: the first few open the run, the rest are offered
            # by a "transfer" operator that the bandit keeps calling while they pay off
            seeds = transfer_seeds(s.store, key, s.space, fingerprint=self.fingerprint,
                                   limit=opt.transfer + opt.transfer_operator)
            head, rest = seeds[: min(opt.transfer, self._left() - len(first))], seeds[opt.transfer:]
            for g, run_id, dist in head:
                if g.id not in taken:
                    first.append(g.with_lineage((), "transfer", 0))
                    taken.add(g.id)
            if rest and "transfer" not in self.bandit.names:
                self.mutators.append(TransferOperator([g for g, _, _ in rest]))
                self.bandit.add("transfer")
            if seeds:
                s.store.log_event(self.run.id, "transfer", {
                    "from_runs": sorted({r for _, r, _ in seeds}), "genomes": [g.id for g, _, _ in head],
                    "offered_later": len(rest),
                    "distances": sorted({round(d, 3) for _, _, d in seeds})}, key="transfer")
        while len(first) < min(opt.population, self._left()):
            g = self._unseen_random(taken)
            if g is None:
                break
            first.append(g.with_lineage((), "init", 0))
            taken.add(g.id)
        population = [p for p in self.evaluate(first) if p.result.is_ok]
        self._end_generation(population, [])
        stale = 0
        while not (reason := self._out_of_budget()):
            self.generation += 1
            best_before = self.archive.best().latency_ms if self.archive.best() else math.inf
            taken = set()
            batch: list[Genome] = []
            for _ in range(min(opt.children, self._left())):
                child = self.propose(population, taken)
                if child is None:
                    break
                batch.append(child)
                taken.add(child.id)
            if not batch:
                reason = "space exhausted"
                break
            children = self.evaluate(batch)
            self._credit(children, population, best_before)
            population = self._survivors(population, children)
            best_after = self.archive.best().latency_ms if self.archive.best() else math.inf
            stale = 0 if best_after < best_before else stale + 1
            self._end_generation(population, children)
            if opt.patience is not None and stale >= opt.patience:
                reason = "patience"
                break
        self.stop_reason = reason
        elites = self._remeasure()
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
            statuses=_statuses(self.history),
            best=elites[0] if elites and math.isfinite(elites[0].latency_ms) else None,
            elites=elites,
            trace=self.trace,
            best_ids=self.best_ids,
            operators=self.bandit.stats(),
            skipped=dict(self.skipped),
            wall_s=time.monotonic() - self.t0,
            cost=self.cost,
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

    def _remeasure(self) -> list[ReportedElite]:
        """Measure the best candidates again, interleaved, and rank them by their median.

        Candidates: the `report_elites` fastest genomes the run saw (a lucky draw among
        them is exposed here) and the archive's `report_elites` best elites. A niche's
        elite becomes its best re-measured genome."""
        k = self.opt.report_elites
        top: list[Elite] = []
        ranked = sorted((i for i in self.history if i.result.is_ok), key=lambda i: (i.fitness, i.seq))
        for ind in ranked[:k]:
            top.append(Elite(niche=self.archive.niche(ind.genome), genome=ind.genome,
                             latency_ms=ind.fitness, noise=ind.result.noise, run_id=self.run.id))
        for e in self.archive.top(k):
            if all(t.genome.id != e.genome.id for t in top):
                top.append(e)
        samples: dict[str, list[float]] = {e.genome.id: [e.latency_ms] for e in top}
        failed: set[str] = set()
        store, run_id = self.s.store, self.run.id
        together = self.s.evaluator.remeasure if isinstance(self.s.evaluator, Remeasures) else None
        noises: dict[str, float] = {}
        if self._out_of_budget() == "budget: wall time":
            # the time is spent: report what the search measured, without measuring again
            return self._reported(top, samples, failed, noises)
        if together is not None and self.opt.remeasure and top:
            # the evaluator measures them side by side: rank by that measurement alone
            got = [store.remeasurement(run_id, e.genome.id, 0) for e in top]
            if any(r is None for r in got):
                try:
                    got = list(together([e.genome for e in top]))
                except (Exception, SystemExit) as exc:
                    raise EvaluatorError(f"evaluator {self.s.evaluator.name!r} failed re-measuring: "
                                         f"{type(exc).__name__}: {exc}") from exc
                if len(got) != len(top) or not all(isinstance(r, Result) for r in got):
                    raise EvaluatorError(f"evaluator {self.s.evaluator.name!r} re-measured {len(got)} of {len(top)}")
                for e, r in zip(top, got):
                    store.record_remeasurement(run_id, 0, e.genome, self.fingerprint, r)
                    self.cost += r.cost
            else:
                self._restored([e.genome for e in top])
            for e, r in zip(top, got):
                samples[e.genome.id] = [r.fitness] if r.is_ok else samples[e.genome.id]
                noises[e.genome.id] = r.noise
                if not r.is_ok:
                    failed.add(e.genome.id)
        for rep in range(self.opt.remeasure if together is None else 0):
            todo, restored = [], []
            for e in top:
                got = store.remeasurement(run_id, e.genome.id, rep)
                if got is None:
                    todo.append(e.genome)
                else:
                    restored.append(e.genome)
                    self._add_sample(e.genome.id, got, samples, failed)
            self._restored(restored)
            if not todo:
                continue
            results = _Stream(self, todo)
            try:
                for g in todo:
                    result = results.next()
                    if result is None:
                        break
                    store.record_remeasurement(run_id, rep, g, self.fingerprint, result)
                    self.cost += result.cost
                    self._add_sample(g.id, result, samples, failed)
                else:
                    results.expect_end()
            finally:
                results.close()
        return self._reported(top, samples, failed, noises)

    def _reported(self, top: list[Elite], samples: dict[str, list[float]], failed: set[str],
                  noises: dict[str, float]) -> list[ReportedElite]:
        store, run_id = self.s.store, self.run.id
        out = []
        for e in top:
            xs = samples[e.genome.id]
            med = math.inf if e.genome.id in failed else statistics.median(xs)
            noise = statistics.pstdev(xs) / med if len(xs) > 1 and math.isfinite(med) else e.noise
            noise = noises.get(e.genome.id, noise)
            out.append(ReportedElite(niche=e.niche, genome=e.genome, latency_ms=med, noise=noise,
                                     samples=tuple(xs), first_ms=e.latency_ms))
        out.sort(key=lambda r: (r.latency_ms, r.genome.id))
        if self.opt.remeasure:
            measured = {r.genome.id for r in out}
            done: set[str] = set()
            for r in out:  # fastest first: the first of each niche is its best re-measured genome
                if r.niche in done or not math.isfinite(r.latency_ms):
                    continue
                done.add(r.niche)
                cur = self.archive.get(r.niche)
                if cur is None or cur.genome.id in measured or r.latency_ms < cur.latency_ms:
                    self.archive.set(Elite(niche=r.niche, genome=r.genome, latency_ms=r.latency_ms,
                                           noise=r.noise, run_id=run_id))
        store.save_elites(run_id, self.archive_key, self.archive.take_changes())
        return out

    @staticmethod
    def _add_sample(gid: str, result: Result, samples: dict[str, list[float]], failed: set[str]) -> None:
        """A re-measurement that fails disqualifies the genome (flaky kernels are not elites)."""
        if result.is_ok:
            samples[gid].append(result.fitness)
        else:
            failed.add(gid)


class _TooManyResults(EvaluatorError):
    """An evaluator yielded more results than genomes: none of them can be trusted."""


class _Stream:
    """The evaluator's results for `genomes`, one at a time, checked: a Result per genome,
    no fewer and no more; an evaluator that raises (even SystemExit) is an EvaluatorError.

    With a wall-time budget the evaluator runs in a daemon thread and `next()` waits at most
    until the deadline, then returns None: an evaluation that hangs is abandoned there (a
    Python thread cannot be killed; the run ends and so does the process)."""

    _END = object()

    def __init__(self, run: _Run, genomes: list[Genome]) -> None:
        self.name = run.s.evaluator.name
        self.evaluator = run.s.evaluator
        self.genomes = genomes
        self.deadline = run._deadline()
        self.it: Iterator[Result] | None = None
        self.queue: Any = None
        self.stop = False
        if not genomes:
            self.it = iter(())
        elif self.deadline is None:
            self.it = self._checked()
        else:
            import queue
            import threading

            self.queue = queue.Queue()
            threading.Thread(target=self._pump, name=f"evokernel-evaluator-{self.name}", daemon=True).start()

    def _fail(self, exc: BaseException) -> EvaluatorError:
        if isinstance(exc, EvaluatorError):
            return exc
        return EvaluatorError(f"evaluator {self.name!r} failed: {type(exc).__name__}: {exc}")

    def _checked(self) -> Iterator[Result]:
        try:
            got = self.evaluator.evaluate(self.genomes)
        except (Exception, SystemExit) as exc:
            raise self._fail(exc) from exc
        if isinstance(got, Sized) and len(got) != len(self.genomes):
            error = _TooManyResults if len(got) > len(self.genomes) else EvaluatorError
            raise error(f"evaluator {self.name!r} returned {len(got)} results for {len(self.genomes)} genomes "
                        f"({'more' if len(got) > len(self.genomes) else 'fewer'} results than genomes)")
        try:
            yield from got
        except (Exception, SystemExit) as exc:
            raise self._fail(exc) from exc

    def _pump(self) -> None:
        it = self._checked()
        try:
            for r in it:
                self.queue.put((True, r))
                if self.stop:
                    it.close()
                    return
            self.queue.put((True, self._END))
        except BaseException as exc:  # handed to the search's thread
            self.queue.put((False, exc))

    def _get(self) -> Any:
        """The next item, _END, or None at the deadline."""
        if self.queue is None:
            assert self.it is not None
            return next(self.it, self._END)
        import queue

        try:
            ok, item = self.queue.get(timeout=max(0.0, self.deadline - time.monotonic()))
        except queue.Empty:
            return None
        if not ok:
            raise item if isinstance(item, EvaluatorError) else self._fail(item)
        return item

    def next(self) -> Result | None:
        """The next result, or None when the wall-time budget ran out first."""
        item = self._get()
        if item is self._END:
            raise EvaluatorError(f"evaluator {self.name!r} returned fewer results than genomes")
        if item is not None and not isinstance(item, Result):
            raise EvaluatorError(f"evaluator {self.name!r} returned {type(item).__name__}, not a Result")
        return item

    def expect_end(self) -> None:
        """After the last genome's result: one more is a broken evaluator (whose results
        cannot be matched to genomes)."""
        if self.deadline is not None and time.monotonic() >= self.deadline:
            return
        item = self._get()
        if item is not None and item is not self._END:
            raise _TooManyResults(f"evaluator {self.name!r} returned more results than genomes "
                                 f"({len(self.genomes)} genomes)")

    def close(self) -> None:
        self.stop = True
        if self.queue is None and self.it is not None:
            close = getattr(self.it, "close", None)
            if close is not None:
                close()


def _statuses(history: list[Individual]) -> dict[str, int]:
    out: dict[str, int] = {}
    for ind in history:
        out[ind.result.status.value] = out.get(ind.result.status.value, 0) + 1
    return out


def _summary(report: SearchReport) -> dict[str, Any]:
    best = report.best
    return {
        "stop_reason": report.stop_reason,
        "evaluations": report.evaluations,
        "measured": report.measured,
        "reused": report.reused,
        "generations": report.generations,
        "statuses": report.statuses,
        "best": best.genome.id if best else None,
        "best_ms": best.latency_ms if best else None,
        "best_params": best.genome.params if best else None,
        "wall_s": report.wall_s,
        "cost": report.cost,
    }


def _evaluator_environment(evaluator: Any) -> dict[str, Any]:
    """What an evaluator says about where it runs (a kernel evaluator: which sandbox
    protections its candidates get), recorded with the run."""
    if isinstance(evaluator, DescribesEnvironment) and callable(evaluator.environment):
        return dict(evaluator.environment())
    return {}
