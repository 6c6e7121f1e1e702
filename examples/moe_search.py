"""Tune the fused-MoE kernel of Qwen3-30B-A3B and compare it with what SGLang would run.

    python examples/moe_search.py [--budget 60] [--ms 64 1024] [--model qwen3-30b-a3b]

On a GPU: a search per batch size of the fused-MoE template's space (`moe_space`: the up and
the down GEMM's tiles, grouping, warps and stages, the small-batch GEMV path and SiLU fused
into the up GEMM as genes; judged by the sandboxed gate), seeded with SGLang's own configs
for the shape (`evokernel.search_spaces.moe.sglang`: its default-config heuristic, its
shipped config for this GPU, or where it ships none for this shape, its shipped configs for
its other shapes), then the winner, SGLang's default config and SGLang's shipped config
re-measured together, interleaved, in fresh processes (`evokernel.engine.tuning.search_against`);
the table of winners against the baselines is printed at the end, and `evokernel export
sglang-moe <out>/moe.db --out DIR` writes the winners where SGLang reads them.
(`benchmarks/moe_h200.py` runs the same searches for the benchmark record, and also: seeds
from earlier winners (its results JSON, at this and the nearest batch sizes), hand-picked GEMV
and fused-SiLU seeds, fp8 experts (`--fp8`), a deadline for the whole run, and the JSON and
Markdown record.)

Without a GPU: the same search replays the recorded H200 landscapes of this kernel (M=64
and M=1024, one config for both GEMMs), and the baselines are those landscapes' recorded
figures for SGLang's two configs. It says so when it starts. `--device cpu --model tiny
--ms 16` runs the real search instead, Triton in its interpreter, fp16, SGLang's configs
looked up as for an H200 (a check of this script, not a measurement).
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any


def replay(budget: int, ms: list[int]) -> None:
    from evokernel import Budget, Search
    from evokernel.evaluators import ReplayEvaluator
    from evokernel.engine.landscape import Landscape, builtin
    from evokernel.search_spaces.moe.sglang import default_config, shipped_config

    print("no GPU: replaying the recorded H200 landscapes (moe_bf16_h200_qwen3-30b-a3b_M*), with 3% noise")
    print(
        "| M | winner (one config for both GEMMs) | winner ms | SGLang default ms | speedup | SGLang H200 ms | speedup |"
    )
    print("|---|---|---|---|---|---|---|")
    for m in ms:
        L = Landscape.load(builtin(f"moe_bf16_h200_qwen3-30b-a3b_M{m}"))
        ev = ReplayEvaluator(L, noise=0.03, seed=m)
        report = Search(L.space, ev).run(Budget(evaluations=budget), seed=m)
        won = ev.true_latency(report.best.genome)
        base = []
        for cfg in (default_config(m, 128), shipped_config(128, 768, m, "NVIDIA H200")):
            row = L.rows.get(tuple(cfg[n] for n in L.space.names)) if cfg else None
            base.append(row.latency_ms if row is not None and row.latency_ms else None)
        cells = " | ".join(f"{b:.4f} | {b / won:.3f}" if b else "not in the recorded space | -" for b in base)
        print(f"| {m} | {report.best.genome.short()} | {won:.4f} | {cells} |")


def _short(cfg: dict[str, int]) -> str:
    return "{BLOCK_SIZE_M}x{BLOCK_SIZE_N}x{BLOCK_SIZE_K} g{GROUP_SIZE_M} w{num_warps} s{num_stages}".format(**cfg)


def tune(model: str, ms: list[int], *, budget: int, out: Path, device: str) -> None:
    """A search per batch size M, each winner re-measured against SGLang's default and shipped
    configs; prints the table."""
    import evokernel.search_spaces.moe as moe
    from evokernel import Genome
    from evokernel.engine.tuning import geomean, search_against
    from evokernel.evaluators import KernelEvaluator
    from evokernel.judge.problem import Problem
    from evokernel.search_spaces.moe import moe_space, shared_params
    from evokernel.search_spaces.moe.sglang import default_config, shipped_config, shipped_elsewhere
    from evokernel.search_spaces.moe.template import candidate_source, split_config
    from evokernel.store import SQLiteStore

    out.mkdir(parents=True, exist_ok=True)
    store = SQLiteStore(out / "moe.db")
    # SGLang's configs are looked up by GPU name; the interpreter's check takes the H200's
    from evokernel.judge.device import gpu_name

    gpu = gpu_name(device) or "NVIDIA H200"
    space = moe_space(gemv=True, fuse_silu=True)
    plain = {"GEMV": 0, "FUSE_SILU": 0}  # SGLang's configs run neither structure
    print("| M | winner (up / down) | winner ms | SGLang default ms | speedup | SGLang shipped ms | speedup |")
    print("|---|---|---|---|---|---|---|")
    speedups: dict[str, list[float | None]] = {"sglang_default": [], "sglang_shipped": []}
    for m in sorted(ms):
        params: dict[str, Any] = {"model": model, "m": [m]}
        if device == "cpu":
            params["dtype"] = "float16"  # (the interpreter has no bf16 dots)
        problem = Problem.load(Path(moe.__file__).parent / "problems" / "moe_bf16.py", params=params)
        ev = KernelEvaluator(problem, lambda g: candidate_source(g.params), device=device)
        shape = ev.problem.shapes[0]
        E, N = int(shape["E"]), int(shape["I"])
        base = {"sglang_default": default_config(m, E), "sglang_shipped": shipped_config(E, N, m, gpu)}
        # the search starts from what SGLang would run, so its pick can only improve on it
        configs = [c for c in base.values() if c is not None]
        if base["sglang_shipped"] is None:  # no tuned file for this shape: SGLang's tiles for its others
            configs += shipped_elsewhere(E, N, m, gpu)
        seeds = [q for q in (dict(shared_params(c), **plain) for c in configs) if space.is_valid(q)]
        seeds = [p for i, p in enumerate(seeds) if p not in seeds[:i]]
        baselines = {n: Genome.of(dict(shared_params(c), **plain)) for n, c in base.items() if c is not None}
        try:
            part, report = search_against(
                space,
                ev,
                store=store,
                seeds=seeds,
                baselines=baselines,
                name=f"moe-{model}-M{m}",
                evaluations=budget,
                wall_s=600.0,
            )
        finally:
            ev.close()
        if part is None:
            print(f"| {m} | no candidate passed the gate ({report.statuses}) | | | | | |")
            continue
        up, down = split_config(part["winner"])
        structure = {1: " gemv", 2: " gemv-pairs"}.get(part["winner"].get("GEMV", 0), "")
        structure += " fused-silu" if part["winner"].get("FUSE_SILU") else ""
        if part["winner_is_baseline"]:  # the search found nothing faster when re-measured
            structure += f" (= {part['winner_is_baseline']})"
        cells = []
        for name in ("sglang_default", "sglang_shipped"):
            speedups[name].append(part["speedup"].get(name))
            ms_, x = part["baselines"].get(name), part["speedup"].get(name)
            if name not in baselines:
                cells.append(f"none shipped for E={E}, N={N} | -")
            else:
                cells.append(f"{ms_:.4f} | {x:.3f}" if ms_ and x else "- | -")
        print(
            f"| {m} | {_short(up)} / {_short(down)}{structure} | {part['winner_ms']:.4f} | {' | '.join(cells)} |",
            flush=True,
        )
    gm = {k: geomean(v) for k, v in speedups.items()}
    print("| **geomean** | | | | " + " | | ".join(f"**{gm[k]:.3f}**" if gm[k] else "-" for k in gm) + " |")
    print(f"\nexport the winners for SGLang: evokernel export sglang-moe {out / 'moe.db'} --out DIR")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--budget", type=int, default=60)
    ap.add_argument("--ms", nargs="+", type=int, default=[64, 1024])
    ap.add_argument("--model", default="qwen3-30b-a3b", help="an MoE layer of evokernel.search_spaces.moe.MOE_MODELS")
    ap.add_argument("--out", default="moe-out", help="the search database goes here")
    ap.add_argument(
        "--device",
        default=None,
        help="where to search: cuda, cuda:N or cpu (default: the GPU if there is one, else replay the recorded "
        "landscapes)",
    )
    args = ap.parse_args()
    import torch

    from evokernel.judge.device import use_device

    device = args.device or ("cuda" if torch.cuda.is_available() else None)
    if device is not None:
        use_device(device, f"--device {device}")  # (a ConfigError: no such GPU here, and how many there are)
    if device is None:
        replay(args.budget, [m for m in args.ms if m in (64, 1024)] or [64, 1024])
        return
    tune(args.model, args.ms, budget=args.budget, out=Path(args.out), device=device)


if __name__ == "__main__":
    main()
