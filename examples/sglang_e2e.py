"""An A/B of an evokernel package against the unpatched SGLang engine, through the library's
SGLang evaluator (`evokernel.evaluators.sglang`).

    evokernel export sglang-plugin moe-out/moe.db --out pkg      # e.g. after examples/moe_search.py
    python examples/sglang_e2e.py --model /path/to/model --package pkg [--batch-sizes 1 16 64] [--repeats 3]

SGLang engines side by side (`SGLangEvaluator.compare`): the unpatched engine, a second one as
the A/A control (what noise alone reads), and one with the package applied; each warmed, then
decode at each batch size and prefill at --prefill tokens in interleaved rounds, numerics
checked against the unpatched engine. Prints the A/B table (`ab_markdown`) and writes it with
its JSON under --out. Needs a CUDA GPU and SGLang (`pip install 'evokernel-search[sglang]'`); the model
folder may hold dummy weights (`--load-format dummy`). (`benchmarks/sglang_e2e_h200.py` runs
the whole chain for the benchmark record: MoE searches, promotion of the batch sizes whose
winner beat SGLang's shipped config, two packages exported, and request traces replayed
through launched servers.)
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import sys
from pathlib import Path


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", help="model folder (config.json + tokenizer; dummy weights)")
    ap.add_argument("--package", help="an `evokernel export sglang-plugin` folder")
    ap.add_argument("--batch-sizes", nargs="+", type=int, default=[1, 16, 64])
    ap.add_argument("--prefill", nargs="+", type=int, default=[512])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--mem", type=float, default=0.15, help="--mem-fraction-static of each engine")
    ap.add_argument("--out", default="e2e-out")
    args = ap.parse_args()
    import torch

    missing = [
        what
        for what, ok in (
            ("a CUDA GPU", torch.cuda.is_available()),
            ("SGLang (pip install 'evokernel-search[sglang]')", importlib.util.find_spec("sglang")),
        )
        if not ok
    ]
    if missing:
        print(f"examples/sglang_e2e.py needs {' and '.join(missing)}; nothing was run", file=sys.stderr)
        return 2
    if not args.model or not args.package or not Path(args.package).is_dir():
        ap.error("--model FOLDER and --package FOLDER (one written by `evokernel export sglang-plugin`) are needed")
    from evokernel.evaluators.sglang import SGLangEvaluator, ab_markdown

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    # the server arguments benchmarks/sglang_e2e_h200.py runs on the H200 (Triton backends, dummy weights)
    server = ["--model-path", args.model, "--load-format", "dummy", "--tp-size", "1"]
    server += ["--attention-backend", "triton", "--sampling-backend", "pytorch", "--moe-runner-backend", "triton"]
    server += ["--grammar-backend", "none", "--disable-flashinfer-autotune", "--cuda-graph-backend-prefill", "disabled"]
    server += ["--mem-fraction-static", str(args.mem)]
    ev = SGLangEvaluator(
        server, batch_sizes=args.batch_sizes, prefill_lens=args.prefill, repeats=args.repeats, log_dir=out / "logs"
    )
    doc = ev.compare({"evokernel": Path(args.package)}).to_json()
    lines = ab_markdown(doc)
    (out / "sglang_e2e.json").write_text(json.dumps(doc, indent=1))
    (out / "sglang_e2e.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 1 if doc["errors"] or not all(v.get("ok") for v in doc["numerics"].values()) else 0


if __name__ == "__main__":
    sys.exit(main())
