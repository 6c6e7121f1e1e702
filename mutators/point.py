"""Point mutation: move one or more parameters of a parent to a neighbouring value.

>>> import numpy as np
>>> from evokernel.core.archive import Archive
>>> from evokernel.core.mutator import Context
>>> from evokernel.core.space import SearchSpace, PowerOfTwo
>>> space = SearchSpace([PowerOfTwo("BM", 16, 256), PowerOfTwo("BN", 16, 256)])
>>> ctx = Context(space, np.random.default_rng(0), 1, Archive())
>>> child = PointMutation().propose([space.genome(BM=64, BN=64)], ctx)
>>> sum(child[n] != 64 for n in ("BM", "BN"))
1
"""

from __future__ import annotations

from collections.abc import Sequence

from evokernel.core.genome import Genome
from evokernel.core.mutator import Context

__all__ = ["PointMutation"]


class PointMutation:
    """Change `genes` randomly chosen parameters by one step each (adjacent value for
    ordered parameters, any other option for choices); keep the parent's source."""

    arity = 1

    def __init__(self, genes: int = 1, *, name: str = "point", tries: int = 16) -> None:
        if genes < 1:
            raise ValueError("genes must be >= 1")
        self.genes = genes
        self.name = name
        self.tries = tries

    def propose(self, parents: Sequence[Genome], ctx: Context) -> Genome | None:
        parent = parents[0]
        space = ctx.space
        movable = [p for p in space.params if len(p) > 1]
        if not movable:
            return None
        for _ in range(self.tries):
            point = space.canonical(parent.params)
            k = min(self.genes, len(movable))
            for i in ctx.rng.choice(len(movable), size=k, replace=False):
                param = movable[int(i)]
                options = param.neighbours(point[param.name])
                point[param.name] = options[int(ctx.rng.integers(len(options)))]
            if space.is_valid(point):
                return Genome.of(point, parent.source)
        return None
