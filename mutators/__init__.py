"""Mutation operators. Each proposes one genome from its parents; the search does the rest.

The registry (the `evokernel.mutators` entry points in pyproject.toml) is where a mutator is
registered: `evokernel plugins` lists it, the contract suites check it, and this package
gives it by its class name. The ones below are imported here because the shipped strategies
build them; any other one this package registers (such as `LLMRewrite`, which needs the
`llm` extra to call a model) is loaded on first use:

>>> from evokernel.mutators import LLMRewrite
>>> from evokernel.mutators.llm import LLMRewrite as registered
>>> LLMRewrite is registered
True
"""

from typing import Any

from .cost_model import CostModel
from .crossover import UniformCrossover
from .local import LocalSearch
from .optuna_sampler import SAMPLERS, OptunaSampler
from .point import PointMutation
from .restart import RandomRestart

__all__ = [
    "PointMutation",
    "UniformCrossover",
    "RandomRestart",
    "LocalSearch",
    "OptunaSampler",
    "CostModel",
    "SAMPLERS",
]


def __getattr__(name: str) -> Any:
    """A mutator of this package that the registry names, by its class name."""
    if not name.startswith("_"):
        from evokernel.core.plugins import registered

        for ep in registered("evokernel.mutators").values():
            module, _, attr = ep.value.partition(":")
            if attr == name and module.startswith(__name__ + "."):
                return ep.load()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
