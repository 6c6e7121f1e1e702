"""Where results, lineage, elites and runs are kept. SQLite by default.

>>> store = open_store(":memory:")
>>> isinstance(store, Store), isinstance(store, CompleteStore)
(True, True)
"""

from __future__ import annotations

import os

from evokernel.core.errors import ConfigError
from evokernel.store._base import (
    CompleteStore,
    Evaluation,
    FindsRuns,
    ForgetsMeasured,
    Hit,
    KeepsKnowledge,
    KeepsProfiles,
    Located,
    RunInfo,
    Store,
)
from evokernel.store.sqlite import SQLiteStore

__all__ = [
    "Store",
    "CompleteStore",
    "ForgetsMeasured",
    "FindsRuns",
    "KeepsKnowledge",
    "KeepsProfiles",
    "Located",
    "RunInfo",
    "Hit",
    "Evaluation",
    "SQLiteStore",
    "open_store",
]


def open_store(url: str | os.PathLike[str], *, create: bool = True) -> Store:
    """A store from a path, `sqlite:///path`, or `:memory:`."""
    text = str(url)
    if text.startswith(("postgresql://", "postgres://")):
        raise ConfigError("the PostgreSQL store is not available yet; use an SQLite file (the default)")
    if text.startswith("sqlite:///"):
        text = text[len("sqlite:///") :]
    return SQLiteStore(text, create=create)
