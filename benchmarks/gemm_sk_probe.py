"""Does the stream-K schedule pay where the tiles leave SMs idle? (issue 5, a short device probe)

Calls Z1 and Z2 measured the template's stream-K schedule 1.2-1.5x *slower* than its plain
persistent schedule at M=256-512, where it should gain up to 132/96 (qkv, M=512: 96 tiles of
128x256 on 132 SMs). This times, on the same inputs and interleaved over rounds with
`triton.testing.do_bench`: cuBLAS, the plain persistent TMA configs the searches kept, and
the same tiles with STREAM_K=1, and records each compiled kernel's registers and spills, so a
slow schedule can be told from a spilling one. Every output is checked against cuBLAS's
(plain tiles read 0.0: bitwise cuBLAS's output, both summing K in order in fp32; split or
stream-K tiles sum in another order and read ~3e-3, calls Z5-Z6).

    python3 benchmarks/gemm_sk_probe.py --out $OUT/sk      (on the device; about a minute)

With `--set tail` it times tiles BN + BN_TAIL wide (96, 160, 192: two accumulators) against
the power-of-two tiles, where those leave a wave partly idle (qkv at M=256-2048); with
`--set wide` the 320-wide tiles (256 + 64) cuBLAS runs at Qwen3's qkv; with `--set coop` the
warp-specialised cooperative kernels (a producer warpgroup, two consumers) cuBLAS runs from
M=2048 up.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from pathlib import Path

#: (M, N, K) of Llama-3-8B's projections where the tiles leave SMs idle
SHAPES = {
    "qkv-512": (512, 6144, 4096),
    "o-512": (512, 4096, 4096),
    "down-512": (512, 4096, 14336),
    "qkv-256": (256, 6144, 4096),
    # Qwen3-30B-A3B's qkv (N=5120, K=2048) where its rows lose most (0.81-0.87x cuBLAS)
    "qwen-qkv-256": (256, 5120, 2048),
    "qwen-qkv-512": (512, 5120, 2048),
    "qwen-qkv-2048": (2048, 5120, 2048),
    # where cuBLAS runs its cooperative kernels (call BB)
    "qkv-2048": (2048, 6144, 4096),
    "o-8192": (8192, 4096, 4096),
    "gate_up-512": (512, 28672, 4096),
    # few tokens: the rows cuBLAS wins with narrow tiles 11-16 stages deep (call BB)
    "o-64": (64, 4096, 4096),
    "qkv-64": (64, 6144, 4096),
    "o-16": (16, 4096, 4096),
    "qwen-o-256": (256, 2048, 4096),
}
BASE = {
    "GROUP_M": 8,
    "SPLIT_K": 1,
    "SPLITK_FIXUP": 0,
    "WARP_SPEC": 0,
    "num_ctas": 1,
    "maxnreg": 0,
    "SWAP_AB": 0,
    "PERSISTENT": 1,
    "TMA": 1,
}
#: name -> config: plain persistent, then the same tile with the stream-K phase
CONFIGS = {
    "128x256 s4 ts2": dict(BASE, BM=128, BN=256, BK=64, num_warps=8, num_stages=4, TMA_STORE=2, STREAM_K=0),
    "128x256 s4 ts2 SK": dict(BASE, BM=128, BN=256, BK=64, num_warps=8, num_stages=4, TMA_STORE=2, STREAM_K=1),
    "128x256 s3 SK": dict(BASE, BM=128, BN=256, BK=64, num_warps=8, num_stages=3, TMA_STORE=0, STREAM_K=1),
    "128x128 s4 ts1": dict(BASE, BM=128, BN=128, BK=64, num_warps=8, num_stages=4, TMA_STORE=1, STREAM_K=0),
    "128x128 s4 ts1 SK": dict(BASE, BM=128, BN=128, BK=64, num_warps=8, num_stages=4, TMA_STORE=1, STREAM_K=1),
    "128x128 s5 SK": dict(BASE, BM=128, BN=128, BK=64, num_warps=8, num_stages=5, TMA_STORE=0, STREAM_K=1),
}


#: --set tail: tiles BN + BN_TAIL wide (two accumulators), against the power-of-two tiles the searches kept
TAIL = {
    "GROUP_M": 8,
    "SPLIT_K": 1,
    "SPLITK_FIXUP": 0,
    "WARP_SPEC": 0,
    "num_ctas": 1,
    "maxnreg": 0,
    "SWAP_AB": 0,
    "TMA": 1,
    "STREAM_K": 0,
}
TAIL_CONFIGS = {
    "128x256 s4 ts2 P": dict(TAIL, BM=128, BN=256, BK=64, num_warps=8, num_stages=4, TMA_STORE=2, PERSISTENT=1),
    "128x128 s4 ts1 P": dict(TAIL, BM=128, BN=128, BK=64, num_warps=8, num_stages=4, TMA_STORE=1, PERSISTENT=1),
    "64x128 s4": dict(TAIL, BM=64, BN=128, BK=64, num_warps=4, num_stages=4, TMA_STORE=0, PERSISTENT=0),
    "128x(128+64) s4": dict(
        TAIL, BM=128, BN=128, BN_TAIL=64, BK=64, num_warps=8, num_stages=4, TMA_STORE=0, PERSISTENT=0
    ),
    "128x(128+64) s4 ts1": dict(
        TAIL, BM=128, BN=128, BN_TAIL=64, BK=64, num_warps=8, num_stages=4, TMA_STORE=1, PERSISTENT=0
    ),
    "128x(128+32) s4 ts1": dict(
        TAIL, BM=128, BN=128, BN_TAIL=32, BK=64, num_warps=8, num_stages=4, TMA_STORE=1, PERSISTENT=0
    ),
    "128x(128+32) s4 ts1 P": dict(
        TAIL, BM=128, BN=128, BN_TAIL=32, BK=64, num_warps=8, num_stages=4, TMA_STORE=1, PERSISTENT=1
    ),
    "64x(128+64) s4 ts1": dict(
        TAIL, BM=64, BN=128, BN_TAIL=64, BK=64, num_warps=4, num_stages=4, TMA_STORE=1, PERSISTENT=0
    ),
    "64x(128+32) s4 ts1": dict(
        TAIL, BM=64, BN=128, BN_TAIL=32, BK=64, num_warps=4, num_stages=4, TMA_STORE=1, PERSISTENT=0
    ),
    "128x(64+32) s4 ts1": dict(
        TAIL, BM=128, BN=64, BN_TAIL=32, BK=64, num_warps=4, num_stages=4, TMA_STORE=1, PERSISTENT=0
    ),
    # the same widths as 64-wide MMAs sharing A in registers (A_REG)
    "128x(128+64) s4 ts1 areg": dict(
        TAIL, BM=128, BN=128, BN_TAIL=64, BK=64, num_warps=8, num_stages=4, TMA_STORE=1, PERSISTENT=0, A_REG=1
    ),
    "64x(128+64) s4 ts1 areg": dict(
        TAIL, BM=64, BN=128, BN_TAIL=64, BK=64, num_warps=4, num_stages=4, TMA_STORE=1, PERSISTENT=0, A_REG=1
    ),
    "128x256 s4 ts1 P areg": dict(
        TAIL, BM=128, BN=256, BK=64, num_warps=8, num_stages=3, TMA_STORE=1, PERSISTENT=1, A_REG=1
    ),
    "128x256 s3 ts1 areg": dict(
        TAIL, BM=128, BN=256, BK=64, num_warps=8, num_stages=3, TMA_STORE=1, PERSISTENT=0, A_REG=1
    ),
    "128x(128+64) s4 ts1 P areg": dict(
        TAIL, BM=128, BN=128, BN_TAIL=64, BK=64, num_warps=8, num_stages=4, TMA_STORE=1, PERSISTENT=1, A_REG=1
    ),
    # Qwen3's K=2048: half the K steps (BK=128), so the prologue and epilogue weigh less
    "128x128 k128 s3 ts1 P": dict(TAIL, BM=128, BN=128, BK=128, num_warps=8, num_stages=3, TMA_STORE=1, PERSISTENT=1),
    "128x128 k128 s3 ts1": dict(TAIL, BM=128, BN=128, BK=128, num_warps=8, num_stages=3, TMA_STORE=1, PERSISTENT=0),
    "128x(128+64) k128 s2 ts1": dict(
        TAIL, BM=128, BN=128, BN_TAIL=64, BK=128, num_warps=8, num_stages=2, TMA_STORE=1, PERSISTENT=0
    ),
}

#: --set wide: 320-wide tiles (256 + a 64 tail), cuBLAS's own at Qwen3's qkv (call BB: 320x64
#: at M=512, 320x128 at M=2048-8192, 160x64 at M=256, in our M x N terms 64x320, 128x320,
#: 64x160), against the tiles the searches kept there
WIDE_CONFIGS = {
    "128x(128+64) s4 ts2": dict(
        TAIL, BM=128, BN=128, BN_TAIL=64, BK=64, num_warps=8, num_stages=4, TMA_STORE=2, PERSISTENT=0
    ),
    "128x128 s4 ts1 P": TAIL_CONFIGS["128x128 s4 ts1 P"],
    "64x128 s4 ts1": dict(TAIL, BM=64, BN=128, BK=64, num_warps=4, num_stages=4, TMA_STORE=1, PERSISTENT=0),
    "64x(128+64) s4 ts1": TAIL_CONFIGS["64x(128+64) s4 ts1"],
    "64x(128+32) s5 ts1": dict(
        TAIL, BM=64, BN=128, BN_TAIL=32, BK=64, num_warps=4, num_stages=5, TMA_STORE=1, PERSISTENT=0
    ),
    "64x(128+64) s5 ts1": dict(
        TAIL, BM=64, BN=128, BN_TAIL=64, BK=64, num_warps=4, num_stages=5, TMA_STORE=1, PERSISTENT=0
    ),
    "64x(256+64) s4 ts2": dict(
        TAIL, BM=64, BN=256, BN_TAIL=64, BK=64, num_warps=4, num_stages=4, TMA_STORE=2, PERSISTENT=0
    ),
    "64x(256+64) s4": dict(
        TAIL, BM=64, BN=256, BN_TAIL=64, BK=64, num_warps=4, num_stages=4, TMA_STORE=0, PERSISTENT=0
    ),
    "64x(256+64) s3 ts1": dict(
        TAIL, BM=64, BN=256, BN_TAIL=64, BK=64, num_warps=4, num_stages=3, TMA_STORE=1, PERSISTENT=0
    ),
    "128x(256+64) s4 P": dict(
        TAIL, BM=128, BN=256, BN_TAIL=64, BK=64, num_warps=8, num_stages=4, TMA_STORE=0, PERSISTENT=1
    ),
    "128x(256+64) s3 P ts2": dict(
        TAIL, BM=128, BN=256, BN_TAIL=64, BK=64, num_warps=8, num_stages=3, TMA_STORE=2, PERSISTENT=1
    ),
    "128x(256+64) s4": dict(
        TAIL, BM=128, BN=256, BN_TAIL=64, BK=64, num_warps=8, num_stages=4, TMA_STORE=0, PERSISTENT=0
    ),
    "128x(256+64) s3 ts2": dict(
        TAIL, BM=128, BN=256, BN_TAIL=64, BK=64, num_warps=8, num_stages=3, TMA_STORE=2, PERSISTENT=0
    ),
}

#: --set coop: the warp-specialised ("cooperative") kernel, a producer warpgroup and two
#: consumer warpgroups of BM/2 rows (Triton 3.6 builds it only from a non-persistent 4-warp
#: kernel; the searches' "ws" winners had 8 warps and compiled as if without), as cuBLAS runs
#: at every row from M=2048 up and at Llama's qkv M=512 (call BB), against the searches' tiles
COOP = dict(TAIL, PERSISTENT=0, TMA_STORE=0, WARP_SPEC=1, num_warps=4, BK=64)
GLUON_BASE = dict(TAIL, BK=64, GROUP_M=8, GLUON=1)
COOP_CONFIGS = {
    "128x256 s4 ts2 P": TAIL_CONFIGS["128x256 s4 ts2 P"],
    "128x256 s4 coop": dict(COOP, BM=128, BN=256, num_stages=4),
    "128x256 s3 coop": dict(COOP, BM=128, BN=256, num_stages=3),
    "256x128 s4 coop": dict(COOP, BM=256, BN=128, num_stages=4),
    "128x(256+64) s3 coop": dict(COOP, BM=128, BN=256, BN_TAIL=64, num_stages=3),
    "128x(128+64) s4 ts1": TAIL_CONFIGS["128x(128+64) s4 ts1"],
    "64x(128+64) s5 ts1": WIDE_CONFIGS["64x(128+64) s5 ts1"],
    "128x(128+64) s5 coop": dict(COOP, BM=128, BN=128, BN_TAIL=64, num_stages=5),
    "128x(128+64) s4 coop": dict(COOP, BM=128, BN=128, BN_TAIL=64, num_stages=4),
    "128x128 s6 coop": dict(COOP, BM=128, BN=128, num_stages=6),
    "128x128 s4 ts1 P": TAIL_CONFIGS["128x128 s4 ts1 P"],
    # the Gluon kernel (search_spaces/gemm/template_gluon.py): a TMA producer warp, one consumer
    # warpgroup per 64 rows keeping one MMA in flight, C by TMA (whole: ts1, halves: ts2)
    "128x256 s4 P ts2 gluon": dict(GLUON_BASE, BM=128, BN=256, num_warps=8, num_stages=4, TMA_STORE=2, PERSISTENT=1),
    "128x256 s4 ts2 gluon": dict(GLUON_BASE, BM=128, BN=256, num_warps=8, num_stages=4, TMA_STORE=2, PERSISTENT=0),
    "128x256 s3 P ts1 gluon": dict(GLUON_BASE, BM=128, BN=256, num_warps=8, num_stages=3, TMA_STORE=1, PERSISTENT=1),
    "256x128 s4 P ts2 gluon": dict(GLUON_BASE, BM=256, BN=128, num_warps=8, num_stages=4, TMA_STORE=2, PERSISTENT=1),
    "128x128 s6 P ts1 gluon": dict(GLUON_BASE, BM=128, BN=128, num_warps=8, num_stages=6, TMA_STORE=1, PERSISTENT=1),
    "64x256 s5 ts2 gluon": dict(GLUON_BASE, BM=64, BN=256, num_warps=4, num_stages=5, TMA_STORE=2, PERSISTENT=0),
    "64x128 s8 ts1 gluon": dict(GLUON_BASE, BM=64, BN=128, num_warps=4, num_stages=8, TMA_STORE=1, PERSISTENT=0),
    # its ping-pong form (GLUON=2): two 4-warp consumers taking turns at whole tiles
    "128x128 s4 P ts1 gluon-pingpong": dict(
        GLUON_BASE, BM=128, BN=128, num_warps=4, num_stages=4, TMA_STORE=1, PERSISTENT=1, GLUON=2
    ),
    "128x128 s5 P ts2 gluon-pingpong": dict(
        GLUON_BASE, BM=128, BN=128, num_warps=4, num_stages=5, TMA_STORE=2, PERSISTENT=1, GLUON=2
    ),
    "64x256 s4 P ts1 gluon-pingpong": dict(
        GLUON_BASE, BM=64, BN=256, num_warps=4, num_stages=4, TMA_STORE=1, PERSISTENT=1, GLUON=2
    ),
}

#: --set small: few tokens, where cuBLAS runs 64x16-64x64 tiles (its rows x columns: the
#: weights x the tokens) 11-16 stages deep (call BB): the searches' winners there, the
#: template's deep narrow tiles, and the Gluon kernel's (swap-AB: the tokens as the MMA's
#: narrow side)
SMALL = dict(TAIL, BK=64, TMA=1, PERSISTENT=0, SWAP_AB=0, GLUON=0)
SMALL_CONFIGS = {
    "64x64x128 s5 splitk2 (o-64 winner)": dict(
        SMALL, BM=64, BN=64, BK=128, num_warps=4, num_stages=5, SPLIT_K=2, TMA=0, GROUP_M=1, maxnreg=232, TMA_STORE=0
    ),
    "64x128x128 s4 splitk2 fixup (qwen-o-256 winner)": dict(
        SMALL, BM=64, BN=128, BK=128, num_warps=4, num_stages=4, SPLIT_K=2, SPLITK_FIXUP=1, maxnreg=232, TMA_STORE=0
    ),
    "64x64 s13 ts1": dict(SMALL, BM=64, BN=64, num_warps=4, num_stages=13, TMA_STORE=1),
    "64x32 s16 ts1": dict(SMALL, BM=64, BN=32, num_warps=4, num_stages=16, TMA_STORE=1),
    "32x64 s16 swap ts1": dict(SMALL, BM=32, BN=64, num_warps=4, num_stages=16, TMA_STORE=1, SWAP_AB=1),
    "64x64 s13 ts1 gluon": dict(SMALL, BM=64, BN=64, num_warps=4, num_stages=13, TMA_STORE=1, GLUON=1),
    "64x128 s8 ts1 gluon": dict(SMALL, BM=64, BN=128, num_warps=4, num_stages=8, TMA_STORE=1, GLUON=1),
    "32x64 s16 swap gluon": dict(SMALL, BM=32, BN=64, num_warps=4, num_stages=16, TMA_STORE=1, SWAP_AB=1, GLUON=1),
    "16x64 s16 swap gluon": dict(SMALL, BM=16, BN=64, num_warps=4, num_stages=16, TMA_STORE=1, SWAP_AB=1, GLUON=1),
    "32x128 s8 swap gluon": dict(SMALL, BM=32, BN=128, num_warps=8, num_stages=8, TMA_STORE=1, SWAP_AB=1, GLUON=1),
    "64x64 s13 P ts1 gluon": dict(SMALL, BM=64, BN=64, num_warps=4, num_stages=13, TMA_STORE=1, GLUON=1, PERSISTENT=1),
}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=os.environ.get("OUT", "sk-out"))
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--deadline", type=float, default=90.0)
    ap.add_argument("--shapes", nargs="+", default=list(SHAPES), choices=list(SHAPES))
    ap.add_argument(
        "--timing",
        choices=["graph", "plain", "gate"],
        default="graph",
        help="graph: CUDA-graph replays of one input set, L2 warm (default); plain: do_bench (host "
        "time included); gate: the gate's own harness (evokernel.judge.timing.time_cuda: 4 input sets "
        "rotated, L2 flushed before each call), which ranks tiles as the searches do",
    )
    ap.add_argument("--no-graph", dest="timing", action="store_const", const="plain", help="the same as --timing plain")
    ap.add_argument(
        "--set",
        choices=["streamk", "tail", "wide", "coop", "small"],
        default="streamk",
        help="the stream-K configs (default), the tiles with a BN tail, the 320-wide tiles, the "
        "warp-specialised cooperative kernels, or the narrow deep tiles for few tokens",
    )
    ap.add_argument(
        "--exclude",
        nargs="*",
        default=[],
        help="leave out the configs whose names contain any of these (e.g. gluon, after its GPU tests "
        "failed: a kernel that hangs would take the probe with it)",
    )
    args = ap.parse_args()
    configs = {"tail": TAIL_CONFIGS, "wide": WIDE_CONFIGS, "coop": COOP_CONFIGS, "small": SMALL_CONFIGS}.get(
        args.set, CONFIGS
    )
    configs = {name: cfg for name, cfg in configs.items() if not any(x in name for x in args.exclude)}
    t0 = time.monotonic()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)

    import torch
    import triton

    from evokernel.judge.timing import time_cuda
    from evokernel.search_spaces.gemm.template import gemm, last_compiled

    watched = {
        "torch.cuda.Event": torch.cuda.Event,
        "torch.cuda.synchronize": torch.cuda.synchronize,
        "time.perf_counter": time.perf_counter,
    }

    rows: list[dict] = []
    for shape in args.shapes:
        m, n, k = SHAPES[shape]
        if time.monotonic() - t0 > args.deadline:
            break
        torch.manual_seed(0)
        a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
        b = torch.randn(k, n, device="cuda", dtype=torch.bfloat16) / k**0.5
        ref = a @ b
        # the gate's timing rotates input sets: three more of the same shape
        sets = (
            [(a, b)] + [(torch.randn_like(a), torch.randn_like(b) / k**0.5) for _ in range(3)]
            if args.timing == "gate"
            else [(a, b)]
        )
        fns = {"cublas": [lambda x=x, y=y: torch.matmul(x, y) for x, y in sets]}
        info: dict[str, dict] = {"cublas": {}}
        for name, cfg in configs.items():
            try:
                c = gemm(a, b, **cfg)
                torch.cuda.synchronize()
                err = ((c.float() - ref.float()).abs().max() / ref.float().abs().max()).item()
                last = last_compiled()
                info[name] = {
                    "err": err,
                    "n_regs": getattr(last, "n_regs", None),
                    "n_spills": getattr(last, "n_spills", None),
                }
                fns[name] = [lambda cfg=cfg, x=x, y=y: gemm(x, y, **cfg) for x, y in sets]
            except Exception as e:  # a failure is a row, not the end of the probe
                info[name] = {"error": f"{type(e).__name__}: {str(e)[:200]}"}
        times: dict[str, list[float]] = {name: [] for name in fns}
        for _ in range(args.rounds):
            for name, fn in fns.items():
                if args.timing == "gate":  # call BE: warm-L2 replays and the gate ranked two tiles oppositely
                    samples, _, _ = time_cuda(fn, watched=watched, max_s=0.5)
                    times[name].append(statistics.median(samples))
                elif args.timing == "graph":
                    # replayed from a CUDA graph: the wrapper's host work (descriptors, workspace)
                    # is not the kernel's time (call Z5's plain do_bench read 0.06-0.14 ms for a
                    # 0.048 ms kernel: host-bound, and noisy where cuBLAS was not)
                    times[name].append(triton.testing.do_bench_cudagraph(fn[0], rep=20))
                else:
                    times[name].append(triton.testing.do_bench(fn[0], warmup=5, rep=20))
        cublas = statistics.median(times["cublas"])
        for name in fns:
            ms = statistics.median(times[name])
            rows.append(
                {
                    "shape": shape,
                    "config": name,
                    "ms": ms,
                    "vs_cublas": cublas / ms,
                    "spread": [min(times[name]), max(times[name])],
                    **info[name],
                }
            )
        rows += [{"shape": shape, "config": name, **v} for name, v in info.items() if "error" in v]
        (out / f"{args.set}_probe.json").write_text(json.dumps({"timing": args.timing, "rows": rows}, indent=1))
        print(
            f"{shape}: "
            + ", ".join(
                f"{r['config']} {r['ms']:.4f} ({r['vs_cublas']:.3f})" for r in rows if r["shape"] == shape and "ms" in r
            ),
            flush=True,
        )
    lines = ["| shape | config | ms | vs cuBLAS | regs | spills | max rel err |", "|---|---|---|---|---|---|---|"]
    for r in rows:
        if "ms" in r:
            lines.append(
                f"| {r['shape']} | {r['config']} | {r['ms']:.4f} | {r['vs_cublas']:.3f} | {r.get('n_regs')} | "
                f"{r.get('n_spills')} | {r.get('err', 0):.1e} |"
            )
        else:
            lines.append(f"| {r['shape']} | {r['config']} | {r['error']} | | | | |")
    (out / f"{args.set}_probe.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
