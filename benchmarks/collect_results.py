"""Merge a device call's result file into the record, `benchmarks/results/<kind>.json`
(kind: gemm, moe, attention_prefill, attention_decode).

The record keeps one row per shape: the latest call's. Each row says which call and command
produced it (`call`, `command`); the summary figures (`geomean` and the like: baseline ->
the winners' geometric mean speedup over it) are recomputed over the rows kept. The figures
are not comparable across calls to the percent (the H200 drifts between calls): within a
row, the winner and its baselines were measured together, interleaved, in one call.

Three kinds of file are merged, told apart by their rows:

- a search (`gemm_h200.py`, `moe_h200.py`, `attention_h200.py`): its rows replace the
  record's at the same shape;
- a footing re-measurement (`footing_h200.py`: rows with `graph` and `eager`): each row of
  the record it re-measured takes its figures (graph-replayed and eager), the search's own
  kept under `recorded`;
- a launch-overhead run (`launch_overhead.py`, GEMM only): each row whose winner it timed
  gets `host_launch` (host time per eager call against torch.matmul's).

    python benchmarks/collect_results.py --add gemm $OUT/gemm/gemm.json --call S15a
    python benchmarks/collect_results.py --add gemm $OUT/footing_gemm.json --call S15b
    python benchmarks/collect_results.py --summary        # only recompute every record's summary

The raw files of the calls before this merge form (`sources[*].file`, `footing[*].file`) are
in git history at the commit the record's `raw_files` names.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from evokernel.engine.tuning import geomean

RESULTS = Path(__file__).resolve().parents[1] / "benchmarks" / "results"
KINDS = ("gemm", "moe", "attention_prefill", "attention_decode")
#: the baselines each record's `geomean` reports (as the issues name them)
GEOMEAN = {
    "gemm": ["cublas", "triton_default"],
    "moe": ["sglang_default", "sglang_h200"],
    "attention_prefill": ["best_sdpa", "sdpa_cudnn", "sdpa_flash", "triton_default"],
    "attention_decode": ["sglang_default", "sdpa_gathered"],
}
#: candidates a footing file times for the record that are not baselines (the winner through
#: another launch path): reported as host time, never as a speedup
DIAGNOSTIC = {"winner_gemm_call"}
#: the issues' names for some baselines
ALIAS = {
    "attention_decode": {"sglang_default": "split_kv_default", "sdpa_gathered": "sdpa"},
    "attention_prefill": {"best_sdpa": "sdpa_best"},
}
#: an attention file holds both kinds of rows (`kind`: prefill or decode)
ROW_KIND = {"attention_prefill": "prefill", "attention_decode": "decode"}
NOTE = (
    "per row, the winner the latest search call found at the shape; its figures, where a footing call "
    "re-measured it (`timing`), are that call's: the winner and its baselines timed together, "
    "interleaved, graph-replayed (`speedup`, `winner_ms`, `baselines`) and called eagerly "
    "(`speedup_eager`, `eager_ms`, `timing.host_us`: the winner's host time per call), each side "
    "timed the same way; the search call's own figures under `recorded` (benchmarks/collect_results.py)"
)


def _key(kind: str, row: dict[str, Any]) -> tuple:
    if kind == "gemm":
        return (row["model"], row["layer"], row["M"])
    if kind == "moe":
        return (row["model"], row["M"])
    return (row["model"], row.get("shape") or row["spec"])


def file_kind(doc: dict[str, Any]) -> str:
    """ "footing", "launch" or "search": what made the file, read from its rows."""
    rows = doc.get("rows") or []
    if any("graph" in r and "eager" in r for r in rows):
        return "footing"
    if any("launcher_host_us" in r or "over_matmul_us" in r for r in rows):
        return "launch"
    return "search"


def _winner(row: dict[str, Any]) -> str:
    return json.dumps({k: int(v) for k, v in (row.get("winner") or {}).items()}, sort_keys=True)


def add_search(kind: str, record: dict[str, Any], doc: dict[str, Any], call: str, file: str) -> int:
    """The file's rows replace the record's at the same shape (new shapes are appended).
    Returns the number of rows taken."""
    rows = {_key(kind, r): r for r in record.get("rows", [])}
    taken = 0
    for row in doc.get("rows", []):
        if ROW_KIND.get(kind) and row.get("kind", ROW_KIND[kind]) != ROW_KIND[kind]:
            continue
        if not row.get("winner_ms") or not any((row.get("speedup") or {}).values()):
            continue  # a row whose baselines failed says nothing about the target
        same = row.get("winner_is_baseline")
        if same and row["speedup"].get(same):  # the winner is that baseline: 1.0 (older rows kept the noise)
            row = dict(row, speedup=dict(row["speedup"], **{same: 1.0}))
        row = dict(row, call=call, command=doc.get("command"))
        old = rows.get(_key(kind, row))
        if (
            old
            and old.get("host_launch")
            and _winner(old) == _winner(row)
            and (old.get("N"), old.get("K")) == (row.get("N"), row.get("K"))
        ):
            row["host_launch"] = old["host_launch"]  # the same kernel at the same shape: its launch still holds
        rows[_key(kind, row)] = row
        taken += 1
    record["rows"] = list(rows.values())
    record["device"] = doc.get("device", record.get("device"))
    record.setdefault("sources", {})[call] = {"file": file, "command": doc.get("command"), "date": doc.get("date")}
    return taken


def _footed(kind: str, row: dict[str, Any], f: dict[str, Any], call: str, command: str) -> dict[str, Any]:
    """The row with the figures of its footing re-measurement: `speedup` (graph-replayed, both
    sides), `speedup_eager` (both sides called eagerly), `timing` (how, host time per call),
    the search call's own figures kept under `recorded`."""
    g, e = f["graph"], f["eager"]
    keep = lambda d: {n: v for n, v in d.items() if n not in DIAGNOSTIC}  # noqa: E731
    speed, eager = keep(g["speedup"]), keep(e["speedup"])
    out = {k: v for k, v in row.items() if k not in ("tflops", "rate")}
    out["recorded"] = row.get("recorded") or {  # (the search call's own, not an earlier footing call's)
        k: row.get(k)
        for k in ("winner_ms", "baselines", "speedup", "tflops", "rate", "call", "command", "best_sdpa", "best_sdpa_ms")
        if k in row
    }
    if kind == "attention_prefill":  # the fastest SDPA backend on each footing
        for d in (speed, eager):
            sdpa = {n: v for n, v in d.items() if n.startswith("sdpa_") and v}
            if sdpa:
                d["best_sdpa"] = min(sdpa.values())
        sdpa_ms = {n: v for n, v in g["ms"].items() if n.startswith("sdpa_")}
        out["best_sdpa"] = min(sdpa_ms, key=sdpa_ms.get) if sdpa_ms else None
        out["best_sdpa_ms"] = sdpa_ms.get(out["best_sdpa"]) if sdpa_ms else None
    out.update(
        winner_ms=g["ms"]["winner"],
        baselines=keep({n: v for n, v in g["ms"].items() if n != "winner"}),
        speedup=speed,
        speedup_eager=eager,
        eager_ms=keep(e["ms"]),
        errors=dict(f.get("errors") or {}),
        timing={
            "mode": "graph",
            "graph": g["footing"],
            "eager": e["footing"],
            "host_us": e["host_us"]["winner"],
            "host_us_all": e["host_us"],
            "speedup_ci": g.get("speedup_ci"),
            "speedup_eager_ci": e.get("speedup_ci"),
            "clocks": g.get("clocks"),
            "call": call,
            "command": command,
        },
        call=call,
        command=command,
    )
    if kind == "gemm":
        out["tflops"] = 2.0 * row["M"] * row["N"] * row["K"] / (out["winner_ms"] * 1e-3) / 1e12
    return out


def add_footing(kind: str, record: dict[str, Any], doc: dict[str, Any], call: str, file: str) -> int:
    """Every row of the record the file re-measured (both footings without error) takes its
    figures. Returns the number of rows re-measured."""
    rows = {_key(kind, r): r for r in record.get("rows", [])}
    taken = 0
    for f in doc.get("rows", []):
        key = _key(kind, f)
        if key not in rows or "error" in f.get("graph", {"error": 1}) or "error" in f.get("eager", {"error": 1}):
            continue
        rows[key] = _footed(kind, rows[key], f, call, doc.get("command", ""))
        taken += 1
    record["rows"] = list(rows.values())
    if taken:
        record.setdefault("footing", {})[call] = {"file": file, "command": doc.get("command"), "date": doc.get("date")}
    return taken


def add_launch(record: dict[str, Any], doc: dict[str, Any], call: str, file: str) -> int:
    """Each GEMM row whose winner the file timed at its shape gets `host_launch`: its host
    time per eager call against torch.matmul's. Returns the number of rows matched."""
    timed = {}
    for r in doc.get("rows", []):
        if "error" not in r:
            timed[(r["model"], r["layer"], r["M"], r["N"], r["K"], _winner(r))] = r
    taken = 0
    for row in record.get("rows", []):
        m = timed.get((row.get("model"), row.get("layer"), row["M"], row["N"], row["K"], _winner(row)))
        if m is None:
            continue
        row["host_launch"] = {
            "matmul_us": m["matmul_host_us"],
            "launcher_us": m["launcher_host_us"],
            "over_matmul_us": m["over_matmul_us"],
            "within_target": m["within_target"],
            "bitwise_gemm": m["same_as_gemm"],
            "call": call,
        }
        # (the JIT path's host time, and the spread of the paired per-round differences, where timed)
        row["host_launch"].update(
            {
                k: m[src]
                for k, src in (("gemm_us", "gemm_host_us"), ("over_matmul_spread_us", "over_matmul_spread_us"))
                if m.get(src) is not None
            }
        )
        taken += 1
    if taken:
        calls = record.setdefault("launch_calls", {})
        calls[call] = {
            "file": file,
            "command": doc.get("command"),
            "date": doc.get("date"),
            **{k: doc[k] for k in ("n", "reps", "target_us", "torch", "triton", "summary") if k in doc},
        }
    return taken


def summarize(kind: str, record: dict[str, Any]) -> dict[str, Any]:
    """The record with its summary recomputed over its rows: the calls still in use, the
    date, the command, the geometric means (all, per model, eager; GEMM: at M >= 256, the
    winners' host time over cuBLAS's, the launch-overhead summary)."""
    kept = record.get("rows", [])
    used = {r.get("recorded", {}).get("call") or r["call"] for r in kept}  # the search calls
    sources = {c: v for c, v in record.get("sources", {}).items() if c in used}
    footed = {r.get("timing", {}).get("call") for r in kept}
    footing = {c: v for c, v in record.get("footing", {}).items() if c in footed}
    alias = ALIAS.get(kind, {})
    gm = {alias.get(b, b): geomean([r["speedup"].get(b) for r in kept]) for b in GEOMEAN[kind]}
    # the same per model (the "geometric mean over M" read model by model)
    by_model = {
        m: {alias.get(b, b): geomean([r["speedup"].get(b) for r in kept if r.get("model") == m]) for b in GEOMEAN[kind]}
        for m in sorted({r.get("model") for r in kept if r.get("model")})
    }
    doc: dict[str, Any] = {
        "device": record.get("device"),
        "date": max((s["date"] or "" for s in [*sources.values(), *footing.values()]), default=""),
        "command": "; ".join(f"call {c}: {s['command']}" for c, s in [*sources.items(), *footing.items()]),
        "sources": sources,
        "footing": footing,
        "note": NOTE,
    }
    if record.get("raw_files"):
        doc["raw_files"] = record["raw_files"]
    doc.update(rows=kept, geomean=gm, geomean_by_model=by_model)
    if any("speedup_eager" in r for r in kept):
        doc["geomean_eager"] = {
            alias.get(b, b): geomean([r.get("speedup_eager", {}).get(b) for r in kept]) for b in GEOMEAN[kind]
        }
    if kind == "gemm":  # the issue's targets: M >= 256, and the winners' host time over cuBLAS's
        big = [r for r in kept if r["M"] >= 256]
        doc["geomean_m256"] = {b: geomean([r["speedup"].get(b) for r in big]) for b in GEOMEAN[kind]}
        doc["geomean_eager_m256"] = {
            b: geomean([r.get("speedup_eager", {}).get(b) for r in big]) for b in GEOMEAN[kind]
        }
        # (a footed row's timing: a search's own row has only the gate's footing there)
        over = [
            r["timing"]["host_us"] - r["timing"]["host_us_all"]["cublas"]
            for r in kept
            if (r.get("timing") or {}).get("host_us_all", {}).get("cublas")
        ]
        doc["host_us_over_cublas"] = {
            "max": max(over, default=None),
            "median": sorted(over)[len(over) // 2] if over else None,
            "rows": len(over),
        }
        doc["host_launch"] = _launch_summary(kept, record)
    return doc


def _launch_summary(rows: list[dict[str, Any]], record: dict[str, Any]) -> dict[str, Any] | None:
    """Over the rows with `host_launch`: how many within the issue's target (launcher -
    matmul <= 10 us), the largest and the median difference, the calls that measured them."""
    launched = [r["host_launch"] for r in rows if r.get("host_launch")]
    if not launched:
        return None
    over = [h["over_matmul_us"] for h in launched]
    known = {**((record.get("host_launch") or {}).get("calls") or {}), **record.get("launch_calls", {})}
    used = {h["call"] for h in launched}
    return {
        "rows": len(over),
        "within_10us": sum(x <= 10.0 for x in over),
        "max_over_matmul_us": max(over),
        "median_over_matmul_us": sorted(over)[len(over) // 2],
        "calls": {c: known.get(c, {}) for c in sorted(used)},
    }


def add(kind: str, record: dict[str, Any], doc: dict[str, Any], call: str, file: str) -> tuple[str, int, dict]:
    """Merge one result file (`doc`) into `record`; returns (the file's kind, rows it
    changed, the record summarized)."""
    what = file_kind(doc)
    if what == "launch" and kind != "gemm":
        raise SystemExit(f"a launch-overhead file goes into the gemm record, not {kind}")
    n = {
        "search": lambda: add_search(kind, record, doc, call, file),
        "footing": lambda: add_footing(kind, record, doc, call, file),
        "launch": lambda: add_launch(record, doc, call, file),
    }[what]()
    return what, n, summarize(kind, record)


def _line(kind: str, doc: dict[str, Any]) -> str:
    gm = ", ".join(f"{b} {v:.3f}" for b, v in doc["geomean"].items() if v)
    eager = doc.get("geomean_eager") or {}
    return (
        f"{kind}: {len(doc['rows'])} rows from calls {', '.join(doc['sources']) or '-'}, footing "
        f"{', '.join(doc['footing']) or '-'}; geomean {gm}"
        + ("; eager " + ", ".join(f"{b} {v:.3f}" for b, v in eager.items() if v) if eager else "")
    )


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument(
        "--add", nargs=2, metavar=("KIND", "FILE"), help=f"merge FILE into the KIND record ({', '.join(KINDS)})"
    )
    ap.add_argument("--call", help="the call's name for the rows it gives (e.g. S15a); needed with --add")
    ap.add_argument("--summary", action="store_true", help="recompute every record's summary")
    ap.add_argument("--results", type=Path, default=RESULTS, help="the folder of the records (default: %(default)s)")
    args = ap.parse_args(argv)
    if args.add:
        kind, file = args.add
        if kind not in KINDS:
            ap.error(f"KIND is one of {', '.join(KINDS)}, not {kind!r}")
        if not args.call:
            ap.error("--add needs --call (the name its rows are recorded under)")
        path = args.results / f"{kind}.json"
        record = json.loads(path.read_text()) if path.exists() else {"rows": []}
        what, n, doc = add(kind, record, json.loads(Path(file).read_text()), args.call, str(file))
        path.write_text(json.dumps(doc, indent=1))
        print(f"{file}: a {what} file, {n} rows of {kind} from call {args.call}")
        print(_line(kind, doc))
    elif args.summary:
        for kind in KINDS:
            path = args.results / f"{kind}.json"
            if path.exists():
                doc = summarize(kind, json.loads(path.read_text()))
                path.write_text(json.dumps(doc, indent=1))
                print(_line(kind, doc))
    else:
        ap.error("say --add KIND FILE --call NAME, or --summary")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
