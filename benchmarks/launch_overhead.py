"""Host time per eager call of the GEMM winners: the old launch path against the compiled-handle
launcher, against torch.matmul (issue "One footing for every figure").

For every row of a GEMM results file (`benchmarks/results/gemm.json`: model, layer, M, N, K
and `winner`, the template's genes), on bf16 inputs of that shape:

- `matmul`: torch.matmul(a, b) (cuBLAS);
- `gemm`: the old path, `gemm(a, b, **winner)` (every call checks everything and launches
  through Triton's JIT: its binder, specialisation and cache key);
- `launcher`: `GemmLauncher(winner)(a, b)` (planned once per input signature, then launched
  through the compiled kernel's handle, `evokernel/runtime/launch.py`).

Host time per call: after a warm-up (the compile) and a synchronize, `n` calls back to back
without synchronising inside the loop, the wall time over n (the time the Python thread
spends per call: what an eager caller pays whenever the GPU keeps up). `reps` rounds, each
timing one loop of every path, the order rotated round by round; each path's median over the
rounds, and launcher - matmul as the median of the rounds' differences (paired: a host that
slows down for a while slows both). `eager_us`: the same loop's time per call up to the synchronize after it (max of
host and GPU time: what an eager `do_bench` reads). Per row also: whether the launcher's C
is gemm's bitwise, the launcher's JIT and direct launch counts, and the first call's time (the compile). The
target: launcher host time <= matmul's + 10 us at every row.

The winners are compiled first, in --precompile processes at once, into Triton's on-disk
cache (the measuring process then loads each kernel: `compile_s` in the table is that load).
Each row gets fresh inputs and a fresh launcher (nothing shared between rows but Triton's
compiled-kernel cache, which is keyed by all the kernel specialises on). Rows are written to
`launch_overhead.json` and `launch_overhead.md` under --out as they are measured, so a killed
run leaves the rows it finished; rows that would start past --deadline are listed as
skipped.

    source benchmarks/device_setup.sh
    python3 benchmarks/launch_overhead.py --out $OUT/launch --deadline 240
    python3 benchmarks/launch_overhead.py --out /tmp/lo --rows llama3-8b:qkv:16 llama3-8b:o:16 --n 500

A CPU check of the script (Triton's interpreter, fp16, shapes clipped):
    TRITON_INTERPRET=1 python3 benchmarks/launch_overhead.py --device cpu --clip 64 --n 2 --reps 1 \\
        --max-rows 2 --out /tmp/lo
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import statistics
import sys
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results" / "gemm.json"
TARGET_US = 10.0  # the launcher's host time may exceed torch.matmul's by this much


def host_times(
    paths: dict[str, Callable[[], Any]], sync: Callable[[], None], *, n: int, reps: int
) -> dict[str, tuple[list[float], list[float]]]:
    """Per path, (host us per call, eager us per call) of each of `reps` rounds; a round times
    one loop of `n` calls of every path, the paths in an order rotated round by round (paths
    compared under the same load, the host's drift shared between them)."""
    names = list(paths)
    times: dict[str, tuple[list[float], list[float]]] = {name: ([], []) for name in names}
    for r in range(reps):
        for name in names[r % len(names) :] + names[: r % len(names)]:
            fn = paths[name]
            sync()
            t0 = time.perf_counter()
            for _ in range(n):
                fn()
            t1 = time.perf_counter()
            sync()
            t2 = time.perf_counter()
            times[name][0].append((t1 - t0) / n * 1e6)
            times[name][1].append((t2 - t0) / n * 1e6)
    return times


def _short(w: dict[str, int]) -> str:
    s = (
        f"{w['BM']}x{w['BN']}{'+' + str(w['BN_TAIL']) if w.get('BN_TAIL') else ''}x{w['BK']} w{w['num_warps']}"
        f" s{w['num_stages']}"
    )
    genes = (
        "SPLIT_K",
        "SPLITK_FIXUP",
        "PERSISTENT",
        "TMA",
        "TMA_STORE",
        "SWAP_AB",
        "STREAM_K",
        "GLUON",
        "WARP_SPEC",
        "maxnreg",
        "A_REG",
    )
    extra = [f"{k}={v}" for k, v in sorted(w.items()) if k in genes and v and not (k == "SPLIT_K" and v == 1)]
    return " ".join([s, *extra])


def measure_row(row: dict[str, Any], args: argparse.Namespace) -> dict[str, Any]:
    """One row: inputs, the three paths' host times, the bitwise check."""
    import torch

    from evokernel.search_spaces.gemm.template import GemmLauncher, gemm

    m, n, k = (int(row[x]) for x in ("M", "N", "K"))
    if args.clip:
        m, n, k = (min(v, args.clip) for v in (m, n, k))
    winner = {key: int(v) for key, v in row["winner"].items()}
    out: dict[str, Any] = {
        "model": row.get("model"),
        "layer": row.get("layer"),
        "M": m,
        "N": n,
        "K": k,
        "winner": winner,
        "winner_short": _short(winner),
    }
    from evokernel.judge.device import is_cuda

    cuda = is_cuda(args.device)
    dtype = torch.bfloat16 if cuda else torch.float16  # (the interpreter's bf16 dots are wrong)
    g = torch.Generator(device=args.device).manual_seed(m * 1_000_003 + n * 1009 + k)
    a = torch.randn(m, k, device=args.device, dtype=dtype, generator=g)
    b = torch.randn(k, n, device=args.device, dtype=dtype, generator=g) / k**0.5
    sync = torch.cuda.synchronize if cuda else (lambda: None)
    run = GemmLauncher(winner)
    t0 = time.perf_counter()
    first = run(a, b)  # the compile (shared with gemm below: one specialisation)
    sync()
    out["compile_s"] = time.perf_counter() - t0
    want = gemm(a, b, **winner)
    got = run(a, b)
    sync()
    out["same_as_gemm"] = bool(torch.equal(got, want)) and bool(torch.equal(first, want))
    ref = a.float() @ b.float()
    out["rel_err"] = ((got.float() - ref).abs().max() / ref.abs().max().clamp_min(1e-6)).item()
    del first, got, want, ref
    paths: dict[str, Callable[[], Any]] = {
        "matmul": lambda: torch.matmul(a, b),
        "gemm": lambda: gemm(a, b, **winner),
        "launcher": lambda: run(a, b),
    }
    for fn in paths.values():  # warm-up: allocator blocks, cuBLAS handles and workspaces
        for _ in range(args.warmup):
            fn()
    sync()
    t1 = time.perf_counter()
    for _ in range(3):
        run(a, b)
    sync()
    gpu_s = (time.perf_counter() - t1) / 3  # (about the kernel's time where the GPU is the slower side)
    calls = max(args.min_n, min(args.n, int(args.loop_s / max(gpu_s, 1e-9))))  # long kernels: fewer calls a loop
    out["n"] = calls
    times = host_times(paths, sync, n=calls, reps=args.reps)
    for name, (host, eager) in times.items():
        out[f"{name}_host_us"], out[f"{name}_eager_us"] = statistics.median(host), statistics.median(eager)
    out["launcher_stats"] = run.stats()
    out["fast"] = out["launcher_stats"]["fast_launches"] > 0
    # the median of the rounds' differences (each round's loops ran one after the other)
    diffs = [x - y for x, y in zip(times["launcher"][0], times["matmul"][0])]
    out["over_matmul_us"] = statistics.median(diffs)
    out["over_matmul_spread_us"] = [min(diffs), max(diffs)]
    out["within_target"] = out["over_matmul_us"] <= TARGET_US
    return out


def compile_only(rows: list[dict[str, Any]], args: argparse.Namespace) -> None:
    """(A --precompile process) Compile these rows' winners: one call each, results unused."""
    import torch

    from evokernel.search_spaces.gemm.template import GemmLauncher

    for row in rows:
        try:
            m, n, k = (int(row[x]) for x in ("M", "N", "K"))
            a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
            b = torch.randn(k, n, device="cuda", dtype=torch.bfloat16)
            GemmLauncher({key: int(v) for key, v in row["winner"].items()})(a, b)
            torch.cuda.synchronize()
        except Exception as exc:  # noqa: BLE001 (the measuring process meets it again and records it)
            print(f"precompile {row['model']}:{row['layer']}:{row['M']}: {type(exc).__name__}: {exc}", flush=True)


def precompile(rows: list[dict[str, Any]], args: argparse.Namespace, timeout: float) -> dict[str, Any]:
    """Compile the rows' winners in `args.precompile` processes at once, into Triton's on-disk
    cache, so that the measuring process loads each kernel instead of compiling it (~1-2 s a
    kernel on one core). Whatever they do not finish in `timeout` is compiled in the row."""
    import subprocess

    jobs = max(1, min(args.precompile, len(rows)))
    chunks = [rows[i::jobs] for i in range(jobs)]
    t0 = time.monotonic()
    procs = []
    for chunk in chunks:
        labels = [f"{r['model']}:{r['layer']}:{r['M']}" for r in chunk]
        procs.append(
            subprocess.Popen(
                [
                    sys.executable,
                    __file__,
                    "--compile-only",
                    "--results",
                    args.results,
                    "--out",
                    args.out,
                    "--rows",
                    *labels,
                ]
            )
        )
    for p in procs:
        try:
            p.wait(timeout=max(1.0, timeout - (time.monotonic() - t0)))
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()
    return {"processes": jobs, "s": round(time.monotonic() - t0, 1), "rcs": [p.returncode for p in procs]}


def write(out: Path, doc: dict[str, Any]) -> None:
    rows = [r for r in doc["rows"] if "error" not in r]
    if rows:
        doc["summary"] = {
            "rows": len(rows),
            "within_target": sum(r["within_target"] for r in rows),
            "same_as_gemm": sum(r["same_as_gemm"] for r in rows),
            "fast": sum(r["fast"] for r in rows),
            **{
                f"median_{p}_host_us": statistics.median(r[f"{p}_host_us"] for r in rows)
                for p in ("matmul", "gemm", "launcher")
            },
            "max_over_matmul_us": max(r["over_matmul_us"] for r in rows),
        }
    tmp = out / "launch_overhead.json.tmp"
    tmp.write_text(json.dumps(doc, indent=1))
    tmp.replace(out / "launch_overhead.json")
    lines = [
        (
            "| model | layer | M | N | K | winner | matmul host us | gemm host us | launcher host us | "
            "launcher - matmul | <= +10 us | eager us (matmul / gemm / launcher) | bitwise | compile s |"
        ),
        "|---" * 14 + "|",
    ]
    for r in doc["rows"]:
        head = f"| {r.get('model')} | {r.get('layer')} | {r.get('M')} | {r.get('N')} | {r.get('K')} | "
        if "error" in r:
            lines.append(head + f"{r.get('winner_short', '')} | error: {r['error'][:120]} |" + " |" * 7)
            continue
        lines.append(
            head + f"{r['winner_short']} | {r['matmul_host_us']:.1f} | {r['gemm_host_us']:.1f} | "
            f"{r['launcher_host_us']:.1f} | {r['over_matmul_us']:+.1f} | {'yes' if r['within_target'] else 'NO'} | "
            f"{r['matmul_eager_us']:.1f} / {r['gemm_eager_us']:.1f} / {r['launcher_eager_us']:.1f} | "
            f"{'yes' if r['same_as_gemm'] else 'NO'}{'' if r['fast'] else ' (JIT path!)'} | {r['compile_s']:.1f} |"
        )
    s = doc.get("summary")
    if s:
        lines += [
            "",
            (
                f"{s['within_target']}/{s['rows']} rows within torch.matmul + {TARGET_US:.0f} us; "
                f"{s['same_as_gemm']}/{s['rows']} bitwise gemm's; {s['fast']}/{s['rows']} launched directly. "
                f"Median host us per call: matmul {s['median_matmul_host_us']:.1f}, gemm "
                f"{s['median_gemm_host_us']:.1f}, launcher {s['median_launcher_host_us']:.1f}; worst launcher "
                f"- matmul {s['max_over_matmul_us']:+.1f} us."
            ),
        ]
    errors = [f"{r.get('model')}:{r.get('layer')}:{r.get('M')}" for r in doc["rows"] if "error" in r]
    if errors:
        lines += ["", "Failed: " + ", ".join(errors)]
    if doc["skipped"]:
        lines += ["", "Skipped (deadline): " + ", ".join(doc["skipped"])]
    (out / "launch_overhead.md").write_text("\n".join(lines) + "\n")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default=os.environ.get("OUT", "launch-out"))
    ap.add_argument("--results", default=str(RESULTS), help="a GEMM results JSON with rows of M, N, K and winner")
    ap.add_argument("--rows", nargs="*", default=None, metavar="MODEL:LAYER:M", help="only these rows")
    ap.add_argument("--max-rows", type=int, default=None)
    ap.add_argument("--n", type=int, default=200, help="calls per timed loop (at most)")
    ap.add_argument("--min-n", type=int, default=30, help="calls per timed loop (at least)")
    ap.add_argument(
        "--loop-s",
        type=float,
        default=0.05,
        help="a timed loop's GPU seconds at most: rows of long kernels take fewer calls (down to --min-n)",
    )
    ap.add_argument(
        "--precompile",
        type=int,
        default=8,
        help="processes compiling the winners first, into Triton's on-disk cache (0: none)",
    )
    ap.add_argument("--compile-only", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument(
        "--reps",
        type=int,
        default=9,
        help="rounds, each one timed loop per path (medians reported; launcher - matmul paired per round)",
    )
    ap.add_argument("--warmup", type=int, default=20, help="calls per path before timing")
    ap.add_argument("--deadline", type=float, default=300.0, help="seconds for the whole script")
    ap.add_argument(
        "--device",
        default="cuda",
        help="cuda, cuda:N, or cpu: a check of the script in Triton's interpreter (TRITON_INTERPRET=1), fp16",
    )
    ap.add_argument("--clip", type=int, default=0, help="clip M, N and K to this (the CPU check)")
    args = ap.parse_args()
    t0 = time.monotonic()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    import torch
    import triton

    from evokernel.core.errors import ConfigError
    from evokernel.judge.device import gpu_name, is_cuda, use_device

    try:
        use_device(args.device, f"--device {args.device}")
    except ConfigError as exc:
        sys.exit(f"launch_overhead.py: {exc} (use --device cpu with TRITON_INTERPRET=1 for a check)")
    rows = json.loads(Path(args.results).read_text())["rows"]
    if args.rows:
        wanted = {tuple(r.split(":")) for r in args.rows}
        rows = [r for r in rows if (r["model"], r["layer"], str(r["M"])) in wanted]
    rows = [r for r in rows if r.get("winner")][: args.max_rows]
    if args.compile_only:
        compile_only(rows, args)
        return
    doc: dict[str, Any] = {
        "device": gpu_name(args.device) or "cpu (interpreter)",
        "date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        "command": " ".join([Path(sys.argv[0]).name, *sys.argv[1:]]),
        "torch": torch.__version__,
        "triton": triton.__version__,
        "n": args.n,
        "reps": args.reps,
        "target_us": TARGET_US,
        "fast_launch": os.environ.get("EVOKERNEL_FAST_LAUNCH", "1"),
        "rows": [],
        "skipped": [],
    }
    write(out, doc)
    if args.precompile and is_cuda(args.device) and rows:
        doc["precompile"] = precompile(rows, args, timeout=min(150.0, args.deadline / 2))
        print(f"precompiled in {doc['precompile']}", flush=True)
    slowest = 0.0
    for row in rows:
        label = f"{row['model']}:{row['layer']}:{row['M']}"
        left = args.deadline - (time.monotonic() - t0)
        if left < max(5.0, 1.5 * slowest):
            doc["skipped"].append(label)
            continue
        t1 = time.monotonic()
        try:
            result = measure_row(row, args)
        except Exception as exc:  # noqa: BLE001 (a row's failure is a row of the table, not the end of the run)
            traceback.print_exc()
            result = {
                "model": row["model"],
                "layer": row["layer"],
                "M": row["M"],
                "N": row["N"],
                "K": row["K"],
                "winner_short": _short({k: int(v) for k, v in row["winner"].items()}),
                "error": f"{type(exc).__name__}: {exc}",
            }
        result["row_s"] = time.monotonic() - t1
        slowest = max(slowest, result["row_s"])
        doc["rows"].append(result)
        write(out, doc)
        if "error" in result:
            print(f"{label}: {result['error']}", flush=True)
        else:
            print(
                f"{label}: host us matmul {result['matmul_host_us']:.1f} gemm {result['gemm_host_us']:.1f} "
                f"launcher {result['launcher_host_us']:.1f} ({result['over_matmul_us']:+.1f}), bitwise "
                f"{result['same_as_gemm']}, {result['row_s']:.1f} s",
                flush=True,
            )
    write(out, doc)
    print((out / "launch_overhead.md").read_text())


if __name__ == "__main__":
    main()
