"""Mutation operators. Each proposes one genome from its parents; the search does the rest."""

from .crossover import UniformCrossover
from .local import LocalSearch
from .optuna_sampler import SAMPLERS, OptunaSampler
from .point import PointMutation
from .restart import RandomRestart

__all__ = ["PointMutation", "UniformCrossover", "RandomRestart", "LocalSearch", "OptunaSampler", "SAMPLERS"]
