"""The model evaluator: a model-level genome's candidate against the unchanged model, judged
and timed in the same call.

For each genome: build the candidate (`evokernel.model.model_level.apply`: every changed site
checked against the unfused module first; a refusal is a failure value), run its forward
on the evaluator's inputs and compare it with the unchanged model's (`judge`: max |diff|
over the output's RMS, a tolerance per dtype; for half types at least twice the unchanged
model's own noise floor: its output's change under a one-rounding-step perturbation of its
inputs and against an fp32 copy of it, where one runs; `noise_floor`), then time the baseline and
the candidate together (`time_interleaved`): on CUDA each forward is captured in a CUDA
graph (warmed on a side stream first, as torch's docs prescribe) and rounds of replays
alternate A B B A ..., each round's calls between CUDA events; on the CPU there are no
graphs and the figures are wall-clock medians of interleaved calls, labelled `cpu-wall`.
The result's latency is the candidate's median; its meta carries the baseline's median in
the same call, the speedup, the timing method, the numerics and each site's choice and check.

`measure(variants)` times any set of genomes together (ablations, the final table), and
`compiled()` adds `torch.compile(model, mode="max-autotune")` (on CUDA; its own CUDA
graphs, so it is called, not captured: labelled `cuda-events`); on the CPU mode "default"
(max-autotune's GEMM autotuning is for GPUs), and the label says so.
"""

from __future__ import annotations

import gc
import math
import statistics
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import msgspec
import torch

from evokernel.judge.device import check_device, default_device, gpu_name, is_cuda, on_device
from evokernel.judge.timing import relative_ci
from evokernel.core.genome import Genome
from evokernel.model.model_level import SiteCheck, apply, changed_sites, judge, model_space, noise_floor
from evokernel.core.result import Result, Status
from evokernel.core.space import SearchSpace

__all__ = ["ModelEvaluator", "TimingOptions", "Timing", "time_interleaved", "BASELINE"]

BASELINE = "baseline"


@dataclass(frozen=True)
class TimingOptions:
    rounds: int = 12  # interleaved rounds (the order reverses every other round)
    reps: int = 5  # calls (graph replays) per variant per round; a sample is their mean
    warmup: int = 3
    graphs: bool = True  # capture each forward in a CUDA graph (CUDA only)


class Timing(msgspec.Struct, frozen=True, kw_only=True):
    label: str
    median_ms: float
    noise: float  # relative half-width of the median's 95% interval
    samples: tuple[float, ...]
    method: str  # "cuda-graph", "cuda-events" or "cpu-wall"


def _capture(fn: Callable[[], Any], warmup: int) -> Callable[[], Any]:
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(warmup):
            fn()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = fn()
    return lambda: (graph.replay(), out)[1]


def time_interleaved(
    fns: Mapping[str, Callable[[], Any]],
    *,
    device: str,
    options: TimingOptions = TimingOptions(),
    uncaptured: Iterable[str] = (),
) -> dict[str, Timing]:
    """Median per-call time of each zero-argument function, measured together: rounds of
    `reps` calls of each, the order reversed every other round. On CUDA each function is
    captured in a CUDA graph and replayed (those in `uncaptured` are called: they bring
    their own graphs), timed with CUDA events around a round's calls; on the CPU by the
    wall clock. A function that fails raises (the caller turns it into a failure value)."""
    with on_device(device):  # graphs, streams and events on that GPU ("cuda": the current one)
        return _time_interleaved(fns, device, options, uncaptured)


def _time_interleaved(
    fns: Mapping[str, Callable[[], Any]], device: str, options: TimingOptions, uncaptured: Iterable[str]
) -> dict[str, Timing]:
    labels = list(fns)
    keep = set(uncaptured)
    on_cuda = is_cuda(device)
    runners: dict[str, Callable[[], Any]] = {}
    method: dict[str, str] = {}
    for label in labels:
        fn = fns[label]
        if on_cuda and options.graphs and label not in keep:
            runners[label], method[label] = _capture(fn, options.warmup), "cuda-graph"
        else:
            for _ in range(options.warmup):
                fn()
            runners[label], method[label] = fn, "cuda-events" if on_cuda else "cpu-wall"
    samples: dict[str, list[float]] = {label: [] for label in labels}
    for r in range(options.rounds):
        order = labels if r % 2 == 0 else labels[::-1]
        if on_cuda:
            events = []
            for label in order:
                start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                start.record()
                for _ in range(options.reps):
                    runners[label]()
                end.record()
                events.append((label, start, end))
            torch.cuda.synchronize()
            for label, start, end in events:
                samples[label].append(start.elapsed_time(end) / options.reps)
        else:
            for label in order:
                t0 = time.perf_counter()
                for _ in range(options.reps):
                    runners[label]()
                samples[label].append((time.perf_counter() - t0) * 1e3 / options.reps)
    return {
        label: Timing(
            label=label, median_ms=statistics.median(xs), noise=relative_ci(xs), samples=tuple(xs), method=method[label]
        )
        for label, xs in samples.items()
    }


def _device_name(device: str) -> str:
    """The GPU's name (not its index: two GPUs of one model share results), or the CPU's."""
    if is_cuda(device) and (name := gpu_name(device)):
        return name
    import platform

    return f"cpu:{platform.processor() or platform.machine()}"


def _allow_recompiles(limit: int = 256) -> None:
    """Let dynamo compile one code object many times. Every candidate that compiles a block
    compiles the same method (`Block._forward`) again, for its own instance; past dynamo's
    recompile limit (8) it silently runs the rest *eagerly* ("hit
    config.recompile_limit (8)", seen in a FLUX search on the H200), and a search would judge
    later candidates by their eager speed."""
    cfg = torch._dynamo.config
    for name in ("recompile_limit", "cache_size_limit"):  # the name since torch 2.7, and before
        if hasattr(cfg, name):
            setattr(cfg, name, max(int(getattr(cfg, name)), limit))
    if hasattr(cfg, "accumulated_recompile_limit"):
        cfg.accumulated_recompile_limit = max(int(cfg.accumulated_recompile_limit), 4 * limit)


class ModelEvaluator:
    """Evaluator of model-level genomes (`evokernel.model.model_level`) for one model and its inputs."""

    def __init__(
        self,
        model: torch.nn.Module,
        inputs: Sequence[Any],
        *,
        name: str,
        device: str | None = None,
        dtype: torch.dtype | None = None,
        space: SearchSpace | None = None,
        timing: TimingOptions = TimingOptions(),
        seeds: int = 3,
        compile_mode: str | None = None,
        reference32: bool = True,
    ) -> None:
        device = check_device(device, f"ModelEvaluator(device={device!r})") if device else default_device()
        dtype = dtype or next(iter(model.parameters())).dtype
        self.model = model.to(device=device, dtype=dtype).eval()
        # inputs as given (the activations in the model's dtype, tables such as RoPE's in theirs), moved to the device
        self.inputs = tuple(x.to(device) if isinstance(x, torch.Tensor) else x for x in inputs)
        self.name, self.device, self.dtype, self.timing = name, device, dtype, timing
        self.space = space or model_space(self.model)
        self.checker = SiteCheck(self.model, seeds=seeds, dtype=dtype, device=device)
        self.compile_mode = compile_mode or ("max-autotune" if is_cuda(device) else "default")
        _allow_recompiles()
        with torch.inference_mode():
            self.base_out = self.model(*self.inputs)
        ref32 = self._reference32() if reference32 and dtype in (torch.float16, torch.bfloat16) else None
        with torch.inference_mode():
            self.floor = noise_floor(self.model, self.inputs, dtype, out=self.base_out, ref32=ref32)
        del ref32
        self._compiled: Callable[[], Any] | None = None

    def _reference32(self) -> Any:
        import copy

        try:
            ref = copy.deepcopy(self.model).float()
            ins = tuple(x.float() if isinstance(x, torch.Tensor) and x.is_floating_point() else x for x in self.inputs)
            with torch.inference_mode():
                out = ref(*ins)
            del ref
            return out
        except Exception:  # e.g. an op with no fp32 kernel on this device: the fixed tolerance then
            return None
        finally:
            gc.collect()

    # -- the protocol ------------------------------------------------------------------------
    def fingerprint(self) -> dict[str, Any]:
        import triton

        return {
            "evaluator": "model",
            "model": self.name,
            "device": _device_name(self.device),
            "dtype": str(self.dtype).removeprefix("torch."),
            "inputs": [list(x.shape) for x in self.inputs if isinstance(x, torch.Tensor)],
            "space": self.space.describe()["params"],
            "torch": str(torch.__version__),
            "triton": str(triton.__version__),
            "cuda": torch.version.cuda or "",
            "timing": [self.timing.rounds, self.timing.reps, self.timing.graphs],
        }

    def transfer_key(self) -> None:  # whole models do not transfer across shapes
        return None

    def fidelities(self) -> list[Any]:
        """A cheap level that shares this evaluator's model, inputs and checks but times
        a quarter of the interleaved rounds (at least 3 when this one has 12 or more; 1 at
        least), then this evaluator."""
        import copy

        from evokernel.core.errors import ConfigError

        rounds = max(1, self.timing.rounds // 4, min(3, self.timing.rounds - 1) if self.timing.rounds >= 12 else 1)
        if rounds >= self.timing.rounds:
            raise ConfigError(f"timing of {self.timing.rounds} round(s) has no cheaper level")
        cheap = copy.copy(self)
        cheap.timing = TimingOptions(
            rounds=rounds, reps=self.timing.reps, warmup=min(self.timing.warmup, 1), graphs=self.timing.graphs
        )
        cheap._compiled = None
        cheap.fidelity_name = f"{rounds}-rounds"
        return [cheap, self]

    def evaluate(self, genomes: Sequence[Genome]) -> Iterable[Result]:
        for g in genomes:
            yield self._one(g)

    def remeasure(self, genomes: Sequence[Genome]) -> list[Result]:
        """The genomes timed together (with the baseline), one result each."""
        built = {g.id: self.build(g) for g in genomes}
        variants = {gid: m for gid, (m, _, _) in built.items() if m is not None}
        try:
            times = self._time({BASELINE: self.model, **variants}) if variants else {}
        except Exception as exc:
            return [Result.failed(Status.RUNTIME_ERROR, f"{type(exc).__name__}: {exc}") for _ in genomes]
        out = []
        for g in genomes:
            module, failure, meta = built[g.id]
            if failure is not None:
                out.append(failure)
                continue
            t, b = times[g.id], times[BASELINE]
            out.append(
                Result.ok(
                    t.median_ms,
                    noise=t.noise,
                    samples=t.samples,
                    meta={**meta, "baseline_ms": b.median_ms, "speedup": b.median_ms / t.median_ms, "timing": t.method},
                )
            )
        return out

    # -- steps -----------------------------------------------------------------------------------
    def build(self, genome: Genome | Mapping[str, Any]) -> tuple[torch.nn.Module | None, Result | None, dict[str, Any]]:
        """(candidate, None, meta) or (None, failure, meta): built, site-checked, whole forward judged."""
        params = dict(genome.params if isinstance(genome, Genome) else genome)
        t0 = time.perf_counter()
        applied = apply(self.model, params, space=self.space, checker=self.checker)
        meta: dict[str, Any] = {
            "sites": {k: v for k, v in {**self.space.default(), **params}.items() if "." not in k},
            "changed": changed_sites(self.space, params),
            "checks": [msgspec.to_builtins(c) for c in applied.checks],
        }
        if not applied.ok:
            status = Status.INVALID if applied.status == "invalid" else Status.INCORRECT
            return None, Result.failed(status, applied.reason, meta=meta, elapsed_s=time.perf_counter() - t0), meta
        try:
            with torch.inference_mode():
                out = applied.module(*self.inputs)
            if is_cuda(self.device):
                torch.cuda.synchronize(self.device)
        except Exception as exc:
            return None, Result.failed(Status.RUNTIME_ERROR, f"forward: {type(exc).__name__}: {exc}", meta=meta), meta
        reason, err, tol = judge(self.base_out, out, self.dtype, floor=self.floor)
        meta["numerics"] = {"error": err, "tolerance": tol}
        if reason is not None:
            return (
                None,
                Result.failed(Status.INCORRECT, f"whole forward vs the unchanged model: {reason}", meta=meta),
                meta,
            )
        return applied.module, None, meta

    def _time(
        self, modules: Mapping[str, torch.nn.Module | Callable[[], Any]], uncaptured: Iterable[str] = ()
    ) -> dict[str, Timing]:
        fns = {
            k: (m if not isinstance(m, torch.nn.Module) else (lambda m=m: m(*self.inputs))) for k, m in modules.items()
        }
        try:
            with torch.inference_mode():
                return time_interleaved(fns, device=self.device, options=self.timing, uncaptured=uncaptured)
        finally:
            gc.collect()
            if is_cuda(self.device):
                torch.cuda.empty_cache()

    def _one(self, genome: Genome) -> Result:
        t0 = time.perf_counter()
        module, failure, meta = self.build(genome)
        if failure is not None:
            return failure
        try:
            times = self._time({BASELINE: self.model, "candidate": module})  # type: ignore[dict-item]
        except Exception as exc:
            return Result.failed(Status.RUNTIME_ERROR, f"timing: {type(exc).__name__}: {exc}", meta=meta)
        c, b = times["candidate"], times[BASELINE]
        return Result.ok(
            c.median_ms,
            noise=c.noise,
            samples=c.samples,
            elapsed_s=time.perf_counter() - t0,
            meta={
                **meta,
                "baseline_ms": b.median_ms,
                "baseline_noise": b.noise,
                "speedup": b.median_ms / c.median_ms,
                "timing": c.method,
            },
        )

    # -- baselines and tables ------------------------------------------------------------------
    def compiled(self) -> Callable[[], Any]:
        """torch.compile of the unchanged model (mode `compile_mode`), warmed; a zero-argument call."""
        if self._compiled is None:
            compiled = torch.compile(self.model, mode=self.compile_mode)
            graphs = is_cuda(self.device) and "max-autotune" == self.compile_mode

            def call() -> Any:
                if graphs:
                    torch.compiler.cudagraph_mark_step_begin()
                return compiled(*self.inputs)

            with torch.inference_mode(), on_device(self.device):
                call()
            self._compiled = call
        return self._compiled

    @property
    def compile_label(self) -> str:
        note = "" if is_cuda(self.device) else " (CPU: max-autotune's GEMM autotuning is for GPUs)"
        return f"torch.compile(mode={self.compile_mode!r}){note}"

    def measure(
        self, variants: Mapping[str, Genome | Mapping[str, Any]], *, compiled: bool = False
    ) -> tuple[dict[str, Timing], dict[str, str]]:
        """Every variant (label -> genome) and the baseline timed together, plus torch.compile
        of the baseline when `compiled` (label `torch_compile`). Returns the timings and, for
        variants that could not be built, why."""
        modules: dict[str, Any] = {BASELINE: self.model}
        failed: dict[str, str] = {}
        for label, g in variants.items():
            module, failure, _ = self.build(g)
            if failure is not None:
                failed[label] = failure.error
            else:
                modules[label] = module
        uncaptured = []
        if compiled:
            try:
                modules["torch_compile"] = self.compiled()
                if is_cuda(self.device) and self.compile_mode == "max-autotune":
                    uncaptured.append("torch_compile")
            except Exception as exc:
                first = next((line for line in str(exc).splitlines() if line.strip()), "")
                failed["torch_compile"] = f"{type(exc).__name__}: {first[:300]}"
        return self._time(modules, uncaptured), failed


def speedup(times: Mapping[str, Timing], label: str, over: str = BASELINE) -> float:
    a, b = times.get(over), times.get(label)
    return a.median_ms / b.median_ms if a and b and b.median_ms > 0 else math.nan
