"""Mutation operators. Each proposes one genome from its parents; the search does the rest."""

from .crossover import UniformCrossover
from .point import PointMutation
from .restart import RandomRestart

__all__ = ["PointMutation", "UniformCrossover", "RandomRestart"]
