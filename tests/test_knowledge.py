"""The knowledge base and the kernel database, end to end on the CPU: an LLM-driven search
(recorded Messages API answers through the real SDK's transport) whose broken rewrite is
rejected and repaired, lessons from both, the fixed kernel in the kernel database, and a
second run that reads the lessons into its prompt and starts from the stored elite."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("anthropic")

from evokernel import Budget, Search  # noqa: E402
from evokernel.evaluators import KernelEvaluator  # noqa: E402
from evokernel.store.knowledge import KnowledgeRecorder, failure_class, kernels, lessons_for  # noqa: E402
from evokernel.mutators.llm import LLMRewrite  # noqa: E402
from evokernel.engine.search import SearchOptions  # noqa: E402
from evokernel.search_spaces import matmul_space  # noqa: E402
from evokernel.search_spaces.matmul.template import candidate_source  # noqa: E402
from evokernel.store import SQLiteStore  # noqa: E402

from .test_llm import PROBLEM, Recorded, provider  # noqa: E402


def render(g):
    return candidate_source(g.params)


@pytest.mark.slow
def test_lessons_and_kernels_carry_over_to_the_next_run(tmp_path: Path):
    store = SQLiteStore(tmp_path / "kb.db")
    ev = KernelEvaluator(PROBLEM, render, device="cpu", workers=1)
    recorder = KnowledgeRecorder.from_evaluator(store, ev)
    where = recorder.where
    first = Recorded("broken_kernel.json", "success_tool_use.json")
    op1 = LLMRewrite(
        PROBLEM,
        provider=provider(first),
        render=render,
        lessons=lambda p, g: lessons_for(store, op=where["op"], gpu=where["gpu"]),
    )
    opts = SearchOptions(population=1, remeasure=0, report_elites=1)
    Search(matmul_space(), ev, [op1], store=store, observers=[recorder], options=opts).run(
        Budget(evaluations=3), seed=0
    )
    texts = [le.text for le in store.lessons(op=where["op"], gpu=where["gpu"])]
    assert any("failed with wrong results" in t for t in texts), texts
    assert any("a rewritten source" in t and "gained" in t for t in texts), texts
    (kernel,) = kernels(store, op=where["op"], shape={"M": 48, "N": 40, "K": 64})
    assert "torch.matmul(a, b)" in kernel["source"] and "-    return torch.matmul(a, b) * 2" in kernel["diff"]
    assert kernel["workload"]["shapes"] == ev.problem.shapes and kernel["latency_ms"] > 0

    # the second run: lessons in the prompt, the stored elite in its first generation
    second = Recorded("success_tool_use.json", "success_tool_use.json")
    op2 = LLMRewrite(
        PROBLEM,
        provider=provider(second),
        render=render,
        lessons=lambda p, g: lessons_for(store, op=where["op"], gpu=where["gpu"]),
    )
    report = Search(
        matmul_space(), ev, [op2], store=store, observers=[KnowledgeRecorder.from_evaluator(store, ev)], options=opts
    ).run(Budget(evaluations=2), seed=1)
    history = store.history(report.run_id)
    assert history[0].genome.lineage.operator == "archive" and history[0].genome.id == kernel["genome_id"]
    prompt = second.requests[0]["messages"][0]["content"]
    assert "Lessons from earlier attempts" in prompt and "[caveat]" in prompt and "[pattern]" in prompt
    # the kernel database from the command line
    import json
    import subprocess
    import sys

    store.close()
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "evokernel.cli",
            "kernels",
            str(tmp_path / "kb.db"),
            "--shape",
            "M=48,N=40,K=64",
            "--json",
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0 and json.loads(proc.stdout)[0]["genome_id"] == kernel["genome_id"]
    src = subprocess.run(
        [
            sys.executable,
            "-m",
            "evokernel.cli",
            "kernels",
            str(tmp_path / "kb.db"),
            "--source",
            kernel["genome_id"][:8],
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert src.returncode == 0 and "torch.matmul(a, b)" in src.stdout and "+++ candidate.py" in src.stderr
    store = SQLiteStore(tmp_path / "kb.db")
    # lessons learned under another toolchain are left out
    assert (
        lessons_for(store, op=where["op"], gpu=where["gpu"], toolchain={"torch": "0.0-other"}) == []
        or "torch" not in where["toolchain"]
    )


def test_failure_classes():
    assert failure_class("compile_error", "OutOfResources: shared memory, Required: 262144") == "out of shared memory"
    assert failure_class("incorrect", "wrong result: output 0 ...") == "wrong results"
    assert failure_class("compile_error", "CompilationError: at 12:4") == "compile error (CompilationError)"


def _ind(genome, result):
    from types import SimpleNamespace

    return SimpleNamespace(genome=genome, result=result)


def test_a_regression_is_a_caveat_with_its_figures_and_an_llm_summary_is_stored_with_its_evidence(tmp_path: Path):
    from evokernel.store.knowledge import summarize
    from evokernel.core.result import Result

    store = SQLiteStore(tmp_path / "k.db")
    where = {"op": "matmul_small", "gpu": "cpu", "toolchain": {"triton": "3.9"}, "shapes": []}
    rec = KnowledgeRecorder(store, where)
    space = matmul_space()
    parent = space.genome(BM=32, BN=32, BK=32, GROUP_M=8, num_warps=4, num_stages=2)
    faster = space.genome(BM=64, BN=32, BK=32, GROUP_M=8, num_warps=4, num_stages=2).with_lineage(
        (parent.id,), "point", 1
    )
    slower = space.genome(BM=32, BN=32, BK=32, GROUP_M=8, num_warps=4, num_stages=4).with_lineage(
        (parent.id,), "point", 1
    )
    for g, ms in ((parent, 1.0), (faster, 0.8), (slower, 1.5)):
        rec.on_evaluation(_ind(g, Result.ok(ms, per_shape={"M=256": ms})), None, 0)
    texts = [le.text for le in rec.flush()]
    assert any("BM 32->64" in t and "gained 25.0%" in t for t in texts)
    assert any("num_stages 2->4" in t and "regressed by 50.0%" in t for t in texts)

    rec_ = Recorded("summary_tool_use.json")
    lesson = summarize(store, provider(rec_), op="matmul_small", gpu="cpu", toolchain={"triton": "3.9"})
    assert lesson is not None and lesson.kind == "summary" and "shared memory" in lesson.text
    assert len(lesson.evidence["lessons"]) == 2 and lesson.evidence["cost_usd"] > 0
    body = rec_.requests[0]
    assert (
        body["tool_choice"] == {"type": "tool", "name": "submit_summary"}
        and "regressed by 50.0%" in body["messages"][0]["content"]
    )
    # the summary leads the lessons a prompt gets; under another toolchain neither is offered
    assert lessons_for(store, op="matmul_small", gpu="cpu", toolchain={"triton": "3.9"})[0].startswith("[summary]")
    assert lessons_for(store, op="matmul_small", gpu="cpu", toolchain={"triton": "4.0"}) == []
    # a failed call is logged and nothing is stored
    assert summarize(store, provider(Recorded("server_500.json"), max_retries=0), op="matmul_small", gpu="cpu") is None
    assert sum(le.kind == "summary" for le in store.lessons(op="matmul_small")) == 1


def test_the_lessons_command_prints_and_refuses_to_summarize_without_a_key(tmp_path: Path, capsys, monkeypatch):
    from evokernel.cli import main
    from evokernel.store.knowledge import new_lesson

    db = tmp_path / "k.db"
    SQLiteStore(db).save_lessons(
        [new_lesson("caveat", "op", "cpu", {}, "BK=256 with 5 stages exceeds shared memory", {}, "r")]
    )
    assert main(["lessons", str(db)]) == 0
    assert "[caveat] op cpu: BK=256 with 5 stages" in capsys.readouterr().out
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    assert main(["lessons", str(db), "--op", "op", "--gpu", "cpu", "--summarize"]) == 2
    assert "no ANTHROPIC_API_KEY" in capsys.readouterr().err


def test_the_lesson_summary_at_a_runs_end_is_charged_to_the_run(tmp_path: Path):
    """The summary's LLM call happens after the run's summary was stored: its cost is added to
    the report, logged as a charge event and written into the stored summary."""
    from evokernel.engine.landscape import builtin
    from evokernel.evaluators import ReplayEvaluator

    store = SQLiteStore(tmp_path / "k.db")
    ev = ReplayEvaluator(builtin("matmul_bf16_h200_M16_N4096_K4096"))
    where = {"op": "matmul_small", "gpu": "cpu", "toolchain": {"triton": "3.9"}, "shapes": []}
    rec = KnowledgeRecorder(store, where, summarizer=provider(Recorded("summary_tool_use.json")))
    report = Search(ev.space, ev, store=store, observers=[rec]).run(Budget(evaluations=20), seed=0)
    [summary] = [le for le in store.lessons(op="matmul_small") if le.kind == "summary"]
    cost = summary.evidence["cost_usd"]
    assert cost > 0 and report.cost == pytest.approx(cost)
    charges = [p for kind, p, _ in store.events(report.run_id) if kind == "charge"]
    assert [c["amount"] for c in charges] == [pytest.approx(cost)]
    assert store.run(report.run_id).summary["cost"] == pytest.approx(cost)
