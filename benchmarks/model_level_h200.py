"""Model-level search on two real architectures (issue 9): FLUX-style DiT double-stream blocks
and Qwen3-MoE-style decoder layers, dummy weights, bf16 on an H200.

For each model: profile it (`evokernel.model.profile`: where the time goes, ranked), search its
model-level space (`evokernel.model.model_level.model_space`) with the `ModelEvaluator` (every
candidate site-checked, its whole forward judged against the unchanged model, and timed
against it in the same call from CUDA graphs), seeded with the model as written and each
single change; ablate the winner (each change alone and left out; dead ends into the
knowledge base, the winning set into the kernel database); then the final table, measured
in one call, interleaved: the winner vs eager PyTorch replayed from a CUDA graph vs
`torch.compile(mode="max-autotune")`. After every model it writes `model_level.json` (with
a top-level `geomean` of the winner's speedups over `eager_cudagraph` and `torch_compile`;
targets 1.15 and 1.0) and `model_level.md` under --out; models already in the JSON (an
earlier call) are kept, so the models can run in separate calls.

    python benchmarks/model_level_h200.py --models flux --budget 24 --deadline 150 --out $OUT/model_level
    python benchmarks/model_level_h200.py --device cpu --tiny --budget 6 --out /tmp/ml   # a check of the script

On the CPU (`--device cpu`) Triton kernels run in the interpreter (TRITON_INTERPRET=1 is set
before anything imports them), figures are wall-clock medians, not GPU figures, and
torch.compile runs in mode "default"; the JSON says so.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import math
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MODELS = {
    "flux": ROOT / "examples" / "models" / "flux_dit.py",
    "qwen": ROOT / "examples" / "models" / "qwen3_moe_stack.py",
}


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--models", default="flux,qwen", help="comma-separated: flux, qwen")
    p.add_argument("--device", default="cuda", help="cuda, cuda:N or cpu")
    p.add_argument("--tiny", action="store_true", help="the models' tiny sizes (fp32)")
    p.add_argument("--blocks", type=int, default=None, help="blocks/layers per model (default: the model's)")
    p.add_argument("--budget", type=int, default=24, help="evaluations per model")
    p.add_argument("--deadline", type=float, default=150.0, help="seconds of search per model")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--rounds", type=int, default=None, help="interleaved timing rounds (default 12; 3 on the CPU)")
    p.add_argument("--reps", type=int, default=None, help="calls per variant per round (default 5; 1 on the CPU)")
    p.add_argument(
        "--compile-mode",
        default=None,
        help="torch.compile mode of the baseline (default max-autotune; default on the CPU)",
    )
    p.add_argument("--no-compile", action="store_true", help="leave the torch.compile baseline out")
    p.add_argument(
        "--no-compiled-sites",
        action="store_true",
        help="leave out the choices that run torch.compile (segments, whole blocks)",
    )
    p.add_argument(
        "--out",
        type=Path,
        default=Path(os.environ.get("OUT", "model-level-out")),
        help="where model_level.json, .md and the store go (the record, benchmarks/results/model_level.json, is a copy of one call's file)",
    )
    p.add_argument("--db", type=Path, default=None, help="store (default OUT/model_level.db)")
    return p.parse_args(argv)


def load(path: Path):  # type: ignore[no-untyped-def]
    spec = importlib.util.spec_from_file_location(f"_model_level_{path.stem}", path)
    mod = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
    spec.loader.exec_module(mod)  # type: ignore[union-attr]
    return mod


def _compiles(site: str, value: object) -> bool:
    """Whether a choice runs torch.compile (slow to build: --no-compiled-sites leaves them out)."""
    return value == "compiled" or (site.endswith("_compile") and value == "on")


def seeds_for(space, *, compiled_sites: bool):  # type: ignore[no-untyped-def]
    """The model as written, each single change (with another site's choice where it requires
    one), every kernel change at once, and (with compiled sites) each kernel change inside a
    compiled block."""
    sites = [p for p in space.params if "." not in p.name]
    out = [space.default()]
    for p in sites:
        for v in p.values[1:]:
            if _compiles(p.name, v) and not compiled_sites:
                continue
            point = {**space.default(), p.name: v}
            if space.why_invalid(point) is not None:
                point = next(
                    (
                        {**point, q.name: w}
                        for q in sites
                        if q is not p
                        for w in q.values[1:]
                        if space.why_invalid({**point, q.name: w}) is None
                    ),
                    point,
                )
            if space.why_invalid(point) is None:
                out.append(point)
    # combinations: every kernel change at once, and each with the block compiled around it
    # (call S: compiling blocks won 1.7x alone and no single kernel change reached the final;
    # what compiling cannot do, a fused MoE with on-device routing, pays only on top of it)
    kernel_changes = [pt for pt in out[1:] if not any(_compiles(k, v) for k, v in pt.items())]
    merged = dict(space.default())
    for pt in kernel_changes:
        trial = {**merged, **{k: v for k, v in pt.items() if v != space.default()[k]}}
        if space.why_invalid(trial) is None:
            merged = trial
    combos = [merged] if merged != space.default() and merged not in out else []
    if compiled_sites:
        for name, on in (("block_compile", "on"),):
            if name not in space.names:
                continue
            for pt in [*kernel_changes, *combos]:
                trial = {**pt, name: on}
                if space.why_invalid(trial) is None and trial not in out + combos:
                    combos.append(trial)
    return out + combos


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    cpu = args.device == "cpu"
    if cpu:
        os.environ.setdefault("TRITON_INTERPRET", "1")  # before anything decorates a Triton kernel
    import torch

    from evokernel import Budget, Search, SearchOptions, SQLiteStore
    from evokernel.model.ablation import ablate, record
    from evokernel.judge.env import toolchain
    from evokernel.evaluators.model import ModelEvaluator, TimingOptions
    from evokernel.model.profile import profile_module

    sys.path.insert(0, str(ROOT / "benchmarks"))
    from evokernel.engine.tuning import geomean

    from evokernel.core.errors import ConfigError
    from evokernel.judge.device import use_device

    try:
        use_device(args.device, f"--device {args.device}")
    except ConfigError as exc:
        print(f"{exc}: use --device cpu --tiny where there is no GPU", file=sys.stderr)
        return 2
    args.out.mkdir(parents=True, exist_ok=True)
    if not cpu:
        os.environ.setdefault("TORCHINDUCTOR_CACHE_DIR", str(args.out / "inductor_cache"))
    size = "tiny" if args.tiny else "real"
    dtype = torch.float32 if (cpu or args.tiny) else torch.bfloat16
    timing = TimingOptions(rounds=args.rounds or (3 if cpu else 12), reps=args.reps or (1 if cpu else 5))
    json_path, md_path = args.out / "model_level.json", args.out / "model_level.md"
    doc = json.loads(json_path.read_text()) if json_path.exists() else {}
    doc.setdefault("models", {})
    store = SQLiteStore(str(args.db or args.out / "model_level.db"))
    tc = toolchain()
    for key in [k.strip() for k in args.models.split(",") if k.strip()]:
        mod = load(MODELS[key])
        t0 = time.time()
        model = mod.model(size)
        if args.blocks:
            blocks = getattr(model, "blocks", None) or getattr(model, "layers")
            del blocks[args.blocks :]
        inputs = mod.example_inputs(size, dtype)
        print(f"== {mod.name} ({size}, {str(dtype).removeprefix('torch.')}, {args.device})", flush=True)
        # 1. where the time goes
        prof = profile_module(
            model.to(args.device, dtype), inputs, device=args.device, warmup=2, iters=2 if cpu else 5, target=mod.name
        )
        rec = prof.to_dict(top=15)
        rec.update(name=mod.name, toolchain={**tc, "device_name": prof.device_name})
        store.save_profile(rec)
        from rich.console import Console

        Console(width=200).print(prof.table(top=10))
        # 2. the search
        ev = ModelEvaluator(model, inputs, name=mod.name, device=args.device, dtype=dtype, timing=timing)
        gpu = ev.fingerprint()["device"]
        seeds = seeds_for(ev.space, compiled_sites=not args.no_compiled_sites)
        if args.no_compiled_sites:
            ev.space.add_constraint(
                lambda p: (
                    not any(_compiles(k, v) for k, v in p.items())
                    or "torch.compile choices left out (--no-compiled-sites)"
                ),
                "no compiled sites",
            )
        search = Search(
            ev.space,
            ev,
            store=store,
            seeds=seeds,
            name=f"model_level:{mod.name}",
            options=SearchOptions(population=max(4, min(8, len(seeds))), report_elites=3),
        )
        report = search.run(Budget(evaluations=args.budget, wall_s=args.deadline), seed=args.seed)
        winner = report.best.genome if report.best else ev.space.genome(ev.space.default())
        print(
            f"search: {report.evaluations} evaluations, {report.statuses}, stop: {report.stop_reason}; "
            f"best {winner.short()}",
            flush=True,
        )
        abl = None
        # 3. the final table, one call: winner vs eager + CUDA graph vs torch.compile (written
        # before the ablation, so that a call stopped at its limit keeps the headline figures)
        times, failed = ev.measure({"winner": winner}, compiled=not args.no_compile)
        base, win, comp = times["baseline"], times.get("winner"), times.get("torch_compile")
        entry = {
            "size": size,
            "dtype": str(dtype).removeprefix("torch."),
            "device": gpu,
            "timing": base.method,
            "inputs": [list(x.shape) for x in inputs if isinstance(x, torch.Tensor)],
            "blocks": len(getattr(model, "blocks", None) or getattr(model, "layers")),
            "winner": dict(winner.params),
            "winner_ms": win.median_ms if win else None,
            "eager_cudagraph_ms": base.median_ms,
            "torch_compile_ms": comp.median_ms if comp else None,
            "torch_compile_label": ev.compile_label,
            "torch_compile_timing": comp.method if comp else None,
            "noise": {k: t.noise for k, t in times.items()},
            "speedup": {
                "eager_cudagraph": base.median_ms / win.median_ms if win else None,
                "torch_compile": comp.median_ms / win.median_ms if win and comp else None,
            },
            "failed": failed,
            "search": {
                "evaluations": report.evaluations,
                "statuses": report.statuses,
                "stop": report.stop_reason,
                "run_id": report.run_id,
            },
            "ablation": abl.to_dict() if abl else None,
            "profile_top": [
                {k: r[k] for k in ("module", "op", "kernel", "share", "total_ms")} for r in rec["rows"][:8]
            ],
            "wall_s": time.time() - t0,
        }
        doc["models"][mod.name] = entry
        doc.update(
            device=args.device,
            mode=(
                "cpu-tiny: Triton in the interpreter, wall-clock figures, not GPU figures"
                if cpu
                else f"{size} sizes, {str(dtype).removeprefix('torch.')}"
            ),
            toolchain=tc,
            targets={"eager_cudagraph": 1.15, "torch_compile": 1.0},
            geomean={
                k: geomean([m["speedup"][k] for m in doc["models"].values()])
                for k in ("eager_cudagraph", "torch_compile")
            },
        )
        json_path.write_text(json.dumps(doc, indent=1, default=str))
        md_path.write_text(markdown(doc))
        print(
            f"{mod.name}: winner {entry['winner_ms']} ms, eager+graph {base.median_ms:.4g} ms, "
            f"torch.compile {entry['torch_compile_ms']} ms; speedups {entry['speedup']}",
            flush=True,
        )
        # 4. ablation (nothing to ablate when the model as written won)
        abl = None
        if any("." not in n and winner.params[n] != ev.space.default()[n] for n in ev.space.names):
            abl = ablate(ev, winner)
            record(
                store,
                abl,
                ev.space,
                gpu=gpu,
                toolchain=tc,
                run_id=report.run_id,
                shapes=[{"input": list(x.shape)} for x in inputs if isinstance(x, torch.Tensor)],
                tests=["tests/test_model_level.py"],
            )
            print(abl.markdown(), flush=True)
            entry["ablation"], entry["wall_s"] = abl.to_dict(), time.time() - t0
            json_path.write_text(json.dumps(doc, indent=1, default=str))
            md_path.write_text(markdown(doc))
        del ev, model
    print(json.dumps(doc["geomean"]))
    return 0


def markdown(doc: dict) -> str:  # type: ignore[type-arg]
    fmt = lambda x, s=".3f": "-" if x is None or (isinstance(x, float) and not math.isfinite(x)) else format(x, s)  # noqa: E731
    lines = [
        f"# Model-level search ({doc.get('mode', '')})",
        "",
        "| model | timing | winner ms | eager (+ CUDA graph on GPU) ms | torch.compile ms | vs eager | "
        "vs torch.compile | changes |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for name, m in doc["models"].items():
        changes = (
            ", ".join(
                f"{k}={v}"
                for k, v in m["winner"].items()
                if "." not in k and v not in ("separate", "eager", "per_block", "grouped_mm", "off")
            )
            or "(none)"
        )
        lines.append(
            f"| {name} | {m['timing']} | {fmt(m['winner_ms'], '.4g')} | {fmt(m['eager_cudagraph_ms'], '.4g')} | "
            f"{fmt(m['torch_compile_ms'], '.4g')} | {fmt(m['speedup']['eager_cudagraph'])} | "
            f"{fmt(m['speedup']['torch_compile'])} | {changes} |"
        )
    g = doc.get("geomean", {})
    lines += [
        "",
        f"geomean: vs eager+graph {fmt(g.get('eager_cudagraph'))} (target 1.15), "
        f"vs torch.compile {fmt(g.get('torch_compile'))} (target 1.0)",
        "",
    ]
    for name, m in doc["models"].items():
        if m.get("ablation"):
            from evokernel.model.ablation import AblationReport, AblationRow

            a = dict(m["ablation"])
            rows = [AblationRow(**r) for r in a.pop("rows")]
            a.pop("speedup", None)
            lines.append(AblationReport(rows=rows, **a).markdown())
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.exit(main())
