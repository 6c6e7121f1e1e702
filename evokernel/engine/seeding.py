"""Where a run starts: the first generation, and what earlier runs taught it.

The first generation is, in order and within the budget: the elites of earlier runs of the
same space and evaluator, the user's seeds (known-good points: a library's defaults, a
serving engine's tuned config), the best genomes of the nearest other shapes' runs
(transfer; more of them offered later by a "transfer" operator), then the best-ranked points
of a mutator primed with the family's earlier measurements (the cost model), then random
unseen points up to the population. Before it, the failures of those earlier runs teach the failure model
which points would run out of resources.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

from evokernel.core.genome import Genome
from evokernel.core.mutator import Context, Primed
from evokernel.core.space import SearchSpace
from evokernel.engine.priors import PriorSource
from evokernel.engine.priors import describe as describe_priors
from evokernel.engine.propose import unseen_random
from evokernel.engine.transfer import TransferOperator, transfer_key, transfer_seeds

if TYPE_CHECKING:
    from evokernel.engine.search import _Run

__all__ = ["valid_seeds", "learn_prior_failures", "first_generation", "primed_picks"]

log = logging.getLogger("evokernel.search")


def valid_seeds(space: SearchSpace, seeds: Iterable[Genome | Mapping[str, Any]]) -> list[Genome]:
    """`seeds` (genomes or parameter dicts) as canonical genomes of `space`, without repeats;
    an invalid seed is left out with a warning.

    >>> from evokernel.core.space import IntRange
    >>> space = SearchSpace([IntRange("x", 1, 4)])
    >>> [g.params for g in valid_seeds(space, [{"x": 2}, {"x": 9}, Genome.of({"x": 2})])]
    [{'x': 2}]
    """
    out: list[Genome] = []
    for seed in seeds:
        params = seed.params if isinstance(seed, Genome) else dict(seed)
        reason = space.why_invalid(params)
        if reason is not None:
            log.warning("seed %s left out: %s", params, reason)
            continue
        g = Genome.of(space.canonical(params), seed.source if isinstance(seed, Genome) else None)
        if all(g.id != h.id for h in out):
            out.append(g)
    return out


def learn_prior_failures(run: _Run) -> None:
    """Known dead ends: the evaluations of earlier runs of this space and evaluator (the
    same archive key) teach the failure model before this run proposes anything."""
    if run.failures is None:
        return
    store, space = run.s.store, run.s.space
    taught = 0
    for info in store.runs():
        if info.archive_key != run.archive_key or info.seq >= run.run.seq:
            continue
        for e in store.history(info.id):
            if e.kind == "eval" and space.is_valid(e.genome.params):
                taught += run.failures.learn(e.genome, e.result)
    if taught:
        store.log_event(
            run.run.id, "prior_failures", {"learned": taught, "model": len(run.failures)}, key="prior_failures"
        )


def primed_picks(run: _Run, key: dict[str, Any] | None, taken: set[str], room: int) -> list[Genome]:
    """Prime the mutators that learn from earlier measurements (`Primed`: the cost model)
    with the family's data, and let the first of them with data fill up to `room` places of
    the first generation (its best-ranked points, before any random one)."""
    primed: list[Any] = [m for m in run.mutators if isinstance(m, Primed)]
    if not primed:
        return []
    s = run.s
    source = PriorSource(
        family=key["family"] if key else "",
        shape=dict(key["shape"]) if key else {},
        space=s.space,
        store=s.store if key else None,
        run_id=run.run.id,
        before_seq=run.run.seq,
        shipped=bool(key) and run.opt.shipped_priors,
        holdout=run.opt.prior_holdout,
        train_on_replayed=run.opt.train_on_replayed,
    )
    for m in primed:
        m.prime(source)
    rows = source.rows()
    run.priors = describe_priors(rows, source)
    if rows:
        s.store.log_event(run.run.id, "priors", run.priors, key="priors")
    out: list[Genome] = []
    maker = next((m for m in primed if getattr(m, "has_data", True)), None)
    if maker is None or room <= 0:
        return out
    # a mutator may keep part of the first generation random (`first_share`: its share of the
    # open places), so the run also sees points its priors would not pick
    room = math.ceil(room * float(getattr(maker, "first_share", 1.0)))
    ctx = Context(s.space, run.rng, 0, run.archive, run.charge, deadline=run._deadline(), money_left=run._money_left)
    for _ in range(room * 2):
        if len(out) >= room:
            break
        try:
            g = maker.propose([], ctx)
        except Exception as exc:  # a broken model costs its picks, not the run
            log.warning("mutator %s raised %s: %s", maker.name, type(exc).__name__, exc)
            break
        if g is None:
            break
        g = Genome.of(s.space.canonical(g.params), g.source)
        if g.id in taken or g.id in run.seen or not s.space.is_valid(g.params):
            continue
        out.append(g.with_lineage((), maker.name, 0))
        taken.add(g.id)
    return out


def first_generation(run: _Run) -> list[Genome]:
    """The genomes the run starts from (see the module's docstring); the archive is seeded with
    the earlier runs' elites and the failure model taught by their failures."""
    s, opt = run.s, run.opt
    prior = s.store.elites(archive_key=run.archive_key, before_seq=run.run.seq)
    prior = [e for e in prior if s.space.is_valid(e.genome.params)]
    run.archive.seed(prior)
    learn_prior_failures(run)
    first: list[Genome] = []
    for e in prior[: opt.seed_elites]:
        if len(first) < run._left():
            first.append(Genome.of(s.space.canonical(e.genome.params), e.genome.source).with_lineage((), "archive", 0))
    taken = {g.id for g in first}
    for g in s.seeds:
        if g.id not in taken and len(first) < run._left():
            first.append(g.with_lineage((), "seed", 0))
            taken.add(g.id)
    key = transfer_key(s.evaluator)
    if key is not None and opt.transfer and len(first) < run._left():
        # the nearest shapes' best genomes: the first few open the run, the rest are offered
        # by a "transfer" operator that the bandit keeps calling while they pay off
        seeds = transfer_seeds(
            s.store,
            key,
            s.space,
            fingerprint=run.fingerprint,
            limit=opt.transfer + opt.transfer_operator,
            before_seq=run.run.seq,
            created_before=run.run.created,
        )
        head, rest = seeds[: min(opt.transfer, run._left() - len(first))], seeds[opt.transfer :]
        for g, run_id, dist in head:
            if g.id not in taken:
                first.append(g.with_lineage((), "transfer", 0))
                taken.add(g.id)
        if rest and "transfer" not in run.bandit.names:
            run.mutators.append(TransferOperator([g for g, _, _ in rest]))
            run.bandit.add("transfer")
        if seeds:
            s.store.log_event(
                run.run.id,
                "transfer",
                {
                    "from_runs": sorted({r for _, r, _ in seeds}),
                    "genomes": [g.id for g, _, _ in head],
                    "offered_later": len(rest),
                    "distances": sorted({round(d, 3) for _, _, d in seeds}),
                },
                key="transfer",
            )
    first += primed_picks(run, key, taken, min(opt.population, run._left()) - len(first))
    while len(first) < min(opt.population, run._left()):
        fresh = unseen_random(run, taken)
        if fresh is None:
            break
        first.append(fresh.with_lineage((), "init", 0))
        taken.add(fresh.id)
    return first
