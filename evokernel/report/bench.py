"""The benchmark view: the records in `benchmarks/results/` (written by
`benchmarks/collect_results.py`) as one page: per shape the winner against each baseline
(graph-replayed and eager where a footing call recorded both), the geomeans, and the
winners' rates against the H200's peaks (790 TFLOP/s bf16, 4.3 TB/s).

A record is a JSON file whose `rows` carry `winner_ms` and `baselines` (gemm, moe,
attention_prefill, attention_decode); a file with only a flat `geomean` (model_level) joins
the geomean figure; anything else is listed as skipped, with why.
"""

from __future__ import annotations

import html
import json
import math
from pathlib import Path
from typing import Any

import pandas as pd
import plotly.graph_objects as go

from evokernel.core._html import html_table
from evokernel.judge.hardware import PEAKS
from evokernel.report.figures import Figure, color as _c, note_figure
from evokernel.report.html import figure_block, page

__all__ = ["Records", "load_records", "speedup_frame", "rate_frame", "geomean_frame", "bench_figures", "write_bench"]

H200 = PEAKS["NVIDIA H200"]
PEAK_TFLOPS = H200.flops("bfloat16") / 1e12  # 790
PEAK_GBS = H200.bytes / 1e9  # 4300


class Records:
    """What a results folder holds: the records by kind, flat geomeans, and what was skipped."""

    def __init__(self) -> None:
        self.rows: dict[str, list[dict[str, Any]]] = {}
        self.geomeans: dict[str, dict[str, float]] = {}  # kind -> baseline -> geomean speedup (graph)
        self.geomeans_eager: dict[str, dict[str, float]] = {}
        self.skipped: list[tuple[str, str]] = []  # (file, why)


def load_records(folder: str | Path) -> Records:
    out = Records()
    for path in sorted(Path(folder).iterdir()):
        if not path.is_file():
            continue
        if path.suffix != ".json":
            out.skipped.append((path.name, "not a JSON record (raw call logs and notes are not drawn)"))
            continue
        try:
            doc = json.loads(path.read_text())
        except (OSError, ValueError) as exc:
            out.skipped.append((path.name, f"unreadable: {exc}"))
            continue
        kind = path.stem
        rows = doc.get("rows") if isinstance(doc, dict) else None
        if rows and all(isinstance(r, dict) and "winner_ms" in r and "baselines" in r for r in rows):
            out.rows[kind] = rows
        elif not (isinstance(doc, dict) and _flat(doc.get("geomean"))):
            out.skipped.append((path.name, "unknown kind: no rows with a winner and baselines, no flat geomean"))
            continue
        if isinstance(doc, dict) and _flat(doc.get("geomean")):
            out.geomeans[kind] = {k: float(v) for k, v in doc["geomean"].items() if isinstance(v, (int, float))}
        if isinstance(doc, dict) and _flat(doc.get("geomean_eager")):
            out.geomeans_eager[kind] = {
                k: float(v) for k, v in doc["geomean_eager"].items() if isinstance(v, (int, float))
            }
    return out


def _flat(x: Any) -> bool:
    return isinstance(x, dict) and bool(x) and all(isinstance(v, (int, float)) or v is None for v in x.values())


def shape_label(kind: str, row: dict[str, Any]) -> str:
    if "layer" in row:
        return f"{row.get('model')} {row['layer']} M={row.get('M')}"
    if "topk" in row:
        return f"{row.get('model')} M={row.get('M')}"
    if "spec" in row or "shape" in row:
        return f"{row.get('model')} {row.get('shape') or row.get('spec')}"
    return str(row.get("model", "?"))


def speedup_frame(rec: Records) -> pd.DataFrame:
    """Per kind, shape and baseline: the winner's speedup, graph-replayed and eager."""
    out = []
    for kind, rows in rec.rows.items():
        for r in rows:
            eager = r.get("speedup_eager") or {}
            for base, s in (r.get("speedup") or {}).items():
                if not isinstance(s, (int, float)):
                    continue
                ms = (r.get("baselines") or {}).get(base)
                out.append(
                    {
                        "kind": kind,
                        "shape": shape_label(kind, r),
                        "baseline": base,
                        "winner_ms": r.get("winner_ms"),
                        "baseline_ms": ms if isinstance(ms, (int, float)) else math.nan,
                        "speedup": float(s),
                        "speedup_eager": float(eager[base]) if isinstance(eager.get(base), (int, float)) else math.nan,
                    }
                )
    return pd.DataFrame(
        out, columns=["kind", "shape", "baseline", "winner_ms", "baseline_ms", "speedup", "speedup_eager"]
    )


def _work(kind: str, r: dict[str, Any]) -> list[tuple[str, float]]:
    """(metric, work per call: FLOPs or bytes) of a row's shape, where the kind says how."""
    if "layer" in r and all(k in r for k in ("M", "N", "K")):
        return [("TFLOP/s", 2.0 * r["M"] * r["N"] * r["K"])]
    if "topk" in r and all(k in r for k in ("M", "N", "H", "E")):
        m, n, h, e, k = r["M"], r["N"], r["H"], r["E"], r["topk"]
        experts = e * (1 - (1 - 1 / e) ** (m * k))  # expected experts touched: their weights are read
        return [("TFLOP/s", 6.0 * m * k * n * h), ("GB/s", experts * 3.0 * n * h * 2)]
    rec = r.get("recorded") or {}
    rate, ms = (r.get("rate"), r.get("search_ms")) if r.get("rate") else (rec.get("rate"), rec.get("winner_ms"))
    if isinstance(rate, (int, float)) and isinstance(ms, (int, float)):
        metric = "TFLOP/s" if r.get("kind") == "prefill" else "GB/s"
        return [(metric, rate * (1e12 if metric == "TFLOP/s" else 1e9) * ms * 1e-3)]
    return []


def rate_frame(rec: Records) -> pd.DataFrame:
    """Per kind and shape: the winner's rate (TFLOP/s or GB/s) and its share of the H200's peak."""
    out = []
    for kind, rows in rec.rows.items():
        for r in rows:
            ms = r.get("winner_ms")
            if not isinstance(ms, (int, float)) or ms <= 0:
                continue
            for metric, work in _work(kind, r):
                value = work / (ms * 1e-3) / (1e12 if metric == "TFLOP/s" else 1e9)
                peak = PEAK_TFLOPS if metric == "TFLOP/s" else PEAK_GBS
                out.append(
                    {"kind": kind, "shape": shape_label(kind, r), "metric": metric, "value": value,
                     "peak": peak, "percent_of_peak": 100 * value / peak}
                )  # fmt: skip
    return pd.DataFrame(out, columns=["kind", "shape", "metric", "value", "peak", "percent_of_peak"])


def geomean_frame(rec: Records) -> pd.DataFrame:
    out = []
    for kind, g in rec.geomeans.items():
        eager = rec.geomeans_eager.get(kind, {})
        for base, v in g.items():
            out.append({"kind": kind, "baseline": base, "geomean": v, "geomean_eager": eager.get(base, math.nan)})
    return pd.DataFrame(out, columns=["kind", "baseline", "geomean", "geomean_eager"])


_LAYOUT: dict[str, Any] = dict(template="plotly_white", margin=dict(l=60, r=20, t=40, b=140))


def _speedups(kind: str, sp: pd.DataFrame) -> go.Figure:
    fig = go.Figure()
    for i, (base, b) in enumerate(sp.groupby("baseline", sort=True)):
        fig.add_trace(go.Bar(x=b["shape"], y=b.speedup, name=f"{base} (graph)", offsetgroup=base, marker_color=_c(i)))
        if b.speedup_eager.notna().any():
            fig.add_trace(
                go.Scatter(
                    x=b["shape"], y=b.speedup_eager, mode="markers", name=f"{base} (eager)",
                    marker=dict(symbol="diamond-open", size=9, color=_c(i), line=dict(width=2)),
                )
            )  # fmt: skip
    fig.add_hline(y=1.0, line_dash="dot", line_color="grey")
    fig.update_layout(**_LAYOUT, height=460, barmode="group", yaxis_title="winner's speedup over the baseline")
    return fig


def _geomeans(gm: pd.DataFrame) -> go.Figure:
    if gm.empty:
        return note_figure("no record holds a geomean")
    labels = gm.kind + ": " + gm.baseline
    fig = go.Figure(go.Bar(x=labels, y=gm.geomean, name="graph", marker_color=_c(0)))
    if gm.geomean_eager.notna().any():
        fig.add_trace(go.Bar(x=labels, y=gm.geomean_eager, name="eager", marker_color=_c(1)))
    fig.add_hline(y=1.0, line_dash="dot", line_color="grey")
    fig.update_layout(**_LAYOUT, height=460, barmode="group", yaxis_title="geomean speedup")
    return fig


def _rates(rt: pd.DataFrame) -> go.Figure:
    if rt.empty:
        return note_figure("no row says enough of its shape to compute a rate")
    fig = go.Figure()
    for i, ((kind, metric), r) in enumerate(rt.groupby(["kind", "metric"], sort=True)):
        fig.add_trace(
            go.Bar(
                x=r["shape"] + " (" + metric + ")", y=r.percent_of_peak, name=f"{kind} {metric}", marker_color=_c(i),
                customdata=r.value, hovertemplate="%{x}: %{customdata:.0f} " + metric + " (%{y:.1f}% of peak)<extra></extra>",
            )
        )  # fmt: skip
    fig.update_layout(**_LAYOUT, height=560, barmode="overlay", yaxis_title="% of the H200's peak")
    return fig


def bench_figures(rec: Records) -> list[Figure]:
    sp, rt, gm = speedup_frame(rec), rate_frame(rec), geomean_frame(rec)
    figs = [
        Figure("bench-geomean", "summary", "Geomean speedup of the winners per baseline", "Per record and baseline: "
               "the winners' geometric-mean speedup, graph-replayed and eager where recorded (>1: the winner is faster).",
               _geomeans(gm)),
        Figure("bench-rates", "summary", "Winners against the H200's peaks", f"Each winner's rate as a share of "
               f"{PEAK_TFLOPS:.0f} TFLOP/s (bf16) or {PEAK_GBS / 1000:.1f} TB/s. MoE: FLOPs of the routed tokens, and bytes "
               "of the experts' weights expected to be touched (an estimate).", _rates(rt)),
    ]  # fmt: skip
    for kind in rec.rows:
        figs.append(
            Figure(
                f"bench-speedup-{kind}", kind, f"{kind}: the winner against each baseline, per shape",
                "Bars: graph-replayed speedup; open diamonds: called eagerly (where a footing call timed both).",
                _speedups(kind, sp[sp.kind == kind]),
            )
        )  # fmt: skip
    return figs


def bench_page(rec: Records, figs: list[Figure]) -> str:
    by: dict[str, list[str]] = {}
    for f in figs:
        by.setdefault(f.section, []).append(figure_block(f))
    gm = geomean_frame(rec)
    summary = "".join(by.get("summary", [])) + html_table(
        ["kind", "baseline", "geomean (graph)", "geomean (eager)"], gm.itertuples(index=False, name=None)
    ).replace("<table>", '<table id="table-geomeans">', 1)
    sections = [("summary", "Summary", summary)]
    sp = speedup_frame(rec)
    for kind in rec.rows:
        table = sp[sp.kind == kind].drop(columns="kind")
        sections.append(
            (
                kind,
                kind,
                "".join(by.get(kind, [])) + html_table(list(table.columns), table.itertuples(index=False, name=None)),
            )
        )
    if rec.skipped:
        items = "".join(f"<li><code>{html.escape(f)}</code>: {html.escape(why)}</li>" for f, why in rec.skipped)
        sections.append(
            (
                "skipped",
                "Not drawn",
                f'<p class="note">Files in the folder this view does not draw:</p><ul id="skipped">{items}</ul>',
            )
        )
    return page("evokernel benchmarks", sections, subtitle=f"{sum(len(r) for r in rec.rows.values())} shapes;")


def write_bench(folder: str | Path, out: str | Path, *, png: str | Path | None = None) -> Path:
    """Write the benchmark view of the records in `folder` to `out` (and PNGs to `png`)."""
    rec = load_records(folder)
    figs = bench_figures(rec)
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(bench_page(rec, figs), encoding="utf-8")
    if png is not None:
        from evokernel.report.png import write_bench_pngs

        write_bench_pngs(rec, png)
    return out
