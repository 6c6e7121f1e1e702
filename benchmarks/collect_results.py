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
             ("S11d", "call_s11d/h/gemm.json", None)],
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
#: the issues' names for some baselines
ALIAS = {"attention_decode": {"sglang_default": "split_kv_default", "sdpa_gathered": "sdpa"},
         "attention_prefill": {"best_sdpa": "sdpa_best"}}


def _key(kind: str, row: dict[str, Any]) -> tuple:
    if kind == "gemm":
        return (row["model"], row["layer"], row["M"])
    if kind == "moe":
        return (row["model"], row["M"])
    return (row["model"], row.get("shape") or row["spec"])


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
    kept = list(rows.values())
    used = {r["call"] for r in kept}
    sources = {c: v for c, v in sources.items() if c in used}  # the calls whose rows were kept
    alias = ALIAS.get(kind, {})
    gm = {alias.get(b, b): geomean([r["speedup"].get(b) for r in kept]) for b in GEOMEAN[kind]}
    # the same per model (the "geometric mean over M" read model by model)
    by_model = {m: {alias.get(b, b): geomean([r["speedup"].get(b) for r in kept if r.get("model") == m])
                    for b in GEOMEAN[kind]} for m in sorted({r.get("model") for r in kept if r.get("model")})}
    return {"device": device, "date": max(s["date"] or "" for s in sources.values()),
            "command": "; ".join(f"call {c}: {s['command']}" for c, s in sources.items()), "sources": sources,
            "note": "per row, the latest call that measured the shape; the winner and its baselines were measured "
                    "together in that call (benchmarks/collect_results.py)",
            "rows": kept, "geomean": gm, "geomean_by_model": by_model}


def main() -> None:
    for kind in SOURCES:
        doc = collect(kind)
        if doc is None:
            print(f"{kind}: no source file")
            continue
        (RESULTS / f"{kind}.json").write_text(json.dumps(doc, indent=1))
        print(f"{kind}: {len(doc['rows'])} rows from calls {', '.join(doc['sources'])}; geomean "
              + ", ".join(f"{b} {v:.3f}" for b, v in doc["geomean"].items() if v))


if __name__ == "__main__":
    main()
