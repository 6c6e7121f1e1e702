"""Evaluators: turn genomes into results. `ReplayEvaluator` replays a recorded landscape."""

from .replay import ReplayEvaluator

__all__ = ["ReplayEvaluator"]
