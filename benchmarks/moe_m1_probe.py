"""Why the small-batch GEMV path loses at one token (issue 5, a short device probe).

The searches of calls U and W kept the GEMM path at Qwen3-30B-A3B M=1 (0.0485 ms; the eight
experts' weights are 75 MB, 0.017 ms at the H200's copy bandwidth). This times, on the same
inputs and interleaved over rounds, the whole layer through each structure (the GEMM path at
SGLang's shipped M=1 config, with and without FUSE_SILU; GEMV=1 and GEMV=2 at a few tiles)
and the GEMV's up kernel alone, so the time can be split between the up and the down side.

    python3 benchmarks/moe_m1_probe.py --out $OUT/probe      (on the device; about 1-2 minutes)
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=os.environ.get("OUT", "probe-out"))
    ap.add_argument("--ms", nargs="+", type=int, default=[1, 4])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--deadline", type=float, default=150.0)
    ap.add_argument("--model", default="qwen3-30b-a3b", help="a row of search_spaces.moe.MOE_MODELS")
    ap.add_argument(
        "--device", default="cuda", help="cuda, cuda:N, or cpu: Triton's interpreter (TRITON_INTERPRET=1), for tests"
    )
    args = ap.parse_args()
    t0 = time.monotonic()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)

    import torch
    import triton

    from evokernel.judge.device import gpu_name, is_cuda, use_device
    from evokernel.search_spaces.moe import MOE_MODELS
    from evokernel.search_spaces.moe.sglang import default_config, shipped_config
    from evokernel.search_spaces.moe.template import _gemv_up_kernel, fused_moe

    shape = MOE_MODELS[args.model]
    E, H, inter, k = shape["E"], shape["H"], shape["I"], shape["topk"]
    dev = use_device(args.device, f"--device {args.device}")
    dtype = torch.bfloat16 if is_cuda(dev) else torch.float16  # the interpreter cannot do bf16 dots
    gpu = gpu_name(dev) or "cpu"
    g = torch.Generator(device=dev).manual_seed(0)
    w1 = (torch.randn(E, 2 * inter, H, generator=g, device=dev) / H**0.5).to(dtype)
    w2 = (torch.randn(E, H, inter, generator=g, device=dev) / inter**0.5).to(dtype)

    def bench(fn) -> float:
        if dev == "cuda":
            from triton.testing import do_bench_cudagraph

            # replayed from a CUDA graph: the layer's few launches cost their GPU time only, as
            # in the searches' harness and in SGLang's decode graphs (plain do_bench read the
            # GEMM path at 0.167 ms here: ~6 launches of host time)
            return float(do_bench_cudagraph(fn, rep=30, return_mode="median"))
        times = []
        for _ in range(2):
            t = time.perf_counter()
            fn()
            times.append(1e3 * (time.perf_counter() - t))
        return min(times)

    rows = []
    for m in args.ms:
        x = torch.randn(m, H, generator=g, device=dev).to(dtype)
        weights, ids = torch.topk(torch.softmax(torch.randn(m, E, generator=g, device=dev), -1), k, dim=-1)
        ids = ids.to(torch.int32)
        shipped = shipped_config(E, inter, m, gpu) or default_config(m, E)
        ship = {
            key: shipped[key]
            for key in ("BLOCK_SIZE_M", "BLOCK_SIZE_N", "BLOCK_SIZE_K", "GROUP_SIZE_M", "num_warps", "num_stages")
        }
        variants = {
            "gemm shipped": dict(up=ship, down=ship),
            "gemm shipped fused-silu": dict(up=ship, down=ship, fuse_silu=True),
        }
        for bn, bk, w, dbn, dbk in (
            (32, 128, 4, 32, 128),
            (32, 256, 8, 64, 128),
            (64, 64, 4, 32, 256),
            (32, 64, 4, 32, 64),
            (64, 128, 8, 64, 128),
        ):
            up = {
                "BLOCK_SIZE_M": 16,
                "BLOCK_SIZE_N": bn,
                "BLOCK_SIZE_K": bk,
                "GROUP_SIZE_M": 1,
                "num_warps": w,
                "num_stages": 2,
            }
            down = dict(up, BLOCK_SIZE_N=dbn, BLOCK_SIZE_K=dbk)
            for mode in (1, 2):
                variants[f"gemv{mode} up {bn}x{bk} w{w} / down {dbn}x{dbk}"] = dict(up=up, down=down, gemv=mode)
        ref = fused_moe(x, w1, w2, weights, ids, up=ship, down=ship)

        def up_only(up: dict) -> None:  # the GEMV's up kernel alone (act in fp32, as the path keeps it)
            act = torch.empty((m * k, inter), device=dev, dtype=torch.float32)
            flat = ids.reshape(-1)
            _gemv_up_kernel[(m * k, triton.cdiv(inter, up["BLOCK_SIZE_N"]))](
                x,
                w1,
                act,
                flat,
                H,
                inter,
                x.stride(0),
                w1.stride(0),
                w1.stride(1),
                w1.stride(2),
                act.stride(0),
                TOP_K=k,
                BLOCK_N=up["BLOCK_SIZE_N"],
                BLOCK_K=up["BLOCK_SIZE_K"],
                EVEN_K=H % up["BLOCK_SIZE_K"] == 0,
                num_warps=up["num_warps"],
                num_stages=up["num_stages"],
            )

        timed: dict[str, list[float]] = {}
        errs: dict[str, str] = {}
        fns = {}
        for name, kw in variants.items():
            try:
                got = fused_moe(x, w1, w2, weights, ids, **kw)
                err = (got.float() - ref.float()).abs().max().item()
                if err > 0.05 * ref.float().abs().max().item() + 1e-2:
                    errs[name] = f"wrong: max error {err:.3g}"
                    continue
                fns[name] = lambda kw=kw: fused_moe(x, w1, w2, weights, ids, **kw)
                if kw.get("gemv") == 1:
                    fns[name.replace("gemv1", "up kernel alone,")] = lambda up=kw["up"]: up_only(up)
            except Exception as exc:  # a config this Triton cannot compile is a row, not a crash
                errs[name] = f"{type(exc).__name__}: {str(exc)[:200]}"
        for r in range(args.rounds):
            if time.monotonic() - t0 > args.deadline:
                break
            for name, fn in list(fns.items())[r % max(len(fns), 1) :] + list(fns.items())[: r % max(len(fns), 1)]:
                timed.setdefault(name, []).append(bench(fn))
        floor_ms = len(torch.unique(ids)) * (3 * inter * H) * 2 / 4.3e12 * 1e3
        for name, xs in timed.items():
            xs = sorted(xs)
            rows.append(
                {"M": m, "variant": name, "ms": xs[len(xs) // 2], "rounds": xs, "of_floor": floor_ms / xs[len(xs) // 2]}
            )
        rows += [{"M": m, "variant": n, "error": e} for n, e in errs.items()]
        rows.append({"M": m, "variant": "floor (distinct experts' weights at 4.3 TB/s)", "ms": floor_ms})
        (out / "moe_m1_probe.json").write_text(json.dumps({"device": gpu, "model": args.model, "rows": rows}, indent=1))
    lines = ["| M | variant | ms (median of rounds) | floor / ms |", "|---|---|---|---|"]
    for r in rows:
        if "error" in r:
            lines.append(f"| {r['M']} | {r['variant']} | {r['error']} | |")
        else:
            lines.append(f"| {r['M']} | {r['variant']} | {r['ms']:.4f} | {r.get('of_floor', 1.0):.2f} |")
    (out / "moe_m1_probe.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines), flush=True)


if __name__ == "__main__":
    main()
