"""Errors a user can act on. The CLI prints them as one line, never a traceback."""

from __future__ import annotations

__all__ = [
    "EvokernelError",
    "SpaceError",
    "LandscapeError",
    "StoreError",
    "RunBusyError",
    "ConfigError",
    "PluginError",
    "EvaluatorError",
]


class EvokernelError(Exception):
    """Base class: a problem with the user's input or setup, explained in one line."""


class SpaceError(EvokernelError, ValueError):
    """An invalid search space or point."""


class LandscapeError(EvokernelError, ValueError):
    """A missing or malformed recorded landscape."""


class StoreError(EvokernelError):
    """The results database cannot be opened or is not an evokernel store."""


class RunBusyError(StoreError):
    """The same run (same search, same seed, same database) is already going on in another process.

    Refused rather than waited for or joined: starting the same command twice is almost
    always a mistake, waiting would hang a second terminal silently for the whole search,
    and joining would make the run's choices depend on which process measured what (a run
    is deterministic for its seed). Once the first finishes, the same command reads its
    results back in seconds."""


class ConfigError(EvokernelError, ValueError):
    """A bad option: unknown strategy, zero budget, a target file that defines nothing."""


class PluginError(EvokernelError):
    """A registered plugin that cannot be loaded."""


class EvaluatorError(EvokernelError):
    """The evaluator itself failed (not a candidate): the run stops and can be resumed."""
