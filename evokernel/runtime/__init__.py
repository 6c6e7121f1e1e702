"""What runs searches and kernels: launching compiled Triton kernels cheaply (`launch`), and
spreading evaluations and searches over the GPUs of a Ray cluster (`RayEvaluator`, `fan_out`).

The Ray parts load Ray only when used (`pip install 'evokernel-search[ray]'`): importing this package
imports neither Ray nor Triton.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from evokernel.runtime.fanout import SearchSummary, fan_out
    from evokernel.runtime.ray import RayEvaluator

__all__ = ["RayEvaluator", "fan_out", "SearchSummary"]

_LAZY = {
    "RayEvaluator": "evokernel.runtime.ray",
    "fan_out": "evokernel.runtime.fanout",
    "SearchSummary": "evokernel.runtime.fanout",
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'evokernel.runtime' has no attribute {name!r}")
