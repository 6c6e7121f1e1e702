"""Ablation of a winning model-level genome: what each change is worth, alone and in the set.

`ablate(evaluator, winner)` measures, in one call and interleaved (the evaluator's
`measure`), the unchanged model, the winner, each change **alone** (the model as written
plus that site's choice, its kernel genes, and the sites it requires) and the winner
**without** it (that site back to the module as written, and with it every site whose
choice required it). A change pays alone when its speedup over the baseline exceeds the
noise (`min_gain`, at least twice the measurements' relative noise).

`record(store, report, ...)` writes what was learned: a change that does not pay on its
own is a dead end, a `caveat` lesson with its figures (`evokernel.store.knowledge.Lesson`, so
`evokernel lessons DB --op MODEL` lists it and the LLM operator reads it); the winning set
goes into the kernel database (`store.save_kernel`) with its genome as JSON, a unified diff
of it against the unchanged model's genome, the figures of the ablation and the shapes.

>>> from evokernel.core.space import Choice, SearchSpace
>>> space = SearchSpace([Choice("a", ["no", "yes"]), Choice("b", ["no", "yes"])])
>>> [line for line in genome_diff(space, {"a": "yes", "b": "no"}).splitlines() if line[:1] in "+-"][2:]
['- "a": "no",', '+ "a": "yes",']
"""

from __future__ import annotations

import difflib
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import msgspec

from evokernel.core.genome import Genome, Value
from evokernel.store.knowledge import Lesson, new_lesson
from evokernel.core.space import SearchSpace

__all__ = ["AblationRow", "AblationReport", "ablate", "record", "genome_diff", "alone", "without"]


def _site_genes(space: SearchSpace, site: str) -> list[str]:
    return [n for n in space.names if n.startswith(site + ".")]


def _requirements(space: SearchSpace, params: Mapping[str, Value], site: str) -> dict[str, Value]:
    """The (site, choice) pairs the winner's choice at `site` needs, found by asking the
    space: each other site set back to default, is the point still valid?"""
    base = space.default()
    point = {**base, site: params[site], **{g: params[g] for g in _site_genes(space, site)}}
    if space.why_invalid(point) is None:
        return {}
    others = [n for n in space.names if "." not in n and n != site and params[n] != base[n]]
    for other in others:  # one other change is enough, most of the time
        if space.why_invalid({**point, other: params[other]}) is None:
            return {other: params[other]}
    return {other: params[other] for other in others}


def alone(space: SearchSpace, params: Mapping[str, Value], site: str) -> dict[str, Value]:
    """The unchanged model plus one change (its kernel genes, and what it requires)."""
    point = {**space.default(), site: params[site], **{g: params[g] for g in _site_genes(space, site)}}
    for other, value in _requirements(space, params, site).items():
        point[other] = value
        point.update({g: params[g] for g in _site_genes(space, other)})
    return point


def without(space: SearchSpace, params: Mapping[str, Value], site: str) -> tuple[dict[str, Value], list[str]]:
    """The winner with one change undone, and every change that required it undone too."""
    base = space.default()
    point = dict(params)
    undone = [site]
    point[site] = base[site]
    point.update({g: base[g] for g in _site_genes(space, site)})
    while space.why_invalid(point) is not None:
        culprit = next(
            (
                n
                for n in space.names
                if "." not in n
                and point[n] != base[n]
                and space.why_invalid({**point, n: base[n], **{g: base[g] for g in _site_genes(space, n)}}) is None
            ),
            None,
        )
        if culprit is None:
            break
        point[culprit] = base[culprit]
        point.update({g: base[g] for g in _site_genes(space, culprit)})
        undone.append(culprit)
    return point, undone


class AblationRow(msgspec.Struct, frozen=True, kw_only=True):
    site: str
    choice: Value
    alone_ms: float | None  # the unchanged model plus this change
    alone_speedup: float | None  # baseline / alone
    without_ms: float | None  # the winner minus this change
    contribution: float | None  # without / winner: > 1 means the set is slower without it
    undone: list[str] = msgspec.field(default_factory=list)  # sites removed with it (they required it)
    pays_alone: bool = False
    error: str = ""


@dataclass
class AblationReport:
    model: str
    winner: dict[str, Value]
    baseline_ms: float
    winner_ms: float
    noise: float
    timing: str
    rows: list[AblationRow]
    failed: dict[str, str] = field(default_factory=dict)

    @property
    def speedup(self) -> float:
        return self.baseline_ms / self.winner_ms

    def dead_ends(self) -> list[AblationRow]:
        return [r for r in self.rows if not r.pays_alone]

    def to_dict(self) -> dict[str, Any]:
        return {
            "model": self.model,
            "winner": self.winner,
            "baseline_ms": self.baseline_ms,
            "winner_ms": self.winner_ms,
            "speedup": self.speedup,
            "noise": self.noise,
            "timing": self.timing,
            "rows": msgspec.to_builtins(self.rows),
            "failed": self.failed,
        }

    def markdown(self) -> str:
        lines = [
            f"Ablation of {self.model}: baseline {self.baseline_ms:.4g} ms, winner {self.winner_ms:.4g} ms "
            f"({self.speedup:.3f}x, {self.timing})",
            "",
            "| change | alone ms | alone speedup | winner without it ms | contribution | pays alone |",
            "|---|---|---|---|---|---|",
        ]
        fmt = lambda x, s: "-" if x is None else format(x, s)  # noqa: E731
        for r in self.rows:
            extra = f" (with {', '.join(r.undone[1:])})" if len(r.undone) > 1 else ""
            lines.append(
                f"| {r.site}={r.choice}{extra} | {fmt(r.alone_ms, '.4g')} | {fmt(r.alone_speedup, '.3f')} | "
                f"{fmt(r.without_ms, '.4g')} | {fmt(r.contribution, '.3f')} | "
                f"{'yes' if r.pays_alone else 'no'}{(' — ' + r.error) if r.error else ''} |"
            )
        return "\n".join(lines) + "\n"


def ablate(evaluator: Any, winner: Genome | Mapping[str, Value], *, min_gain: float = 0.01) -> AblationReport:
    """Every change of `winner` measured alone and left out, with the baseline and the
    winner, in one interleaved measurement (`evaluator.measure`)."""
    space: SearchSpace = evaluator.space
    params = {**space.default(), **dict(winner.params if isinstance(winner, Genome) else winner)}
    sites = [n for n in space.names if "." not in n and params[n] != space.default()[n]]
    variants: dict[str, dict[str, Value]] = {"winner": params}
    undone: dict[str, list[str]] = {}
    for s in sites:
        variants[f"alone:{s}"] = alone(space, params, s)
        variants[f"without:{s}"], undone[s] = without(space, params, s)
    times, failed = evaluator.measure(variants)
    base = times["baseline"]
    win = times.get("winner")
    if win is None:
        raise ValueError(f"the winner could not be built: {failed.get('winner', '?')}")
    noise = max([base.noise, win.noise] + [t.noise for t in times.values()])
    threshold = max(min_gain, 2 * noise)
    rows = []
    for s in sites:
        a, w = times.get(f"alone:{s}"), times.get(f"without:{s}")
        sp = base.median_ms / a.median_ms if a else None
        rows.append(
            AblationRow(
                site=s,
                choice=params[s],
                alone_ms=a.median_ms if a else None,
                alone_speedup=sp,
                without_ms=w.median_ms if w else None,
                contribution=w.median_ms / win.median_ms if w else None,
                undone=undone[s],
                pays_alone=sp is not None and sp > 1 + threshold,
                error="; ".join(failed[k][:200] for k in (f"alone:{s}", f"without:{s}") if k in failed),
            )
        )
    return AblationReport(
        model=getattr(evaluator, "name", "model"),
        winner=params,
        baseline_ms=base.median_ms,
        winner_ms=win.median_ms,
        noise=noise,
        timing=win.method,
        rows=rows,
        failed=failed,
    )


def genome_diff(space: SearchSpace, params: Mapping[str, Value]) -> str:
    """A unified diff of the genome (as indented JSON) against the unchanged model's."""
    a = json.dumps(space.default(), indent=1, sort_keys=True).splitlines(keepends=True)
    b = json.dumps({**space.default(), **dict(params)}, indent=1, sort_keys=True).splitlines(keepends=True)
    return "".join(difflib.unified_diff(a, b, "baseline/genome.json", "winner/genome.json"))


def record(
    store: Any,
    report: AblationReport,
    space: SearchSpace,
    *,
    gpu: str,
    toolchain: Mapping[str, Any],
    shapes: list[dict[str, Any]],
    run_id: str = "",
    tests: list[str] | None = None,
) -> list[Lesson]:
    """Dead ends as caveat lessons, the winning set in the kernel database. Returns the lessons."""
    tc = dict(toolchain)
    lessons = []
    for r in report.dead_ends():
        figures = (
            f"{r.alone_ms:.4g} ms alone vs {report.baseline_ms:.4g} ms baseline ({r.alone_speedup:.3f}x)"
            if r.alone_ms is not None and r.alone_speedup is not None
            else f"could not be measured: {r.error}"
        )
        contrib = f"; the winner without it: {r.contribution:.3f}x slower" if r.contribution is not None else ""
        lessons.append(
            new_lesson(
                "caveat",
                report.model,
                gpu,
                tc,
                f"dead end on {report.model}: {r.site}={r.choice} does not pay on its own ({figures}, noise "
                f"{report.noise:.1%}, {report.timing}){contrib}",
                {
                    "class": "dead end",
                    "site": r.site,
                    "choice": r.choice,
                    "alone_ms": r.alone_ms,
                    "baseline_ms": report.baseline_ms,
                    "alone_speedup": r.alone_speedup,
                    "without_ms": r.without_ms,
                    "winner_ms": report.winner_ms,
                    "noise": report.noise,
                    "timing": report.timing,
                },
                run_id,
            )
        )
    if lessons:
        store.save_lessons(lessons)
    genome = Genome.of(report.winner)
    figures = report.to_dict()
    store.save_kernel(
        {
            "genome_id": genome.id,
            "op": report.model,
            "gpu": gpu,
            "toolchain": tc,
            "shapes": shapes,
            "source": json.dumps(report.winner, indent=1, sort_keys=True),
            "diff": genome_diff(space, report.winner),
            "latency_ms": report.winner_ms,
            "per_shape": {},
            "run_id": run_id,
            "kind": "model-level",
            "figures": figures,
            "tests": list(tests or []),
            "workload": {"gpu": gpu, "toolchain": tc, "shapes": shapes},
        }
    )
    return lessons
