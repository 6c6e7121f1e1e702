"""Random restart: a fresh uniformly random valid point, to leave a basin.

>>> import numpy as np
>>> from evokernel.core.archive import Archive
>>> from evokernel.core.mutator import Context
>>> from evokernel.core.space import SearchSpace, PowerOfTwo
>>> space = SearchSpace([PowerOfTwo("BM", 16, 256)])
>>> RandomRestart().propose([], Context(space, np.random.default_rng(0), 1, Archive()))["BM"] in space["BM"].values
True
"""

from __future__ import annotations

from collections.abc import Sequence

from evokernel.core.genome import Genome
from evokernel.core.mutator import Context

__all__ = ["RandomRestart"]


class RandomRestart:
    arity = 0

    def __init__(self, *, name: str = "restart") -> None:
        self.name = name

    def propose(self, parents: Sequence[Genome], ctx: Context) -> Genome | None:
        return Genome.of(ctx.space.sample(ctx.rng))
