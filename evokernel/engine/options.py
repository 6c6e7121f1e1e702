"""What a search is asked to do: its budget (when to stop) and the knobs of its loop.

>>> Budget(evaluations=100).evaluations, SearchOptions().children
(100, 8)
>>> SearchOptions(population=4, offspring=12).children
12
"""

from __future__ import annotations

from dataclasses import dataclass

from evokernel.core.errors import ConfigError

__all__ = [
    "Budget",
    "SearchOptions",
    "Promotion",
    "NOTHING_NEW",
    "DEFAULT_PATIENCE",
    "MIN_IMPROVEMENT",
    "no_improvement",
]


@dataclass(frozen=True)
class Budget:
    """When to stop: after `evaluations` genomes, `wall_s` seconds, or `cost` spent by
    costly operators (the cost cap switches those operators off; the search goes on)."""

    evaluations: int | None = None
    wall_s: float | None = None
    cost: float | None = None

    def __post_init__(self) -> None:
        for name in ("evaluations", "wall_s", "cost"):
            value = getattr(self, name)
            if value is not None and not (isinstance(value, (int, float)) and value > 0):
                raise ConfigError(f"budget {name} must be positive, got {value!r}")
        if self.evaluations is None and self.wall_s is None:
            raise ConfigError("a budget needs a number of evaluations or a wall time")


@dataclass(frozen=True)
class Promotion:
    """When a genome judged at a cheap fidelity goes on to the next, more expensive one
    (`evokernel.evaluators.Cascade`).

    A genome is a candidate for promotion when it is among the `top` best of its batch at
    that level, when its figure is within `margin` of the best figure seen at that level, or
    when its figure calibrated to the full level (the median ratio of full to cheap figures
    of the genomes promoted so far) is within `margin` of the best full figure. Of a batch's
    candidates at most `share` (rounded up; `top` at least) go on, the best first: once a
    search has converged most of what it proposes is within the margin, and the cap keeps
    the full judgements to that share of the batch. The rest keep their calibrated figure,
    marked as estimated (never an elite; the ratio's spread in meta)."""

    margin: float = 0.10
    top: int = 1
    share: float = 0.25

    def __post_init__(self) -> None:
        if not (self.margin >= 0 and self.margin < 10):
            raise ConfigError(f"promotion margin must be in [0, 10), got {self.margin!r}")
        if not (isinstance(self.top, int) and self.top >= 0):
            raise ConfigError(f"promotion top must be an integer >= 0, got {self.top!r}")
        if not (0 < self.share <= 1):
            raise ConfigError(f"promotion share must be in (0, 1], got {self.share!r}")


#: A run's stop reason when, with the fallback off (`SearchOptions.fallback`), no operator had a new genome.
NOTHING_NEW = "mutators had nothing new"


#: Generations without a better best (by more than MIN_IMPROVEMENT) after which a search stops by
#: default (`SearchOptions.patience`). 8: the model strategy's replays of the shipped matmul
#: landscapes reach their final best within a few generations of 8 children each, and 8 stale
#: generations (64 evaluations) without a 0.5% gain are more than a run that is still improving
#: goes without one, while a stalled demo no longer spends 24 generations on nothing.
DEFAULT_PATIENCE = 8
#: The relative gain of the best that counts as an improvement for patience (0.005: 0.5%);
#: smaller gains are within a GPU timing's noise and do not restart the count.
MIN_IMPROVEMENT = 0.005


def no_improvement(generations: int) -> str:
    """A run's stop reason when patience ran out."""
    return f"no improvement in {generations} generation{'s' if generations != 1 else ''}"


@dataclass(frozen=True)
class SearchOptions:
    """Knobs of the generational loop, with defaults in one place."""

    population: int = 8
    offspring: int = 0  # children per generation; 0 means `population`
    selection: str = "tournament"  # or "rank"
    tournament_size: int = 3
    elitism: int = 8  # best individuals that always survive; = population gives (mu + lambda)
    # stop after this many generations in which the best did not improve by more than
    # min_improvement (relative) on the best when the count last restarted; the run's stop reason
    # is then "no improvement in N generations". None: DEFAULT_PATIENCE (8); 0: never (the whole
    # budget). `stop_after` is the number in force.
    patience: int | None = None
    min_improvement: float = MIN_IMPROVEMENT
    noise_z: float = 1.0  # an elite is replaced only by a gain > noise_z * combined noise
    report_elites: int = 5  # elites re-measured and reported at the end
    remeasure: int = 2  # extra measurements of each reported elite (0: none)
    retries: int = 32  # proposals tried before falling back to a random unseen point
    # when no operator proposes a new genome in `retries` tries, take a random unseen point (the
    # fallback; counted in the report's `fallbacks`); off, the generation ends with what it has
    # and a generation with nothing stops the run ("mutators had nothing new")
    fallback: bool = True
    seed_elites: int = 4  # elites of earlier runs put in the first generation
    learn_failures: bool = True  # skip points predicted to run out of resources like failed ones
    # genomes of the nearest other shapes' runs put in the first generation (0: none); half the
    # population: on the matmul landscapes 4 beat 8 (a far shape's elites crowd out exploration)
    transfer: int = 4
    # more of them offered later by a "transfer" bandit operator (0: none). Off by default: on
    # the matmul landscapes (leave one out, 10 seeds, budget 100) 24 gave 0.920 / 0.967 / 0.980
    # at 25 / 50 / 100, 8 gave 0.928 / 0.973 / 0.983, none 0.943 / 0.976 / 0.985: far shapes'
    # genomes beat a young population's median, earn credit, and crowd out the search
    transfer_operator: int = 0
    # what a primed mutator (the cost model) learns from before the run: the store's earlier
    # runs of the kernel family always, the landscapes that ship with evokernel when true;
    # prior_holdout leaves out a shipped landscape of the run's own shape (benchmarks). A replay
    # always leaves out the landscape it replays (the answer it searches for) unless
    # train_on_replayed: then the model has seen the answer, and the figure is not a search's
    shipped_priors: bool = True
    prior_holdout: bool = False
    train_on_replayed: bool = False
    # judge cheaply first and promote the promising genomes to the evaluator's full fidelity,
    # when the evaluator offers levels (`HasFidelities`; None: every genome at full fidelity)
    promotion: Promotion | None = None

    def __post_init__(self) -> None:
        if self.population < 1:
            raise ConfigError("population must be >= 1")
        if self.offspring < 0 or self.elitism < 0 or self.remeasure < 0 or self.report_elites < 1:
            raise ConfigError("offspring, elitism and remeasure must be >= 0, report_elites >= 1")
        if self.selection not in ("tournament", "rank"):
            raise ConfigError(f"selection must be 'tournament' or 'rank', got {self.selection!r}")
        if self.tournament_size < 1:
            raise ConfigError("tournament_size must be >= 1")
        if self.patience is not None and (isinstance(self.patience, bool) or self.patience < 0):
            raise ConfigError("patience must be >= 0 generations (0: no early stop)")
        if not 0 <= self.min_improvement < 1:
            raise ConfigError(f"min_improvement must be in [0, 1), got {self.min_improvement!r}")

    @property
    def stop_after(self) -> int | None:
        """Generations without improvement that stop the run: patience, DEFAULT_PATIENCE when it
        is None, None (never) when it is 0."""
        if self.patience is None:
            return DEFAULT_PATIENCE
        return self.patience or None

    @property
    def children(self) -> int:
        return self.offspring or self.population
