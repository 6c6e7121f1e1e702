"""The registry the suites are fed from, and the packaging that carries it.

(Moved from tests/test_contracts.py; the mutator contract it held is test_mutators.py.)
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from evokernel import Strategy
from evokernel.core.plugins import GROUPS, load, registered
from evokernel.engine.strategies import get_strategy, strategy_names


def test_the_built_in_plugins_are_registered():
    assert {"point", "crossover", "restart", "local", "optuna", "llm"} <= set(registered("evokernel.mutators"))
    assert {"replay", "kernel", "model", "sglang"} <= set(registered("evokernel.evaluators"))
    assert {"matmul", "gemm", "moe", "moe_shared", "attention", "decode"} <= set(registered("evokernel.search_spaces"))
    assert load("evokernel.search_spaces", "matmul")().name == "matmul"
    assert "triton_matmul" in registered("evokernel.templates")  # a render, not a space


def test_every_registered_plugin_loads():
    for group in GROUPS:
        for name in registered(group):
            assert load(group, name) is not None, (group, name)


def test_every_strategy_is_registered_and_builds_registered_mutators(strategy_name: str):
    strategy = get_strategy(strategy_name)
    assert isinstance(strategy, Strategy) and strategy.name == strategy_name
    assert load("evokernel.strategies", strategy_name) is strategy  # the registry names the object it uses
    shipped = {ep.value.split(":")[1] for ep in registered("evokernel.mutators").values()}
    for mutator in strategy.mutators(None):
        assert type(mutator).__name__ in shipped, f"{strategy_name} uses an unregistered {type(mutator).__name__}"
    assert set(strategy_names()) == set(registered("evokernel.strategies"))


def test_wheel_installs_only_the_evokernel_package(tmp_path: Path):
    root = Path(__file__).resolve().parents[2]
    # built from a copy of what the package is made of, so that setuptools' build/ folder
    # lands in the temporary directory, not in the checkout
    src = tmp_path / "src"
    src.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(root / name, src / name)
    for name in ("evokernel", "search_spaces", "mutators", "evaluators"):
        shutil.copytree(root / name, src / name, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-w", str(tmp_path), str(src)],
        check=True,
        capture_output=True,
        timeout=300,
    )
    [wheel] = tmp_path.glob("evokernel_search-*.whl")  # (the distribution evokernel-search)
    names = zipfile.ZipFile(wheel).namelist()
    tops = {n.split("/")[0] for n in names}
    assert tops == {"evokernel", wheel.name.split("-")[0] + "-" + wheel.name.split("-")[1] + ".dist-info"}
    for sub in ("search_spaces", "mutators", "evaluators", "store", "landscapes"):
        assert f"evokernel/{sub}/__init__.py" in names
    assert "evokernel/landscapes/matmul_bf16_h200_M16_N4096_K4096.csv" in names
    entry_points = zipfile.ZipFile(wheel).read(next(n for n in names if n.endswith("entry_points.txt"))).decode()
    assert "[evokernel.mutators]" in entry_points and "evokernel = evokernel.cli:main" in entry_points
    assert "[evokernel.strategies]" in entry_points and "optuna = evokernel.mutators.optuna_sampler" in entry_points


@pytest.mark.slow
def test_a_third_party_component_is_checked_by_adding_one_entry_point(tmp_path: Path):
    """A package that registers a mutator and an evaluator (here: a folder on the path with
    its metadata) gets the whole suites run on them, the evaluator built by its example();
    a broken mutator fails its suite."""
    (tmp_path / "third_party.py").write_text(
        "from evokernel import Genome, IntRange, Result, SearchSpace\n\n\n"
        "class Flip:\n"
        "    name, arity = 'flip', 1\n\n"
        "    def propose(self, parents, ctx):\n"
        "        p = dict(parents[0].params)\n"
        "        name = ctx.space.names[int(ctx.rng.integers(len(ctx.space.names)))]\n"
        "        options = ctx.space[name].neighbours(p[name])\n"
        "        p[name] = options[int(ctx.rng.integers(len(options)))]\n"
        "        return Genome.of(p) if ctx.space.is_valid(p) else None\n\n\n"
        "class Broken(Flip):\n"
        "    name = 'broken'\n\n"
        "    def propose(self, parents, ctx):\n"
        "        return parents[0]  # the parent itself: not a child\n\n\n"
        "class Sum:\n"
        "    name = 'sum'\n\n"
        "    def __init__(self, scale):\n"
        "        self.scale = scale\n"
        "        self.space = SearchSpace([IntRange('a', 1, 8), IntRange('b', 1, 8)], name='ab')\n\n"
        "    @classmethod\n"
        "    def example(cls):\n"
        "        return cls(0.5)\n\n"
        "    def fingerprint(self):\n"
        "        return {'evaluator': 'sum', 'scale': self.scale}\n\n"
        "    def evaluate(self, genomes):\n"
        "        return [Result.ok(self.scale * (g['a'] + g['b'])) for g in genomes]\n"
    )
    info = tmp_path / "third_party-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: third-party\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(
        "[evokernel.mutators]\nflip = third_party:Flip\nbroken = third_party:Broken\n\n"
        "[evokernel.evaluators]\nsum = third_party:Sum\n"
    )
    root = Path(__file__).resolve().parents[2]
    env = {**os.environ, "PYTHONPATH": str(tmp_path)}
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-v",
            "-p",
            "no:cacheprovider",
            "-o",
            "addopts=",
            str(root / "tests/contracts/test_mutators.py"),
            str(root / "tests/contracts/test_evaluators.py"),
            "-k",
            "flip or broken or sum",
        ],
        capture_output=True,
        text=True,
        timeout=600,
        env=env,
        cwd=root,
    )
    outcomes: dict[str, list[str]] = {"flip": [], "broken": [], "sum": []}
    for line in proc.stdout.splitlines():
        for name in outcomes:
            if f"[{name}] " in line and line.startswith("tests/"):
                outcomes[name].append(line.split()[1])
    assert len(outcomes["flip"]) >= 6 and set(outcomes["flip"]) == {"PASSED"}, proc.stdout[-3000:]
    assert "FAILED" in outcomes["broken"], proc.stdout[-3000:]
    assert outcomes["sum"].count("PASSED") >= 4 and "FAILED" not in outcomes["sum"], proc.stdout[-3000:]
