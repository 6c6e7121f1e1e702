"""Many independent searches at once: one Ray task per search, one GPU each, one shared store.

Tuning a model is many searches that share nothing but a store: every batch size of a MoE
layer, every projection of a model. `fan_out(specs, store_url, budget)` runs each
`SearchSpec` (or a picklable zero-argument callable returning one, built where the search
runs) as a Ray task with one GPU; each task opens the store itself
(`evokernel.store.open_store(store_url)`: an SQLite file on one host, or a database server
every node reaches), runs its search and returns a compact `SearchSummary`. A search that
fails, or whose task dies, is a summary with status "failed" and the reason: the others go
on. Re-running the same fan-out resumes each search from the store.

    from evokernel import Budget
    from evokernel.runtime import fan_out

    for s in fan_out([spec_m64, spec_m1024], "evokernel.db", Budget(evaluations=500)):
        print(s.name, s.status, s.best_ms)
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import msgspec

from evokernel.engine.assemble import SearchSpec
from evokernel.engine.options import Budget
from evokernel.runtime.ray import _cause, import_ray

__all__ = ["SearchSummary", "fan_out", "run_one"]

SpecLike = SearchSpec | Callable[[], SearchSpec]


class SearchSummary(msgspec.Struct, frozen=True, kw_only=True):
    """What one search of a fan-out found: its run (in the shared store), its best latency and
    parameters, and whether it finished ("finished") or not ("failed", with `error`)."""

    name: str
    status: str
    run_id: str | None = None
    best_ms: float | None = None
    best_params: dict[str, Any] | None = None
    evaluations: int = 0
    stop_reason: str = ""
    error: str = ""


def run_one(spec: SpecLike, store_url: str, budget: Budget, seed: int, label: str) -> SearchSummary:
    """One search of a fan-out, where it runs: build the spec, open the store, search, summarise.
    A failure is a failed summary, never an exception."""
    from evokernel.engine.assemble import assemble
    from evokernel.store import open_store

    name = label
    store = None
    try:
        spec = spec() if callable(spec) and not isinstance(spec, SearchSpec) else spec
        name = spec.name or spec.space.name
        store = open_store(store_url)
        report = assemble(spec, store=store).run(budget, seed=seed)
        best = report.best
        return SearchSummary(
            name=name,
            status="finished",
            run_id=report.run_id,
            best_ms=best.latency_ms if best is not None and math.isfinite(best.latency_ms) else None,
            best_params=dict(best.genome.params) if best is not None else None,
            evaluations=report.evaluations,
            stop_reason=report.stop_reason,
        )
    except BaseException as exc:  # the search's failure is this summary's, not the fan-out's
        if isinstance(exc, KeyboardInterrupt):
            raise
        return SearchSummary(name=name, status="failed", error=f"{type(exc).__name__}: {exc}")
    finally:
        if store is not None:
            store.close()


def fan_out(
    specs: Sequence[SpecLike],
    store_url: str,
    budget: Budget | int,
    *,
    seed: int = 0,
    address: str | None = None,
    gpus_per_search: float = 1,
    init: dict[str, Any] | None = None,
) -> list[SearchSummary]:
    """Run every spec as a Ray task on `gpus_per_search` GPUs, all stored in `store_url`; their
    summaries, in the order of `specs`. address: the Ray cluster (default: a local one, started
    here unless one runs already, and shut down at the end); init: more `ray.init` arguments."""
    ray = import_ray()
    if isinstance(budget, int):
        budget = Budget(evaluations=budget)
    started = False
    if not ray.is_initialized():
        ray.init(address=address, **{"include_dashboard": False, **(init or {})})
        started = True
    try:
        task = ray.remote(num_gpus=gpus_per_search, max_retries=0)(run_one)
        labels = [_label(spec, i) for i, spec in enumerate(specs)]
        refs = [task.remote(spec, str(store_url), budget, seed, label) for spec, label in zip(specs, labels)]
        out = []
        for ref, label in zip(refs, labels):
            try:
                out.append(ray.get(ref))
            except ray.exceptions.RayError as exc:  # the task's process died: a failed search, not ours
                out.append(SearchSummary(name=label, status="failed", error=f"its Ray task died: {_cause(exc)}"))
        return out
    finally:
        if started:
            ray.shutdown()


def _label(spec: SpecLike, i: int) -> str:
    """A name for the search before it is built (a failed build is named by it)."""
    if isinstance(spec, SearchSpec):
        return spec.name or spec.space.name
    return str(getattr(spec, "name", None) or f"search {i}")
