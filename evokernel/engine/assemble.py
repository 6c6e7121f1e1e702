"""One place that builds a search: the `evokernel search` command and the Python API both call it.

A `SearchSpec` says what to search (space, evaluator, and optionally descriptor, mutators or
a strategy, options, population and patience, name, seeds, an LLM model); `assemble` turns it
into a `Search` wired the way the command line wires it: a knowledge recorder (lessons and
accepted kernels, in the store) when the evaluator judges a problem, the LLM rewrite operator
with the store's lessons for the problem when `llm` names a model, and the strategy's options
with the population and patience asked for. `SearchSpec.from_file` reads a search file, so
`assemble(SearchSpec.from_file("examples/matmul_kernel.py"), store=open_store("evokernel.db"))`
is the search that `evokernel search examples/matmul_kernel.py` runs. With `ray` set (a Ray
cluster's address, or "local"), the evaluator is built on every GPU of that cluster by a
`evokernel.runtime.RayEvaluator` (`gpus`: how many; default all), as `--ray` does.

>>> from evokernel import Budget, SearchSpec, assemble
>>> from evokernel.evaluators import ReplayEvaluator
>>> from evokernel.engine.landscape import builtin
>>> evaluator = ReplayEvaluator(builtin("matmul_bf16_h200_M16_N4096_K4096"))
>>> search = assemble(SearchSpec(evaluator.space, evaluator, population=4, patience=10))
>>> search.strategy, search.options.population, search.options.patience
('model', 4, 10)
>>> search.run(Budget(evaluations=40), seed=0).evaluations
40
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from functools import partial
from pathlib import Path
from typing import Any

from evokernel.core.archive import Descriptor
from evokernel.core.errors import ConfigError, EvokernelError
from evokernel.core.evaluator import Evaluator
from evokernel.core.genome import Genome
from evokernel.core.mutator import Mutator
from evokernel.core.space import SearchSpace
from evokernel.engine.options import Promotion, SearchOptions
from evokernel.engine.report import Observer
from evokernel.engine.search import Search
from evokernel.engine.strategies import default_for, get_strategy
from evokernel.store import Store

__all__ = ["SearchSpec", "assemble", "evaluator_of_file", "registered_mutators"]

log = logging.getLogger("evokernel.assemble")


@dataclass(frozen=True)
class SearchSpec:
    """What to search, as a search file (`evokernel search FILE.py`) says it.

    mutators or strategy (not both; default: the "default" strategy); options: the loop's
    knobs (default: the strategy's); population, patience and promotion override them
    (population sets the elites carried over too; promotion judges through the evaluator's
    cheaper fidelity levels first, `evokernel.evaluators.Cascade`); train_on_replayed: let the
    cost model learn from the very landscape a replay replays (`SearchOptions.train_on_replayed`:
    it has then seen the answer; off, a replay's own landscape is held out); fallback: when no
    mutator proposes a new genome in `SearchOptions.retries` tries, take a random unseen point
    (counted in the report's `fallbacks`; `SearchOptions.fallback`, off with --no-fallback); seeds: known-good points of the first generation; llm: a
    model name (Anthropic) or a provider object for the LLM rewrite operator, added to the
    mutators when the evaluator judges a problem; knowledge: record lessons and accepted
    kernels in the store when the evaluator judges a problem. ray: evaluate on the GPUs of a
    Ray cluster, one actor per GPU: its address ("auto": the cluster this machine belongs to),
    or "local" (a local cluster, started unless one runs); gpus: how many (default: all);
    ray_timeout_s: how long joining the cluster at an address may take (then a ConfigError);
    evaluator_factory: what each actor calls to build its evaluator (a picklable zero-argument
    callable; default: the spec's evaluator, sent as it is; `from_file` sets it to load the
    search file again in the actor)."""

    space: SearchSpace
    evaluator: Evaluator
    descriptor: Descriptor | None = None
    mutators: Sequence[Mutator] | None = None
    strategy: str | None = None
    options: SearchOptions | None = None
    population: int | None = None
    patience: int | None = None
    promotion: Promotion | None = None
    train_on_replayed: bool = False
    fallback: bool = True
    name: str | None = None
    seeds: Iterable[Genome | Mapping[str, Any]] = ()
    llm: Any = None
    knowledge: bool = True
    ray: str | None = None
    gpus: int | None = None
    ray_timeout_s: float = 20.0  # how long joining the Ray cluster at `ray` (an address) may take
    evaluator_factory: Callable[[], Evaluator] | None = None

    @classmethod
    def from_file(cls, path: str | os.PathLike[str]) -> SearchSpec:
        """The spec a search file declares (what `evokernel search FILE.py` reads): `space` and
        `evaluator`, and optionally `descriptor`, `mutators`, `options`, `name`, `seeds`."""
        from evokernel.judge.problem import load_module

        target = str(path)
        if not Path(path).is_file():
            raise ConfigError(f"no such search file: {target}")
        try:
            mod = load_module(Path(path), prefix="_evokernel_target")
        except EvokernelError as exc:
            raise ConfigError(f"{Path(path)}: {exc}") from None
        except Exception as exc:
            raise ConfigError(f"{Path(path)}: {type(exc).__name__}: {exc}") from None
        except SystemExit as exc:  # sys.exit() in the file: said, not the command's own exit
            raise ConfigError(f"{Path(path)}: the search file called sys.exit({exc.code!r}) while loading") from None
        space, evaluator = getattr(mod, "space", None), getattr(mod, "evaluator", None)
        if not isinstance(space, SearchSpace):
            raise ConfigError(f"{target}: defines no `space` (an evokernel SearchSpace)")
        if not isinstance(evaluator, Evaluator):
            raise ConfigError(f"{target}: defines no `evaluator` (with name, fingerprint() and evaluate())")
        descriptor, mutators, options, name, seeds = _checked_extras(mod, target)
        return cls(
            space,
            evaluator,
            descriptor=descriptor,
            mutators=mutators,
            options=options,
            name=name,
            seeds=seeds,
            evaluator_factory=partial(evaluator_of_file, str(Path(path).resolve())),
        )


def _checked_extras(mod: Any, target: str) -> tuple[Any, Any, Any, Any, Any]:
    """The optional variables of a search file, each checked for its type: a mistyped one is
    a one-line error naming the file and the variable, not a traceback in the middle of a run."""

    def bad(var: str, want: str, value: Any) -> ConfigError:
        return ConfigError(f"{target}: `{var}` must be {want}, not {type(value).__name__} {value!r:.60}")

    descriptor = getattr(mod, "descriptor", None)
    if descriptor is not None and not callable(descriptor):
        raise bad("descriptor", "a function of a genome (returning its niche, a string)", descriptor)
    mutators = getattr(mod, "mutators", None)
    if mutators is not None:
        if isinstance(mutators, (str, bytes, Mapping)) or not isinstance(mutators, Iterable):
            raise bad("mutators", "a list of mutator objects", mutators)
        mutators = list(mutators)
        for m in mutators:
            if not isinstance(m, Mutator):
                raise bad("mutators", "a list of mutator objects (with name, arity and propose()), each", m)
    options = getattr(mod, "options", None)
    if options is not None and not isinstance(options, SearchOptions):
        raise bad("options", "an evokernel SearchOptions", options)
    name = getattr(mod, "name", None)
    if name is not None and not isinstance(name, str):
        raise bad("name", "a string", name)
    seeds = getattr(mod, "seeds", None) or ()
    if isinstance(seeds, (str, bytes, Mapping)) or not isinstance(seeds, Iterable):
        raise bad("seeds", "a list of genomes or of dicts of parameters", seeds)
    seeds = list(seeds)
    for g in seeds:
        if not isinstance(g, (Genome, Mapping)):
            raise bad("seeds", "a list of genomes or of dicts of parameters, each", g)
    return descriptor, mutators, options, name, seeds


def evaluator_of_file(path: str) -> Evaluator:
    """The evaluator a search file defines, built afresh (in a Ray actor, on its own GPU)."""
    return SearchSpec.from_file(path).evaluator


def registered_mutators(names: Sequence[str]) -> list[Mutator]:
    """The mutators registered (entry-point group `evokernel.mutators`) under `names`, each built
    with no arguments: what `evokernel search --mutator NAME` searches with. An unknown name is a
    PluginError in one line naming the registered ones; a mutator that cannot be built without
    arguments (the LLM operator, which `--llm` adds) a ConfigError saying so.

    >>> [m.name for m in registered_mutators(["point", "local"])]
    ['point', 'local']
    """
    from evokernel.core.plugins import load, registered

    out: list[Mutator] = []
    known = ", ".join(sorted(registered("evokernel.mutators"))) or "none"
    for i, name in enumerate(names):
        if name in names[:i]:
            raise ConfigError(f"mutator {name!r} is named twice")
        factory = load("evokernel.mutators", name)
        try:
            mutator = factory() if callable(factory) and not isinstance(factory, Mutator) else factory
        except TypeError as exc:
            hint = "; add it with --llm" if name == "llm" else "; build it in a search file's `mutators` instead"
            raise ConfigError(f"mutator {name!r} cannot be built without arguments ({exc}){hint}") from None
        except Exception as exc:
            raise ConfigError(f"mutator {name!r} failed to build: {type(exc).__name__}: {exc}") from exc
        if not isinstance(mutator, Mutator):
            raise ConfigError(f"{name!r} is registered as a mutator but is not one (registered: {known})")
        out.append(mutator)
    return out


def assemble(
    spec: SearchSpec,
    *,
    store: Store | None = None,
    observers: Iterable[Observer] = (),
    say: Callable[[str], None] | None = None,
) -> Search:
    """The search `spec` describes, stored in `store` (default: in memory), followed by
    `observers`. `say` gets the one line on why the LLM operator is off when it cannot run
    (default: a logged warning); the search goes on without it."""
    say = say or log.warning
    options = spec.options
    if spec.population is not None or spec.patience is not None or spec.promotion is not None:
        base = options or get_strategy(spec.strategy or default_for(spec.space)).options
        options = replace(
            base,
            population=spec.population or base.population,
            elitism=spec.population or base.elitism,
            patience=spec.patience if spec.patience is not None else base.patience,
            promotion=spec.promotion if spec.promotion is not None else base.promotion,
        )
    if spec.train_on_replayed:
        options = replace(
            options or get_strategy(spec.strategy or default_for(spec.space)).options, train_on_replayed=True
        )
    if not spec.fallback:
        options = replace(options or get_strategy(spec.strategy or default_for(spec.space)).options, fallback=False)
    mutators = spec.mutators
    strategy = spec.strategy
    if mutators is not None and strategy is not None:
        raise ConfigError("give either mutators or a strategy, not both")
    observers = list[Any](observers)  # (duck-typed: a KnowledgeRecorder has an Observer's methods)
    if store is None:
        from evokernel.store import SQLiteStore

        store = SQLiteStore(":memory:")
    knowledge = None
    if spec.knowledge and getattr(spec.evaluator, "problem", None) is not None:
        from evokernel.store.knowledge import KnowledgeRecorder

        knowledge = KnowledgeRecorder.from_evaluator(store, spec.evaluator)  # lessons and kernels, in the store
        observers.append(knowledge)
    llm = _llm_operator(spec, store, knowledge, say)
    if llm is not None:
        base_mutators = (
            list(mutators)
            if mutators is not None
            else get_strategy(strategy or default_for(spec.space)).mutators(spec.space)
        )
        mutators = base_mutators + [llm]
        strategy = None
    return Search(
        spec.space,
        _evaluator(spec),
        mutators,
        strategy=None if mutators is not None else (strategy or default_for(spec.space)),
        options=options,
        store=store,
        descriptor=spec.descriptor,
        name=spec.name,
        observers=observers,
        seeds=spec.seeds or (),
    )


def _evaluator(spec: SearchSpec) -> Evaluator:
    """The spec's evaluator, or with `ray` set, a RayEvaluator building it on every GPU asked for."""
    if spec.ray is None:
        return spec.evaluator
    if spec.gpus is not None and spec.gpus < 1:
        raise ConfigError(f"gpus must be at least 1, got {spec.gpus}")
    from evokernel.runtime.ray import RayEvaluator

    factory = spec.evaluator_factory or partial(_given, spec.evaluator)
    address = None if spec.ray in ("", "local") else spec.ray
    return RayEvaluator(factory, gpus=spec.gpus, address=address, connect_timeout_s=spec.ray_timeout_s)


def _given(evaluator: Evaluator) -> Evaluator:
    """The evaluator itself (a factory for an evaluator sent to each actor as it is)."""
    return evaluator


def _llm_operator(spec: SearchSpec, store: Store, knowledge: Any, say: Callable[[str], None]) -> Any:
    """The LLM rewrite operator `spec.llm` asks for, or None (with one line to `say` if it is off)."""
    if not spec.llm:
        return None
    evaluator = spec.evaluator
    problem, render = getattr(evaluator, "problem", None), getattr(evaluator, "render", None)
    if problem is None or render is None:
        raise ConfigError(
            "the LLM operator rewrites kernel sources: it needs an evaluator that judges a problem "
            "(a KernelEvaluator), not a landscape replay"
        )
    try:
        from evokernel.mutators.llm import AnthropicProvider, LLMRewrite
    except ImportError as exc:  # pragma: no cover - the module itself has no hard dependency
        say(f"LLM operator off: {exc}")
        return None
    lessons = None
    if knowledge is not None:
        from evokernel.store.knowledge import lessons_for

        where = knowledge.where

        def lessons(p: Any, g: Any) -> Any:
            return lessons_for(store, op=where["op"], gpu=where["gpu"], toolchain=where["toolchain"])

    provider = AnthropicProvider(spec.llm) if isinstance(spec.llm, str) else spec.llm
    op = LLMRewrite(problem, provider=provider, render=render, lessons=lessons)
    off = op.available()
    if off is not None:
        say(f"LLM operator off: {off}; searching without it")
        return None
    if knowledge is not None:  # the run ends with a prose summary of its op's lessons
        knowledge.summarizer = op.provider
    return op
