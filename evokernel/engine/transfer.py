"""Transfer across shapes: a search on a new shape of a kernel starts from what searches on
the nearest shapes already in the store found (same kernel family, same GPU, same space).

An evaluator that can say which kernel family and which shape it measures implements
`transfer_key()`, returning `{"family": str, "shape": {name: number}}`. Runs record it in
their configuration; a new run ranks the stored runs of its family by distance in log-shape
space and seeds its first generation with their best genomes, nearest run first.

>>> shape_distance({"M": 2048, "N": 4096}, {"M": 1024, "N": 4096})
1.0
>>> family_of_name("matmul_bf16_h200_M2048_N6144_K4096")
('matmul_bf16_h200', {'M': 2048.0, 'N': 6144.0, 'K': 4096.0})
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from typing import Any

from evokernel.core.evaluator import HasTransferKey
from evokernel.core.genome import Genome
from evokernel.core.space import SearchSpace
from evokernel.store import Store

__all__ = ["transfer_key", "shape_distance", "family_of_name", "transfer_seeds", "TransferOperator"]

_TOKEN = re.compile(r"_([A-Z][A-Za-z]*)(\d+(?:\.\d+)?)$")


def family_of_name(name: str) -> tuple[str, dict[str, float]]:
    """Split a name such as `matmul_bf16_h200_M2048_N6144_K4096` into its family and the
    shape its trailing `_<Capitalised name><number>` tokens give."""
    shape: dict[str, float] = {}
    rest = name
    while (m := _TOKEN.search(rest)) is not None:
        shape[m.group(1)] = float(m.group(2))
        rest = rest[: m.start()]
    return rest, dict(reversed(list(shape.items())))


def transfer_key(evaluator: Any) -> dict[str, Any] | None:
    if not isinstance(evaluator, HasTransferKey):
        return None
    try:
        key = evaluator.transfer_key()
    except Exception:
        return None
    if not isinstance(key, dict) or not isinstance(key.get("family"), str) or not isinstance(key.get("shape"), dict):
        return None
    return {"family": key["family"], "shape": {str(k): float(v) for k, v in key["shape"].items()}}


def shape_distance(a: Mapping[str, float], b: Mapping[str, float]) -> float:
    """Sum over shared dimensions of |log2(a) - log2(b)|; dimensions in one shape only count 1."""
    keys = set(a) | set(b)
    d = 0.0
    for k in keys:
        if k in a and k in b and a[k] > 0 and b[k] > 0:
            d += abs(math.log2(a[k]) - math.log2(b[k]))
        elif k in a and k in b:
            d += 0.0 if a[k] == b[k] else 1.0
        else:
            d += 1.0
    return d


def transfer_seeds(
    store: Store,
    key: dict[str, Any],
    space: SearchSpace,
    *,
    fingerprint: str,
    limit: int,
    runs: int = 3,
    before_seq: int | None = None,
    created_before: float | None = None,
) -> list[tuple[Genome, str, float]]:
    """Up to `limit` genomes from the `runs` nearest stored runs of the same family and space
    on other shapes, best first within each run, taken in turn from the nearest run first.
    Returns (genome, run id, distance).

    before_seq and created_before: only runs begun before the run being seeded, and only
    what they had measured when it began; a resumed run is then seeded as it was at its
    start, whatever ran since (searches fanned out at once, over shapes of one family)."""
    if limit <= 0:
        return []
    params = space.describe()["params"]  # the same parameters and domains (names of spaces may differ)
    found = []
    for info in store.runs():
        other = info.config.get("transfer") if isinstance(info.config, dict) else None
        if not other or other.get("family") != key["family"] or info.fingerprint == fingerprint:
            continue
        if (info.config.get("space") or {}).get("params") != params:
            continue
        if before_seq is not None and info.seq >= before_seq:
            continue
        found.append((shape_distance(key["shape"], other.get("shape", {})), info.seq, info))
    found.sort(key=lambda x: (x[0], -x[1]))
    ranked: list[tuple[float, list[Genome], str]] = []
    seen_shapes: set[str] = set()
    for dist, _, info in found:
        shape_id = repr(sorted(info.config["transfer"].get("shape", {}).items()))
        if shape_id in seen_shapes:  # the latest run of each shape stands for it
            continue
        seen_shapes.add(shape_id)
        history = [
            e
            for e in store.history(info.id)
            if e.kind == "eval" and e.result.is_ok and (created_before is None or e.created < created_before)
        ]
        history.sort(key=lambda e: (e.result.fitness, e.seq))
        genomes, ids = [], set()
        for e in history:
            if e.genome.id not in ids and space.is_valid(e.genome.params):
                ids.add(e.genome.id)
                genomes.append(e.genome)
        if genomes:
            ranked.append((dist, genomes, info.id))
        if len(ranked) >= runs:
            break
    out: list[tuple[Genome, str, float]] = []
    taken: set[str] = set()
    depth = 0
    while len(out) < limit and any(depth < len(g) for _, g, _ in ranked):
        for dist, genomes, run_id in ranked:
            # the nearest run gives two genomes a round, the others one
            for g in genomes[depth * 2 : depth * 2 + 2] if run_id == ranked[0][2] else genomes[depth : depth + 1]:
                clean = Genome.of(space.canonical(g.params), g.source)
                if clean.id not in taken and len(out) < limit:
                    taken.add(clean.id)
                    out.append((clean, run_id, dist))
        depth += 1
    return out


class TransferOperator:
    """A mutator over a fixed list: the nearest shapes' genomes, in `transfer_seeds` order,
    each offered once (the search skips those already seen). The search adds it to a run
    that found more transferable genomes than its first generation takes; the bandit then
    calls it as long as its genomes beat the population, like any other operator."""

    name = "transfer"
    arity = 0

    def __init__(self, genomes: list[Genome]) -> None:
        self.genomes = list(genomes)
        self.next = 0

    @property
    def exhausted(self) -> bool:
        return self.next >= len(self.genomes)

    def propose(self, parents: Any, ctx: Any) -> Genome | None:
        if self.exhausted:
            return None
        self.next += 1
        return self.genomes[self.next - 1]
