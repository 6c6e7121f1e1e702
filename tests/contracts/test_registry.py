"""The registry the suites are fed from, and the packaging that carries it.

(Moved from tests/test_contracts.py; the mutator contract it held is test_mutators.py.)
"""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

from evokernel import Strategy
from evokernel.core.plugins import GROUPS, load, registered
from evokernel.engine.strategies import get_strategy, strategy_names


def test_the_built_in_plugins_are_registered():
    assert {"point", "crossover", "restart", "local", "optuna", "llm"} <= set(registered("evokernel.mutators"))
    assert {"replay", "kernel", "model", "sglang"} <= set(registered("evokernel.evaluators"))
    assert {"matmul", "gemm", "moe", "moe_shared", "attention", "decode"} <= set(registered("evokernel.search_spaces"))
    assert load("evokernel.search_spaces", "matmul")().name == "matmul"


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
    assert "[evokernel.strategies]" in entry_points and "optuna = evokernel.mutators.optuna_sampler" in entry_points
