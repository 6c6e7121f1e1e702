"""Which kernels does cuBLAS run for the GEMM grid? (issue 5, a short device probe)

The searches' weakest rows (Qwen3 qkv M=256-2048, Llama qkv M=256-512: 0.86-0.90x cuBLAS)
lose to something in cuBLAS's choice that the template does not have. cuBLAS's Hopper
kernels name their tile, cluster shape and K schedule (e.g. `..._tilesize128x128x64_
cluster2x1x1_..._execute_segment_k_off_...`: `segment_k` is its stream-K), so recording
the names per shape says which. torch.matmul on the problem's own inputs (bf16, B as K x N),
under torch.profiler; the kernels' device times are the profiler's (L2 warm: same inputs).

    python3 benchmarks/cublas_kernels.py --out $OUT/cublas     (on the device; ~15 s)
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

#: (N, K) per model and layer, as examples/problems/gemm_bf16.py defines them
SHAPES = {
    "llama3-8b": {"qkv": (6144, 4096), "o": (4096, 4096), "gate_up": (28672, 4096), "down": (4096, 14336)},
    "qwen3-30b-a3b": {"qkv": (5120, 2048), "o": (2048, 4096)},
}
MS = (16, 64, 256, 512, 2048, 4096, 8192)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=os.environ.get("OUT", "cublas-out"))
    ap.add_argument("--ms", nargs="+", type=int, default=list(MS))
    ap.add_argument("--reps", type=int, default=20)
    args = ap.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)

    import torch

    from evokernel.search_spaces.gemm.cublas import kernel_names

    rows = []
    for model, layers in SHAPES.items():
        for layer, (n, k) in layers.items():
            for m in args.ms:
                times = kernel_names(m, n, k, reps=args.reps)
                row = {
                    "model": model,
                    "layer": layer,
                    "M": m,
                    "N": n,
                    "K": k,
                    "kernels": [{"name": name, "calls": args.reps, "median_us": us} for name, us in times.items()],
                }
                rows.append(row)
                print(
                    f"{model} {layer} M={m}: "
                    + "; ".join(f"{x['name'][:150]} x{x['calls']} {x['median_us']:.1f}us" for x in row["kernels"]),
                    flush=True,
                )
                (out / "cublas_kernels.json").write_text(
                    json.dumps(
                        {
                            "device": torch.cuda.get_device_name(),
                            "torch": torch.__version__,
                            "blas": str(getattr(torch.backends.cuda, "preferred_blas_library", lambda: "?")()),
                            "rows": rows,
                        },
                        indent=1,
                    )
                )


if __name__ == "__main__":
    main()
