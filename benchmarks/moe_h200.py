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
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import math
import os
import sys
import time
from pathlib import Path
from typing import Any

if "--device" in sys.argv and sys.argv[sys.argv.index("--device") + 1] == "cpu":
    # the interpreter cannot do bf16 dots: a CPU run (a check of this script) uses fp16
    os.environ.setdefault("EVOKERNEL_MOE_DTYPE", "float16")

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))
from _common import geomean, pick  # noqa: E402
PROBLEM = ROOT / "examples" / "problems" / "moe_bf16.py"




def write(out: Path, doc: dict[str, Any]) -> None:
    for name in doc["baselines"]:
        doc["geomean"][name] = geomean([r["speedup"].get(name) for r in doc["rows"]])
    (out / "moe.json").write_text(json.dumps(doc, indent=1))
    lines = ["| model | E | N | M | winner (up / down) | winner ms | " +
             " | ".join(f"{b} ms | speedup" for b in doc["baselines"]) + " |",
             "|---" * (6 + 2 * len(doc["baselines"])) + "|"]
    for r in doc["rows"]:
        cells = " | ".join(
            f"{r['baselines'][b]:.4f} | {r['speedup'][b]:.3f}" if r["baselines"].get(b) and r["speedup"].get(b)
            else "- | -" for b in doc["baselines"])
        won = f"{r['winner_ms']:.4f}" if r["winner_ms"] else "failed"
        lines.append(f"| {r['model']} | {r['E']} | {r['N']} | {r['M']} | {r['winner_short']} | {won} | {cells} |")
    cells = ["**geomean**", "", "", "", "", ""]
    for b in doc["baselines"]:
        cells += ["", f"**{doc['geomean'][b]:.3f}**" if doc["geomean"].get(b) else "-"]
    lines.append("| " + " | ".join(cells) + " |")
    (out / "moe.md").write_text("\n".join(lines) + "\n")


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
    ap.add_argument("--device", default="cuda")
    args = ap.parse_args()
    t0 = time.monotonic()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)

    import torch

    from evokernel import Budget, Genome, Search
    from evokernel.evaluators import KernelEvaluator
    from evokernel.search_spaces import moe_space, shared_params
    from evokernel.search_spaces.sglang import default_config, shipped_config
    from evokernel.search_spaces.triton_moe import candidate_source, split_config
    from evokernel.store import SQLiteStore

    device_name = torch.cuda.get_device_name() if args.device == "cuda" else "cpu"
    store = SQLiteStore(out / "moe.db")
    doc: dict[str, Any] = {
        "device": device_name, "date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        "command": " ".join([Path(sys.argv[0]).name, *sys.argv[1:]]), "torch": torch.__version__,
        "baselines": ["sglang_default", "sglang_h200"], "rows": [], "geomean": {}, "skipped": [],
    }
    gemv = not args.no_gemv
    space = moe_space(gemv=gemv)
    jobs = [(model, m) for model in args.models for m in sorted(args.ms)]
    for i, (model, m) in enumerate(jobs):
        left = args.deadline - (time.monotonic() - t0)
        per_job = left / (len(jobs) - i)
        if left < 45:
            doc["skipped"].append(f"{model} M={m}: deadline")
            continue
        os.environ["EVOKERNEL_MOE_MODEL"], os.environ["EVOKERNEL_MOE_M"] = model, str(m)
        ev = KernelEvaluator(PROBLEM, lambda g: candidate_source(g.params), device=args.device)
        shape = ev.problem.shapes[0]
        E, N = int(shape["E"]), int(shape["I"])
        base = {"sglang_default": default_config(m, E), "sglang_h200": shipped_config(E, N, m, device_name)}
        # the search starts from what SGLang would run, so it can only improve on it
        seeds = [dict(shared_params(c), **({"GEMV": 0} if gemv else {})) for c in base.values() if c is not None]
        if gemv and m <= 64:  # the small-batch structure, a few tile shapes
            seeds += [{"BLOCK_SIZE_M": 16, "BLOCK_SIZE_N": bn, "BLOCK_SIZE_K": bk, "GROUP_SIZE_M": 1, "num_warps": w,
                       "num_stages": 2, "down_BLOCK_SIZE_N": dbn, "down_BLOCK_SIZE_K": dbk, "down_GROUP_SIZE_M": 1,
                       "down_num_warps": w, "down_num_stages": 2, "GEMV": 1}
                      for bn, bk, dbn, dbk, w in ((32, 128, 32, 128, 4), (16 * 2, 256, 64, 128, 8), (64, 64, 32, 256, 8))]
        report = Search(space, ev, store=store, name=f"moe-{model}-M{m}", seeds=seeds).run(
            Budget(evaluations=args.budget, wall_s=max(20.0, 0.75 * per_job)), seed=0)
        if report.best is None:
            doc["skipped"].append(f"{model} M={m}: no candidate passed ({report.statuses})")
            write(out, doc)
            continue
        winner, final = pick(ev, report)  # the top elites re-measured together; then, separately, vs baselines
        genomes = [winner] + [Genome.of(shared_params(c)) for c in base.values() if c is not None]
        results = ev.remeasure(genomes, rounds=3)
        lat = [r.latency_ms if r.is_ok else None for r in results]
        names = [n for n, c in base.items() if c is not None]
        up, down = split_config(winner.params)
        row = {
            "model": model, "E": E, "N": N, "H": int(shape["H"]), "topk": int(shape["topk"]), "M": m,
            "winner": {"up": up, "down": down}, "winner_short": f"{short(up)} / {short(down)}" + (" gemv" if winner.params.get("GEMV") else ""),
            "winner_ms": lat[0], "search_ms": report.best.latency_ms, "final_pick": final, "evaluations": report.evaluations,
            "baselines": dict(zip(names, lat[1:])), "baseline_configs": base,
            "speedup": {n: (b / lat[0]) if (b and lat[0]) else None for n, b in zip(names, lat[1:])},
            "errors": [r.error[:200] for r in results if not r.is_ok],
        }
        doc["rows"].append(row)
        write(out, doc)
        print(json.dumps({k: row[k] for k in ("model", "M", "winner_short", "winner_ms", "baselines", "speedup")}),
              flush=True)
    write(out, doc)


if __name__ == "__main__":
    main()
