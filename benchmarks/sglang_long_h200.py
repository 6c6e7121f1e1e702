"""Long-context decode through SGLang with evolved decode attention (issue 29), on the GPU.

1. Search: the split-KV decode template (`decode_space()`) on the paged decode problem at
   page size 1 (SGLang's token-slot cache) for the model's attention at each (batch,
   context) point (`attention_h200.py --decode ... --page 1`); skipped with --package.
2. Export: `sglang_plugin_package` writes the decode-attention table of those runs.
3. Engines side by side (`SGLangEvaluator`, decode points at (batch, context)): SGLang as
   shipped (default flags), its A/A control, SGLang at each swept value of
   `--triton-attention-num-kv-splits` (the best value per point is the `sglang_best_flag`
   reference), and SGLang with the package: each engine's decode profiled for GPU kernel time
   per step and the numerics (first-step logits and greedy tokens for --numerics-steps steps
   against shipped) first, then interleaved rounds of wall-clock decode steps until --repeats
   or the deadline.
4. Per point: the decode attention's share of the profiled step, its fraction of the
   H200's copy bandwidth (KV bytes read per step over its time), the gain predicted from
   the kernel-level figure (Amdahl over the profiled step: the engine's attention time
   replaced by the micro-benchmarked winner's, one call per layer; the winner replayed from
   CUDA graphs, the engine's footing, where the search recorded it: `micro_figure`) next to the
   measured one.

Writes `sglang_long.json` (top-level `geomean`: `sglang_shipped.long_context` and
`sglang_best_flag.long_context` / `.kernel_time`), `sglang_long.md` and the package under --out.

    bash benchmarks/device.sh sglang-long      # carry .whl and .sgl
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from evokernel.evaluators.sglang import ABReport

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT / "benchmarks") not in sys.path:  # its sibling modules (run as a script, it is already there)
    sys.path.insert(0, str(ROOT / "benchmarks"))
FLAG = "--triton-attention-num-kv-splits"
#: SGLang 0.5.17: with a split tile size (not in deterministic mode) the cap on the splits is
#: the context length over it (160 at 40960 / 256) instead of FLAG's value
TILE = "--triton-attention-split-tile-size"


def parse_points(specs: list[str]) -> list[tuple[int, int]]:
    """ "B:CONTEXT" strings as (batch, context) pairs.

    >>> parse_points(["1:32768", "32:4096"])
    [(1, 32768), (32, 4096)]
    """
    out = []
    for spec in specs:
        b, _, c = spec.partition(":")
        out.append((int(b), int(c)))
    return out


def predicted_gain(step_ms: float, attention_ms: float | None, new_attention_ms: float | None) -> float | None:
    """Amdahl over a step: the step's attention time replaced by another.

    >>> round(predicted_gain(2.0, 1.0, 0.5), 3)
    1.333
    """
    if attention_ms is None or new_attention_ms is None or step_ms <= 0:
        return None
    new = step_ms - attention_ms + new_attention_ms
    return step_ms / new if new > 0 else None


def micro_figure(row: dict[str, Any]) -> tuple[float | None, str]:
    """A decode search row's per-call time of its winner for the predictions, and its footing: the
    CUDA-graph replay figure where the search recorded one (the engine's footing: its decode graph
    runs every layer's attention back to back), else the gate's.

    >>> micro_figure({"winner_ms": 0.05, "graph": {"winner_ms": 0.04, "footing": "graph replay, 50 calls"}})
    (0.04, 'graph replay, 50 calls')
    >>> micro_figure({"winner_ms": 0.05})
    (0.05, 'the gate (per call)')
    """
    graph = row.get("graph") or {}
    if graph.get("winner_ms"):
        return graph["winner_ms"], graph.get("footing", "graph replay")
    return row.get("winner_ms"), "the gate (per call)"


def refined_figures(
    winners: dict[tuple[int, int], tuple[float | None, str]], manifest: dict[str, Any]
) -> dict[tuple[int, int], tuple[float | None, str]]:
    """The micro figures of a package whose decode entries `decode_reduce_h200.py --refine`
    replaced: each changed (batch, context)'s figure divided by the speedup the refinement
    measured on the same footing, the footing saying so.

    >>> m = {"provenance": {"refined_on_graph_footing": {"changes": [{"batch": 1, "context": 32768, "speedup": 1.04}]}}}
    >>> got = refined_figures({(1, 32768): (0.026, "graph replay"), (4, 16384): (0.04, "graph replay")}, m)
    >>> round(got[(1, 32768)][0], 6), got[(1, 32768)][1], got[(4, 16384)]
    (0.025, 'graph replay; entry refined: 1.040x faster replayed back to back', (0.04, 'graph replay'))
    """
    changes = ((manifest.get("provenance") or {}).get("refined_on_graph_footing") or {}).get("changes") or []
    out = dict(winners)
    for c in changes:
        key = (int(c["batch"]), int(c["context"]))
        ms, footing = out.get(key, (None, "-"))
        if ms and c.get("speedup"):
            out[key] = (
                ms / c["speedup"],
                f"{footing}; entry refined: {c['speedup']:.3f}x faster replayed back to back",
            )
    return out


def kernel_predictions(row: dict[str, Any], layers: int) -> None:
    """The same Amdahl prediction on GPU kernel time per step (the profiler's, which repeats
    within about 1% between engine processes, where wall-clock steps differ by 15-45%), next to
    the measured kernel-time ratio; "missed" when they differ by more than a quarter of the gain.

    >>> r = {"micro_winner_ms": 0.05, "sglang_shipped": {"gpu_ms_per_step": 1.0, "attention_ms": 0.6},
    ...      "vs_sglang_shipped": {"kernel_time": 1.6}}
    >>> kernel_predictions(r, 4); round(r["vs_sglang_shipped"]["predicted_kernel_time"], 3)
    1.667
    >>> r["vs_sglang_shipped"]["missed_kernel_time"]
    False
    """
    micro = row.get("micro_winner_ms")
    for ref in ("sglang_shipped", "sglang_best_flag"):
        got = row.get(f"vs_{ref}")
        if got is None or ref not in row:
            continue
        pred = predicted_gain(
            row[ref].get("gpu_ms_per_step") or 0.0, row[ref].get("attention_ms"), layers * micro if micro else None
        )
        real = got.get("kernel_time")
        got["predicted_kernel_time"] = pred
        got["missed_kernel_time"] = bool(pred and real and abs(real - pred) > 0.25 * abs(pred - 1.0))


def explain_misses(row: dict[str, Any], layers: int) -> None:
    """Why a prediction missed, from the profiles: the predicted step is the reference's with
    its attention replaced by `layers` x the microbenchmark's winner, so the measured step
    differs from it by (a) the package's attention inside the engine against that figure (the
    graph runs the split and reduce kernels back to back; the microbenchmark times each call
    alone), (b) the rest of the GPU step, engine against engine, and, on wall clock, (c) the
    host time per step (wall minus GPU), engine against engine. Where the driver's kernel stage
    measured each engine's host time in its own process (`host_in_process_ms`: the same steps'
    wall clock there minus the GPU's busy time and its own gaps), (c) splits into the device's
    own gaps between kernels, engine against engine (`device_gaps_ms`: launch gaps inside the
    graph), what the engines do differently on the host (`engine_host_ms`) and what differed
    between the timed runs (`run_to_run_host_ms`: the rest; the host's states, not the package). A missed prediction
    gets `why_missed`: the terms in ms and the largest one for the GPU-time prediction ("gpu")
    and for the wall-clock one ("wall"), each where that prediction missed.

    >>> r = {"micro_winner_ms": 0.05, "evokernel": {"step_ms": 2.5, "gpu_ms_per_step": 1.0, "attention_ms": 0.1},
    ...      "sglang_shipped": {"step_ms": 3.0, "gpu_ms_per_step": 2.0, "attention_ms": 1.2},
    ...      "vs_sglang_shipped": {"missed": True, "missed_kernel_time": True}}
    >>> explain_misses(r, 4); w = r["vs_sglang_shipped"]["why_missed"]
    >>> w["wall"]
    'host time (wall minus GPU) between the engine processes'
    >>> w["gpu"]
    "the package's attention in the engine's graph against layers x the microbenchmark"
    >>> w["attention_vs_micro_ms"], w["rest_of_gpu_step_ms"], w["host_ms"]
    (-0.1, 0.1, 0.5)
    >>> r["evokernel"]["host_in_process_ms"], r["sglang_shipped"]["host_in_process_ms"] = 0.9, 0.85
    >>> r["evokernel"]["device_gap_ms"], r["sglang_shipped"]["device_gap_ms"] = 0.2, 0.1
    >>> explain_misses(r, 4); w = r["vs_sglang_shipped"]["why_missed"]
    >>> w["device_gaps_ms"], w["engine_host_ms"], w["run_to_run_host_ms"], w["wall"]
    (0.1, 0.05, 0.35, 'host time that differed between the timed runs, not between the engines')

    With the profiles' busy time (and the attention credited once), overlapping kernels are a
    term of their own: here the package's split kernels wait 0.3 ms a step under their
    predecessors, which its durations' sum (1.3) counts on top of its busy time (1.0); the
    terms still add up to measured minus predicted GPU time (1.3 - (2.0 - 1.2 + 0.2) = 0.3):

    >>> r["evokernel"].update(gpu_ms_per_step=1.3, busy_ms_per_step=1.0, attention_ms=0.5, attention_attributed_ms=0.2)
    >>> r["sglang_shipped"].update(busy_ms_per_step=2.0, attention_attributed_ms=1.2)
    >>> explain_misses(r, 4); w = r["vs_sglang_shipped"]["why_missed"]
    >>> w["attention_vs_micro_ms"], w["rest_of_gpu_step_ms"], w["overlap_ms"], w["gpu"].split(":")[0]
    (0.0, 0.0, 0.3, 'kernels overlapping (programmatic dependent launches)')
    """
    evo, micro = row.get("evokernel") or {}, row.get("micro_winner_ms")
    names = {
        "attention_vs_micro_ms": "the package's attention in the engine's graph against layers x the microbenchmark",
        "rest_of_gpu_step_ms": "the rest of the GPU step between the engines",
        "overlap_ms": "kernels overlapping (programmatic dependent launches): their durations' sum counts it twice",
        "host_ms": "host time (wall minus GPU) between the engine processes",
        "device_gaps_ms": "the device's own gaps between kernels (launches inside the graph) between the engines",
        "engine_host_ms": "host time the package's engine spends more per step (in each engine's own process)",
        "run_to_run_host_ms": "host time that differed between the timed runs, not between the engines",
    }
    for ref in ("sglang_shipped", "sglang_best_flag"):
        got, base = row.get(f"vs_{ref}"), row.get(ref) or {}
        if not got or not (got.get("missed") or got.get("missed_kernel_time")):
            continue
        need = (
            evo.get("gpu_ms_per_step"),
            evo.get("attention_ms"),
            base.get("gpu_ms_per_step"),
            base.get("attention_ms"),
        )
        if micro is None or any(x is None for x in need):
            got["why_missed"] = {"gpu": "not attributable: a profile is missing"}
            continue
        # with programmatic dependent launches kernels overlap: the durations' sum then counts the
        # overlap twice, so split it out (`overlap_ms`) and read attention and the rest on the
        # step's path (each instant credited once: `attention_attributed_ms`, `busy_ms_per_step`)
        overlap = None not in (evo.get("busy_ms_per_step"), base.get("busy_ms_per_step"))
        ev_att = evo.get("attention_attributed_ms") or evo["attention_ms"] if overlap else evo["attention_ms"]
        ba_att = base.get("attention_attributed_ms") or base["attention_ms"] if overlap else base["attention_ms"]
        ev_gpu = evo["busy_ms_per_step"] if overlap else evo["gpu_ms_per_step"]
        ba_gpu = base["busy_ms_per_step"] if overlap else base["gpu_ms_per_step"]
        terms: dict[str, Any] = {
            "attention_vs_micro_ms": round(ev_att - layers * micro, 4),
            "rest_of_gpu_step_ms": round((ev_gpu - ev_att) - (ba_gpu - ba_att), 4),
        }
        if overlap:
            terms["overlap_ms"] = round(
                (evo["gpu_ms_per_step"] - ev_gpu)
                - (base["gpu_ms_per_step"] - ba_gpu)
                + (base["attention_ms"] - ba_att),
                4,
            )
        gpu_terms = dict(terms)
        if evo.get("step_ms") and base.get("step_ms"):
            terms["host_ms"] = round(
                (evo["step_ms"] - evo["gpu_ms_per_step"]) - (base["step_ms"] - base["gpu_ms_per_step"]), 4
            )
            mine, theirs = evo.get("host_in_process_ms"), base.get("host_in_process_ms")
            gaps = (evo.get("device_gap_ms"), base.get("device_gap_ms"))
            if mine is not None and theirs is not None:
                terms["engine_host_ms"] = round(mine - theirs, 4)
                if None not in gaps:
                    terms["device_gaps_ms"] = round(gaps[0] - gaps[1], 4)
                terms["run_to_run_host_ms"] = round(
                    terms["host_ms"] - terms["engine_host_ms"] - terms.get("device_gaps_ms", 0.0), 4
                )
        if got.get("missed_kernel_time"):
            terms["gpu"] = names[max(gpu_terms, key=lambda k: abs(gpu_terms[k]))]
        if got.get("missed") and "host_ms" in terms:
            split = "engine_host_ms" in terms  # host_ms is then their sum: the parts compete, not the whole
            wall = {k: v for k, v in terms.items() if k in names and not (split and k == "host_ms")}
            terms["wall"] = names[max(wall, key=lambda k: abs(wall[k]))]
        got["why_missed"] = terms


def step_breakdown_markdown(ab: dict[str, Any]) -> list[str]:
    """Where each engine's decode step goes, measured in its own process by the driver's kernel
    stage (profiled steps, then the same steps timed without the profiler): wall clock, GPU
    kernel time, the device's own gaps between kernels and the host's share, and kernels per
    step. Empty where the stage did not record them (records before session 23).

    >>> ab = {"kernel_time": {"evokernel": {"b1": {"wall_ms_per_step": 2.0, "gpu_ms_per_step": 1.2,
    ...       "busy_ms_per_step": 1.2, "device_gap_ms_per_step": 0.2, "host_ms_per_step": 0.6,
    ...       "kernels_per_step": 150.0}}, "sglang_shipped": {"b1": {"gpu_ms_per_step": 5.0}}}}
    >>> print("\\n".join(step_breakdown_markdown(ab)))
    | variant | point | wall ms (in process) | GPU kernels ms | device gaps ms | host ms | kernels per step |
    |---|---|---|---|---|---|---|
    | evokernel | b1 | 2.000 | 1.200 | 0.200 | 0.600 | 150 |
    <BLANKLINE>
    """
    rows = [
        f"| {v} | {point} | {_f(k.get('wall_ms_per_step'))} | {_f(k.get('gpu_ms_per_step'))} | "
        f"{_f(k.get('device_gap_ms_per_step'))} | {_f(k.get('host_ms_per_step'))} | {k['kernels_per_step']:.0f} |"
        for v, per in ab.get("kernel_time", {}).items()
        for point, k in per.items()
        if k.get("wall_ms_per_step") is not None and k.get("kernels_per_step") is not None
    ]
    if not rows:
        return []
    head = "| variant | point | wall ms (in process) | GPU kernels ms | device gaps ms | host ms | kernels per step |"
    return [head, "|---" * 7 + "|", *rows, ""]


def prefill_kernels_markdown(
    ab: dict[str, Any], variants: tuple[str, ...] = ("sglang_shipped", "evokernel")
) -> list[str]:
    """What ran the prompts' prefill in each engine: the plugin's hook counters per engine and,
    per point, the prefill's GPU time and its three longest kernels (from the profiled prefill
    of the kernel stage).

    >>> ab = {"meta": {"hooks": {"evokernel": {"prefill_attention": {"template": 4, "fallback": 0}}}},
    ...       "kernel_time": {"evokernel": {"b4": {"prefill_gpu_ms": 90.0, "prefill_by_kernel": {"_gluon": 30.0}}}}}
    >>> print("\\n".join(prefill_kernels_markdown(ab)))
    hooks per engine (calls that ran evokernel's kernel / SGLang's, and why): evokernel: prefill_attention 4 / 0
    <BLANKLINE>
    | variant | point | prefill GPU ms | longest prefill kernels (ms) |
    |---|---|---|---|
    | evokernel | b4 | 90.00 | _gluon 30.00 |
    <BLANKLINE>
    """
    hooks = ab.get("meta", {}).get("hooks", {})
    parts = []
    for name, per_op in hooks.items():
        for op, st in per_op.items():
            why = f" ({st['why_not']})" if st.get("why_not") else ""
            err = f" errors: {st['errors']}" if st.get("errors") else ""
            checks = "".join(
                f"; checked against SGLang's kernel at {k}: max diff {c.get('max_err', float('nan')):.3g} "
                f"(its output's largest magnitude {c.get('ref_absmax', float('nan')):.3g}, {c.get('calls')} call(s))"
                + (f", check failed: {c['error']}" if c.get("error") else "")
                for k, c in st.get("checks", {}).items()
            )
            parts.append(f"{name}: {op} {st.get('template', 0)} / {st.get('fallback', 0)}{why}{err}{checks}")
    lines = [
        "hooks per engine (calls that ran evokernel's kernel / SGLang's, and why): " + ("; ".join(parts) or "none"),
        "",
    ]
    rows = []
    for v in variants:
        for point, k in ab.get("kernel_time", {}).get(v, {}).items():
            if not k.get("prefill_gpu_ms"):  # (none, or no durations recorded: not a time)
                continue
            top = list(k.get("prefill_by_kernel", {}).items())[:3]
            rows.append(
                f"| {v} | {point} | {k['prefill_gpu_ms']:.2f} | "
                + ", ".join(f"{n[:60]} {ms:.2f}" for n, ms in top)
                + " |"
            )
    if rows:
        lines += ["| variant | point | prefill GPU ms | longest prefill kernels (ms) |", "|---|---|---|---|", *rows, ""]
    return lines


def attention_stage_fields(report: ABReport, variant: str, point: str, kv_bytes: float) -> dict[str, Any]:
    """The attention's time per step split by stage (on its path: `ABReport.attention_ms`): the
    split kernel that reads the cache, the reduction of its splits, and the KV bytes over the
    split kernel's time alone as a fraction of the copy bandwidth (what reading the cache
    reaches apart from the second kernel's launch and work)."""
    from decode_roofline import COPY_BANDWIDTH

    s1, s2 = (report.attention_ms(variant, point, attributed=True, stage=k) for k in (1, 2))
    return {
        "attention_stage1_ms": s1,
        "attention_stage2_ms": s2,
        "attention_stage1_bw_fraction": kv_bytes / (s1 * 1e-3) / COPY_BANDWIDTH if s1 else None,
    }


def render(path: Path, layers: int) -> None:
    """Recompute the kernel-time predictions of a saved sglang_long.json and write its table."""
    from evokernel.evaluators.sglang import BASELINE, ABReport

    doc = json.loads(path.read_text())
    stages = ABReport(plan={}, kernels=doc.get("ab", {}).get("kernel_time", {}))
    for row in doc["rows"]:
        kernel_predictions(row, layers)
        explain_misses(row, layers)
        for v in (BASELINE, "sglang_best_flag", "evokernel"):
            if v in row and row[v].get("attention_stage1_ms") is None:  # (records from before the split)
                row[v].update(attention_stage_fields(stages, v, row["point"], row["kv_bytes"]))
    path.write_text(json.dumps(doc, indent=1))
    md = path.parent / "sglang_long.md"
    rest = md.read_text() if md.exists() else ""
    cut = rest.find("\npromotion (A/B verdicts")  # the table is replaced, the rest of the report kept
    md.write_text("\n".join(markdown(doc)) + "\n" + (rest[cut:] if cut >= 0 else ""))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default=os.environ.get("OUT", "long-out"))
    ap.add_argument("--model", required=True, help="model folder (config.json + tokenizer; dummy weights)")
    ap.add_argument("--problem-model", default="qwen3-30b-a3b", help="the decode problem's model (same heads)")
    ap.add_argument("--points", nargs="+", default=["1:32768", "4:16384", "8:8192", "16:8192", "32:4096"])
    ap.add_argument("--budget", type=int, default=14, help="evaluations per decode search")
    ap.add_argument("--search-deadline", type=float, default=180.0)
    ap.add_argument("--package", default=None, help="an exported package to use instead of searching")
    ap.add_argument("--micro", default=None, help="with --package: the searches' attention.json (for predictions)")
    ap.add_argument(
        "--prefill-from",
        default=None,
        metavar="JSON",
        help="a Gluon prefill record (prefill_gluon.json): its winners for the model's heads join the package",
    )
    ap.add_argument("--flags", nargs="*", type=int, default=[16, 32, 64], help=f"values of {FLAG} to sweep")
    ap.add_argument(
        "--tiles",
        nargs="*",
        type=int,
        default=[256],
        help=f"values of {TILE} to sweep (its cap on the splits: the context length over it)",
    )
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--best-of", type=int, default=2)
    ap.add_argument("--kernel-steps", type=int, default=16)
    ap.add_argument("--numerics-steps", type=int, default=32)
    ap.add_argument("--numerics-point", default="4:16384", metavar="B:CONTEXT", help="the numerics probe's point")
    ap.add_argument("--output-len", type=int, default=32)
    ap.add_argument("--mem", type=float, default=0.3, help="--mem-fraction-static of each engine")
    ap.add_argument("--max-total-tokens", type=int, default=140000)
    ap.add_argument("--no-control", action="store_true")
    ap.add_argument("--deadline", type=float, default=None, help="seconds for the whole script (rounds stop before)")
    ap.add_argument("--search-only", action="store_true", help="stop after the searches and the export")
    ap.add_argument("--serving", default=None, metavar="TRACE", help="then replay this trace through launched servers")
    ap.add_argument("--serving-prompts", type=int, default=40)
    ap.add_argument("--serving-rounds", type=int, default=2)
    ap.add_argument("--serving-control", action="store_true", help="a second shipped server (the A/A)")
    ap.add_argument(
        "--serving-chunk",
        type=int,
        default=None,
        metavar="TOKENS",
        help="every server's --chunked-prefill-size (-1: no chunking): SGLang's default 8192 gives each "
        "later chunk of a long prompt a cached prefix, which the prefill hook leaves to SGLang's kernel",
    )
    ap.add_argument("--skip-ab", action="store_true", help="with --package: only the serving comparison")
    ap.add_argument("--render", default=None, metavar="JSON", help="only recompute and re-render a saved result")
    args = ap.parse_args()
    if args.render:
        model_cfg = json.loads((Path(args.model) / "config.json").read_text())
        render(Path(args.render), int(model_cfg["num_hidden_layers"]))
        return
    t0 = time.monotonic()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    work = Path("/tmp/evokernel-long")
    work.mkdir(parents=True, exist_ok=True)
    points = parse_points(args.points)
    doc: dict[str, Any] = {
        "command": " ".join([Path(sys.argv[0]).name, *sys.argv[1:]]),
        "points": [list(p) for p in points],
        "stages": {},
    }

    def save() -> None:
        (out / "sglang_long.json").write_text(json.dumps(doc, indent=1))

    # 1. the decode searches (page 1: SGLang's cache)
    micro: dict[str, Any] = {"rows": []}
    if args.package is None:
        attn = work / "attn"
        specs = [f"{args.problem_model}:{b}:{c}" for b, c in points]
        subprocess.run(
            [sys.executable, str(ROOT / "benchmarks" / "attention_h200.py"), "--out", str(attn), "--decode", *specs,
             "--page", "1", "--budget", str(args.budget), "--deadline", str(args.search_deadline)],
            check=False,
        )  # fmt: skip
        if (attn / "attention.json").exists():
            micro = json.loads((attn / "attention.json").read_text())
            shutil.copy(attn / "attention.json", out / "attention.json")
            shutil.copy(attn / "attention.md", out / "attention.md")
        doc["stages"]["search_s"] = round(time.monotonic() - t0, 1)

        # 2. export
        import torch
        import triton

        from evokernel.integrations.sglang.export import sglang_plugin_package
        from evokernel.store import SQLiteStore

        package = out / "package"
        sglang_plugin_package(
            SQLiteStore(attn / "attention.db"),
            package,
            device_name=torch.cuda.get_device_name(),
            triton_version=triton.__version__,
            kernel=False,
            seed_shipped=False,
        )
        if (attn / "attention.db").exists():
            shutil.copy(attn / "attention.db", out / "attention.db")
    else:
        package = Path(args.package)
        if args.micro:
            micro = json.loads(Path(args.micro).read_text())
    if args.prefill_from:
        # the Gluon prefill winners recorded for the model's heads join the package (a copy):
        # each entry a change the promotion judges on the prefill latency of the prompts it serves
        from evokernel.integrations.sglang.export import add_prefill_table, prefill_entries_from_record
        from evokernel.judge.problem import load_module

        mod = load_module(ROOT / "examples" / "problems" / "attention_prefill_bf16.py")
        heads = {name: tuple(m[:4]) for name, m in mod.MODELS.items() if name == args.problem_model}
        entries = prefill_entries_from_record(json.loads(Path(args.prefill_from).read_text()), heads)
        if entries:
            if (out / "package").resolve() != package.resolve():
                shutil.rmtree(out / "package", ignore_errors=True)
                shutil.copytree(package, out / "package")
                package = out / "package"
            add_prefill_table(package, entries, provenance={"record": str(args.prefill_from)})
        doc["prefill_entries"] = {str(k): sorted(v) for k, v in entries.items()}
    doc["package"] = json.loads((package / "kernels" / "decode_attention.json").read_text())
    doc["micro"] = [
        {k: r.get(k) for k in ("spec", "shape", "winner_short", "winner_ms", "baselines", "speedup", "rate")}
        for r in micro.get("rows", [])
    ]
    save()
    if args.search_only:
        print(json.dumps({"package": doc["package"], "micro": doc["micro"]}, indent=1), flush=True)
        return

    # 3. engines side by side
    from decode_roofline import COPY_BANDWIDTH, bound_ms, decode_bytes

    model = json.loads((Path(args.model) / "config.json").read_text())
    from evokernel.evaluators.sglang import BASELINE, CONTROL, SGLangEvaluator, Variant, ab_markdown

    argv = [
        "--model-path", args.model, "--load-format", "dummy", "--tp-size", "1",
        "--attention-backend", "triton", "--sampling-backend", "pytorch", "--moe-runner-backend", "triton",
        "--grammar-backend", "none", "--disable-flashinfer-autotune", "--cuda-graph-backend-prefill", "disabled",
        "--context-length", str(model.get("max_position_embeddings", 40960)),
        "--mem-fraction-static", str(args.mem), "--max-total-tokens", str(args.max_total_tokens),
        "--max-running-requests", str(max(b for b, _ in points)),  # as the issue's flag sweep ran
    ]  # fmt: skip
    flag_variants: dict[str, Any] = {f"sglang_kv{f}": Variant(args=(FLAG, str(f))) for f in args.flags}
    flag_variants.update({f"sglang_tile{t}": Variant(args=(TILE, str(t))) for t in args.tiles})
    ev = SGLangEvaluator(
        argv,
        decode_points=points,
        output_len=args.output_len,
        prefill_lens=(),
        repeats=args.repeats,
        best_of=args.best_of,
        kernel_steps=args.kernel_steps,
        numerics_steps=args.numerics_steps,
        control=not args.no_control,
        log_dir=work / "logs",
        load_timeout_s=240,
        run_timeout_s=180,
        # the report after the engines needs a few seconds
        deadline_s=args.deadline - (time.monotonic() - t0) - 20 if args.deadline else None,
        # a long point whose prompt a 4096-token prefill entry serves (within 4x) and whose batch a
        # decode entry serves: the first step's logits then come from the package's prefill kernel
        # and the last decode step's from its decode kernel
        numerics_point=parse_points([args.numerics_point])[0],
    )
    # the promotion cascade's end-to-end stage: the package's changes in attributable groups
    # (a decode table's entries serve one batch size each: one group, the whole package, named
    # "evokernel"), beside shipped, its A/A control and the flag sweep; dead ends go to the
    # knowledge base and the promoted package is written to out/promoted
    import torch
    import triton

    from evokernel.integrations.sglang.promote import promote
    from evokernel.store import SQLiteStore

    if args.skip_ab:
        first = (FLAG, str(args.flags[0])) if args.flags else (TILE, str(args.tiles[0])) if args.tiles else None
        serving(args, argv, package, flag_args=first, out=out, work=work, doc=doc)
        save()
        return
    t1 = time.monotonic()
    promotion = promote(
        ev,
        package,
        out / "promoted",
        work=work / "variants",
        store=SQLiteStore(out / "knowledge.db"),
        gpu=torch.cuda.get_device_name() if torch.cuda.is_available() else "cpu",
        toolchain={"triton": triton.__version__, "torch": torch.__version__},
        extra=flag_variants,
        name="evokernel",
        composite=("sglang_best_flag", [BASELINE, *flag_variants]),
        # every round's samples saved as they land: a call killed at its limit keeps them
        progress=lambda rep: (out / "sglang_long_partial.json").write_text(json.dumps(rep.to_json(), indent=1)),
    )
    doc["stages"]["ab_s"] = round(time.monotonic() - t1, 1)
    report, ab = promotion.report, promotion.ab
    doc["ab"] = ab
    doc["promotion"] = promotion.to_json()

    # 4. per point: shares, bandwidth, prediction against measurement
    winners: dict[tuple[int, int], tuple[float | None, str]] = {}
    for r in micro.get("rows", []):
        _, b, c = r["spec"].split(":")[:3]
        winners[(int(b), int(c))] = micro_figure(r)
    manifest = Path(package) / "manifest.json"
    if manifest.exists():  # entries refined on the engine's footing since the search
        winners = refined_figures(winners, json.loads(manifest.read_text()))
    layers = int(model["num_hidden_layers"])
    rows = []
    paired = ab["paired"]["decode_throughput"].get("evokernel", {})
    paired_best = ab["paired"].get("decode_throughput_vs_sglang_best_flag", {}).get("evokernel", {})
    control = ab["paired"]["decode_throughput"].get(CONTROL, {})
    kt = ab.get("kernel_time_ratio", {})
    busy = ab.get("busy_time_ratio", {})  # the same on the time some kernel ran (overlaps counted once)
    for b, c in points:
        p = f"b{b}_i{c}_o{args.output_len}"
        need = decode_bytes(model, batch=b, context=c + args.output_len // 2)  # midway through the timed steps
        row: dict[str, Any] = {
            "point": p,
            "batch": b,
            "context": c,
            "kv_bytes": decode_bytes(model, batch=b, context=c)["kv"],
            "step_bytes": need,
            "step_bound_ms": bound_ms(need["total"]),
        }
        for v in (BASELINE, "sglang_best_flag", "evokernel"):
            runs = report.samples.get(v, {}).get(p, [])
            lat = sorted(x["median_decode_latency"] for x in runs if "median_decode_latency" in x)
            att = report.attention_ms(v, p)
            # its busy time credited once (`kernel_attribution`): a split kernel launched early beside
            # the kernel before it counts from when that one ends, not while it waited under it
            att_on_path = report.attention_ms(v, p, attributed=True)
            kt_v = report.kernels.get(v, {}).get(p, {})
            kern = kt_v.get("gpu_ms_per_step")
            row[v] = {
                "step_ms": 1e3 * lat[len(lat) // 2] if lat else None,
                "gpu_ms_per_step": kern,
                "busy_ms_per_step": kt_v.get("busy_ms_per_step"),
                # the step's wall clock split in the engine's own process (the driver's kernel stage)
                "host_in_process_ms": kt_v.get("host_ms_per_step"),
                "device_gap_ms": kt_v.get("device_gap_ms_per_step"),
                "attention_ms": att,
                "attention_attributed_ms": att_on_path,
                "attention_share": att / kern if att is not None and kern else None,
                # KV bytes over the attention's time on the step's path (equal to its kernels' durations
                # where nothing overlaps them); over the durations' sum beside it
                "attention_bw_fraction": row["kv_bytes"] / (att_on_path * 1e-3) / COPY_BANDWIDTH
                if att_on_path
                else None,
                "attention_bw_fraction_durations": row["kv_bytes"] / (att * 1e-3) / COPY_BANDWIDTH if att else None,
                **attention_stage_fields(report, v, p, row["kv_bytes"]),
                # the whole step against the bytes it must read (weights touched + KV)
                "step_bound_fraction": row["step_bound_ms"] / (1e3 * lat[len(lat) // 2]) if lat else None,
            }
        row["best_flag"] = report.meta.get("composite", {}).get("sglang_best_flag", {}).get(p)
        micro_ms, row["micro_footing"] = winners.get((b, c), (None, "-"))
        row["micro_winner_ms"] = micro_ms
        for ref in (BASELINE, "sglang_best_flag"):
            step = row[ref]["step_ms"]
            pred = (
                predicted_gain(step, row[ref]["attention_ms"], layers * micro_ms if micro_ms else None)
                if step
                else None
            )
            real = (paired if ref == BASELINE else paired_best).get(p, {}).get("median")
            row[f"vs_{ref}"] = {
                "paired": (paired if ref == BASELINE else paired_best).get(p),
                "kernel_time": kt.get(ref, {}).get("evokernel", {}).get(p),
                "busy_time": busy.get(ref, {}).get("evokernel", {}).get(p),
                "predicted": pred,
                "realized": real,
                "missed": bool(pred and real and abs(real - pred) > 0.25 * abs(pred - 1.0)),
            }
        row["control"] = control.get(p)
        # the prompt's prefill (one extend of b x c tokens): paired latency ratio against shipped
        row["prefill"] = {
            v: (lambda xs: 1e3 * xs[len(xs) // 2] if xs else None)(
                sorted(x["prefill_latency"] for x in report.samples.get(v, {}).get(p, []) if "prefill_latency" in x)
            )
            for v in (BASELINE, "evokernel")
        }
        row["prefill"]["paired"] = ab["paired"].get("prefill_speedup", {}).get("evokernel", {}).get(p)
        kernel_predictions(row, layers)
        explain_misses(row, layers)
        rows.append(row)
    doc["rows"] = rows
    doc["geomean"] = {
        "sglang_shipped": {
            "long_context": ab["geomean"][BASELINE].get("evokernel"),
            "paired": paired.get("geomean"),
            "kernel_time": kt.get(BASELINE, {}).get("evokernel", {}).get("geomean"),
            "busy_time": busy.get(BASELINE, {}).get("evokernel", {}).get("geomean"),
        },
        "sglang_best_flag": {
            "long_context": ab["geomean"].get("sglang_best_flag", {}).get("evokernel"),
            "paired": paired_best.get("geomean"),
            "kernel_time": kt.get("sglang_best_flag", {}).get("evokernel", {}).get("geomean"),
            "busy_time": busy.get("sglang_best_flag", {}).get("evokernel", {}).get("geomean"),
        },
        "best_flag_vs_shipped": ab["geomean"][BASELINE].get("sglang_best_flag"),
    }
    if args.serving:
        # one server per engine can run one flag value: SGLang's best over the points (geomean)
        by_flag = {v: g for v, g in ab["geomean"][BASELINE].items() if v in flag_variants and g}
        best = max(by_flag, key=lambda v: by_flag[v]) if by_flag else None
        flag_args = tuple(flag_variants[best].args) if best and by_flag[best] > 1.0 else None
        shipped = promotion.package or package  # the promoted package (nothing promoted: the full one, flagged)
        doc["serving_package"] = "promoted" if promotion.package else "full (nothing promoted)"
        serving(args, argv, shipped, flag_args=flag_args, out=out, work=work, doc=doc)
    doc["stages"]["total_s"] = round(time.monotonic() - t0, 1)
    save()
    by_verdict: dict[str, list[str]] = {}
    for d in doc["promotion"]["decisions"]:
        by_verdict.setdefault(d["verdict"], []).append(f"{d['op']} b{d['batch']}" if d["batch"] else d["key"])
    numerics = [
        f"{v}: logits within tolerance {n.get('ok')} (prefill max diff {n.get('max_logit_diff', float('nan')):.3g}, "
        f"bound {n.get('bound', float('nan')):.3g}; last decode step at context {n.get('context')} max diff "
        f"{n.get('max_decode_logit_diff', float('nan')):.3g}, bound {n.get('decode_bound', float('nan')):.3g}); "
        f"greedy tokens agree {n.get('token_agreement', float('nan')):.3f} over "
        f"{args.numerics_steps} steps, first divergent step {n.get('first_divergent_step')}"
        for v, n in ab.get("numerics", {}).items()
        if "reason" not in n or n.get("ok")
    ] + [f"{v}: numerics failed: {n['reason']}" for v, n in ab.get("numerics", {}).items() if not n.get("ok")]
    lines = (
        markdown(doc)
        + [f"\npromotion (A/B verdicts per change): {by_verdict}", "", "numerics against shipped:", *numerics, ""]
        + prefill_kernels_markdown(ab)
        + step_breakdown_markdown(ab)
        + ab_markdown(ab)
    )
    (out / "sglang_long.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines), flush=True)
    for name in ab["errors"]:
        log = work / "logs" / f"{name}.log"
        if log.exists():
            print(f"---- {name}.log (tail) ----\n" + log.read_text()[-3000:], flush=True)


def serving_args(argv: list[str], chunk: int | None = None) -> list[str]:
    """The servers' shared arguments from the engines': without the memory share (the serving
    comparison sets its own) and, with `chunk`, SGLang's chunked prefill at that size for every
    server (-1: none, so a whole prompt reaches one prefill call).

    >>> serving_args(["--model-path", "m", "--mem-fraction-static", "0.45", "--tp", "1"], -1)
    ['--model-path', 'm', '--tp', '1', '--chunked-prefill-size', '-1']
    """
    server = list(argv)
    if "--mem-fraction-static" in server:
        i = server.index("--mem-fraction-static")
        del server[i : i + 2]
    return server + (["--chunked-prefill-size", str(chunk)] if chunk is not None else [])


def serving(
    args: argparse.Namespace,
    argv: list[str],
    package: Path,
    *,
    flag_args: tuple[str, ...] | None,
    out: Path,
    work: Path,
    doc: dict[str, Any],
) -> None:
    """The serving comparison on the trace: SGLang as shipped, SGLang at a flag's value
    (`flag_args`), and SGLang with the package, as launched servers (`ServingComparison`)."""
    from evokernel.evaluators.sglang import Variant
    from evokernel.evaluators.sglang_serving import ServingComparison
    from evokernel.model.workload import Trace

    variants: dict[str, Any] = {"evokernel": Variant(package=package)}
    if flag_args:
        variants["sglang_best_flag"] = Variant(args=flag_args)
    server = serving_args(argv, args.serving_chunk)
    t = time.monotonic()
    cmp = ServingComparison(
        server,
        Trace.load(args.serving),
        rounds=args.serving_rounds,
        control=args.serving_control,
        num_prompts=args.serving_prompts,
        log_dir=work / "serving",
        mem=args.mem,
        load_timeout_s=240,
        run_timeout_s=150,  # a replay: the trace's span plus its drain
    )
    # every replay's figures saved as they land: a call killed at its limit keeps them
    partial = out / "sglang_long_serving_partial.json"
    got = cmp.compare(variants, progress=lambda doc: partial.write_text(json.dumps(doc, indent=1)))
    got["elapsed_s"] = round(time.monotonic() - t, 1)
    doc["serving"] = got
    (out / "sglang_long_serving.json").write_text(json.dumps(got, indent=1))
    print(json.dumps({"serving": got.get("vs_baseline"), "errors": got.get("errors")}, indent=1), flush=True)


def _f(x: float | None, fmt: str = ".3f") -> str:
    return "-" if x is None or (isinstance(x, float) and math.isnan(x)) else format(x, fmt)


def markdown(doc: dict[str, Any]) -> list[str]:
    lines = [
        "| point | shipped step ms | best flag | best-flag step ms | evokernel step ms | wall vs shipped: paired [95%] "
        "| predicted | wall vs best flag: paired [95%] | predicted | GPU time vs shipped (predicted) "
        "| GPU time vs best flag (predicted) | A/A (wall) | attention ms "
        "(shipped / best / evokernel) | evokernel attention BW | step vs its byte bound (shipped / evokernel) |",
        "|---" * 15 + "|",
    ]
    for r in doc["rows"]:

        def pair(ref: str) -> str:
            got = r[f"vs_{ref}"]["paired"]
            return f"{got['median']:.3f} [{got['low']:.3f}, {got['high']:.3f}] {got['verdict']}" if got else "-"

        def kt(ref: str) -> str:
            got = r[f"vs_{ref}"]
            miss = " missed" if got.get("missed_kernel_time") else ""
            return f"{_f(got.get('kernel_time'))} ({_f(got.get('predicted_kernel_time'))}{miss})"

        def on_path(v: dict[str, Any]) -> str:  # where overlapping launches make the two differ
            a, b = v.get("attention_ms"), v.get("attention_attributed_ms")
            return f" ({_f(b)} on its path)" if a and b and abs(a - b) > 0.005 * a else ""

        def stage1(v: dict[str, Any]) -> str:  # the split kernel alone, where the record has it
            got = v.get("attention_stage1_bw_fraction")
            return f" (split kernel {got:.2f})" if got and v.get("attention_stage2_ms") else ""

        aa = r["control"]
        aa_text = f"[{aa['low']:.3f}, {aa['high']:.3f}]" if aa else "-"
        lines.append(
            f"| b{r['batch']} x {r['context']} | {_f(r['sglang_shipped']['step_ms'])} | {r['best_flag'] or '-'} | "
            f"{_f(r['sglang_best_flag']['step_ms'])} | {_f(r['evokernel']['step_ms'])} | {pair('sglang_shipped')} | "
            f"{_f(r['vs_sglang_shipped']['predicted'])}{' (missed)' if r['vs_sglang_shipped']['missed'] else ''} | "
            f"{pair('sglang_best_flag')} | {_f(r['vs_sglang_best_flag']['predicted'])}"
            f"{' (missed)' if r['vs_sglang_best_flag']['missed'] else ''} | "
            f"{kt('sglang_shipped')} | {kt('sglang_best_flag')} | "
            f"{aa_text} | "
            f"{_f(r['sglang_shipped']['attention_ms'])} / {_f(r['sglang_best_flag']['attention_ms'])} / "
            f"{_f(r['evokernel']['attention_ms'])}{on_path(r['evokernel'])} | "
            f"{_f(r['evokernel']['attention_bw_fraction'], '.2f')}{stage1(r['evokernel'])} | "
            f"{_f(r['sglang_shipped']['step_bound_fraction'], '.2f')} / "
            f"{_f(r['evokernel']['step_bound_fraction'], '.2f')} |"
        )
    pre = [r for r in doc["rows"] if r.get("prefill")]
    if pre:
        lines += [
            "",
            "| point | prefill ms shipped | prefill ms evokernel | paired prefill speedup [95%] |",
            "|---|---|---|---|",
        ]
        for r in pre:
            got = r["prefill"].get("paired")
            pair = f"{got['median']:.3f} [{got['low']:.3f}, {got['high']:.3f}] {got['verdict']}" if got else "-"
            lines.append(
                f"| b{r['batch']} x {r['context']} | {_f(r['prefill'].get('sglang_shipped'), '.1f')} | "
                f"{_f(r['prefill'].get('evokernel'), '.1f')} | {pair} |"
            )
    g = doc["geomean"]
    lines.append(
        f"\ngeomean decode throughput (wall clock): vs shipped {_f(g['sglang_shipped']['long_context'])}, "
        f"vs best flag {_f(g['sglang_best_flag']['long_context'])}; GPU kernel time per step: vs shipped "
        f"{_f(g['sglang_shipped']['kernel_time'])}, vs best flag {_f(g['sglang_best_flag']['kernel_time'])} "
        f"(the time some kernel ran, overlaps once: {_f(g['sglang_shipped'].get('busy_time'))} / "
        f"{_f(g['sglang_best_flag'].get('busy_time'))}); best flag vs shipped {_f(g['best_flag_vs_shipped'])}"
    )
    footings = sorted({r["micro_footing"] for r in doc["rows"] if r.get("micro_footing")})
    if footings:
        lines.append(f"predictions from the microbenchmark's winner timed as: {'; '.join(footings)}")
    why = []
    for r in doc["rows"]:
        for ref in ("sglang_shipped", "sglang_best_flag"):
            w = (r.get(f"vs_{ref}") or {}).get("why_missed")
            if w:
                terms = ", ".join(f"{k[:-3].replace('_', ' ')} {v:+.3f} ms" for k, v in w.items() if k.endswith("_ms"))
                causes = "; ".join(f"{kind}: {w[kind]}" for kind in ("gpu", "wall") if kind in w)
                why.append(f"- b{r['batch']} x {r['context']} vs {ref}: {causes}" + (f" ({terms})" if terms else ""))
    if why:
        lines += [
            "",
            "Missed predictions, measured step minus predicted step by cause (positive: slower than predicted):",
            *why,
        ]
    return lines


if __name__ == "__main__":
    main()
