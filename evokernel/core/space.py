"""Search spaces as data: typed parameters plus constraints that say why a point is invalid.

Every parameter is a small typed object with a finite domain that knows how to sample a
value, list its neighbours and encode itself as numbers, so that random search, evolution,
local search and any Optuna sampler drive the same space.

>>> space = SearchSpace(
...     [PowerOfTwo("BM", 16, 256), PowerOfTwo("BN", 32, 256), PowerOfTwo("BK", 32, 128),
...      PowerOfTwo("num_warps", 4, 8), IntRange("num_stages", 2, 5)],
...     constraints=[shared_memory_limit(), thread_limit()],
... )
>>> space.why_invalid({"BM": 256, "BN": 256, "BK": 128, "num_warps": 8, "num_stages": 5})
'shared memory: (BM*BK + BK*BN) * 2 B * num_stages = 655360 B > 232448 B'
>>> point = space.sample(np.random.default_rng(0))
>>> space.is_valid(point) and space.decode(space.encode(point)) == point
True
"""

# One module on purpose, though over 400 lines: the parameter types and the space share one encoding contract (sample,
# neighbours, encode/decode for samplers); splitting the parameter classes from the space would separate the two
# halves of that contract.

from __future__ import annotations

import itertools
import math
from abc import ABC
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any

import numpy as np

from evokernel.core.errors import SpaceError
from evokernel.core.geometry import Geometry
from evokernel.core.genome import Genome, Value

__all__ = [
    "Param",
    "Ordinal",
    "PowerOfTwo",
    "IntRange",
    "Boolean",
    "Choice",
    "Point",
    "Constraint",
    "SearchSpace",
    "shared_memory_limit",
    "thread_limit",
    "H200_SHARED_MEMORY_BYTES",
]

#: Shared memory a Triton kernel may use per block on an H200 (227 KiB).
H200_SHARED_MEMORY_BYTES = 227 * 1024


def _same(a: Value, b: Value) -> bool:
    """Equality that does not confuse True with 1 or 1 with "1"."""
    if isinstance(a, bool) or isinstance(b, bool):
        return isinstance(a, bool) and isinstance(b, bool) and a == b
    if isinstance(a, str) or isinstance(b, str):
        return isinstance(a, str) and isinstance(b, str) and a == b
    return a == b


def _native(value: Any) -> Any:
    """numpy scalars to Python scalars, so genomes encode canonically."""
    return value.item() if isinstance(value, np.generic) else value


class Param(ABC):
    """A parameter with a finite domain of values."""

    name: str
    values: tuple[Value, ...]
    ordered: bool = True
    kind: str = "param"

    def __init__(self, name: str, values: Iterable[Value], default: Value | None = None) -> None:
        vals = tuple(_native(v) for v in values)
        if not name or not isinstance(name, str):
            raise SpaceError(f"a parameter needs a non-empty name, got {name!r}")
        if not vals:
            raise SpaceError(f"parameter {name!r} has an empty domain")
        for i, a in enumerate(vals):
            if not isinstance(a, (bool, int, float, str)):
                raise SpaceError(f"parameter {name!r}: value {a!r} is not bool, int, float or str")
            if any(_same(a, b) for b in vals[:i]):
                raise SpaceError(f"parameter {name!r}: value {a!r} appears twice")
        self.name = name
        self.values = vals
        if default is not None and self.index(default) is None:
            raise SpaceError(f"parameter {name!r}: default {default!r} is not in its domain")
        self.default = vals[0] if default is None else self.values[self.index(default)]  # type: ignore[index]

    def __len__(self) -> int:
        return len(self.values)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.name!r}, {list(self.values)!r})"

    def index(self, value: Any) -> int | None:
        """Position of `value` in the domain, or None if it is not a member."""
        value = _native(value)
        for i, v in enumerate(self.values):
            if _same(v, value):
                return i
        return None

    def sample(self, rng: np.random.Generator) -> Value:
        return self.values[int(rng.integers(len(self.values)))]

    def neighbours(self, value: Value) -> list[Value]:
        """Values one step away: adjacent values if ordered, every other value if not."""
        i = self.index(value)
        if i is None:
            return []
        if not self.ordered:
            return [v for j, v in enumerate(self.values) if j != i]
        return [self.values[j] for j in (i - 1, i + 1) if 0 <= j < len(self.values)]

    @property
    def width(self) -> int:
        """How many numbers `encode` produces."""
        return 1 if self.ordered or len(self.values) == 1 else len(self.values)

    def encode(self, value: Value) -> list[float]:
        i = self.index(value)
        if i is None:
            raise SpaceError(f"{value!r} is not a value of parameter {self.name!r}")
        n = len(self.values)
        if self.width == 1:
            return [i / (n - 1) if n > 1 else 0.0]
        return [1.0 if j == i else 0.0 for j in range(n)]

    def decode(self, xs: Sequence[float]) -> Value:
        """The domain value nearest to an encoding (clipped; argmax for one-hot)."""
        n = len(self.values)
        if self.width == 1:
            x = float(xs[0])
            x = 0.0 if not math.isfinite(x) else min(max(x, 0.0), 1.0)
            return self.values[int(round(x * (n - 1)))]
        return self.values[int(np.argmax(np.asarray(xs, dtype=float)))]

    def describe(self) -> dict[str, Any]:
        return {"name": self.name, "kind": self.kind, "values": list(self.values), "default": self.default}


class Ordinal(Param):
    """Numbers with an order: neighbours are the adjacent values."""

    kind = "ordinal"

    def __init__(self, name: str, values: Iterable[int | float], default: Value | None = None) -> None:
        vals = [_native(v) for v in values]
        for v in vals:
            if isinstance(v, bool) or not isinstance(v, (int, float)):
                raise SpaceError(f"ordinal parameter {name!r}: {v!r} is not a number")
        super().__init__(name, sorted(vals), default)


class PowerOfTwo(Ordinal):
    """Powers of two from `low` to `high` inclusive."""

    kind = "power_of_two"

    def __init__(self, name: str, low: int, high: int, default: int | None = None) -> None:
        for bound in (low, high):
            if not isinstance(bound, int) or bound < 1 or bound & (bound - 1):
                raise SpaceError(f"parameter {name!r}: {bound!r} is not a power of two")
        if low > high:
            raise SpaceError(f"parameter {name!r}: low {low} > high {high}")
        super().__init__(name, [1 << e for e in range(low.bit_length() - 1, high.bit_length())], default)


class IntRange(Ordinal):
    """Integers `low, low+step, ..., high` (high inclusive)."""

    kind = "int_range"

    def __init__(self, name: str, low: int, high: int, step: int = 1, default: int | None = None) -> None:
        if step < 1 or low > high:
            raise SpaceError(f"parameter {name!r}: empty range {low}..{high} step {step}")
        super().__init__(name, range(low, high + 1, step), default)


class Boolean(Param):
    kind = "boolean"

    def __init__(self, name: str, default: bool = False) -> None:
        super().__init__(name, (False, True), default)


class Choice(Param):
    """Unordered options: every other option is a neighbour; encoded one-hot."""

    kind = "choice"
    ordered = False

    def __init__(self, name: str, options: Iterable[Value], default: Value | None = None) -> None:
        super().__init__(name, options, default)


class Point(dict):
    """A configuration handed to constraints: a dict that also reads as attributes (`p.BM`)."""

    def __getattr__(self, name: str) -> Any:
        try:
            return self[name]
        except KeyError:
            raise AttributeError(name) from None


ConstraintFn = Callable[[Point], "str | bool | None"]


class Constraint:
    """A named check. The function returns None or True when the point is valid, and a
    reason (a string) or False when it is not."""

    def __init__(self, check: ConstraintFn, name: str | None = None) -> None:
        self.check = check
        self.name = name or getattr(check, "__name__", "constraint")

    def __call__(self, point: Point) -> str | None:
        try:
            out = self.check(point)
        except Exception as exc:  # a broken constraint invalidates the point, with the reason
            return f"constraint {self.name!r} raised {type(exc).__name__}: {exc}"
        if out is None or out is True:
            return None
        if out is False:
            return f"violates {self.name}"
        return str(out)

    def __repr__(self) -> str:
        return f"Constraint({self.name!r})"


def shared_memory_limit(
    limit_bytes: int = H200_SHARED_MEMORY_BYTES,
    *,
    elem_bytes: int = 2,
    m: str = "BM",
    n: str = "BN",
    k: str = "BK",
    stages: str = "num_stages",
) -> Constraint:
    """`(BM*BK + BK*BN) * elem_bytes * num_stages` must fit in shared memory.

    On the recorded H200 matmul sweeps this predicts all 112 out-of-shared-memory failures
    and rules out 8 points that did run (all far from the optimum)."""

    def shared_memory(p: Point) -> str | None:
        need = (p[m] * p[k] + p[k] * p[n]) * elem_bytes * p[stages]
        if need > limit_bytes:
            return f"shared memory: ({m}*{k} + {k}*{n}) * {elem_bytes} B * {stages} = {need} B > {limit_bytes} B"
        return None

    return Constraint(shared_memory, "shared memory")


def thread_limit(max_threads: int = 1024, *, warps: str = "num_warps") -> Constraint:
    """`num_warps * 32` threads must not exceed the block limit."""

    def threads(p: Point) -> str | None:
        if p[warps] * 32 > max_threads:
            return f"threads: {warps} * 32 = {p[warps] * 32} > {max_threads}"
        return None

    return Constraint(threads, "threads")


class SearchSpace:
    """An ordered list of parameters and a list of constraints."""

    #: Spaces up to this many points may be enumerated (to find unseen valid points).
    ENUMERABLE = 200_000

    def __init__(
        self,
        params: Iterable[Param],
        constraints: Iterable[Constraint | ConstraintFn] = (),
        *,
        name: str = "space",
        geometry: Geometry | None = None,
    ) -> None:
        self.params: tuple[Param, ...] = tuple(params)
        #: how the parameters map to tiles of the problem (optional; the cost model's analytic
        #: features, `evokernel.core.geometry`)
        self.geometry = geometry
        if not self.params:
            raise SpaceError("a search space needs at least one parameter")
        names = [p.name for p in self.params]
        dupes = sorted({n for n in names if names.count(n) > 1})
        if dupes:
            raise SpaceError(f"parameter names appear twice: {', '.join(dupes)}")
        self.name = name
        self.constraints: list[Constraint] = []
        for c in constraints:
            self.add_constraint(c)
        self._by_name = {p.name: p for p in self.params}
        self._valid: list[dict[str, Value]] | None = None

    # -- declaration -------------------------------------------------------------------
    def add_constraint(self, check: Constraint | ConstraintFn, name: str | None = None) -> Constraint:
        c = check if isinstance(check, Constraint) else Constraint(check, name)
        self.constraints.append(c)
        self._valid = None
        return c

    def constraint(self, fn: ConstraintFn) -> ConstraintFn:
        """Decorator form of `add_constraint`."""
        self.add_constraint(fn)
        return fn

    # -- inspection --------------------------------------------------------------------
    @property
    def names(self) -> tuple[str, ...]:
        return tuple(p.name for p in self.params)

    def __getitem__(self, name: str) -> Param:
        return self._by_name[name]

    def __contains__(self, name: object) -> bool:
        return name in self._by_name

    @property
    def size(self) -> int:
        """Number of points before constraints."""
        return math.prod(len(p) for p in self.params)

    @property
    def dim(self) -> int:
        """Length of an encoded vector."""
        return sum(p.width for p in self.params)

    def default(self) -> dict[str, Value]:
        return {p.name: p.default for p in self.params}

    def describe(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "params": [p.describe() for p in self.params],
            "constraints": [c.name for c in self.constraints],
        }

    def __repr__(self) -> str:
        return f"SearchSpace({self.name!r}, {len(self.params)} params, {self.size} points)"

    # -- validity ----------------------------------------------------------------------
    def why_invalid(self, point: Mapping[str, Any]) -> str | None:
        """None if `point` is a valid configuration, else the reason it is not."""
        missing = [n for n in self.names if n not in point]
        if missing:
            return f"missing parameters: {', '.join(missing)}"
        extra = sorted(set(point) - set(self.names))
        if extra:
            return f"unknown parameters: {', '.join(extra)}"
        for p in self.params:
            if p.index(point[p.name]) is None:
                return f"{p.name}={point[p.name]!r} is not one of {list(p.values)}"
        view = Point(self.canonical(point))
        for c in self.constraints:
            reason = c(view)
            if reason is not None:
                return reason
        return None

    def is_valid(self, point: Mapping[str, Any]) -> bool:
        return self.why_invalid(point) is None

    def canonical(self, point: Mapping[str, Any]) -> dict[str, Value]:
        """The point with each value replaced by its domain member (64.0 -> 64), in space order."""
        out: dict[str, Value] = {}
        for p in self.params:
            i = p.index(point[p.name]) if p.name in point else None
            if i is None:
                raise SpaceError(f"{p.name}={point.get(p.name)!r} is not one of {list(p.values)}")
            out[p.name] = p.values[i]
        return out

    # -- moves -------------------------------------------------------------------------
    def sample(self, rng: np.random.Generator, *, tries: int = 1000) -> dict[str, Value]:
        """A uniformly random valid point (rejection sampling, then enumeration)."""
        reasons: dict[str, int] = {}
        for _ in range(tries):
            point = {p.name: p.sample(rng) for p in self.params}
            reason = self.why_invalid(point)
            if reason is None:
                return point
            reasons[reason.split(":")[0]] = reasons.get(reason.split(":")[0], 0) + 1
        valid = self.valid_points() if self.size <= self.ENUMERABLE else []
        if valid:
            return dict(valid[int(rng.integers(len(valid)))])
        top = ", ".join(f"{r} ({n}x)" for r, n in sorted(reasons.items(), key=lambda kv: -kv[1])[:3])
        raise SpaceError(f"search space {self.name!r} has no valid point (rejections: {top})")

    def neighbours(self, point: Mapping[str, Value]) -> list[dict[str, Value]]:
        """Valid points that differ from `point` in one parameter, by one step."""
        base = self.canonical(point)
        out = []
        for p in self.params:
            for v in p.neighbours(base[p.name]):
                cand = {**base, p.name: v}
                if self.is_valid(cand):
                    out.append(cand)
        return out

    def valid_points(self) -> list[dict[str, Value]]:
        """Every valid point, in lexicographic order (only for enumerable spaces)."""
        if self.size > self.ENUMERABLE:
            raise SpaceError(f"search space {self.name!r} has {self.size} points, too many to enumerate")
        if self._valid is None:
            self._valid = [pt for pt in self.points() if self.is_valid(pt)]
        return self._valid

    def points(self) -> Iterator[dict[str, Value]]:
        """Every point of the grid, valid or not."""
        for combo in itertools.product(*(p.values for p in self.params)):
            yield dict(zip(self.names, combo))

    # -- numeric view --------------------------------------------------------------------
    def encode(self, point: Mapping[str, Value]) -> np.ndarray:
        """A vector in [0, 1]^dim: ordered parameters by position, choices one-hot."""
        return np.array([x for p in self.params for x in p.encode(point[p.name])], dtype=float)

    def decode(self, vector: Sequence[float]) -> dict[str, Value]:
        """The nearest point of the grid to a vector (which may still violate a constraint)."""
        vec = np.asarray(vector, dtype=float).ravel()
        if vec.shape[0] != self.dim:
            raise SpaceError(f"vector has length {vec.shape[0]}, space {self.name!r} has dim {self.dim}")
        out, i = {}, 0
        for p in self.params:
            out[p.name] = p.decode(vec[i : i + p.width].tolist())
            i += p.width
        return out

    # -- genomes -----------------------------------------------------------------------
    def genome(self, point: Mapping[str, Any] | None = None, /, source: str | None = None, **values: Any) -> Genome:
        """A genome for a valid point; raises SpaceError with the reason otherwise."""
        merged = {**(point or {}), **values}
        reason = self.why_invalid(merged)
        if reason is not None:
            raise SpaceError(f"invalid point for {self.name!r}: {reason}")
        return Genome.of(self.canonical(merged), source)
