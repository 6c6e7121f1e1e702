"""Fused-MoE searches on the GPU against what SGLang would run (issue 5).

For each model and batch size M (ascending, so each search is seeded from the nearest M
already searched, through the store): a search of the fused-MoE template's space
(`moe_space()`: the up and the down GEMM's tiles, grouping, warps and stages; the down GEMM
shares BLOCK_SIZE_M, as in SGLang) with the default strategy, judged by the sandboxed gate;
then the winner and the baselines re-measured together, interleaved, in fresh processes:

- `sglang_default`: the template at SGLang's default-config heuristic (no tuned file);
- `sglang_h200`: the template at SGLang's shipped H200 config for that E and N (nearest
  batch size), where SGLang ships one.

Writes `moe.json` (device, date, command, one row per model and M, and `geomean`: baseline
name -> the winner's geometric-mean speedup over it) and `moe.md` under --out, after every
row, and the search database `moe.db` (`evokernel export sglang-moe moe.db --out DIR`).

    source benchmarks/device_setup.sh
    python3 benchmarks/moe_h200.py --out $OUT --models qwen3-30b-a3b mixtral-8x7b --ms 1 16 64 256 1024 4096 \\
        --budget 40 --deadline 540

`--fp8 tensor|block`: the same for fp8 w8a8 experts (`examples/problems/moe_fp8.py`, its
parameter scales set to the mode; `moe_space(fp8=...)`, no GEMV: that path is bf16 only);
files `moe_fp8_<mode>.json/.md/.db`. Baselines:

- `sglang_default`: the template at SGLang's default fp8 config (`default_fp8_config` in
  search_spaces/moe/sglang.py, from its `get_default_config` for `fp8_w8a8` on a GPU with
  >= 128 KiB of shared memory per block, as the H200): block scales 64x128x128 (BLOCK_SIZE_N, BLOCK_SIZE_K = the 128x128
  block), GROUP_SIZE_M 32, 4 warps, 3 stages; per tensor 128x256x128 g32 w8 s4, or
  64x128x128 g1 w4 s4 when M <= E;
- `sglang_h200`: the shipped H200 fp8 file for that E and N (`...,dtype=fp8_w8a8[,block_shape=
  [128, 128]].json`) where one is vendored in `search_spaces/moe/sglang_configs/`. None is (the
  vendored files are bf16): the row then says the baseline is absent. (SGLang 0.5.17 itself
  ships H200 fp8 files for E=8,N=14336 per tensor and E=128,N=768 per block, none for
  DeepSeek-V3 under EP8, E=32,N=2048.)

    python3 benchmarks/moe_h200.py --fp8 block --out $OUT --models deepseek-v3-ep8 --ms 1 16 64 256 1024 4096 \\
        --budget 40 --deadline 540
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
from evokernel.engine.tuning import geomean, nearest_ms, prior_seeds, search_against  # noqa: E402

PROBLEM = ROOT / "examples" / "problems" / "moe_bf16.py"
PROBLEM_FP8 = ROOT / "examples" / "problems" / "moe_fp8.py"


def write(out: Path, doc: dict[str, Any], stem: str = "moe") -> None:
    for name in doc["baselines"]:
        doc["geomean"][name] = geomean([r["speedup"].get(name) for r in doc["rows"]])
    (out / f"{stem}.json").write_text(json.dumps(doc, indent=1))
    lines = [
        "| model | E | N | M | winner (up / down) | winner ms | "
        + " | ".join(f"{b} ms | speedup" for b in doc["baselines"])
        + " |",
        "|---" * (6 + 2 * len(doc["baselines"])) + "|",
    ]
    for r in doc["rows"]:
        cells = " | ".join(
            f"{r['baselines'][b]:.4f} | {r['speedup'][b]:.3f}"
            if r["baselines"].get(b) and r["speedup"].get(b)
            else "- | -"
            for b in doc["baselines"]
        )
        won = f"{r['winner_ms']:.4f}" if r["winner_ms"] else "failed"
        lines.append(f"| {r['model']} | {r['E']} | {r['N']} | {r['M']} | {r['winner_short']} | {won} | {cells} |")
    cells = ["**geomean**", "", "", "", "", ""]
    for b in doc["baselines"]:
        cells += ["", f"**{doc['geomean'][b]:.3f}**" if doc["geomean"].get(b) else "-"]
    lines.append("| " + " | ".join(cells) + " |")
    notes = [
        f"- {r['model']} M={r['M']}: {b}: {why}" for r in doc["rows"] for b, why in r.get("baseline_notes", {}).items()
    ]
    if notes:
        lines += ["", *notes]
    (out / f"{stem}.md").write_text("\n".join(lines) + "\n")


def short(cfg: dict[str, int]) -> str:
    return "{BLOCK_SIZE_M}x{BLOCK_SIZE_N}x{BLOCK_SIZE_K} g{GROUP_SIZE_M} w{num_warps} s{num_stages}".format(**cfg)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default=os.environ.get("OUT", "moe-out"))
    ap.add_argument("--models", nargs="+", default=["qwen3-30b-a3b", "mixtral-8x7b"])
    ap.add_argument("--ms", nargs="+", type=int, default=[1, 16, 64, 256, 1024, 4096])
    ap.add_argument("--budget", type=int, default=40, help="evaluations per search")
    ap.add_argument("--deadline", type=float, default=540.0, help="seconds for the whole script")
    ap.add_argument("--no-gemv", action="store_true", help="leave the small-batch GEMV structure out of the space")
    ap.add_argument(
        "--prior",
        default=str(ROOT / "benchmarks" / "results" / "moe.json"),
        help="a results JSON whose winners for the same model and M seed the search too ('' for none)",
    )
    ap.add_argument(
        "--no-fuse-silu",
        action="store_true",
        help="leave the FUSE_SILU structure (SiLU in the up GEMM's epilogue) out of the space",
    )
    ap.add_argument(
        "--fp8",
        choices=["tensor", "block"],
        default=None,
        help="fp8 w8a8 experts with per-tensor or 128x128 block scales (moe_fp8.py)",
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
    from evokernel.judge.problem import Problem
    from evokernel.search_spaces import moe_space, shared_params
    from evokernel.search_spaces.moe.sglang import (
        default_config,
        default_fp8_config,
        shipped_config,
        shipped_elsewhere,
        shipped_fp8_config,
    )
    from evokernel.search_spaces.moe.template import candidate_source, split_config
    from evokernel.store import SQLiteStore

    device_name = gpu_name(use_device(args.device, f"--device {args.device}")) or "cpu"
    stem = f"moe_fp8_{args.fp8}" if args.fp8 else "moe"
    problem_path = PROBLEM_FP8 if args.fp8 else PROBLEM
    store = SQLiteStore(out / f"{stem}.db")
    doc: dict[str, Any] = {
        "device": device_name,
        "date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        "command": " ".join([Path(sys.argv[0]).name, *sys.argv[1:]]),
        "torch": torch.__version__,
        "baselines": ["sglang_default", "sglang_h200"],
        "rows": [],
        "geomean": {},
        "skipped": [],
    }
    gemv = not args.no_gemv and not args.fp8  # the GEMV path is bf16 only
    fuse = not args.no_fuse_silu and not args.fp8  # so is FUSE_SILU
    space = moe_space(gemv=gemv, fp8=args.fp8, fuse_silu=fuse)
    plain = {**({"GEMV": 0} if gemv else {}), **({"FUSE_SILU": 0} if fuse else {})}
    jobs = [(model, m) for model in args.models for m in sorted(args.ms)]
    ev = None
    for i, (model, m) in enumerate(jobs):
        left = args.deadline - (time.monotonic() - t0)
        per_job = left / (len(jobs) - i)
        if left < 45:
            doc["skipped"].append(f"{model} M={m}: deadline")
            continue
        params: dict[str, Any] = {"model": model, "m": [m], **({"scales": args.fp8} if args.fp8 else {})}
        if args.device == "cpu":
            params["dtype"] = "float16"  # the interpreter cannot do bf16 dots: a CPU run (a check of this script)
        if ev is not None:  # the last job's judge holds its input sets in GPU memory: give them back
            ev.close()
        problem = Problem.load(problem_path, params=params)
        ev = KernelEvaluator(problem, lambda g: candidate_source(g.params, fp8=args.fp8), device=args.device)
        shape = ev.problem.shapes[0]
        E, N = int(shape["E"]), int(shape["I"])
        notes = {}
        if args.fp8:
            block = args.fp8 == "block"
            base = {
                "sglang_default": default_fp8_config(m, E, block),
                "sglang_h200": shipped_fp8_config(E, N, m, device_name, block),
            }
            if base["sglang_h200"] is None:
                notes["sglang_h200"] = (
                    f"absent: no {device_name} fp8_w8a8{' block' if block else ''} config "
                    f"for E={E}, N={N} vendored in search_spaces/moe/sglang_configs (bf16 only)"
                )
        else:
            base = {"sglang_default": default_config(m, E), "sglang_h200": shipped_config(E, N, m, device_name)}
        # the search starts from what SGLang would run, so it can only improve on it
        seeds = [dict(shared_params(c), **plain) for c in base.values() if c is not None]
        if not args.fp8 and base["sglang_h200"] is None:  # no tuned file for this shape: SGLang's
            # tuned tiles for its other shapes at this M (call AG: DeepSeek's searches from the
            # default alone kept its 64x64x32 tiles at M >= 256)
            seeds += [
                p
                for p in (dict(shared_params(c), **plain) for c in shipped_elsewhere(E, N, m, device_name))
                if space.is_valid(p)
            ]
        prior = args.prior if not args.fp8 else ""
        seeds = prior_seeds(prior, space, model=model, M=m) + seeds
        # a batch size never searched before starts from the winners at the two nearest searched ones
        seeds += [p for near in nearest_ms(prior, model, m, 2) for p in prior_seeds(prior, space, model=model, M=near)]
        if fuse:  # SGLang's own tiles with SiLU fused into the up GEMM (where they fit)
            seeds += [p for p in (dict(s, FUSE_SILU=1) for s in seeds[:2]) if space.is_valid(p)]
        if gemv and m <= 64:  # the small-batch structure, a few tile shapes
            seeds += [
                {
                    "BLOCK_SIZE_M": 16,
                    "BLOCK_SIZE_N": bn,
                    "BLOCK_SIZE_K": bk,
                    "GROUP_SIZE_M": 1,
                    "num_warps": w,
                    "num_stages": 2,
                    "down_BLOCK_SIZE_N": dbn,
                    "down_BLOCK_SIZE_K": dbk,
                    "down_GROUP_SIZE_M": 1,
                    "down_num_warps": w,
                    "down_num_stages": 2,
                    **plain,
                    "GEMV": 1,
                }
                for bn, bk, dbn, dbk, w in ((32, 128, 32, 128, 4), (16 * 2, 256, 64, 128, 8), (64, 64, 32, 256, 8))
            ]
            if m <= 8:  # the down GEMV per pair: top_k times the programs at one token (call Y:
                # at M=1 the up 32x256 w8 / down 64x128 tiles ran 1.16x the GEMM path)
                seeds += [dict(p, GEMV=2) for p in seeds[-3:]]
        seeds = [p for j, p in enumerate(seeds) if p not in seeds[:j]]
        name = f"moe-fp8-{args.fp8}-{model}-M{m}" if args.fp8 else f"moe-{model}-M{m}"
        baselines = {n: Genome.of(shared_params(c)) for n, c in base.items() if c is not None}
        try:
            part, report = search_against(
                space,
                ev,
                store=store,
                name=name,
                seeds=seeds,
                baselines=baselines,
                evaluations=args.budget,
                wall_s=max(20.0, 0.75 * per_job),
            )
        except (EvaluatorError, torch.OutOfMemoryError) as exc:  # one job's failure, not the run's
            doc["skipped"].append(f"{model} M={m}: {str(exc)[:300]}")
            write(out, doc, stem)
            continue
        if part is None:
            doc["skipped"].append(f"{model} M={m}: no candidate passed ({report.statuses})")
            write(out, doc, stem)
            continue
        params = part["winner"]
        up, down = split_config(params)
        structure = {k: int(params[k]) for k in ("GEMV", "FUSE_SILU") if params.get(k)}
        row = {
            "model": model,
            "E": E,
            "N": N,
            "H": int(shape["H"]),
            "topk": int(shape["topk"]),
            "M": m,
            **part,
            "winner": {"up": up, "down": down, **structure},
            "params": params,
            "winner_short": f"{short(up)} / {short(down)}"
            + {0: "", 1: " gemv", 2: " gemv-pairs"}[structure.get("GEMV", 0)]
            + (" fused-silu" if structure.get("FUSE_SILU") else ""),
            "baseline_configs": base,
            **({"fp8": args.fp8, "baseline_notes": notes} if args.fp8 else {}),
        }
        doc["rows"].append(row)
        write(out, doc, stem)
        if is_cuda(args.device):  # the parent's GPU memory, job by job (call Z4 ran out of it: it must stay flat)
            row["gpu_reserved_gib"] = round(torch.cuda.memory_reserved() / 2**30, 2)
        print(
            json.dumps(
                {
                    k: row.get(k)
                    for k in ("model", "M", "winner_short", "winner_ms", "baselines", "speedup", "gpu_reserved_gib")
                }
            ),
            flush=True,
        )
    write(out, doc, stem)


if __name__ == "__main__":
    main()
