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
  `evokernel.model.workload`: positive floats aligned with SHAPES, or a dict keyed by each shape's
  `M`; with it a candidate's latency is the weighted mean of its shapes' medians), and
  `CPU_SHAPES` / `CPU_HELDOUT_SHAPES`: smaller shapes of the same problem that
  `evokernel check` uses on a machine without a GPU (`Problem.on_cpu()`), where the
  full shapes would take minutes and their timings would mean nothing.

A problem may take parameters (a model, a batch size, a dtype): it declares them as a frozen
msgspec struct named `Params`, typed and with defaults, and resolves them when it loads with
`problem_params`. They come from `Problem.load(path, params={...})` (converted strictly), or
else from environment variables (`EVOKERNEL_GEMM_M=64,128`: a command-line convenience) or
the defaults. The resolved values are `problem.params` and part of `problem.fingerprint()`,
so results measured for one set of parameters are never reused for another.

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
>>> p.name, p.shapes, p.tolerance("float32"), p.params
('double', [{'n': 8}], {'rtol': 1e-05, 'atol': 1e-05}, None)

With parameters:

>>> _ = path.write_text(textwrap.dedent('''
...     import msgspec, torch
...     from evokernel.judge.problem import problem_params
...     class Params(msgspec.Struct, frozen=True, kw_only=True):
...         n: tuple[int, ...] = (8,)
...         scale: float = 2.0
...     P = problem_params(Params, env="EXAMPLE_DOUBLE_")
...     SHAPES = [{"n": n} for n in P.n]
...     def make_inputs(shape, seed, device):
...         return (torch.randn(shape["n"], generator=torch.Generator().manual_seed(seed)),)
...     def reference(x):
...         return x * P.scale
... '''))
>>> p = Problem.load(path, params={"n": [16, 32]})
>>> p.shapes, p.params
([{'n': 16}, {'n': 32}], {'n': [16, 32], 'scale': 2.0})
>>> p.fingerprint()["params"] != Problem.load(path).fingerprint()["params"]
True
>>> Problem.load(path, params={"m": 1})
Traceback (most recent call last):
evokernel.judge.problem.ProblemError: ...double.py: unknown parameter 'm' (parameters: n: tuple[int, ...] = (8,), scale: float = 2.0)
"""

# One module on purpose, though over 400 lines: loading a problem file, its typed parameters and their parsing from the
# command line or environment are one contract with problem authors; the parsing helpers exist only for `Problem`.

from __future__ import annotations

import hashlib
import importlib.util
import math
import os
import sys
from collections.abc import Callable, Mapping, Sequence
from contextvars import ContextVar
from pathlib import Path
from types import ModuleType
from typing import Any, TypeVar

import msgspec

from evokernel.core.errors import ConfigError, EvokernelError
from evokernel.core.genome import canonical_json

__all__ = ["Problem", "ProblemError", "DEFAULT_TOLERANCE", "load_module", "problem_params", "shape_key"]


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


def load_module(path: str | os.PathLike[str], *, prefix: str = "_evokernel_mod", key: str = "") -> ModuleType:
    """Import a Python file as a fresh module (its folder on sys.path while it loads). Its
    name is derived from the path and `key`: loads with different keys (e.g. a problem's
    parameters) are different modules in sys.modules."""
    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"no such file: {path}")
    digest = hashlib.sha256((str(path.resolve()) + ("\0" + key if key else "")).encode()).hexdigest()[:12]
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


S = TypeVar("S", bound=msgspec.Struct)


class _Loading:
    """The parameters `Problem.load` hands to the module it is executing, and what the
    module resolved (read by `problem_params`)."""

    __slots__ = ("params", "resolved", "text", "where")

    def __init__(self, where: str, params: Mapping[str, Any] | None, text: Mapping[str, str] | None) -> None:
        self.where, self.params, self.text = where, params, text
        self.resolved: msgspec.Struct | None = None


_LOADING: ContextVar[_Loading | None] = ContextVar("evokernel_problem_loading", default=None)


def problem_params(cls: type[S], *, env: str = "", env_names: Mapping[str, str] | None = None) -> S:
    """The problem's parameters, resolved while its module loads: `cls` is a frozen msgspec
    struct whose fields (typed, with defaults) are the parameters.

    Given explicit parameters (`Problem.load(path, params={...})`), those and the defaults for
    the rest, converted strictly (an unknown name or a wrong type is a ProblemError).
    Otherwise each field comes from text (`evokernel check --param NAME=VALUE`), else from the
    environment variable `env + NAME.upper()` (or `env_names[name]`) when it is set, else its
    default. Text is converted by the field's type: int, float, str, a Literal, bool (1, 0,
    true, false), a tuple (comma-separated items), `X | None` (empty text is None).

    >>> class Params(msgspec.Struct, frozen=True, kw_only=True):
    ...     m: tuple[int, ...] = (64,)
    ...     dtype: str = "bfloat16"
    >>> os.environ["EXAMPLE_M"] = "16,32"
    >>> problem_params(Params, env="EXAMPLE_")
    Params(m=(16, 32), dtype='bfloat16')
    >>> os.environ["EXAMPLE_M"] = "16;32"
    >>> problem_params(Params, env="EXAMPLE_")
    Traceback (most recent call last):
    evokernel.judge.problem.ProblemError: ...: EXAMPLE_M='16;32': expected tuple[int, ...] (comma-separated)
    >>> del os.environ["EXAMPLE_M"]
    """
    loading = _LOADING.get()
    where = loading.where if loading is not None else getattr(sys.modules.get(cls.__module__), "__file__", "")
    where = where or cls.__module__
    try:
        info = msgspec.inspect.type_info(cls)
        fields = {f.name: f for f in msgspec.structs.fields(cls)}
    except NameError as exc:  # string annotations resolve in sys.modules[cls.__module__]
        raise ProblemError(
            f"{where}: the annotations of {cls.__name__} do not resolve ({exc}): load the "
            f"module with Problem.load or load_module, or register it in sys.modules"
        ) from None
    if not isinstance(info, msgspec.inspect.StructType):
        raise ProblemError(f"{where}: problem_params takes a msgspec Struct class, got {cls!r}")
    kinds = {f.name: f.type for f in info.fields}
    accepted = ", ".join(_describe_field(f, kinds[f.name]) for f in fields.values())
    given, source = _given(loading, kinds, env, env_names, where)
    unknown = sorted(set(given) - set(fields))
    if unknown:
        raise ProblemError(f"{where}: unknown parameter {unknown[0]!r} (parameters: {accepted})")
    converted: dict[str, Any] = {}
    for name, value in given.items():
        try:
            converted[name] = msgspec.convert(value, type=fields[name].type)
        except msgspec.ValidationError as exc:
            raise ProblemError(f"{where}: {source[name]}: {exc} (expected {_describe(kinds[name])})") from None
    missing = [name for name, f in fields.items() if f.required and name not in converted]
    if missing:
        raise ProblemError(f"{where}: parameter {missing[0]!r} is required (parameters: {accepted})")
    try:
        resolved = cls(**converted)
    except (TypeError, ValueError) as exc:  # the struct's own __post_init__ checks
        raise ProblemError(f"{where}: {exc}") from None
    if loading is not None:
        if loading.resolved is not None:
            raise ProblemError(f"{where}: problem_params is called twice while loading one problem")
        loading.resolved = resolved
    return resolved


def _given(
    loading: _Loading | None, kinds: Mapping[str, Any], env: str, env_names: Mapping[str, str] | None, where: str
) -> tuple[dict[str, Any], dict[str, str]]:
    """The parameter values given (explicitly, else as text or in the environment), and where
    each came from (for messages)."""
    if loading is not None and loading.params is not None:
        return dict(loading.params), {name: f"parameter {name}" for name in loading.params}
    text = dict(loading.text or {}) if loading is not None else {}
    given: dict[str, Any] = {}
    source: dict[str, str] = {}
    for name, value in text.items():
        source[name] = f"--param {name}={value!r}"
        given[name] = _parse_text(value, kinds[name], f"{where}: {source[name]}") if name in kinds else value
    for name, kind in kinds.items():
        var = (env_names or {}).get(name, env + name.upper() if env else "")
        if name not in text and var and var in os.environ:
            source[name] = f"{var}={os.environ[var]!r}"
            given[name] = _parse_text(os.environ[var], kind, f"{where}: {source[name]}")
    return given, source


def _describe(kind: Any) -> str:
    """A parameter's type as a reader would write it: `tuple[int, ...]`, `'a' | 'b'`."""
    ins = msgspec.inspect
    if isinstance(kind, ins.LiteralType):
        return " | ".join(repr(v) for v in kind.values)
    if isinstance(kind, ins.UnionType):
        return " | ".join(_describe(t) for t in kind.types)
    if isinstance(kind, (ins.VarTupleType, ins.ListType)):
        return f"{'tuple' if isinstance(kind, ins.VarTupleType) else 'list'}[{_describe(kind.item_type)}, ...]"
    names = {ins.IntType: "int", ins.FloatType: "float", ins.BoolType: "bool", ins.StrType: "str", ins.NoneType: "None"}
    return names.get(type(kind), type(kind).__name__.removesuffix("Type").lower())


def _describe_field(field: Any, kind: Any) -> str:
    if field.required:
        return f"{field.name}: {_describe(kind)}"
    default = field.default if field.default_factory is msgspec.NODEFAULT else field.default_factory()
    return f"{field.name}: {_describe(kind)} = {default!r}"


def _parse_text(text: str, kind: Any, what: str) -> Any:
    """`text` (an environment variable's or a --param's value) as a value of type `kind`; a
    ProblemError that says what text was expected if it is not one."""
    try:
        return _from_text(text, kind)
    except ValueError:
        raise ProblemError(f"{what}: expected {_describe(kind)}{_text_hint(kind)}") from None


def _from_text(text: str, kind: Any) -> Any:
    ins = msgspec.inspect
    word = text.strip()
    if isinstance(kind, ins.UnionType):
        if not word and any(isinstance(t, ins.NoneType) for t in kind.types):
            return None
        for t in kind.types:  # the first member the text reads as
            if not isinstance(t, ins.NoneType):
                try:
                    return _from_text(text, t)
                except ValueError:
                    continue
        raise ValueError(text)
    if isinstance(kind, (ins.VarTupleType, ins.ListType)):
        return [_from_text(item.strip(), kind.item_type) for item in text.split(",") if item.strip()]
    if isinstance(kind, ins.BoolType):
        flag = {"1": True, "0": False, "true": True, "false": False}.get(word.lower())
        if flag is None:
            raise ValueError(text)
        return flag
    if isinstance(kind, ins.IntType):
        return int(word)
    if isinstance(kind, ins.FloatType):
        return float(word)
    if isinstance(kind, ins.StrType):
        return text
    if isinstance(kind, ins.LiteralType):
        if word in kind.values:
            return word
        if word.lstrip("-").isdigit() and int(word) in kind.values:
            return int(word)
        raise ValueError(text)
    raise ValueError(f"a parameter of type {_describe(kind)} cannot be set from text")


def _text_hint(kind: Any) -> str:
    ins = msgspec.inspect
    hints = []
    for t in kind.types if isinstance(kind, ins.UnionType) else (kind,):
        if isinstance(t, ins.BoolType):
            hints.append("1, 0, true or false")
        elif isinstance(t, (ins.VarTupleType, ins.ListType)):
            hints.append("comma-separated")
        elif isinstance(t, ins.NoneType):
            hints.append("empty for None")
    return f" ({'; '.join(hints)})" if hints else ""


class Problem:
    """A loaded, validated problem module."""

    def __init__(self, module: ModuleType, path: str = "", params: msgspec.Struct | None = None) -> None:
        self.module = module
        self.path = path
        self.name = Path(path).stem if path else module.__name__
        where = path or module.__name__
        if params is None and isinstance(declared := getattr(module, "Params", None), type):
            # built from a module loaded some other way: its resolved parameters, if it kept them
            params = next((v for v in vars(module).values() if isinstance(v, declared)), None)
        #: the parameters the module resolved (`problem_params`) as plain data, None if it takes none
        self.params: dict[str, Any] | None = msgspec.json.decode(canonical_json(params)) if params is not None else None
        for attr in ("make_inputs", "reference"):
            if not callable(getattr(module, attr, None)):
                raise ProblemError(f"{where}: defines no function `{attr}`")
        self.make_inputs: Callable[..., tuple[Any, ...]] = module.make_inputs
        self.reference: Callable[..., Any] = module.reference
        self.shapes = self._shapes(getattr(module, "SHAPES", None), "SHAPES", where, required=True)
        self.heldout = self._shapes(getattr(module, "HELDOUT_SHAPES", []), "HELDOUT_SHAPES", where)
        #: the shapes to check at on the CPU (`on_cpu`); empty where the problem declares none
        self.cpu_shapes = self._shapes(getattr(module, "CPU_SHAPES", []), "CPU_SHAPES", where)
        self.cpu_heldout = self._shapes(getattr(module, "CPU_HELDOUT_SHAPES", []), "CPU_HELDOUT_SHAPES", where)
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

    def on_cpu(self) -> Problem:
        """This problem at its CPU-sized shapes (`CPU_SHAPES`, `CPU_HELDOUT_SHAPES`), unweighted:
        what a check on a machine without a GPU runs; the problem itself where it has none."""
        if not self.cpu_shapes:
            return self
        import copy

        small = copy.copy(self)
        small.shapes, small.heldout, small.weights = self.cpu_shapes, self.cpu_heldout, None
        return small

    def restricted(self, indices: Sequence[int], *, heldout: bool = False) -> Problem:
        """This problem at some of its tuning shapes (by index, with their weights), and its
        held-out shapes only if `heldout`: a cheaper fidelity of the same judgement."""
        import copy

        if not indices or any(not 0 <= i < len(self.shapes) for i in indices):
            raise ConfigError(f"shape indices must be within 0..{len(self.shapes) - 1}, got {list(indices)}")
        part = copy.copy(self)
        part.shapes = [self.shapes[i] for i in indices]
        part.weights = [self.weights[i] for i in indices] if self.weights is not None else None
        part.heldout = list(self.heldout) if heldout else []
        return part

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
            raise ProblemError(
                f"{where}: WEIGHTS must be {len(shapes)} numbers (one per shape) or a dict by M, got {n}"
            )
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
    def load(
        cls,
        path: str | os.PathLike[str],
        params: Mapping[str, Any] | None = None,
        *,
        param_text: Mapping[str, str] | None = None,
    ) -> Problem:
        """Load a problem module. `params` are its parameters (see `problem_params`): when
        given, the environment is not read and the rest take their defaults. `param_text`
        (NAME -> text, the command line's `--param`) overrides the environment instead."""
        if params is not None and param_text is not None:
            raise ConfigError("give a problem's parameters as params or as param_text, not both")
        loading = _Loading(str(path), params, param_text)
        key = (
            ""
            if params is None and param_text is None
            else canonical_json({"params": msgspec.to_builtins(params), "text": param_text}).decode()
        )
        token = _LOADING.set(loading)
        try:
            module = load_module(path, prefix="_evokernel_problem", key=key)
        except EvokernelError:
            raise
        except Exception as exc:
            raise ProblemError(f"{path}: {type(exc).__name__}: {exc}") from None
        finally:
            _LOADING.reset(token)
        if loading.resolved is None and (params or param_text):
            given = next(iter(params or param_text or {}))
            raise ProblemError(f"{path}: takes no parameters (it calls no problem_params), got {given!r}")
        return cls(module, str(path), loading.resolved)

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
        """What results depend on: the problem's source text, its parameters, its shapes and
        their weights."""
        src = Path(self.path).read_bytes() if self.path and os.path.exists(self.path) else b""
        fp = {
            "problem": self.name,
            "source": hashlib.sha256(src).hexdigest()[:16],
            "shapes": hashlib.sha256(canonical_json(self.shapes)).hexdigest()[:16],
        }
        if self.params is not None:  # absent for a problem without parameters: its identity is kept
            fp["params"] = hashlib.sha256(canonical_json(self.params)).hexdigest()[:16]
        if self.weights is not None:  # absent when unweighted: older runs keep their identity
            total = sum(self.weights)  # normalised: only the shares change a latency
            shares = [round(w / total, 12) for w in self.weights]
            fp["weights"] = hashlib.sha256(canonical_json(shares)).hexdigest()[:16]
        return fp
