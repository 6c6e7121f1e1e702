"""What a run may learn from before it measures anything: every earlier measurement of its
kernel family on its GPU, in the store (all shapes, all runs, failures included) and in the
recorded landscapes that ship with evokernel.

A mutator that learns from them (the cost model) has `prime(source)` (the `Primed`
capability); the search calls it when a run starts, before its first generation.

Which data count as the same family: a stored run whose transfer key names the same family
and whose space has the same parameter names; a shipped landscape whose parameters are the
space's and whose name's family tokens (`matmul_bf16_h200` -> matmul, bf16, h200) all appear
in the run's family (`replay:matmul_bf16_h200`, or a kernel evaluator's
`matmul_bf16@NVIDIA H200`). With `holdout`, a shipped landscape of the run's own shape is
left out (leave-one-shape-out benchmarks: the landscape under test never trains the model).

A replay (the family `replay:...` of `ReplayEvaluator`) always leaves out the shipped
landscape of its own shape: that landscape is the answer the search is looking for, and a
model trained on it finds the optimum in its first generation without having searched.
`train_on_replayed=True` keeps it in (not a fair figure of what the search would do on a
kernel it has not seen). `held_out()` and `own_shape()` name what was left out and what of
the run's own shape was kept; `describe` records both with the run.

>>> family_tokens("matmul_bf16@NVIDIA H200") >= family_tokens("replay:matmul_bf16_h200")
True
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass, field
from typing import Any

from evokernel.core.result import Status
from evokernel.core.space import SearchSpace
from evokernel.engine.transfer import family_of_name
from evokernel.store import Store

__all__ = ["PriorRow", "PriorSource", "family_tokens", "shipped_landscapes", "shipped_rows", "trained_on"]

_NOT_FAMILY = {"replay", "nvidia"}


@dataclass(frozen=True)
class PriorRow:
    """One earlier measurement: the point, the shape it ran on, its latency (None: it failed
    to build, check or run), and where it came from (a run id or a landscape's name)."""

    params: dict[str, Any]
    shape: dict[str, float]
    latency_ms: float | None
    group: str


def family_tokens(family: str) -> set[str]:
    """The lower-case words of a family name, without the evaluator's prefix words."""
    return {t for t in re.split(r"[^a-z0-9]+", family.lower()) if t and t not in _NOT_FAMILY}


@functools.lru_cache(maxsize=None)
def _shipped() -> tuple[tuple[str, str, tuple[str, ...], tuple[tuple[str, float], ...]], ...]:
    from evokernel.engine.landscape import builtin_names

    out = []
    for name in builtin_names():
        family, shape = family_of_name(name)
        out.append((name, family, _columns(name), tuple(shape.items())))
    return tuple(out)


@functools.lru_cache(maxsize=None)
def _columns(name: str) -> tuple[str, ...]:
    from evokernel.engine.landscape import builtin

    with open(builtin(name), encoding="utf-8-sig") as f:
        header = f.readline().strip().split(",")
    return tuple(c for c in header if c not in ("latency_ms", "error"))


@functools.lru_cache(maxsize=None)
def _landscape_rows(name: str) -> tuple[PriorRow, ...]:
    from evokernel.engine.landscape import Landscape, builtin

    L = Landscape.load(builtin(name))
    _, shape = family_of_name(name)
    names = [p.name for p in L.space.params]
    return tuple(
        PriorRow(dict(zip(names, point)), shape, None if row.latency_ms is None else float(row.latency_ms), name)
        for point, row in L.rows.items()
    )


def shipped_landscapes(family: str, space: SearchSpace) -> list[tuple[str, dict[str, float]]]:
    """The name and shape of every shipped landscape of `family` with `space`'s parameters
    (see the module's docstring).

    >>> from evokernel.search_spaces import matmul_space
    >>> [n for n, _ in shipped_landscapes("replay:matmul_bf16_h200", matmul_space())][:2]
    ['matmul_bf16_h200_M16_N4096_K4096', 'matmul_bf16_h200_M2048_N6144_K4096']
    """
    want = family_tokens(family)
    names = set(space.names)
    return [
        (name, dict(shape))
        for name, fam, columns, shape in _shipped()
        if set(columns) == names and family_tokens(fam) <= want
    ]


def shipped_rows(family: str, space: SearchSpace, *, exclude_shape: dict[str, float] | None = None) -> list[PriorRow]:
    """The rows of every shipped landscape of `family` with `space`'s parameters (see the
    module's docstring), but those of `exclude_shape`."""
    rows: list[PriorRow] = []
    for name, shape in shipped_landscapes(family, space):
        if exclude_shape is not None and _same_shape(shape, exclude_shape):
            continue
        rows.extend(_landscape_rows(name))
    return rows


def _same_shape(a: dict[str, float], b: dict[str, float]) -> bool:
    return {k: float(v) for k, v in a.items()} == {k: float(v) for k, v in b.items()}


@dataclass
class PriorSource:
    """What the search hands a `Primed` mutator: the run's family and shape, its space, and
    the data of earlier runs and shipped landscapes (`rows`)."""

    family: str
    shape: dict[str, float]
    space: SearchSpace
    store: Store | None = None
    run_id: str | None = None
    before_seq: int | None = None
    shipped: bool = True
    holdout: bool = False
    train_on_replayed: bool = False
    _cache: list[PriorRow] | None = field(default=None, repr=False)

    @property
    def replay(self) -> bool:
        """Whether the run replays a recorded landscape (`ReplayEvaluator`'s family)."""
        return self.family.startswith("replay:")

    def _leaves_out_own_shape(self) -> bool:
        return self.holdout or (self.replay and not self.train_on_replayed)

    def rows(self) -> list[PriorRow]:
        """Every earlier measurement of the family (store first, then shipped landscapes)."""
        if self._cache is None:
            rows = self._stored()
            if self.shipped:
                exclude = self.shape if self._leaves_out_own_shape() else None
                rows += shipped_rows(self.family, self.space, exclude_shape=exclude)
            self._cache = rows
        return self._cache

    def _own_shape_landscapes(self) -> list[str]:
        if not self.shipped:
            return []
        return [n for n, shape in shipped_landscapes(self.family, self.space) if _same_shape(shape, self.shape)]

    def held_out(self) -> list[str]:
        """The shipped landscapes of the run's own shape left out of `rows()` (a replay's own
        landscape, unless `train_on_replayed`; every one under `holdout`)."""
        return self._own_shape_landscapes() if self._leaves_out_own_shape() else []

    def own_shape(self) -> list[str]:
        """The shipped landscapes of the run's own shape that `rows()` keeps (a replay: the
        landscape being replayed, only with `train_on_replayed`)."""
        return [] if self._leaves_out_own_shape() else self._own_shape_landscapes()

    def _stored(self) -> list[PriorRow]:
        if self.store is None:
            return []
        names = set(self.space.names)
        rows: list[PriorRow] = []
        for info in self.store.runs():
            cfg = info.config if isinstance(info.config, dict) else {}
            key = cfg.get("transfer")
            if not key or key.get("family") != self.family or info.id == self.run_id:
                continue
            if self.before_seq is not None and info.seq >= self.before_seq:
                continue
            params = (cfg.get("space") or {}).get("params") or []
            if {p.get("name") for p in params if isinstance(p, dict)} != names:
                continue
            shape = {str(k): float(v) for k, v in (key.get("shape") or {}).items()}
            if self.holdout and shape == self.shape:
                continue
            for e in self.store.history(info.id):
                if e.kind != "eval" or e.result.status is Status.INVALID:
                    continue
                lat = e.result.latency_ms if e.result.is_ok else None
                rows.append(PriorRow(dict(e.genome.params), shape, lat, info.id))
        return rows


def describe(rows: list[PriorRow], source: PriorSource | None = None) -> dict[str, Any]:
    """A short account of the rows for the run's events: how many, from where; with the
    source, which shipped landscapes of the run's own shape were left out (`held_out`) and
    which were kept (`own_shape`: for a replay, the answer itself was in the training data)."""
    groups: dict[str, int] = {}
    for r in rows:
        groups[r.group] = groups.get(r.group, 0) + 1
    out: dict[str, Any] = {"rows": len(rows), "failed": sum(r.latency_ms is None for r in rows), "groups": groups}
    if source is not None:
        out["held_out"] = source.held_out()
        out["own_shape"] = source.own_shape()
        out["replay"] = source.replay
    return out


def trained_on(priors: dict[str, Any] | None) -> str:
    """One line saying what a run's cost model learned from (`describe`'s account), for the
    command's output.

    >>> trained_on({"rows": 1680, "groups": {"a": 840, "b": 840}, "held_out": ["c"], "own_shape": [], "replay": True})
    'model trained on 1680 earlier measurements (2 sources: a, b); held out: c (the landscape replayed)'
    """
    if priors is None:
        return "model trained on nothing earlier (no primed mutator)"
    groups = priors.get("groups") or {}
    line = f"model trained on {priors.get('rows', 0)} earlier measurements"
    if groups:
        line += f" ({len(groups)} source{'' if len(groups) == 1 else 's'}: {', '.join(sorted(groups))})"
    replay = priors.get("replay", False)
    if priors.get("held_out"):
        line += f"; held out: {', '.join(priors['held_out'])}" + (" (the landscape replayed)" if replay else "")
    if priors.get("own_shape"):
        what = "the landscape replayed" if replay else "the run's own shape"
        line += f"; INCLUDES {', '.join(priors['own_shape'])} ({what}: the model has seen the answer)"
    return line
