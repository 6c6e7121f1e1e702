"""Old import paths of modules that moved (into subsystems, and kernel families into folders), kept for one release.

`import evokernel.gate` (or `from evokernel.gate import Gate`) still works: it gives the module
at its new place (`evokernel.judge.gate`), the same module object, with a DeprecationWarning
naming the new path. `evokernel/__init__.py` installs the finder; `MOVED` lists every move.

>>> import sys, warnings
>>> _ = sys.modules.pop("evokernel.gate", None)
>>> with warnings.catch_warnings(record=True) as caught:
...     warnings.simplefilter("always")
...     import evokernel.gate as old
>>> import evokernel.judge.gate as new
>>> old is new, caught[0].category.__name__, "evokernel.judge.gate" in str(caught[0].message)
(True, 'DeprecationWarning', True)
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.util
import sys
import warnings
from types import ModuleType
from typing import Any

#: old module name -> new module name
MOVED: dict[str, str] = {
    "evokernel.genome": "evokernel.core.genome",
    "evokernel.result": "evokernel.core.result",
    "evokernel.space": "evokernel.core.space",
    "evokernel.mutator": "evokernel.core.mutator",
    "evokernel.evaluator": "evokernel.core.evaluator",
    "evokernel.archive": "evokernel.core.archive",
    "evokernel.errors": "evokernel.core.errors",
    "evokernel.template": "evokernel.core.template",
    "evokernel.plugins": "evokernel.core.plugins",
    "evokernel.search": "evokernel.engine.search",
    "evokernel.strategies": "evokernel.engine.strategies",
    "evokernel.bandit": "evokernel.engine.bandit",
    "evokernel.learned": "evokernel.engine.learned",
    "evokernel.transfer": "evokernel.engine.transfer",
    "evokernel.sweep": "evokernel.engine.sweep",
    "evokernel.landscape": "evokernel.engine.landscape",
    "evokernel.problem": "evokernel.judge.problem",
    "evokernel.candidate": "evokernel.judge.candidate",
    "evokernel.gate": "evokernel.judge.gate",
    "evokernel.sandbox": "evokernel.judge.sandbox",
    "evokernel._worker": "evokernel.judge._worker",
    "evokernel._isolation": "evokernel.judge._isolation",
    "evokernel._preload": "evokernel.judge._preload",
    "evokernel.bench": "evokernel.judge.timing",
    "evokernel.footing": "evokernel.judge.footing",
    "evokernel.hardware": "evokernel.judge.hardware",
    "evokernel.env": "evokernel.judge.env",
    "evokernel.toolcache": "evokernel.judge.toolcache",
    "evokernel.launch": "evokernel.runtime.launch",
    "evokernel.knowledge": "evokernel.store.knowledge",
    "evokernel.sglang_plugin": "evokernel.integrations.sglang.plugin",
    "evokernel.sglang_bench": "evokernel.integrations.sglang.driver",
    "evokernel.export": "evokernel.integrations.sglang.export",
    "evokernel.model_level": "evokernel.model.model_level",
    "evokernel.ablation": "evokernel.model.ablation",
    "evokernel.profile": "evokernel.model.profile",
    "evokernel.workload": "evokernel.model.workload",
    "evokernel.cascade": "evokernel.model.cascade",
    # one folder per kernel family (search_spaces/<family>/); the old flat modules
    # evokernel.search_spaces.{matmul,gemm,moe,attention} are those packages now
    "evokernel.search_spaces.triton_matmul": "evokernel.search_spaces.matmul.template",
    "evokernel.search_spaces.triton_gemm": "evokernel.search_spaces.gemm.template",
    "evokernel.search_spaces.gluon_gemm": "evokernel.search_spaces.gemm.template_gluon",
    "evokernel.search_spaces.gemm_fp8": "evokernel.search_spaces.gemm.space_fp8",
    "evokernel.search_spaces.triton_gemm_fp8": "evokernel.search_spaces.gemm.template_fp8",
    "evokernel.search_spaces.triton_fused": "evokernel.search_spaces.fused.kernels",
    "evokernel.search_spaces.triton_moe": "evokernel.search_spaces.moe.template",
    "evokernel.search_spaces.sglang": "evokernel.search_spaces.moe.sglang",
    "evokernel.search_spaces.triton_attention": "evokernel.search_spaces.attention.template_prefill",
    "evokernel.search_spaces.triton_decode": "evokernel.search_spaces.attention.template_decode",
}


class _MovedFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Finds an old module name of `MOVED` and loads it as the module at its new name."""

    def __init__(self) -> None:
        self._specs: dict[str, importlib.machinery.ModuleSpec | None] = {}

    def find_spec(self, name: str, path: Any = None, target: Any = None) -> importlib.machinery.ModuleSpec | None:
        if name not in MOVED:
            return None
        return importlib.util.spec_from_loader(name, self)

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType:
        new = MOVED[spec.name]
        warnings.warn(
            f"{spec.name} moved to {new}; the old name goes in the next release", DeprecationWarning, stacklevel=2
        )
        module = importlib.import_module(new)
        self._specs[spec.name] = module.__spec__
        return module

    def exec_module(self, module: ModuleType) -> None:
        # (the import machinery set the module's __spec__ to the old name's: put its own back)
        module.__spec__ = self._specs.get(module.__spec__.name, module.__spec__)


def install() -> None:
    """Put the finder on `sys.meta_path` (once)."""
    if not any(isinstance(f, _MovedFinder) for f in sys.meta_path):
        sys.meta_path.append(_MovedFinder())
