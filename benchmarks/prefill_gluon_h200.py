"""Issue 28 on the H200: the Gluon (FA3-style) prefill kernel against every torch SDPA backend
and torch's varlen attention, on one footing, shape by shape.

Per shape: a probe of every Gluon configuration in `--configs` (correct against the
problem's reference? time of a graph-replayed block on one input set, interleaved with
cuDNN's: a screening, not a figure), then the fastest correct one (`winner`) against the
baselines, timed by `footing_h200.measure` (the footing harness of every recorded winner:
rotating input sets over 200 MiB, CUDA graphs of blocks of calls and the same blocks called
eagerly, 9 interleaved rounds, paired ratios, no host sync in any timed call). Baselines:
`sdpa_flash`, `sdpa_efficient`, `sdpa_cudnn` (SDPA with the backend forced; grouped-query
heads through `enable_gqa`), `sdpa_varlen` (torch's varlen_attn), for grouped-query shapes
`sdpa_efficient_x` and `sdpa_varlen_x` (K and V expanded to the query heads outside the
timed call, for backends that refuse grouped-query heads), and `triton` (the plain Triton
template at the best configuration recorded for the shape, else its defaults). `sdpa_best`
is the fastest SDPA baseline in each mode. With --gate, after every shape is measured, each
winner goes through evokernel's gate (the held-out shape included) while the deadline allows.

A configuration is BLOCK_M,BLOCK_N,num_warps,num_stages,OVERLAP,PINGPONG,PERSISTENT[,QSTAGES,
TMA_STORE] (`GLUON_PARAMS` in order), then any KEY=VALUE options of `attention_gluon` that are
not genes (FOLD=0: the scale applied to every score before the max, for an A/B).

    python3 benchmarks/prefill_gluon_h200.py --out $OUT/prefill --deadline 500

Writes `prefill_gluon.json` under --out after every shape (a killed run keeps what it
measured), with TFLOP/s per candidate next to the speedups.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import sys
import tempfile
import time
import traceback
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))
from evokernel.engine.tuning import geomean  # noqa: E402

#: model:lengths (comma-separated, or NxB) of issue 28
SHAPES = (
    "llama3-8b:2048x4",
    "llama3-8b:8192x1",
    "llama3-8b:512x16",
    "llama3-8b:512,1800,3000,1024",
    "qwen3-30b-a3b:4096x4",
    "flux-dit:4608x1",
    "flux-dit:4608x2",
    "flux-dit:4608x1@bhsd",
    "flux-dit:4608x2@bhsd",
)
#: BLOCK_M, BLOCK_N, num_warps, num_stages, OVERLAP, PINGPONG, PERSISTENT
CONFIGS = ("128,128,4,2,1,1,1", "128,128,4,2,1,1,0", "128,64,4,4,1,1,1")
BASELINES = ("flash", "efficient", "cudnn", "varlen")
#: baselines run again with K and V expanded to the query heads where the heads are grouped
EXPANDED = ("efficient", "varlen")


def parse_config(text: str) -> tuple[dict[str, int], dict[str, int]]:
    """(the genes, the options) of a configuration's text (see the module's docstring).

    >>> parse_config("128,128,4,2,1,1,1,2,1,FOLD=0")[1]
    {'FOLD': 0}
    >>> parse_config("128,64,4,4,1,1,0")[0]["QSTAGES"]
    1
    """
    from evokernel.search_spaces.attention.template_prefill_gluon import GLUON_DEFAULTS, GLUON_PARAMS

    items = text.split(",")
    plain = [int(x) for x in items if "=" not in x]
    options = {k: int(v) for k, v in (x.split("=", 1) for x in items if "=" in x)}
    return {**GLUON_DEFAULTS, **dict(zip(GLUON_PARAMS, plain))}, options


def grouped(model: str) -> bool:
    from importlib import import_module

    sys.path.insert(0, str(ROOT / "examples" / "problems"))
    hq, hkv, *_ = import_module("attention_prefill_bf16").MODELS[model]
    return hq != hkv


def lens_of(spec: str) -> list[int]:
    body = spec.split(":", 1)[1].split("@")[0]
    if "x" in body:
        n, b = body.split("x")
        return [int(n)] * int(b)
    return [int(x) for x in body.split(",")]


def flops(model: str, lens: list[int]) -> float:
    """Forward FLOPs: 2 GEMMs of 2 x D per visible (query, key) pair, per query head."""
    from importlib import import_module

    sys.path.insert(0, str(ROOT / "examples" / "problems"))
    hq, _, d, causal, _ = import_module("attention_prefill_bf16").MODELS[model]
    pairs = sum(n * (n + 1) // 2 if causal else n * n for n in lens)
    return 4.0 * pairs * hq * d


def triton_params(model: str, lens: list[int]) -> dict[str, int]:
    """The plain Triton template's best recorded configuration for the shape, else its defaults."""
    from evokernel.search_spaces.attention import template_prefill as t

    try:
        rows = json.loads((ROOT / "benchmarks" / "results" / "attention_prefill.json").read_text())["rows"]
    except (OSError, ValueError, KeyError):
        rows = []
    key = f"{lens[0]}x{len(lens)}" if len(set(lens)) == 1 else "/".join(map(str, lens))
    for r in rows:
        if r.get("model") == model and r.get("shape", "").endswith(f"lens={key}") and r.get("winner"):
            return {k: int(v) for k, v in r["winner"].items()}
    return dict(t.DEFAULTS)


def shape_of(spec: str) -> tuple[dict[str, Any], dict[str, str]]:
    """The row's key and the problem's environment for `model:lengths[@layout]` (layout: packed,
    the default, or bhsd: SDPA's dense [B, H, S, D])."""
    model = spec.split(":", 1)[0]
    lens = lens_of(spec)
    layout = spec.split("@")[1] if "@" in spec else "packed"
    for var in ("EVOKERNEL_ATTN_BATCH", "EVOKERNEL_ATTN_CAUSAL"):
        os.environ.pop(var, None)
    env = {
        "EVOKERNEL_ATTN_MODEL": model,
        "EVOKERNEL_ATTN_SEQLENS": ",".join(map(str, lens)),
        "EVOKERNEL_ATTN_DTYPE": "bfloat16",
        "EVOKERNEL_ATTN_LAYOUT": layout,
    }
    return {"spec": spec, "model": model, "lens": lens, "causal": model != "flux-dit", "layout": layout}, env


Config = tuple[dict[str, int], dict[str, int]]


def job_for(spec: str, configs: list[Config], winner: Config | None) -> dict[str, Any]:
    """The footing job of a shape: with `winner`, the winner, the Triton template and the SDPA
    baselines; without, every Gluon configuration of `configs` (the screening)."""
    from evokernel.search_spaces.attention import template_prefill as t
    from evokernel.search_spaces.attention.template_prefill_gluon import gluon_candidate_source

    key, env = shape_of(spec)
    causal = key["causal"]
    sources: dict[str, str] = {}
    if winner is None:
        for p, opts in configs:
            sources[short((p, opts))] = gluon_candidate_source(p, causal=causal, options=opts)
    else:
        sources["winner"] = gluon_candidate_source(winner[0], causal=causal, options=winner[1])
        sources["triton"] = t.candidate_source(triton_params(key["model"], key["lens"]), causal=causal)
    for b in BASELINES:
        sources[f"sdpa_{b}"] = t.sdpa_source(b, causal=causal)
    if grouped(key["model"]):
        for b in EXPANDED:
            sources[f"sdpa_{b}_x"] = t.sdpa_source(b, causal=causal, expand_gqa=True)
    return {
        "family": "attention",
        "key": key,
        "problem": "attention_prefill_bf16.py",
        "env": env,
        "winner": None if winner is None else {**winner[0], **winner[1]},
        "baseline": "sdpa_cudnn",
        "sources": sources,
        "recorded": {},
    }


#: a gene's mark in a configuration's short name, when set
MARKS = {"PINGPONG": "pp", "PERSISTENT": "P", "QSTAGES": "q", "TMA_STORE": "t", "BY_SEQUENCE": "b", "SNAKE": "z"}


def short(config: Config) -> str:
    """A configuration's name: tile, warps, slots, OVERLAP, then a mark per structure set (every
    gene of `GLUON_PARAMS` beyond the first five has one, so two configurations never share a
    name), then the options.

    >>> short(parse_config("128,128,4,2,1,1,1,2,1,1,1,FOLD=0"))
    'g128x128w4s2o1ppPq2tbz-fold0'
    """
    from evokernel.search_spaces.attention.template_prefill_gluon import GLUON_PARAMS

    p, opts = config
    assert set(GLUON_PARAMS[5:]) <= set(MARKS), "a gene without a mark in the configurations' names"
    marks = "".join(
        MARKS[g] + (str(p[g]) if g == "QSTAGES" else "")
        for g in GLUON_PARAMS[5:]
        if p.get(g) and not (g == "QSTAGES" and p[g] == 1)
    )
    return (
        f"g{p['BLOCK_M']}x{p['BLOCK_N']}w{p['num_warps']}s{p['num_stages']}o{p['OVERLAP']}"
        + marks
        + "".join(f"-{k.lower()}{v}" for k, v in sorted(opts.items()))
    )


def where_wrong(got: Any, ref: Any) -> dict[str, Any]:
    """Where an output [T, H, D] differs from the reference: the largest error (NaN as 1e9),
    whether it holds NaN, and the first token rows and heads off by more than 0.05."""
    import torch

    err = (got.float() - ref.float()).abs()
    bad = (err > 0.05).nonzero()
    return {
        "max_err": float(err.nan_to_num(1e9).max()),
        "nan": bool(torch.isnan(got).any()),
        "bad_rows": sorted({int(r) for r in bad[:, 0].tolist()})[:24],
        "bad_heads": sorted({int(r) for r in bad[:, 1].tolist()})[:24],
    }


def screen(job: dict[str, Any], folder: Path) -> dict[str, Any]:
    """Every candidate of the screening job: correct? and a graph-replayed time on one set."""
    import torch
    import triton

    from evokernel.judge.gate import compare
    from footing_h200 import _kernels, _problem

    problem = _problem(job)
    shape = dict(problem.shapes[0])
    inputs = problem.make_inputs(shape, 1, "cuda")
    refs = problem.reference(*inputs)
    refs = list(refs) if isinstance(refs, (tuple, list)) else [refs]
    out: dict[str, Any] = {}
    fns = {}
    for name, fn in _kernels(job, folder).items():
        try:
            got = fn(inputs)
            torch.cuda.synchronize()
            wrong = compare(refs, [got], problem.tolerance("bfloat16"))
            if wrong:
                out[name] = {"error": f"wrong result: {wrong}"[:300], **where_wrong(got, refs[0])}
                continue
            fns[name] = fn
        except Exception as exc:
            out[name] = {"error": f"{type(exc).__name__}: {exc}"[:400]}
    for _ in range(2):  # interleaved twice; the minimum of the two
        for name, fn in fns.items():
            ms = triton.testing.do_bench_cudagraph(lambda fn=fn: fn(inputs), rep=30)
            prev = out.get(name, {}).get("ms")
            out[name] = {"ms": ms if prev is None else min(ms, prev)}
    return out


#: small shapes of the probe: causal GQA with ragged lengths, not causal with two sequences,
#: causal GQA in the dense layout
PROBE_SHAPES = ("llama3-8b:37,200,130", "flux-dit:300,77", "llama3-8b:200x2@bhsd")


def probe(config: Config) -> dict[str, Any]:
    """In its own process (a deadlocked kernel costs only its timeout): the configuration on
    the probe's small shapes against the reference, with where it is wrong."""
    import torch

    from evokernel.judge.gate import compare
    from footing_h200 import _problem
    from evokernel.search_spaces.attention.template_prefill_gluon import attention_gluon, attention_gluon_dense

    out: dict[str, Any] = {}
    for spec in PROBE_SHAPES:
        key, env = shape_of(spec)
        try:
            problem = _problem({"env": env, "problem": "attention_prefill_bf16.py"})
            inputs = problem.make_inputs(dict(problem.shapes[0]), 0, "cuda")
            ref = problem.reference(*inputs)
            if inputs[0].ndim == 4:
                got = attention_gluon_dense(*inputs[:3], causal=key["causal"], **config[0], **config[1])
            else:
                got = attention_gluon(*inputs[:5], causal=key["causal"], **config[0], **config[1])
            torch.cuda.synchronize()
            wrong = compare([ref], [got], problem.tolerance("bfloat16"))
            out[spec] = {"ok": not wrong, **where_wrong(got, ref)}
        except Exception as exc:
            out[spec] = {"ok": False, "error": f"{type(exc).__name__}: {exc}"[:600]}
    return out


def probe_all(configs: list[Config], timeout: float, workers: int = 4) -> dict[str, Any]:
    """Every configuration's probe, each in its own process, `workers` at a time."""
    import subprocess
    from concurrent.futures import ThreadPoolExecutor

    def one(c: Config) -> dict[str, Any]:
        try:
            p = subprocess.run(
                [sys.executable, __file__, "--probe", json.dumps(c)], capture_output=True, text=True, timeout=timeout
            )
            lines = [ln for ln in p.stdout.splitlines() if ln.startswith("{")]
            return json.loads(lines[-1]) if lines else {"error": (p.stderr or "no output")[-600:]}
        except subprocess.TimeoutExpired:
            return {"error": f"timed out after {timeout:.0f} s (a deadlock?)"}

    with ThreadPoolExecutor(workers) as pool:
        found = list(pool.map(one, configs))
    res: dict[str, Any] = {}
    for c, r in zip(configs, found):
        res[short(c)] = r
        print(f"probe {short(c)}: {json.dumps(r)[:700]}", flush=True)
    return res


def gate(spec: str, winner: Config) -> dict[str, Any]:
    """The winner through evokernel's gate (`KernelEvaluator`: its own sandboxed process,
    checked against the reference at the tuning shape and the problem's held-out shape, an
    uneven pair of lengths, then timed): what a search would have judged it."""
    from evokernel import Genome
    from evokernel.evaluators import KernelEvaluator
    from evokernel.judge.problem import Problem
    from evokernel.search_spaces.attention.template_prefill_gluon import gluon_candidate_source

    key, env = shape_of(spec)
    os.environ.update(env)
    problem = Problem.load(ROOT / "examples" / "problems" / "attention_prefill_bf16.py")
    causal = key["causal"]
    opts = winner[1]
    with KernelEvaluator(
        problem, lambda g: gluon_candidate_source(g.params, causal=causal, options=opts), device="cuda"
    ) as ev:
        (res,) = list(ev.evaluate([Genome(params=dict(winner[0]))]))
    return {
        "status": str(res.status.value if hasattr(res.status, "value") else res.status),
        "latency_ms": res.latency_ms,
        "per_shape": dict(res.per_shape),
        "error": res.error[:400],
        "heldout": [dict(s) for s in problem.heldout],
    }


def profile_once(spec: str, config: Config, names: tuple[str, ...] = ("winner", "sdpa_cudnn")) -> None:
    """For a profiler started with profiling off (`ncu --profile-from-start off`): each of
    `names` (the Gluon configuration, cuDNN) warmed up, then called once between
    cudaProfilerStart and cudaProfilerStop, so the profile holds exactly those calls."""
    import torch

    from footing_h200 import _kernels, _problem

    job = job_for(spec, [], config)
    job["sources"] = {n: job["sources"][n] for n in names}
    problem = _problem(job)
    inputs = problem.make_inputs(dict(problem.shapes[0]), 1, "cuda")
    with tempfile.TemporaryDirectory() as d:
        fns = _kernels(job, Path(d))
        for fn in fns.values():
            for _ in range(3):
                fn(inputs)
        torch.cuda.synchronize()
        torch.cuda.profiler.start()
        for name, fn in fns.items():
            fn(inputs)
            torch.cuda.synchronize()
        torch.cuda.profiler.stop()
    print(f"profiled {spec}: {list(fns)} ({short(config)})", flush=True)


def main() -> None:
    if len(sys.argv) == 4 and sys.argv[1] == "--profile":  # --profile SPEC CONFIG (under ncu)
        profile_once(sys.argv[2], parse_config(sys.argv[3]))
        return
    if len(sys.argv) == 3 and sys.argv[1] == "--probe":
        params, opts = json.loads(sys.argv[2])
        print(json.dumps(probe((params, opts))), flush=True)
        return
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default=os.environ.get("OUT", "prefill-out"))
    ap.add_argument("--shapes", nargs="+", default=list(SHAPES))
    ap.add_argument(
        "--configs", nargs="+", default=list(CONFIGS), help="BLOCK_M,BLOCK_N,warps,stages,OVERLAP,PINGPONG,PERSISTENT"
    )
    ap.add_argument("--rounds", type=int, default=9)
    ap.add_argument("--workers", type=int, default=14)
    ap.add_argument("--deadline", type=float, default=500.0)
    ap.add_argument("--gate", action="store_true", help="also judge each winner through the gate (held-out shape)")
    args = ap.parse_args()
    t0 = time.monotonic()
    end = t0 + args.deadline
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    import torch

    from evokernel.search_spaces.attention.template_prefill_gluon import check_gluon_params
    from footing_h200 import measure, precompile

    configs = [parse_config(c) for c in args.configs]
    names = [short(c) for c in configs]
    if len(set(names)) != len(names):
        ap.error(f"two configurations share a name: {sorted(n for n in names if names.count(n) > 1)}")
    bad = {short(c): check_gluon_params(c[0]) for c in configs if check_gluon_params(c[0])}
    configs = [c for c in configs if short(c) not in bad]
    doc: dict[str, Any] = {
        "device": torch.cuda.get_device_name(),
        "torch": torch.__version__,
        "triton": __import__("triton").__version__,
        "date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        "command": " ".join([Path(sys.argv[0]).name, *sys.argv[1:]]),
        "configs": [short(c) for c in configs],
        "invalid_configs": bad,
        "rows": [],
        "skipped": [],
    }
    path = out / "prefill_gluon.json"
    doc["probe"] = probe_all(configs, 45.0)
    path.write_text(json.dumps(doc, indent=1))
    good = [
        c
        for c in configs
        if all(r.get("ok") for r in doc["probe"].get(short(c), {}).values()) and doc["probe"].get(short(c))
    ]
    if not good:
        print("no Gluon configuration passed the probe", flush=True)
        return
    configs = good
    screens = [job_for(s, configs, None) for s in args.shapes]
    print(f"{len(screens)} shapes, {len(configs)} Gluon configs; compiling in {args.workers} processes", flush=True)
    try:
        compiled = precompile(screens, args.workers, t0 + 0.3 * args.deadline)
    except Exception as exc:
        print(f"precompile stopped: {type(exc).__name__}: {exc}", flush=True)
        compiled = {}
    doc["compile_errors"] = {screens[i]["key"]["spec"]: v for i, v in compiled.items() if v}
    print(f"compiled in {time.monotonic() - t0:.0f} s; failures: {doc['compile_errors']}", flush=True)
    winners: dict[str, Config] = {}
    with tempfile.TemporaryDirectory() as d:
        for sj in screens:
            spec = sj["key"]["spec"]
            if time.monotonic() > end - 30:
                doc["skipped"].append(f"{spec}: deadline")
                continue
            row: dict[str, Any] = dict(sj["key"])
            try:
                row["screen"] = screen(sj, Path(d))
                gl = {n: r["ms"] for n, r in row["screen"].items() if n.startswith("g") and "ms" in r}
                if not gl:
                    row["skipped"] = "no Gluon configuration ran correctly"
                else:
                    best = min(gl, key=gl.__getitem__)
                    winner = next(c for c in configs if short(c) == best)
                    row.update(measure(job_for(spec, configs, winner), Path(d), args.rounds))
                    fl = flops(sj["key"]["model"], sj["key"]["lens"])
                    for mode in ("graph", "eager"):
                        m = row.get(mode, {})
                        if "ms" not in m:
                            continue
                        sd = {n: v for n, v in m["ms"].items() if n.startswith("sdpa_")}
                        if sd:
                            b = min(sd, key=sd.__getitem__)
                            m["sdpa_best"] = b
                            m["speedup"]["sdpa_best"] = sd[b] / m["ms"]["winner"]
                        m["tflops"] = {n: fl / (v * 1e-3) / 1e12 for n, v in m["ms"].items()}
                    winners[spec] = winner
            except Exception as exc:
                row["skipped"] = f"{type(exc).__name__}: {exc}"[:400]
                row["trace"] = traceback.format_exc()[-1200:]
            doc["rows"].append(row)
            ok = [r for r in doc["rows"] if "speedup" in r.get("graph", {})]
            for mode in ("graph", "eager"):
                names = sorted({n for r in ok for n in r[mode].get("speedup", {})})
                doc[f"geomean_{mode}"] = {n: geomean([r[mode]["speedup"].get(n) for r in ok]) for n in names}
            path.write_text(json.dumps(doc, indent=1))
            g = row.get("graph", {})
            print(
                f"{spec}: winner {row.get('winner')} graph vs sdpa_best {g.get('speedup', {}).get('sdpa_best')} "
                f"({g.get('sdpa_best')}), eager {row.get('eager', {}).get('speedup', {}).get('sdpa_best')}; "
                f"tflops { ({k: round(v) for k, v in g.get('tflops', {}).items()}) } {row.get('skipped', '')}",
                flush=True,
            )
            screened = {n: r.get("ms", str(r.get("error", ""))[:120]) for n, r in row.get("screen", {}).items()}
            print(f"  screen: {screened}", flush=True)
    path.write_text(json.dumps(doc, indent=1))
    print(f"geomean graph {doc.get('geomean_graph')}\ngeomean eager {doc.get('geomean_eager')}", flush=True)
    for row in doc["rows"] if args.gate else []:
        spec = row["spec"]
        if spec not in winners:
            continue
        if time.monotonic() > end - 45:
            row["gate"] = {"skipped": "deadline"}
            continue
        try:
            row["gate"] = gate(spec, winners[spec])
        except Exception as exc:
            row["gate"] = {"error": f"{type(exc).__name__}: {exc}"[:400]}
        path.write_text(json.dumps(doc, indent=1))
        print(f"gate {spec}: {json.dumps(row['gate'])[:400]}", flush=True)
    print(f"done in {time.monotonic() - t0:.0f} s", flush=True)


if __name__ == "__main__":
    main()
