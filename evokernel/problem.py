"""Problems: what a kernel must compute, on which shapes, within which tolerance.

A problem is a Python module with:

- `make_inputs(shape: dict, seed: int, device: str) -> tuple[Tensor, ...]`: fresh random inputs;
- `reference(*inputs)`: a tensor or a tuple of tensors, the ground truth;
- `SHAPES`: the shapes the search tunes on (a list of dicts);
- optional `HELDOUT_SHAPES` (checked by the gate, never tuned on), `TOLERANCE` (`{"rtol":
  .., "atol": ..}` or such a dict per dtype name, e.g. `{"bfloat16": {...}}`),
  `flops(shape)` / `bytes(shape)` for roofline figures, and `PERTURB` (elements of each
  floating-point input the timing harness changes before every timed call, default 8; 0
  where such inputs carry structure), and `FAMILY` (the kernel this problem is one shape
  of, default the module's name: searches on other shapes of a family seed each other),
  and `WEIGHTS` (how much each tuning shape matters, e.g. its share of the traffic from
  `evokernel.workload`: positive floats aligned with SHAPES, or a dict keyed by each shape's
  `M`; with it a candidate's latency is the weighted mean of its shapes' medians).

A candidate is a Python module with `kernel(*inputs)` returning the same structure.

>>> import textwrap, tempfile, pathlib
>>> src = textwrap.dedent('''
...     import torch
...     SHAPES = [{"n": 8}]
...     def make_inputs(shape, seed, device):
...         g = torch.Generator().manual_seed(seed)
...         return (torch.randn(shape["n"], generator=g).to(device),)
...     def reference(x):
...         return x * 2
... ''')
>>> path = pathlib.Path(tempfile.mkdtemp()) / "double.py"
>>> _ = path.write_text(src)
>>> p = Problem.load(path)
>>> p.name, p.shapes, p.tolerance("float32")
('double', [{'n': 8}], {'rtol': 1e-05, 'atol': 1e-05})
"""

from __future__ import annotations

import hashlib
import importlib.util
import math
import os
import sys
from collections.abc import Callable, Mapping
from pathlib import Path
from types import ModuleType
from typing import Any

from .errors import ConfigError, EvokernelError
from .genome import canonical_json

__all__ = ["Problem", "ProblemError", "DEFAULT_TOLERANCE", "load_module", "shape_key"]


class ProblemError(EvokernelError, ValueError):
    """A problem module that does not keep the problem contract."""


#: Per-dtype defaults, used where the problem sets no TOLERANCE.
DEFAULT_TOLERANCE: dict[str, dict[str, float]] = {
    "float64": {"rtol": 1e-7, "atol": 1e-7},
    "float32": {"rtol": 1e-5, "atol": 1e-5},
    "float16": {"rtol": 1e-3, "atol": 1e-3},
    "bfloat16": {"rtol": 1.6e-2, "atol": 1e-2},
    "float8_e4m3fn": {"rtol": 1.25e-1, "atol": 1e-1},
    "float8_e5m2": {"rtol": 2.5e-1, "atol": 1e-1},
}


def shape_key(shape: Mapping[str, Any]) -> str:
    """A shape's name in tables and per-shape results: `M=16,N=4096,K=4096`."""
    return ",".join(f"{k}={v}" for k, v in shape.items())


def load_module(path: str | os.PathLike[str], *, prefix: str = "_evokernel_mod") -> ModuleType:
    """Import a Python file as a fresh module (its folder on sys.path while it loads)."""
    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"no such file: {path}")
    digest = hashlib.sha256(str(path.resolve()).encode()).hexdigest()[:12]
    name = f"{prefix}_{digest}"
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise ConfigError(f"{path}: cannot be loaded as a Python module")
    module = importlib.util.module_from_spec(spec)
    sys.path.insert(0, str(path.parent.resolve()))
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    finally:
        sys.path.remove(str(path.parent.resolve()))
    return module


class Problem:
    """A loaded, validated problem module."""

    def __init__(self, module: ModuleType, path: str = "") -> None:
        self.module = module
        self.path = path
        self.name = Path(path).stem if path else module.__name__
        where = path or module.__name__
        for attr in ("make_inputs", "reference"):
            if not callable(getattr(module, attr, None)):
                raise ProblemError(f"{where}: defines no function `{attr}`")
        self.make_inputs: Callable[..., tuple[Any, ...]] = module.make_inputs
        self.reference: Callable[..., Any] = module.reference
        self.shapes = self._shapes(getattr(module, "SHAPES", None), "SHAPES", where, required=True)
        self.heldout = self._shapes(getattr(module, "HELDOUT_SHAPES", []), "HELDOUT_SHAPES", where)
        self._tolerance = getattr(module, "TOLERANCE", None)
        if self._tolerance is not None and not isinstance(self._tolerance, Mapping):
            raise ProblemError(f"{where}: TOLERANCE must be a dict")
        # elements of each floating-point input changed before every timed call (0 for problems
        # whose floating-point inputs carry structure that a changed element would break)
        self.perturb = int(getattr(module, "PERTURB", 8))
        #: the kernel family for transfer across shapes (problems of one kernel on other shapes)
        self.family = str(getattr(module, "FAMILY", self.name))
        #: relative weight of each tuning shape (aligned with `shapes`), None where unweighted
        self.weights = self._weights(getattr(module, "WEIGHTS", None), self.shapes, where)
        self._flops = getattr(module, "flops", None)
        self._bytes = getattr(module, "bytes", None)

    @staticmethod
    def _shapes(value: Any, attr: str, where: str, *, required: bool = False) -> list[dict[str, Any]]:
        if value is None or (required and not value):
            raise ProblemError(f"{where}: {attr} must be a non-empty list of shape dicts")
        if not isinstance(value, (list, tuple)) or not all(isinstance(s, Mapping) for s in value):
            raise ProblemError(f"{where}: {attr} must be a list of dicts")
        return [dict(s) for s in value]

    @staticmethod
    def _weights(value: Any, shapes: list[dict[str, Any]], where: str) -> list[float] | None:
        if value is None:
            return None
        if isinstance(value, Mapping):
            if not all("M" in s for s in shapes):
                raise ProblemError(f"{where}: WEIGHTS is keyed by M, but not every shape has an M")
            missing = [s["M"] for s in shapes if s["M"] not in value]
            if missing:
                raise ProblemError(f"{where}: WEIGHTS has no weight for M={missing[0]}")
            extra = sorted(set(value) - {s["M"] for s in shapes}, key=str)
            if extra:
                raise ProblemError(f"{where}: WEIGHTS names M={extra[0]}, which no shape has")
            value = [value[s["M"]] for s in shapes]
        if not isinstance(value, (list, tuple)) or len(value) != len(shapes):
            n = len(value) if isinstance(value, (list, tuple)) else type(value).__name__
            raise ProblemError(f"{where}: WEIGHTS must be {len(shapes)} numbers (one per shape) or a dict by M, "
                               f"got {n}")
        out = []
        for i, w in enumerate(value):
            try:
                w = float(w)
            except (TypeError, ValueError):
                raise ProblemError(f"{where}: WEIGHTS[{i}] is not a number: {w!r}") from None
            if not (w > 0 and math.isfinite(w)):
                raise ProblemError(f"{where}: WEIGHTS[{i}] must be positive and finite, got {w}")
            out.append(w)
        return out

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> Problem:
        try:
            module = load_module(path, prefix="_evokernel_problem")
        except EvokernelError:
            raise
        except Exception as exc:
            raise ProblemError(f"{path}: {type(exc).__name__}: {exc}") from None
        return cls(module, str(path))

    def tolerance(self, dtype: str) -> dict[str, float]:
        """rtol and atol for outputs of a dtype (`"bfloat16"`, `"float32"`, ...)."""
        tol = self._tolerance
        if tol is not None:
            if "rtol" in tol or "atol" in tol:
                return {"rtol": float(tol.get("rtol", 0.0)), "atol": float(tol.get("atol", 0.0))}
            if dtype in tol:
                sub = tol[dtype]
                return {"rtol": float(sub.get("rtol", 0.0)), "atol": float(sub.get("atol", 0.0))}
        return dict(DEFAULT_TOLERANCE.get(dtype, {"rtol": 1e-5, "atol": 1e-5}))

    def flops(self, shape: Mapping[str, Any]) -> float | None:
        return float(self._flops(dict(shape))) if self._flops else None

    def bytes(self, shape: Mapping[str, Any]) -> float | None:
        return float(self._bytes(dict(shape))) if self._bytes else None

    def roofline_floor_ms(self, shape: Mapping[str, Any], *, flops_per_s: float, bytes_per_s: float) -> float | None:
        """The least time the work can take at the given peak rates (None if unknown)."""
        f, b = self.flops(shape), self.bytes(shape)
        if f is None and b is None:
            return None
        t = max((f or 0.0) / flops_per_s, (b or 0.0) / bytes_per_s)
        return t * 1e3 if t > 0 and math.isfinite(t) else None

    def fingerprint(self) -> dict[str, Any]:
        """What results depend on: the problem's source text, its shapes and their weights."""
        src = Path(self.path).read_bytes() if self.path and os.path.exists(self.path) else b""
        fp = {
            "problem": self.name,
            "source": hashlib.sha256(src).hexdigest()[:16],
            "shapes": hashlib.sha256(canonical_json(self.shapes)).hexdigest()[:16],
        }
        if self.weights is not None:  # absent when unweighted: older runs keep their identity
            total = sum(self.weights)  # normalised: only the shares change a latency
            shares = [round(w / total, 12) for w in self.weights]
            fp["weights"] = hashlib.sha256(canonical_json(shares)).hexdigest()[:16]
        return fp
