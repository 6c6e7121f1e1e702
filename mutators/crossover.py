"""Uniform crossover: each parameter from either parent with equal probability.

>>> import numpy as np
>>> from evokernel.core.archive import Archive
>>> from evokernel.core.mutator import Context
>>> from evokernel.core.space import SearchSpace, IntRange
>>> space = SearchSpace([IntRange(n, 0, 1) for n in "abcd"])
>>> ctx = Context(space, np.random.default_rng(1), 1, Archive())
>>> child = UniformCrossover().propose([space.genome(a=0, b=0, c=0, d=0), space.genome(a=1, b=1, c=1, d=1)], ctx)
>>> set(child.params.values()) <= {0, 1}
True
"""

from __future__ import annotations

from collections.abc import Sequence

from evokernel.core.genome import Genome
from evokernel.core.mutator import Context

__all__ = ["UniformCrossover"]


class UniformCrossover:
    """Mix two parents gene by gene; the child keeps the first parent's source (parents come
    in the order the engine's selection drew them, each the winner of its own tournament:
    not sorted by fitness, which a mutator is not told). Children that violate a constraint
    are redrawn; identical parents give nothing."""

    arity = 2

    def __init__(self, *, name: str = "crossover", tries: int = 16) -> None:
        self.name = name
        self.tries = tries

    def propose(self, parents: Sequence[Genome], ctx: Context) -> Genome | None:
        a, b = parents[0], parents[1]
        differ = [n for n in ctx.space.names if a.params[n] != b.params[n]]
        if not differ:
            return None
        for _ in range(self.tries):
            point = dict(a.params)
            take = ctx.rng.random(len(differ)) < 0.5
            for name, from_b in zip(differ, take):
                if from_b:
                    point[name] = b.params[name]
            if point != a.params and point != b.params and ctx.space.is_valid(point):
                return Genome.of(point, a.source)
        return None
