"""GEMM searches on the GPU against cuBLAS (issue 5).

For each model projection and batch size M (ascending, so each search is seeded from the
nearest shapes already searched, through the store): a search of the Hopper GEMM template's
space (`gemm_space()`: tiles, grouping, warps, stages, split-K, persistent tiles, TMA, warp
specialisation, clusters, register cap) with the default strategy, judged by the sandboxed
gate; then the winner and the baselines re-measured together, interleaved, in fresh
processes, by the same harness:

- `cublas`: torch.matmul on the same inputs (plus the epilogue in eager torch, if any);
- `triton_default`: the template at its default config (Triton's tutorial Hopper config).

Writes `gemm.json` (device, date, command, one row per shape, and `geomean`: baseline name ->
the winner's geometric-mean speedup over it) and `gemm.md` under --out after every row, and
the search database `gemm.db`.

    source benchmarks/device_setup.sh
    python3 benchmarks/gemm_h200.py --out $OUT --shapes llama3-8b:qkv llama3-8b:down qwen3-30b-a3b:qkv \\
        --ms 16 256 2048 8192 --budget 40 --deadline 540 [--epilogue bias+silu]
With --fp8 tensor|block: the fp8 e4m3 GEMM (examples/problems/gemm_fp8.py, per-tensor or
per-block scales) in its own template and space, against torch._scaled_mm (cuBLASLt):

    python3 benchmarks/gemm_h200.py --out $OUT/fp8 --fp8 tensor --shapes llama3-8b:qkv --ms 16 2048 --budget 16
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))
from evokernel.engine.tuning import geomean, nearest_landscape_seeds, prior_seeds, search_against  # noqa: E402

PROBLEM = ROOT / "examples" / "problems" / "gemm_bf16.py"
BASELINES = ["cublas", "triton_default"]


def write(out: Path, doc: dict[str, Any]) -> None:
    for name in BASELINES:
        doc["geomean"][name] = geomean([r["speedup"].get(name) for r in doc["rows"]])
    (out / "gemm.json").write_text(json.dumps(doc, indent=1))
    head = (
        "| model | layer | M | N | K | winner | winner ms | TFLOP/s | "
        + " | ".join(f"{b} ms | speedup" for b in BASELINES)
        + " |"
    )
    lines = [head, "|---" * (8 + 2 * len(BASELINES)) + "|"]
    for r in doc["rows"]:
        won = f"{r['winner_ms']:.4f} | {r['tflops']:.0f}" if r["winner_ms"] else "failed | -"
        cells = " | ".join(
            f"{r['baselines'][b]:.4f} | {r['speedup'][b]:.3f}"
            if r["baselines"].get(b) and r["speedup"].get(b)
            else "- | -"
            for b in BASELINES
        )
        lines.append(
            f"| {r['model']} | {r['layer']} | {r['M']} | {r['N']} | {r['K']} | {r['winner_short']} | {won} | {cells} |"
        )
    cells = ["**geomean**"] + [""] * 7
    for b in BASELINES:
        cells += ["", f"**{doc['geomean'][b]:.3f}**" if doc["geomean"].get(b) else "-"]
    lines.append("| " + " | ".join(cells) + " |")
    (out / "gemm.md").write_text("\n".join(lines) + "\n")


def short(p: dict[str, int]) -> str:
    extra = [
        f"splitk{p['SPLIT_K']}" + ("+fixup" if p.get("SPLITK_FIXUP") else "") if p["SPLIT_K"] > 1 else "",
        "persistent" if p.get("PERSISTENT") else "",
        "tma" if p.get("TMA") else "",
        "ws" if p.get("WARP_SPEC") else "",
        f"ctas{p['num_ctas']}" if p.get("num_ctas", 1) > 1 else "",
        f"maxnreg{p['maxnreg']}" if p.get("maxnreg") else "",
        "swapab" if p.get("SWAP_AB") else "",
        "streamk" if p.get("STREAM_K") else "",
        f"tmastore{p['TMA_STORE']}" if p.get("TMA_STORE") else "",
        "areg" if p.get("A_REG") else "",
        {1: "gluon", 2: "gluon-pingpong"}.get(p.get("GLUON", 0), ""),
    ]
    width = f"({p['BN']}+{p['BN_TAIL']})" if p.get("BN_TAIL") else f"{p['BN']}"
    return f"{p['BM']}x{width}x{p['BK']} g{p['GROUP_M']} w{p['num_warps']} s{p['num_stages']} " + " ".join(
        e for e in extra if e
    )


def gluon_available() -> bool:
    """Whether this Triton has Gluon's Hopper API (the GLUON gene's kernel): said when not."""
    try:
        import evokernel.search_spaces.gemm.template_gluon  # noqa: F401
    except Exception as exc:  # an older Triton: the gene stays out of the space
        print(f"no GLUON gene: this Triton's Gluon is missing or differs ({type(exc).__name__}: {exc})", flush=True)
        return False
    return True


def fp8_seeds(m: int, defaults: dict[str, int]) -> list[dict[str, int]]:
    """Starting points for the fp8 template: its default, wide tiles for large M, small
    tiles with split-K for skinny M (weights-bound)."""
    big = [dict(defaults), dict(defaults, BN=256, num_stages=3), dict(defaults, BM=64, num_warps=4, num_stages=4)]
    small = [dict(defaults, BM=16, BN=64, num_warps=4, num_stages=5, SPLIT_K=s) for s in (1, 2, 4)] + [
        dict(defaults, BM=32, BN=128, num_warps=4, num_stages=4, SPLIT_K=2)
    ]
    return small + big[:1] if m <= 64 else big + small[-1:] if m <= 512 else big


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default=os.environ.get("OUT", "gemm-out"))
    ap.add_argument(
        "--shapes",
        nargs="+",
        default=[
            "llama3-8b:qkv",
            "llama3-8b:o",
            "llama3-8b:gate_up",
            "llama3-8b:down",
            "qwen3-30b-a3b:qkv",
            "qwen3-30b-a3b:o",
        ],
        help="MODEL:LAYER of examples/problems/gemm_bf16.py",
    )
    ap.add_argument("--ms", nargs="+", type=int, default=[16, 64, 256, 512, 2048, 4096, 8192])
    ap.add_argument(
        "--jobs",
        nargs="+",
        default=None,
        metavar="MODEL:LAYER:M",
        help="these shapes at these batch sizes only, in this order (instead of --shapes x --ms)",
    )
    ap.add_argument("--epilogue", default="none", help="e.g. bias+silu (the baseline then runs it in eager torch)")
    ap.add_argument("--budget", type=int, default=40, help="evaluations per search")
    ap.add_argument("--deadline", type=float, default=540.0, help="seconds for the whole script")
    ap.add_argument(
        "--fp8",
        choices=["tensor", "block"],
        default=None,
        help="the fp8 e4m3 GEMM (examples/problems/gemm_fp8.py) with these scales, against torch._scaled_mm",
    )
    ap.add_argument(
        "--prior",
        default=str(ROOT / "benchmarks" / "results" / "gemm.json"),
        help="a results JSON whose winners for the same shape seed the search too ('' for none)",
    )
    ap.add_argument("--no-swap-ab", action="store_true", help="leave the SWAP_AB gene (B^T A^T tiles) out of the space")
    ap.add_argument(
        "--stream-k",
        action="store_true",
        help="add the STREAM_K gene (the last wave by K steps): off by default, as it measured 1.6-5x "
        "slower than plain persistent tiles on the H200 (calls Z1-Z6, BENCHMARKS.md)",
    )
    ap.add_argument("--no-tma-store", action="store_true", help="leave the TMA_STORE gene (C through a descriptor) out")
    ap.add_argument(
        "--no-bn-tail",
        action="store_true",
        help="leave the BN_TAIL gene (96-320-wide tiles as two accumulators) and its wave-filling seeds out",
    )
    ap.add_argument(
        "--a-reg",
        action="store_true",
        help="add the A_REG gene (a tile's columns as 64-wide MMAs sharing A in registers): off by "
        "default, as it measured 1.5-3x slower than the same tiles without it (call BA)",
    )
    ap.add_argument(
        "--no-gluon",
        action="store_true",
        help="leave the GLUON gene (the warp-specialised Gluon kernel, search_spaces/gemm/template_gluon.py) out",
    )
    ap.add_argument(
        "--no-cublas-seed",
        action="store_true",
        help="do not seed each search with the tile cuBLAS runs at its shape (read with torch.profiler)",
    )
    ap.add_argument("--device", default="cuda", help="cpu (Triton's interpreter), cuda or cuda:N")
    args = ap.parse_args()
    t0 = time.monotonic()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)

    import torch

    from evokernel import Genome
    from evokernel.core.errors import EvaluatorError
    from evokernel.evaluators import KernelEvaluator
    from evokernel.judge.device import gpu_name, is_cuda, use_device
    from evokernel.search_spaces import (
        gemm_class,
        gemm_seeds,
        gemm_space,
        gluon_variant,
        wave_seeds,
        without_idle_genes,
    )
    from evokernel.search_spaces.gemm.cublas import cublas_seeds
    from evokernel.search_spaces.gemm.seeds import deep_variants
    from evokernel.search_spaces.gemm.template import DEFAULTS, candidate_source, torch_source
    from evokernel.store import SQLiteStore

    problem_path = PROBLEM
    if args.fp8:
        from evokernel.search_spaces.gemm.space_fp8 import gemm_fp8_space
        from evokernel.search_spaces.gemm.template_fp8 import DEFAULTS as FP8_DEFAULTS
        from evokernel.search_spaces.gemm.template_fp8 import candidate_source as fp8_source
        from evokernel.search_spaces.gemm.template_fp8 import scaled_mm_source

        problem_path = ROOT / "examples" / "problems" / "gemm_fp8.py"

    doc: dict[str, Any] = {
        "device": gpu_name(use_device(args.device, f"--device {args.device}")) or "cpu",
        "date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        "command": " ".join([Path(sys.argv[0]).name, *sys.argv[1:]]),
        "torch": torch.__version__,
        "epilogue": args.epilogue,
        "rows": [],
        "geomean": {},
        "skipped": [],
    }
    store = SQLiteStore(out / "gemm.db")
    swap = not args.no_swap_ab and not args.fp8
    streamk = args.stream_k and not args.fp8
    tstore = not args.no_tma_store and not args.fp8
    tail = not args.no_bn_tail and not args.fp8
    areg = args.a_reg and not args.fp8
    glu = not args.no_gluon and tstore and is_cuda(args.device) and gluon_available()  # (not on the CPU)
    space = (
        gemm_fp8_space(blockwise=args.fp8 == "block")
        if args.fp8
        else gemm_space(swap_ab=swap, stream_k=streamk, tma_store=tstore, bn_tail=tail, a_reg=areg, gluon=glu)
    )
    off = {
        **({"SWAP_AB": 0} if swap else {}),
        **({"STREAM_K": 0} if streamk else {}),
        **({"TMA_STORE": 0} if tstore else {}),
        **({"BN_TAIL": 0} if tail else {}),
        **({"A_REG": 0} if areg else {}),
        **({"GLUON": 0} if glu else {}),
    }  # the optional genes, off
    jobs = [(s.split(":")[0], s.split(":")[1], m) for s in args.shapes for m in sorted(args.ms)]
    if args.jobs:
        try:
            jobs = [(j.split(":")[0], j.split(":")[1], int(j.split(":")[2])) for j in args.jobs]
        except (IndexError, ValueError):
            ap.error(f"--jobs takes MODEL:LAYER:M items, got {args.jobs}")
    ev = None
    for i, (model, layer, m) in enumerate(jobs):
        left = args.deadline - (time.monotonic() - t0)
        if left < 30:
            doc["skipped"].append(f"{model}:{layer} M={m}: deadline")
            continue
        from evokernel.judge.problem import Problem

        params: dict[str, Any] = {"model": model, "layer": layer, "m": [m]}
        if args.fp8:
            params["scales"] = args.fp8
        else:
            params["epilogue"] = args.epilogue
            if args.device == "cpu":
                params["dtype"] = "float16"  # a CPU check of this script: no bf16 dots there
        problem = Problem.load(problem_path, params=params)
        if ev is not None:  # the last job's judge holds its input sets in GPU memory: give them back
            ev.close()
        cublas_kernels: list[str] = []
        if args.fp8:
            epi = {}
            ev = KernelEvaluator(problem, lambda g: fp8_source(g.params), device=args.device)
            seeds = fp8_seeds(m, FP8_DEFAULTS)
            descriptor = lambda g: f"{g['BM']}x{g['BN']}" + (f"/splitk{g['SPLIT_K']}" if g["SPLIT_K"] > 1 else "")  # noqa: E731
        else:
            epi = dict(problem.module.EPILOGUE)
            ev = KernelEvaluator(problem, lambda g, epi=epi: candidate_source(g.params, **epi), device=args.device)
            seeds = gemm_seeds(m, swap_ab=swap, stream_k=streamk, tma_store=tstore, bn_tail=tail, gluon=glu)
            descriptor = gemm_class
            # the tiles that fill the waves best at this M x N (from 64 tokens up: at M=512
            # x N=6144, 96 tiles of 128x256 leave 36 of 132 SMs idle)
            waves = (
                [{**off, **p} for p in wave_seeds(m, int(problem.shapes[0]["N"]), tma_store=tstore, top=6)]
                if tail and m >= 64
                else []
            )
            if areg:  # a tile with a tail also as 64-wide MMAs sharing A in registers
                waves = [
                    q for p in waves for q in ([p, dict(p, A_REG=1)] if p.get("BN_TAIL") else [p]) if space.is_valid(q)
                ]
            # this shape's earlier winners, then the winners of the other shapes at this M
            # (a new model's projections start from what won at the same batch size)
            # (a winner recorded with a gene since ruled out as changing nothing is read as
            # the same kernel without it: `without_idle_genes`)
            prior = prior_seeds(args.prior, space, normalise=without_idle_genes, model=model, layer=layer, M=m)
            # the tile cuBLAS itself runs here, in the template's terms (call BB: at the rows
            # we lost, cuBLAS ran tiles the seeds had never proposed)
            cublas_kernels, from_cublas = (
                cublas_seeds(m, problem.shapes[0], space, off, tma_store=tstore)
                if is_cuda(args.device) and not args.no_cublas_seed
                else ([], [])
            )
            # and the Gluon kernel's form of the earlier winners, of cuBLAS's tile and of the
            # wave seeds (a TMA producer warp, consumers keeping one MMA in flight: what
            # Triton's own warp specialisation does not do on Hopper)
            gluons = [q for q in (gluon_variant(space, {**off, **p}) for p in prior + from_cublas + waves) if q]
            # (gemm_seeds' Gluon tiles next after the earlier winners: call S11b's probe found
            # them 1-10% ahead of the winners at the rows the searches had lost)
            made = [p for p in seeds if p.get("GLUON")]
            seeds = (
                prior[:2]
                + made
                + prior[2:]
                + deep_variants(prior, space)
                + gluons[:2]
                + from_cublas
                + waves
                + gluons[2:]
                + nearest_landscape_seeds("matmul_bf16_h200_M", m, space, fill=dict(DEFAULTS, **off))
                + prior_seeds(args.prior, space, normalise=without_idle_genes, M=m)
                + seeds
            )
            # the search evaluates its seeds first: at most half the budget, so that it also
            # explores (calls W and X ran budget 14 with 16 seeds: seeds only); earlier winners
            # and the sweeps' best points come first
            # (gemm_seeds knows the optional genes it was told of, not A_REG: each seed gets the
            # genes it lacks as off, as call BA's log showed two seeds dropped for want of A_REG)
            # (and only valid ones count: a seed the space rules out, e.g. a recorded winner of
            # a form since found to hang, would take a slot and be dropped by the search)
            seeds = [q for q in ({**off, **p} for p in seeds) if space.is_valid(q)]
            seeds = [p for i, p in enumerate(seeds) if p not in seeds[:i]][: max(1, args.budget // 2)]
        shape = problem.shapes[0]
        if args.fp8:  # cuBLASLt's fp8 GEMM, and the fp8 template's default
            # (under the name "cublas", as gemm.json's geomean names cuBLAS's figure: here cuBLASLt's fp8 GEMM)
            baselines = {
                "cublas": Genome.of({"baseline": "cublaslt"}, source=scaled_mm_source()),
                "triton_default": Genome.of(dict(FP8_DEFAULTS)),
            }
        else:
            baselines = {
                "cublas": Genome.of({"baseline": "cublas"}, source=torch_source(**epi)),
                "triton_default": Genome.of(dict(DEFAULTS)),
            }
        try:
            part, report = search_against(
                space,
                ev,
                store=store,
                descriptor=descriptor,
                seeds=seeds,
                baselines=baselines,
                name=f"gemm{'-fp8-' + args.fp8 if args.fp8 else ''}-{model}-{layer}-M{m}",
                evaluations=args.budget,
                wall_s=max(15.0, 0.75 * left / (len(jobs) - i)),
            )
        except (EvaluatorError, torch.OutOfMemoryError) as exc:  # one job's failure, not the run's
            doc["skipped"].append(f"{model}:{layer} M={m}: {str(exc)[:300]}")
            write(out, doc)
            continue
        if part is None:
            doc["skipped"].append(f"{model}:{layer} M={m}: no candidate passed ({report.statuses})")
            write(out, doc)
            continue
        flops = problem.flops(shape) or 0.0
        ms = part["winner_ms"]
        row = {
            "model": model,
            "layer": layer,
            "M": m,
            "N": int(shape["N"]),
            "K": int(shape["K"]),
            **({"cublas_kernels": cublas_kernels} if cublas_kernels else {}),
            "winner_short": short(part["winner"]),
            "tflops": flops / (ms * 1e-3) / 1e12 if ms else None,
            **part,
        }
        doc["rows"].append(row)
        write(out, doc)
        print(
            json.dumps({k: row[k] for k in ("model", "layer", "M", "winner_short", "winner_ms", "speedup")}), flush=True
        )
    write(out, doc)


if __name__ == "__main__":
    main()
