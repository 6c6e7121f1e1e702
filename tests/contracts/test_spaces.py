"""Every registered search space passes the same contract suite.

A space is built by calling what its entry point names with no arguments. Its validity rules
must be consistent (every sampled point valid; a point's reason to be invalid the same
however it is asked; neighbours, the numeric view and genomes agree with them), its moves
must stay in the space, and the genomes it makes must be frozen.
"""

from __future__ import annotations

import copy
import json
import pickle

import numpy as np
import pytest

from evokernel import Genome, SearchSpace
from evokernel.core.errors import SpaceError

from ._components import build_space

SAMPLES = 40


def points(space: SearchSpace, seed: int = 0, n: int = SAMPLES) -> list[dict]:
    rng = np.random.default_rng(seed)
    return [space.sample(rng) for _ in range(n)]


def test_it_is_a_named_space_that_describes_itself(space_name: str):
    space = build_space(space_name)
    assert isinstance(space.name, str) and space.name
    assert len(set(space.names)) == len(space.names) and all(len(p) >= 1 for p in space.params)
    described = json.loads(json.dumps(space.describe()))
    assert [p["name"] for p in described["params"]] == list(space.names)
    assert build_space(space_name).describe() == space.describe()  # the same space every time: runs resume
    for p in space.params:
        assert p.index(p.default) is not None, f"{p.name}'s default {p.default!r} is not one of its values"


def test_every_sampled_point_is_valid_and_sampling_is_seeded(space_name: str):
    space = build_space(space_name)
    drawn = points(space)
    for point in drawn:
        assert space.why_invalid(point) is None and space.is_valid(point)
        assert space.canonical(point) == point and list(point) == list(space.names)
    assert points(space) == drawn
    assert points(space, seed=1) != drawn or space.size == 1


def test_validity_is_one_rule_asked_any_way(space_name: str):
    """Over raw grid points (constraints not applied): is_valid, why_invalid and genome()
    agree, and a reason is a non-empty line."""
    space = build_space(space_name)
    rng = np.random.default_rng(2)
    invalid = 0
    for _ in range(200):
        raw = {p.name: p.sample(rng) for p in space.params}
        reason = space.why_invalid(raw)
        assert space.is_valid(raw) == (reason is None)
        assert space.why_invalid(raw) == reason  # a pure function of the point
        if reason is None:
            assert space.genome(raw).params == space.canonical(raw)
        else:
            invalid += 1
            assert isinstance(reason, str) and reason.strip()
            with pytest.raises(SpaceError):
                space.genome(raw)
    first = space.names[0]
    assert "missing parameters" in space.why_invalid({k: v for k, v in points(space, n=1)[0].items() if k != first})
    assert "unknown parameters" in space.why_invalid({**points(space, n=1)[0], "__not_a_parameter__": 1})


def test_neighbours_are_valid_one_step_moves_and_symmetric(space_name: str):
    space = build_space(space_name)
    for point in points(space, n=10):
        for near in space.neighbours(point):
            assert space.is_valid(near)
            changed = [n for n in space.names if near[n] != point[n]]
            assert len(changed) == 1, changed
            [name] = changed
            assert near[name] in space[name].neighbours(point[name])
            assert point in space.neighbours(near)  # a step back is a step too


def test_the_numeric_view_round_trips(space_name: str):
    space = build_space(space_name)
    for point in points(space):
        vector = space.encode(point)
        assert vector.shape == (space.dim,) and np.all((vector >= 0) & (vector <= 1))
        assert space.decode(vector) == point


def test_genomes_are_frozen_and_content_addressed(space_name: str):
    space = build_space(space_name)
    point = points(space, n=1)[0]
    given = dict(point)
    genome = space.genome(given)
    given[space.names[0]] = "changed after the fact"
    assert genome.params == point  # the genome kept its own copy
    with pytest.raises((TypeError, AttributeError)):
        genome.params[space.names[0]] = point[space.names[0]]  # type: ignore[index]
    with pytest.raises((TypeError, AttributeError)):
        genome.params = {}  # type: ignore[misc]
    assert genome.id == space.genome(point).id == Genome.of(dict(reversed(list(point.items())))).id
    assert hash(genome) == hash(space.genome(point))
    for copied in (copy.deepcopy(genome), pickle.loads(pickle.dumps(genome)), Genome.decode(genome.encode())):
        assert copied == genome and copied.id == genome.id
    moved = genome.replace(**{space.names[0]: point[space.names[0]]})
    assert moved.id == genome.id and genome.params == point


def test_small_spaces_enumerate_exactly_their_valid_points(space_name: str):
    space = build_space(space_name)
    if space.size > 20_000:
        pytest.skip(f"{space.size} grid points: enumerating them is too slow for a contract test")
    valid = space.valid_points()
    assert valid and all(space.is_valid(p) for p in valid)
    keys = {tuple(p.values()) for p in valid}
    assert len(keys) == len(valid)
    assert all(tuple(p.values()) in keys for p in points(space))
