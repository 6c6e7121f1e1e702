"""A run's winners as Triton autotuner configs (`evokernel export triton` / `triton-json`).

Each of the run's top-k elites (fastest first) becomes one `triton.Config`: the genome's
meta-parameters (block sizes, group sizes, flags: the kernel's `tl.constexpr` arguments) in its
`kwargs` dict, and the parameters Triton takes as keyword arguments of `triton.Config`
(`num_warps`, `num_stages`, `num_ctas`, `maxnreg`) as keyword arguments, where the genome has
them (Triton's defaults apply where it has not). `python_snippet` writes a `configs = [...]` list
to paste into `@triton.autotune(configs=configs, key=[...])`, each entry with a comment giving
its measured latency and the card it was measured on; `json_entries` the same as JSON-ready
dicts: `{"kwargs", "num_warps", "num_stages", ["num_ctas", "maxnreg",] "latency_ms", "noise",
"shape", "device", "run", "genome"}`.

A genome that cannot be a `triton.Config` is refused with one line saying why: one carrying
kernel source (an LLM rewrite: a Config holds no source), one with a parameter name that is not
a Python identifier (no kernel argument can take it), a Triton keyword argument that is not an
integer, or a non-finite value.

>>> from evokernel.core.genome import Genome
>>> c = config_of(Genome.of({"BM": 64, "BN": 32, "num_warps": 8, "num_stages": 3}))
>>> c.kwargs, c.options
({'BM': 64, 'BN': 32}, {'num_warps': 8, 'num_stages': 3})
>>> c.python()
"triton.Config({'BM': 64, 'BN': 32}, num_warps=8, num_stages=3)"
"""

from __future__ import annotations

import keyword
import math
from dataclasses import dataclass, field
from typing import Any

from evokernel.core.errors import ConfigError
from evokernel.core.genome import Genome

__all__ = ["TRITON_OPTIONS", "TritonConfig", "config_of", "run_configs", "python_snippet", "json_entries"]

#: `triton.Config`'s keyword arguments a genome may set, in the order they are written.
TRITON_OPTIONS = ("num_warps", "num_stages", "num_ctas", "maxnreg")


@dataclass(frozen=True)
class TritonConfig:
    """One elite as a `triton.Config`: meta-parameters, keyword arguments, and its figures."""

    kwargs: dict[str, Any]
    options: dict[str, int]  # num_warps, num_stages, num_ctas, maxnreg: those the genome sets
    genome: str = ""
    latency_ms: float | None = None
    noise: float = 0.0
    extra: dict[str, Any] = field(default_factory=dict)

    def python(self) -> str:
        """The `triton.Config(...)` expression."""
        opts = "".join(f", {k}={v!r}" for k, v in self.options.items())
        return f"triton.Config({self.kwargs!r}{opts})"


def config_of(genome: Genome) -> TritonConfig:
    """The genome as a Triton config, or a ConfigError saying in one line why it cannot be one."""
    who = f"genome {genome.id}"
    if genome.source is not None:
        raise ConfigError(
            f"{who} rewrites the kernel's source (an LLM rewrite): a triton.Config holds meta-parameters only, "
            "so it cannot be exported as one"
        )
    if not genome.params:
        raise ConfigError(f"{who} has no parameters: nothing to put in a triton.Config")
    kwargs: dict[str, Any] = {}
    options: dict[str, int] = {}
    for name, value in genome.params.items():
        if not name.isidentifier() or keyword.iskeyword(name):
            raise ConfigError(
                f"{who}'s parameter {name!r} is not a Python identifier, so no kernel argument takes it: "
                "not a Triton config"
            )
        if isinstance(value, float) and not math.isfinite(value):
            raise ConfigError(f"{who}'s parameter {name!r} is {value!r}: not a Triton config value")
        if name in TRITON_OPTIONS:
            if isinstance(value, bool) or not isinstance(value, int):
                raise ConfigError(f"{who}'s {name} is {value!r}, but triton.Config takes an integer")
            options[name] = value
        else:
            kwargs[name] = value
    ordered = {k: options[k] for k in TRITON_OPTIONS if k in options}
    return TritonConfig(kwargs=kwargs, options=ordered, genome=genome.id)


def _shape(run: Any) -> dict[str, Any] | None:
    """The problem shape the run recorded (its transfer key), integers where whole."""
    key = run.config.get("transfer")
    if not isinstance(key, dict) or not isinstance(key.get("shape"), dict):
        return None
    return {str(k): int(v) if float(v).is_integer() else v for k, v in key["shape"].items()}


def run_configs(store: Any, run: Any, *, top: int = 1, device: str | None = None) -> list[TritonConfig]:
    """The run's `top` fastest genomes as Triton configs, fastest first. A genome counts by the
    median of all its readings in the run's history (evaluations and the end's re-measurements;
    estimates left out), and one that failed any reading does not count (as `export sglang-moe`
    ranks them). `device`: the card the figures come from (recorded with each)."""
    import statistics

    if top < 1:
        raise ConfigError("--top must be >= 1")
    readings: dict[str, list[float]] = {}
    noises: dict[str, list[float]] = {}
    genomes: dict[str, Genome] = {}
    failed: set[str] = set()
    for ev in store.history(run.id):
        gid = ev.genome.id
        genomes[gid] = ev.genome
        if ev.result.is_ok and ev.result.latency_ms is not None:
            if not getattr(ev.result, "estimated", False):
                readings.setdefault(gid, []).append(float(ev.result.latency_ms))
                noises.setdefault(gid, []).append(float(ev.result.noise))
        else:
            failed.add(gid)
    ranked = sorted((statistics.median(xs), gid) for gid, xs in readings.items() if gid not in failed)[:top]
    if not ranked:
        raise ConfigError(f"run {run.id} has no genome that ran correctly: nothing to export")
    out = []
    shape = _shape(run)
    for ms, gid in ranked:
        c = config_of(genomes[gid])
        out.append(
            TritonConfig(
                kwargs=c.kwargs,
                options=c.options,
                genome=gid,
                latency_ms=ms,
                noise=statistics.median(noises[gid]),
                extra={"shape": shape, "device": device, "run": run.id, "readings": len(readings[gid])},
            )
        )
    return out


def python_snippet(configs: list[TritonConfig], run: Any) -> str:
    """A Python module defining `configs`, a list of `triton.Config` to pass to `@triton.autotune`."""
    first = configs[0].extra
    shape = first.get("shape")
    shape_text = ", ".join(f"{k}={v}" for k, v in shape.items()) if shape else "not recorded"
    lines = [
        f"# Triton autotune configs exported by evokernel from run {run.id} ({run.name}):",
        f"# its {len(configs)} fastest elite{'s' if len(configs) != 1 else ''}, fastest first; "
        f"shape {shape_text}; measured on {first.get('device') or 'an unrecorded device'}.",
        "# Use: @triton.autotune(configs=configs, key=[...]) above the @triton.jit kernel these were tuned for",
        "# (a config's dict holds its tl.constexpr meta-parameters; other shapes or cards may want a new search).",
        "import triton",
        "",
        "configs = [",
    ]
    for i, c in enumerate(configs, 1):
        lat = f"{c.latency_ms:.6f} ms" if c.latency_ms is not None else "latency not recorded"
        lines.append(
            f"    # {i}: {lat} (median of {c.extra.get('readings', 1)}, noise {100 * c.noise:.1f}%) on {c.extra.get('device') or 'an unrecorded device'}, "
            f"genome {c.genome}"
        )
        lines.append(f"    {c.python()},")
    lines.append("]")
    return "\n".join(lines) + "\n"


def json_entries(configs: list[TritonConfig]) -> list[dict[str, Any]]:
    """The configs as JSON-ready dicts: kwargs, num_warps and num_stages (null: the genome left
    them to Triton's default), num_ctas / maxnreg where set, and the figures."""
    out = []
    for c in configs:
        entry: dict[str, Any] = {
            "kwargs": dict(c.kwargs),
            "num_warps": c.options.get("num_warps"),
            "num_stages": c.options.get("num_stages"),
        }
        for k in ("num_ctas", "maxnreg"):
            if k in c.options:
                entry[k] = c.options[k]
        entry.update(
            latency_ms=c.latency_ms,
            noise=c.noise,
            shape=c.extra.get("shape"),
            device=c.extra.get("device"),
            run=c.extra.get("run"),
            genome=c.genome,
            readings=c.extra.get("readings"),
        )
        out.append(entry)
    return out
