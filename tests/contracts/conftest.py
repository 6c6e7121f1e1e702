"""The contract suites' parameters: the registry's names, and the stores to check.

A test that takes `mutator_name`, `evaluator_name` or `space_name` runs once per component
registered in that entry-point group; one that takes `store` once per store back end.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from evokernel.store import Store, open_store

from ._components import STORES, names

_GROUPS = {
    "mutator_name": "evokernel.mutators",
    "evaluator_name": "evokernel.evaluators",
    "space_name": "evokernel.search_spaces",
    "strategy_name": "evokernel.strategies",
}


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    for arg, group in _GROUPS.items():
        if arg in metafunc.fixturenames:
            metafunc.parametrize(arg, names(group))


@pytest.fixture(params=sorted([*STORES, "postgres"]))
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """Where a store of each back end lives (`_components.STORES`, and a fresh database on the
    tests' PostgreSQL server)."""
    if request.param == "postgres":
        return request.getfixturevalue("pg_url")
    return STORES[request.param](tmp_path)


@pytest.fixture
def store(store_url: str) -> Iterator[Store]:
    s = open_store(store_url)
    try:
        yield s
    finally:
        s.close()
