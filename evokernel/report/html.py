"""The report as one self-contained HTML page: plotly's JavaScript inlined once in the head,
every figure a `<div>` under its stable id, tables as plain HTML. Nothing is loaded from the
network, so the file opens offline and can be mailed or attached to a CI run.
"""

from __future__ import annotations

import html
import math
import time
from collections.abc import Sequence
from pathlib import Path

import pandas as pd

from evokernel.core._html import html_table
from evokernel.report import data
from evokernel.report.data import RunData
from evokernel.report.figures import Figure, run_figures
from evokernel.store._base import Store

__all__ = ["page", "figure_block", "run_page", "write_report"]

_STYLE = """
body { font-family: system-ui, -apple-system, "Segoe UI", sans-serif; margin: 0 auto; max-width: 1200px;
       padding: 0 24px 48px; color: #222; }
h1 { margin-top: 24px; } h2 { border-bottom: 1px solid #ddd; padding-bottom: 4px; margin-top: 40px; }
nav a { margin-right: 14px; }
table { border-collapse: collapse; font-size: 13px; margin: 8px 0 16px; }
th, td { border: 1px solid #ddd; padding: 3px 8px; text-align: left; vertical-align: top; }
th { background: #f4f6f8; }
figure { margin: 16px 0 28px; } figcaption { color: #555; font-size: 13px; }
pre { background: #f6f8fa; padding: 8px; overflow-x: auto; font-size: 12px; }
.note { color: #8a5a00; background: #fff8e6; padding: 6px 10px; border-left: 3px solid #e0a800; }
.muted { color: #777; font-size: 12px; }
"""


def page(title: str, sections: Sequence[tuple[str, str, str]], *, subtitle: str = "") -> str:
    """A whole page: `sections` are (anchor, heading, inner HTML), listed in a navigation bar."""
    from plotly.offline import get_plotlyjs

    nav = " ".join(f'<a href="#{a}">{html.escape(h)}</a>' for a, h, _ in sections)
    body = "\n".join(f'<section id="{a}"><h2>{html.escape(h)}</h2>\n{inner}\n</section>' for a, h, inner in sections)
    made = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        f"<title>{html.escape(title)}</title><style>{_STYLE}</style>\n"
        f'<script type="text/javascript">{get_plotlyjs()}</script>\n</head>\n<body>\n'
        f'<h1>{html.escape(title)}</h1><p class="muted">{html.escape(subtitle)} made {made} by evokernel report</p>'
        f"<nav>{nav}</nav>\n{body}\n</body></html>\n"
    )


def figure_block(fig: Figure) -> str:
    div = fig.figure.to_html(
        full_html=False, include_plotlyjs=False, div_id=fig.id, config={"displaylogo": False, "responsive": True}
    )
    return (
        f'<figure id="{fig.id}-figure"><h3>{html.escape(fig.title)}</h3>{div}'
        f"<figcaption>{html.escape(fig.caption)}</figcaption></figure>"
    )


def _frame_table(frame: pd.DataFrame, *, table_id: str = "") -> str:
    table = html_table([str(c) for c in frame.columns], frame.itertuples(index=False, name=None))
    return table.replace("<table>", f'<table id="{table_id}">', 1) if table_id else table


def _headers(runs: list[RunData]) -> str:
    heads = [data.header(r) for r in runs]
    labels = [label for label, _ in heads[0]]
    rows = [[label, *(dict(h).get(label, "-") for h in heads)] for label in labels]
    return html_table(["", *(r.label for r in runs)], rows).replace("<table>", '<table id="table-runs">', 1)


def _elites(run: RunData) -> str:
    el = data.elites_frame(run)
    if el.empty:
        return f"<p>{html.escape(run.label)}: no elites stored.</p>"
    rows = []
    for rank, e in enumerate(el.itertuples(index=False), 1):
        interval = f"{e.ci_low_ms:.5g} - {e.ci_high_ms:.5g}" if math.isfinite(e.median_ms) else "failed re-measuring"
        lineage = f"{e.operator}, generation {e.generation}" + (f", from {e.parents}" if e.parents else "")
        rows.append(
            [rank, e.genome_id, e.niche or "-", "yes" if e.elite else "", e.first_ms, e.median_ms,
             f"{100 * e.noise:.1f}%", interval, f"{e.samples}: {e.sample_ms}", e.params, lineage]
        )  # fmt: skip
    heads = [
        "rank",
        "genome",
        "niche",
        "elite",
        "first ms",
        "median ms",
        "noise",
        "95% interval",
        "samples",
        "params",
        "lineage",
    ]
    table = html_table(heads, rows).replace("<table>", f'<table id="table-elites-{run.info.id}">', 1)
    diffs = "".join(
        f"<details><summary>source of {html.escape(e.genome_id)} against its parent</summary>"
        f"<pre>{html.escape(e.diff)}</pre></details>"
        for e in el.itertuples(index=False)
        if e.diff
    )
    return f"<h3>{html.escape(run.label)}</h3>{table}{diffs}"


def run_page(runs: list[RunData], figures: list[Figure] | None = None) -> str:
    """The run report's page for `runs` (read by `data.load_runs`)."""
    figures = figures if figures is not None else run_figures(runs)
    by_section: dict[str, list[str]] = {}
    for f in figures:
        by_section.setdefault(f.section, []).append(figure_block(f))
    ops = data.operator_table(runs)
    ops_note = (
        "<p>Per operator, from each evaluated genome's lineage and result: proposals evaluated, accepted (ok), "
        "improvements of the run's best so far, dollars and evaluator seconds.</p>"
    )
    bandit = data.bandit_frame(runs)
    if bandit.empty:
        ops_note += '<p class="note">These runs did not store the bandit\'s state (runs before session 15).</p>'
    else:
        ops_note += (
            "<p>The bandit at the end of each run: pulls, credited successes (the child beat its parent or the "
            "elite by more than the noise), posterior mean of success.</p>"
            + _frame_table(bandit, table_id="table-bandit")
        )
    elites = "".join(_elites(r) for r in runs)
    skipped = data.skips_frame(runs)
    sections = [
        ("runs", "Runs", _headers(runs)),
        ("convergence", "Convergence", "".join(by_section.get("convergence", []))),
        ("operators", "Operators", ops_note + _frame_table(ops, table_id="table-operators") + "".join(by_section.get("operators", []))),
        ("statuses", "Statuses and skips", "".join(by_section.get("statuses", [])) + (_frame_table(skipped, table_id="table-skips") if not skipped.empty else "")),
        ("elites", "Elites", elites + "".join(by_section.get("elites", []))),
        ("landscape", "Landscape", "".join(by_section.get("landscape", []))),
    ]  # fmt: skip
    names = sorted({r.info.name for r in runs})
    return page("evokernel report: " + ", ".join(names), sections, subtitle=f"{len(runs)} run(s);")


def write_report(
    store: Store, out: str | Path, *, runs: Sequence[str] | str | None = None, png: str | Path | None = None
) -> Path:
    """Write the report of `runs` (ids or prefixes; default: every run of the latest run's
    problem) in `store` to `out`; with `png`, the same figures as PNG files in that folder."""
    loaded = data.load_runs(store, runs)
    figures = run_figures(loaded)
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(run_page(loaded, figures), encoding="utf-8")
    if png is not None:
        from evokernel.report.png import write_run_pngs

        write_run_pngs(loaded, png)
    return out
