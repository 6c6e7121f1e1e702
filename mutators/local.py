"""Local search on the Hamming neighbourhood of the elites, with kicks (iterated local search).

Around the best elite it proposes, in turn, the unseen points one parameter away: first one
step along an ordered parameter, then any other value of one parameter. When every
neighbour of the best few elites has been evaluated (a local optimum), it kicks: a point a
few random parameters away from the best, from which the archive's next best takes over.
Kernel Tuner's published comparison has greedy iterated local search among the best
strategies once a budget reaches about a hundred evaluations.

>>> import numpy as np
>>> from evokernel.core.archive import Archive
>>> from evokernel.core.mutator import Context
>>> from evokernel.core.result import Result
>>> from evokernel.core.space import SearchSpace, PowerOfTwo
>>> space = SearchSpace([PowerOfTwo("BM", 16, 256), PowerOfTwo("BN", 16, 256)])
>>> archive = Archive()
>>> best = space.genome(BM=64, BN=64)
>>> _ = archive.consider(best, Result.ok(1.0), "run")
>>> ls = LocalSearch()
>>> ls.observe(best, Result.ok(1.0))
>>> child = ls.propose([], Context(space, np.random.default_rng(0), 1, archive))
>>> sorted(abs(int(np.log2(child[n])) - 6) for n in ("BM", "BN"))
[0, 1]
"""

from __future__ import annotations

from collections.abc import Sequence

from evokernel.core.genome import Genome
from evokernel.core.mutator import Context
from evokernel.core.result import Result
from evokernel.core.space import Value

__all__ = ["LocalSearch"]


class LocalSearch:
    """Greedy local search around the archive's best elites; see the module's docstring.

    elites: how many of the best elites' neighbourhoods to exhaust before kicking.
    kick: how many parameters a kick changes (each by a random step)."""

    arity = 0

    def __init__(self, *, name: str = "local", elites: int = 3, kick: int = 3) -> None:
        if elites < 1 or kick < 1:
            raise ValueError("elites and kick must be >= 1")
        self.name = name
        self.elites = elites
        self.kick = kick
        self.reset()

    def reset(self) -> None:
        self._seen: set[str] = set()
        self._proposed: set[str] = set()
        self._ranked: list[tuple[float, int, Genome]] = []  # (fitness, order, genome) of good results

    def observe(self, genome: Genome, result: Result) -> None:
        self._seen.add(genome.id)
        if result.is_ok:
            self._ranked.append((result.fitness, len(self._seen), genome))
            self._ranked.sort(key=lambda x: (x[0], x[1]))
            del self._ranked[4 * self.elites :]

    def propose(self, parents: Sequence[Genome], ctx: Context) -> Genome | None:
        centres = [g for _, _, g in self._ranked[: self.elites]]
        best = ctx.archive.best()  # the archive's best (noise-aware) leads, if it differs
        if best is not None and all(best.genome.id != g.id for g in centres):
            centres.insert(0, best.genome)
        if not centres:
            centres = list(parents)
        if not centres:
            return None
        for centre in centres:
            for ring in (self._steps, self._hamming):
                options = [g for g in ring(centre, ctx) if g.id not in self._seen and g.id not in self._proposed]
                if options:
                    child = options[int(ctx.rng.integers(len(options)))]
                    self._proposed.add(child.id)
                    return child
        return self._kick(centres[0], ctx)

    # -- neighbourhoods ----------------------------------------------------------------
    def _steps(self, centre: Genome, ctx: Context) -> list[Genome]:
        try:
            return [Genome.of(p, centre.source) for p in ctx.space.neighbours(centre.params)]
        except Exception:  # an elite from another space version
            return []

    def _hamming(self, centre: Genome, ctx: Context) -> list[Genome]:
        space = ctx.space
        out = []
        try:
            base = space.canonical(centre.params)
        except Exception:
            return []
        for p in space.params:
            near = {repr(v) for v in p.neighbours(base[p.name])}
            for v in p.values:
                if v == base[p.name] or repr(v) in near:
                    continue
                cand: dict[str, Value] = {**base, p.name: v}
                if space.is_valid(cand):
                    out.append(Genome.of(cand, centre.source))
        return out

    def _kick(self, centre: Genome, ctx: Context) -> Genome | None:
        space = ctx.space
        movable = [p for p in space.params if len(p) > 1]
        if not movable:
            return None
        for _ in range(32):
            point = space.canonical(centre.params)
            for i in ctx.rng.choice(len(movable), size=min(self.kick, len(movable)), replace=False):
                p = movable[int(i)]
                options = p.neighbours(point[p.name])
                point[p.name] = options[int(ctx.rng.integers(len(options)))]
            if space.is_valid(point):
                g = Genome.of(point, centre.source)
                if g.id not in self._seen:
                    return g
        return None
