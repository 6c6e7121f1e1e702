"""The judge: checks a candidate against the problem's reference and times it, trusting
nothing the candidate's process says except what it wrote into memory the judge owns.

For every trial the judge draws fresh random inputs (unpredictable seeds) into buffers it
owns and reuses (pointers repeat, values change), computes the reference itself, poisons
the result slots, lets the candidate run and copy its outputs into the slots, stops the
candidate's processes, and compares. It also checks that inputs were not modified, that a
zero or constant output would have failed (else the problem is degenerate), re-checks
after timing, and rejects a time below the roofline floor.

>>> import torch
>>> compare([torch.ones(4)], [torch.ones(4) * 1.001], {"rtol": 1e-2, "atol": 1e-2}) is None
True
>>> compare([torch.ones(4)], [torch.full((4,), float("nan"))], {"rtol": 1e-2, "atol": 1e-2})
'output 0: 4 NaN or Inf values where the reference has 0'
"""

# One module on purpose, though over 400 lines: the verdict is one protocol with the candidate's process (setup, trials into
# owned buffers, poisoning, comparison, timing, re-check); `_Arena`, `_Shape` and `_Run` are its state, and `Judge`
# drives them in order. Comparison helpers that stand alone live at the top and are tested directly.

from __future__ import annotations

import contextlib
import logging
import math
import secrets
import statistics
import time
import warnings
from collections.abc import Mapping, Sequence
from typing import Any

import msgspec

from evokernel.judge._worker import VALUE_PREFIX, Done, poison_value
from evokernel.judge.timing import Perturber, bracket_misfit, median_ci, perturbable, time_judged
from evokernel.judge.device import check_device, cuda_index, is_cuda, on_device
from evokernel.judge.footing import Footing
from evokernel.judge.hardware import Peaks, peaks_for
from evokernel.judge.problem import Problem, ProblemError, shape_key
from evokernel.core.result import Result, Status
from evokernel.judge.sandbox import Outcome, Sandbox, SandboxOptions, SandboxUnavailable
from evokernel.judge.toolcache import SeedCache

__all__ = ["GateOptions", "Verdict", "ShapeTiming", "Judge", "compare", "close_quietly"]

log = logging.getLogger("evokernel.judge")


def close_quietly(sandbox: Sandbox) -> None:
    """`sandbox.close()`, whose failure (logged) never ends the judge."""
    try:
        sandbox.close()
    except Exception:
        log.exception("closing the sandbox of %s", sandbox.label)


class GateOptions(msgspec.Struct, frozen=True, kw_only=True):
    # checks per tuning shape before timing; timing then checks outputs on `rotate` more input
    # sets (sampled calls) and `recheck_seeds` more after it, plus the held-out shapes
    seeds: int = 1
    heldout_seeds: int = 1  # checks per held-out shape
    recheck_seeds: int = 1  # checks per tuning shape after timing
    time: bool = True
    rotate: int = 3  # input sets rotated while timing
    samples: int = 8  # timed calls whose outputs are checked: a uniform draw from all of them (reservoir)
    sample_rate: float = 0.3  # unused since the reservoir draw (kept so saved options still load)
    timing: dict[str, Any] = msgspec.field(default_factory=dict)  # passed to bench.time_cuda / time_cpu
    # how timed calls run on CUDA: "on" replays each from a CUDA graph (every candidate, so
    # all figures of a search stand on one footing; a call that cannot be captured fails),
    # "off" launches them eagerly behind a stream hold (the host's launch cost hidden), "auto"
    # picks per candidate by its speed (figures then compare only within one mode)
    graph: str = "on"
    # racing: when the best median so far of a shape is known, a candidate is first timed in
    # a short block of `race_reps` calls, and timed no further if it is more than `race`
    # times slower (its figure is then coarser, but it is no contender); 0 turns this off
    race: float = 1.5
    race_reps: int = 10
    perturb: int | None = None  # elements changed per input before each timed call (None: the problem's PERTURB)
    seed_cache: bool = True  # share Triton's host-side helpers built by trusted candidates (CUDA)
    escape_ratio: float = 2.0  # wall time per call above this x the timed median (+0.1 ms): work escaped
    # CUDA: the reported samples of each measured block against the judge's own clock
    # (timing.bracket_misfit): the calibrated harness cost per call is multiplied by
    # `bracket_slack`, `bracket_ms` allowed per block, `bracket_tol` relative
    bracket_slack: float = 2.0
    bracket_ms: float = 2.0
    bracket_tol: float = 0.05
    sandbox: SandboxOptions = msgspec.field(default_factory=SandboxOptions)


class ShapeTiming(msgspec.Struct, frozen=True, kw_only=True):
    shape: str
    median_ms: float
    ci_low_ms: float
    ci_high_ms: float
    samples: int
    graph: bool
    footing: Footing | None = None  # how the samples were timed (graph replay, held eager calls, CPU wall clock)
    tflops: float | None = None
    gbps: float | None = None
    roofline_pct: float | None = None  # of the measured peaks


class Verdict(msgspec.Struct, kw_only=True):
    accepted: bool
    reason: str
    status: Status
    label: str = ""
    # the tuning shapes' medians combined: with the problem's WEIGHTS their weighted arithmetic
    # mean (the expected time per call under the workload), else their geometric mean
    latency_ms: float | None = None
    noise: float = 0.0
    timings: list[ShapeTiming] = msgspec.field(default_factory=list)
    checks: int = 0
    seeds: list[int] = msgspec.field(default_factory=list)
    import_s: float = 0.0
    compile_s: float = 0.0
    log_tail: str = ""
    wait_s: float = 0.0  # the judge waiting for the candidate to import and compile
    judge_s: float = 0.0  # checking and timing, once it was ready
    phases: dict[str, float] = msgspec.field(default_factory=dict)  # seconds in checks, timing, re-checks
    steps: dict[str, float] = msgspec.field(default_factory=dict)  # finer: seconds per step, judge and worker
    fault: bool = False  # the candidate's process died on the GPU: check the GPU before going on
    internal: bool = False  # the judge itself failed on this candidate (the reason says how)
    raced: list[str] = msgspec.field(default_factory=list)  # shapes timed only briefly (far off the best)

    def to_result(self) -> Result:
        meta = {
            "import_s": self.import_s,
            "compile_s": self.compile_s,
            "checks": self.checks,
            "wait_s": self.wait_s,
            "judge_s": self.judge_s,
            **{f"{k}_s": v for k, v in self.phases.items()},
            "timings": msgspec.to_builtins(self.timings),
            "raced": list(self.raced),
            "steps": dict(self.steps),
        }
        if self.accepted and self.latency_ms is not None:
            return Result.ok(
                self.latency_ms, noise=self.noise, per_shape={t.shape: t.median_ms for t in self.timings}, meta=meta
            )
        error = self.reason + (f"\n{self.log_tail}" if self.log_tail else "")
        return Result.failed(self.status, error, meta=meta)


# -- comparison ----------------------------------------------------------------------------
def compare(
    refs: Sequence[Any], outs: Sequence[Any], tol: Mapping[str, float] | Sequence[Mapping[str, float]]
) -> str | None:
    """None if every output matches its reference within tolerance, else why not. `tol`: one
    {"rtol", "atol"} for every output, or one per output (each at its own dtype's).

    Scale-aware: the absolute tolerance is relative to the reference's RMS (floored at 1),
    so neither huge nor tiny outputs make the check meaningless. NaN or Inf must sit exactly
    where the reference has them, NaN where it has NaN and Inf of the same sign where it has
    Inf. Complex outputs are compared as (real, imaginary) pairs, both parts checked."""
    tols = [tol] * len(refs) if isinstance(tol, Mapping) else list(tol)
    if len(tols) != len(refs):
        raise ValueError(f"compare: {len(tols)} tolerances for {len(refs)} outputs")
    for i, (ref, out, t) in enumerate(zip(refs, outs, tols)):
        wrong = _compare_one(ref, out, t)
        if wrong is not None:
            return f"output {i}: {wrong}"
    return None


def _compare_one(ref: Any, out: Any, tol: Mapping[str, float]) -> str | None:
    import torch

    if not (ref.is_floating_point() or ref.is_complex()):
        if not torch.equal(ref, out):
            n = int((ref != out).sum())
            return f"{n} of {ref.numel()} values differ (exact match required for {ref.dtype})"
        return None
    r, o = _as_real(ref, out)
    if r is None:
        return f"a {out.dtype} output where the reference is {ref.dtype}"
    finite = torch.isfinite(r)
    bad_out = int((~torch.isfinite(o)).sum())
    bad_ref = int((~finite).sum())
    if bad_out != bad_ref:
        return f"{bad_out} NaN or Inf values where the reference has {bad_ref}"
    if bad_ref:
        # NaN only where the reference has NaN; an infinity only where the reference has the same one
        differ = (torch.isnan(r) ^ torch.isnan(o)) | ((torch.isinf(r) | torch.isinf(o)) & (r != o))
        n = int(differ.sum())
        if n:
            return f"{n} NaN or Inf values unlike the reference's at their positions (NaN vs Inf, or Inf's sign)"
        r, o = torch.where(finite, r, 0), torch.where(finite, o, 0)
    scale = max(1.0, float(r.square().mean().sqrt()))
    excess = (o - r).abs_().sub_(r.abs().mul_(tol["rtol"]).add_(tol["atol"] * scale))
    worst = float(excess.max()) if excess.numel() else 0.0
    if worst > 0:
        j = int(excess.argmax())
        n = int((excess > 0).sum())
        return (
            f"{n} of {r.numel()} values off by more than tolerance "
            f"(worst {float(o.reshape(-1)[j]):.6g} vs {float(r.reshape(-1)[j]):.6g}, "
            f"rtol {tol['rtol']}, atol {tol['atol']})"
        )
    return None


def _as_real(ref: Any, out: Any) -> tuple[Any, Any] | tuple[None, None]:
    """Reference and output in the working precision (float64 for 64-bit data, else float32),
    complex ones as (real, imaginary) pairs so neither part is dropped; (None, None) for a
    complex output of a real reference (a cast would drop its imaginary part unchecked)."""
    import torch

    if ref.is_complex():
        work = torch.complex128 if ref.dtype == torch.complex128 else torch.complex64
        return torch.view_as_real(ref.to(work)), torch.view_as_real(out.to(work))
    if out.is_complex():
        return None, None
    work = torch.float64 if ref.dtype == torch.float64 else torch.float32
    return ref.to(work), out.to(work)


def _as_list(x: Any) -> list[Any]:
    return list(x) if isinstance(x, (tuple, list)) else [x]


def _bytes_equal(a: Any, b: Any) -> bool:
    import torch

    if not (isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor)):
        return type(a) is type(b) and a == b
    return torch.equal(a.reshape(-1).view(torch.uint8), b.reshape(-1).view(torch.uint8))


def _is_tensor(x: Any) -> bool:
    import torch

    return isinstance(x, torch.Tensor)


def _flop_dtypes(inputs: Sequence[Any]) -> list[str]:
    """The dtypes whose peak rates bound a shape's arithmetic: its floating-point tensor
    inputs' (else any tensor input's), host-side values skipped. The floor takes the highest
    of their peaks, so it stays a lower bound on the time where the work runs in the fastest
    of them (fp8 weights next to bf16 activations); empty where no input is a tensor."""
    tensors = [t for t in inputs if _is_tensor(t)]
    chosen = [t for t in tensors if t.is_floating_point()] or tensors
    return list(dict.fromkeys(str(t.dtype).removeprefix("torch.") for t in chosen))


def _plain(value: Any, where: str) -> Any:
    """A problem's host-side input (a length, a maximum length, a tuple of lengths) as it is
    handed to the kernel: ints, floats, bools, strings and tuples of them, checked here so the
    candidate's process gets it back exactly (lists become tuples)."""
    if isinstance(value, (list, tuple)):
        return tuple(_plain(v, where) for v in value)
    if isinstance(value, (bool, int, float, str)) and not (isinstance(value, float) and not math.isfinite(value)):
        return value
    raise ProblemError(
        f"{where}: make_inputs returned a {type(value).__name__}; inputs are tensors or plain "
        "host-side values (int, float, bool, str, or tuples of them)"
    )


def _value_ref(value: Any) -> tuple[int, list[int], str]:
    """A reference (offset, shape, dtype) that carries a plain input value itself (no memory in
    the arena); its (shape, stride, dtype) spec for the candidate's compile is `[], [], dtype`."""
    return (-1, [], VALUE_PREFIX + msgspec.json.encode(value).decode())


def _clone(x: Any) -> Any:
    return x.clone() if _is_tensor(x) else x


def _seed() -> int:
    return secrets.randbits(62)


def _poison(ts: Sequence[Any]) -> None:
    for t in ts:
        t.fill_(poison_value(t))


def _constant_like(r: Any) -> Any:
    """A tensor of `r`'s shape and dtype holding its mean (complex for complex outputs)."""
    import torch

    if r.is_complex():
        return torch.full_like(r, complex(r.to(torch.complex128).mean().item()))
    mean = float(r.double().mean())
    return torch.full_like(r, mean if r.is_floating_point() else int(mean))


class _Arena:
    """One block of judge-owned memory that every buffer is a view of, so a candidate's
    process maps a single shared allocation (one CUDA IPC handle, one file descriptor)."""

    ALIGN = 256

    def __init__(self, device: str) -> None:
        self.device = device
        self.requests: list[tuple[tuple[int, ...], Any]] = []
        self.base: Any = None

    def request(self, shape: Sequence[int], dtype: Any) -> int:
        self.requests.append((tuple(shape), dtype))
        return len(self.requests) - 1

    def build(self) -> tuple[list[Any], list[tuple[int, list[int], str]]]:
        """The views, and for each a reference (byte offset, shape, dtype) that the
        candidate's process turns back into the same view of its mapping of the block."""
        import torch

        offsets, total = [], 0
        for shape, dtype in self.requests:
            offsets.append(total)
            nbytes = math.prod(shape) * dtype.itemsize
            total += -(-max(nbytes, 1) // self.ALIGN) * self.ALIGN
        self.base = torch.empty(max(total, self.ALIGN), dtype=torch.uint8, device=self.device)
        if self.device == "cpu":
            self.base.share_memory_()
        views, refs = [], []
        for (shape, dtype), off in zip(self.requests, offsets):
            n = math.prod(shape) * dtype.itemsize
            views.append(self.base[off : off + n].view(dtype).view(shape))
            refs.append((off, list(shape), str(dtype).removeprefix("torch.")))
        return views, refs


def _reference(problem: Problem, args: Sequence[Any], timeout_s: float, where: str) -> Any:
    """The problem's reference on `args`, in the judge's process, bounded by `timeout_s` where
    the judge runs on the main thread (`evokernel.core.deadline`; elsewhere unbounded): a
    reference that hangs held `evokernel check` for good. Raises ProblemError when it runs out."""
    from evokernel.core.deadline import deadline

    def late() -> ProblemError:
        return ProblemError(f"{problem.name}: the reference did not return within {timeout_s:g} s ({where})")

    with deadline(timeout_s, late):
        return problem.reference(*args)


class _Shape:
    """Judge-owned buffers for one shape: inputs refilled for every trial (pointers repeat,
    values change), poisoned result slots, rotation sets for timing, and slots where the
    candidate's process copies outputs of timed calls drawn at random."""

    def __init__(
        self,
        problem: Problem,
        shape: dict[str, Any],
        device: str,
        arena: _Arena,
        *,
        rotate: int,
        samples: int,
        reference_timeout_s: float = 0.0,
    ) -> None:
        self.problem, self.shape, self.device = problem, shape, device
        self.reference_timeout_s = reference_timeout_s
        self.key = shape_key(shape)
        first = _as_list(problem.make_inputs(dict(shape), _seed(), device))
        # host-side inputs (lengths, maximum lengths: what real varlen APIs take as Python
        # values) are part of the shape: the same in every draw, handed over as values
        self.values = {
            i: _plain(x, f"{problem.name} {self.key}, input {i}") for i, x in enumerate(first) if not _is_tensor(x)
        }
        refs = _as_list(_reference(problem, first, reference_timeout_s, self.key))
        self.specs = [
            ([], [], _value_ref(self.values[i])[2])
            if i in self.values
            else (list(t.shape), list(t.contiguous().stride()), str(t.dtype).removeprefix("torch."))
            for i, t in enumerate(first)
        ]
        ins = [None if i in self.values else (t.shape, t.dtype) for i, t in enumerate(first)]
        outs = [(r.shape, r.dtype) for r in refs]
        self._ids = {
            "inputs": [self._request(arena, x) for x in ins],
            "slots": [arena.request(*x) for x in outs],
            "rotation": [[self._request(arena, x) for x in ins] for _ in range(rotate)],
            "samples": [[arena.request(*x) for x in outs] for _ in range(samples)],
        }
        self.inputs: list[Any] = []
        self.slots: list[Any] = []
        self.rotation: list[list[Any]] = []
        self.samples: list[list[Any]] = []

    @staticmethod
    def _request(arena: _Arena, x: Any) -> Any:
        return arena.request(*x) if x is not None else None

    def bind(self, views: list[Any], refs: list[Any]) -> None:
        ids = self._ids

        def inputs(group: list[Any], of: list[Any]) -> list[Any]:
            return [
                of[i] if i is not None else (self.values[j] if of is views else _value_ref(self.values[j]))
                for j, i in enumerate(group)
            ]

        self.inputs = inputs(ids["inputs"], views)
        self.slots = [views[i] for i in ids["slots"]]
        self.rotation = [inputs(group, views) for group in ids["rotation"]]
        self.samples = [[views[i] for i in group] for group in ids["samples"]]
        self.refs = {
            "inputs": inputs(ids["inputs"], refs),
            "slots": [refs[i] for i in ids["slots"]],
            "rotation": [inputs(group, refs) for group in ids["rotation"]],
            "samples": [[refs[i] for i in group] for group in ids["samples"]],
        }

    def _fill(self, bufs: list[Any], fresh: list[Any]) -> None:
        """Copy a fresh draw into the buffers; a host-side value must be the shape's own."""
        if len(fresh) != len(bufs):
            raise ProblemError(
                f"{self.problem.name} {self.key}: make_inputs returned {len(fresh)} inputs, then {len(bufs)}"
            )
        for i, (buf, new) in enumerate(zip(bufs, fresh)):
            if i in self.values:
                if _plain(new, self.key) != self.values[i]:
                    raise ProblemError(
                        f"{self.problem.name} {self.key}: host-side input {i} changed between "
                        f"draws ({self.values[i]!r}, then {new!r}): it must follow from the shape"
                    )
            else:
                buf.copy_(new)

    def refill(self, seed: int) -> tuple[list[Any], list[Any]]:
        """New values in the same buffers; returns (reference outputs, pristine input copies)."""
        fresh = _as_list(self.problem.make_inputs(dict(self.shape), seed, self.device))
        self._fill(self.inputs, fresh)
        pristine = [_clone(t) for t in self.inputs]
        refs = _as_list(_reference(self.problem, [_clone(t) for t in self.inputs], self.reference_timeout_s, self.key))
        _poison(self.slots)
        return refs, pristine

    def refill_rotation(self, seeds: Sequence[int] | None = None) -> list[list[Any]]:
        """Fresh values in every rotation set (from `seeds`, one per set, where given: the
        same inputs for every candidate of an interleaved round); returns their pristine copies."""
        pristine = []
        for j, group in enumerate(self.rotation):
            seed = seeds[j] if seeds is not None else _seed()
            fresh = _as_list(self.problem.make_inputs(dict(self.shape), seed, self.device))
            self._fill(group, fresh)
            pristine.append([_clone(t) for t in group])
        for group in self.samples:
            _poison(group)
        return pristine

    def perturbed(self, base: list[Any], changes: list[tuple[int, list[int], list[float]]], k: int) -> list[Any] | str:
        """The inputs of one timed call: a rotation set with the elements the worker changed,
        or why the reported changes are not what the worker was asked to make."""
        import torch

        inputs = [_clone(t) for t in base]
        expected = {j for j, t in enumerate(base) if perturbable(t, k)}
        seen = set()
        for j, positions, values in changes:
            if (
                j not in expected
                or j in seen
                or len(positions) != k
                or len(values) != k
                or len(set(positions)) != k
                or not all(0 <= q < base[j].numel() for q in positions)
            ):
                return f"malformed perturbation report for input {j}"
            seen.add(j)
            t = inputs[j]
            new = torch.tensor(values, dtype=torch.float64).to(t.dtype)  # exact: t.dtype's values, sent as float64
            if t.element_size() == 1:  # fp8: written as bytes (index writes on fp8 are not in every build)
                t.view(torch.uint8).view(-1)[torch.tensor(positions, device=t.device)] = new.view(torch.uint8).to(
                    t.device
                )
            else:
                t.view(-1)[torch.tensor(positions, device=t.device)] = new.to(t.device)
        if seen != expected:
            return "perturbation report misses inputs"
        return inputs


class _Rejected(Exception):
    """Ends a judge-timed loop (`Judge._time_judged`) with the verdict it carries."""

    def __init__(self, verdict: Verdict) -> None:
        super().__init__(verdict.reason)
        self.verdict = verdict


def _null_source(shapes: Sequence[_Shape]) -> str:
    """A trusted candidate that does next to nothing: outputs of the right shapes and dtypes
    (made once per input shape, zeroed each call). Timed in the harness, the time outside
    its calls is the harness's own (`Judge._overhead`)."""
    table = {
        repr(tuple(s.values[i] if i in s.values else tuple(spec[0]) for i, spec in enumerate(s.specs))): [
            (list(t.shape), str(t.dtype).removeprefix("torch.")) for t in s.slots
        ]
        for s in shapes
    }
    return (
        "import torch\n\n"
        f"_OUTS = {table!r}\n"
        "_made = {}\n\n\n"
        "def kernel(*args):\n"
        "    tensors = [a for a in args if isinstance(a, torch.Tensor)]\n"
        "    key = repr(tuple(tuple(a.shape) if isinstance(a, torch.Tensor) else a for a in args))\n"
        "    outs = _made.get(key)\n"
        "    if outs is None:\n"
        "        outs = _made[key] = [\n"
        "            torch.zeros(s, dtype=getattr(torch, d), device=tensors[0].device) for s, d in _OUTS[key]\n"
        "        ]\n"
        "    for o in outs:\n"
        "        o.zero_()\n"
        "    return outs[0] if len(outs) == 1 else tuple(outs)\n"
    )


_STATUS = {
    "timeout": Status.TIMEOUT,
    "crash": Status.CRASH,
    "exit": Status.CRASH,
    "protocol": Status.CRASH,
    "setup": Status.CRASH,
    "import": Status.COMPILE_ERROR,
    "no_kernel": Status.COMPILE_ERROR,
    "compile": Status.COMPILE_ERROR,
    "raised": Status.RUNTIME_ERROR,
    "cuda_error": Status.CRASH,
    "structure": Status.INCORRECT,
    "aliasing": Status.INCORRECT,
    "tampering": Status.INCORRECT,
    "threads": Status.INCORRECT,
    "host_sync": Status.RUNTIME_ERROR,
    "graph_capture": Status.RUNTIME_ERROR,
}


class _Run:
    """One candidate's way through the judge: prepare, check, time (one or more blocks per
    shape), re-check, verdict. Each step returns a rejecting Verdict or None."""

    def __init__(self, judge: Judge, sandbox: Sandbox) -> None:
        self.judge, self.sandbox = judge, sandbox
        self.seeds: list[int] = []
        self.samples: dict[str, list[float]] = {}
        self.footing: dict[str, Footing] = {}
        self.phases: dict[str, float] = {}
        self.steps: dict[str, float] = {}  # finer: the judge's and the worker's steps
        self.raced: list[str] = []
        self.blocks: dict[str, int] = {}  # timing blocks so far, per shape
        self.base: dict[str, Any] = {"label": sandbox.label}
        self.t0 = time.monotonic()

    def _done(self, v: Verdict) -> Verdict:
        return msgspec.structs.replace(
            v,
            checks=len(self.seeds),
            seeds=self.seeds,
            phases=self.phases,
            steps=self.steps,
            raced=self.raced,
            judge_s=time.monotonic() - self.t0 - self.base.get("wait_s", 0.0),
            **self.base,
        )

    def _phase(self, name: str, start: float) -> None:
        self.phases[name] = self.phases.get(name, 0.0) + time.monotonic() - start

    def prepare(self) -> Verdict | None:
        judge = self.judge
        if judge.degenerate:
            return self._done(Verdict(accepted=False, reason=judge.degenerate, status=Status.INVALID))
        ready = self.sandbox.wait_ready()
        self.base["wait_s"] = time.monotonic() - self.t0
        if isinstance(ready, Outcome):
            return self._done(judge._failed(ready.kind, ready.error, self.sandbox.label, ready.log_tail))
        self.base.update(import_s=ready.import_s, compile_s=ready.compile_s)
        # launch to ready, step by step (wall clock: the candidate's process stamps its steps)
        marks = [("fork", "entered"), ("setup", "set_up"), ("cuda_init", "cuda_up"), ("to_ready", "ready")]
        prev = self.sandbox.started_wall
        for name, key in marks:
            at = ready.stamps.get(key) if isinstance(ready.stamps, dict) else None
            if isinstance(at, (int, float)) and prev and math.isfinite(at) and 0 <= at - prev < 3600:
                self.steps[f"r_{name}"] = at - prev
                prev = at
        if judge.cuda:
            self.sandbox.prioritise()
        if judge.seed is not None and self.sandbox.trusted and not self.sandbox.uses:
            judge.seed.harvest(self.sandbox.work_dir)
        return None

    def _trials(self, plan: list[tuple[_Shape, int]], phase: str, name: str) -> Verdict | None:
        start = time.monotonic()
        for shape, n in plan:
            for _ in range(n):
                bad = self.judge._trial(self.sandbox, shape, self.seeds, phase=phase, steps=self.steps)
                if bad is not None:
                    return self._done(bad)
        self._phase(name, start)
        return None

    def check(self) -> Verdict | None:
        opt = self.judge.options
        plan = [(s, opt.seeds) for s in self.judge.tuning] + [(s, opt.heldout_seeds) for s in self.judge.heldout]
        return self._trials(plan, "", "checks")

    def time(self, shape: _Shape, spec: dict[str, Any], seeds: Sequence[int] | None = None) -> Verdict | None:
        start = time.monotonic()
        block = self.blocks.get(shape.key, 0)
        self.blocks[shape.key] = block + 1
        if seeds is None:  # this candidate's n-th block on this shape: the inputs every candidate's n-th had
            seeds = self.judge.timing_seeds(shape, block)
        got = self.judge._time_block(self.sandbox, shape, spec, steps=self.steps, seeds=seeds)
        self._phase("timing", start)
        if isinstance(got, Verdict):
            return self._done(got)
        samples, footing = got
        if self.footing.get(shape.key, footing) != footing:  # (graph="auto" may switch): one footing per figure
            self.samples[shape.key] = []
        self.samples.setdefault(shape.key, []).extend(samples)
        self.footing[shape.key] = footing
        return None

    def recheck(self) -> Verdict | None:
        plan = [(s, self.judge.options.recheck_seeds) for s in self.judge.tuning]
        return self._trials(plan, "after timing", "recheck")

    def accepted(self) -> Verdict:
        timings: list[ShapeTiming] = []
        weights: list[float] = []
        given = self.judge.problem.weights
        for i, shape in enumerate(self.judge.tuning):
            xs = self.samples.get(shape.key)
            if not xs:
                continue
            got = self.judge._roofline(shape, self.judge._summary(shape, xs, self.footing[shape.key]))
            if isinstance(got, Verdict):
                return self._done(got)
            timings.append(got)
            weights.append(given[i] if given else 1.0)
        if not timings:
            latency = None
        elif given:  # the expected time per call under the workload
            latency = sum(w * t.median_ms for w, t in zip(weights, timings)) / sum(weights)
        else:
            latency = math.exp(statistics.fmean(math.log(t.median_ms) for t in timings))
        noise = max(((t.ci_high_ms - t.ci_low_ms) / 2 / t.median_ms for t in timings), default=0.0)
        return self._done(
            Verdict(
                accepted=True, reason="accepted", status=Status.OK, latency_ms=latency, noise=noise, timings=timings
            )
        )


def _lap(steps: dict[str, float], name: str, since: float) -> float:
    now = time.monotonic()
    steps[name] = steps.get(name, 0.0) + now - since
    return now


def _compile_failure(text: str) -> bool:
    low = text.lower()
    return any(
        s in low
        for s in (
            "outofresources",
            "out of resource",
            "ptxas",
            "compilationerror",
            "compilation error",
            "triton.compiler",
        )
    )


class Judge:
    """Checks and times candidates for one problem on one device: "cpu", "cuda" (the current
    CUDA device when the judge is made) or "cuda:N". The judge's inputs live on that GPU, and
    the candidates' processes run on it (they are handed its index)."""

    def __init__(self, problem: Problem, device: str = "cpu", options: GateOptions | None = None) -> None:
        check_device(device, f"Judge(device={device!r})")
        self.problem = problem
        self.device = device  # as given: what the problem's make_inputs is handed
        self.options = options or GateOptions()
        from evokernel.judge.sandbox import isolation_report

        # which protections candidates get here (SandboxUnavailable now, before any device
        # memory is taken, if they are required and one does not hold)
        self.isolation = isolation_report(self.options.sandbox, device)
        self.cuda = is_cuda(device)
        # the GPU itself, fixed now ("cuda" is whichever was current): candidates are sent there
        self.index: int | None = cuda_index(device) if self.cuda else None
        with self.on_device():
            self._build(problem, device)

    def on_device(self) -> contextlib.AbstractContextManager[Any]:
        """The judge's GPU as the current CUDA device (nothing on the CPU)."""
        return on_device(f"cuda:{self.index}" if self.cuda else "cpu")

    @property
    def worker_device(self) -> str:
        """The device candidates' processes are told: "cuda:N" with the judge's GPU's index
        (a new process's "cuda" would be its GPU 0), or "cpu"."""
        return f"cuda:{self.index}" if self.cuda else "cpu"

    def _reference_timeout_s(self) -> float:
        """How long the problem's reference may take per call: 5 candidate calls' timeout (the
        reference is the user's own code, often a slow exact one; 300 s by default)."""
        return 5 * self.options.sandbox.call_timeout_s

    def _build(self, problem: Problem, device: str) -> None:
        self.peaks: Peaks | None = peaks_for(device)
        arena = _Arena(device)
        opt = self.options
        limit = self._reference_timeout_s()
        self.tuning = [
            _Shape(
                problem,
                s,
                device,
                arena,
                rotate=opt.rotate if opt.time else 0,
                samples=opt.samples if opt.time else 0,
                reference_timeout_s=limit,
            )
            for s in problem.shapes
        ]
        self.heldout = [
            _Shape(problem, s, device, arena, rotate=0, samples=0, reference_timeout_s=limit) for s in problem.heldout
        ]
        views, refs = arena.build()
        for shape in self.tuning + self.heldout:
            shape.bind(views, refs)
        self.arena = arena
        self._timing_seeds: dict[str, list[list[int]]] = {}
        self._overheads: dict[str, float | None] = {}  # per shape: the harness's cost per timed call (CUDA)
        self.degenerate = self._canary()
        # Triton's host-side helpers, built once by trusted candidates and copied into the rest
        self.seed = SeedCache() if self.cuda and self.options.seed_cache else None

    def timing_seeds(self, shape: _Shape, block: int) -> list[int]:
        """The input sets of every candidate's `block`-th timing block on `shape`: drawn once
        per judge, so candidates are timed on the same inputs where the work depends on the
        values (an MoE's routing), and different from block to block, so a candidate's
        process gains nothing by remembering earlier outputs."""
        drawn = self._timing_seeds.setdefault(shape.key, [])
        while len(drawn) <= block:
            drawn.append([_seed() for _ in shape.rotation])
        return drawn[block]

    def close(self) -> None:
        """Give the judge's memory back: the arena every input and output slot is a view of
        (with rotation sets, several copies of the problem's inputs: ~11 GB for Mixtral's
        experts), and on CUDA the blocks PyTorch keeps for candidate processes that mapped
        them (its IPC limbo, freed only by `torch.cuda.ipc_collect`). A benchmark that judged
        one problem after another without this held 95-128 GiB of the H200 by its twelfth,
        and the next jobs ran out of memory. The judge cannot be used afterwards."""
        for shape in self.tuning + self.heldout:
            shape.inputs, shape.slots, shape.rotation, shape.samples, shape.refs = [], [], [], [], {}
        self.tuning, self.heldout = [], []
        if self.cuda:
            import gc

            import torch

            from evokernel.judge.sandbox import release_dead_holders

            # the killed candidates' holds on the block (see sandbox.py), before it is freed
            alive = release_dead_holders(wait_s=10.0)
            if alive:
                warnings.warn(
                    f"{alive} candidate process(es) still alive 10 s after being killed: the judge's "
                    "memory stays allocated until they are gone",
                    RuntimeWarning,
                    stacklevel=2,
                )
            self.arena.base = None
            gc.collect()
            with self.on_device():
                torch.cuda.ipc_collect()
                torch.cuda.empty_cache()
        else:
            self.arena.base = None

    # -- candidates --------------------------------------------------------------------
    def sandbox(self, source: str, label: str = "candidate", *, trusted: bool = False) -> Sandbox:
        """A started sandbox: the candidate imports and compiles while the judge does other work.
        `trusted`: the source is the user's own template rendered, not a genome's text; the
        helpers Triton builds for it may be shared with later candidates."""
        specs = [s.specs for s in self.tuning + self.heldout]
        outs = sorted({str(t.dtype).removeprefix("torch.") for s in self.tuning for t in s.slots})
        sandbox = Sandbox(
            source,
            device=self.worker_device,
            input_specs=specs,
            arena=self.arena.base,
            output_dtypes=outs,
            options=self.options.sandbox,
            label=label,
            trusted=trusted,
            seed_cache=self.seed.path if self.seed is not None else None,
        )
        with self.on_device():  # (often on a thread of its own, whose current device is GPU 0)
            return sandbox.start()

    def check(self, source: str, label: str = "candidate", *, timed: bool = True) -> Verdict:
        """Judge `source` in a sandbox of its own. `timed=False` runs the checks alone (the
        health check after a fault: the reference must run and agree with itself, and a
        reference may read lengths back to the host, which the timing refuses)."""
        try:
            sandbox = self.sandbox(source, label)
        except SandboxUnavailable:  # the machine's, not the candidate's: a usage error
            raise
        except Exception as exc:
            return self.internal_error(exc, label, "starting its sandbox")
        try:
            if timed:
                return self.judge(sandbox)
            with self.on_device():
                run = _Run(self, sandbox)
                return run.prepare() or run.check() or run.accepted()
        except Exception as exc:  # the judge's own failure on this candidate is its verdict
            return self.internal_error(exc, label, "judging it")
        finally:
            close_quietly(sandbox)

    def internal_error(self, exc: BaseException, label: str, doing: str) -> Verdict:
        """The verdict for a candidate the judge itself failed on (an exception in the gate, in
        reading the candidate's answers, in cleaning up after it): rejected, with the reason,
        never the end of the judge. Logged with its traceback. On a GPU it counts as a fault
        (the next candidate waits for a health check)."""
        log.error("internal error while %s (%s)", doing, label, exc_info=exc)
        text = f"{type(exc).__name__}: {exc}"
        return Verdict(
            accepted=False,
            reason=f"internal error while {doing}: {text[:500]}",
            status=Status.CRASH,
            label=label,
            fault=self.cuda,
            internal=True,
        )

    def judge(self, sandbox: Sandbox, best: Mapping[str, float] | None = None) -> Verdict:
        """Check, time and re-check a started sandbox. `best`: the best median so far per
        shape key, for racing (see GateOptions.race)."""
        try:
            with self.on_device():
                return self._judge(sandbox, best)
        except Exception as exc:  # the judge's own failure on this candidate is its verdict
            return self.internal_error(exc, sandbox.label, "judging it")

    def _judge(self, sandbox: Sandbox, best: Mapping[str, float] | None) -> Verdict:
        run = _Run(self, sandbox)
        bad = run.prepare() or run.check()
        if bad is not None:
            return bad
        opt = self.options
        if opt.time:
            for shape in self.tuning:
                bar = (best or {}).get(shape.key) if opt.race > 0 else None
                if bar is not None:
                    short = {**opt.timing, "min_reps": opt.race_reps, "max_reps": opt.race_reps}
                    bad = run.time(shape, short)
                    if bad is not None:
                        return bad
                    if statistics.median(run.samples[shape.key]) > opt.race * bar:
                        run.raced.append(shape.key)
                        continue
                bad = run.time(shape, opt.timing)
                if bad is not None:
                    return bad
            bad = run.recheck()
            if bad is not None:
                return bad
        return run.accepted()

    def judge_together(self, sandboxes: Sequence[Sandbox], *, rounds: int = 3) -> list[Verdict]:
        """Judge several candidates with their timings interleaved: each shape is timed in
        `rounds` short blocks per candidate, alternating candidates (A B A B ...; the order
        rotates each round), so all of them are measured under the same conditions and, in a
        round, on the same inputs (new ones each round). This is
        how elites are re-measured against each other before they are reported."""
        try:
            with self.on_device():
                return self._judge_together(sandboxes, rounds)
        except Exception as exc:  # which candidate it was is unknown: each gets the failure
            return [self.internal_error(exc, sb.label, "judging candidates together") for sb in sandboxes]

    def _judge_together(self, sandboxes: Sequence[Sandbox], rounds: int) -> list[Verdict]:
        runs = [_Run(self, sb) for sb in sandboxes]
        verdicts: list[Verdict | None] = [run.prepare() or run.check() for run in runs]
        block = dict(self.options.timing)
        block["max_reps"] = max(10, int(block.get("max_reps", 1000)) // rounds)
        block["min_reps"] = max(5, int(block.get("min_reps", 30)) // rounds)
        for shape in self.tuning if self.options.time else []:
            for r in range(rounds):
                live = [i for i, v in enumerate(verdicts) if v is None]
                # one draw of input sets per round, the same for every candidate in it: where
                # the work depends on the values (an MoE's routing: 2-4 of Mixtral's experts at
                # 2 tokens, a 2x spread in time), a candidate is not judged on easier inputs
                # than its rivals; new values every round, so nothing carries over
                seeds = [_seed() for _ in shape.rotation]
                for i in live[r % len(live) :] + live[: r % len(live)] if live else []:
                    verdicts[i] = runs[i].time(shape, block, seeds)
        for i, run in enumerate(runs):
            if verdicts[i] is None and self.options.time:
                verdicts[i] = run.recheck()
            if verdicts[i] is None:
                verdicts[i] = run.accepted()
        return [v for v in verdicts if v is not None]

    # -- steps -------------------------------------------------------------------------
    def _trial(
        self, sandbox: Sandbox, shape: _Shape, seeds: list[int], phase: str = "", steps: dict[str, float] | None = None
    ) -> Verdict | None:
        steps = steps if steps is not None else {}
        t = time.monotonic()
        seed = _seed()
        seeds.append(seed)
        refs, pristine = shape.refill(seed)
        trial = len(seeds)
        self._settle()
        t = _lap(steps, "trial_prep", t)
        done = sandbox.call(trial, shape.refs["inputs"], shape.refs["slots"])
        t = _lap(steps, "trial_call", t)
        where = f"{shape.key}" + (f", {phase}" if phase else "")
        if isinstance(done, Outcome):
            return self._failed(done.kind, f"{done.error} ({where})", sandbox.label, done.log_tail)
        assert isinstance(done, Done)
        if not done.ok:
            return self._failed(done.kind, f"{done.error} ({where})", sandbox.label, sandbox.log_tail())
        with sandbox.paused():
            self._settle()
            wrong = compare(refs, shape.slots, self._tolerance(refs))
            mutated = next((i for i, (a, b) in enumerate(zip(shape.inputs, pristine)) if not _bytes_equal(a, b)), None)
        _lap(steps, "trial_compare", t)
        if mutated is not None:
            return Verdict(
                accepted=False, reason=f"input {mutated} was modified by the kernel ({where})", status=Status.INCORRECT
            )
        if wrong is not None:
            return Verdict(accepted=False, reason=f"wrong result: {wrong} ({where})", status=Status.INCORRECT)
        return None

    def _time_block(
        self,
        sandbox: Sandbox,
        shape: _Shape,
        timing: dict[str, Any],
        steps: dict[str, float] | None = None,
        seeds: Sequence[int] | None = None,
        retry_misfit: bool = True,
    ) -> tuple[list[float], Footing] | Verdict:
        """One timing block on fresh rotation inputs. On the CPU the judge times every call
        itself (`_time_judged`); on the GPU the worker's CUDA-event samples are held to the
        judge's own brackets of each measured block. The timed outputs drawn are checked, and
        so are the inputs (unchanged) and the samples (finite, in the timed stream). Returns
        (samples in ms, the footing they stand on).

        Samples that add up to less than the judge's window allows are timed once more before
        the candidate is rejected: a judge whose own host was busy (14 compile workers on 16
        cores) read one honest block late on the H100. A forger's samples misfit every time;
        the figure kept is the second block's."""
        steps = steps if steps is not None else {}
        k = self.problem.perturb if self.options.perturb is None else self.options.perturb
        spec = {"graph": self.options.graph, **timing, "sample_rate": self.options.sample_rate, "perturb": k}
        if not self.cuda:
            return self._time_judged(sandbox, shape, timing, k, steps, seeds)
        overhead = self._overhead(shape, spec, steps)
        t = time.monotonic()
        pristine = shape.refill_rotation(seeds)
        self._settle()
        t = _lap(steps, "time_prep", t)
        observed = sandbox.time(shape.key, shape.refs["rotation"], shape.refs["samples"], spec)
        t = _lap(steps, "time_worker", t)
        if isinstance(observed, Outcome):
            return self._failed(
                observed.kind, f"{observed.error} ({shape.key}, timing)", sandbox.label, observed.log_tail
            )
        got, brackets = observed
        for name, secs in got.phases.items():
            if isinstance(name, str) and isinstance(secs, (int, float)) and math.isfinite(secs):
                steps[f"w_{name[:16]}"] = steps.get(f"w_{name[:16]}", 0.0) + float(secs)
        if not got.ok:
            return self._failed(got.kind, f"{got.error} ({shape.key}, timing)", sandbox.label, sandbox.log_tail())
        with sandbox.paused():
            self._settle()
            if not got.sampled:
                return Verdict(
                    accepted=False,
                    status=Status.INCORRECT,
                    reason=f"no timed output was handed over for checking ({shape.key}, timing)",
                )
            if len(got.perturbations) != len(got.sampled):
                return Verdict(accepted=False, status=Status.INCORRECT, reason="perturbations missing from the worker")
            # nothing to see changed where the worker perturbs nothing: the same test as the worker's
            changed = k == 0 or not any(perturbable(t, k) for group in pristine[:1] for t in group)
            for slot, which, changes in zip(shape.samples, got.sampled, got.perturbations):
                if not 0 <= which < len(pristine):
                    return Verdict(accepted=False, status=Status.INCORRECT, reason="bad sample index from the worker")
                inputs = shape.perturbed(pristine[which], changes, k)
                if isinstance(inputs, str):
                    return Verdict(accepted=False, status=Status.INCORRECT, reason=f"{inputs} ({shape.key}, timing)")
                changed = changed or any(not _bytes_equal(a, b) for a, b in zip(inputs, pristine[which]))
                wrong = self._wrong(inputs, slot)
                if wrong is not None:
                    return Verdict(
                        accepted=False,
                        status=Status.INCORRECT,
                        reason=f"wrong result in a timed call: {wrong} ({shape.key}, timing)",
                    )
            bad = self._after_timing(shape, pristine, changed)
            if bad is not None:
                return bad
        _lap(steps, "time_verify", t)
        # the figure is what the judge bracketed, block by block (the probe, block 0, aside)
        samples = [x for b in brackets[1:] for x in b.samples_ms]
        if len(brackets) < 2 or samples != list(got.samples_ms):
            return self._misfit(
                shape, f"the {len(got.samples_ms)} samples reported differ from the {len(brackets)} blocks sent"
            )
        if not samples or not all(math.isfinite(x) and x > 0 for x in samples):
            return Verdict(
                accepted=False, reason=f"timing returned no valid samples ({shape.key})", status=Status.RUNTIME_ERROR
            )
        graph = got.graph or self.options.graph == "on"  # "on" replays graphs or fails: never eager
        blocks = [msgspec.structs.replace(b, graph=graph and i > 0) for i, b in enumerate(brackets)]
        opt = self.options
        why = bracket_misfit(blocks, overhead_ms=overhead, constant_ms=opt.bracket_ms, tol=opt.bracket_tol)
        if why is not None:
            only_low = bracket_misfit(blocks, overhead_ms=None, constant_ms=opt.bracket_ms, tol=opt.bracket_tol) is None
            if retry_misfit and only_low:
                steps["time_misfit_retries"] = steps.get("time_misfit_retries", 0.0) + 1.0
                return self._time_block(sandbox, shape, timing, steps, seeds, retry_misfit=False)
            return self._misfit(shape, why)
        med = statistics.median(samples)
        if got.wall_ms_per_call > self.options.escape_ratio * med + 0.1:
            return Verdict(
                accepted=False,
                status=Status.INCORRECT,
                reason=(
                    f"work escaped the timed stream: {got.wall_ms_per_call:.4f} ms per call with "
                    f"the device synchronised, {med:.4f} ms timed ({shape.key})"
                ),
            )
        mode = "graph" if got.graph else "held" if got.phases.get("held") else "eager"
        footing = Footing(
            mode=mode, calls=1, flush_mb=int(spec.get("flush_mb", 256)), sets=len(shape.rotation), perturb=k
        )
        return samples, footing

    def _time_judged(
        self,
        sandbox: Sandbox,
        shape: _Shape,
        timing: dict[str, Any],
        k: int,
        steps: dict[str, float],
        seeds: Sequence[int] | None,
    ) -> tuple[list[float], Footing] | Verdict:
        """CPU: the judge times every call itself (`timing.time_judged`). Before each call it
        perturbs `k` elements of the set's inputs in its own memory (`timing.Perturber`, its
        own generator) and poisons the output slot; its clock runs from its message to the
        answer. After the answer it draws (the OS's randomness) whether to check this call: the
        first `samples` calls, then the n-th with chance samples/n. A checked call's slot is
        copied at once with the candidate's processes stopped (a thread of the candidate cannot
        fill it later), the worker is asked to look for tampering, and the copy is compared with
        the reference of that call's inputs. Nothing the candidate's process reports is timed."""
        t = time.monotonic()
        pristine = shape.refill_rotation(seeds)
        if not shape.samples:
            return Verdict(
                accepted=False,
                status=Status.INCORRECT,
                reason=f"no timed output was handed over for checking ({shape.key}, timing)",
            )
        slot, draws = shape.samples[0], len(shape.samples)
        perturber = Perturber(shape.rotation, k, _seed()) if k > 0 else None
        changed = [k == 0 or not any(perturbable(x, k) for group in pristine[:1] for x in group)]
        timed = [0]
        begun = sandbox.begin_timed_calls(shape.refs["rotation"], shape.refs["samples"][:1])
        if begun is not None:
            return self._failed(begun.kind, f"{begun.error} ({shape.key}, timing)", sandbox.label, begun.log_tail)
        t = _lap(steps, "time_prep", t)

        def call(which: int, counted: bool) -> float:
            rec = perturber.apply(which) if perturber is not None else []
            _poison(slot)
            # the answer must name this call (a number drawn now): answers sent ahead are refused
            got = sandbox.timed_call(secrets.randbits(62), which, 0)
            if isinstance(got, Outcome):
                raise _Rejected(
                    self._failed(got.kind, f"{got.error} ({shape.key}, timing)", sandbox.label, got.log_tail)
                )
            took, done = got
            if not done.ok:
                raise _Rejected(
                    self._failed(done.kind, f"{done.error} ({shape.key}, timing)", sandbox.label, sandbox.log_tail())
                )
            timed[0] += counted
            if counted and (timed[0] <= draws or secrets.randbelow(timed[0]) < draws):
                with sandbox.paused():
                    outs = [x.clone() for x in slot]
                look = sandbox.look()
                if isinstance(look, Outcome) or not look.ok:
                    kind, error = (look.kind, look.error) if look.kind else ("protocol", "look refused")
                    raise _Rejected(self._failed(kind, f"{error} ({shape.key}, timing)", sandbox.label))
                inputs = shape.perturbed(pristine[which], Perturber.report(rec), k)
                if isinstance(inputs, str):  # (the judge's own record: never, unless the harness breaks)
                    raise _Rejected(Verdict(accepted=False, status=Status.CRASH, reason=f"{inputs} ({shape.key})"))
                changed[0] = changed[0] or any(not _bytes_equal(a, b) for a, b in zip(inputs, pristine[which]))
                wrong = self._wrong(inputs, outs)
                if wrong is not None:
                    raise _Rejected(
                        Verdict(
                            accepted=False,
                            status=Status.INCORRECT,
                            reason=f"wrong result in a timed call: {wrong} ({shape.key}, timing)",
                        )
                    )
            if rec:
                perturber.restore(rec, which)  # type: ignore[union-attr]
            return took

        try:
            samples = time_judged(call, len(shape.rotation), **timing)
        except _Rejected as stop:
            return stop.verdict
        t = _lap(steps, "time_calls", t)
        with sandbox.paused():
            bad = self._after_timing(shape, pristine, changed[0])
        _lap(steps, "time_verify", t)
        if bad is not None:
            return bad
        if not samples or not all(math.isfinite(x) and x > 0 for x in samples):
            return Verdict(
                accepted=False, reason=f"timing returned no valid samples ({shape.key})", status=Status.RUNTIME_ERROR
            )
        return samples, Footing(mode="cpu-judge", calls=1, flush_mb=0, sets=len(shape.rotation), perturb=k)

    def _wrong(self, inputs: list[Any], outs: Sequence[Any]) -> str | None:
        refs = _as_list(_reference(self.problem, inputs, self._reference_timeout_s(), "a timed call's inputs"))
        return compare(refs, outs, self._tolerance(refs))

    def _after_timing(self, shape: _Shape, pristine: list[list[Any]], changed: bool) -> Verdict | None:
        """The inputs were perturbed at all, and every rotation set is as drawn (the candidate
        wrote none of them)."""
        if not changed:
            return Verdict(
                accepted=False,
                status=Status.INCORRECT,
                reason=f"the timed calls' inputs were never perturbed ({shape.key}, timing)",
            )
        for group, clean in zip(shape.rotation, pristine):
            if any(not _bytes_equal(a, b) for a, b in zip(group, clean)):
                return Verdict(
                    accepted=False,
                    status=Status.INCORRECT,
                    reason=f"an input was modified during timing ({shape.key})",
                )
        return None

    @staticmethod
    def _misfit(shape: _Shape, why: str) -> Verdict:
        return Verdict(
            accepted=False,
            status=Status.INCORRECT,
            reason=f"reported timings do not fit what the judge observed ({why}) ({shape.key}, timing)",
        )

    def _overhead(self, shape: _Shape, spec: dict[str, Any], steps: dict[str, float]) -> float | None:
        """The most the harness spends per timed call of `shape` outside the call's CUDA events
        (flush, perturbation, launch, copies), measured once per judge on a trusted candidate
        that does next to nothing (`_null_source`), in the same harness, every tuning shape in
        one process, and overstated (`GateOptions.bracket_slack`). None where that run failed:
        the lower bound of `timing.bracket_misfit` is then not checked (a warning says so)."""
        if shape.key not in self._overheads:
            t = time.monotonic()
            self._overheads.update(self._calibrate(spec))
            _lap(steps, "time_calibrate", t)
        return self._overheads.get(shape.key)

    def _calibrate(self, spec: dict[str, Any]) -> dict[str, float | None]:
        found: dict[str, float | None] = {s.key: None for s in self.tuning}
        sandbox = self.sandbox(_null_source(self.tuning), "calibration")
        try:
            if not isinstance(sandbox.wait_ready(), Outcome):
                for s in self.tuning:
                    s.refill_rotation()
                    self._settle()
                    got = sandbox.time(s.key, s.refs["rotation"], s.refs["samples"], spec)
                    if isinstance(got, Outcome):
                        break
                    timing, brackets = got
                    if timing.ok and len(brackets) > 1:  # the loop's blocks (block 0, the probe, is eager)
                        per_call = [(b.window_ms - math.fsum(b.samples_ms)) / len(b.samples_ms) for b in brackets[1:]]
                        found[s.key] = max(0.0, *per_call) * self.options.bracket_slack + 0.005
        finally:
            close_quietly(sandbox)
        missing = [k for k, v in found.items() if v is None]
        if missing:
            warnings.warn(
                f"the judge could not calibrate its timing brackets on {', '.join(missing)}: the lower bound "
                "on reported CUDA timings is not checked there",
                RuntimeWarning,
                stacklevel=3,
            )
        return found

    @staticmethod
    def _summary(shape: _Shape, samples: list[float], footing: Footing) -> ShapeTiming:
        lo, hi = median_ci(samples)
        return ShapeTiming(
            shape=shape.key,
            median_ms=statistics.median(samples),
            ci_low_ms=lo,
            ci_high_ms=hi,
            samples=len(samples),
            graph=footing.mode == "graph",
            footing=footing,
        )

    def _settle(self) -> None:
        """Finish the judge's own writes (new inputs, poisoned slots) before the candidate's
        process, which does not share the judge's stream, reads or writes them."""
        if self.cuda:
            import torch

            torch.cuda.synchronize(self.index)  # the judge's GPU, whichever is current

    def _roofline(self, shape: _Shape, t: ShapeTiming) -> ShapeTiming | Verdict:
        flops, nbytes = self.problem.flops(shape.shape), self.problem.bytes(shape.shape)
        tflops = flops / (t.median_ms * 1e-3) / 1e12 if flops else None
        gbps = nbytes / (t.median_ms * 1e-3) / 1e9 if nbytes else None
        if self.peaks is None:
            return msgspec.structs.replace(t, tflops=tflops, gbps=gbps)
        dtypes = _flop_dtypes(shape.inputs) or list(self.peaks.limit_matmul)
        floor = self.problem.roofline_floor_ms(
            shape.shape,
            flops_per_s=max(self.peaks.limit_flops(d) for d in dtypes),
            bytes_per_s=self.peaks.limit_bytes,
        )
        if floor is not None and t.median_ms < floor:
            return Verdict(
                accepted=False,
                status=Status.INCORRECT,
                reason=(
                    f"impossible: {t.median_ms:.5f} ms is below the roofline floor of {floor:.5f} ms "
                    f"on this GPU ({shape.key})"
                ),
            )
        attainable = self.problem.roofline_floor_ms(
            shape.shape, flops_per_s=max(self.peaks.flops(d) for d in dtypes), bytes_per_s=self.peaks.bytes
        )
        pct = 100.0 * attainable / t.median_ms if attainable else None
        return msgspec.structs.replace(t, tflops=tflops, gbps=gbps, roofline_pct=pct)

    def _failed(self, kind: str, error: str, label: str, log_tail: str = "") -> Verdict:
        status = _STATUS.get(kind, Status.CRASH)
        if kind == "raised" and _compile_failure(error):
            status = Status.COMPILE_ERROR
        fault = self.cuda and kind in ("crash", "cuda_error")
        return Verdict(
            accepted=False, reason=f"{kind}: {error}", status=status, label=label, log_tail=log_tail, fault=fault
        )

    def _tolerance(self, refs: list[Any]) -> list[dict[str, float]]:
        """Each output's own tolerance, from its dtype (or the problem's TOLERANCE): a float32
        output next to a bfloat16 one is held to float32's, not to the loosest of them."""
        return [self.problem.tolerance(str(r.dtype).removeprefix("torch.")) for r in refs]

    def _canary(self) -> str | None:
        """A zero or constant output must fail the comparison, or the problem cannot tell
        a kernel that computes from one that does nothing."""
        import torch

        for shape in self.tuning + self.heldout:
            refs, _ = shape.refill(_seed())
            tol = self._tolerance(refs)
            for name, fake in (
                ("zeros", [torch.zeros_like(r) for r in refs]),
                ("a constant", [_constant_like(r) for r in refs]),
            ):
                if compare(refs, fake, tol) is None:
                    return (
                        f"problem {self.problem.name} is degenerate: {name} passes its tolerance "
                        f"on {shape.key}; fix make_inputs or TOLERANCE"
                    )
        return None
