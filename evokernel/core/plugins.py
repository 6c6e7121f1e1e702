"""Plugins: mutators, evaluators, search spaces and strategies registered through entry points.

A third-party package registers its own in its pyproject.toml:

    [project.entry-points."evokernel.mutators"]
    my_mutator = "my_package.mutators:MyMutator"

Every registered component is checked by the contract suites (tests/contracts): the suite
builds it by calling what the entry point names with no arguments, or, when that needs
arguments, through its `example()` (see `HasExample`).

>>> sorted(registered("evokernel.mutators"))[:2]
['cost-model', 'crossover']
"""

from __future__ import annotations

from importlib import metadata
from typing import Any, Protocol, runtime_checkable

from evokernel.core.errors import PluginError

__all__ = ["DISTRIBUTION", "GROUPS", "HasExample", "registered", "load"]

#: The distribution's name (pyproject's `[project] name`; `pip install evokernel-search`), which
#: `importlib.metadata` looks up: "evokernel" on PyPI is another project. The import name is `evokernel`.
DISTRIBUTION = "evokernel-search"

#: Entry-point groups. A template (`evokernel.templates`) renders a point of a space as a
#: candidate module's source: the `render` a KernelEvaluator takes.
GROUPS = (
    "evokernel.mutators",
    "evokernel.evaluators",
    "evokernel.search_spaces",
    "evokernel.strategies",
    "evokernel.templates",
)


@runtime_checkable
class HasExample(Protocol):
    """A registered class (or factory) that needs arguments offers a small working instance.

    Called by the contract suites (tests/contracts) to build a component they check:
    `example()` returns one that works on the CPU without a network (an evaluator with a
    `space` attribute also gets its behaviour checked on genomes drawn from it)."""

    def example(self) -> Any: ...


def registered(group: str) -> dict[str, metadata.EntryPoint]:
    """Entry points of a group by name (the first registration of a name wins)."""
    out: dict[str, metadata.EntryPoint] = {}
    for ep in metadata.entry_points(group=group):
        out.setdefault(ep.name, ep)
    return out


def load(group: str, name: str) -> Any:
    """The object a plugin registers, or PluginError naming what is available."""
    eps = registered(group)
    if name not in eps:
        known = ", ".join(sorted(eps)) or "none"
        raise PluginError(f"no {group.split('.')[-1][:-1].replace('_', ' ')} named {name!r} (registered: {known})")
    try:
        return eps[name].load()
    except Exception as exc:
        raise PluginError(f"plugin {name!r} ({eps[name].value}) failed to load: {type(exc).__name__}: {exc}") from None
