"""Proposing the next genome: an operator chosen by the bandit, its parents by selection,
the child checked (valid, unseen, not predicted to fail) before anything measures it; a
random unseen point when no operator has one (the fallback: counted, and off with
`SearchOptions(fallback=False)`, `--no-fallback`).
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

import numpy as np

from evokernel.core.genome import Genome
from evokernel.core.mutator import Context, Costly, Exhaustible
from evokernel.engine.report import Individual

if TYPE_CHECKING:
    from evokernel.engine.search import _Run

__all__ = ["propose", "unseen_random", "predicted_failure"]

log = logging.getLogger("evokernel.search")


def select_parents(run: _Run, pool: list[Individual], k: int) -> list[Individual]:
    """k parents (distinct where the pool allows) by tournament or rank selection."""
    chosen: list[Individual] = []
    for _ in range(k):
        cands = [p for p in pool if p not in chosen] or pool
        if run.opt.selection == "rank":
            ranked = sorted(cands, key=lambda p: (p.fitness, p.seq))
            w = np.arange(len(ranked), 0, -1, dtype=float)
            chosen.append(ranked[int(run.rng.choice(len(ranked), p=w / w.sum()))])
        else:
            size = min(run.opt.tournament_size, len(cands))
            picks = run.rng.choice(len(cands), size=size, replace=False)
            chosen.append(min((cands[int(i)] for i in picks), key=lambda p: (p.fitness, p.seq)))
    return chosen


def allowed_operators(run: _Run, pool: list[Individual]) -> list[str]:
    """The operators that may propose now: enough parents, not exhausted, and not costly once
    the cost budget is spent."""
    capped = run.budget.cost is not None and run.cost >= run.budget.cost
    return [
        m.name
        for m in run.mutators
        if m.arity <= len(pool)
        and not (capped and isinstance(m, Costly) and m.costly)
        and not (isinstance(m, Exhaustible) and m.exhausted)
    ]


def propose(run: _Run, population: list[Individual], taken: set[str], stored: Genome | None = None) -> Genome | None:
    """The next genome to evaluate (not in `taken`, its lineage set), or None when the space
    is exhausted.

    stored: on resume, the genome (lineage included) the run holds in the store at the
    position this one takes. It is the answer: an operator need not propose the same again
    (an LLM does not), and what is stored is not measured again. The proposal is still made,
    so that a deterministic run draws its random numbers as it did and retraces itself, except
    by a costly operator (an LLM call), which is not asked, nor paid, a second time."""
    if stored is not None and (stored.id in run.seen or stored.id in taken):
        stored = None  # (the store has it at another position: propose afresh)
    child = _propose(run, population, taken, replaying=stored is not None)
    return stored if stored is not None else child


def _propose(run: _Run, population: list[Individual], taken: set[str], *, replaying: bool) -> Genome | None:
    pool = [p for p in population if p.result.is_ok]
    ctx = Context(
        run.s.space,
        run.rng,
        run.generation,
        run.archive,
        run.charge,
        deadline=run._deadline(),
        money_left=run._money_left,
    )
    by_name = {m.name: m for m in run.mutators}
    for _ in range(run.opt.retries):
        allowed = allowed_operators(run, pool)  # a charge may have just hit the cost cap
        if not allowed:
            break
        op = by_name[run.bandit.choose(run.rng, allowed)]
        parents = select_parents(run, pool, op.arity)
        if replaying and isinstance(op, Costly) and op.costly:
            return None
        try:
            child = op.propose([p.genome for p in parents], ctx)
        except Exception as exc:  # a broken operator costs a proposal, not the run
            log.warning("mutator %s raised %s: %s", op.name, type(exc).__name__, exc)
            run._skip(f"{op.name} raised")
            continue
        if child is None:
            run._skip(f"{op.name} had nothing")
            continue
        if not isinstance(child, Genome):
            run._skip(f"{op.name} returned {type(child).__name__}")
            continue
        reason = run.s.space.why_invalid(child.params)
        if reason is not None:
            run._skip(f"invalid: {reason.split(':')[0]}")
            continue
        proposed = child
        child = Genome.of(run.s.space.canonical(child.params), child.source)
        if child.id in run.seen or child.id in taken:
            run._skip("duplicate")
            continue
        if predicted_failure(run, child):
            continue
        # an operator may name other parents than those it was given (a repair names the
        # failed genome it fixed), as long as the run has seen them
        named = getattr(proposed, "lineage", None)
        ids = (
            tuple(named.parents)
            if named is not None and named.parents and all(p in run.seen for p in named.parents)
            else tuple(p.genome.id for p in parents)
        )
        return child.with_lineage(ids, op.name, run.generation)
    return fallback(run, taken)


def fallback(run: _Run, taken: set[str]) -> Genome | None:
    """What is proposed when no operator had a new genome in `retries` tries: a random unseen
    point, counted in `run.fallbacks` and recorded with operator "fallback" (or "restart" when
    the run has a mutator of that name, which proposes the same kind of point and is credited
    for it, as before the fallback was named); with `SearchOptions.fallback` off, nothing."""
    if not run.opt.fallback:
        return None
    g = unseen_random(run, taken)
    if g is None:
        return None
    run.fallbacks += 1
    label = "restart" if "restart" in run.bandit.names else "fallback"
    return g.with_lineage((), label, run.generation)


def predicted_failure(run: _Run, genome: Genome) -> bool:
    """Skip (and record) a genome the learned failures say would run out of resources."""
    why = run.failures.predict(genome.params) if run.failures is not None else None
    if why is None:
        return False
    run._skip("learned: " + why.split(" like ")[0])
    run.s.store.log_event(
        run.run.id, "skip", {"genome": genome.id, "params": genome.params, "reason": why}, key=f"skip:{genome.id}"
    )
    return True


def unseen_random(run: _Run, taken: set[str]) -> Genome | None:
    """A random valid point not looked at yet (nor predicted to fail), or None when the
    space is exhausted."""
    space = run.s.space
    for _ in range(run.opt.retries):
        g = Genome.of(space.sample(run.rng))
        if g.id not in run.seen and g.id not in taken and not predicted_failure(run, g):
            return g.with_lineage((), "restart", run.generation)
    if space.size > space.ENUMERABLE:
        return None
    left = [g for g in map(Genome.of, space.valid_points()) if g.id not in run.seen and g.id not in taken]
    if run.failures is not None and len(run.failures):
        fine = [g for g in left if run.failures.predict(g.params) is None]
        left = fine or left  # predicted failures only once nothing else is left
    if not left:
        return None
    return left[int(run.rng.integers(len(left)))].with_lineage((), "restart", run.generation)
