"""Every registered mutator passes the same contract suite; packaging keeps the layout."""

from __future__ import annotations

import copy
import subprocess
import sys
import zipfile
from pathlib import Path

import numpy as np
import pytest

from evokernel import Genome, Mutator
from evokernel.core.archive import Archive
from evokernel.core.mutator import Context
from evokernel.core.plugins import load, registered
from evokernel.search_spaces import matmul_space

MUTATORS = sorted(registered("evokernel.mutators"))


def test_the_built_in_plugins_are_registered():
    assert {"point", "crossover", "restart"} <= set(MUTATORS)
    assert "replay" in registered("evokernel.evaluators")
    assert "matmul" in registered("evokernel.search_spaces")
    assert load("evokernel.search_spaces", "matmul")().name == "matmul"


@pytest.mark.parametrize("name", MUTATORS)
def test_mutator_contract(name: str):
    mutator = load("evokernel.mutators", name)()
    assert isinstance(mutator, Mutator) and mutator.name and mutator.arity in (0, 1, 2)
    space = matmul_space()
    rng = np.random.default_rng(0)
    made = 0
    for trial in range(50):
        parents = [Genome.of(space.sample(rng)) for _ in range(mutator.arity)]
        before = copy.deepcopy(parents)
        a = mutator.propose(parents, Context(space, np.random.default_rng(trial), 1, Archive()))
        b = mutator.propose(parents, Context(space, np.random.default_rng(trial), 1, Archive()))
        assert parents == before  # parents are not modified
        assert (a is None) == (b is None) and (a is None or a.id == b.id)  # deterministic for an rng
        if a is None:
            continue
        made += 1
        assert isinstance(a, Genome) and space.why_invalid(a.params) is None
        assert all(a.id != p.id for p in parents)  # a child differs from its parents
    assert made >= 40


def test_wheel_installs_only_the_evokernel_package(tmp_path: Path):
    root = Path(__file__).resolve().parents[1]
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-w", str(tmp_path), str(root)],
        check=True, capture_output=True, timeout=300,
    )
    [wheel] = tmp_path.glob("evokernel-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    tops = {n.split("/")[0] for n in names}
    assert tops == {"evokernel", wheel.name.split("-")[0] + "-" + wheel.name.split("-")[1] + ".dist-info"}
    for sub in ("search_spaces", "mutators", "evaluators", "store", "landscapes"):
        assert f"evokernel/{sub}/__init__.py" in names
    assert "evokernel/landscapes/matmul_bf16_h200_M16_N4096_K4096.csv" in names
    entry_points = zipfile.ZipFile(wheel).read(next(n for n in names if n.endswith("entry_points.txt"))).decode()
    assert "[evokernel.mutators]" in entry_points and "evokernel = evokernel.cli:main" in entry_points
