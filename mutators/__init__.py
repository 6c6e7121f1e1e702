"""Mutation operators. Each proposes one genome from its parents; the search does the rest.

The LLM rewrite operator lives in `evokernel.mutators.llm` (it needs the `llm` extra).
"""

from .crossover import UniformCrossover
from .local import LocalSearch
from .optuna_sampler import SAMPLERS, OptunaSampler
from .point import PointMutation
from .restart import RandomRestart

__all__ = ["PointMutation", "UniformCrossover", "RandomRestart", "LocalSearch", "OptunaSampler", "SAMPLERS"]
