"""The run report's figures (plotly), each under a stable id the page gives its element.

`run_figures(runs)` returns them in page order; the landscape's are Optuna's own
visualizations of an in-memory study (`data.landscape_study`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from evokernel.report import data
from evokernel.report.data import RunData

__all__ = ["Figure", "RUN_FIGURES", "run_figures", "note_figure", "color"]


@dataclass(frozen=True)
class Figure:
    id: str  # the element id in the page and the PNG's file name
    section: str
    title: str
    caption: str
    figure: go.Figure


#: the run report's figures, by id, in page order (section, title)
RUN_FIGURES: dict[str, tuple[str, str]] = {
    "fig-convergence-evaluations": ("convergence", "Best latency against evaluations"),
    "fig-convergence-time": ("convergence", "Best latency against wall time"),
    "fig-operators": ("operators", "Proposals, accepted and improvements per operator"),
    "fig-operator-timeline": ("operators", "Proposals per operator over the run"),
    "fig-operator-dollars": ("operators", "Dollars per operator over the run"),
    "fig-statuses": ("statuses", "Statuses over the run"),
    "fig-skips": ("statuses", "What was skipped without measuring (learned constraints, duplicates, ...)"),
    "fig-slice": ("landscape", "Latency against each parameter"),
    "fig-parallel": ("landscape", "Parallel coordinates"),
    "fig-importance": ("landscape", "Parameter importances"),
    "fig-remeasure": ("elites", "First measurement against re-measured median"),
}

_LAYOUT: dict[str, Any] = dict(template="plotly_white", height=420, margin=dict(l=60, r=20, t=50, b=50))


def note_figure(text: str) -> go.Figure:
    """An empty figure that says why it is empty (no data, or a plot that could not be drawn)."""
    fig = go.Figure()
    fig.add_annotation(text=text, showarrow=False, x=0.5, y=0.5, xref="paper", yref="paper", font=dict(size=14))
    fig.update_xaxes(visible=False)
    fig.update_yaxes(visible=False)
    return fig.update_layout(**{**_LAYOUT, "height": 200})


def _convergence(runs: list[RunData], x: str, xtitle: str) -> go.Figure:
    conv = data.convergence(runs)
    fig = go.Figure()
    for i, (label, c) in enumerate(conv.groupby("run", sort=False)):
        col = color(i)
        fig.add_trace(
            go.Scatter(
                x=list(c[x]) + list(c[x])[::-1],
                y=list(c.band_high_ms) + list(c.band_low_ms)[::-1],
                fill="toself",
                fillcolor=_rgba(col, 0.15),
                line=dict(width=0),
                hoverinfo="skip",
                name=f"{label}: noise band",
                legendgroup=label,
                showlegend=False,
            )
        )
        fig.add_trace(
            go.Scatter(
                x=c[x], y=c.best_ms, mode="lines", line=dict(color=col, shape="hv"), name=label, legendgroup=label
            )
        )
        fig.add_trace(
            go.Scatter(
                x=c[x],
                y=c.latency_ms,
                mode="markers",
                marker=dict(color=col, size=4, opacity=0.35),
                name=f"{label}: each evaluation",
                legendgroup=label,
                showlegend=False,
            )
        )
    fig.update_layout(**_LAYOUT, xaxis_title=xtitle, yaxis_title="latency (ms)", yaxis_type="log")
    return fig


def _operators(runs: list[RunData]) -> go.Figure:
    ops = data.operator_table(runs)
    labels = list(dict.fromkeys(ops.run))
    if not labels:
        return note_figure("no evaluation is stored")
    fig = make_subplots(rows=len(labels), cols=1, subplot_titles=labels, shared_xaxes=False)
    for r, label in enumerate(labels, 1):
        o = ops[ops.run == label]
        for j, metric in enumerate(("proposals", "accepted", "improvements")):
            fig.add_trace(
                go.Bar(
                    x=o.operator,
                    y=o[metric],
                    name=metric,
                    marker_color=color(j),
                    showlegend=r == 1,
                    legendgroup=metric,
                    customdata=o[["dollars", "device_s"]],
                    hovertemplate="%{x}: %{y} "
                    + metric
                    + "<br>$%{customdata[0]:.2f}, %{customdata[1]:.1f} s<extra></extra>",
                ),
                row=r,
                col=1,
            )
    fig.update_layout(**{**_LAYOUT, "height": max(300, 260 * len(labels))}, barmode="group")
    return fig


def _timeline(table: Any, column: str, ytitle: str, empty: str = "no evaluation is stored") -> go.Figure:
    if table.empty:
        return note_figure(empty)
    fig = go.Figure()
    dashes = ("solid", "dash", "dot", "dashdot", "longdash")
    keys = sorted(set(table[column]))
    for i, (label, t) in enumerate(table.groupby("run", sort=False)):
        for key, k in t.groupby(column, sort=True):
            fig.add_trace(
                go.Scatter(
                    x=k.evaluation,
                    y=k["count"],
                    mode="lines",
                    name=f"{key} ({label})" if table.run.nunique() > 1 else str(key),
                    line=dict(color=color(keys.index(key)), dash=dashes[i % len(dashes)]),
                )
            )
    fig.update_layout(**_LAYOUT, xaxis_title="evaluation", yaxis_title=ytitle)
    return fig


def _skips(runs: list[RunData]) -> go.Figure:
    sk = data.skips_frame(runs)
    if sk.empty:
        return note_figure("nothing was skipped")
    fig = go.Figure()
    for i, (label, s) in enumerate(sk.groupby("run", sort=False)):
        fig.add_trace(go.Bar(y=s.reason, x=s["count"], orientation="h", name=label, marker_color=color(i)))
    fig.update_layout(**{**_LAYOUT, "margin": dict(l=330, r=20, t=50, b=50)}, xaxis_title="genomes skipped")
    return fig


def _remeasure(runs: list[RunData]) -> go.Figure:
    fig = go.Figure()
    lo, hi = math.inf, 0.0
    for i, run in enumerate(runs):
        el = data.elites_frame(run)
        el = el[el.median_ms.map(math.isfinite) & el.first_ms.notna()]
        if el.empty:
            continue
        lo, hi = min(lo, el.first_ms.min(), el.median_ms.min()), max(hi, el.first_ms.max(), el.median_ms.max())
        fig.add_trace(
            go.Scatter(
                x=el.first_ms,
                y=el.median_ms,
                mode="markers",
                name=run.label,
                marker=dict(color=color(i), size=9, symbol=["star" if e else "circle" for e in el.elite]),
                error_y=dict(
                    type="data",
                    symmetric=False,
                    array=el.ci_high_ms - el.median_ms,
                    arrayminus=el.median_ms - el.ci_low_ms,
                ),
                text=el.genome_id + "<br>" + el.params + "<br>samples " + el.sample_ms,
                hovertemplate="%{text}<br>first %{x:.5g} ms, median %{y:.5g} ms<extra></extra>",
            )
        )
    if hi == 0.0:
        return note_figure("no elite was re-measured (options.remeasure = 0, or the wall time ran out)")
    fig.add_trace(
        go.Scatter(x=[lo, hi], y=[lo, hi], mode="lines", line=dict(color="grey", dash="dot"), name="first = median")
    )
    fig.update_layout(**_LAYOUT, xaxis_title="first measurement (ms)", yaxis_title="re-measured median (ms)")
    return fig


def _optuna(kind: str, runs: list[RunData]) -> go.Figure:
    import optuna.visualization as ov

    try:
        study = data.landscape_study(runs)
        if len(study.trials) < 2:
            return note_figure(f"the landscape needs two ok evaluations; these runs have {len(study.trials)}")
        plot: dict[str, Any] = {
            "slice": ov.plot_slice,
            "parallel": ov.plot_parallel_coordinate,
            "importance": ov.plot_param_importances,
        }
        fig = plot[kind](study, target_name="latency (ms)")
    except ImportError as exc:  # an importance evaluator that needs a package not installed
        return note_figure(f"Optuna could not draw this: it needs {exc.name or exc} (pip install it to see it)")
    except (ValueError, RuntimeError, ZeroDivisionError) as exc:
        return note_figure(f"Optuna could not draw this: {type(exc).__name__}: {exc}")
    fig.update_layout(template="plotly_white", title=None, width=None)  # Optuna fixes a width; fit the page
    if kind == "slice":
        fig.update_yaxes(type="log")
    return fig


def run_figures(runs: list[RunData]) -> list[Figure]:
    """Every figure of the run report, in page order."""
    makers = {
        "fig-convergence-evaluations": lambda: _convergence(runs, "evaluation", "evaluation"),
        "fig-convergence-time": lambda: _convergence(runs, "t_s", "wall time (s)"),
        "fig-operators": lambda: _operators(runs),
        "fig-operator-timeline": lambda: _timeline(data.operator_timeline(runs), "operator", "proposals so far"),
        "fig-operator-dollars": lambda: _timeline(
            data.dollars_timeline(runs), "operator", "dollars so far", empty="no operator of these runs cost money"
        ),
        "fig-statuses": lambda: _timeline(data.status_timeline(runs), "status", "results so far"),
        "fig-skips": lambda: _skips(runs),
        "fig-slice": lambda: _optuna("slice", runs),
        "fig-parallel": lambda: _optuna("parallel", runs),
        "fig-importance": lambda: _optuna("importance", runs),
        "fig-remeasure": lambda: _remeasure(runs),
    }
    out = []
    for fid, (section, title) in RUN_FIGURES.items():
        out.append(Figure(fid, section, title, CAPTIONS[fid], makers[fid]()))
    return out


CAPTIONS = {
    "fig-convergence-evaluations": "The best latency measured so far (line), its noise band (shaded: the best "
    "result's relative noise), each evaluation (dots); one colour per run.",
    "fig-convergence-time": "The same against seconds since the run began (a resumed run's clock starts at its first start).",
    "fig-operators": "Per operator (the lineage of each evaluated genome): proposals evaluated, accepted (ok results), "
    "improvements of the run's best so far; hover for dollars and evaluator seconds.",
    "fig-operator-timeline": "How the proposals were split over the run (the bandit's choices, as evaluated).",
    "fig-operator-dollars": "What each costly operator (an LLM rewrite) has spent so far, from the cost recorded with "
    "each evaluated genome it proposed.",
    "fig-statuses": "Results per status, counted over the run.",
    "fig-skips": "Proposals never measured, by reason: predicted by a learned constraint to fail ('learned: ...'), "
    "already seen ('duplicate'), invalid, or cut by the wall time (the run's stored count; older runs: their events).",
    "fig-slice": "Optuna's slice plot of the ok evaluations of these runs (one trial per genome).",
    "fig-parallel": "Optuna's parallel-coordinates plot: every ok genome, coloured by latency.",
    "fig-importance": "Optuna's parameter importances (its default evaluator) of latency.",
    "fig-remeasure": "Each finalist's first measurement against the median of all its measurements (first and "
    "re-measured), with the 95% interval; stars are the niches' elites. Points far from the diagonal are what the "
    "noise rule protected against.",
}


_PALETTE = (
    "#1f77b4",
    "#ff7f0e",
    "#2ca02c",
    "#d62728",
    "#9467bd",
    "#8c564b",
    "#e377c2",
    "#7f7f7f",
    "#bcbd22",
    "#17becf",
)


def color(i: int) -> str:
    """The i-th colour of the report's palette (matplotlib's tab10, as the PNGs use)."""
    return _PALETTE[i % len(_PALETTE)]


def _rgba(hex_color: str, alpha: float) -> str:
    r, g, b = (int(hex_color[i : i + 2], 16) for i in (1, 3, 5))
    return f"rgba({r},{g},{b},{alpha})"
