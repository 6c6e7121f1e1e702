"""The report (evokernel.report, `evokernel report`): frames with pinned columns and dtypes,
notebook tables, the self-contained HTML page with every figure, PNGs, the benchmark view."""

from __future__ import annotations

import re
from pathlib import Path

import pandas as pd
import pytest

from evokernel.cli import main
from evokernel.core.archive import Elite
from evokernel.core.genome import Genome
from evokernel.engine.report import ELITE_COLUMNS
from evokernel.report import data, results_frame
from evokernel.report.data import RESULT_COLUMNS
from evokernel.report.figures import RUN_FIGURES
from tests._report_runs import RUNS, recorded_store

ROOT = Path(__file__).resolve().parents[1]
BENCH_FIGURES = ["bench-geomean", "bench-rates"] + [
    f"bench-speedup-{k}" for k in ("gemm", "moe", "attention_prefill", "attention_decode")
]


def external_sources(page: str) -> list[str]:
    """Every script or stylesheet the page would fetch from the network."""
    srcs = re.findall(r"<script\b[^>]*\bsrc\s*=\s*[\"']?([^\"' >]+)", page, flags=re.I)
    hrefs = re.findall(r"<link\b[^>]*\bhref\s*=\s*[\"']?([^\"' >]+)", page, flags=re.I)
    imports = re.findall(r"@import\s+(?:url\()?[\"']?(https?://[^\"') ]+)", page, flags=re.I)
    # any script src at all (the page inlines every script), and remote stylesheets or imports
    return srcs + [u for u in hrefs + imports if re.match(r"(https?:)?//", u, flags=re.I)]


@pytest.fixture
def small(tmp_path):
    store, reports = recorded_store(tmp_path / "small.db", budget=16, runs=[("default", 0)])
    return store, reports[0]


def test_results_frame_columns_and_dtypes(small):
    store, report = small
    frame = results_frame(store)
    assert list(frame.columns[: len(RESULT_COLUMNS)]) == list(RESULT_COLUMNS)
    assert {c: str(frame[c].dtype) for c in RESULT_COLUMNS} == RESULT_COLUMNS
    params = [c for c in frame.columns if c.startswith("param.")]
    assert params == [f"param.{n}" for n in sorted(report.best.genome.params)]
    assert all(str(frame[c].dtype) == "int64" for c in params)
    evals = frame[frame.kind == "eval"]
    assert len(evals) == report.evaluations and set(frame.kind) == {"eval", "remeasure"}
    assert evals.latency_ms.min() == pytest.approx(min(x for x in report.trace if x is not None))
    assert (evals.latency_ms.isna() == (evals.status != "ok")).all()
    assert len(results_frame(store, run=report.run_id[:6])) == len(frame)
    # the store's own view is the same frame
    pd.testing.assert_frame_equal(store.results_frame(run=report.run_id), frame)


def test_dollars_per_operator_over_the_run_add_up_to_what_each_spent(small):
    import dataclasses

    store, _ = small
    run = data.load_runs(store)[0]
    assert data.dollars_timeline([run]).empty  # replay operators cost nothing
    f = run.frame.copy()
    evals = f.index[f.kind == "eval"]
    f.loc[evals, "operator"] = ["llm" if i % 3 == 0 else "tpe" for i in range(len(evals))]
    f.loc[evals, "cost"] = [0.02 if i % 3 == 0 else 0.0 for i in range(len(evals))]
    dollars = data.dollars_timeline([dataclasses.replace(run, frame=f)])
    assert set(dollars.operator) == {"llm"}  # an operator that cost nothing has no line
    assert list(dollars.evaluation) == list(range(1, len(evals) + 1))
    assert dollars["count"].is_monotonic_increasing
    assert dollars["count"].iloc[-1] == pytest.approx(0.02 * len(range(0, len(evals), 3)))


def test_search_report_to_dataframe_columns_and_dtypes(small):
    _, report = small
    frame = report.to_dataframe()
    assert {c: str(frame[c].dtype) for c in ELITE_COLUMNS} == ELITE_COLUMNS
    assert list(frame.columns[: len(ELITE_COLUMNS)]) == list(ELITE_COLUMNS)
    assert len(frame) == len(report.elites) and list(frame["rank"]) == list(range(1, len(frame) + 1))
    assert frame.latency_ms.iloc[0] == pytest.approx(report.best.latency_ms)
    assert (frame.ci_low_ms <= frame.latency_ms).all() and (frame.latency_ms <= frame.ci_high_ms).all()
    assert "param.BM" in frame.columns


def test_a_finished_run_stores_the_bandit_and_what_it_skipped(small):
    store, report = small
    summary = store.runs()[0].summary
    assert summary["operators"] == report.operators and summary["skipped"] == report.skipped
    bandit = data.bandit_frame(data.load_runs(store))
    assert dict(zip(bandit.operator, bandit.pulls)) == {k: v["pulls"] for k, v in report.operators.items()}


def test_reports_and_elites_show_as_tables_in_a_notebook(small):
    _, report = small
    page = report._repr_html_()
    assert page.count("<tr>") == len(report.elites) + 1 and report.run_id in page
    assert "<table>" in report.best._repr_html_()
    elite = Elite(niche="<x>", genome=Genome.of({"BM": 64}), latency_ms=0.02, noise=0.01, run_id="r")
    assert "&lt;x&gt;" in elite._repr_html_() and "<x>" not in elite._repr_html_()


def test_a_source_genome_is_shown_as_a_diff_against_its_parent():
    parent = Genome.of({"BM": 64}, source="a = 1\nb = 2\n")
    child = Genome.of({"BM": 64}, source="a = 1\nb = 3\n").with_lineage((parent.id,), "llm", 2)
    diff = data._diff(child, {parent.id: parent})
    assert "-b = 2" in diff and "+b = 3" in diff and parent.id in diff
    assert data._diff(Genome.of({"BM": 64}), {}) == ""
    assert "template" in data._diff(child, {parent.id: Genome.of({"BM": 64})})


def test_report_user_errors_exit_2(tmp_path, capsys):
    assert main(["report", "--out", str(tmp_path / "r.html")]) == 2
    assert main(["report", str(tmp_path / "missing.db"), "--out", str(tmp_path / "r.html")]) == 2
    assert main(["report", "--results", str(tmp_path / "nowhere"), "--out", str(tmp_path / "r.html")]) == 2
    err = capsys.readouterr().err
    assert "no such database" in err and "no such folder" in err


@pytest.fixture(scope="module")
def recorded(tmp_path_factory):
    folder = tmp_path_factory.mktemp("report")
    store, reports = recorded_store(folder / "runs.db")
    return folder, store, reports


@pytest.mark.slow
def test_report_of_several_runs_is_self_contained_with_every_figure(recorded, capsys):
    folder, store, reports = recorded
    out, png = folder / "report.html", folder / "png"
    argv = ["report", str(folder / "runs.db"), "--out", str(out), "--png", str(png)]
    for r in reports:
        argv += ["--run", r.run_id[:8]]
    assert main(argv) == 0
    assert "wrote" in capsys.readouterr().out
    page = out.read_text()
    print(f"report: {out} ({len(page) // 1024} KiB)")
    assert external_sources(page) == []
    assert "Plotly" in page  # the library itself, inlined
    for fid in RUN_FIGURES:
        assert f'id="{fid}"' in page, fid
    for table in ("table-runs", "table-operators", "table-bandit", *(f"table-elites-{r.run_id}" for r in reports)):
        assert f'id="{table}"' in page, table
    for (strategy, seed), r in zip(RUNS, reports):  # every run is overlaid, named by strategy and seed
        assert f"{strategy} seed {seed} ({r.run_id[:8]})" in page
    assert "budget: evaluations" in page  # why it stopped
    skipped = data.skips_frame(data.load_runs(store, [r.run_id for r in reports]))
    for r in reports:  # what each run skipped, by the reasons the search counted
        label = next(x for x in skipped.run if r.run_id[:8] in x)
        assert dict(zip(*skipped[skipped.run == label][["reason", "count"]].T.values)) == r.skipped
    for fid in RUN_FIGURES:
        head = (png / f"{fid}.png").read_bytes()[:8]
        assert head == b"\x89PNG\r\n\x1a\n", fid


@pytest.mark.slow
def test_the_default_is_every_run_of_the_latest_problem(recorded):
    folder, store, reports = recorded
    assert [r.id for r in data.select_runs(store)] == [r.run_id for r in reports]
    with pytest.raises(Exception, match="no run"):
        data.select_runs(store, ["ffffffffff"])


@pytest.mark.slow
def test_the_benchmark_view_renders_the_repository_results(tmp_path):
    out, png = tmp_path / "bench.html", tmp_path / "png"
    assert (
        main(["report", "--results", str(ROOT / "benchmarks" / "results"), "--out", str(out), "--png", str(png)]) == 0
    )
    page = out.read_text()
    assert external_sources(page) == []
    for fid in BENCH_FIGURES:
        assert f'id="{fid}"' in page, fid
        assert (png / f"{fid}.png").stat().st_size > 1000, fid
    assert 'id="table-geomeans"' in page and "model_level" in page  # a geomean-only record joins the summary
    skipped = page[page.index('id="skipped"') :]
    assert "sandbox.json" in skipped and "unknown kind" in skipped  # not drawn, and said so


def test_the_core_install_does_not_grow():
    import subprocess
    import sys
    import tomllib

    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    extra = {"plotly", "pandas", "matplotlib"}
    names = lambda reqs: {re.split(r"[<>=\[ ;]", r)[0].lower() for r in reqs}  # noqa: E731
    assert not extra & names(project["dependencies"])
    assert extra <= names(project["optional-dependencies"]["report"])
    assert extra <= names(project["optional-dependencies"]["dev"])  # CI tests the report
    code = "import sys, evokernel, evokernel.cli, evokernel.report; print(sorted({'pandas', 'plotly', 'matplotlib'} & set(sys.modules)))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"  # the command line and the package load no plotting library until asked


def test_without_the_extra_the_report_says_how_to_get_it(monkeypatch, tmp_path, capsys):
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "plotly" else real(name, *a))
    db = tmp_path / "x.db"
    db.write_bytes(b"")
    assert main(["report", str(db), "--out", str(tmp_path / "r.html")]) == 2
    assert "pip install 'evokernel-search[report]'" in capsys.readouterr().err


@pytest.mark.slow
def test_a_run_that_stored_nothing_still_gets_a_page_that_says_so(tmp_path):
    from evokernel.report import write_report
    from evokernel.store import SQLiteStore

    store = SQLiteStore(str(tmp_path / "empty.db"))
    store.begin_run("r0", name="empty", archive_key="k", fingerprint="f", config={"seed": 3}, environment={})
    store.finish_run("r0", "failed", {"error": "RuntimeError: GPU fell off the bus"})
    page = write_report(store, tmp_path / "r.html", png=tmp_path / "png").read_text()
    for fid in RUN_FIGURES:
        assert f'id="{fid}"' in page and (tmp_path / "png" / f"{fid}.png").exists(), fid
    assert "GPU fell off the bus" in page and "no evaluation is stored" in page


def test_the_run_header_says_what_the_cost_model_learned_from():
    """A replay's report says which shipped landscape its cost model was kept from (the one
    replayed), or that the model saw it (`train_on_replayed`)."""
    from evokernel import Budget, Search, SQLiteStore
    from evokernel.engine.landscape import builtin
    from evokernel.engine.options import SearchOptions
    from evokernel.evaluators import ReplayEvaluator

    name = "matmul_bf16_h200_M16_N4096_K4096"
    store = SQLiteStore(":memory:")
    ev = ReplayEvaluator(builtin(name))
    ids = [
        Search(ev.space, ev, strategy="model", store=store, options=opts).run(Budget(evaluations=8), seed=0).run_id
        for opts in (None, SearchOptions(train_on_replayed=True))
    ]
    honest, seen = (dict(data.header(r))["cost model"] for r in data.load_runs(store, ids))
    assert f"held out: {name} (the landscape replayed)" in honest and "INCLUDES" not in honest
    assert f"INCLUDES {name} (the landscape replayed: the model has seen the answer)" in seen
    random = Search(ev.space, ev, strategy="random", store=store).run(Budget(evaluations=4), seed=0).run_id
    assert dict(data.header(data.load_runs(store, [random])[0]))["cost model"] == "-"
