"""The fused RMSNorm family on the CPU: the template against torch, every point of its space
against the problem's reference, the gate on a sample of points (on every point: slow) and on
a right and three wrong kernels, and a short search with the kernel evaluator (slow).

Kernels that this pytest process would launch run in one fresh interpreter process instead
(`interpreted`; see tests/test_triton_matmul.py for why): it runs `_run_cases` and each test
reads its verdict. The gate's candidates run in the judge's own sandboxes, which switch the
interpreter on themselves. CPU checks use fp32 and fp16; bf16 is the GPU's.
"""

from __future__ import annotations

import json
import os
import traceback
from pathlib import Path
from typing import Any

import pytest
import torch

from evokernel import Budget, Genome, Search, Status
from evokernel.engine.search import SearchOptions
from evokernel.evaluators import KernelEvaluator
from evokernel.judge.gate import GateOptions, Judge
from evokernel.judge.problem import Problem
from evokernel.search_spaces.rmsnorm import PROBLEMS, candidate_source, rmsnorm_class, rmsnorm_seeds, rmsnorm_space
from evokernel.search_spaces.rmsnorm.template import PARAMS

from tests._interpreter import run_interpreted

ROOT = Path(__file__).resolve().parents[3]
PROBLEM = PROBLEMS / "rmsnorm_fp16.py"
QUICK = GateOptions(seeds=1, heldout_seeds=1, recheck_seeds=1, timing={"max_reps": 5, "min_reps": 3})


def config(BLOCK_N: int, ROWS: int = 1, num_warps: int = 4, num_stages: int = 1) -> dict[str, int]:
    return {"BLOCK_N": BLOCK_N, "ROWS": ROWS, "num_warps": num_warps, "num_stages": num_stages}


# (params, (M, N), dtype, residual, strided rows): one block a row (exact and masked), loops
# over the row (N a multiple of the block and not), blocks of rows that M does not divide,
# and rows further apart than N (x, residual a slice of a wider tensor).
TEMPLATE_CASES = [
    (config(256), (5, 200), "float32", False, False),
    (config(256), (5, 200), "float16", True, False),
    (config(64, num_stages=2), (5, 200), "float32", True, False),
    (config(64, ROWS=4, num_warps=2, num_stages=3), (33, 256), "float16", False, False),
    (config(128, ROWS=8, num_warps=8), (33, 100), "float16", True, True),
    (config(1024, ROWS=2), (7, 1000), "float32", True, True),
    (config(256, ROWS=2, num_warps=2, num_stages=2), (3, 1000), "float16", True, False),
    (config(4096, num_warps=8), (2, 4096), "float16", True, False),
]
# Against torch's rms_norm in fp64, rounded once: fp32 agrees to rounding, fp16 to an ulp
# (the loop scales the fp16-rounded h it wrote, as the problem's tolerance allows).
TEMPLATE_TOL = {"float32": {"rtol": 1e-5, "atol": 1e-5}, "float16": {"rtol": 2e-3, "atol": 2e-3}}
#: The shape at which every point of `rmsnorm_space(hidden=N)` is run.
SPACE_SHAPE = {"M": 5, "N": 200}


def _case_id(case: tuple[Any, ...]) -> str:
    params, (m, n), dtype, residual, strided = case
    block = f"{params['ROWS']}x{params['BLOCK_N']}w{params['num_warps']}s{params['num_stages']}"
    return f"{block}-{m}x{n}-{dtype}" + ("-residual" if residual else "") + ("-strided" if strided else "")


# --- what runs in the interpreter process -------------------------------------------------


def _check_template(params: dict[str, int], mn: tuple[int, int], dtype: str, residual: bool, strided: bool) -> None:
    from evokernel.search_spaces.rmsnorm.template import rmsnorm

    m, n = mn
    g = torch.Generator().manual_seed(m * n)
    wide = n + 7 if strided else n
    x = (2 * torch.randn(m, wide, generator=g)).to(getattr(torch, dtype))[:, :n]
    r = torch.randn(m, wide, generator=g).to(x.dtype)[:, :n] if residual else None
    w = (1 + 0.1 * torch.randn(n, generator=g)).to(x.dtype)
    h = x.double() if r is None else x.double() + r.double()
    want = torch.nn.functional.rms_norm(h, (n,), w.double(), eps=1e-6).to(x.dtype)
    got = rmsnorm(x, w, r, **params)
    if residual:
        got, got_h = got
        torch.testing.assert_close(got_h, h.to(x.dtype), rtol=0, atol=0)
    assert got.is_contiguous() and got.shape == (m, n)
    torch.testing.assert_close(got, want, **TEMPLATE_TOL[dtype])


def _check_space(dtype: str, residual: bool) -> None:
    """Every valid point of the space at SPACE_SHAPE: the rendered candidate matches the
    problem's reference within the problem's tolerance."""
    problem = Problem.load(PROBLEM, params={"dtype": dtype, "residual": residual})
    shape = SPACE_SHAPE
    inputs = problem.make_inputs(shape, 0, "cpu")
    want = problem.reference(*inputs)
    want = want if isinstance(want, tuple) else (want,)
    tol = problem.tolerance(dtype)
    failed = []
    points = rmsnorm_space(shape["N"]).valid_points()
    assert len(points) > 100
    for point in points:
        module: dict[str, Any] = {}
        exec(compile(candidate_source(point), "<candidate>", "exec"), module)
        got = module["kernel"](*inputs)
        got = got if isinstance(got, tuple) else (got,)
        try:
            for a, b in zip(got, want, strict=True):
                torch.testing.assert_close(a, b, **tol)
        except AssertionError as exc:
            failed.append(f"{point}: {str(exc).splitlines()[0]}")
    assert not failed, f"{len(failed)} of {len(points)} points fail:\n" + "\n".join(failed[:5])


def _run_cases() -> None:
    """Entry point of the interpreter process: print {check: None or the failure} as JSON."""
    assert os.environ.get("TRITON_INTERPRET") == "1"
    checks: dict[str, Any] = {f"template-{_case_id(c)}": (_check_template, c) for c in TEMPLATE_CASES}
    checks["space-float16-residual"] = (_check_space, ("float16", True))
    checks["space-float32"] = (_check_space, ("float32", False))
    verdicts: dict[str, str | None] = {}
    for name, (fn, args) in checks.items():
        try:
            fn(*args)
            verdicts[name] = None
        except Exception:
            verdicts[name] = traceback.format_exc(limit=-3)
    print(json.dumps(verdicts))  # (the last line: what run_interpreted reads)


@pytest.fixture(scope="module")
def interpreted() -> dict[str, str | None]:
    code = f"import sys; sys.path.insert(0, {str(ROOT)!r}); import {__name__} as t; t._run_cases()"
    return run_interpreted(code, timeout=280)


def _verdict(interpreted: dict[str, str | None], name: str) -> None:
    assert name in interpreted, f"no check named {name}"
    if interpreted[name] is not None:
        pytest.fail(interpreted[name], pytrace=False)


# --- the template and the space -----------------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize("case", TEMPLATE_CASES, ids=_case_id)
def test_template_matches_torch(interpreted, case):
    _verdict(interpreted, f"template-{_case_id(case)}")


@pytest.mark.parametrize("check", ["space-float16-residual", "space-float32"])
def test_every_point_of_the_space_computes_the_problem(interpreted, check):
    _verdict(interpreted, check)


def test_every_point_renders_stable_python_with_exactly_the_space_params():
    space = rmsnorm_space()
    assert set(space.names) == set(PARAMS)
    for point in space.valid_points():
        src = candidate_source(point)
        compile(src, "<candidate>", "exec")
        assert src == candidate_source(dict(reversed(list(point.items()))))
    with pytest.raises(ValueError):
        candidate_source({**space.default(), "extra": 1})


def test_the_hidden_size_rules_out_only_waste():
    """Each rule says why; with the hidden size known, no valid block is wider than the
    row's power of two, and a one-block row has one stage count."""
    free, at = rmsnorm_space(), rmsnorm_space(hidden=1000)
    assert {tuple(p.items()) for p in at.valid_points()} < {tuple(p.items()) for p in free.valid_points()}
    assert max(p["BLOCK_N"] for p in at.valid_points()) == 1024
    assert {p["num_stages"] for p in at.valid_points() if p["BLOCK_N"] == 1024} == {1}
    assert at.why_invalid(config(16384, num_warps=4)).startswith("registers")
    assert free.why_invalid(config(64, num_warps=32)).startswith("lanes")
    for hidden in (1, 64, 200, 4096, 5120, 8192, 100_000):
        space = rmsnorm_space(hidden)
        assert space.is_valid(space.default())
        seeds = rmsnorm_seeds(hidden, space)
        assert seeds and all(space.is_valid(s) for s in seeds)
        assert seeds[0]["BLOCK_N"] >= min(hidden, 16384)  # the first seed: the row in one block
    with pytest.raises(ValueError):
        rmsnorm_space(0)


def test_the_problem_declares_what_the_judge_needs(monkeypatch):
    for name in ("EVOKERNEL_RMSNORM_DTYPE", "EVOKERNEL_RMSNORM_RESIDUAL"):
        monkeypatch.delenv(name, raising=False)
    problem = Problem.load(PROBLEM)
    assert problem.params == {"dtype": "float16", "residual": True} and problem.family == "rmsnorm"
    assert problem.on_cpu().shapes == problem.cpu_shapes and len(problem.cpu_heldout) == 1
    x, w, r = problem.make_inputs({"M": 3, "N": 64}, 0, "cpu")
    assert x.dtype == w.dtype == r.dtype == torch.float16 and x.shape == r.shape == (3, 64) and w.shape == (64,)
    assert torch.equal(x, problem.make_inputs({"M": 3, "N": 64}, 0, "cpu")[0])
    y, h = problem.reference(x, w, r)
    assert torch.equal(h, (x.float() + r.float()).half()) and 0.8 < y.float().square().mean().sqrt() < 1.2
    assert problem.bytes({"M": 2, "N": 8}) == 2 * (4 * 16 + 8)
    plain = Problem.load(PROBLEM, params={"residual": False, "dtype": "float32"})
    assert len(plain.make_inputs({"M": 2, "N": 8}, 0, "cpu")) == 2 and plain.tolerance("float32")["rtol"] == 1e-5


# --- through the gate ---------------------------------------------------------------------


def test_a_sample_of_points_passes_the_gate():
    """The seeds and the corners of the space at the CPU shapes' widest row (the most loop
    iterations, the widest block of rows), each a candidate the judge accepts."""
    problem = Problem.load(PROBLEM, params={"dtype": "float16", "residual": True}).on_cpu()
    hidden = max(s["N"] for s in problem.shapes + problem.heldout)
    space = rmsnorm_space(hidden)
    points = rmsnorm_seeds(hidden, space) + [config(64, num_warps=1, num_stages=3), config(1024, ROWS=8, num_warps=4)]
    genomes = [space.genome(p) for p in points]
    options = GateOptions(seeds=1, heldout_seeds=1, recheck_seeds=0, time=False)
    with KernelEvaluator(problem, lambda g: candidate_source(g.params), device="cpu", options=options, workers=1) as ev:
        results = list(ev.evaluate(genomes))
    assert [r.status for r in results] == [Status.OK] * len(genomes), [(r.status, r.error) for r in results]


@pytest.mark.slow
def test_every_point_passes_the_gate_at_a_tiny_shape():
    """Every valid point of the space at one tiny shape (SPACE_SHAPE, no held-out shape), as
    the judge checks a candidate: outputs poisoned before the call, inputs unchanged, no
    aliasing. About 0.2 s a point in the interpreter."""
    tiny = Problem.load(PROBLEM, params={"dtype": "float16", "residual": True}).on_cpu()  # a copy
    tiny.shapes, tiny.heldout = [SPACE_SHAPE], []
    space = rmsnorm_space(SPACE_SHAPE["N"])
    genomes = [space.genome(p) for p in space.valid_points()]
    options = GateOptions(seeds=1, heldout_seeds=0, recheck_seeds=0, time=False)
    with KernelEvaluator(tiny, lambda g: candidate_source(g.params), device="cpu", options=options, workers=1) as ev:
        failed = [
            (g.params, r.status, r.error) for g, r in zip(genomes, ev.evaluate(genomes)) if r.status is not Status.OK
        ]
    assert len(genomes) > 100 and not failed, failed[:3]


RIGHT = "y = h * torch.rsqrt(h.square().mean(-1, keepdim=True) + 1e-6) * w.float()"


@pytest.mark.parametrize(
    "body, verdict",
    [
        (RIGHT, "accepted"),
        (RIGHT.removesuffix(" * w.float()"), "wrong result"),  # the weight forgotten
        (RIGHT.replace("+ 1e-6", "+ 1e-6) * torch.rsqrt(torch.tensor(1.01)"), "wrong result"),  # 0.5% off
        (RIGHT + "; h = x.float()", "wrong result"),  # the residual's sum not returned
    ],
    ids=["right", "no-weight", "half-a-percent", "no-residual-out"],
)
def test_the_problem_tells_a_right_kernel_from_the_usual_mistakes(body, verdict):
    source = (
        "import torch\n\n\ndef kernel(x, w, residual):\n"
        "    h = x.float() + residual.float()\n"
        f"    {body}\n"
        "    return y.to(x.dtype), h.to(x.dtype)\n"
    )
    judge = Judge(
        Problem.load(PROBLEM, params={"dtype": "float16", "residual": True}).on_cpu(), "cpu", GateOptions(time=False)
    )
    try:
        got = judge.check(source)
    finally:
        judge.close()
    assert got.accepted == (verdict == "accepted") and got.reason.startswith(verdict), got.reason


@pytest.mark.slow
def test_a_short_search_finds_a_valid_winner(tmp_path: Path):
    problem = Problem.load(PROBLEM, params={"dtype": "float16", "residual": True}).on_cpu()
    hidden = max(s["N"] for s in problem.shapes + problem.heldout)
    space = rmsnorm_space(hidden)
    with KernelEvaluator(problem, lambda g: candidate_source(g.params), device="cpu", options=QUICK, workers=1) as ev:
        search = Search(
            space,
            ev,
            descriptor=rmsnorm_class,
            seeds=rmsnorm_seeds(hidden, space),
            options=SearchOptions(population=3, remeasure=1, report_elites=2),
        )
        report = search.run(Budget(evaluations=5), seed=0)
    assert report.evaluations == 5 and report.statuses.get("ok", 0) == 5, report.statuses
    best = report.best
    assert best is not None and best.latency_ms > 0 and space.is_valid(best.genome.params)
    assert isinstance(best.genome, Genome) and best.niche == rmsnorm_class(best.genome)


# --- on a GPU: bf16 at the problem's own shapes, which the CPU tests leave out ------------


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.parametrize("residual", [True, False])
def test_template_bf16_at_the_problems_shapes_on_gpu(residual):
    from evokernel.search_spaces.rmsnorm.template import rmsnorm

    problem = Problem.load(PROBLEM, params={"dtype": "bfloat16", "residual": residual})
    for shape in problem.shapes + problem.heldout:
        space = rmsnorm_space(shape["N"])
        for params in rmsnorm_seeds(shape["N"], space) + [config(256, ROWS=4, num_warps=4, num_stages=3)]:
            inputs = problem.make_inputs(shape, 0, "cuda")
            got, want = rmsnorm(*inputs, **params), problem.reference(*inputs)
            for a, b in zip(got if residual else (got,), want if residual else (want,), strict=True):
                torch.testing.assert_close(
                    a, b, **problem.tolerance("bfloat16"), msg=lambda m: f"{shape} {params}: {m}"
                )
