"""How the contract suites build the components they check.

A registered component is built by calling what its entry point names with no arguments,
or its `example()` (evokernel.core.plugins.HasExample) when it needs arguments. The shipped
components that need test data get a recipe here: the replay evaluator a shipped landscape,
the kernel evaluator a CPU problem of the test corpus (and the registered Triton matmul
template, through the interpreter), the LLM rewrite operator recorded
Messages API responses served through the real SDK's HTTP transport (never a fake client),
the model evaluator a tiny model of examples/models.
"""

from __future__ import annotations

import hashlib
import json
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from evokernel.core.genome import Genome
from evokernel.core.plugins import HasExample, load, registered
from evokernel.core.space import SearchSpace

ROOT = Path(__file__).resolve().parents[2]
RECORDED = ROOT / "tests" / "recorded" / "anthropic"
MATMUL_PROBLEM = ROOT / "tests" / "corpus" / "problems" / "matmul_small.py"
LANDSCAPE = "matmul_bf16_h200_M16_N4096_K4096"


def names(group: str) -> list[str]:
    """The registered names of a group, sorted: what a suite is parametrized over."""
    return sorted(registered(group))


def _built(group: str, name: str) -> Any:
    """What the entry point names, called with no arguments, or its example()."""
    obj = load(group, name)
    if isinstance(obj, HasExample):
        return obj.example()
    try:
        return obj()
    except TypeError as exc:
        pytest.fail(
            f"{group} {name!r} ({registered(group)[name].value}) cannot be built for its contract suite: "
            f"{exc}. Register a zero-argument factory, or give it an example() classmethod "
            "(evokernel.core.plugins.HasExample)"
        )


# -- a candidate source for a matmul genome, without a Triton template ----------------------


def torch_render(genome: Genome) -> str:
    """A candidate module for matmul_small that keeps the genome's parameters as CONFIG."""
    return (
        f'"""matmul through torch (contract suite)."""\n\nimport torch\n\nCONFIG = {dict(genome.params)!r}\n\n\n'
        "def kernel(a, b):\n    return torch.matmul(a, b)\n"
    )


# -- recorded Messages API responses -------------------------------------------------------


class RecordedAnthropic:
    """Serves the recorded tool-use answer to every request through the SDK's HTTP transport.

    The answer's source gets a comment naming a hash of the request, so that each distinct
    prompt has its own answer and the same prompt always the same one: two operators given
    the same history make the same requests and get the same answers."""

    def __init__(self, name: str = "success_tool_use.json") -> None:
        self.body = json.loads((RECORDED / name).read_text())
        self.requests: list[dict[str, Any]] = []

    def __call__(self, request: Any) -> Any:
        httpx = _httpx()
        self.requests.append(json.loads(request.content))
        body = json.loads(json.dumps(self.body))
        digest = hashlib.sha256(request.content).hexdigest()[:12]
        for block in body.get("content", []):
            if block.get("type") == "tool_use" and "source" in block["input"]:
                block["input"]["source"] += f"\n# answer to request {digest}\n"
        return httpx.Response(200, json=body, headers={"request-id": "req_contract"})


def _httpx() -> Any:
    try:  # the HTTP library the SDK is built on: httpx2 in recent releases, httpx before
        import httpx2 as httpx
    except ImportError:  # pragma: no cover - depends on the installed SDK
        import httpx
    return httpx


def llm_rewrite() -> Any:
    anthropic = pytest.importorskip("anthropic")
    from evokernel.mutators.llm import AnthropicProvider, LLMRewrite

    httpx = _httpx()
    client = anthropic.Anthropic(
        api_key="sk-test", max_retries=0, http_client=httpx.Client(transport=httpx.MockTransport(RecordedAnthropic()))
    )
    return LLMRewrite(MATMUL_PROBLEM, provider=AnthropicProvider("claude-sonnet-5", client=client), render=torch_render)


MUTATOR_RECIPES: dict[str, Callable[[], Any]] = {"llm": llm_rewrite}


def build_mutator(name: str) -> Any:
    """A fresh instance of the registered mutator `name`."""
    recipe = MUTATOR_RECIPES.get(name)
    return recipe() if recipe is not None else _built("evokernel.mutators", name)


# -- evaluators ----------------------------------------------------------------------------


@dataclass
class EvaluatorCase:
    """An evaluator to check, the genomes to check it on, and why its behaviour is not
    checked here (None: it is)."""

    evaluator: Any
    genomes: list[Genome] = field(default_factory=list)
    failing: list[Genome] = field(default_factory=list)  # genomes whose result must be a failure value
    skip_behaviour: str | None = None
    deterministic: bool = True  # same genomes, same fresh instance: the same results


def _replay() -> EvaluatorCase:
    import numpy as np

    from evokernel.engine.landscape import builtin
    from evokernel.evaluators import ReplayEvaluator

    ev = ReplayEvaluator(builtin(LANDSCAPE), noise=0.05, seed=0)
    rng = np.random.default_rng(0)
    genomes = [Genome.of(ev.space.sample(rng)) for _ in range(6)]
    missing = Genome.of({**genomes[0].params, "BM": 3})  # a configuration the landscape never recorded
    return EvaluatorCase(ev, genomes, [missing])


def _kernel() -> EvaluatorCase:
    from evokernel.evaluators import KernelEvaluator
    from evokernel.judge.gate import GateOptions
    from evokernel.search_spaces import matmul_space

    def render(genome: Genome) -> str:
        if genome["BM"] == 256:
            raise ValueError("no 256-row tiles in the contract suite")
        return torch_render(genome)

    quick = GateOptions(seeds=1, heldout_seeds=1, recheck_seeds=1, timing={"max_reps": 5, "min_reps": 3})
    ev = KernelEvaluator(MATMUL_PROBLEM, render, device="cpu", options=quick, workers=2)
    space = matmul_space()
    # one genome rendered (through torch), one carrying its own source: the registered Triton
    # template, run by the Triton interpreter on the CPU
    triton = {"BM": 32, "BN": 32, "BK": 32, "GROUP_M": 8, "num_warps": 4, "num_stages": 2}
    genomes = [
        space.genome(BM=16, BN=32, BK=32, GROUP_M=1, num_warps=4, num_stages=2),
        Genome.of(triton, source=load("evokernel.templates", "triton_matmul")(triton)),
    ]
    failing = [space.genome(BM=256, BN=32, BK=32, GROUP_M=1, num_warps=4, num_stages=2)]
    # timings on a shared CPU differ run to run: results are compared by status, not latency
    return EvaluatorCase(ev, genomes, failing, deterministic=False)


def _model() -> EvaluatorCase:
    from evokernel.evaluators.model import ModelEvaluator, TimingOptions

    sys.path.insert(0, str(ROOT / "examples" / "models"))
    try:
        import qwen3_moe_stack
    finally:
        sys.path.remove(str(ROOT / "examples" / "models"))
    ev = ModelEvaluator(
        qwen3_moe_stack.model(),
        qwen3_moe_stack.example_inputs(),
        name="qwen-tiny",
        device="cpu",
        timing=TimingOptions(rounds=2, reps=1, warmup=1),
    )
    return EvaluatorCase(
        ev,
        skip_behaviour="its measurements (compiled whole-model forwards, CUDA graphs) need a "
        "CUDA GPU; on a CPU each genome compiles the model for seconds "
        "(tests/test_model_level.py checks evaluate and remeasure there)",
    )


def _sglang() -> EvaluatorCase:
    from evokernel.evaluators.sglang import SGLangEvaluator

    ev = SGLangEvaluator(["--model-path", "contract-suite", "--load-format", "dummy"])
    return EvaluatorCase(
        ev,
        skip_behaviour="evaluating starts SGLang engines: needs the sglang extra and a CUDA GPU "
        "(tests/test_sglang_evaluator.py checks its CPU parts)",
    )


def _cascade() -> EvaluatorCase:
    from evokernel.evaluators import Cascade

    replay = _replay()
    return EvaluatorCase(Cascade(replay.evaluator.fidelities()), replay.genomes, replay.failing)


EVALUATOR_RECIPES: dict[str, Callable[[], EvaluatorCase]] = {
    "replay": _replay,
    "cascade": _cascade,
    "kernel": _kernel,
    "model": _model,
    "sglang": _sglang,
}


def build_evaluator(name: str) -> EvaluatorCase:
    recipe = EVALUATOR_RECIPES.get(name)
    if recipe is not None:
        return recipe()
    ev = _built("evokernel.evaluators", name)
    space = getattr(ev, "space", None)
    if not isinstance(space, SearchSpace):
        return EvaluatorCase(
            ev,
            skip_behaviour=f"{name!r} gives no `space` to draw genomes from (give its "
            "example() evaluator a `space` attribute)",
        )
    import numpy as np

    rng = np.random.default_rng(0)
    return EvaluatorCase(ev, [Genome.of(space.sample(rng)) for _ in range(4)], deterministic=False)


# -- stores --------------------------------------------------------------------------------

#: Store back ends, by name: where one lives given a fresh folder (opened with open_store).
STORES: dict[str, Callable[[Path], str]] = {
    "sqlite-file": lambda folder: str(folder / "contract.db"),
    "sqlite-memory": lambda folder: ":memory:",
}


# -- spaces --------------------------------------------------------------------------------


def build_space(name: str) -> SearchSpace:
    space = _built("evokernel.search_spaces", name)
    assert isinstance(space, SearchSpace), f"search space {name!r} built a {type(space).__name__}, not a SearchSpace"
    return space
