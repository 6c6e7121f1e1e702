"""Figures on one footing: how a time was measured travels with it, and two times compare
only when they were measured the same way.

A kernel's time depends on how it is called. Replayed from a CUDA graph, only the GPU's work
counts; called eagerly from Python, the host's launch path counts too wherever it is slower
than the GPU (a Triton launch through the JIT costs 70-230 us of host time, `torch.matmul`
about 20). A speedup of a graph-replayed candidate over an eagerly called baseline says
nothing a user can ship on, so the harnesses here record a `Footing` with every figure and
`speedup` refuses to divide figures whose footings differ.

`side_by_side` is the harness the benchmarks report with: each function timed in blocks of
`calls` back-to-back calls over rotating input sets (together larger than the L2, so no
call reads another's inputs from the cache), either replayed from a CUDA graph of the block
(`mode="graph"`) or called from a Python loop (`mode="eager"`, host time included), in
`rounds` interleaved rounds (A B C, B C A, ...), with the paired per-round ratios against a
baseline.

>>> a = Footing(mode="graph", calls=32, sets=8)
>>> b = Footing(mode="eager", calls=32, sets=8)
>>> speedup(Timed("mine", a, 1.0), Timed("cuBLAS", a, 1.2))
1.2
>>> speedup(Timed("mine", a, 1.0), Timed("cuBLAS", b, 1.2))
Traceback (most recent call last):
...
evokernel.judge.footing.FootingMismatch: cannot compare mine (graph replay, 32 calls per sample, 8 input sets) with cuBLAS (eager calls, 32 calls per sample, 8 input sets): time both the same way
"""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import msgspec

from evokernel.core.errors import EvokernelError

__all__ = [
    "Footing",
    "FootingMismatch",
    "HostSync",
    "Timed",
    "check_results",
    "check_same",
    "host_time_us",
    "read_clocks",
    "side_by_side",
    "speedup",
]

_MODES = {
    "graph": "graph replay",
    "held": "held eager calls (host time hidden)",
    "eager": "eager calls",
    "cpu": "CPU wall clock",
    "cpu-judge": "CPU wall clock observed by the judge (one pipe round trip per call included)",
}


class FootingMismatch(EvokernelError, ValueError):
    """Two figures measured in different ways were about to be compared."""


class HostSync(RuntimeError):
    """A timed call waited for the GPU from the host (`.item()`, `.tolist()`, `.cpu()`,
    `torch.cuda.synchronize()`, a blocking copy): its time is not the footing the harness
    promised, so it is reported, not timed."""


class Footing(msgspec.Struct, frozen=True, kw_only=True):
    """How a time was measured.

    mode: "graph" (CUDA-graph replay: the GPU's work only), "held" (eager launches queued
    behind a stream hold before the GPU starts: the host's launch cost hidden), "eager"
    (plain Python calls: the host's launch cost counts wherever it exceeds the GPU's time),
    "cpu" (wall clock in the process that made the calls, no GPU), "cpu-judge" (wall clock
    of the judge around each call it asked another process to make: a pipe round trip and
    the copy of the outputs included, so never compared with "cpu"). calls: calls per timed sample. flush_mb: L2 flush before each
    sample (0: none; rotating inputs larger than the L2 do the same job). sets: input sets
    rotated. perturb: input elements changed before every call (the gate's anti-caching)."""

    mode: str
    calls: int = 1
    flush_mb: int = 0
    sets: int = 1
    perturb: int = 0

    def __post_init__(self) -> None:
        if self.mode not in _MODES:
            raise ValueError(f"footing mode must be one of {sorted(_MODES)}, got {self.mode!r}")

    def describe(self) -> str:
        parts = [_MODES[self.mode], f"{self.calls} call{'s' if self.calls != 1 else ''} per sample"]
        if self.flush_mb:
            parts.append(f"{self.flush_mb} MiB flush")
        parts.append(f"{self.sets} input set{'s' if self.sets != 1 else ''}")
        if self.perturb:
            parts.append(f"{self.perturb} elements perturbed")
        return ", ".join(parts)


class Timed(msgspec.Struct, kw_only=False):
    """One function's time on one footing: the median per call (ms) and what backs it."""

    name: str
    footing: Footing
    median_ms: float
    samples_ms: list[float] = []
    host_us: float | None = None  # host time per eager call (`host_time_us`); None for graph replays
    clocks: dict[str, float] = {}  # SM and memory clocks (MHz) read before timing, where readable


def _as_footing(x: Any) -> Footing:
    if isinstance(x, Footing):
        return x
    if isinstance(x, Mapping):
        return msgspec.convert(dict(x), Footing)
    raise TypeError(f"not a footing: {x!r}")


def check_same(footings: Mapping[str, Any]) -> Footing:
    """The one footing of these named figures (Footing or its dict form), or FootingMismatch
    naming the first two that differ."""
    items = [(name, _as_footing(f)) for name, f in footings.items()]
    if not items:
        raise ValueError("no figures to compare")
    first_name, first = items[0]
    for name, f in items[1:]:
        if f != first:
            raise FootingMismatch(
                f"cannot compare {first_name} ({first.describe()}) with {name} ({f.describe()}): time both the same way"
            )
    return first


def check_results(results: Mapping[str, Any]) -> Footing | None:
    """The one footing of these named gate results (`Result`s whose `meta["timings"]` say how
    each shape was timed), shape by shape; FootingMismatch where two differ. Failed results
    and results with no recorded footing (older ones) are skipped; None if none has one."""
    per_shape: dict[str, dict[str, Any]] = {}
    for name, r in results.items():
        if not getattr(r, "is_ok", False):
            continue
        for t in (getattr(r, "meta", None) or {}).get("timings", []):
            if isinstance(t, Mapping) and t.get("footing"):
                per_shape.setdefault(str(t.get("shape")), {})[name] = t["footing"]
    found = None
    for shape, named in per_shape.items():
        try:
            found = check_same(named)
        except FootingMismatch as exc:
            raise FootingMismatch(f"{shape}: {exc}") from None
    return found


def speedup(candidate: Timed, baseline: Timed) -> float:
    """baseline time / candidate time, for two figures on the same footing (else FootingMismatch)."""
    check_same({candidate.name: candidate.footing, baseline.name: baseline.footing})
    return baseline.median_ms / candidate.median_ms


def read_clocks(device: int = 0) -> dict[str, float]:
    """The GPU's current SM and memory clocks in MHz through NVML, {} where NVML is not
    available (clocks drift with temperature: a figure says what they were). `device` is
    torch's index (CUDA_VISIBLE_DEVICES applies), turned into NVML's, which ignores it."""
    try:
        import pynvml  # type: ignore[import-not-found]

        pynvml.nvmlInit()
        h = pynvml.nvmlDeviceGetHandleByIndex(_nvml_index(device))
        return {
            "sm_mhz": float(pynvml.nvmlDeviceGetClockInfo(h, pynvml.NVML_CLOCK_SM)),
            "mem_mhz": float(pynvml.nvmlDeviceGetClockInfo(h, pynvml.NVML_CLOCK_MEM)),
        }
    except Exception:
        return {}


def _nvml_index(device: int) -> int:
    """NVML's index of torch's CUDA device `device` (they differ under CUDA_VISIBLE_DEVICES)."""
    try:
        import torch

        return int(torch.cuda._get_nvml_device_index(device))
    except Exception:  # a torch without the helper, or an unusual CUDA_VISIBLE_DEVICES: as given
        return device


def host_time_us(fn: Callable[[], Any], *, calls: int = 200, repeats: int = 5) -> float:
    """The host's time per call of `fn` in microseconds: a loop of calls not waiting for the
    GPU (the median of `repeats` loops, each after a device synchronisation), i.e. what the
    Python launch path costs the calling thread."""
    import torch

    fn()
    torch.cuda.synchronize()
    out = []
    for _ in range(repeats):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for _ in range(calls):
            fn()
        out.append((time.perf_counter() - t0) / calls * 1e6)
    torch.cuda.synchronize()
    return statistics.median(out)


def side_by_side(
    fns: Mapping[str, Callable[[Sequence[Any]], Any]],
    sets: Sequence[Sequence[Any]],
    *,
    mode: str = "graph",
    rounds: int = 9,
    calls: int | None = None,
    target_ms: float = 2.0,
    baseline: str | None = None,
    host: bool = True,
) -> dict[str, Any]:
    """Time every function of `fns` (name -> f(inputs)) on the same footing, interleaved.

    Each sample is a block of `calls` calls cycling through `sets` (one input set per call),
    replayed from a CUDA graph of the whole block (`mode="graph"`) or called from a Python
    loop with events around it (`mode="eager"`: the host's launch time counts wherever it
    exceeds the GPU's). `calls` defaults to what makes the slowest function's block about
    `target_ms` long (at least 2x the sets, at most 400), the same for every function. Rounds
    rotate the order (A B C, B C A, ...); each round times each function once.

    Returns {"footing": Footing, "timed": {name: Timed}, "ratios": {name: {"median", "lo",
    "hi"}}} where ratios are the per-round paired ratios baseline / name (the first function
    unless `baseline` names another), with the median's 95% interval. `host`: in eager mode,
    also measure each function's host time per call (`host_time_us`)."""
    import torch

    from evokernel.judge.timing import _graphs, median_ci

    if mode not in ("graph", "eager"):
        raise ValueError(f"side_by_side times mode 'graph' or 'eager', got {mode!r}")
    names = list(fns)
    if not names or not sets:
        raise ValueError("side_by_side needs functions and input sets")
    baseline = baseline or names[0]
    # one eager call each: compiles, allocator warm-up, a first estimate of the GPU time
    est = {}
    for n in names:
        for s in sets:
            fns[n](s)
        torch.cuda.synchronize()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for s in sets:
            fns[n](s)
        end.record()
        end.synchronize()
        est[n] = start.elapsed_time(end) / len(sets)
    if calls is None:
        calls = int(min(400, max(2 * len(sets), math.ceil(target_ms / max(max(est.values()), 1e-4)))))

    def block_of(n: str) -> Callable[[], Any]:
        f = fns[n]
        order = [sets[i % len(sets)] for i in range(calls)]  # type: ignore[operator]

        def block() -> None:
            for s in order:
                f(s)

        return block

    blocks = {n: block_of(n) for n in names}
    # (in graph mode, a block that cannot be captured raises HostSync or GraphCaptureError)
    runners = dict(zip(names, _graphs([blocks[n] for n in names], torch))) if mode == "graph" else blocks
    footing = Footing(mode=mode, calls=calls, sets=len(sets))
    clocks = read_clocks(torch.cuda.current_device())
    samples: dict[str, list[float]] = {n: [] for n in names}
    for n in names:  # one untimed block each: clocks up, graphs uploaded
        runners[n]()
    torch.cuda.synchronize()
    for r in range(rounds):
        for n in names[r % len(names) :] + names[: r % len(names)]:
            torch.cuda.synchronize()
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            runners[n]()
            end.record()
            end.synchronize()
            samples[n].append(start.elapsed_time(end) / calls)
    hosts: dict[str, float | None] = {n: None for n in names}
    if host and mode == "eager":
        for n in names:
            f, s0 = fns[n], sets[0]
            hosts[n] = host_time_us(lambda f=f, s0=s0: f(s0))
    timed = {n: Timed(n, footing, statistics.median(samples[n]), samples[n], hosts[n], clocks) for n in names}
    ratios = {}
    for n in names:
        xs = [b / c for b, c in zip(samples[baseline], samples[n])]
        lo, hi = median_ci(xs)
        ratios[n] = {"median": statistics.median(xs), "lo": lo, "hi": hi}
    return {"footing": footing, "timed": timed, "ratios": ratios}
