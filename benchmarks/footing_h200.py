"""Every recorded winner against its baselines on one footing, both ways a kernel is called.

For each row of `benchmarks/results/{gemm,attention_prefill,attention_decode,moe}.json`, the
winner and its baselines are built as the searches built them (the same generated candidate
modules: `candidate_source`, `torch_source`, `sdpa_source`, ...) and timed side by side by
`evokernel.judge.footing.side_by_side`, twice:

- graph: each sample a CUDA graph of a block of calls, replayed (the GPU's time only);
- eager: each sample the same block called from a Python loop (what a PyTorch user or an
  eager prefill sees: the host's launch path counts wherever it is slower than the GPU),
  with the host time per call of each candidate;

over rotating input sets of at least 200 MiB in all (no call reads another's inputs from the
60 MB L2), in 9 interleaved rounds, with paired per-round ratios (baseline / candidate). No
timed call may synchronise with the host: every candidate's timing checks that
(`evokernel.judge.timing.check_no_host_sync`) and the prefill problem hands its lengths over as host
values. Every candidate is first checked against the problem's reference.

    python3 benchmarks/footing_h200.py --out $OUT --families gemm attention moe --deadline 540

Writes `footing_<family>.json` under --out after every row (a killed run keeps what it
measured) and prints a table per family at the end. Compiles run first in a pool of
processes (Triton's disk cache), so the timing process only loads kernels.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import math
import os
import sys
import tempfile
import time
import traceback
from concurrent.futures import ProcessPoolExecutor, as_completed
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
PROBLEMS = ROOT / "examples" / "problems"
sys.path.insert(0, str(ROOT / "benchmarks"))
from evokernel.engine.tuning import geomean  # noqa: E402

MIN_SET_BYTES = 200 * 2**20
FAMILIES = ("gemm", "attention", "decode", "moe")


# -- what each row times -------------------------------------------------------------------
def gemm_jobs(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    from evokernel.search_spaces.gemm.template import DEFAULTS, candidate_source, torch_source

    jobs = []
    for r in rows:
        env = {
            "EVOKERNEL_GEMM_MODEL": r["model"],
            "EVOKERNEL_GEMM_LAYER": r["layer"],
            "EVOKERNEL_GEMM_M": str(r["M"]),
            "EVOKERNEL_GEMM_EPILOGUE": "none",
            "EVOKERNEL_GEMM_DTYPE": "bfloat16",
        }
        params = {k: int(v) for k, v in r["winner"].items()}
        jobs.append(
            {
                "family": "gemm",
                "key": {k: r[k] for k in ("model", "layer", "M", "N", "K")},
                "problem": "gemm_bf16.py",
                "env": env,
                "winner": params,
                "baseline": "cublas",
                "sources": {
                    "winner": candidate_source(params),
                    "cublas": torch_source(),
                    "triton_default": candidate_source(DEFAULTS),
                },
                # the winner through `gemm()` itself: the launch path the searches' candidates used before
                "direct": {"winner_gemm_call": params},
                "recorded": {"speedup": r.get("speedup"), "call": r.get("call")},
            }
        )
    return jobs


def attention_jobs(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    from evokernel.search_spaces.attention import template_prefill as t

    jobs = []
    for r in rows:
        model, _, lens = r["spec"].partition(":")
        if not lens:  # the shape the row was measured at
            lens = r["shape"].split("lens=")[1]
            n, _, b = lens.partition("x")
            lens = ",".join([n] * int(b)) if b else lens.replace("/", ",")
        env = {"EVOKERNEL_ATTN_MODEL": model, "EVOKERNEL_ATTN_SEQLENS": lens, "EVOKERNEL_ATTN_DTYPE": "bfloat16"}
        causal = model != "flux-dit"
        params = {k: int(v) for k, v in r["winner"].items()}
        sources = {
            "winner": t.candidate_source(params, causal=causal),
            "triton_default": t.candidate_source(t.DEFAULTS, causal=causal),
        }
        for b in ("flash", "efficient", "cudnn", "varlen"):
            sources[f"sdpa_{b}"] = t.sdpa_source(b, causal=causal)
        jobs.append(
            {
                "family": "attention",
                "key": {"model": model, "shape": r["shape"]},
                "problem": "attention_prefill_bf16.py",
                "env": env,
                "winner": params,
                "baseline": "sdpa_cudnn",
                "sources": sources,
                "recorded": {"speedup": r.get("speedup"), "call": r.get("call")},
            }
        )
    return jobs


def decode_jobs(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    from evokernel.search_spaces.attention import template_decode as t

    jobs = []
    for r in rows:
        model, batch, context = (r["spec"].split(":") + ["", ""])[:3]
        env = {
            "EVOKERNEL_DECODE_MODEL": model,
            "EVOKERNEL_DECODE_BATCH": batch or "32",
            "EVOKERNEL_DECODE_CONTEXT": context or "4096",
            "EVOKERNEL_DECODE_PAGE": "16",
            "EVOKERNEL_DECODE_DTYPE": "bfloat16",
        }
        params = {k: int(v) for k, v in r["winner"].items()}
        jobs.append(
            {
                "family": "decode",
                "key": {"model": model, "shape": r["shape"]},
                "problem": "attention_decode_bf16.py",
                "env": env,
                "winner": params,
                "baseline": "sglang_default",
                "sources": {
                    "winner": t.candidate_source(params),
                    "sglang_default": t.candidate_source(t.sglang_default_params()),
                    "sdpa_gathered": t.sdpa_gathered_source(),
                },
                "recorded": {"speedup": r.get("speedup"), "call": r.get("call")},
            }
        )
    return jobs


def moe_jobs(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    from evokernel.search_spaces.moe import shared_params
    from evokernel.search_spaces.moe.template import candidate_source

    jobs = []
    for r in rows:
        params = {k: int(v) for k, v in (r.get("params") or {}).items()}
        if not params:
            continue
        env = {"EVOKERNEL_MOE_MODEL": r["model"], "EVOKERNEL_MOE_M": str(r["M"]), "EVOKERNEL_MOE_DTYPE": "bfloat16"}
        sources = {"winner": candidate_source(params)}
        for name, cfg in (r.get("baseline_configs") or {}).items():
            if cfg:
                sources[name] = candidate_source(shared_params({k: int(v) for k, v in cfg.items()}))
        jobs.append(
            {
                "family": "moe",
                "key": {"model": r["model"], "M": r["M"]},
                "problem": "moe_bf16.py",
                "env": env,
                "winner": params,
                "baseline": "sglang_h200" if "sglang_h200" in sources else "sglang_default",
                "sources": sources,
                "recorded": {"speedup": r.get("speedup"), "call": r.get("call")},
            }
        )
    return jobs


BUILDERS = {
    "gemm": ("gemm", gemm_jobs),
    "attention": ("attention_prefill", attention_jobs),
    "decode": ("attention_decode", decode_jobs),
    "moe": ("moe", moe_jobs),
}


# -- building and compiling ----------------------------------------------------------------
def _problem(job: dict[str, Any]) -> Any:
    os.environ.update(job["env"])
    from evokernel.judge.problem import Problem

    return Problem.load(PROBLEMS / job["problem"])


def _kernels(job: dict[str, Any], folder: Path) -> dict[str, Any]:
    """name -> f(inputs) for every candidate of the job (modules written and imported here)."""
    from evokernel.judge.problem import load_module

    fns: dict[str, Any] = {}
    for name, src in job["sources"].items():
        path = folder / f"{job['family']}_{abs(hash(src)) % 10**12}_{name}.py"
        path.write_text(src)
        kernel = load_module(path, prefix="_footing").kernel
        fns[name] = lambda s, k=kernel: k(*s)
    if job.get("direct"):
        from evokernel.search_spaces.gemm.template import gemm

        for name, params in job["direct"].items():
            fns[name] = lambda s, p=params: gemm(*s, **p)
    return fns


def _compile(job: dict[str, Any]) -> dict[str, str]:
    """In a pool process: every candidate of the job called once at its shape (fills Triton's
    cache). Returns name -> error for those that failed."""
    import torch

    errors = {}
    try:
        problem = _problem(job)
        inputs = problem.make_inputs(dict(problem.shapes[0]), 0, "cuda")
        with tempfile.TemporaryDirectory() as d:
            for name, fn in _kernels(job, Path(d)).items():
                try:
                    fn(inputs)
                    torch.cuda.synchronize()
                except Exception as exc:  # a failing candidate is a row's note, not the run's end
                    errors[name] = f"{type(exc).__name__}: {exc}"[:300]
    except Exception as exc:
        errors["*"] = f"{type(exc).__name__}: {exc}"[:300]
    return errors


def precompile(jobs: list[dict[str, Any]], workers: int, deadline: float) -> dict[int, dict[str, str]]:
    import multiprocessing as mp

    out: dict[int, dict[str, str]] = {}
    with ProcessPoolExecutor(max_workers=workers, mp_context=mp.get_context("spawn")) as pool:
        futures = {pool.submit(_compile, j): i for i, j in enumerate(jobs)}
        for f in as_completed(futures, timeout=max(10.0, deadline - time.monotonic())):
            try:
                out[futures[f]] = f.result()
            except Exception as exc:
                out[futures[f]] = {"*": f"{type(exc).__name__}: {exc}"[:300]}
    return out


# -- timing one row --------------------------------------------------------------------------
def measure(job: dict[str, Any], folder: Path, rounds: int) -> dict[str, Any]:
    import torch

    from evokernel.judge.timing import StreamHold, check_no_host_sync
    from evokernel.judge.footing import HostSync, side_by_side
    from evokernel.judge.gate import compare

    problem = _problem(job)
    shape = dict(problem.shapes[0])
    first = problem.make_inputs(shape, 1, "cuda")
    set_bytes = sum(t.numel() * t.element_size() for t in first if isinstance(t, torch.Tensor))
    n_sets = int(min(32, max(2, math.ceil(MIN_SET_BYTES / max(set_bytes, 1)))))
    sets = [first] + [problem.make_inputs(shape, 2 + i, "cuda") for i in range(n_sets - 1)]
    refs = problem.reference(*first)
    refs = list(refs) if isinstance(refs, (tuple, list)) else [refs]
    dtype = str(refs[0].dtype).removeprefix("torch.")
    fns, errors = {}, {}
    for name, fn in _kernels(job, folder).items():
        try:
            out = fn(first)
            outs = list(out) if isinstance(out, (tuple, list)) else [out]
            wrong = compare(refs, outs, problem.tolerance(dtype))
            if wrong:
                errors[name] = f"wrong result: {wrong}"
                continue
            check_no_host_sync([lambda fn=fn, s=first: fn(s)], torch, StreamHold.shared(torch))
            fns[name] = fn
        except HostSync as exc:
            errors[name] = str(exc)[:300]
        except Exception as exc:
            errors[name] = f"{type(exc).__name__}: {exc}"[:300]
        torch.cuda.synchronize()
    row: dict[str, Any] = {
        **job["key"],
        "winner": job["winner"],
        "sets": n_sets,
        "set_mib": set_bytes / 2**20,
        "errors": errors,
        "recorded": job["recorded"],
    }
    base = job["baseline"]
    if "winner" not in fns or base not in fns:
        row["skipped"] = f"winner or {base} failed"
        return row
    order = ["winner", base] + [n for n in fns if n not in ("winner", base)]
    for mode in ("graph", "eager"):
        try:
            got = side_by_side({n: fns[n] for n in order}, sets, mode=mode, rounds=rounds, baseline=base)
        except Exception as exc:
            row[mode] = {"error": f"{type(exc).__name__}: {exc}"[:300]}
            continue
        timed, ratios = got["timed"], got["ratios"]
        row[mode] = {
            "footing": {"mode": got["footing"].mode, "calls": got["footing"].calls, "sets": got["footing"].sets},
            "ms": {n: t.median_ms for n, t in timed.items()},
            # baseline name -> how much faster the winner is: (baseline / winner), per round, paired
            "speedup": {n: timed[n].median_ms / timed["winner"].median_ms for n in order if n != "winner"},
            "ratio_vs_" + base: {n: ratios[n] for n in order},
            **({"host_us": {n: t.host_us for n, t in timed.items()}} if mode == "eager" else {}),
            "clocks": timed["winner"].clocks,
        }
        # the paired per-round ratio of the baseline over the winner is the row's figure
        r = ratios["winner"]
        row[mode]["speedup"][base] = r["median"]
        row[mode]["speedup_ci"] = [r["lo"], r["hi"]]
    del sets, first
    torch.cuda.empty_cache()
    return row


def summarise(family: str, doc: dict[str, Any]) -> None:
    rows = [r for r in doc["rows"] if "graph" in r and "eager" in r and "error" not in r["graph"]]
    names = sorted({n for r in rows for n in r["graph"]["speedup"]})
    doc["geomean"] = {n: geomean([r["graph"]["speedup"].get(n) for r in rows]) for n in names}
    doc["geomean_eager"] = {
        n: geomean([r["eager"]["speedup"].get(n) for r in rows if "speedup" in r["eager"]]) for n in names
    }
    if family == "gemm":
        big = [r for r in rows if r["M"] >= 256]
        doc["geomean_m256"] = {n: geomean([r["graph"]["speedup"].get(n) for r in big]) for n in names}
        doc["geomean_eager_m256"] = {
            n: geomean([r["eager"]["speedup"].get(n) for r in big if "speedup" in r["eager"]]) for n in names
        }
        over = [
            r["eager"]["host_us"]["winner"] - r["eager"]["host_us"]["cublas"]
            for r in rows
            if r["eager"].get("host_us", {}).get("winner") and r["eager"]["host_us"].get("cublas")
        ]
        doc["host_us_over_cublas"] = {
            "max": max(over, default=None),
            "median": sorted(over)[len(over) // 2] if over else None,
        }


def table(family: str, doc: dict[str, Any]) -> str:
    lines = [
        f"### {family}: {len(doc['rows'])} rows ({doc.get('skipped') or 'none skipped'})",
        "| row | base | graph speedup | eager speedup | host us winner / base | winner ms (graph) |",
        "|---|---|---|---|---|---|",
    ]
    for r in doc["rows"]:
        key = " ".join(str(r[k]) for k in ("model", "layer", "M", "shape") if k in r)
        if "graph" not in r or "error" in r.get("graph", {}):
            lines.append(f"| {key} | | {r.get('skipped') or r.get('graph', {}).get('error', '')} | | | |")
            continue
        base = next(iter(k for k in r["graph"] if k.startswith("ratio_vs_"))).removeprefix("ratio_vs_")
        g, e = r["graph"]["speedup"].get(base), r.get("eager", {}).get("speedup", {}).get(base)
        h = r.get("eager", {}).get("host_us", {})
        lines.append(
            f"| {key} | {base} | {g:.3f} | {e:.3f} | {h.get('winner', 0):.0f} / {h.get(base, 0):.0f} | "
            f"{r['graph']['ms']['winner']:.4f} |"
            if g and e
            else f"| {key} | {base} | {g} | {e} | | |"
        )
    lines.append(f"geomean graph {doc.get('geomean')}; eager {doc.get('geomean_eager')}")
    if family == "gemm":
        lines.append(
            f"M>=256: graph {doc.get('geomean_m256')}; eager {doc.get('geomean_eager_m256')}; "
            f"host us over cuBLAS {doc.get('host_us_over_cublas')}"
        )
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default=os.environ.get("OUT", "footing-out"))
    ap.add_argument("--families", nargs="+", default=list(FAMILIES), choices=FAMILIES)
    ap.add_argument("--rows", type=int, default=0, help="at most this many rows per family (0: all)")
    ap.add_argument("--rounds", type=int, default=9)
    ap.add_argument("--workers", type=int, default=14, help="compile processes")
    ap.add_argument("--deadline", type=float, default=540.0, help="seconds for the whole script")
    ap.add_argument(
        "--results",
        default=str(RESULTS),
        help="the folder of the results files whose rows are re-measured (default benchmarks/results)",
    )
    args = ap.parse_args()
    t0 = time.monotonic()
    end = t0 + args.deadline
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    import torch

    docs: dict[str, dict[str, Any]] = {}
    for family in args.families:
        stem, build = BUILDERS[family]
        rows = json.loads((Path(args.results) / f"{stem}.json").read_text())["rows"]
        jobs = build(rows[: args.rows] if args.rows else rows)
        docs[family] = {
            "device": torch.cuda.get_device_name(),
            "torch": torch.__version__,
            "triton": __import__("triton").__version__,
            "date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
            "command": " ".join([Path(sys.argv[0]).name, *sys.argv[1:]]),
            "rows": [],
            "skipped": [],
            "jobs": jobs,
        }
    all_jobs = [(f, i) for f, d in docs.items() for i in range(len(d["jobs"]))]
    print(f"{len(all_jobs)} rows to re-measure; compiling in {args.workers} processes", flush=True)
    try:
        compiled = precompile([docs[f]["jobs"][i] for f, i in all_jobs], args.workers, t0 + 0.35 * args.deadline)
    except Exception as exc:  # the timing process compiles what the pool did not
        print(f"precompile stopped: {type(exc).__name__}: {exc}", flush=True)
        compiled = {}
    print(
        f"compiled in {time.monotonic() - t0:.0f} s; failures: { {k: v for k, v in compiled.items() if v} }", flush=True
    )
    with tempfile.TemporaryDirectory() as d:
        for family, doc in docs.items():
            for job in doc.pop("jobs"):
                if time.monotonic() > end - 20:
                    doc["skipped"].append(f"{job['key']}: deadline")
                    continue
                try:
                    row = measure(job, Path(d), args.rounds)
                except Exception as exc:
                    row = {
                        **job["key"],
                        "skipped": f"{type(exc).__name__}: {exc}"[:400],
                        "trace": traceback.format_exc()[-800:],
                    }
                doc["rows"].append(row)
                summarise(family, doc)
                (out / f"footing_{family}.json").write_text(json.dumps(doc, indent=1))
                g = row.get("graph", {}).get("speedup", {}).get(job["baseline"])
                e = row.get("eager", {}).get("speedup", {}).get(job["baseline"])
                print(f"{family} {job['key']}: graph {g} eager {e} {row.get('skipped', '')}", flush=True)
            summarise(family, doc)
            (out / f"footing_{family}.json").write_text(json.dumps(doc, indent=1))
    for family, doc in docs.items():
        print(table(family, doc), flush=True)
    print(f"done in {time.monotonic() - t0:.0f} s", flush=True)


if __name__ == "__main__":
    main()
