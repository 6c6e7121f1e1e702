"""evokernel: evolutionary search that makes GPU kernels faster for the workload you serve.

>>> from evokernel import Search, Budget
>>> from evokernel.evaluators import ReplayEvaluator
>>> from evokernel.search_spaces import matmul_space, tile_class
>>> from evokernel.engine.landscape import builtin
>>> evaluator = ReplayEvaluator(builtin("matmul_bf16_h200_M2048_N6144_K4096"))
>>> report = Search(matmul_space(), evaluator, descriptor=tile_class).run(Budget(evaluations=64), seed=1)
>>> report.evaluations
64
"""

from evokernel.core.archive import Archive, Elite, Verdict
from evokernel.core.errors import ConfigError, EvaluatorError, EvokernelError, LandscapeError, SpaceError, StoreError
from evokernel.core.evaluator import Evaluator
from evokernel.core.genome import Genome, Lineage
from evokernel.engine.landscape import Landscape
from evokernel.core.mutator import Context, Mutator
from evokernel.core.result import Result, Status
from evokernel.engine.assemble import SearchSpec, assemble
from evokernel.engine.options import Promotion
from evokernel.engine.search import Budget, Individual, Observer, ReportedElite, Search, SearchOptions, SearchReport
from evokernel.core.space import (
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
from evokernel.store import SQLiteStore, Store, open_store
from evokernel.engine.strategies import Strategy, get_strategy, strategy_names

__version__ = "0.1.0"

__all__ = [
    "Archive",
    "Elite",
    "Verdict",
    "ConfigError",
    "EvaluatorError",
    "EvokernelError",
    "LandscapeError",
    "SpaceError",
    "StoreError",
    "Evaluator",
    "Genome",
    "Lineage",
    "Landscape",
    "Context",
    "Mutator",
    "Result",
    "Status",
    "Budget",
    "Individual",
    "Observer",
    "ReportedElite",
    "Search",
    "SearchOptions",
    "SearchReport",
    "Promotion",
    "SearchSpec",
    "assemble",
    "Boolean",
    "Choice",
    "Constraint",
    "IntRange",
    "Ordinal",
    "Param",
    "PowerOfTwo",
    "SearchSpace",
    "shared_memory_limit",
    "thread_limit",
    "SQLiteStore",
    "Store",
    "open_store",
    "Strategy",
    "get_strategy",
    "strategy_names",
]
