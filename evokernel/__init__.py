"""evokernel: evolutionary search that makes GPU kernels faster for the workload you serve.

>>> from evokernel import Search, Budget
>>> from evokernel.evaluators import ReplayEvaluator
>>> from evokernel.search_spaces import matmul_space, tile_class
>>> from evokernel.landscape import builtin
>>> evaluator = ReplayEvaluator(builtin("matmul_bf16_h200_M2048_N6144_K4096"))
>>> report = Search(matmul_space(), evaluator, descriptor=tile_class).run(Budget(evaluations=64), seed=1)
>>> report.evaluations
64
"""

from .archive import Archive, Elite, Verdict
from .errors import ConfigError, EvaluatorError, EvokernelError, LandscapeError, SpaceError, StoreError
from .evaluator import Evaluator
from .genome import Genome, Lineage
from .landscape import Landscape
from .mutator import Context, Mutator
from .result import Result, Status
from .search import Budget, Individual, Observer, ReportedElite, Search, SearchOptions, SearchReport
from .space import (
    Boolean,
    Choice,
    Constraint,
    IntRange,
    Ordinal,
    Param,
    PowerOfTwo,
    SearchSpace,
    shared_memory_limit,
    thread_limit,
)
from .store import SQLiteStore, Store, open_store
from .strategies import Strategy, get_strategy, strategy_names

__version__ = "0.1.0"

__all__ = [
    "Archive", "Elite", "Verdict",
    "ConfigError", "EvaluatorError", "EvokernelError", "LandscapeError", "SpaceError", "StoreError",
    "Evaluator", "Genome", "Lineage", "Landscape", "Context", "Mutator", "Result", "Status",
    "Budget", "Individual", "Observer", "ReportedElite", "Search", "SearchOptions", "SearchReport",
    "Boolean", "Choice", "Constraint", "IntRange", "Ordinal", "Param", "PowerOfTwo", "SearchSpace",
    "shared_memory_limit", "thread_limit",
    "SQLiteStore", "Store", "open_store", "Strategy", "get_strategy", "strategy_names",
]
