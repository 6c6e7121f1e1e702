"""The report's figures as PNG files (matplotlib, no display needed), one per figure id, for
papers, CI artifacts and terminals: `<dir>/<figure id>.png`."""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")  # files only, never a window

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

from evokernel.report import data  # noqa: E402
from evokernel.report.data import RunData  # noqa: E402
from evokernel.report.figures import RUN_FIGURES, color  # noqa: E402

__all__ = ["write_run_pngs", "save", "note"]


def save(fig: Any, folder: str | Path, fid: str) -> Path:
    path = Path(folder) / f"{fid}.png"
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def _legend(ax: Any, **kw: Any) -> None:
    if ax.get_legend_handles_labels()[0]:
        ax.legend(**kw)


def note(ax: Any, text: str) -> None:
    ax.text(0.5, 0.5, text, ha="center", va="center", wrap=True, transform=ax.transAxes)
    ax.set_axis_off()


def _convergence(runs: list[RunData], x: str, xlabel: str, fid: str) -> Any:
    fig, ax = plt.subplots(figsize=(8, 4.2))
    for i, (label, c) in enumerate(data.convergence(runs).groupby("run", sort=False)):
        col = color(i)
        ax.fill_between(c[x], c.band_low_ms, c.band_high_ms, step="post", color=col, alpha=0.15, linewidth=0)
        ax.step(c[x], c.best_ms, where="post", color=col, label=label)
        ax.scatter(c[x], c.latency_ms, s=6, color=col, alpha=0.35)
    ax.set(xlabel=xlabel, ylabel="latency (ms)", yscale="log", title=RUN_FIGURES[fid][1])
    _legend(ax, fontsize=8)
    return fig


def _operators(runs: list[RunData]) -> Any:
    ops = data.operator_table(runs)
    labels = list(dict.fromkeys(ops.run)) or ["-"]
    fig, axes = plt.subplots(len(labels), 1, figsize=(8, 2.6 * len(labels) + 0.6), squeeze=False)
    for ax, label in zip(axes[:, 0], labels):
        o = ops[ops.run == label]
        x = np.arange(len(o))
        for j, metric in enumerate(("proposals", "accepted", "improvements")):
            ax.bar(x + (j - 1) * 0.27, o[metric], width=0.27, label=metric, color=color(j))
        ax.set_xticks(x, list(o.operator))
        ax.set_title(label, fontsize=9)
    _legend(axes[0, 0], fontsize=8)
    fig.suptitle(RUN_FIGURES["fig-operators"][1])
    return fig


def _timeline(table: pd.DataFrame, column: str, ylabel: str, title: str, empty: str = "no evaluation is stored") -> Any:
    fig, ax = plt.subplots(figsize=(8, 4))
    if table.empty:
        note(ax, empty)
        return fig
    keys = sorted(set(table[column]))
    styles = ("-", "--", ":", "-.")
    several = table.run.nunique() > 1
    for i, (label, t) in enumerate(table.groupby("run", sort=False)):
        for key, k in t.groupby(column, sort=True):
            name = f"{key} ({label})" if several else str(key)
            ax.plot(k.evaluation, k["count"], styles[i % 4], color=color(keys.index(key)), label=name)
    ax.set(xlabel="evaluation", ylabel=ylabel, title=title)
    _legend(ax, fontsize=7, ncol=2)
    return fig


def _skips(runs: list[RunData]) -> Any:
    sk = data.skips_frame(runs)
    fig, ax = plt.subplots(figsize=(8, 3))
    if sk.empty:
        note(ax, "nothing was skipped")
        return fig
    labels = [f"{r.reason} ({r.run})" for r in sk.itertuples()]
    ax.barh(labels, sk["count"], color=[color(i) for i in pd.factorize(sk.run)[0]])
    ax.set(xlabel="genomes skipped", title=RUN_FIGURES["fig-skips"][1])
    return fig


def _remeasure(runs: list[RunData]) -> Any:
    fig, ax = plt.subplots(figsize=(6, 5))
    lo, hi = math.inf, 0.0
    for i, run in enumerate(runs):
        el = data.elites_frame(run)
        el = el[el.median_ms.map(math.isfinite) & el.first_ms.notna()]
        if el.empty:
            continue
        lo, hi = min(lo, el.first_ms.min(), el.median_ms.min()), max(hi, el.first_ms.max(), el.median_ms.max())
        err = [el.median_ms - el.ci_low_ms, el.ci_high_ms - el.median_ms]
        ax.errorbar(el.first_ms, el.median_ms, yerr=err, fmt="o", color=color(i), label=run.label, capsize=3)
    if hi == 0.0:
        note(ax, "no elite was re-measured")
        return fig
    ax.plot([lo, hi], [lo, hi], ":", color="grey", label="first = median")
    ax.set(xlabel="first measurement (ms)", ylabel="re-measured median (ms)", title=RUN_FIGURES["fig-remeasure"][1])
    _legend(ax, fontsize=8)
    return fig


def _landscape(kind: str, runs: list[RunData]) -> Any:
    study = data.landscape_study(runs)
    trials = study.trials
    if len(trials) < 2:
        fig, ax = plt.subplots(figsize=(8, 3))
        note(ax, "the landscape needs two ok evaluations")
        return fig
    names = list(trials[0].distributions)
    values = np.array([t.value for t in trials])
    if kind == "importance":
        fig, ax = plt.subplots(figsize=(7, 0.45 * len(names) + 1.2))
        try:
            import optuna

            imp = optuna.importance.get_param_importances(study)
        except (ImportError, ValueError, RuntimeError) as exc:
            note(ax, f"Optuna could not compute importances: {exc}")
            return fig
        ax.barh(list(imp)[::-1], list(imp.values())[::-1], color=color(0))
        ax.set(xlabel="importance", title=RUN_FIGURES["fig-importance"][1])
        return fig
    coded = {n: _coded([t.params[n] for t in trials]) for n in names}
    if kind == "slice":
        cols = min(3, len(names))
        rows = math.ceil(len(names) / cols)
        fig, axes = plt.subplots(rows, cols, figsize=(3.2 * cols, 2.6 * rows), squeeze=False, sharey=True)
        for ax, n in zip(axes.flat, names):
            xs, ticks = coded[n]
            ax.scatter(xs, values, c=np.arange(len(values)), cmap="Blues", s=12, edgecolors="none")
            ax.set_xticks(range(len(ticks)), ticks, fontsize=7)
            ax.set_title(n, fontsize=9)
        for ax in list(axes.flat)[len(names) :]:
            ax.set_axis_off()
        axes[0, 0].set_ylabel("latency (ms)")
        axes[0, 0].set_yscale("log")
        fig.suptitle(RUN_FIGURES["fig-slice"][1] + " (darker: later)")
        return fig
    fig, ax = plt.subplots(figsize=(9, 4.5))
    norm = matplotlib.colors.LogNorm(values.min(), values.max())  # a few slow outliers must not wash out the rest
    cmap = plt.get_cmap("viridis_r")
    scaled = np.array([coded[n][0] / max(1, len(coded[n][1]) - 1) for n in names]).T
    for row, v in sorted(zip(scaled, values), key=lambda rv: -rv[1]):
        ax.plot(range(len(names)), row, color=cmap(norm(v)), alpha=0.5, linewidth=1)
    ax.set_xticks(range(len(names)), names)
    ax.set_yticks([])
    fig.colorbar(plt.cm.ScalarMappable(norm=norm, cmap=cmap), ax=ax, label="latency (ms, log)")
    ax.set_title(RUN_FIGURES["fig-parallel"][1])
    return fig


def _coded(values: list[Any]) -> tuple[np.ndarray, list[str]]:
    """Values as positions 0..k-1 in sorted order, and their tick labels."""
    levels = sorted(set(values), key=lambda v: (isinstance(v, str), v))
    index = {v: i for i, v in enumerate(levels)}
    return np.array([index[v] for v in values], dtype=float), [str(v) for v in levels]


def write_run_pngs(runs: list[RunData], folder: str | Path) -> list[Path]:
    """Every figure of the run report as `<folder>/<figure id>.png`."""
    makers: dict[str, Callable[[], Any]] = {
        "fig-convergence-evaluations": lambda: _convergence(
            runs, "evaluation", "evaluation", "fig-convergence-evaluations"
        ),
        "fig-convergence-time": lambda: _convergence(runs, "t_s", "wall time (s)", "fig-convergence-time"),
        "fig-operators": lambda: _operators(runs),
        "fig-operator-timeline": lambda: _timeline(
            data.operator_timeline(runs), "operator", "proposals so far", RUN_FIGURES["fig-operator-timeline"][1]
        ),
        "fig-operator-dollars": lambda: _timeline(
            data.dollars_timeline(runs),
            "operator",
            "dollars so far",
            RUN_FIGURES["fig-operator-dollars"][1],
            empty="no operator of these runs cost money",
        ),
        "fig-statuses": lambda: _timeline(
            data.status_timeline(runs), "status", "results so far", RUN_FIGURES["fig-statuses"][1]
        ),
        "fig-skips": lambda: _skips(runs),
        "fig-slice": lambda: _landscape("slice", runs),
        "fig-parallel": lambda: _landscape("parallel", runs),
        "fig-importance": lambda: _landscape("importance", runs),
        "fig-remeasure": lambda: _remeasure(runs),
    }
    return [save(makers[fid](), folder, fid) for fid in RUN_FIGURES]


def write_bench_pngs(rec: Any, folder: str | Path) -> list[Path]:
    """The benchmark view's figures (`bench.bench_figures`' ids) as PNG files."""
    from evokernel.report import bench

    out = []
    gm, rt, sp = bench.geomean_frame(rec), bench.rate_frame(rec), bench.speedup_frame(rec)
    fig, ax = plt.subplots(figsize=(9, 4.5))
    if gm.empty:
        note(ax, "no record holds a geomean")
    else:
        x = np.arange(len(gm))
        ax.bar(x - 0.2, gm.geomean, 0.4, label="graph", color=color(0))
        ax.bar(x + 0.2, gm.geomean_eager, 0.4, label="eager", color=color(1))
        ax.axhline(1.0, ls=":", color="grey")
        ax.set_xticks(x, list(gm.kind + ": " + gm.baseline), rotation=60, ha="right", fontsize=7)
        ax.set(ylabel="geomean speedup", title="Geomean speedup of the winners per baseline")
        _legend(ax, fontsize=8)
    out.append(save(fig, folder, "bench-geomean"))
    fig, ax = plt.subplots(figsize=(11, 5))
    if rt.empty:
        note(ax, "no row says enough of its shape to compute a rate")
    else:
        labels = list(rt.kind + " " + rt["shape"] + " " + rt.metric)
        ax.bar(range(len(rt)), rt.percent_of_peak, color=[color(i) for i in pd.factorize(rt.kind + rt.metric)[0]])
        ax.set_xticks(range(len(rt)), labels, rotation=90, fontsize=5)
        ax.set(ylabel="% of the H200's peak", title="Winners against the H200's peaks (790 TFLOP/s bf16, 4.3 TB/s)")
    out.append(save(fig, folder, "bench-rates"))
    for kind in rec.rows:
        s = sp[sp.kind == kind]
        fig, ax = plt.subplots(figsize=(11, 4.8))
        shapes = list(dict.fromkeys(s["shape"]))
        bases = sorted(set(s.baseline))
        width = 0.8 / max(1, len(bases))
        for j, base in enumerate(bases):
            b = s[s.baseline == base].set_index("shape").reindex(shapes)
            xs = np.arange(len(shapes)) + (j - (len(bases) - 1) / 2) * width
            ax.bar(xs, b.speedup, width, label=f"{base} (graph)", color=color(j))
            if b.speedup_eager.notna().any():
                ax.scatter(
                    xs,
                    b.speedup_eager,
                    marker="D",
                    facecolors="none",
                    edgecolors=color(j),
                    label=f"{base} (eager)",
                )
        ax.axhline(1.0, ls=":", color="grey")
        ax.set_xticks(range(len(shapes)), shapes, rotation=90, fontsize=6)
        ax.set(ylabel="winner's speedup", title=f"{kind}: the winner against each baseline, per shape")
        _legend(ax, fontsize=7)
        out.append(save(fig, folder, f"bench-speedup-{kind}"))
    return out
