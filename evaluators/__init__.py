"""Evaluators: turn genomes into results.

- `ReplayEvaluator` replays a recorded landscape (CPU, no GPU needed);
- `KernelEvaluator` runs each candidate in a sandbox through the correctness gate and the
  timing harness (CPU through the Triton interpreter, or CUDA).
"""

from .kernel import KernelEvaluator
from .replay import ReplayEvaluator

__all__ = ["KernelEvaluator", "ReplayEvaluator"]
