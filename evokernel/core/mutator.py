"""The mutator protocol: parents in, one proposed genome out. Mutators never touch the GPU.

A mutator has a `name`, an `arity` (how many parents it wants: 0, 1 or 2) and `propose`.
It may also `observe` every evaluated genome of the run (samplers that learn, such as
Optuna's), `reset` what it learned when a new run starts, and set `costly = True` if it charges money (LLM operators): those are the
operators a cost cap switches off.

>>> class Flip:
...     name, arity = "flip", 1
...     def propose(self, parents, ctx):
...         return parents[0].replace(use_tma=not parents[0]["use_tma"])
>>> isinstance(Flip(), Mutator)
True
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol, runtime_checkable

import numpy as np

from evokernel.core.genome import Genome
from evokernel.core.result import Result
from evokernel.core.space import SearchSpace

if TYPE_CHECKING:
    from evokernel.core.archive import Archive

__all__ = ["Mutator", "Context", "observe", "reset"]


@dataclass
class Context:
    """What a mutator may read (and the one thing it may do: charge a cost)."""

    space: SearchSpace
    rng: np.random.Generator
    generation: int
    archive: Archive
    charge: Callable[[float, str], None] = field(default=lambda amount, what: None)
    # when the run's wall-time budget ends (time.monotonic()), or None: a slow operator (an
    # LLM call) keeps within it
    deadline: float | None = None

    def seconds_left(self) -> float | None:
        return None if self.deadline is None else self.deadline - time.monotonic()


@runtime_checkable
class Mutator(Protocol):
    name: str
    arity: int

    def propose(self, parents: Sequence[Genome], ctx: Context) -> Genome | None:
        """A new genome (lineage is filled in by the search), or None for nothing to offer."""
        ...


def reset(mutator: Mutator) -> None:
    """Let a stateful mutator forget the last run, if it keeps state."""
    hook = getattr(mutator, "reset", None)
    if hook is not None:
        hook()


def observe(mutator: Mutator, genome: Genome, result: Result) -> None:
    """Tell a learning mutator about an evaluation, if it listens."""
    hook = getattr(mutator, "observe", None)
    if hook is not None:
        hook(genome, result)
