"""Optuna samplers as a mutation source: ask for a point, tell what every evaluation gave.

`OptunaSampler("tpe")` (or "cmaes", "gp", "nsga2", "qmc", "random", or any
`optuna.samplers.BaseSampler`) keeps an in-memory study over the genome's space. Every
genome the run evaluates, whichever operator proposed it, is told to the study: a completed
trial with the log of its latency, or a failed trial for a configuration that did not
compile, crashed or was wrong (never a made-up latency). What a sampler makes of them is
its own: TPE and GP learn from every trial of the study, CMA-ES and NSGA-II only from the
trials of their own generations (points they asked for themselves), QMC and random from none.

Constraints are handled by repair: a point the sampler asks for that violates the space's
constraints (or that the run has already evaluated or been offered) is told as failed, and
the nearest valid point not yet evaluated nor proposed is proposed instead. A trial whose
point the engine dropped unevaluated (predicted to fail, stopped by the wall time) is told
as failed when the next generation starts, not left running.

The space maps onto Optuna's distributions as: ordered parameters as an integer index
(powers of two become their exponent, so the samplers see a log scale), unordered choices
and booleans as categorical.

>>> import numpy as np
>>> from evokernel.core.archive import Archive
>>> from evokernel.core.mutator import Context
>>> from evokernel.core.result import Result
>>> from evokernel.core.space import SearchSpace, PowerOfTwo
>>> space = SearchSpace([PowerOfTwo("BM", 16, 256), PowerOfTwo("BN", 16, 256)])
>>> tpe = OptunaSampler("tpe")
>>> ctx = Context(space, np.random.default_rng(0), 0, Archive())
>>> g = tpe.propose([], ctx)
>>> tpe.observe(g, Result.ok(1.0))
>>> len(tpe.study.trials), tpe.study.trials[0].state.name
(1, 'COMPLETE')
"""

from __future__ import annotations

import logging
import math
import warnings
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from evokernel.core.genome import Genome
from evokernel.core.mutator import Context
from evokernel.core.result import Result
from evokernel.core.space import Param, SearchSpace, Value

__all__ = ["OptunaSampler", "SAMPLERS", "make_sampler"]


def _tpe(seed: int) -> Any:
    import optuna

    # multivariate TPE models parameter interactions (tile shapes and stages do interact);
    # the constant liar keeps a batch of asks from piling onto one point
    return optuna.samplers.TPESampler(seed=seed, multivariate=True, constant_liar=True, n_startup_trials=8)


def _cmaes(seed: int) -> Any:
    import optuna

    return optuna.samplers.CmaEsSampler(seed=seed, n_startup_trials=8, warn_independent_sampling=False)


def _gp(seed: int) -> Any:
    import optuna

    return optuna.samplers.GPSampler(seed=seed, n_startup_trials=8)


def _nsga2(seed: int) -> Any:
    import optuna

    return optuna.samplers.NSGAIISampler(seed=seed, population_size=16)


def _qmc(seed: int) -> Any:
    import optuna

    return optuna.samplers.QMCSampler(seed=seed, qmc_type="sobol", scramble=True, warn_independent_sampling=False)


def _random(seed: int) -> Any:
    import optuna

    return optuna.samplers.RandomSampler(seed=seed)


#: Sampler factories by name: seed -> sampler.
SAMPLERS: dict[str, Callable[[int], Any]] = {
    "tpe": _tpe,
    "cmaes": _cmaes,
    "gp": _gp,
    "nsga2": _nsga2,
    "qmc": _qmc,
    "random": _random,
}


def make_sampler(name: str, seed: int) -> Any:
    try:
        factory = SAMPLERS[name]
    except KeyError:
        raise ValueError(f"unknown Optuna sampler {name!r} (known: {', '.join(sorted(SAMPLERS))})") from None
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # ExperimentalWarning for some samplers
        return factory(seed)


class _Codec:
    """Between points of the space and Optuna's parameters."""

    def __init__(self, space: SearchSpace) -> None:
        from optuna.distributions import CategoricalDistribution, IntDistribution

        self.space = space
        self.dists: dict[str, Any] = {}
        for p in space.params:
            if self._ordered(p):
                self.dists[p.name] = IntDistribution(0, len(p) - 1)
            else:
                self.dists[p.name] = CategoricalDistribution(list(p.values))

    @staticmethod
    def _ordered(p: Param) -> bool:
        return p.ordered and not isinstance(p.values[0], bool)

    def to_point(self, params: dict[str, Any]) -> dict[str, Value]:
        out: dict[str, Value] = {}
        for p in self.space.params:
            v = params[p.name]
            out[p.name] = p.values[int(v)] if self._ordered(p) else v
        return out

    def to_params(self, point: dict[str, Value]) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for p in self.space.params:
            out[p.name] = p.index(point[p.name]) if self._ordered(p) else point[p.name]
        return out

    def index_vector(self, point: dict[str, Value]) -> np.ndarray:
        """Positions in each domain, scaled to [0, 1] (choices: position / count)."""
        return np.array([(p.index(point[p.name]) or 0) / max(len(p) - 1, 1) for p in self.space.params])


class OptunaSampler:
    """A mutator driven by an Optuna sampler (ask/tell); see the module's docstring."""

    arity = 0

    def __init__(self, sampler: str | Any = "tpe", *, name: str | None = None) -> None:
        if isinstance(sampler, str):
            if sampler not in SAMPLERS:
                raise ValueError(f"unknown Optuna sampler {sampler!r} (known: {', '.join(sorted(SAMPLERS))})")
            self._factory: Callable[[int], Any] | None = lambda seed: make_sampler(sampler, seed)
            self._given = None
            default = f"optuna-{sampler}"
        else:
            self._factory, self._given = None, sampler
            default = f"optuna-{type(sampler).__name__.removesuffix('Sampler').lower()}"
        self.name = name or default
        self.reset()

    def reset(self) -> None:
        """Forget the study: a new run starts a new one."""
        self.study: Any = None
        self._codec: _Codec | None = None
        self._pending: dict[str, Any] = {}  # genome id -> trial asked for it, not yet told
        self._backlog: list[tuple[Genome, Result]] = []  # evaluations seen before the study exists
        self._seen: set[str] = set()
        # every genome id proposed and not evaluated yet, repaired points included (they have
        # no trial of their own): a second repair in the same batch must not return it again
        self._proposed: set[str] = set()
        self._generation = 0
        self._valid: list[dict[str, Value]] | None = None
        self._valid_vectors: np.ndarray | None = None

    # -- the mutator protocol ----------------------------------------------------------
    def propose(self, parents: Sequence[Genome], ctx: Context) -> Genome | None:
        if self.study is None:
            self._start(ctx)
        assert self._codec is not None
        if ctx.generation != self._generation:
            self._generation = ctx.generation
            self._drop_unevaluated()
        trial = self.study.ask(self._codec.dists)
        point = self._codec.to_point(trial.params)
        genome = Genome.of(ctx.space.canonical(point)) if ctx.space.is_valid(point) else None
        if genome is not None and not self._taken(genome.id):
            self._pending[genome.id] = trial
            self._proposed.add(genome.id)
            return genome
        # invalid or already seen: a failure for the sampler, and the nearest unseen valid point instead
        self.study.tell(trial, state=_state("FAIL"))
        repaired = self._nearest_unseen(point, ctx)
        if repaired is None:
            return None
        genome = Genome.of(repaired)
        self._proposed.add(genome.id)
        return genome

    def observe(self, genome: Genome, result: Result) -> None:
        self._seen.add(genome.id)
        self._proposed.discard(genome.id)
        if self.study is None:
            self._backlog.append((genome, result))
            return
        self._tell(genome, result)

    # -- internals ---------------------------------------------------------------------
    def _taken(self, gid: str) -> bool:
        return gid in self._seen or gid in self._pending or gid in self._proposed

    def _drop_unevaluated(self) -> None:
        """A new generation: the trials asked earlier and never evaluated were dropped by the
        engine (predicted to fail, proposed by another operator too, stopped by the wall
        time). Tell them as failed rather than leave them running: a running trial stays a
        constant-liar point for TPE forever. Their ids stay proposed, so not proposed again."""
        for trial in self._pending.values():
            self.study.tell(trial, state=_state("FAIL"))
        self._pending.clear()

    def _start(self, ctx: Context) -> None:
        import optuna

        optuna.logging.set_verbosity(optuna.logging.WARNING)
        seed = int(ctx.rng.integers(2**31 - 1))
        sampler = self._given if self._given is not None else self._factory(seed)  # type: ignore[misc]
        self.study = optuna.create_study(direction="minimize", sampler=sampler)
        self._codec = _Codec(ctx.space)
        for genome, result in self._backlog:
            self._tell(genome, result)
        self._backlog = []

    def _tell(self, genome: Genome, result: Result) -> None:
        import optuna

        assert self._codec is not None
        value = math.log(result.fitness) if result.is_ok and result.fitness > 0 else None
        trial = self._pending.pop(genome.id, None)
        if trial is not None:
            if value is None:
                self.study.tell(trial, state=_state("FAIL"))
            else:
                self.study.tell(trial, value)
            return
        try:
            params = self._codec.to_params(dict(genome.params))
        except (KeyError, TypeError):
            return  # a genome of another space (a seed from elsewhere): nothing to learn from
        if any(v is None for v in params.values()):
            return
        frozen = optuna.trial.create_trial(
            params=params,
            distributions=self._codec.dists,
            value=value,
            state=_state("COMPLETE") if value is not None else _state("FAIL"),
        )
        self.study.add_trial(frozen)

    def _nearest_unseen(self, point: dict[str, Value], ctx: Context) -> dict[str, Value] | None:
        space = ctx.space
        assert self._codec is not None
        if space.size <= space.ENUMERABLE:
            if self._valid is None:
                self._valid = space.valid_points()
                self._valid_vectors = np.stack([self._codec.index_vector(p) for p in self._valid])
            assert self._valid_vectors is not None
            dist = np.abs(self._valid_vectors - self._codec.index_vector(point)).sum(axis=1)
            for i in np.argsort(dist, kind="stable"):
                cand = self._valid[int(i)]
                if not self._taken(Genome.of(cand).id):
                    return dict(cand)
            return None
        # too large to enumerate: breadth-first over neighbours, a few rings out
        frontier, visited = [dict(point)], set()
        for _ in range(4):
            nxt = []
            for p in frontier:
                for param in space.params:
                    for v in param.neighbours(p[param.name]):
                        cand = {**p, param.name: v}
                        key = tuple(cand.values())
                        if key in visited:
                            continue
                        visited.add(key)
                        if space.is_valid(cand):
                            g = Genome.of(space.canonical(cand))
                            if not self._taken(g.id):
                                return space.canonical(cand)
                        nxt.append(cand)
            frontier = nxt[:512]
        return None


def _state(name: str) -> Any:
    from optuna.trial import TrialState

    return getattr(TrialState, name)


logging.getLogger("optuna").setLevel(logging.WARNING)
