"""Gather the device calls' result files into the machine-readable files the issues name:
`benchmarks/results/{gemm,moe,attention_prefill,attention_decode}.json`.

Each device call writes its own JSON (under benchmarks/results/call*/); a shape measured by
several calls keeps the latest call's row (the calls are listed oldest first). Every row
says which call and command produced it, and `geomean` (baseline -> the winner's geometric
mean speedup over it) is recomputed over the rows kept. The figures are not comparable
across calls to the percent (the H200 drifts between calls): within a row, the winner and
its baselines were measured together, interleaved, in one call.

    python benchmarks/collect_results.py          # rewrites the four files from SOURCES
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
sys.path.insert(0, str(ROOT / "benchmarks"))
from _common import geomean  # noqa: E402

#: output -> [(call, file under benchmarks/results, row filter)], oldest call first
SOURCES: dict[str, list[tuple[str, str, str | None]]] = {
    "gemm": [("M", "callM/gemm.json", None), ("N", "callN/gemm/gemm.json", None), ("P", "callP/gemm/gemm.json", None),
             ("W", "callW/g0/gemm/gemm.json", None), ("X", "callX/g0/gemm/gemm.json", None), ("Z1", "callZ1/gemm/gemm.json", None),
             ("Z2", "callZ2/mid/gemm.json", None), ("Z2", "callZ2/edge/gemm.json", None),
             ("Z3", "callZ3/qwen/gemm.json", None), ("Z3", "callZ3/mid512/gemm.json", None),
             ("AF", "callAF/mid/gemm.json", None), ("AG", "callAG/g1/gemm.json", None),
             ("AG", "callAG/g2/gemm.json", None), ("BA", "callBA/weak/gemm.json", None),
             ("BC", "callBC/q/gemm.json", None), ("BD", "callBD/g/gemm.json", None),
             ("BE", "callBE/g/gemm.json", None), ("S11c", "call_s11c/g/gemm.json", None),
             ("S11d", "call_s11d/h/gemm.json", None), ("S13b", "call_s13b/g/gemm.json", None)],
    "moe": [("N", "callN/moe.log", None), ("S", "callS/g0/moe.json", None), ("T", "callT/g1/moe/moe.json", None),
            ("U", "callU/g0/moe_qwen.json", None), ("U", "callU/g0/moe_mixtral.json", None),
            ("W", "callW/g0/moe_small/moe.json", None), ("W", "callW/g0/moe_ds/moe.json", None),
            ("Z4", "callZ4/moe/moe.json", None), ("AA", "callAA/moe/moe.json", None),
            ("AF", "callAF/moe/moe.json", None), ("AG", "callAG/ds/moe.json", None),
            ("AH", "callAH/ds/moe.json", None), ("BB", "callBB/ds/moe.json", None)],
    # (a later call adds its files here, oldest first)
    "attention_prefill": [("N", "callN/attn/attention.json", "prefill"), ("O", "callO/attn/attention.json", "prefill"),
                          ("T", "callT/g0/attn/attention.json", "prefill")],
    "attention_decode": [("N", "callN/attn/attention.json", "decode"), ("O", "callO/attn/attention.json", "decode"),
                         ("T", "callT/g0/attn/attention.json", "decode")],
}
#: commands of calls whose JSON did not come back (a call returns 8 files): their rows are
#: read from the log's one-line JSON summaries (no winner genome there, its short form only)
LOG_COMMANDS = {"callN/moe.log": "moe_h200.py --out $OUT/moe --models qwen3-30b-a3b mixtral-8x7b --ms 1 16 64 256 "
                                 "1024 4096 --budget 16 --deadline 190"}
#: the baselines each file's `geomean` reports (as the issues name them)
GEOMEAN = {"gemm": ["cublas", "triton_default"], "moe": ["sglang_default", "sglang_h200"],
           "attention_prefill": ["best_sdpa", "sdpa_cudnn", "sdpa_flash", "triton_default"],
           "attention_decode": ["sglang_default", "sdpa_gathered"]}
#: re-measurements of every row's winner and baselines on both footings, graph-replayed and called
#: eagerly (benchmarks/footing_h200.py), oldest first: a row measured there takes these figures
#: (the search call's own stay under the row's `recorded`)
FOOTING: dict[str, list[tuple[str, str]]] = {
    # S12a: the templates launched through Triton's JIT; S12b: through the compiled handles
    # (evokernel.runtime.launch; its MoE file did not come back); S12c: also below Triton 3.6's launcher
    # wrapper for kernels with descriptors; S12d (GEMM): for every kernel; S13a: tensors passed as
    # pointers, CUtensorMaps per pointer; S13b: GemmLauncher's direct path, and the eight rows
    # under 0.95 graph-replayed searched again under the graph footing (call S13b's searches)
    "gemm": [("S12a", "footing/s12a/footing_gemm.json"), ("S12b", "footing/s12b/footing_gemm.json"),
             ("S12c", "footing/s12c/footing_gemm.json"), ("S12d", "footing/s12d/footing_gemm.json"),
             ("S13a", "footing/s13a/footing_gemm.json"), ("S13b", "footing/s13b/footing_gemm.json")],
    "moe": [("S12a", "footing/s12a/footing_moe.json"), ("S12c", "footing/s12c/footing_moe.json")],
    "attention_prefill": [("S12a", "footing/s12a/footing_attention.json"),
                          ("S12b", "footing/s12b/footing_attention.json"),
                          ("S12c", "footing/s12c/footing_attention.json")],
    "attention_decode": [("S12a", "footing/s12a/footing_decode.json"), ("S12b", "footing/s12b/footing_decode.json"),
                         ("S12c", "footing/s12c/footing_decode.json")],
}
#: host time per eager call of every GEMM row's winner against torch.matmul's on the same shape
#: (benchmarks/launch_overhead.py: interleaved rounds, the difference paired per round), latest
#: call last: each row gets `host_launch` from the latest call that measured its winner
LAUNCH: list[tuple[str, str]] = [("S13c", "footing/s13c/launch_overhead.json"),
                                 ("S14a", "footing/s14a/launch_overhead.json")]
#: candidates a footing file times for the record that are not baselines (the winner through
#: another launch path): reported as host time, never as a speedup
DIAGNOSTIC = {"winner_gemm_call"}
#: the issues' names for some baselines
ALIAS = {"attention_decode": {"sglang_default": "split_kv_default", "sdpa_gathered": "sdpa"},
         "attention_prefill": {"best_sdpa": "sdpa_best"}}


def _key(kind: str, row: dict[str, Any]) -> tuple:
    if kind == "gemm":
        return (row["model"], row["layer"], row["M"])
    if kind == "moe":
        return (row["model"], row["M"])
    return (row["model"], row.get("shape") or row["spec"])


def _footed(kind: str, row: dict[str, Any], f: dict[str, Any], call: str, command: str) -> dict[str, Any]:
    """The row with the figures of its footing re-measurement: `speedup` (graph-replayed, both
    sides), `speedup_eager` (both sides called eagerly), `timing` (how, host time per call),
    the search call's own figures kept under `recorded`."""
    g, e = f["graph"], f["eager"]
    keep = lambda d: {n: v for n, v in d.items() if n not in DIAGNOSTIC}  # noqa: E731
    speed, eager = keep(g["speedup"]), keep(e["speedup"])
    out = {k: v for k, v in row.items() if k not in ("tflops", "rate")}
    out["recorded"] = row.get("recorded") or {  # (the search call's own, not an earlier footing call's)
        k: row.get(k) for k in ("winner_ms", "baselines", "speedup", "tflops", "rate", "call", "best_sdpa",
                                "best_sdpa_ms") if k in row}
    if kind == "attention_prefill":  # the fastest SDPA backend on each footing
        for d in (speed, eager):
            sdpa = {n: v for n, v in d.items() if n.startswith("sdpa_") and v}
            if sdpa:
                d["best_sdpa"] = min(sdpa.values())
        sdpa_ms = {n: v for n, v in g["ms"].items() if n.startswith("sdpa_")}
        out["best_sdpa"] = min(sdpa_ms, key=sdpa_ms.get) if sdpa_ms else None
        out["best_sdpa_ms"] = sdpa_ms.get(out["best_sdpa"]) if sdpa_ms else None
    out.update(
        winner_ms=g["ms"]["winner"], baselines=keep({n: v for n, v in g["ms"].items() if n != "winner"}),
        speedup=speed, speedup_eager=eager, eager_ms=keep(e["ms"]),
        errors=dict(f.get("errors") or {}),
        timing={"mode": "graph", "graph": g["footing"], "eager": e["footing"], "host_us": e["host_us"]["winner"],
                "host_us_all": e["host_us"], "speedup_ci": g.get("speedup_ci"),
                "speedup_eager_ci": e.get("speedup_ci"), "clocks": g.get("clocks"), "call": call,
                "command": command},
        call=call,
    )
    if kind == "gemm":
        out["tflops"] = 2.0 * row["M"] * row["N"] * row["K"] / (out["winner_ms"] * 1e-3) / 1e12
    return out


def apply_footing(kind: str, rows: dict[tuple, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Every row re-measured in a footing call takes that call's figures (the latest call's
    per row). Returns the footing calls used (call -> file, command, date)."""
    used: dict[str, dict[str, Any]] = {}
    for call, rel in FOOTING.get(kind, []):
        path = RESULTS / rel
        if not path.exists():
            continue
        doc = json.loads(path.read_text())
        for f in doc.get("rows", []):
            key = _key(kind, f)
            if key not in rows or "error" in f.get("graph", {"error": 1}) or "error" in f.get("eager", {"error": 1}):
                continue
            rows[key] = _footed(kind, rows[key], f, call, doc.get("command", ""))
            used[call] = {"file": rel, "command": doc.get("command"), "date": doc.get("date")}
    kept = {r.get("timing", {}).get("call") for r in rows.values()}  # the latest call per row
    return {c: v for c, v in used.items() if c in kept}


def apply_launch(rows: list[dict[str, Any]]) -> dict[str, Any] | None:
    """Each GEMM row's host time per eager call against torch.matmul's (`LAUNCH`: the latest
    call that measured the row's winner at its shape) as `host_launch`; the summary over the
    rows: the issue's target is launcher - matmul <= 10 us at every row."""
    by_key: dict[tuple, dict[str, Any]] = {}
    calls: dict[str, dict[str, Any]] = {}
    for call, rel in LAUNCH:
        path = RESULTS / rel
        if not path.exists():
            continue
        doc = json.loads(path.read_text())
        calls[call] = {"file": rel, "command": doc.get("command"), "date": doc.get("date")}
        for r in doc.get("rows", []):
            if "error" not in r:
                by_key[(r["model"], r["layer"], r["M"], r["N"], r["K"], json.dumps(r["winner"], sort_keys=True))] = \
                    dict(r, call=call, target_us=doc.get("target_us"))
    over = []
    used = set()
    for row in rows:
        winner = {k: int(v) for k, v in (row.get("winner") or {}).items()}
        m = by_key.get((row.get("model"), row.get("layer"), row["M"], row["N"], row["K"],
                        json.dumps(winner, sort_keys=True)))
        if m is None:
            row.pop("host_launch", None)
            continue
        row["host_launch"] = {"matmul_us": m["matmul_host_us"], "launcher_us": m["launcher_host_us"],
                              "over_matmul_us": m["over_matmul_us"], "within_target": m["within_target"],
                              "bitwise_gemm": m["same_as_gemm"], "call": m["call"]}
        over.append(m["over_matmul_us"])
        used.add(m["call"])
    if not over:
        return None
    return {"rows": len(over), "within_10us": sum(x <= 10.0 for x in over), "max_over_matmul_us": max(over),
            "median_over_matmul_us": sorted(over)[len(over) // 2], "calls": {c: calls[c] for c in sorted(used)}}


def collect(kind: str) -> dict[str, Any] | None:
    rows: dict[tuple, dict[str, Any]] = {}
    sources: dict[str, dict[str, Any]] = {}
    device = None
    for call, rel, only in SOURCES[kind]:
        path = RESULTS / rel
        if not path.exists():
            continue
        if path.suffix == ".log":
            doc = {"command": LOG_COMMANDS.get(rel), "rows": [json.loads(line) for line in path.read_text().splitlines()
                                                             if line.startswith('{"model"')]}
        else:
            doc = json.loads(path.read_text())
        device = doc.get("device", device)
        sources[call] = {"file": rel, "command": doc.get("command"), "date": doc.get("date")}
        for row in doc.get("rows", []):
            if only and row.get("kind") != only:
                continue
            if not row.get("winner_ms") or not any(row.get("speedup", {}).values()):
                continue  # a row whose baselines failed says nothing about the target
            same = row.get("winner_is_baseline")
            if same and row["speedup"].get(same):  # the winner is that baseline: 1.0 (older rows kept the noise)
                row = dict(row, speedup=dict(row["speedup"], **{same: 1.0}))
            rows[_key(kind, row)] = dict(row, call=call)
    if not rows:
        return None
    footing = apply_footing(kind, rows)
    kept = list(rows.values())
    used = {r.get("recorded", {}).get("call") or r["call"] for r in kept}  # the search calls
    sources = {c: v for c, v in sources.items() if c in used}  # the calls whose rows were kept
    alias = ALIAS.get(kind, {})
    gm = {alias.get(b, b): geomean([r["speedup"].get(b) for r in kept]) for b in GEOMEAN[kind]}
    # the same per model (the "geometric mean over M" read model by model)
    by_model = {m: {alias.get(b, b): geomean([r["speedup"].get(b) for r in kept if r.get("model") == m])
                    for b in GEOMEAN[kind]} for m in sorted({r.get("model") for r in kept if r.get("model")})}
    doc = {"device": device, "date": max(s["date"] or "" for s in [*sources.values(), *footing.values()]),
           "command": "; ".join(f"call {c}: {s['command']}" for c, s in [*sources.items(), *footing.items()]),
           "sources": sources, "footing": footing,
           "note": "per row, the winner the latest search call found at the shape; its figures, where a footing call "
                   "re-measured it (`timing`), are that call's: the winner and its baselines timed together, "
                   "interleaved, graph-replayed (`speedup`, `winner_ms`, `baselines`) and called eagerly "
                   "(`speedup_eager`, `eager_ms`, `timing.host_us`: the winner's host time per call), each side "
                   "timed the same way; the search call's own figures under `recorded` (benchmarks/collect_results.py)",
           "rows": kept, "geomean": gm, "geomean_by_model": by_model}
    if any("speedup_eager" in r for r in kept):
        doc["geomean_eager"] = {alias.get(b, b): geomean([r.get("speedup_eager", {}).get(b) for r in kept])
                                for b in GEOMEAN[kind]}
    if kind == "gemm":  # the issue's targets: M >= 256, and the winners' host time over cuBLAS's
        big = [r for r in kept if r["M"] >= 256]
        doc["geomean_m256"] = {b: geomean([r["speedup"].get(b) for r in big]) for b in GEOMEAN[kind]}
        doc["geomean_eager_m256"] = {b: geomean([r.get("speedup_eager", {}).get(b) for r in big])
                                     for b in GEOMEAN[kind]}
        over = [r["timing"]["host_us"] - r["timing"]["host_us_all"]["cublas"] for r in kept
                if r.get("timing") and r["timing"]["host_us_all"].get("cublas")]
        doc["host_us_over_cublas"] = {"max": max(over, default=None),
                                      "median": sorted(over)[len(over) // 2] if over else None, "rows": len(over)}
        doc["host_launch"] = apply_launch(kept)
    return doc


def main() -> None:
    for kind in SOURCES:
        doc = collect(kind)
        if doc is None:
            print(f"{kind}: no source file")
            continue
        (RESULTS / f"{kind}.json").write_text(json.dumps(doc, indent=1))
        print(f"{kind}: {len(doc['rows'])} rows from calls {', '.join(doc['sources'])}, footing "
              f"{', '.join(doc['footing']) or '-'}; geomean "
              + ", ".join(f"{b} {v:.3f}" for b, v in doc["geomean"].items() if v)
              + ("; eager " + ", ".join(f"{b} {v:.3f}" for b, v in doc["geomean_eager"].items() if v)
                 if doc.get("geomean_eager") else ""))


if __name__ == "__main__":
    main()
