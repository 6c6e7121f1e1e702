"""One footing: every figure says how it was timed, figures timed differently are never
compared, calls that synchronise with the host are reported, and host-side input values
(varlen metadata) reach the kernel as plain Python values.

The host-sync detections need a GPU (the mechanism is CUDA's): the corpus entries
tests/corpus/cheats/host_sync_*.py run them through the CLI on the H200, and the GPU tests
below run them in-process; on the CPU, the rest."""

from __future__ import annotations

import textwrap
from pathlib import Path

import msgspec
import pytest
import torch

from evokernel.judge.footing import Footing, FootingMismatch, Timed, check_results, check_same, speedup
from evokernel.judge.gate import GateOptions, Judge
from evokernel.judge.problem import Problem, ProblemError
from evokernel.core.result import Result, Status

HAS_CUDA = torch.cuda.is_available()
QUICK = GateOptions(
    seeds=1,
    heldout_seeds=0,
    recheck_seeds=0,
    rotate=2,
    samples=1,
    sample_rate=1.0,
    timing={"min_reps": 3, "max_reps": 5, "max_s": 0.5},
    race=0,
)


def _result(ms: float, footing: Footing | None, shape: str = "n=8") -> Result:
    t = {"shape": shape, "median_ms": ms}
    if footing is not None:
        t["footing"] = msgspec.to_builtins(footing)
    return Result.ok(ms, meta={"timings": [t]})


def test_figures_on_different_footings_are_refused_with_a_clear_message():
    graph, eager = Footing(mode="graph", calls=1, flush_mb=256, sets=3), Footing(mode="held", sets=3, flush_mb=256)
    assert speedup(Timed("mine", graph, 0.5), Timed("cuBLAS", graph, 1.0)) == 2.0
    with pytest.raises(FootingMismatch, match=r"cannot compare mine \(graph replay.*with cuBLAS \(held eager"):
        speedup(Timed("mine", graph, 0.5), Timed("cuBLAS", eager, 1.0))
    # dict forms (as results store them) compare like the records
    assert check_same({"a": graph, "b": msgspec.to_builtins(graph)}) == graph
    with pytest.raises(FootingMismatch):
        check_same({"a": graph, "b": msgspec.to_builtins(Footing(mode="graph", calls=32, sets=3))})
    with pytest.raises(ValueError, match="footing mode"):
        Footing(mode="fast")


def test_gate_results_compare_only_on_one_footing_per_shape():
    g = Footing(mode="graph", flush_mb=256, sets=3, perturb=8)
    h = Footing(mode="held", flush_mb=256, sets=3, perturb=8)
    assert check_results({"winner": _result(1.0, g), "cublas": _result(1.1, g)}) == g
    with pytest.raises(FootingMismatch, match="n=8: cannot compare winner"):
        check_results({"winner": _result(1.0, g), "cublas": _result(1.1, h)})
    failed = Result.failed(Status.COMPILE_ERROR, "no")
    assert check_results({"winner": _result(1.0, g), "broken": failed, "old": _result(1.0, None)}) == g


def test_the_benchmarks_refuse_a_speedup_across_footings(tmp_path: Path):
    """`search_against` (what the benchmarks report with) divides the winner's figure by each
    baseline's only when the gate timed them the same way."""
    from evokernel.engine.tuning import search_against

    from evokernel import Genome, SearchSpace
    from evokernel.core.space import Choice

    space = SearchSpace([Choice("x", [1, 2])])

    class Ev:
        name = "fake"

        def __init__(self, footings: dict[int, Footing]) -> None:
            self.footings = footings

        def fingerprint(self) -> dict:
            return {"evaluator": "fake"}

        def evaluate(self, genomes):
            for g in genomes:
                yield _result(float(g.params.get("x", 3)), self.footings.get(g.params.get("x", 3)))

        def remeasure(self, genomes, rounds=3):
            return list(self.evaluate(genomes))

    g = Footing(mode="graph", sets=3)
    base = {"lib": Genome.of({"x": 3}, source="def kernel(): pass")}
    part, _ = search_against(
        space, Ev({1: g, 2: g, 3: g}), store=None, name="t", evaluations=2, wall_s=30, baselines=base
    )
    assert part["timing"]["gate"]["mode"] == "graph" and part["speedup"]["lib"] == 3.0
    with pytest.raises(FootingMismatch, match="cannot compare winner"):
        search_against(
            space,
            Ev({1: g, 2: g, 3: Footing(mode="held", sets=3)}),
            store=None,
            name="t2",
            evaluations=2,
            wall_s=30,
            baselines=base,
        )


# -- host-side input values (the varlen contract) ------------------------------------------
_VARLEN = """
import torch
SHAPES = [{"lens": "5/3/9"}]
TOLERANCE = {"float32": {"rtol": 1e-5, "atol": 1e-5}}

def make_inputs(shape, seed, device="cpu"):
    lens = tuple(int(n) for n in shape["lens"].split("/"))
    g = torch.Generator(device=device).manual_seed(seed)
    x = torch.randn(sum(lens), 4, generator=g, device=device)
    return x, max(lens) + {drift}, lens

def reference(x, max_seqlen, seqlens):
    assert type(max_seqlen) is int and type(seqlens) is tuple
    return torch.cat([x[s:s + n].cumsum(0) for s, n in zip([0, 5, 8], seqlens)])
"""

_CANDIDATE = """
import torch

def kernel(x, max_seqlen, seqlens):
    if type(max_seqlen) is not int or type(seqlens) is not tuple or not all(type(n) is int for n in seqlens):
        raise TypeError(f"host values arrived as {type(max_seqlen)}, {type(seqlens)}")
    out, s = torch.empty_like(x), 0
    for n in seqlens:  # host-side lengths: no read-back from the device
        out[s:s + n] = x[s:s + n].cumsum(0)
        s += n
    return out
"""


def _problem(tmp_path: Path, drift: str) -> Problem:
    path = tmp_path / f"varlen_{'drift' if drift != '0' else 'ok'}.py"
    path.write_text(textwrap.dedent(_VARLEN.replace("{drift}", drift)))
    return Problem.load(path)


def test_host_side_input_values_reach_the_kernel_as_plain_python_values(tmp_path: Path):
    judge = Judge(_problem(tmp_path, "0"), "cpu", QUICK)
    try:
        verdict = judge.check(_CANDIDATE)
    finally:
        judge.close()
    assert verdict.accepted, verdict.reason
    (timing,) = verdict.timings
    assert timing.footing == Footing(mode="cpu-judge", calls=1, sets=2, perturb=8)


def test_a_host_side_value_that_changes_between_draws_is_the_problems_error(tmp_path: Path):
    with pytest.raises(ProblemError, match="host-side input 1 changed between draws"):
        Judge(_problem(tmp_path, "seed % 1000003"), "cpu", QUICK)


# -- on the GPU ----------------------------------------------------------------------------
gpu = pytest.mark.skipif(not HAS_CUDA, reason="needs a CUDA GPU")


@gpu
@pytest.mark.gpu
@pytest.mark.parametrize(
    "sync",
    [
        "x.sum().item()",
        "x.shape[0] == torch.tensor(1, device=x.device).tolist()",
        "torch.cuda.synchronize()",
        "torch.cuda.current_stream().synchronize()",
    ],
)
@pytest.mark.parametrize("graph", ["on", "off"])
def test_a_call_that_synchronises_with_the_host_is_reported_not_timed(sync: str, graph: str):
    from evokernel.judge.timing import HostSync, time_cuda

    watched = {
        "torch.cuda.Event": torch.cuda.Event,
        "torch.cuda.synchronize": torch.cuda.synchronize,
        "time.perf_counter": __import__("time").perf_counter,
    }
    xs = [torch.randn(1024, 1024, device="cuda") for _ in range(2)]

    def honest(x):
        return x @ x

    def syncing(x):
        y = x @ x
        eval(sync, {"torch": torch, "x": y})
        return y

    samples, used_graph, _ = time_cuda(
        [lambda x=x: honest(x) for x in xs], watched=watched, graph=graph, min_reps=5, max_reps=10
    )
    assert samples and used_graph == (graph == "on")
    with pytest.raises(HostSync, match="host-synchronising"):
        time_cuda([lambda x=x: syncing(x) for x in xs], watched=watched, graph=graph, min_reps=5, max_reps=10)


@gpu
@pytest.mark.gpu
def test_side_by_side_times_both_ways_and_pairs_the_rounds():
    from evokernel.judge.footing import side_by_side

    sets = [
        (
            torch.randn(2048, 2048, device="cuda", dtype=torch.bfloat16),
            torch.randn(2048, 2048, device="cuda", dtype=torch.bfloat16),
        )
        for _ in range(8)
    ]
    fns = {"a": lambda s: torch.matmul(*s), "b": lambda s: torch.matmul(*s)}
    graph = side_by_side(fns, sets, mode="graph", rounds=5)
    eager = side_by_side(fns, sets, mode="eager", rounds=5)
    assert graph["footing"].mode == "graph" and eager["footing"].mode == "eager"
    assert 0.8 < graph["ratios"]["b"]["median"] < 1.25
    assert eager["timed"]["a"].host_us is not None and eager["timed"]["a"].host_us > 0
    with pytest.raises(FootingMismatch):
        speedup(graph["timed"]["a"], eager["timed"]["b"])
