"""Property tests of search spaces: random points are valid, encodings round-trip,
neighbours are valid and one step away."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from evokernel import Boolean, Choice, IntRange, Ordinal, PowerOfTwo, SearchSpace, SpaceError
from evokernel.engine.landscape import Landscape, builtin, builtin_names
from evokernel.search_spaces import matmul_space
from evokernel.core.space import Param, shared_memory_limit, thread_limit


@st.composite
def params(draw: st.DrawFn, name: str) -> Param:
    kind = draw(st.sampled_from(["pow2", "range", "bool", "choice", "ordinal"]))
    if kind == "pow2":
        lo = draw(st.integers(0, 6))
        return PowerOfTwo(name, 1 << lo, 1 << draw(st.integers(lo, lo + 5)))
    if kind == "range":
        lo = draw(st.integers(-5, 5))
        return IntRange(name, lo, lo + draw(st.integers(0, 9)), step=draw(st.integers(1, 3)))
    if kind == "bool":
        return Boolean(name)
    if kind == "choice":
        opts = draw(
            st.lists(
                st.sampled_from(["a", "b", "c", "d", 3, 2.5, True]),
                min_size=1,
                max_size=5,
                unique_by=lambda v: (type(v), v),
            )
        )
        return Choice(name, opts)
    return Ordinal(name, draw(st.lists(st.floats(-10, 10, allow_nan=False), min_size=1, max_size=6, unique=True)))


@st.composite
def spaces(draw: st.DrawFn) -> SearchSpace:
    n = draw(st.integers(1, 5))
    ps = [draw(params(f"p{i}")) for i in range(n)]
    space = SearchSpace(ps)
    if draw(st.booleans()):
        # a constraint that keeps at least the default point valid
        first = ps[0]
        banned = draw(st.sampled_from(first.values))
        if banned != first.default or len(first.values) == 1:
            space.add_constraint(lambda p, b=banned, n=first.name: p[n] != b or f"{n} may not be {b}", "ban")
    return space


@settings(max_examples=150, deadline=None)
@given(spaces(), st.integers(0, 2**32 - 1))
def test_random_points_are_valid_and_round_trip(space: SearchSpace, seed: int):
    rng = np.random.default_rng(seed)
    try:
        point = space.sample(rng)
    except SpaceError:
        assert not space.valid_points()
        return
    assert space.why_invalid(point) is None
    vec = space.encode(point)
    assert vec.shape == (space.dim,) and np.all((0 <= vec) & (vec <= 1))
    assert space.decode(vec) == point
    assert space.genome(point).params == dict(sorted(point.items()))


@settings(max_examples=150, deadline=None)
@given(spaces(), st.integers(0, 2**32 - 1))
def test_neighbours_are_valid_and_one_step_away(space: SearchSpace, seed: int):
    rng = np.random.default_rng(seed)
    try:
        point = space.sample(rng)
    except SpaceError:
        return
    for nb in space.neighbours(point):
        assert space.is_valid(nb)
        changed = [n for n in space.names if nb[n] != point[n] or type(nb[n]) is not type(point[n])]
        assert len(changed) == 1
        p = space[changed[0]]
        if p.ordered:
            assert abs(p.index(nb[p.name]) - p.index(point[p.name])) == 1


@settings(max_examples=100, deadline=None)
@given(spaces(), st.lists(st.floats(-3, 3, allow_nan=False), min_size=30, max_size=30))
def test_decode_of_any_vector_lands_on_the_grid(space: SearchSpace, xs: list[float]):
    point = space.decode(xs[: space.dim])
    assert all(space[n].index(v) is not None for n, v in point.items())


def test_params_and_their_domains():
    assert PowerOfTwo("BM", 16, 256).values == (16, 32, 64, 128, 256)
    assert IntRange("s", 2, 5).values == (2, 3, 4, 5)
    assert IntRange("r", 24, 40, step=8).values == (24, 32, 40)
    assert Boolean("tma").values == (False, True)
    assert Choice("layout", ["row", "col"]).neighbours("row") == ["col"]
    assert PowerOfTwo("BM", 16, 256).neighbours(16) == [32]
    assert PowerOfTwo("BM", 16, 256).neighbours(64) == [32, 128]
    assert Boolean("x").index(1) is None and IntRange("i", 0, 2).index(True) is None


@pytest.mark.parametrize(
    "make",
    [
        lambda: PowerOfTwo("x", 3, 8),
        lambda: PowerOfTwo("x", 64, 16),
        lambda: IntRange("x", 5, 1),
        lambda: Choice("x", []),
        lambda: Choice("x", ["a", "a"]),
        lambda: Ordinal("x", ["a"]),
        lambda: Choice("", ["a"]),
        lambda: Choice("x", [[1]]),
        lambda: SearchSpace([]),
        lambda: SearchSpace([Boolean("x"), Boolean("x")]),
        lambda: IntRange("x", 0, 3, default=7),
    ],
)
def test_bad_declarations_raise_space_error(make):
    with pytest.raises(SpaceError):
        make()


def test_constraints_give_reasons():
    space = SearchSpace(
        [
            PowerOfTwo("BM", 16, 256),
            PowerOfTwo("BN", 16, 256),
            PowerOfTwo("BK", 32, 128),
            IntRange("num_stages", 1, 5),
            PowerOfTwo("num_warps", 1, 64),
        ],
        constraints=[shared_memory_limit(), thread_limit()],
    )
    ok = {"BM": 128, "BN": 128, "BK": 64, "num_stages": 3, "num_warps": 8}
    assert space.why_invalid(ok) is None
    assert "shared memory" in space.why_invalid({**ok, "BM": 256, "BN": 256, "num_stages": 5})
    assert space.why_invalid({**ok, "num_warps": 64}) == "threads: num_warps * 32 = 2048 > 1024"
    assert "missing parameters: BK" in space.why_invalid({k: v for k, v in ok.items() if k != "BK"})
    assert "unknown parameters: BX" in space.why_invalid({**ok, "BX": 1})
    assert "BM=100 is not one of" in space.why_invalid({**ok, "BM": 100})
    with pytest.raises(SpaceError, match="shared memory"):
        space.genome({**ok, "BM": 256, "BN": 256, "num_stages": 5})


def test_constraint_styles_and_a_broken_constraint():
    space = SearchSpace([IntRange("x", 0, 9)])

    @space.constraint
    def even(p):
        return p.x % 2 == 0  # False -> generic reason

    space.add_constraint(lambda p: None if p["x"] < 8 else f"x={p['x']} too big", "small")
    assert space.why_invalid({"x": 3}) == "violates even"
    assert space.why_invalid({"x": 8}) == "x=8 too big"
    assert [p["x"] for p in space.valid_points()] == [0, 2, 4, 6]
    space.add_constraint(lambda p: 1 / 0, "broken")
    assert "constraint 'broken' raised ZeroDivisionError" in space.why_invalid({"x": 2})
    with pytest.raises(SpaceError, match="no valid point"):
        space.sample(np.random.default_rng(0))


def test_sampling_is_uniform_over_valid_points_and_seeded():
    space = matmul_space()
    a = [space.sample(np.random.default_rng(7)) for _ in range(3)]
    b = [space.sample(np.random.default_rng(7)) for _ in range(3)]
    assert a == b
    rng = np.random.default_rng(0)
    seen = {tuple(space.sample(rng).values()) for _ in range(3000)}
    assert len(seen) > 0.9 * len(space.valid_points())


@pytest.mark.parametrize("name", [n for n in builtin_names() if n.startswith("matmul_")])
def test_matmul_space_predicts_every_recorded_shared_memory_failure(name):
    landscape = Landscape.load(builtin(name))
    space = matmul_space()
    assert space.names and set(space.names) == set(landscape.space.names)
    for point in landscape.space.points():
        row = landscape.lookup(point)
        if row.error:
            assert "shared memory" in (space.why_invalid(point) or "")
    # and the optimum of every landscape is a valid point of the declared space
    assert space.is_valid(landscape.optimum()[0])
