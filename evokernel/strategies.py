"""Named search strategies: a set of mutators plus loop options, selectable by name.

Third-party strategies register in the entry-point group `evokernel.strategies` as a
`Strategy` object.

>>> sorted(strategy_names())
['evolution', 'random']
>>> [m.name for m in get_strategy("evolution").mutators(None)]
['point', 'crossover', 'restart']
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from .errors import ConfigError, PluginError
from .mutator import Mutator
from .plugins import load, registered
from .search import SearchOptions
from .space import SearchSpace

__all__ = ["Strategy", "get_strategy", "strategy_names"]


@dataclass(frozen=True)
class Strategy:
    name: str
    mutators: Callable[[SearchSpace | None], list[Mutator]]
    options: SearchOptions = field(default_factory=SearchOptions)
    description: str = ""


def _evolution(space: SearchSpace | None) -> list[Mutator]:
    from evokernel.mutators import PointMutation, RandomRestart, UniformCrossover

    return [PointMutation(), UniformCrossover(), RandomRestart()]


def _random(space: SearchSpace | None) -> list[Mutator]:
    from evokernel.mutators import RandomRestart

    return [RandomRestart()]


_BUILTIN = {
    "evolution": Strategy(
        "evolution", _evolution, SearchOptions(),
        "generational evolution: point mutation, uniform crossover and random restarts under an operator bandit",
    ),
    "random": Strategy("random", _random, SearchOptions(), "uniform random sampling without repeats"),
}


def strategy_names() -> list[str]:
    return sorted(set(_BUILTIN) | set(registered("evokernel.strategies")))


def get_strategy(name: str) -> Strategy:
    if name in _BUILTIN:
        return _BUILTIN[name]
    try:
        found = load("evokernel.strategies", name)
    except PluginError:
        raise ConfigError(f"unknown strategy {name!r} (available: {', '.join(strategy_names())})") from None
    if not isinstance(found, Strategy):
        raise ConfigError(f"strategy plugin {name!r} is a {type(found).__name__}, not an evokernel Strategy")
    return found
