"""The fused RMSNorm family, in one folder: `space` (the tunables and their validity rules),
`template` (the Triton kernel and `candidate_source`), `seeds` (where a search starts) and
`problems/` (what the judge checks a candidate against).

>>> space = rmsnorm_space(hidden=4096)
>>> point = rmsnorm_seeds(4096)[0]
>>> space.is_valid(point) and "def kernel(x, w, residual=None)" in candidate_source(point)
True
"""

from pathlib import Path

from .seeds import rmsnorm_seeds
from .space import rmsnorm_class, rmsnorm_space
from .template import candidate_source

__all__ = ["rmsnorm_space", "rmsnorm_class", "rmsnorm_seeds", "candidate_source", "PROBLEMS"]

#: The folder of the family's problem files (`PROBLEMS / "rmsnorm_fp16.py"`).
PROBLEMS = Path(__file__).resolve().parent / "problems"
