"""The Triton matmul template, the candidate modules it writes, and the small test problems.

Without a GPU, Triton kernels run only through its interpreter, which `triton.jit` picks
when a kernel is *decorated* (TRITON_INTERPRET=1 read then). Other modules of this pytest
run (the doctests, tests/corpus) import the kernels first, and setting the variable for the
whole process would also turn any kernel imported later into an interpreted one (wrong on
a GPU host). So every check that launches a kernel runs in one fresh interpreter process:
`interpreted` runs this file's `_run_cases` there, once, and each test reads its verdict.

The interpreter does bf16 `tl.dot` wrongly (garbage), so CPU checks use fp32 and fp16;
the bf16 path is checked by the `gpu` tests.
"""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
import traceback
from pathlib import Path
from typing import Any

import pytest
import torch

from evokernel.judge.problem import Problem, load_module
from evokernel.search_spaces.matmul.template import PARAMS, candidate_source

ROOT = Path(__file__).resolve().parents[1]
CORPUS = ROOT / "tests" / "corpus"
PROBLEMS = CORPUS / "problems"
HONEST = CORPUS / "honest"
MATMUL_BF16 = ROOT / "examples" / "problems" / "matmul_bf16.py"


def config(BM: int, BN: int, BK: int, GROUP_M: int, num_warps: int = 4, num_stages: int = 2) -> dict[str, int]:
    return {"BM": BM, "BN": BN, "BK": BK, "GROUP_M": GROUP_M, "num_warps": num_warps, "num_stages": num_stages}


HONEST_CONFIG = config(32, 32, 32, 8)

# (params, (M, N, K), dtype, B transposed): edges not multiples of the tiles, one group of
# GROUP_M tile rows cut short (150 rows / BM=16 = 10 tile rows = 8 + 2), K both a multiple
# of BK and not, and a column-major B (strides passed to the kernel).
TEMPLATE_CASES = [
    (config(16, 64, 32, 1), (33, 70, 48), "float32", False),
    (config(16, 64, 32, 8), (33, 70, 48), "float16", False),
    (config(16, 32, 32, 8), (150, 40, 40), "float32", False),
    (config(16, 32, 32, 8), (150, 40, 40), "float16", True),
    (config(64, 32, 64, 1, num_warps=8, num_stages=3), (64, 96, 128), "float32", True),
    (config(32, 64, 32, 8, num_stages=4), (70, 100, 96), "float16", False),
]
# Against the fp64 product rounded to the dtype: fp32 agrees to rounding, fp16 to an ulp.
TEMPLATE_TOL = {"float32": {"rtol": 1e-5, "atol": 1e-5}, "float16": {"rtol": 2e-3, "atol": 1e-3}}

HONEST_CASES = [
    ("matmul_small", "torch_matmul"),
    ("matmul_small", "triton_matmul"),
    ("softmax_small", "torch_softmax"),
    ("softmax_small", "triton_softmax"),
]


def _case_id(case: tuple[Any, ...]) -> str:
    params, (m, n, k), dtype, bt = case
    tiles = f"{params['BM']}x{params['BN']}x{params['BK']}g{params['GROUP_M']}"
    return f"{tiles}-{m}x{n}x{k}-{dtype}" + ("-Bt" if bt else "")


# --- what runs in the interpreter process -------------------------------------------------


def _check_template(params: dict[str, int], mnk: tuple[int, int, int], dtype: str, b_transposed: bool) -> None:
    from evokernel.search_spaces.matmul.template import matmul

    m, n, k = mnk
    g = torch.Generator().manual_seed(m * n + k)
    a = (torch.randn(m, k, generator=g) / k**0.5).to(getattr(torch, dtype))
    b = torch.randn(n, k, generator=g).t() if b_transposed else torch.randn(k, n, generator=g)
    b = b.to(getattr(torch, dtype))
    c = matmul(a, b, **params)
    want = (a.double() @ b.double()).to(a.dtype)
    torch.testing.assert_close(c, want, **TEMPLATE_TOL[dtype])


def _check_candidate(problem_path: Path, candidate_path: Path) -> None:
    """The candidate matches the problem's reference on every shape, tuned and held out."""
    problem = Problem.load(problem_path)
    candidate = load_module(candidate_path, prefix="_evokernel_candidate")
    for shape in problem.shapes + problem.heldout:
        for seed in (0, 1):
            inputs = problem.make_inputs(shape, seed, "cpu")
            want = problem.reference(*inputs)
            got = candidate.kernel(*inputs)
            tol = problem.tolerance(str(want.dtype).removeprefix("torch."))
            torch.testing.assert_close(got, want, **tol, msg=lambda m: f"{shape}, seed {seed}: {m}")


def _check_generated(tmp: Path) -> None:
    """A module written by candidate_source imports and computes the product."""
    for i, params in enumerate([config(16, 64, 32, 1), config(32, 32, 64, 8, num_warps=8, num_stages=3)]):
        path = tmp / f"generated_{i}.py"
        path.write_text(candidate_source(params))
        _check_candidate(PROBLEMS / "matmul_small.py", path)


def _run_cases(tmp: str) -> None:
    """Entry point of the interpreter process: print {check: None or the failure} as JSON."""
    assert os.environ.get("TRITON_INTERPRET") == "1"
    checks: dict[str, Any] = {f"template-{_case_id(c)}": (_check_template, c) for c in TEMPLATE_CASES}
    checks["generated"] = (_check_generated, (Path(tmp),))
    for problem, candidate in HONEST_CASES:
        checks[f"honest-{candidate}"] = (_check_candidate, (PROBLEMS / f"{problem}.py", HONEST / f"{candidate}.py"))
    verdicts: dict[str, str | None] = {}
    for name, (fn, args) in checks.items():
        try:
            fn(*args)
            verdicts[name] = None
        except Exception:
            verdicts[name] = traceback.format_exc(limit=-3)
    print("VERDICTS " + json.dumps(verdicts))


@pytest.fixture(scope="module")
def interpreted(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str | None]:
    tmp = tmp_path_factory.mktemp("interpreted")
    code = (
        f"import sys; sys.path.insert(0, {str(Path(__file__).parent)!r}); "
        f"import {Path(__file__).stem} as t; t._run_cases({str(tmp)!r})"
    )
    env = {**os.environ, "TRITON_INTERPRET": "1"}
    proc = subprocess.run([sys.executable, "-c", code], env=env, cwd=ROOT, capture_output=True, text=True, timeout=240)
    lines = [line for line in proc.stdout.splitlines() if line.startswith("VERDICTS ")]
    assert proc.returncode == 0 and lines, f"interpreter process failed:\n{proc.stdout}\n{proc.stderr}"
    return json.loads(lines[-1].removeprefix("VERDICTS "))


def _verdict(interpreted: dict[str, str | None], name: str) -> None:
    assert name in interpreted, f"no check named {name}"
    if interpreted[name] is not None:
        pytest.fail(interpreted[name], pytrace=False)


# --- the tests --------------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize("case", TEMPLATE_CASES, ids=_case_id)
def test_template_matches_torch(interpreted, case):
    _verdict(interpreted, f"template-{_case_id(case)}")


def test_generated_candidate_matches_torch(interpreted):
    _verdict(interpreted, "generated")


@pytest.mark.parametrize("candidate", [c for _, c in HONEST_CASES])
def test_honest_candidate_matches_reference(interpreted, candidate):
    _verdict(interpreted, f"honest-{candidate}")


def test_candidate_source_is_valid_stable_python():
    params = config(64, 128, 64, 8, num_warps=8, num_stages=3)
    src = candidate_source(params)
    tree = ast.parse(src)
    assert src == candidate_source(dict(reversed(list(params.items()))))  # order does not matter
    assert candidate_source(config(64, 128, 64, 1)) != src
    [assign] = [n for n in tree.body if isinstance(n, ast.Assign) and n.targets[0].id == "CONFIG"]
    assert ast.literal_eval(assign.value) == params
    assert list(ast.literal_eval(assign.value)) == sorted(PARAMS)
    assert any(isinstance(n, ast.FunctionDef) and n.name == "kernel" for n in tree.body)
    assert "from evokernel.search_spaces.matmul.template import matmul" in src


@pytest.mark.parametrize(
    "bad", [{"BM": 64}, {**config(64, 64, 32, 1), "extra": 1}, {**config(64, 64, 32, 1), "BM": 6.4}]
)
def test_candidate_source_rejects_other_params(bad):
    with pytest.raises(ValueError):
        candidate_source(bad)


def test_honest_triton_candidate_is_candidate_source_output():
    # below the corpus header (`# problem: ...` lines, read by tests/test_gate.py)
    lines = (HONEST / "triton_matmul.py").read_text().splitlines(keepends=True)
    body = "".join(lines[next(i for i, line in enumerate(lines) if not line.startswith("#")) :])
    assert body == candidate_source(HONEST_CONFIG)


@pytest.mark.parametrize("name", ["matmul_small", "softmax_small"])
def test_small_problem_inputs_are_fresh_per_seed(name):
    problem = Problem.load(PROBLEMS / f"{name}.py")
    for shape in problem.shapes + problem.heldout:
        first, again, other = (problem.make_inputs(shape, s, "cpu") for s in (3, 3, 4))
        for x, y, z in zip(first, again, other):
            assert x.dtype == torch.float32 and x.device.type == "cpu"
            assert torch.equal(x, y) and not torch.equal(x, z)
            assert x.std() > 0.1 and bool((x != 0).all())
        assert problem.flops(shape) > 0 and problem.bytes(shape) > 0
    if torch.cuda.is_available():
        assert all(x.device.type == "cuda" for x in problem.make_inputs(problem.shapes[0], 0, "cuda"))
    else:  # the device is honoured, and there is none here
        with pytest.raises((RuntimeError, AssertionError)):
            problem.make_inputs(problem.shapes[0], 0, "cuda")


def test_small_problem_figures():
    matmul = Problem.load(PROBLEMS / "matmul_small.py")
    softmax = Problem.load(PROBLEMS / "softmax_small.py")
    assert matmul.flops({"M": 2, "N": 3, "K": 5}) == 60
    assert matmul.bytes({"M": 2, "N": 3, "K": 5}) == 4 * (10 + 15 + 6)
    assert softmax.flops({"R": 2, "C": 3}) == 30 and softmax.bytes({"R": 2, "C": 3}) == 48
    assert matmul.tolerance("float32") == {"rtol": 1e-4, "atol": 1e-4}


def test_bf16_problem(monkeypatch):
    monkeypatch.delenv("EVOKERNEL_MATMUL_DTYPE", raising=False)
    problem = Problem.load(MATMUL_BF16)
    assert [(s["M"], s["N"], s["K"]) for s in problem.shapes] == [
        (16, 4096, 4096),
        (256, 4096, 14336),
        (2048, 6144, 4096),
        (8192, 8192, 1024),
    ]
    assert len(problem.heldout) == 2 and not any(s in problem.shapes for s in problem.heldout)
    assert problem.flops(problem.shapes[0]) == 2 * 16 * 4096 * 4096
    assert problem.bytes(problem.shapes[0]) == 2 * (16 * 4096 + 4096 * 4096 + 16 * 4096)
    assert problem.tolerance("bfloat16") == {"rtol": 2e-2, "atol": 2e-2}
    shape = {"M": 24, "N": 40, "K": 256}
    a, b = problem.make_inputs(shape, 0, "cpu")
    assert a.dtype == b.dtype == torch.bfloat16 and a.shape == (24, 256) and b.shape == (256, 40)
    assert torch.equal(a, problem.make_inputs(shape, 0, "cpu")[0])
    assert not torch.equal(a, problem.make_inputs(shape, 1, "cpu")[0])
    c = problem.reference(a, b)
    assert c.dtype == torch.bfloat16 and 0.5 < c.float().std() < 2.0  # O(1) outputs


@pytest.mark.parametrize("dtype", ["float16", "float32"])
def test_bf16_problem_dtype_override(monkeypatch, dtype):
    monkeypatch.setenv("EVOKERNEL_MATMUL_DTYPE", dtype)
    problem = Problem.load(MATMUL_BF16)
    a, b = problem.make_inputs({"M": 4, "N": 8, "K": 16}, 0, "cpu")
    assert a.dtype == b.dtype == getattr(torch, dtype)
    assert problem.bytes({"M": 1, "N": 1, "K": 1}) == 3 * a.element_size()
    monkeypatch.setenv("EVOKERNEL_MATMUL_DTYPE", "int8")
    with pytest.raises(Exception, match="EVOKERNEL_MATMUL_DTYPE"):
        Problem.load(MATMUL_BF16)


# --- on a GPU: the bf16 path, which the interpreter cannot check --------------------------


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.parametrize(
    "params",
    [config(16, 64, 128, 1), config(128, 128, 64, 8, num_stages=3), config(128, 256, 64, 8, num_warps=8, num_stages=3)],
    ids=str,
)
def test_template_bf16_on_gpu(monkeypatch, params):
    from evokernel.search_spaces.matmul.template import matmul

    monkeypatch.delenv("EVOKERNEL_MATMUL_DTYPE", raising=False)
    problem = Problem.load(MATMUL_BF16)
    for shape in problem.shapes + problem.heldout + [{"M": 100, "N": 200, "K": 300}]:
        a, b = problem.make_inputs(shape, 0, "cuda")
        torch.testing.assert_close(matmul(a, b, **params), problem.reference(a, b), **problem.tolerance("bfloat16"))
