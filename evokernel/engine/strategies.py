"""Named search strategies: a set of mutators plus loop options, selectable by name.

Third-party strategies register in the entry-point group `evokernel.strategies` as a
`Strategy` object.

>>> sorted(strategy_names())[:4]
['default', 'evolution', 'local', 'model']
>>> [m.name for m in get_strategy("evolution").mutators(None)]
['point', 'crossover', 'restart']
>>> [m.name for m in get_strategy("default").mutators(None)]
['optuna-tpe', 'local', 'point']
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from evokernel.core.errors import ConfigError, PluginError
from evokernel.core.mutator import Mutator
from evokernel.core.plugins import load, registered
from evokernel.engine.options import SearchOptions
from evokernel.core.space import SearchSpace

__all__ = ["Strategy", "get_strategy", "strategy_names", "default_for"]


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


def _local(space: SearchSpace | None) -> list[Mutator]:
    from evokernel.mutators import LocalSearch

    return [LocalSearch()]


def _sampler(name: str) -> Callable[[SearchSpace | None], list[Mutator]]:
    def make(space: SearchSpace | None) -> list[Mutator]:
        from evokernel.mutators import OptunaSampler

        return [OptunaSampler(name)]

    return make


def _default(space: SearchSpace | None) -> list[Mutator]:
    from evokernel.mutators import LocalSearch, OptunaSampler, PointMutation

    # chosen on the four matmul landscapes (benchmarks/search_efficiency.py, 20 seeds, budget
    # 100): this set 0.877 / 0.966 / 0.989 of the optimum at 25 / 50 / 100 evaluations, with
    # crossover and restarts added 0.862 / 0.951 / 0.975, TPE alone 0.869 / 0.951 / 0.971
    return [OptunaSampler("tpe"), LocalSearch(), PointMutation()]


def _model(space: SearchSpace | None) -> list[Mutator]:
    from evokernel.mutators import CostModel, LocalSearch, OptunaSampler, PointMutation

    # half of the first generation from the model, half random: on the fused-MoE landscapes a
    # model trained on the other shape alone picked worse than random (0.789 at 10 evaluations
    # against 0.958), while on the matmul ones half still finds the optimum by 25
    return [CostModel(first_share=0.5), OptunaSampler("tpe"), LocalSearch(), PointMutation()]


DEFAULT = Strategy(
    "default",
    _default,
    SearchOptions(),
    "an operator bandit over Optuna's TPE (which learns from every evaluation), local search "
    "around the elites and point mutation; the first generation is random, or seeded from "
    "the nearest shapes in the store",
)
EVOLUTION = Strategy(
    "evolution",
    _evolution,
    SearchOptions(),
    "generational evolution: point mutation, uniform crossover and random restarts under an operator bandit",
)
LOCAL = Strategy(
    "local", _local, SearchOptions(), "greedy iterated local search on the Hamming neighbourhood of the elites"
)
MODEL = Strategy(
    "model",
    _model,
    SearchOptions(),
    "the default's operators plus a cost model (a random forest trained on every earlier "
    "measurement of the kernel family: the store and the shipped landscapes) that picks half "
    "the first generation and proposes by predicted latency, then expected improvement",
)
RANDOM = Strategy("random", _random, SearchOptions(), "uniform random sampling without repeats")


def _optuna(name: str) -> Strategy:
    return Strategy(f"optuna-{name}", _sampler(name), SearchOptions(), f"Optuna's {name} sampler alone (ask/tell)")


OPTUNA_TPE, OPTUNA_CMAES, OPTUNA_GP = _optuna("tpe"), _optuna("cmaes"), _optuna("gp")
OPTUNA_NSGA2, OPTUNA_QMC, OPTUNA_RANDOM = _optuna("nsga2"), _optuna("qmc"), _optuna("random")

# The shipped strategies, registered in pyproject.toml (so `evokernel plugins` lists them)
# and found here too: a name of ours is never shadowed by another package's, and an install
# whose metadata predates an entry still finds it.
_BUILTIN = {s.name: s for s in globals().copy().values() if isinstance(s, Strategy)}


#: The strategy a search uses when none is asked for, by the template family its space's
#: geometry names (`Geometry.kind`), where one was measured to win. `model` on matmul:
#: leave one shape out, 10 seeds, 0.987 / 1.000 of the optimum at 25 / 100 evaluations over
#: the four shipped landscapes against the default's 0.893 / 0.993, 1.000 / 1.000 on two
#: shapes recorded anew against 0.905 / 1.000, and within 2% of an exhaustive sweep's best in
#: 14-15 s on the H200 against 23-37 s (BENCHMARKS.md). `model` on attention (session 19,
#: with the decode geometry's programs and key blocks a program walks): 0.958 / 0.983 / 0.991
#: / 0.998 at 10 / 25 / 50 / 100 over the six shipped landscapes against the default's 0.815 /
#: 0.958 / 0.991 / 0.999. Not on fused MoE (0.977 against 0.988): there the default stays.
FAMILY_DEFAULTS = {"matmul": "model", "attention": "model"}


def default_for(space: SearchSpace | None) -> str:
    """The strategy for `space` when none is asked for: its family's (`FAMILY_DEFAULTS`),
    else "default".

    >>> from evokernel.search_spaces import decode_space, matmul_space, moe_space
    >>> default_for(matmul_space()), default_for(decode_space()), default_for(moe_space()), default_for(None)
    ('model', 'model', 'default', 'default')
    """
    geometry = getattr(space, "geometry", None)
    return FAMILY_DEFAULTS.get(getattr(geometry, "kind", ""), "default")


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
