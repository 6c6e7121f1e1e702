"""Every registered mutator passes the same contract suite, stateful ones included.

A mutator is driven as the engine drives it: it is told every evaluation of the run (a first
generation of random points, then its own children), in order, and proposes from random
parents. Determinism means: a fresh instance given the same seeds and the same history of
evaluations proposes the same genomes (for a mutator that keeps no state, also: the same
call twice gives the same answer); `reset()` makes an instance behave as a fresh one.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field

import numpy as np
import pytest

from evokernel import Budget, Genome, Mutator, Search
from evokernel.core.archive import Archive
from evokernel.core.mutator import Context, Costly, Exhaustible, Learns, Primed, Resets, observe, reset
from evokernel.core.result import Result, Status
from evokernel.search_spaces import matmul_space
from evokernel.store import SQLiteStore

from ._components import build_mutator

TRIALS = 50
FIRST_GENERATION = 8


def outcome(genome: Genome) -> Result:
    """A made-up measurement that depends on the genome alone: a latency, or (one in seven) a
    compile error, so that learning mutators see failures too."""
    h = int(genome.id[:8], 16)
    if h % 7 == 0:
        return Result.failed(Status.COMPILE_ERROR, "out of resource: shared memory (contract suite)")
    return Result.ok(0.01 + (h % 10_000) / 1e5)


@dataclass
class Drive:
    """What one drive of a mutator gave."""

    proposals: list[str | None] = field(default_factory=list)  # child ids (None: nothing offered)
    charges: list[tuple[float, str]] = field(default_factory=list)


def drive(mutator: Mutator, *, seed: int = 0, trials: int = TRIALS) -> Drive:
    """Run `mutator` as the engine would, checking each proposal; what it proposed."""
    space = matmul_space()
    rng = np.random.default_rng(seed)  # parents and the first generation
    archive = Archive()
    out = Drive()
    reset(mutator)
    if isinstance(mutator, Primed):  # as the engine primes it: here a family with no earlier data
        from evokernel.engine.priors import PriorSource

        mutator.prime(PriorSource(family="contract", shape={}, space=space, shipped=False))

    def tell(genome: Genome) -> None:
        result = outcome(genome)
        archive.consider(genome, result, "contract")
        observe(mutator, genome, result)

    for _ in range(FIRST_GENERATION):
        tell(Genome.of(space.sample(rng)))
    for trial in range(trials):
        parents = [Genome.of(space.sample(rng)) for _ in range(mutator.arity)]
        before = copy.deepcopy(parents)
        ctx = Context(
            space,
            np.random.default_rng([seed, trial]),
            trial + 1,
            archive,
            charge=lambda amount, what: out.charges.append((amount, what)),
        )
        child = mutator.propose(parents, ctx)
        assert parents == before, "parents were modified"
        if isinstance(mutator, Exhaustible) and mutator.exhausted:
            assert child is None, "an exhausted mutator proposed"
        if child is None:
            out.proposals.append(None)
            continue
        assert isinstance(child, Genome), f"proposed a {type(child).__name__}, not a Genome"
        assert space.why_invalid(child.params) is None, space.why_invalid(child.params)
        assert all(child.id != p.id for p in parents), "a child identical to a parent"
        out.proposals.append(child.id)
        tell(child)
    return out


def test_it_is_a_mutator(mutator_name: str):
    mutator = build_mutator(mutator_name)
    assert isinstance(mutator, Mutator), "needs name, arity and propose()"
    assert isinstance(mutator.name, str) and mutator.name
    assert mutator.arity in (0, 1, 2)
    # each capability it has is well formed (what the engine calls is callable, what it reads a bool)
    assert not isinstance(mutator, Learns) or callable(mutator.observe)
    assert not isinstance(mutator, Resets) or callable(mutator.reset)
    assert not isinstance(mutator, Costly) or isinstance(mutator.costly, bool)
    assert not isinstance(mutator, Exhaustible) or isinstance(mutator.exhausted, bool)
    assert not isinstance(mutator, Primed) or callable(mutator.prime)


def test_it_proposes_valid_children_and_leaves_its_parents_alone(mutator_name: str):
    made = drive(build_mutator(mutator_name))
    assert sum(p is not None for p in made.proposals) >= 40, made.proposals


def test_the_same_seeds_and_history_give_the_same_proposals(mutator_name: str):
    first, second = drive(build_mutator(mutator_name)), drive(build_mutator(mutator_name))
    assert first.proposals == second.proposals
    assert drive(build_mutator(mutator_name), seed=1).proposals != first.proposals  # the seed matters


def test_a_reset_instance_behaves_as_a_fresh_one(mutator_name: str):
    mutator = build_mutator(mutator_name)
    first = drive(mutator)
    again = drive(mutator)  # drive() resets it first, as the engine does when a run starts
    assert again.proposals == first.proposals, "a second run of the same instance differs from the first"
    if isinstance(mutator, Learns):
        assert isinstance(mutator, Resets), (
            "a mutator that learns must reset: a second run would see the first's history"
        )


def test_a_mutator_that_keeps_no_state_answers_a_call_the_same_way_twice(mutator_name: str):
    mutator = build_mutator(mutator_name)
    if isinstance(mutator, (Learns, Resets)):
        pytest.skip("it keeps state: its answers depend on its history (the history tests are its determinism)")
    space = matmul_space()
    rng = np.random.default_rng(0)
    for trial in range(TRIALS):
        parents = [Genome.of(space.sample(rng)) for _ in range(mutator.arity)]
        a = mutator.propose(parents, Context(space, np.random.default_rng(trial), 1, Archive()))
        b = mutator.propose(parents, Context(space, np.random.default_rng(trial), 1, Archive()))
        assert (a is None) == (b is None) and (a is None or a.id == b.id)  # deterministic for an rng


def test_only_a_costly_mutator_charges_and_never_a_negative_amount(mutator_name: str):
    mutator = build_mutator(mutator_name)
    made = drive(mutator, trials=10)
    assert all(amount >= 0 and isinstance(what, str) for amount, what in made.charges)
    if not (isinstance(mutator, Costly) and mutator.costly):
        assert not made.charges, "a mutator that charges must say so: costly = True"


def test_every_mutator_shipped_in_the_mutators_package_is_registered():
    """Registering a mutator is its entry point: one the package ships but the registry does
    not name would escape this suite and `evokernel plugins`."""
    import importlib
    import inspect
    import pkgutil

    import evokernel.mutators as package
    from evokernel.core.plugins import registered

    named = {ep.value for ep in registered("evokernel.mutators").values()}
    shipped = set()
    for info in pkgutil.iter_modules(package.__path__):
        module = importlib.import_module(f"{package.__name__}.{info.name}")
        for attr, obj in vars(module).items():
            if (
                inspect.isclass(obj)
                and obj.__module__ == module.__name__
                and not attr.startswith("_")
                and callable(getattr(obj, "propose", None))
                and hasattr(obj, "arity")
            ):
                shipped.add(f"{module.__name__}:{attr}")
    assert shipped and shipped <= named, sorted(shipped - named)
    for value in named:  # and the package gives each by its class name
        module, _, attr = value.partition(":")
        if module.startswith(package.__name__ + "."):
            assert getattr(package, attr) is getattr(importlib.import_module(module), attr)


def test_a_search_with_it_alone_keeps_the_engines_contract(mutator_name: str):
    """On a recorded landscape, the engine driving this mutator alone: the budget spent
    exactly, no genome evaluated twice, every genome valid, and the mutator contributing
    (crossover alone may produce nothing new once parents converge)."""
    from evokernel.engine.landscape import builtin
    from evokernel.evaluators import ReplayEvaluator

    ev = ReplayEvaluator(builtin("matmul_bf16_h200_M2048_N6144_K4096"), noise=0.03, seed=0)
    store = SQLiteStore(":memory:")
    mutator = build_mutator(mutator_name)
    report = Search(ev.space, ev, [mutator], store=store).run(Budget(evaluations=40), seed=0)
    history = [e for e in store.history(report.run_id) if e.kind == "eval"]
    assert report.evaluations == 40 == len(history)
    ids = [e.genome.id for e in history]
    assert len(set(ids)) == len(ids), "a genome was evaluated twice"
    assert all(ev.space.is_valid(e.genome.params) for e in history)
    if mutator.arity < 2:
        assert any(e.genome.lineage.operator == mutator.name for e in history), f"{mutator.name} never contributed"
