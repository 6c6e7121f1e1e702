"""One assembly layer: `evokernel.assemble` builds the search the command line runs."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from evokernel import Budget, ConfigError, SearchSpec, assemble, open_store
from evokernel.engine.landscape import builtin
from evokernel.evaluators import ReplayEvaluator
from evokernel.store.knowledge import KnowledgeRecorder

ROOT = Path(__file__).resolve().parents[1]
SHIPPED = "matmul_bf16_h200_M16_N4096_K4096"


def test_the_readme_example_of_the_python_api_runs(capsys):
    section = (ROOT / "docs" / "api.md").read_text()  # the README's long Python API part, moved there
    block = next(b for b in re.findall(r"```python\n(.*?)```", section, re.S) if "assemble(" in b)
    exec(compile(block, "docs/api.md", "exec"), {})
    assert capsys.readouterr().out.split() == ["40", "model"]  # the matmul family's default


def test_the_command_line_and_the_python_api_build_the_same_search(tmp_path: Path, capsys):
    from evokernel.cli import main

    db = tmp_path / "cli.db"
    assert (
        main(
            [
                "search",
                SHIPPED,
                "--budget",
                "20",
                "--population",
                "4",
                "--patience",
                "3",
                "--seed",
                "2",
                "--strategy",
                "evolution",
                "--db",
                str(db),
                "--json",
            ]
        )
        == 0
    )
    cli = json.loads(capsys.readouterr().out)
    evaluator = ReplayEvaluator(builtin(SHIPPED), noise=0.0, seed=2)
    search = assemble(
        SearchSpec(
            evaluator.space, evaluator, strategy="evolution", population=4, patience=3, name=evaluator.landscape.name
        ),
        store=open_store(str(tmp_path / "api.db")),
    )
    report = search.run(Budget(evaluations=20), seed=2)
    assert search.run_id(2) == cli["run_id"] == report.run_id  # the run id hashes everything that defines it
    assert report.best_ids == cli["best_ids"]


def test_mutators_and_a_strategy_are_one_or_the_other():
    evaluator = ReplayEvaluator(builtin(SHIPPED))
    from evokernel.mutators import PointMutation

    with pytest.raises(ConfigError, match="either mutators or a strategy"):
        assemble(SearchSpec(evaluator.space, evaluator, mutators=[PointMutation()], strategy="random"))


def test_a_kernel_evaluator_gets_the_knowledge_recorder_and_the_llm_operator(monkeypatch):
    from evokernel.evaluators import KernelEvaluator
    from evokernel.mutators.llm import AnthropicProvider
    from evokernel.search_spaces import matmul_space
    from evokernel.search_spaces.matmul.template import candidate_source

    evaluator = KernelEvaluator(
        ROOT / "tests" / "corpus" / "problems" / "matmul_small.py", lambda genome: candidate_source(genome.params)
    )
    space = matmul_space()
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    said: list[str] = []
    search = assemble(SearchSpec(space, evaluator, llm="claude-sonnet-5"), say=said.append)
    assert said == ["LLM operator off: no ANTHROPIC_API_KEY; searching without it"]
    assert search.strategy == "model" and any(isinstance(o, KnowledgeRecorder) for o in search.observers)

    provider = AnthropicProvider("claude-sonnet-5", api_key="sk-test")
    if provider.available() is not None:
        pytest.skip(provider.available())
    search = assemble(SearchSpec(space, evaluator, llm=provider))
    recorder = next(o for o in search.observers if isinstance(o, KnowledgeRecorder))
    assert search.strategy == "custom" and search.mutators[-1].name == "llm-rewrite"
    assert recorder.summarizer is provider  # the run ends with a summary of the lessons
    bare = assemble(SearchSpec(space, evaluator, knowledge=False))
    assert not any(isinstance(o, KnowledgeRecorder) for o in bare.observers)


def test_a_search_file_read_as_a_spec(tmp_path: Path):
    path = tmp_path / "s.py"
    path.write_text(
        "from evokernel.evaluators import ReplayEvaluator\n"
        "from evokernel.engine.landscape import builtin\n"
        f"evaluator = ReplayEvaluator(builtin({SHIPPED!r}))\n"
        "space = evaluator.space\nname = 'mine'\nseeds = [evaluator.landscape.optimum()[0]]\n"
    )
    spec = SearchSpec.from_file(path)
    search = assemble(spec)
    assert search.name == "mine" and len(search.seeds) == 1
    (tmp_path / "bad.py").write_text("space = None\n")
    with pytest.raises(ConfigError, match="defines no `space`"):
        SearchSpec.from_file(tmp_path / "bad.py")
    with pytest.raises(ConfigError, match="no such search file"):
        SearchSpec.from_file(tmp_path / "missing.py")
