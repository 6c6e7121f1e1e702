"""Evaluators: turn genomes into results.

- `ReplayEvaluator` replays a recorded landscape (CPU, no GPU needed);
- `KernelEvaluator` runs each candidate in a sandbox through the correctness gate and the
  timing harness (CPU through the Triton interpreter, or CUDA);
- `Cascade` judges through fidelity levels, cheapest first, promoting the promising genomes.

Any other evaluator this package registers (the `evokernel.evaluators` entry points:
`ModelEvaluator`, `SGLangEvaluator`) is given by its class name, loaded on first use:

>>> from evokernel.evaluators import SGLangEvaluator
>>> SGLangEvaluator.__module__
'evokernel.evaluators.sglang'
"""

from typing import Any

from .cascade import Cascade
from .kernel import KernelEvaluator
from .replay import ReplayEvaluator

__all__ = ["Cascade", "KernelEvaluator", "ReplayEvaluator"]


def __getattr__(name: str) -> Any:
    """An evaluator of this package that the registry names, by its class name."""
    if not name.startswith("_"):
        from evokernel.core.plugins import registered

        for ep in registered("evokernel.evaluators").values():
            module, _, attr = ep.value.partition(":")
            if attr == name and module.startswith(__name__ + "."):
                return ep.load()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
