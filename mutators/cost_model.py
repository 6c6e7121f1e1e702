"""A cost model as a mutator: trees learned from everything measured, proposing the points of
best expected improvement.

The model is a random forest (scikit-learn's `RandomForestRegressor`, half the features per
split; the spread of its trees' predictions is the uncertainty), fitted on
log latency over the encoded point, the shape (log2 of each dimension) and, when the space
declares its `Geometry`, analytic features (tiles, waves, padding, shared memory, intensity).
A classifier of the same kind learns which points fail (out of shared memory or registers,
compile errors) and scales each point's expected improvement by its chance to run.

Training data: the rows `prime` receives from the search (`evokernel.engine.priors`: every
earlier measurement of the kernel family on this GPU, in the store and in the shipped
recorded landscapes) and the run's own evaluations as they land (`observe`). Each earlier
run or landscape is centred on its own median log latency (shapes differ in scale, not in
what makes a tile good); the run's own points are centred by the offset that best aligns
them with the model, and weigh more as they accumulate. The model is refitted once per
generation (when new results have landed), on at most `max_rows` rows.

It proposes, from every valid point of an enumerable space (else `pool` random points), the
unseen one with the best expected improvement times its chance to run; points a Hamming
step from one already proposed in this generation count less, so a generation spreads.
With no data at all (a new family, nothing measured yet), it has nothing to offer.
"""

from __future__ import annotations

import math
import os
import threading
import time
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from evokernel.core.genome import Genome
from evokernel.core.result import Result, Status
from evokernel.core.space import SearchSpace

__all__ = ["CostModel"]

_MISSING = -1.0  # trees split it off; every real feature is a log or a ratio
# the fit runs between generations, while the compile pool and the GPU wait for proposals
_JOBS = max(1, min(4, len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)))
_WARMING: list[threading.Thread] = []


def warm_imports() -> None:
    """Import scikit-learn's forests and scipy's normal CDF on a daemon thread, once a
    process: a cold import takes about 3 s, which would otherwise land on the first fit,
    after the search's own start-up (the store, the judge's sandbox) rather than under it.
    The fit's own import then finds the modules loaded, or waits for the thread on Python's
    import lock; an import that fails there fails again, with its error, in the fit."""
    if _WARMING:
        return

    def load() -> None:
        try:
            import scipy.special  # noqa: F401
            import sklearn.ensemble  # noqa: F401
        except Exception:  # the fit's own import reports it
            pass

    t = threading.Thread(target=load, name="evokernel-cost-model-imports", daemon=True)
    _WARMING.append(t)
    t.start()


class CostModel:
    """Proposes the point of best expected improvement under a tree ensemble trained on the
    store, the shipped landscapes and the run (see the module's docstring)."""

    name = "cost-model"
    arity = 0

    def __init__(
        self,
        *,
        trees: int = 32,
        pool: int = 4096,
        max_rows: int = 6000,
        own_weight: float = 4.0,
        scale_weight: float = 0.05,
        min_leaf: int = 2,
        acquisition: str = "auto",
        greedy: int = 24,
        spread: float = 0.5,
        first_share: float = 1.0,
        min_own: int = 2,
    ) -> None:
        self.min_own = min_own
        self.first_share = first_share
        self.spread = spread
        self.acquisition, self.greedy = acquisition, greedy
        self.trees, self.pool, self.max_rows = trees, pool, max_rows
        self.own_weight, self.min_leaf, self.scale_weight = own_weight, min_leaf, scale_weight
        self.fit_seconds: list[float] = []  # per fit, for the benchmark's report
        self.reset()
        warm_imports()

    # -- the engine's hooks -------------------------------------------------------------------
    def reset(self) -> None:
        self.prior: list[tuple[dict[str, Any], dict[str, float], float | None, str]] = []
        self.shape: dict[str, float] = {}
        self.own: list[tuple[dict[str, Any], float | None]] = []
        self.seen: set[str] = set()
        self.pending: list[dict[str, Any]] = []
        self._model: Any = None
        self._fail: Any = None
        self._fitted_on = -1
        self._offset = 0.0
        self._space: SearchSpace | None = None
        self._points: list[dict[str, Any]] | None = None
        self._prior_x: np.ndarray | None = None
        self._prior_y: np.ndarray | None = None
        self._scored: tuple[list[dict[str, Any]], np.ndarray] = ([], np.zeros(0))

    def prime(self, source: Any) -> None:
        """Earlier measurements of the family (`evokernel.engine.priors.PriorSource`)."""
        self.shape = dict(source.shape)
        self.prior = [(r.params, r.shape, r.latency_ms, r.group) for r in source.rows()]
        self._prior_x = self._prior_y = None
        self._fitted_on = -1

    def observe(self, genome: Genome, result: Result) -> None:
        self.seen.add(genome.id)
        if result.status is Status.INVALID:
            return
        self.own.append((dict(genome.params), result.latency_ms if result.is_ok else None))

    @property
    def has_data(self) -> bool:
        """Earlier measurements of the family, or `min_own` of the run's own results."""
        return bool(self.prior) or sum(lat is not None for _, lat in self.own) >= self.min_own

    # -- proposing -----------------------------------------------------------------------------
    def propose(self, parents: Sequence[Genome], ctx: Any) -> Genome | None:
        space: SearchSpace = ctx.space
        if not self.has_data:
            return None
        if self._fitted_on != len(self.own) or self._space is not space:
            self._fit(space, int(ctx.rng.integers(2**31)))
            self._scored = self._pool_scores(space, ctx.rng)
        points, score = self._scored
        taken = self.seen | {Genome.of(space.canonical(p)).id for p in self.pending}
        free = np.array([Genome.of(p).id not in taken for p in points], dtype=bool)
        if not free.any():
            return None
        total = np.where(free, score * self._spread(space, points), -np.inf)
        best = int(np.argmax(total))
        self.pending.append(points[best])
        return Genome.of(space.canonical(points[best]))

    def _pool_scores(self, space: SearchSpace, rng: np.random.Generator) -> tuple[list[dict[str, Any]], np.ndarray]:
        """The candidates of this generation (every valid point of an enumerable space, else
        `pool` random ones) and their acquisition scores under the fitted model."""
        if space.size <= space.ENUMERABLE:
            if self._points is None:
                self._points = [dict(p) for p in space.valid_points()]
            points = self._points
        else:
            points = [space.sample(rng) for _ in range(self.pool)]
        points = [p for p in points if Genome.of(p).id not in self.seen]
        if not points:
            return [], np.zeros(0)
        return points, self._score(self._encode(space, points, [self.shape] * len(points)))

    def _score(self, x: np.ndarray) -> np.ndarray:
        per_tree = np.stack([t.predict(x) for t in self._model.estimators_])
        mu, sigma = per_tree.mean(axis=0), per_tree.std(axis=0) + 1e-3
        own_ok = [math.log(lat) - self._offset for _, lat in self.own if lat is not None]
        greedy = self.acquisition == "mean" or (self.acquisition == "auto" and len(own_ok) < self.greedy)
        if greedy:  # the lowest predicted latency (with the generation spread by `_spread`)
            score = np.exp(-(mu - mu.min()))
        else:  # expected improvement over the run's best
            best = min(own_ok) if own_ok else float(mu.min())
            z = (best - mu) / sigma
            score = sigma * (z * _norm_cdf(z) + _norm_pdf(z)) + 1e-12 * np.exp(-(mu - mu.min()))
        if self._fail is not None:
            score = score * self._fail.predict_proba(x)[:, list(self._fail.classes_).index(1)]
        return score

    def _spread(self, space: SearchSpace, pool: list[dict[str, Any]]) -> np.ndarray:
        if not self.pending:
            return np.ones(len(pool))
        names = space.names
        near = np.zeros(len(pool), dtype=bool)
        for q in self.pending:
            d = np.array([sum(p[n] != q[n] for n in names) for p in pool])
            near |= d <= 1
        return np.where(near, self.spread, 1.0)

    # -- fitting ------------------------------------------------------------------------------
    def _fit(self, space: SearchSpace, seed: int) -> None:
        from sklearn.ensemble import RandomForestClassifier, RandomForestRegressor

        t0 = time.perf_counter()
        self._space = space
        self.pending = []
        if self._prior_x is None:
            self._prior_x, self._prior_y = self._prior_data(space)
        px, py = self._prior_x, self._prior_y
        ox = self._encode(space, [p for p, _ in self.own], [self.shape] * len(self.own))
        oy = np.array([math.log(lat) if lat is not None else np.nan for _, lat in self.own])
        # the run's own points: centred by the offset that aligns them with the last model
        ok = ~np.isnan(oy)
        if ok.any():
            if self._model is not None:
                self._offset = float(np.median(oy[ok] - self._model.predict(ox[ok])))
            elif not len(px):
                self._offset = float(np.median(oy[ok]))
        x = np.vstack([px, ox]) if len(px) else ox
        y = np.concatenate([py, oy - self._offset]) if len(px) else oy - self._offset
        n_own = len(oy)
        w = np.concatenate([np.ones(len(py)), np.full(n_own, self._own_weight_now(len(py), int(ok.sum())))])
        rng = np.random.default_rng(seed)
        if len(x) > self.max_rows:  # keep all of the run's own, sample the rest
            keep = np.concatenate(
                [rng.choice(len(px), self.max_rows - n_own, replace=False), len(px) + np.arange(n_own)]
            )
            x, y, w = x[keep], y[keep], w[keep]
        good = ~np.isnan(y)
        model = RandomForestRegressor(
            n_estimators=self.trees, min_samples_leaf=self.min_leaf, max_features=0.5, random_state=seed, n_jobs=_JOBS
        )
        model.fit(x[good], y[good], sample_weight=w[good])
        # fitted on threads (each tree's seed is drawn first: deterministic); predicted on one,
        # since a threaded predict sums the trees in whatever order they finish
        model.n_jobs = 1
        self._model = model
        self._fail = None
        if (~good).any() and good.any():
            fail = RandomForestClassifier(
                n_estimators=max(16, self.trees // 2),
                min_samples_leaf=self.min_leaf,
                max_features=0.5,
                random_state=seed,
                n_jobs=_JOBS,
            )
            fail.fit(x, good.astype(int), sample_weight=w)
            fail.n_jobs = 1
            self._fail = fail
        # re-centre the run's own points on the new model (used by `_score`'s incumbent)
        if ok.any():
            self._offset = float(np.median(oy[ok] - model.predict(ox[ok])))
        self._fitted_on = len(self.own)
        self.fit_seconds.append(time.perf_counter() - t0)

    def _own_weight_now(self, n_prior: int, n_own_ok: int) -> float:
        """The run's own points weigh `own_weight` each, and more while they are few against
        many earlier rows (so that they, not other shapes, decide near what was measured)."""
        if not n_prior or not n_own_ok:
            return 1.0
        return max(self.own_weight, self.scale_weight * n_prior / n_own_ok)

    def _prior_data(self, space: SearchSpace) -> tuple[np.ndarray, np.ndarray]:
        rows = [r for r in self.prior if space.is_valid(r[0])]
        if not rows:
            return np.zeros((0, self._width(space))), np.zeros(0)
        x = self._encode(space, [r[0] for r in rows], [r[1] for r in rows])
        y = np.array([math.log(r[2]) if r[2] is not None else np.nan for r in rows])
        groups = np.array([r[3] for r in rows])
        for g in set(groups.tolist()):
            sel = (groups == g) & ~np.isnan(y)
            if sel.any():
                y[groups == g] -= np.median(y[sel])
        return x, y

    # -- features ------------------------------------------------------------------------------
    def _dims(self) -> list[str]:
        dims = set(self.shape)
        for r in self.prior:
            dims |= set(r[1])
        return sorted(dims)

    def _width(self, space: SearchSpace) -> int:
        geo = len(space.geometry.features(space.default(), {})) if space.geometry is not None else 0
        return len(space.params) + len(self._dims()) + geo

    def _encode(
        self, space: SearchSpace, points: Sequence[Mapping[str, Any]], shapes: Sequence[Mapping[str, float]]
    ) -> np.ndarray:
        dims = self._dims()
        rows = []
        for p, shape in zip(points, shapes):
            row = [_value(param, p.get(param.name)) for param in space.params]
            row += [math.log2(shape[d]) if shape.get(d, 0) > 0 else _MISSING for d in dims]
            if space.geometry is not None:
                row += [v if v == v else _MISSING for v in space.geometry.features(p, shape).values()]
            rows.append(row)
        return np.array(rows, dtype=float).reshape(len(rows), self._width(space))


def _value(param: Any, v: Any) -> float:
    if isinstance(v, bool):
        return float(v)
    if isinstance(v, (int, float)):
        return math.log2(v) if v > 0 else float(v)
    i = param.index(v)
    return float(i) if i is not None else _MISSING


def _norm_pdf(z: np.ndarray) -> np.ndarray:
    return np.exp(-0.5 * z * z) / math.sqrt(2 * math.pi)


def _norm_cdf(z: np.ndarray) -> np.ndarray:
    from scipy.special import ndtr

    return ndtr(z)
