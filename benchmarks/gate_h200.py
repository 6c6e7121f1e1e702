"""The trustworthy-fitness benchmarks on the H200 (issue 3), in one call.

Phases (each writes JSON lines to OUT/gate_h200.jsonl as it goes; a summary comes last):
  smoke      honest candidates on the bf16 matmul problem (4 shapes + 2 held out)
  corpus     every corpus candidate (cheats and honest) judged on the GPU
  fidelity   the 10 best configurations of the M=2048 landscape, re-measured in 5 separate
             passes: how far each pass's median is from the config's median of medians
  throughput candidates compiled, checked and timed per minute by KernelEvaluator over
             random points of the matmul space, all CPU cores compiling
  fault      a candidate that kills its CUDA context, then an honest one (health check between)
  ab         the 4 best configs re-measured together, timings interleaved

    python benchmarks/gate_h200.py --out $OUT [--phases smoke corpus fidelity throughput] [--deadline 540]
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import re
import statistics
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
T0 = time.monotonic()


def log(out: Path, record: dict) -> None:
    record = {"t": round(time.monotonic() - T0, 2), **record}
    with open(out / "gate_h200.jsonl", "a") as f:
        f.write(json.dumps(record) + "\n")
    print(json.dumps(record)[:400], flush=True)


def left(deadline: float) -> float:
    return deadline - (time.monotonic() - T0)


def phase_smoke(out: Path, deadline: float) -> None:
    from evokernel.judge.gate import Judge
    from evokernel.judge.problem import Problem
    from evokernel.search_spaces.matmul.template import candidate_source

    problem = Problem.load(ROOT / "examples/problems/matmul_bf16.py")
    t = time.monotonic()
    judge = Judge(problem, "cuda")
    log(out, {"phase": "smoke", "judge_setup_s": time.monotonic() - t})
    cands = {
        "torch_matmul": (ROOT / "tests/corpus/honest/torch_matmul.py").read_text(),
        "triton_128x256x64_g8_w8_s4": candidate_source(
            {"BM": 128, "BN": 256, "BK": 64, "GROUP_M": 8, "num_warps": 8, "num_stages": 4}
        ),
        "triton_64x64x128_g1_w4_s5": candidate_source(
            {"BM": 64, "BN": 64, "BK": 128, "GROUP_M": 1, "num_warps": 4, "num_stages": 5}
        ),
    }
    for name, src in cands.items():
        if left(deadline) < 30:
            return
        t = time.monotonic()
        v = judge.check(src, label=name)
        log(
            out,
            {
                "phase": "smoke",
                "candidate": name,
                "accepted": v.accepted,
                "reason": v.reason[:300],
                "wall_s": round(time.monotonic() - t, 2),
                "import_s": v.import_s,
                "compile_s": v.compile_s,
                "timings": [
                    {
                        "shape": x.shape,
                        "ms": x.median_ms,
                        "ci": [x.ci_low_ms, x.ci_high_ms],
                        "n": x.samples,
                        "graph": x.graph,
                        "tflops": x.tflops,
                        "roofline_pct": x.roofline_pct,
                    }
                    for x in v.timings
                ],
            },
        )


def _header(path: Path) -> dict[str, str]:
    head = {}
    for line in path.read_text().splitlines()[:12]:
        m = re.match(r"#\s*(problem|expect|reason|device|class):\s*(.*)", line)
        if m:
            head[m.group(1)] = m.group(2).strip()
    return head


def phase_corpus(out: Path, deadline: float, only: str = "") -> None:
    from evokernel.judge.gate import GateOptions, Judge
    from evokernel.judge.problem import Problem
    from evokernel.judge.sandbox import SandboxOptions

    files = sorted((ROOT / "tests/corpus/cheats").glob("*.py")) + sorted((ROOT / "tests/corpus/honest").glob("*.py"))
    judges: dict[str, Judge] = {}
    quick = GateOptions(sandbox=SandboxOptions(start_timeout_s=20, call_timeout_s=15, time_timeout_s=60))
    for path in files:
        if left(deadline) < 20:
            log(out, {"phase": "corpus", "stopped": "deadline"})
            return
        head = _header(path)
        prob = head.get("problem")
        if not prob or (only and not re.search(only, f"{path.parent.name}/{path.name} device:{head.get('device')}")):
            continue
        if prob not in judges:
            judges[prob] = Judge(Problem.load(ROOT / f"tests/corpus/problems/{prob}.py"), "cuda", quick)
        t = time.monotonic()
        v = judges[prob].check(path.read_text(), label=path.name)
        expect_ok = head.get("expect", "").startswith("accept")
        reason_ok = expect_ok or any(
            alt.strip().lower() in v.reason.lower() for alt in head.get("reason", "").split("|")
        )
        log(
            out,
            {
                "phase": "corpus",
                "file": f"{path.parent.name}/{path.name}",
                "device_class": head.get("device"),
                "expect": head.get("expect"),
                "accepted": v.accepted,
                "as_expected": v.accepted == expect_ok,
                "reason_matches": reason_ok,
                "reason": v.reason[:240],
                "wall_s": round(time.monotonic() - t, 2),
            },
        )


def _top_configs(n: int) -> list[dict]:
    path = ROOT / "evokernel/landscapes/matmul_bf16_h200_M2048_N6144_K4096.csv"
    rows = [r for r in csv.DictReader(open(path)) if r["latency_ms"]]
    rows.sort(key=lambda r: float(r["latency_ms"]))
    keys = ["BM", "BN", "BK", "GROUP_M", "num_warps", "num_stages"]
    return [({k: int(r[k]) for k in keys}, float(r["latency_ms"])) for r in rows[:n]]


def phase_fidelity(out: Path, deadline: float, passes: int = 5) -> None:
    from evokernel.evaluators import KernelEvaluator
    from evokernel.core.genome import Genome
    from evokernel.search_spaces.matmul.template import candidate_source

    top = _top_configs(10)
    genomes = [Genome.of(p) for p, _ in top]
    ev = KernelEvaluator(
        ROOT / "benchmarks/problems/matmul_bf16_m2048.py", lambda g: candidate_source(g.params), device="cuda"
    )
    medians: dict[str, list[float]] = {g.id: [] for g in genomes}
    for k in range(passes):
        if left(deadline) < 60:
            log(out, {"phase": "fidelity", "stopped": "deadline", "passes_done": k})
            break
        t = time.monotonic()
        for g, r in zip(genomes, ev.evaluate(genomes)):
            if r.is_ok:
                medians[g.id].append(r.latency_ms)
            else:
                log(
                    out,
                    {
                        "phase": "fidelity",
                        "pass": k,
                        "genome": g.short(),
                        "status": r.status.value,
                        "error": r.error[:300],
                    },
                )
        log(out, {"phase": "fidelity", "pass": k, "wall_s": round(time.monotonic() - t, 1)})
    rows = []
    for (params, recorded), g in zip(top, genomes):
        xs = medians[g.id]
        if not xs:
            continue
        med = statistics.median(xs)
        dev = max(abs(x / med - 1) for x in xs)
        rows.append(
            {"config": g.short(), "recorded_ms": recorded, "median_ms": med, "passes": xs, "max_dev_pct": 100 * dev}
        )
        log(out, {"phase": "fidelity", **rows[-1]})
    if rows:
        log(
            out,
            {
                "phase": "fidelity",
                "summary": True,
                "configs": len(rows),
                "worst_dev_pct": max(r["max_dev_pct"] for r in rows),
                "within_1pct": sum(r["max_dev_pct"] <= 1.0 for r in rows),
            },
        )


ABLATION = {  # name: (elements perturbed per input before each timed call, timing options)
    "hold16": (8, {"hold": 16}),  # the default: blocks of 16 calls queued behind a stream hold
    "spin50": (8, {"hold": 0, "guard_us": 50}),  # the previous default: a 50 us GPU spin per call
    "bare": (0, {"hold": 0, "guard_us": 0}),  # no perturbation, no protection
    "hold16_unperturbed": (0, {"hold": 16}),
}


def phase_ablation(
    out: Path, deadline: float, passes: int = 3, burn: int = 0, names: tuple[str, ...] = tuple(ABLATION)
) -> None:
    """What inflates timings: the 4 best configs, re-measured in `passes` rounds under each
    variant (ABLATION), variants interleaved within a round so that all see the same
    conditions. `burn`: that many processes spin on the CPU meanwhile (as compiles do)."""
    import subprocess

    from evokernel.evaluators import KernelEvaluator
    from evokernel.judge.gate import GateOptions
    from evokernel.core.genome import Genome
    from evokernel.search_spaces.matmul.template import candidate_source

    top = _top_configs(4)
    genomes = [Genome.of(p) for p, _ in top]
    variants = {name: GateOptions(perturb=ABLATION[name][0], timing=ABLATION[name][1]) for name in names}
    evs = {
        name: KernelEvaluator(
            ROOT / "benchmarks/problems/matmul_bf16_m2048.py",
            lambda g: candidate_source(g.params),
            device="cuda",
            options=opt,
        )
        for name, opt in variants.items()
    }
    got: dict[str, dict[str, list[float]]] = {name: {g.id: [] for g in genomes} for name in variants}
    held: dict[str, list[float]] = {name: [] for name in variants}
    burners = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(burn)]
    try:
        for k in range(passes):
            for name, ev in evs.items():
                if left(deadline) < 40:
                    break
                for g, r in zip(genomes, ev.evaluate(genomes)):
                    got[name][g.id].append(r.latency_ms if r.is_ok else float("nan"))
                    held[name].append((r.meta.get("steps") or {}).get("w_held", -1.0))
    finally:
        for b in burners:
            b.kill()
    for name in variants:
        rows = []
        for (params, recorded), g in zip(top, genomes):
            xs = [x for x in got[name][g.id] if x == x]
            if xs:
                rows.append(
                    {
                        "config": g.short(),
                        "recorded_ms": recorded,
                        "ms": xs,
                        "vs_recorded": statistics.median(xs) / recorded,
                        "spread_pct": 100 * (max(xs) - min(xs)) / statistics.median(xs),
                    }
                )
        log(
            out,
            {
                "phase": "ablation",
                "burn": burn,
                "variant": name,
                "rows": rows,
                "held": held[name][:4],
                "worst_spread_pct": max((r["spread_pct"] for r in rows), default=None),
                "median_vs_recorded": statistics.median([r["vs_recorded"] for r in rows]) if rows else None,
            },
        )


def phase_stress(out: Path, deadline: float) -> None:
    """The hold against the spin with every CPU core busy (16 spinning processes)."""
    phase_ablation(out, deadline, passes=3, burn=os.cpu_count() or 16, names=("hold16", "spin50"))


def phase_throughput(
    out: Path, deadline: float, window_s: float = 120.0, workers: int | None = None, prewarm: bool = True
) -> None:
    from evokernel.evaluators import KernelEvaluator
    from evokernel.core.genome import Genome
    from evokernel.search_spaces import matmul_space
    from evokernel.search_spaces.matmul.template import candidate_source

    space = matmul_space()
    points = space.valid_points()
    rng = np.random.default_rng(0)
    order = rng.permutation(len(points))
    genomes = [Genome.of(points[int(i)]) for i in order]
    workers = workers or max(1, (os.cpu_count() or 3) - 2)
    from evokernel.judge.gate import GateOptions
    from evokernel.judge.sandbox import SandboxOptions

    ev = KernelEvaluator(
        ROOT / "benchmarks/problems/matmul_bf16_m2048.py",
        lambda g: candidate_source(g.params),
        device="cuda",
        workers=workers,
        options=GateOptions(sandbox=SandboxOptions(prewarm=prewarm)),
    )
    ev.judge  # set up buffers before the clock starts
    window = min(window_s, left(deadline) - 20)
    t0 = time.monotonic()
    done, statuses, lat, parts = (
        0,
        {},
        [],
        {k: [] for k in ("wait_s", "judge_s", "compile_s", "import_s", "warm_s", "checks_s", "timing_s", "recheck_s")},
    )
    raced, errors = 0, []
    steps: dict[str, list[float]] = {}
    recorded = {tuple(sorted(p.items())): v for p, v in _top_configs(10**6)}
    gen = ev.evaluate(genomes)
    for g, r in zip(genomes, gen):
        done += 1
        statuses[r.status.value] = statuses.get(r.status.value, 0) + 1
        raced += bool(r.meta.get("raced"))
        if not r.is_ok and len(errors) < 8:
            errors.append(f"{g.short()}: {r.status.value}: {r.error[:300]}")
        for k in parts:
            if k in r.meta:
                parts[k].append(r.meta[k])
        for k, v in (r.meta.get("steps") or {}).items():
            steps.setdefault(k, []).append(v)
        if r.is_ok:
            rec = recorded.get(tuple(sorted(g.params.items())))
            if rec:
                lat.append((r.latency_ms, rec))
        if done % 25 == 0:
            el = time.monotonic() - t0
            log(
                out,
                {
                    "phase": "throughput",
                    "done": done,
                    "elapsed_s": round(el, 1),
                    "per_min": round(60 * done / el, 1),
                    "statuses": statuses,
                },
            )
        if time.monotonic() - t0 > window:
            break
    gen.close()
    el = time.monotonic() - t0
    ratio = [m / r for m, r in lat]
    log(
        out,
        {
            "phase": "throughput",
            "summary": True,
            "prewarm": prewarm,
            "workers": workers,
            "done": done,
            "elapsed_s": round(el, 1),
            "per_min": round(60 * done / el, 1),
            "statuses": statuses,
            "raced": raced,
            "seed_entries": ev.judge.seed.harvested if ev.judge.seed is not None else None,
            "errors": errors,
            "mean_s": {k: round(statistics.fmean(v), 4) for k, v in parts.items() if v},
            "steps_mean_s": {k: round(sum(v) / max(done, 1), 4) for k, v in sorted(steps.items())},
            "vs_landscape_median_ratio": statistics.median(ratio) if ratio else None,
            "vs_landscape_spearman": _spearman([m for m, _ in lat], [r for _, r in lat]) if len(lat) > 5 else None,
        },
    )


def phase_fault(out: Path, deadline: float) -> None:
    """A candidate that kills its CUDA context, then an honest one: the first is a crash,
    the GPU is checked with a fresh process, the second is judged as usual."""
    from evokernel.evaluators import KernelEvaluator
    from evokernel.core.genome import Genome

    root = ROOT / "tests/corpus"
    sources = [(root / "cheats/illegal_memory_access.py").read_text(), (root / "honest/triton_matmul.py").read_text()]
    genomes = [Genome.of({"i": i}, source=src) for i, src in enumerate(sources)]
    ev = KernelEvaluator(root / "problems/matmul_small.py", lambda g: g.source or "", device="cuda", workers=2)
    t = time.monotonic()
    results = list(ev.evaluate(genomes))
    log(
        out,
        {
            "phase": "fault",
            "statuses": [r.status.value for r in results],
            "faults": ev.faults,
            "errors": [r.error[:200] for r in results],
            "wall_s": round(time.monotonic() - t, 2),
        },
    )


def phase_ab(out: Path, deadline: float) -> None:
    """The 4 best landscape configs re-measured together, interleaved, 3 rounds."""
    from evokernel.evaluators import KernelEvaluator
    from evokernel.core.genome import Genome
    from evokernel.search_spaces.matmul.template import candidate_source

    top = _top_configs(4)
    genomes = [Genome.of(p) for p, _ in top]
    ev = KernelEvaluator(
        ROOT / "benchmarks/problems/matmul_bf16_m2048.py", lambda g: candidate_source(g.params), device="cuda"
    )
    for k in range(2):
        t = time.monotonic()
        results = ev.remeasure(genomes, rounds=3)
        log(
            out,
            {
                "phase": "ab",
                "pass": k,
                "wall_s": round(time.monotonic() - t, 2),
                "configs": [g.short() for g in genomes],
                "recorded_ms": [r for _, r in top],
                "ms": [r.latency_ms for r in results],
                "noise": [r.noise for r in results],
                "statuses": [r.status.value for r in results],
            },
        )


def _spearman(a: list[float], b: list[float]) -> float:
    ra = np.argsort(np.argsort(a))
    rb = np.argsort(np.argsort(b))
    return float(np.corrcoef(ra, rb)[0, 1])


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=os.environ.get("OUT", "/tmp/out"))
    ap.add_argument("--phases", nargs="+", default=["smoke", "corpus", "fidelity", "throughput"])
    ap.add_argument("--deadline", type=float, default=540.0)
    ap.add_argument("--window", type=float, default=120.0)
    ap.add_argument("--corpus-only", default="", help="regex over 'folder/file device:X' to select corpus files")
    ap.add_argument("--profile", action="store_true", help="profile the judge's process during throughput")
    ap.add_argument("--workers", type=int, default=None, help="compile workers for throughput (default: cores - 1)")
    args = ap.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    import torch
    import triton

    from evokernel.judge.sandbox import isolation_report

    log(
        out,
        {
            "env": True,
            "gpu": torch.cuda.get_device_name(),
            "torch": torch.__version__,
            "triton": triton.__version__,
            "cpus": os.cpu_count(),
            "python": sys.version.split()[0],
            # the candidates' protections (EVOKERNEL_SANDBOX, EVOKERNEL_SANDBOX_WITHOUT: device.sh sandbox)
            "sandbox": isolation_report(device="cuda").describe(),
        },
    )
    for ph in args.phases:
        if left(args.deadline) < 30:
            break
        if ph.startswith("throughput:"):  # throughput:N runs it with N compile workers
            ph, args.workers = "throughput", int(ph.split(":", 1)[1])
        try:
            if ph == "throughput" and args.profile:
                import cProfile
                import pstats

                prof = cProfile.Profile()
                prof.runcall(phase_throughput, out, args.deadline, args.window, args.workers)
                with open(out / f"profile_throughput_w{args.workers or 0}.txt", "w") as f:
                    stats = pstats.Stats(prof, stream=f).sort_stats("cumulative")
                    stats.print_stats(60)
                    stats.sort_stats("tottime").print_stats(40)
            elif ph in ("throughput", "throughput_noprewarm"):
                phase_throughput(out, args.deadline, args.window, args.workers, prewarm=ph == "throughput")
            elif ph == "corpus":
                phase_corpus(out, args.deadline, args.corpus_only)
            else:
                {
                    "smoke": phase_smoke,
                    "fidelity": phase_fidelity,
                    "fault": phase_fault,
                    "ab": phase_ab,
                    "ablation": phase_ablation,
                    "stress": phase_stress,
                }[ph](out, args.deadline)
        except Exception as exc:
            import traceback

            log(out, {"phase": ph, "crashed": f"{type(exc).__name__}: {exc}", "tb": traceback.format_exc()[-2000:]})


if __name__ == "__main__":
    main()
