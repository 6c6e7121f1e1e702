"""Model-level genomes: which rewrites of a model's forward to apply, as a search space.

A model is written against a small *rewritable block* API: a module class lists its
**rewrite sites** as data (`SITES`, a tuple of `Site`), reads the choice of each site from
its plan (`self.choice("qkv_merge")`, `self.genes("mlp_act")` for a site's kernel-level
genes) in its forward, and builds what a choice needs in `realise(plan)` (a merged weight,
a compiled segment). A site is one decision about the forward: merge GEMMs that share an
input (the weights concatenated once, at build time: the constant is hoisted), fuse a
chain of ops into one kernel (a Triton template, or `torch.compile` on that segment),
hoist a per-step computation out of the blocks. Its first choice is the module as
written; choices that run a template carry that kernel's genes (`Site.kernel`, prefixed
with the site's name: `mlp_act.BM`), and a choice may need another site's choice
(`Site.requires`). `model_space(model)` is then the search space over the whole model,
with constraints that say why a point is invalid.

`apply(model, genome)` builds the candidate: a copy of the module tree that shares every
parameter with the base (the base is never modified; only a merged weight is new), each
rewritable module realised with the plan. Before it is returned, every site the genome
changes is checked against the unfused module (`SiteCheck`): the first block of each
class that declares the site, alone with that change (and what it requires), against the
same block as written, on random inputs (several seeds, the model's dtype), by a
scale-aware comparison (`judge`: max and RMS of the difference over the output's RMS; in
half precision the tolerance grows to twice the module's own noise floor, the change of its
output under a one-rounding-step perturbation of its inputs and against an fp32 copy, so a
routing decision near a tie is not mistaken for a bug); NaN or Inf is rejected. A failing site makes `apply`
return a refusal (an `Applied` whose `module` is None, with the reason), never raise.

>>> from torch import nn
>>> class Twice(Rewritable, nn.Module):
...     SITES = (Site("double", "fuse", ("add", "mul")),)
...     def forward(self, x):
...         return x + x if self.choice("double") == "add" else x * 2
...     def sample_inputs(self, seed, dtype, device):
...         return (torch.randn(8, generator=torch.Generator().manual_seed(seed)).to(device, dtype),)
>>> base = Twice()
>>> space = model_space(base)
>>> space.names, space.default()
(('double',), {'double': 'add'})
>>> done = apply(base, space.genome(double="mul"))
>>> done.ok, done.module.choice("double"), base.choice("double")
(True, 'mul', 'add')
"""

# One module on purpose, though over 400 lines: the rewritable-block API (sites, plans), the model space built from it and
# the per-site judge are one contract: a site's rules, its genes and how it is checked change together.

from __future__ import annotations

import copy
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import msgspec
import torch
from torch import nn

from evokernel.core.genome import Genome, Value
from evokernel.core.space import Choice, Constraint, Param, Point, SearchSpace

__all__ = [
    "Site",
    "KernelGenes",
    "model_size",
    "Rewritable",
    "Plan",
    "model_space",
    "apply",
    "Applied",
    "SiteCheck",
    "SiteVerdict",
    "judge",
    "noise_floor",
    "TOLERANCE",
    "changed_sites",
    "variant",
    "rewritable_modules",
    "build",
    "describe_sites",
    "launch_genes",
    "gemm_genes",
    "moe_genes",
]

#: Tolerance of `judge`: the largest |candidate - base| (and RMS of the difference) allowed,
#: over the RMS of the base's output, per dtype (for half types at least twice the base's own
#: noise floor, `noise_floor`, when one is given).
TOLERANCE: dict[torch.dtype, float] = {
    torch.float64: 1e-9,
    torch.float32: 1e-4,
    torch.float16: 1e-2,
    torch.bfloat16: 3e-2,
}


@dataclass(frozen=True)
class KernelGenes:
    """The kernel-level genes of a template a site's choice runs, and their constraints
    (functions of a point with unprefixed names, returning a reason or None)."""

    params: tuple[Param, ...]
    constraints: tuple[Callable[[Point], str | None], ...] = ()


@dataclass(frozen=True)
class Site:
    """One rewrite decision. `choices[0]` is the module as written. `requires` maps a
    choice to the (site, choice) pairs it needs, `excludes` to those it cannot go with;
    `kernel` holds the genes of the template the choices in `tuned` run."""

    name: str
    kind: str  # "merge", "fuse", "hoist" or "compile": what the rewrite does
    choices: tuple[str, ...]
    doc: str = ""
    requires: Mapping[str, tuple[tuple[str, str], ...]] = field(default_factory=dict)
    excludes: Mapping[str, tuple[tuple[str, str], ...]] = field(default_factory=dict)
    kernel: KernelGenes | None = None
    tuned: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if len(self.choices) < 2 or len(set(self.choices)) != len(self.choices):
            raise ValueError(f"site {self.name!r} needs two or more distinct choices, got {self.choices}")
        unknown = [c for c in (*self.requires, *self.excludes, *self.tuned) if c not in self.choices]
        if unknown:
            raise ValueError(f"site {self.name!r}: {unknown} are not among its choices {self.choices}")
        if self.tuned and self.kernel is None:
            raise ValueError(f"site {self.name!r}: tuned choices without kernel genes")

    @property
    def baseline(self) -> str:
        return self.choices[0]

    def gene(self, param: str) -> str:
        return f"{self.name}.{param}"


class Plan(dict):
    """A genome's parameters as the modules read them: site choices and prefixed kernel genes."""

    def choice(self, site: Site) -> str:
        return str(self.get(site.name, site.baseline))

    def genes(self, site: Site) -> dict[str, Value]:
        if site.kernel is None:
            return {}
        return {p.name: self.get(site.gene(p.name), p.default) for p in site.kernel.params}


class Rewritable:
    """Mixin for an nn.Module with rewrite sites. Subclasses set `SITES`, read
    `self.choice(name)` / `self.genes(name)` in forward, may override `realise(plan)` to
    build what a choice needs (call super first), and define `sample_inputs(seed, dtype,
    device)`: random inputs of the block's forward, for the site checks."""

    SITES: tuple[Site, ...] = ()

    def _site(self, name: str) -> Site:
        for s in self.SITES:
            if s.name == name:
                return s
        raise KeyError(f"{type(self).__name__} has no site {name!r}")

    def choice(self, name: str) -> str:
        return self.__dict__.get("_plan", Plan()).choice(self._site(name))

    def genes(self, name: str) -> dict[str, Value]:
        return self.__dict__.get("_plan", Plan()).genes(self._site(name))

    def realise(self, plan: Plan) -> None:
        """Bind the plan (called on the copy `apply` made, never on the base)."""
        self.__dict__["_plan"] = Plan(
            {k: v for k, v in plan.items() if any(k == s.name or k.startswith(s.name + ".") for s in self.SITES)}
        )

    def sample_inputs(self, seed: int, dtype: torch.dtype, device: torch.device | str) -> tuple[Any, ...]:
        raise NotImplementedError(f"{type(self).__name__} defines no sample_inputs")


def rewritable_modules(model: nn.Module) -> list[tuple[str, nn.Module]]:
    return [(name or "(model)", m) for name, m in model.named_modules() if isinstance(m, Rewritable) and m.SITES]


def _sites(model: nn.Module) -> dict[str, Site]:
    found: dict[str, Site] = {}
    for _, m in rewritable_modules(model):
        for s in type(m).SITES:
            if s.name in found and found[s.name] != s:
                raise ValueError(f"two block classes declare site {s.name!r} differently")
            found[s.name] = s
    return found


# -- the space --------------------------------------------------------------------------------
def _requirement(site: Site, choice: str, needs: tuple[tuple[str, str], ...]) -> Constraint:
    def check(p: Point) -> str | None:
        if p[site.name] != choice:
            return None
        for other, value in needs:
            if p[other] != value:
                return f"{site.name}={choice} needs {other}={value} (got {p[other]})"
        return None

    return Constraint(check, f"{site.name} requires")


def _exclusion(site: Site, choice: str, bars: tuple[tuple[str, str], ...]) -> Constraint:
    def check(p: Point) -> str | None:
        if p[site.name] != choice:
            return None
        for other, value in bars:
            if p[other] == value:
                return f"{site.name}={choice} excludes {other}={value}"
        return None

    return Constraint(check, f"{site.name} excludes")


def _unused_genes(site: Site) -> Constraint:
    names = [(site.gene(p.name), p.default) for p in site.kernel.params]  # type: ignore[union-attr]

    def check(p: Point) -> str | None:
        if p[site.name] in site.tuned:
            return None
        moved = [n for n, d in names if p[n] != d]
        if moved:
            return (
                f"{', '.join(moved)} matter only when {site.name} is {' or '.join(site.tuned)} "
                f"(kept at their defaults otherwise: one genome per model)"
            )
        return None

    return Constraint(check, f"{site.name} genes")


def _kernel_rule(site: Site, rule: Callable[[Point], str | None]) -> Constraint:
    def check(p: Point) -> str | None:
        if p[site.name] not in site.tuned:
            return None
        inner = Point({q.name: p[site.gene(q.name)] for q in site.kernel.params})  # type: ignore[union-attr]
        reason = rule(inner)
        return f"{site.name}: {reason}" if reason else None

    return Constraint(check, f"{site.name} {getattr(rule, '__name__', 'kernel')}")


def model_space(model: nn.Module, *, name: str | None = None) -> SearchSpace:
    """The search space of a model's rewrites: one Choice gene per site (default: the module
    as written), then each site's kernel genes, prefixed; constraints for what a choice
    requires, for kernel genes of a choice that runs no kernel, and the kernels' own rules."""
    sites = _sites(model)
    if not sites:
        raise ValueError(f"{type(model).__name__} declares no rewrite sites")
    params: list[Param] = [Choice(s.name, s.choices, default=s.baseline) for s in sites.values()]
    constraints: list[Constraint] = []
    for s in sites.values():
        for choice, needs in s.requires.items():
            for other, value in needs:
                if other not in sites or value not in sites[other].choices:
                    raise ValueError(f"site {s.name!r} requires {other}={value}, which the model does not declare")
            constraints.append(_requirement(s, choice, needs))
        for choice, bars in s.excludes.items():
            for other, value in bars:
                if other not in sites or value not in sites[other].choices:
                    raise ValueError(f"site {s.name!r} excludes {other}={value}, which the model does not declare")
            constraints.append(_exclusion(s, choice, bars))
        if s.kernel is not None:
            for p in s.kernel.params:
                q = copy.copy(p)
                q.name = s.gene(p.name)
                params.append(q)
            constraints.append(_unused_genes(s))
            constraints += [_kernel_rule(s, rule) for rule in s.kernel.constraints]
    return SearchSpace(params, constraints, name=name or f"model:{type(model).__name__}")


def variant(space: SearchSpace, changes: Mapping[str, Value] | None = None, /, **more: Value) -> Genome:
    """The genome of the model as written with some genes changed (raises with the reason if invalid)."""
    return space.genome({**space.default(), **dict(changes or {}), **more})


def changed_sites(space: SearchSpace, params: Mapping[str, Value]) -> list[str]:
    """Sites (genes without a dot) whose choice differs from the module as written."""
    return [p.name for p in space.params if "." not in p.name and params.get(p.name, p.default) != p.default]


# -- numerics -----------------------------------------------------------------------------------
def _tensors(out: Any) -> list[torch.Tensor]:
    if isinstance(out, torch.Tensor):
        return [out]
    if isinstance(out, (tuple, list)):
        return [t for o in out for t in _tensors(o)]
    if isinstance(out, Mapping):
        return [t for o in out.values() for t in _tensors(o)]
    return []


def _errors(ref: torch.Tensor, out: torch.Tensor) -> tuple[float, float]:
    """(max |out - ref|, RMS(out - ref)), both over RMS(ref)."""
    if not ref.numel():
        return 0.0, 0.0
    r, o = ref.double(), out.double()
    scale = float(r.square().mean().sqrt())
    d = o - r
    big, rms = float(d.abs().max()), float(d.square().mean().sqrt())
    return (big / scale, rms / scale) if scale > 0 else (big, rms)


#: Relative size of the input perturbation that measures a half-precision module's own
#: sensitivity (`noise_floor`): one bf16 rounding step.
PERTURB = {torch.bfloat16: 2.0**-8, torch.float16: 2.0**-11}


def noise_floor(
    fn: Callable[..., Any],
    inputs: Sequence[Any],
    dtype: torch.dtype,
    *,
    out: Any = None,
    ref32: Any = None,
    seed: int = 0,
) -> tuple[float, float]:
    """How far a half-precision module's output moves on its own: (max, RMS) error over
    RMS of its output when its floating inputs of `dtype` are perturbed by one rounding
    step (a routing decision near a tie flips, a chaotic path amplifies), and of its output
    against `ref32` (the same module in fp32) when given; the larger of each. (0, 0) for
    fp32 and fp64: their tolerance is fixed."""
    if dtype not in PERTURB:
        return 0.0, 0.0
    g = torch.Generator(device="cpu").manual_seed(seed)
    moved = tuple(
        (x.float() * (1 + PERTURB[dtype] * torch.randn(x.shape, generator=g).to(x.device))).to(dtype)
        if isinstance(x, torch.Tensor) and x.dtype == dtype
        else x
        for x in inputs
    )
    out = fn(*inputs) if out is None else out
    pairs = list(zip(_tensors(out), _tensors(fn(*moved))))
    if ref32 is not None:
        pairs += [(b, r.to(b.dtype)) for b, r in zip(_tensors(out), _tensors(ref32))]
    errs = [_errors(a.float(), b.float()) for a, b in pairs if a.shape == b.shape]
    return max([0.0] + [e[0] for e in errs]), max([0.0] + [e[1] for e in errs])


def judge(
    base: Any, cand: Any, dtype: torch.dtype, *, floor: tuple[float, float] = (0.0, 0.0), slack: float = 2.0
) -> tuple[str | None, float, float]:
    """(None or why not, error, tolerance): the candidate's outputs against the base's, as
    max |cand - base| and RMS(cand - base) over RMS(base), per output. Each must be within
    `TOLERANCE[dtype]`, or `slack` times the base's own noise floor of that measure
    (`noise_floor`) if that is larger; the error and tolerance returned are the max ones.
    NaN or Inf where the base has none is rejected.

    >>> a = torch.ones(4)
    >>> judge(a, a + 1e-6, torch.float32)[0] is None
    True
    >>> judge(a, a + 1e-2, torch.float32)[0]
    'output 0: max |diff| is 0.01 of the output RMS (tolerance 0.0001)'
    """
    bs, cs = _tensors(base), _tensors(cand)
    if len(bs) != len(cs):
        return f"{len(cs)} outputs where the base has {len(bs)}", math.inf, 0.0
    tol = max(TOLERANCE.get(dtype, 1e-4), slack * floor[0])
    tol_rms = max(TOLERANCE.get(dtype, 1e-4), slack * floor[1])
    worst = 0.0
    for i, (b, c) in enumerate(zip(bs, cs)):
        if b.shape != c.shape:
            return f"output {i}: shape {tuple(c.shape)} where the base has {tuple(b.shape)}", math.inf, tol
        bad_c, bad_b = int((~torch.isfinite(c)).sum()), int((~torch.isfinite(b)).sum())
        if bad_c > bad_b:
            return f"output {i}: {bad_c} NaN or Inf values where the base has {bad_b}", math.inf, tol
        keep = torch.isfinite(b)
        err, rms = _errors(torch.where(keep, b, 0), torch.where(keep, c, 0))
        worst = max(worst, err)
        if err > tol:
            return f"output {i}: max |diff| is {err:.3g} of the output RMS (tolerance {tol:.3g})", err, tol
        if rms > tol_rms:
            return f"output {i}: RMS of the diff is {rms:.3g} of the output RMS (tolerance {tol_rms:.3g})", err, tol
    return None, worst, tol


# -- building candidates ------------------------------------------------------------------------
def _share(module: nn.Module) -> nn.Module:
    """A copy of the module tree: new module objects, the same parameters and buffers."""
    new = copy.copy(module)
    new.__dict__ = dict(module.__dict__)
    new._parameters = dict(module._parameters)
    new._buffers = dict(module._buffers)
    new._modules = {k: (_share(v) if v is not None else None) for k, v in module._modules.items()}
    for k in ("_forward_hooks", "_forward_pre_hooks", "_backward_hooks"):
        if k in new.__dict__:
            new.__dict__[k] = type(module.__dict__[k])(module.__dict__[k])
    return new


def build(model: nn.Module, plan: Mapping[str, Value]) -> nn.Module:
    """The candidate module for a plan, without checks (see `apply`)."""
    new = _share(model)
    p = Plan(plan)
    for _, m in rewritable_modules(new):
        m.realise(p)
    return new


class SiteVerdict(msgspec.Struct, frozen=True, kw_only=True):
    site: str
    choice: str
    block: str  # the module path of the block that was checked
    ok: bool
    reason: str = ""
    error: float = 0.0  # worst max |diff| / RMS over the seeds
    tolerance: float = 0.0
    seeds: int = 0
    genes: dict[str, Value] = msgspec.field(default_factory=dict)


class SiteCheck:
    """Checks each changed site of a plan against the unfused module: the first block of
    each class that declares it, rewritten with that site alone (plus what it requires)
    and compared with the block as written on `seeds` random inputs of `dtype`. Verdicts
    are cached per (block class, site, choice, genes), so a search checks each once."""

    def __init__(
        self,
        model: nn.Module,
        *,
        seeds: int = 3,
        dtype: torch.dtype | None = None,
        device: torch.device | str | None = None,
    ) -> None:
        first = next(iter(model.parameters()), None)
        self.model = model
        self.seeds = seeds
        self.dtype = dtype or (first.dtype if first is not None else torch.float32)
        self.device = device or (first.device if first is not None else "cpu")
        self._cache: dict[tuple[Any, ...], SiteVerdict] = {}

    def _alone(self, site: Site, plan: Mapping[str, Value]) -> dict[str, Value]:
        sites = _sites(self.model)
        choice = Plan(plan).choice(site)
        alone: dict[str, Value] = {site.name: choice, **Plan(plan).genes(site)}
        alone = {k: v for k, v in alone.items() if k == site.name or choice in site.tuned}
        for other, value in site.requires.get(choice, ()):
            alone[other] = value
            alone.update(Plan(plan).genes(sites[other]) if value in sites[other].tuned else {})
        return alone

    def check(self, plan: Mapping[str, Value]) -> list[SiteVerdict]:
        out: list[SiteVerdict] = []
        seen: set[type] = set()
        for path, block in rewritable_modules(self.model):
            if type(block) in seen:
                continue
            seen.add(type(block))
            for site in type(block).SITES:
                if Plan(plan).choice(site) == site.baseline:
                    continue
                alone = self._alone(site, plan)
                key = (type(block), site.name, tuple(sorted(alone.items())))
                if key not in self._cache:
                    self._cache[key] = self._run(path, block, site, alone)
                out.append(self._cache[key])
        return out

    def _run(self, path: str, block: nn.Module, site: Site, alone: dict[str, Value]) -> SiteVerdict:
        choice = str(alone[site.name])
        genes = {k: v for k, v in alone.items() if k.startswith(site.name + ".")}
        head = dict(site=site.name, choice=choice, block=path, genes=genes)
        worst, tol = 0.0, 0.0
        try:
            cand = build(block, alone)
            ref32 = copy.deepcopy(block).float() if self.dtype in (torch.float16, torch.bfloat16) else None
            with torch.inference_mode():
                for seed in range(self.seeds):
                    inputs = block.sample_inputs(seed, self.dtype, self.device)  # type: ignore[attr-defined]
                    want = block(*inputs)
                    got = cand(*inputs)
                    exact = None
                    if ref32 is not None:
                        try:  # an fp32 copy may not run everywhere (grouped GEMMs want bf16): the perturbation then
                            exact = ref32(
                                *(
                                    x.float() if isinstance(x, torch.Tensor) and x.is_floating_point() else x
                                    for x in inputs
                                )
                            )
                        except Exception:
                            ref32 = None
                    floor = noise_floor(block, inputs, self.dtype, out=want, ref32=exact, seed=seed)
                    reason, err, tol = judge(want, got, self.dtype, floor=floor)
                    worst = max(worst, err)
                    if reason is not None:
                        return SiteVerdict(
                            **head, ok=False, reason=f"seed {seed}: {reason}", error=err, tolerance=tol, seeds=seed + 1
                        )
        except Exception as exc:  # a realisation that does not build or run is a failure value
            text = str(exc).strip().splitlines()[0][:300] if str(exc).strip() else ""
            return SiteVerdict(
                **head, ok=False, reason=f"{type(exc).__name__}: {text}", error=math.inf, tolerance=tol, seeds=0
            )
        return SiteVerdict(**head, ok=True, error=worst, tolerance=tol, seeds=self.seeds)


@dataclass
class Applied:
    """What `apply` returns: the candidate module, or None and the reason it was refused."""

    module: nn.Module | None
    checks: list[SiteVerdict]
    reason: str = ""
    status: str = "ok"  # "ok", "invalid" (not a point of the space) or "incorrect" (a site failed its check)

    @property
    def ok(self) -> bool:
        return self.module is not None


def apply(
    model: nn.Module,
    genome: Genome | Mapping[str, Value],
    *,
    space: SearchSpace | None = None,
    checker: SiteCheck | None = None,
    check: bool = True,
) -> Applied:
    """The candidate model for a genome, every changed site checked against the unfused
    module first (a `SiteCheck`, cached when you pass one); a refusal, never an exception,
    for an invalid point or a failing site. The base model is left untouched."""
    params = dict(genome.params if isinstance(genome, Genome) else genome)
    space = space or model_space(model)
    why = space.why_invalid({**space.default(), **params})
    if why is not None:
        return Applied(None, [], f"invalid model genome: {why}", "invalid")
    plan = {**space.default(), **params}
    checks: list[SiteVerdict] = []
    if check:
        checks = (checker or SiteCheck(model)).check(plan)
        bad = [v for v in checks if not v.ok]
        if bad:
            text = "; ".join(f"site {v.site}={v.choice} on {v.block}: {v.reason}" for v in bad)
            return Applied(None, checks, f"site check failed: {text}", "incorrect")
    try:
        return Applied(build(model, plan), checks)
    except Exception as exc:
        return Applied(None, checks, f"building the candidate failed: {type(exc).__name__}: {exc}", "incorrect")


def describe_sites(model: nn.Module) -> list[dict[str, Any]]:
    """The model's sites as data: name, kind, choices, requirements, kernel genes, doc."""
    return [
        {
            "site": s.name,
            "kind": s.kind,
            "choices": list(s.choices),
            "doc": s.doc,
            "requires": {c: [list(r) for r in rs] for c, rs in s.requires.items()},
            "excludes": {c: [list(r) for r in rs] for c, rs in s.excludes.items()},
            "kernel_genes": [p.name for p in s.kernel.params] if s.kernel else [],
            "tuned": list(s.tuned),
        }
        for s in _sites(model).values()
    ]


# -- kernel genes of the templates sites run ----------------------------------------------------
def model_size(size: str | None, sizes: Mapping[str, Any]) -> str:
    """The size an example model is built at: `size`, else EVOKERNEL_MODEL_SIZE, else "tiny"
    (`EVOKERNEL_MODEL_SIZE=real evokernel profile examples/models/flux_dit.py` builds it at
    its real size); one of `sizes`' keys."""
    import os

    size = size or os.environ.get("EVOKERNEL_MODEL_SIZE", "tiny")
    if size not in sizes:
        raise ValueError(f"EVOKERNEL_MODEL_SIZE must be one of {sorted(sizes)}, got {size!r}")
    return size


def launch_genes(domains: Mapping[str, Sequence[int]]) -> KernelGenes:
    """Genes of a small kernel's launch parameters (first value of each domain: the default)."""
    return KernelGenes(tuple(Choice(k, list(v), default=v[0]) for k, v in domains.items()))


def _gemm_registers(p: Point) -> str | None:
    per_thread = p["BM"] * p["BN"] // (32 * p["num_warps"])
    return (
        f"a {p['BM']}x{p['BN']} accumulator is {per_thread} fp32 registers per thread (at most 160)"
        if per_thread > 160
        else None
    )


def _gemm_smem(p: Point) -> str | None:
    need = (p["BM"] * p["BK"] + p["BK"] * p["BN"]) * 2 * p["num_stages"]
    return f"shared memory {need} B > {227 * 1024} B" if need > 227 * 1024 else None


def gemm_genes() -> KernelGenes:
    """The tile, grouping, warps and stages of `search_spaces/gemm/template.py` (split-K,
    persistence, TMA and the rest stay at the template's defaults), with its shared-memory
    and register rules."""
    return KernelGenes(
        (
            Choice("BM", [128, 64, 256, 32], default=128),
            Choice("BN", [128, 64, 256], default=128),
            Choice("BK", [64, 32, 128], default=64),
            Choice("GROUP_M", [8, 1], default=8),
            Choice("num_warps", [8, 4], default=8),
            Choice("num_stages", [3, 2, 4, 5], default=3),
        ),
        (_gemm_smem, _gemm_registers),
    )


def moe_genes() -> KernelGenes:
    """One config for both GEMMs of `search_spaces/moe/template.py`'s fused MoE."""

    def smem(p: Point) -> str | None:
        need = (p["BLOCK_SIZE_M"] * p["BLOCK_SIZE_K"] + p["BLOCK_SIZE_K"] * p["BLOCK_SIZE_N"]) * 2 * p["num_stages"]
        return f"shared memory {need} B > {227 * 1024} B" if need > 227 * 1024 else None

    return KernelGenes(
        (
            Choice("BLOCK_SIZE_M", [64, 16, 32, 128], default=64),
            Choice("BLOCK_SIZE_N", [64, 32, 128], default=64),
            Choice("BLOCK_SIZE_K", [64, 32, 128], default=64),
            Choice("GROUP_SIZE_M", [1, 8], default=1),
            Choice("num_warps", [4, 8], default=4),
            Choice("num_stages", [3, 2, 4], default=3),
        ),
        (smem,),
    )
