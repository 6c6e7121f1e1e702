"""The workload profiler: where a model's GPU time goes, and how far each kernel is from the roofline.

`profile_module(model, example_inputs, device=...)` runs the model (in `inference_mode`, after
`warmup` calls) `iters` times under `torch.profiler`, with one `record_function` scope per
named submodule (`module:layers.0.attn.qkv`, opened and closed by forward hooks), exports the
Chrome trace and reads it back with `parse_trace`, which reads any trace torch wrote.

What `parse_trace` attributes to each GPU activity (trace categories `kernel`, `gpu_memcpy`,
`gpu_memset`):

- its **launch**: the `cuda_runtime`/`cuda_driver` event with the same `correlation` (failing
  that, the start of the `ac2g` flow with that id), on some CPU thread at some time;
- its **op**: the innermost `cpu_op` on that thread that contains the launch (failing a launch,
  the `cpu_op` with the activity's `External id`);
- its **module**: the innermost module scope on that thread that contains the launch: our
  `user_annotation`s `module:PATH` (`(model)` is the root module); a trace without them
  falls back to the `nn.Module: Name_i` events of `with_stack=True`, joined into a path;
  `(outside)` when none contains it;
- its **work**: the innermost op above it (itself included) that has a formula, if no op
  below that one has one (so `aten::linear` defers to its `aten::addmm`). FLOPs: the op's
  `flops` argument where the trace has one, else formulas for the matmul family and the
  attention ops (causal counts half; varlen inputs have none); bytes for those and for
  elementwise, normalisation, copy and gather ops: each operand read once, the output
  written once (a lower bound). A work op launching several kernels (split-K and its
  reduction) shares its work among them in proportion to their time.

Roofline per kernel: `ideal = max(flops / peak FLOP/s of its dtype, bytes / peak bytes/s)`
against the measured peaks of `evokernel.judge.hardware` (the trace's `deviceProperties` name);
`headroom = time - ideal` (at least 0), the time a roofline-bound kernel would not need. On
a device without measured peaks the roofline columns stay empty and the notes say why.

Gaps: on each stream, the idle time between an activity and the one before it, charged
to the module of the one after (launch overhead, host syncs, Python between launches).
The total is kernel time plus gap time, so the rows' shares sum to 1 (kernels on concurrent
streams each count, so then the total exceeds the wall time); each row's score is
its share times the fraction of its time that is headroom (all of a gap). Rows rank by score;
a row without a roofline ranks by its share, the most its score could be.

On the CPU (a trace with no GPU activity) each `cpu_op`'s self time (outside its child ops)
stands for a kernel on its thread (an op with a work formula stands for its whole time, child
ops included), gaps are the time between top-level ops, and the same pipeline runs; the notes
say so.

>>> mm = {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, "ts": 0, "dur": 10,
...       "args": {"Input Dims": [[64, 64], [64, 64]], "Input type": ["float", "float"]}}
>>> p = parse_trace({"traceEvents": [mm]})
>>> [(r.module, r.op, r.share, r.headroom_ms) for r in p.opportunities()]
[('(outside)', 'aten::mm', 1.0, None)]
"""

# One module on purpose, though over 400 lines: reading a torch trace means attributing each kernel to a scope and an
# operator's work (FLOPs, bytes) for the roofline; the per-operator work models (`_mm`, `_attention`, `_grouped_mm`,
# ...) and the timeline that attributes them are read together.

from __future__ import annotations

import bisect
import gzip
import json
import math
import os
import tempfile
from collections import defaultdict
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import msgspec

from evokernel.core.errors import ConfigError
from evokernel.judge.device import check_device, default_device, is_cuda, on_device
from evokernel.judge.hardware import PEAKS, Peaks, peaks_for

__all__ = ["Kernel", "Opportunity", "Profile", "profile_module", "parse_trace", "load_target", "SCOPE"]

SCOPE = "module:"  # prefix of the record_function scopes profile_module opens per submodule
ROOT, OUTSIDE, UNKNOWN_OP = "(model)", "(outside)", "(unknown)"
_GPU_CATS = {"kernel", "gpu_memcpy", "gpu_memset"}
_LAUNCH_CATS = {"cuda_runtime", "cuda_driver", "runtime", "driver"}
_EPS = 0.01  # us: slack for the rounding of microsecond timestamps with nanosecond digits


class Kernel(msgspec.Struct, frozen=True, kw_only=True):
    """One GPU activity (or, on the CPU, one op's self time) and what it is charged to."""

    name: str
    op: str
    module: str
    stream: str  # "device:stream" on a GPU, the thread on the CPU
    start_us: float
    dur_us: float
    gap_us: float = 0.0  # idle time on its stream before it
    flops: float | None = None
    bytes: float | None = None
    ideal_us: float | None = None  # roofline time


class Opportunity(msgspec.Struct, frozen=True, kw_only=True):
    """A row of the ranked table: one (module, op, kernel), or one module's gaps."""

    kind: str  # "kernel" or "gaps"
    module: str
    op: str
    kernel: str
    calls: int  # launches (for gaps: launches that followed idle time)
    total_ms: float  # over all profiled iterations
    share: float  # of the total (kernel time plus gap time)
    tflops: float | None  # achieved
    tbps: float | None  # achieved, bytes (lower bound) per time
    roofline: float | None  # ideal time / time: 1.0 is at the roofline
    headroom_ms: float | None
    score: float | None  # share x headroom fraction


class Profile(msgspec.Struct, kw_only=True):
    target: str
    device: str  # "cuda" or "cpu": what the kernels ran on
    device_name: str
    iterations: int
    peaks: str | None  # which measured peaks the roofline used
    kernels: list[Kernel]
    launch_api_us: float = 0.0  # CPU time inside the launch calls of these kernels
    notes: list[str] = []

    @property
    def busy_us(self) -> float:
        return sum(k.dur_us for k in self.kernels)

    @property
    def gap_us(self) -> float:
        return sum(k.gap_us for k in self.kernels)

    def opportunities(self) -> list[Opportunity]:
        """Ranked rows, highest score first; a row without a roofline ranks by its share (the most
        its score could be)."""
        total = self.busy_us + self.gap_us
        groups: dict[tuple[str, str, str], list[Kernel]] = defaultdict(list)
        gaps: dict[str, list[Kernel]] = defaultdict(list)
        for k in self.kernels:
            groups[(k.module, k.op, k.name)].append(k)
            if k.gap_us > 0:
                gaps[k.module].append(k)
        rows = [_row(key, ks, total) for key, ks in groups.items()]
        for module, ks in gaps.items():
            us = sum(k.gap_us for k in ks)
            share = us / total if total > 0 else 0.0
            rows.append(
                Opportunity(
                    kind="gaps",
                    module=module,
                    op="(gaps)",
                    kernel="idle before launches",
                    calls=len(ks),
                    total_ms=us / 1e3,
                    share=share,
                    tflops=None,
                    tbps=None,
                    roofline=None,
                    headroom_ms=us / 1e3,
                    score=share,
                )
            )
        return sorted(
            rows, key=lambda r: (-(r.share if r.score is None else r.score), -r.total_ms, r.module, r.op, r.kernel)
        )

    def summary(self) -> dict[str, Any]:
        total = self.busy_us + self.gap_us
        return {
            "total_ms": total / 1e3,
            "busy_ms": self.busy_us / 1e3,
            "gap_ms": self.gap_us / 1e3,
            "per_iteration_ms": total / 1e3 / max(self.iterations, 1),
            "launches": len(self.kernels),
            "launch_api_ms": self.launch_api_us / 1e3,
        }

    def to_dict(self, top: int | None = None) -> dict[str, Any]:
        rows = self.opportunities()[:top]
        return {
            "target": self.target,
            "device": self.device,
            "device_name": self.device_name,
            "iterations": self.iterations,
            "peaks": self.peaks,
            "notes": list(self.notes),
            "summary": self.summary(),
            "rows": msgspec.to_builtins(rows),
        }

    def table(self, top: int | None = 20) -> Any:
        """The ranked rows as a rich Table."""
        from rich.table import Table

        s = self.summary()
        t = Table(
            title=f"{self.target or 'profile'} on {self.device_name}: {s['per_iteration_ms']:.3f} ms per "
            f"iteration ({self.iterations}), {s['gap_ms'] / max(s['total_ms'], 1e-12):.0%} gaps, "
            f"{s['launches']} launches"
        )
        for col in (
            "module",
            "op",
            "kernel",
            "calls",
            "ms",
            "share",
            "TFLOP/s",
            "TB/s",
            "roofline",
            "headroom ms",
            "score",
        ):
            t.add_column(col, justify="left" if col in ("module", "op", "kernel") else "right")
        for r in self.opportunities()[:top]:
            t.add_row(
                r.module,
                r.op,
                _short(r.kernel),
                str(r.calls),
                f"{r.total_ms:.3f}",
                f"{r.share:.1%}",
                _fmt(r.tflops, ".2f"),
                _fmt(r.tbps, ".3f"),
                _fmt(r.roofline, ".0%"),
                _fmt(r.headroom_ms, ".3f"),
                _fmt(r.score, ".3f"),
            )
        return t


def _row(key: tuple[str, str, str], ks: list[Kernel], total: float) -> Opportunity:
    us = sum(k.dur_us for k in ks)
    share = us / total if total > 0 else 0.0
    known = all(k.ideal_us is not None for k in ks)
    headroom = sum(max(0.0, k.dur_us - (k.ideal_us or 0.0)) for k in ks) if known else None
    flops = sum(k.flops or 0.0 for k in ks) if all(k.flops is not None for k in ks) else None
    nbytes = sum(k.bytes or 0.0 for k in ks) if all(k.bytes is not None for k in ks) else None
    per_s = 1e6 / us if us > 0 else None
    return Opportunity(
        kind="kernel",
        module=key[0],
        op=key[1],
        kernel=key[2],
        calls=len(ks),
        total_ms=us / 1e3,
        share=share,
        tflops=flops * per_s / 1e12 if flops is not None and per_s else None,
        tbps=nbytes * per_s / 1e12 if nbytes is not None and per_s else None,
        roofline=sum(k.ideal_us or 0.0 for k in ks) / us if known and us > 0 else None,
        headroom_ms=headroom / 1e3 if headroom is not None else None,
        score=share * headroom / us if headroom is not None and us > 0 else (0.0 if known else None),
    )


def _fmt(value: float | None, spec: str) -> str:
    return "" if value is None else format(value, spec)


def _short(name: str, width: int = 60) -> str:
    """A kernel's name without `void`, template arguments and parameters, for the table."""
    if name.startswith("void "):
        name = name[5:]
    cut = min((i for i in (name.find("<"), name.find("(")) if i > 0), default=len(name))
    name = name[:cut]
    return name if len(name) <= width else name[: width - 3] + "..."


# -- work formulas ---------------------------------------------------------------------------
_SIZES = {
    "float": 4,
    "double": 8,
    "c10::BFloat16": 2,
    "c10::Half": 2,
    "long int": 8,
    "int": 4,
    "short int": 2,
    "signed char": 1,
    "unsigned char": 1,
    "bool": 1,
    "c10::Float8_e4m3fn": 1,
    "c10::Float8_e5m2": 1,
    "c10::Float8_e4m3fnuz": 1,
    "c10::Float8_e5m2fnuz": 1,
    "c10::complex<float>": 8,
    "c10::complex<double>": 16,
}
_DTYPES = {
    "float": "float32",
    "double": "float64",
    "c10::BFloat16": "bfloat16",
    "c10::Half": "float16",
    "c10::Float8_e4m3fn": "float8_e4m3fn",
    "c10::Float8_e5m2": "float8_e5m2",
}


@dataclass(frozen=True)
class _T:
    """A tensor operand as the profiler recorded it."""

    shape: tuple[int, ...]
    type: str

    @property
    def numel(self) -> int:
        return math.prod(self.shape)

    @property
    def nbytes(self) -> int:
        return self.numel * _SIZES[self.type]


@dataclass(frozen=True)
class _Work:
    flops: float | None
    bytes: float | None
    dtype: str


def _operands(args: dict[str, Any]) -> list[_T | None]:
    """Operands in order: a tensor of known dtype, or None (scalars, lists, missing arguments)."""
    dims, types = args.get("Input Dims") or [], args.get("Input type") or []
    out: list[_T | None] = []
    for d, t in zip(dims, types):
        ok = t in _SIZES and isinstance(d, list) and all(isinstance(x, int) for x in d)
        out.append(_T(tuple(d), t) if ok else None)
    return out


def _concrete(args: dict[str, Any], i: int) -> str:
    vals = args.get("Concrete Inputs") or []
    return str(vals[i]) if i < len(vals) else ""


def _mm(a: _T, b: _T, out_type: str | None = None, extra: Iterable[_T | None] = ()) -> _Work:
    """A (batched, broadcast) matmul a @ b, as aten::matmul reads its operands."""
    sa, sb = (1, *a.shape) if len(a.shape) == 1 else a.shape, (*b.shape, 1) if len(b.shape) == 1 else b.shape
    m, k, n = sa[-2], sa[-1], sb[-1]
    batch = math.prod(_broadcast(sa[:-2], sb[:-2]))
    out_bytes = batch * m * n * _SIZES[out_type or a.type]
    read = a.nbytes + b.nbytes + sum(t.nbytes for t in extra if t is not None)
    return _Work(2.0 * batch * m * k * n, float(read + out_bytes), _DTYPES.get(a.type, a.type))


def _broadcast(*shapes: tuple[int, ...]) -> tuple[int, ...]:
    n = max((len(s) for s in shapes), default=0)
    padded = [(1,) * (n - len(s)) + tuple(s) for s in shapes]
    return tuple(max(dims) for dims in zip(*padded))


def _attention(args: dict[str, Any], causal_at: int, bshd: bool) -> _Work | None:
    """q [B, Hq, Lq, D], k [B, Hk, Lk, D], v [B, Hk, Lk, Dv] ([B, L, H, D] when bshd): QK^T and PV."""
    ops = _operands(args)
    if len(ops) < 3 or any(t is None or len(t.shape) != 4 for t in ops[:3]):
        return None  # varlen (packed) inputs: the sequence lengths are not in the trace
    q, k, v = ops[0], ops[1], ops[2]
    assert q is not None and k is not None and v is not None
    (b, hq, lq, d), (lk, dv) = (
        ((q.shape[0], q.shape[2], q.shape[1], q.shape[3]) if bshd else q.shape),
        ((k.shape[1], v.shape[3]) if bshd else (k.shape[2], v.shape[3])),
    )
    flag = _concrete(args, causal_at).strip().lower()
    causal = flag not in ("", "false", "0", "none")
    flops = 2.0 * b * hq * lq * lk * (d + dv) * (0.5 if causal else 1.0)
    out = b * hq * lq * dv * _SIZES[q.type]
    return _Work(flops, float(q.nbytes + k.nbytes + v.nbytes + out), _DTYPES.get(q.type, q.type))


def _elementwise(args: dict[str, Any], *, write: bool = True, inplace: bool = False) -> _Work | None:
    """Bytes only: every tensor operand read once, the broadcast output written once."""
    ts = [t for t in _operands(args) if t is not None]
    if not ts:
        return None
    read = sum(t.nbytes for t in ts)
    out = 0
    if write:
        out = ts[0].nbytes if inplace else math.prod(_broadcast(*(t.shape for t in ts))) * _SIZES[ts[0].type]
    return _Work(None, float(read + out), _DTYPES.get(ts[0].type, ts[0].type))


def _index_select(args: dict[str, Any], table: int, index: int, dim: int | None) -> _Work | None:
    ops = _operands(args)
    if len(ops) <= max(table, index) or ops[table] is None or ops[index] is None:
        return None
    w, idx = ops[table], ops[index]
    assert w is not None and idx is not None
    axis = int(_concrete(args, dim) or 0) if dim is not None else 0
    rows = w.numel // max(w.shape[axis], 1) if w.shape else 1
    out = idx.numel * rows * _SIZES[w.type]
    return _Work(None, float(idx.nbytes + 2 * out), _DTYPES.get(w.type, w.type))


def _matmul_args(
    first: int, out_type: Callable[[list[_T | None]], str | None] = lambda ops: None
) -> Callable[[dict[str, Any]], _Work | None]:
    def work(args: dict[str, Any]) -> _Work | None:
        ops = _operands(args)
        if len(ops) < first + 2 or ops[first] is None or ops[first + 1] is None:
            return None
        a, b = ops[first], ops[first + 1]
        assert a is not None and b is not None
        return _mm(a, b, out_type(ops), extra=ops[:first])

    return work


def _linear(args: dict[str, Any]) -> _Work | None:
    ops = _operands(args)
    if len(ops) < 2 or ops[0] is None or ops[1] is None:
        return None
    x, w = ops[0], ops[1]
    assert x is not None and w is not None
    return _mm(x, _T(tuple(reversed(w.shape)), w.type), extra=ops[2:3])


def _grouped_mm(args: dict[str, Any]) -> _Work | None:
    """torch._grouped_mm: x [T, K] against w [G, K, N] with offs (each row meets its group's
    weight once: 2 T K N), or batched [G, M, K] @ [G, K, N]; other forms are not counted."""
    ops = _operands(args)
    if len(ops) < 2 or ops[0] is None or ops[1] is None:
        return None
    x, w = ops[0], ops[1]
    assert x is not None and w is not None
    if len(x.shape) == 2 and len(w.shape) == 3 and x.shape[1] == w.shape[1]:
        t, k, n = x.shape[0], x.shape[1], w.shape[2]
        flops = 2.0 * t * k * n
        out = t * n * _SIZES[x.type]
    elif len(x.shape) == 3 and len(w.shape) == 3 and x.shape[0] == w.shape[0] and x.shape[2] == w.shape[1]:
        g, m, k, n = x.shape[0], x.shape[1], x.shape[2], w.shape[2]
        flops = 2.0 * g * m * k * n
        out = g * m * n * _SIZES[x.type]
    else:
        return None
    return _Work(flops, float(x.nbytes + w.nbytes + out), _DTYPES.get(x.type, x.type))


def _fused_experts(args: dict[str, Any]) -> _Work | None:
    """A fused MoE layer (SGLang's `inplace_fused_experts` / `outplace_fused_experts`,
    evokernel's `fused_moe` op): x [T, H], w1 [E, 2I, H] (gate and up), w2 [E, H, I], the
    routing weights and ids [T, k]. FLOPs 2 T k (2I H + H I); bytes: the weights of the
    experts T tokens touch on average under uniform routing, E (1 - (1 - k/E)^T) (the trace
    has the shapes, not the routing), x read and the output written. Without it an SGLang engine's profile had no roofline
    for 85% of its kernel time (measured on the H200; BENCHMARKS.md, `evokernel profile`)."""
    ops = _operands(args)
    if len(ops) < 5 or any(o is None for o in ops[:5]):
        return None
    x, w1, w2, ids = ops[0], ops[1], ops[2], ops[4]
    assert x is not None and w1 is not None and w2 is not None and ids is not None
    if len(x.shape) != 2 or len(w1.shape) != 3 or len(w2.shape) != 3 or len(ids.shape) != 2 or not w1.shape[0]:
        return None
    t, h = x.shape
    e, two_i = w1.shape[0], w1.shape[1]
    k = ids.shape[1]
    touched = e * (1.0 - (1.0 - min(k, e) / e) ** t)
    flops = 2.0 * t * k * (two_i * h + h * (two_i // 2))
    return _Work(flops, touched * (w1.nbytes + w2.nbytes) / e + 2.0 * x.nbytes, _DTYPES.get(x.type, x.type))


_FORMULAS: dict[str, Callable[[dict[str, Any]], _Work | None]] = {
    "sglang::inplace_fused_experts": _fused_experts,
    "sglang::outplace_fused_experts": _fused_experts,
    "evokernel::fused_moe": _fused_experts,
    "aten::mm": _matmul_args(0),
    "aten::bmm": _matmul_args(0),
    "aten::matmul": _matmul_args(0),
    "aten::addmm": _matmul_args(1),
    "aten::baddbmm": _matmul_args(1),
    "aten::linear": _linear,
    # fp8: the output dtype is an argument the trace does not type; one byte per element is a lower bound
    "aten::_scaled_mm": _matmul_args(0),
    "aten::_grouped_mm": _grouped_mm,
    "aten::scaled_dot_product_attention": lambda a: _attention(a, 5, False),
    "aten::_scaled_dot_product_flash_attention": lambda a: _attention(a, 4, False),
    "aten::_scaled_dot_product_flash_attention_for_cpu": lambda a: _attention(a, 4, False),
    "aten::_scaled_dot_product_efficient_attention": lambda a: _attention(a, 6, False),
    "aten::_scaled_dot_product_cudnn_attention": lambda a: _attention(a, 6, False),
    "aten::_flash_attention_forward": lambda a: _attention(a, 8, True),
    "aten::_efficient_attention_forward": lambda a: _attention(a, 9, True),  # custom_mask_type: 0 is none
    "aten::embedding": lambda a: _index_select(a, 0, 1, None),
    "aten::index_select": lambda a: _index_select(a, 0, 2, 1),
    "aten::copy_": lambda a: _elementwise(a, write=False),  # reads the source, writes the destination
    "aten::fill_": lambda a: (
        lambda ts: (
            _Work(None, float(ts[0].nbytes), _DTYPES.get(ts[0].type, ts[0].type)) if ts and ts[0] is not None else None
        )
    )(_operands(a)),
}
for _name in (
    "add",
    "sub",
    "mul",
    "div",
    "neg",
    "exp",
    "silu",
    "gelu",
    "relu",
    "sigmoid",
    "tanh",
    "rsqrt",
    "sqrt",
    "pow",
    "where",
    "maximum",
    "minimum",
    "clamp",
    "abs",
    "reciprocal",
    "cos",
    "sin",
    "softmax",
    "_softmax",
    "log_softmax",
    "_log_softmax",
    "layer_norm",
    "native_layer_norm",
    "rms_norm",
    "_fused_rms_norm",
    "clone",
):
    _FORMULAS[f"aten::{_name}"] = _elementwise
    _FORMULAS[f"aten::{_name}_"] = lambda a: _elementwise(a, inplace=True)
for _name in ("sum", "mean", "amax", "amin", "argmax", "var", "linalg_vector_norm"):  # the output is small: left out
    _FORMULAS[f"aten::{_name}"] = lambda a: _elementwise(a, write=False)


# -- trace parsing ------------------------------------------------------------------------------
@dataclass(eq=False)
class _Span:
    name: str
    start: float
    end: float
    thread: tuple[Any, Any]
    args: dict[str, Any]
    parent: _Span | None = None
    child_us: float = 0.0
    below_formula: bool = False  # some op below this one has a work formula
    work: _Work | None = None
    path: str = ""  # module scopes: the module path
    kernels: list[int] = field(default_factory=list)

    @property
    def dur(self) -> float:
        return self.end - self.start


class _Timeline:
    """Properly nested spans per thread: parents, and the innermost span containing a time."""

    def __init__(self, spans: list[_Span]) -> None:
        self.by_thread: dict[tuple[Any, Any], list[_Span]] = defaultdict(list)
        for s in sorted(spans, key=lambda s: (s.start, -s.dur)):
            self.by_thread[s.thread].append(s)
        self.starts = {t: [s.start for s in ss] for t, ss in self.by_thread.items()}
        for ss in self.by_thread.values():
            stack: list[_Span] = []
            for s in ss:
                while stack and not (stack[-1].start <= s.start + _EPS and s.end <= stack[-1].end + _EPS):
                    stack.pop()
                s.parent = stack[-1] if stack else None
                if s.parent is not None:
                    s.parent.child_us += s.dur
                stack.append(s)

    def at(self, thread: tuple[Any, Any], t: float) -> _Span | None:
        ss = self.by_thread.get(thread)
        if not ss:
            return None
        i = bisect.bisect_right(self.starts[thread], t + _EPS) - 1
        s = ss[i] if i >= 0 else None
        while s is not None and not s.end + _EPS >= t:
            s = s.parent
        return s

    def all(self) -> Iterable[_Span]:
        for ss in self.by_thread.values():
            yield from ss


def _is_work(s: _Span) -> bool:
    """An op whose work formula counts: no op below it has one (aten::linear defers to its aten::addmm)."""
    return s.name in _FORMULAS and not s.below_formula


def _load(trace: dict[str, Any] | str | os.PathLike[str]) -> dict[str, Any]:
    if isinstance(trace, dict):
        return trace
    path = Path(trace)
    try:
        raw = gzip.open(path, "rt").read() if path.suffix == ".gz" else path.read_text()
        data = json.loads(raw)
    except (OSError, ValueError) as exc:
        raise ConfigError(f"{path}: not a readable Chrome trace ({exc})") from None
    if isinstance(data, list):
        data = {"traceEvents": data}
    if not isinstance(data, dict) or not isinstance(data.get("traceEvents"), list):
        raise ConfigError(f"{path}: a Chrome trace is a JSON object with `traceEvents`")
    return data


def _span(e: dict[str, Any]) -> _Span:
    start = float(e["ts"])
    return _Span(
        str(e.get("name", "")),
        start,
        start + float(e.get("dur", 0.0)),
        (e.get("pid"), e.get("tid")),
        e.get("args") or {},
    )


def parse_trace(
    trace: dict[str, Any] | str | os.PathLike[str], *, peaks: Peaks | None = None, iterations: int = 1, target: str = ""
) -> Profile:
    """A Profile from a Chrome trace torch wrote (a dict, or a .json / .json.gz file).

    `peaks` default: the measured peaks of the trace's GPU (`deviceProperties`), if evokernel knows it."""
    data = _load(trace)
    ops, scopes, nn_scopes, gpu, launches, flows = [], [], [], [], {}, {}
    for e in data["traceEvents"]:
        if not isinstance(e, dict):
            continue
        ph, cat = e.get("ph"), str(e.get("cat", "")).lower()
        if ph == "s" and cat == "ac2g":
            flows[e.get("id")] = e
        if ph != "X" or "ts" not in e:
            continue
        if cat == "cpu_op":
            ops.append(_span(e))
        elif cat == "user_annotation" and str(e.get("name", "")).startswith(SCOPE):
            scopes.append(_span(e))
        elif cat == "python_function" and str(e.get("name", "")).startswith("nn.Module: "):
            nn_scopes.append(_span(e))
        elif cat in _GPU_CATS:
            gpu.append(e)
        elif cat in _LAUNCH_CATS and (e.get("args") or {}).get("correlation") is not None:
            launches[e["args"]["correlation"]] = e
    op_line = _Timeline(ops)
    scope_line = _Timeline(scopes or nn_scopes)
    for s in scope_line.all():
        if scopes:
            s.path = s.name[len(SCOPE) :] or ROOT
        else:
            short = s.name[len("nn.Module: ") :]
            s.path = f"{s.parent.path}.{short}" if s.parent is not None else short
    for s in sorted(op_line.all(), key=lambda s: -s.start):  # children before their parents
        if s.parent is not None and (s.below_formula or s.name in _FORMULAS):
            s.parent.below_formula = True
    ext_ids = {s.args.get("External id"): s for s in ops if s.args.get("External id") is not None}

    notes: list[str] = []
    props = [p for p in data.get("deviceProperties") or [] if isinstance(p, dict)]
    # the GPU the kernels ran on (a trace lists every GPU of the host; the first may be another)
    ran_on = next((d for e in gpu if (d := (e.get("args") or {}).get("device")) is not None), None)
    named = [p for p in props if ran_on is not None and str(p.get("id")) == str(ran_on)] or props
    device_name = str(named[0].get("name", "")) if named else ""
    records: list[dict[str, Any]] = []  # kernel fields, and the op whose work they share
    launch_us = 0.0
    if gpu:
        device = "cuda"
        device_name = device_name or "unknown GPU"
        for e in gpu:
            args = e.get("args") or {}
            launch, op, scope = launches.get(args.get("correlation")), None, None
            where = launch or flows.get(args.get("correlation"))
            if where is not None:
                thread, t = (where.get("pid"), where.get("tid")), float(where["ts"])
                op, scope = op_line.at(thread, t), scope_line.at(thread, t)
                launch_us += float(launch.get("dur", 0.0)) if launch is not None else 0.0
            else:
                op = ext_ids.get(args.get("External id"))
                scope = scope_line.at(op.thread, op.start) if op is not None else None
            stream = f"{args.get('device', e.get('pid'))}:{args.get('stream', e.get('tid'))}"
            records.append(
                {
                    "name": str(e.get("name", "")),
                    "op": op,
                    "scope": scope,
                    "stream": stream,
                    "start": float(e["ts"]),
                    "dur": float(e.get("dur", 0.0)),
                }
            )
        by_stream: dict[str, list[dict[str, Any]]] = defaultdict(list)
        for r in records:
            by_stream[r["stream"]].append(r)
        for rs in by_stream.values():
            rs.sort(key=lambda r: r["start"])
            end = None
            for r in rs:
                r["gap"] = max(0.0, r["start"] - end) if end is not None else 0.0
                end = max(end or r["start"], r["start"] + r["dur"])
    else:
        device, device_name = "cpu", "cpu"
        notes.append(
            "no GPU activity in the trace: each cpu_op's self time (outside its child ops) stands for a "
            "kernel (an op with a work formula: its whole time), and gaps are the time between top-level "
            "ops (Python and framework overhead)"
        )
        for thread, ss in op_line.by_thread.items():
            end = None
            for s in ss:
                gap = 0.0
                if s.parent is None:
                    gap = max(0.0, s.start - end) if end is not None else 0.0
                    end = max(end or s.end, s.end)
                up = s.parent
                while up is not None and not _is_work(up):
                    up = up.parent
                if up is not None:
                    continue  # inside a work op, which stands for its whole time
                records.append(
                    {
                        "name": s.name,
                        "op": s,
                        "scope": scope_line.at(thread, s.start),
                        "stream": str(thread[1]),
                        "start": s.start,
                        "dur": s.dur if _is_work(s) else max(0.0, s.dur - s.child_us),
                        "gap": gap,
                    }
                )

    if peaks is None and device == "cuda":
        peaks = PEAKS.get(device_name)
    if peaks is None:
        notes.append(
            f"no roofline: evokernel has no measured peaks for {device_name!r} (it knows {', '.join(sorted(PEAKS))})"
        )

    # work: each kernel joins the innermost op with a formula above it, if none below that one has one
    units: dict[int, list[dict[str, Any]]] = defaultdict(list)
    unit_ops: dict[int, _Span] = {}
    for r in records:
        s = r["op"]
        while s is not None and s.name not in _FORMULAS:
            s = s.parent
        if s is not None and _is_work(s):
            units[id(s)].append(r)
            unit_ops[id(s)] = s
    for key, rs in units.items():
        s = unit_ops[key]
        work = _FORMULAS[s.name](s.args)
        if work is None:
            continue
        given = s.args.get("flops")  # the profiler's own count, where a torch writes it into the trace
        if isinstance(given, (int, float)) and given > 0:
            work = _Work(float(given), work.bytes, work.dtype)
        time = sum(r["dur"] for r in rs)
        for r in rs:
            part = r["dur"] / time if time > 0 else 1.0 / len(rs)
            r["flops"] = work.flops * part if work.flops is not None else None
            r["bytes"] = work.bytes * part if work.bytes is not None else None
            if peaks is not None:
                compute = r["flops"] / peaks.flops(work.dtype) if r["flops"] is not None else 0.0
                memory = r["bytes"] / peaks.bytes if r["bytes"] is not None else 0.0
                r["ideal"] = max(compute, memory) * 1e6
    unknown = sum(r["dur"] for r in records if "bytes" not in r)
    busy = sum(r["dur"] for r in records)
    if busy > 0 and unknown > 0:
        notes.append(
            f"{unknown / busy:.0%} of the kernel time has no work formula (its op is not in the table), so no roofline"
        )

    kernels = [
        Kernel(
            name=r["name"],
            op=r["op"].name if r["op"] is not None else UNKNOWN_OP,
            module=r["scope"].path if r["scope"] is not None else OUTSIDE,
            stream=r["stream"],
            start_us=r["start"],
            dur_us=r["dur"],
            gap_us=r["gap"],
            flops=r.get("flops"),
            bytes=r.get("bytes"),
            ideal_us=r.get("ideal"),
        )
        for r in records
    ]
    kernels.sort(key=lambda k: (k.start_us, k.stream))
    return Profile(
        target=target,
        device=device,
        device_name=device_name,
        iterations=iterations,
        peaks=peaks.name if peaks is not None else None,
        kernels=kernels,
        launch_api_us=launch_us,
        notes=notes,
    )


# -- running a model -------------------------------------------------------------------------------
def _scopes(model: Any) -> list[Any]:
    """Forward hooks that open a record_function scope per named submodule; their handles."""
    from torch.autograd.profiler import record_function

    open_: list[Any] = []
    handles = []
    for name, mod in model.named_modules():
        label = SCOPE + name

        def enter(module: Any, inputs: Any, label: str = label) -> None:
            rf = record_function(label)
            rf.__enter__()
            open_.append(rf)

        def leave(module: Any, inputs: Any, output: Any) -> None:
            if open_:
                open_.pop().__exit__(None, None, None)

        handles.append(mod.register_forward_pre_hook(enter))
        handles.append(mod.register_forward_hook(leave, always_call=True))
    return handles


def profile_module(
    model: Any,
    example_inputs: Any,
    *,
    device: str | None = None,
    warmup: int = 3,
    iters: int = 10,
    target: str = "",
    trace_path: str | os.PathLike[str] | None = None,
    peaks: Peaks | None = None,
) -> Profile:
    """Profile `model(*example_inputs)` on `device` (default: cuda when present): `warmup` calls,
    then `iters` calls under torch.profiler, in eval mode and inference_mode. The model and
    tensor inputs are moved to the device ("cpu", "cuda" or "cuda:N"); `trace_path` keeps the
    Chrome trace."""
    device = check_device(device, f"profile on device {device!r}") if device else default_device()
    on_gpu = is_cuda(device)
    with on_device(device):  # (the profiler's CUDA activity and the synchronisations: that GPU)
        return _profile_module(model, example_inputs, device, on_gpu, warmup, iters, target, trace_path, peaks)


def _profile_module(
    model: Any,
    example_inputs: Any,
    device: str,
    on_gpu: bool,
    warmup: int,
    iters: int,
    target: str,
    trace_path: str | os.PathLike[str] | None,
    peaks: Peaks | None,
) -> Profile:
    import torch
    from torch.profiler import ProfilerActivity, profile

    inputs = example_inputs if isinstance(example_inputs, (tuple, list)) else (example_inputs,)
    inputs = tuple(x.to(device) if isinstance(x, torch.Tensor) else x for x in inputs)
    model = model.to(device).eval()
    sync = torch.cuda.synchronize if on_gpu else (lambda: None)
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if on_gpu else [])
    handles = _scopes(model)
    try:
        with torch.inference_mode():
            for _ in range(warmup):
                model(*inputs)
            sync()
            with profile(activities=activities, record_shapes=True, with_flops=True) as prof:
                for _ in range(iters):
                    model(*inputs)
                sync()
    finally:
        for h in handles:
            h.remove()
    if peaks is None and on_gpu:
        peaks = peaks_for(device)
    if trace_path is not None:
        prof.export_chrome_trace(str(trace_path))
        return parse_trace(trace_path, peaks=peaks, iterations=iters, target=target)
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "trace.json")
        prof.export_chrome_trace(path)
        return parse_trace(path, peaks=peaks, iterations=iters, target=target)


def load_target(path: str | os.PathLike[str]) -> tuple[Any, tuple[Any, ...], str]:
    """(model, example_inputs, name) from a .py file defining `model` (an nn.Module or a zero-argument
    factory) and `example_inputs` (a tuple, a tensor, or a zero-argument factory), optionally `name`."""
    import torch

    from evokernel.judge.problem import load_module

    path = Path(path)
    if path.suffix != ".py" or not path.is_file():
        raise ConfigError(f"no such target file: {path} (a .py defining `model` and `example_inputs`)")
    try:
        mod = load_module(path, prefix="_evokernel_profile")
    except ConfigError:
        raise
    except Exception as exc:
        raise ConfigError(f"{path}: {type(exc).__name__}: {exc}") from None
    for attr in ("model", "example_inputs"):
        if not hasattr(mod, attr):
            raise ConfigError(f"{path}: defines no `{attr}`")
    try:
        model = mod.model if isinstance(mod.model, torch.nn.Module) else mod.model()
        inputs = mod.example_inputs() if callable(mod.example_inputs) else mod.example_inputs
    except Exception as exc:
        raise ConfigError(f"{path}: building the model or its inputs failed: {type(exc).__name__}: {exc}") from None
    if not isinstance(model, torch.nn.Module):
        raise ConfigError(f"{path}: `model` is not an nn.Module (nor a factory of one)")
    inputs = tuple(inputs) if isinstance(inputs, (tuple, list)) else (inputs,)
    return model, inputs, str(getattr(mod, "name", "") or path.stem)
