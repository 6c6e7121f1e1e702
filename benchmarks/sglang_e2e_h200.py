"""End to end through SGLang on the GPU (issue 8): search, promote, export, A/B.

1. Fused-MoE searches for the model's MoE shape at the decode batch sizes (`moe_h200.py`,
   seeded with SGLang's default and shipped configs; micro-benchmark stage).
2. Promotion: a batch size's winner goes on to the end-to-end stage only if it beat
   SGLang's shipped config by at least --promote (re-measured together, interleaved);
   the others keep SGLang's config. The thresholds and what was promoted are recorded.
3. Export: `evokernel export sglang-plugin` semantics, twice: the promoted configs for
   SGLang's own kernel (`configs`), and those plus evokernel's fused-MoE kernel (`kernel`).
4. SGLang engines side by side (shipped, configs, kernel), warmed, interleaved rounds:
   decode at each batch size and prefill at each length; numerics against shipped.

Writes under --out: `sglang_e2e.json` (top-level `geomean.sglang_shipped`: variant ->
geometric-mean decode-throughput ratio over shipped), `sglang_e2e.md`, `moe.json`.

    bash benchmarks/device.sh sglang      # sets up SGLang (carry .sgl) and runs this
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT / "benchmarks") not in sys.path:  # its sibling modules (run as a script, it is already there)
    sys.path.insert(0, str(ROOT / "benchmarks"))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default=os.environ.get("OUT", "e2e-out"))
    ap.add_argument("--model", required=True, help="model folder (config.json + tokenizer; dummy weights)")
    ap.add_argument("--moe-model", default="qwen3-30b-a3b", help="the MoE problem's model with this MoE shape")
    ap.add_argument("--ms", nargs="+", type=int, default=[1, 16, 64, 256])
    ap.add_argument("--budget", type=int, default=12)
    ap.add_argument("--search-deadline", type=float, default=170.0)
    ap.add_argument("--promote", type=float, default=0.01, help="minimum micro-benchmark gain over shipped")
    ap.add_argument("--batch-sizes", nargs="+", type=int, default=[1, 16, 64, 256])
    ap.add_argument("--prefill", nargs="+", type=int, default=[512, 2048])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--mem", type=float, default=0.15, help="--mem-fraction-static of each engine")
    ap.add_argument(
        "--serving",
        default=None,
        metavar="TRACE",
        help="also replay this request trace (JSONL/CSV) through launched servers, one per variant",
    )
    ap.add_argument("--serving-prompts", type=int, default=100)
    ap.add_argument("--skip-one-batch", action="store_true", help="only the serving comparison")
    ap.add_argument("--deadline", type=float, default=540.0)
    args = ap.parse_args()
    t0 = time.monotonic()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    work = Path("/tmp/evokernel-e2e")
    work.mkdir(parents=True, exist_ok=True)

    # 1. micro-benchmark stage
    moe_out = work / "moe"
    subprocess.run(
        [
            sys.executable,
            str(ROOT / "benchmarks" / "moe_h200.py"),
            "--out",
            str(moe_out),
            "--models",
            args.moe_model,
            "--ms",
            *map(str, args.ms),
            "--budget",
            str(args.budget),
            "--deadline",
            str(args.search_deadline),
        ],
        check=False,
    )
    moe = json.loads((moe_out / "moe.json").read_text()) if (moe_out / "moe.json").exists() else {"rows": []}
    (out / "moe.json").write_text(json.dumps(moe, indent=1))

    import torch
    import triton

    from evokernel.evaluators.sglang import SGLangEvaluator, ab_markdown
    from evokernel.integrations.sglang.export import sglang_plugin_package
    from evokernel.store import SQLiteStore

    # 2. promotion: only batch sizes whose winner beat shipped by --promote in the micro A/B
    from promotion_cascade import Promotion, record

    store = SQLiteStore(moe_out / "moe.db")
    runs = {r.name: r.id for r in store.runs()}
    rows = [
        {
            "run": runs.get(f"moe-{args.moe_model}-M{r['M']}"),
            "M": r["M"],
            "what": r.get("winner_short", ""),
            "gain": (r.get("speedup") or {}).get("sglang_h200"),
        }
        for r in moe["rows"]
    ]
    rule = Promotion(min_gain=args.promote, max_promoted=len(rows))
    chosen = rule.select(rows)
    record(store, rows, rule, chosen, baseline="sglang_h200")
    promoted = sorted(r["M"] for r in chosen)
    cascade = {
        "rule": {"min_gain": rule.min_gain, "max_promoted": rule.max_promoted, "stage": rule.stage},
        "micro": {r["M"]: r["gain"] for r in rows},
        "promoted": promoted,
    }
    print(json.dumps({"cascade": cascade}), flush=True)

    # 3. export the promoted runs only (a copy of the store holding just those runs' elites)
    keep = {f"moe-{args.moe_model}-M{m}" for m in promoted}
    packages = {}
    for name, kernel in (("evokernel_configs", False), ("evokernel_kernel", True)):
        folder = work / name
        try:
            sglang_plugin_package(
                _Only(store, keep),
                folder,
                device_name=torch.cuda.get_device_name(),
                triton_version=triton.__version__,
                kernel=kernel,
            )
            packages[name] = folder
        except Exception as exc:  # nothing promoted: the variant is the shipped engine itself
            print(f"{name}: not exported ({type(exc).__name__}: {exc})", flush=True)

    # 4. end to end
    argv = [
        "--model-path",
        args.model,
        "--load-format",
        "dummy",
        "--tp-size",
        "1",
        "--attention-backend",
        "triton",
        "--sampling-backend",
        "pytorch",
        "--moe-runner-backend",
        "triton",
        "--grammar-backend",
        "none",
        "--disable-flashinfer-autotune",
        "--cuda-graph-backend-prefill",
        "disabled",
        "--mem-fraction-static",
        str(args.mem),
    ]
    if args.serving:
        from evokernel.evaluators.sglang_serving import ServingComparison
        from evokernel.model.workload import Trace

        serving = ServingComparison(
            argv,
            Trace.load(args.serving),
            rounds=2,
            num_prompts=args.serving_prompts,
            log_dir=work / "serving",
            mem=args.mem,
        )
        sdoc = serving.compare(packages)
        (out / "sglang_serving.json").write_text(json.dumps(sdoc, indent=1))
        print(json.dumps({"serving": sdoc.get("vs_baseline"), "errors": sdoc.get("errors")}), flush=True)
        if args.skip_one_batch:
            return
    left = args.deadline - (time.monotonic() - t0)
    ev = SGLangEvaluator(
        argv,
        batch_sizes=args.batch_sizes,
        prefill_lens=args.prefill,
        repeats=args.repeats,
        log_dir=work / "logs",
        load_timeout_s=max(60.0, left - 120),
        run_timeout_s=120,
    )
    report = ev.compare(packages)
    doc = report.to_json()
    doc.update(
        {
            "device": torch.cuda.get_device_name(),
            "triton": triton.__version__,
            "cascade": cascade,
            "command": " ".join([Path(sys.argv[0]).name, *sys.argv[1:]]),
            "packages": {k: str(v) for k, v in packages.items()},
        }
    )
    (out / "sglang_e2e.json").write_text(json.dumps(doc, indent=1))
    lines = ab_markdown(doc)
    (out / "sglang_e2e.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines), flush=True)
    for name in doc["errors"]:
        log = work / "logs" / f"{name}.log"
        if log.exists():
            print(f"---- {name}.log (tail) ----\n" + log.read_text()[-3000:], flush=True)


class _Only:
    """The store, seen through the runs named in `keep` (the promoted ones)."""

    def __init__(self, store, keep: set[str]) -> None:
        self.store, self.keep = store, keep
        self.path = getattr(store, "path", "")

    def runs(self):
        return [r for r in self.store.runs() if getattr(r, "name", None) in self.keep]

    def __getattr__(self, name):
        return getattr(self.store, name)


if __name__ == "__main__":
    main()
