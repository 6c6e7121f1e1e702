"""Identity covers everything a result depends on: a problem's parameters and the template's
source are part of the fingerprint, and no stored result crosses a changed one."""

from __future__ import annotations

import sqlite3
import sys
from pathlib import Path

import msgspec
import pytest
from evokernel.evaluators import KernelEvaluator
from evokernel.evaluators.kernel import reference_source
from evokernel.search_spaces import matmul_space

from evokernel import Budget, Search, SearchOptions
from evokernel.core.evaluator import fingerprint_hash
from evokernel.judge.gate import GateOptions, Judge
from evokernel.judge.problem import Problem, ProblemError, load_module
from evokernel.store import SQLiteStore
from evokernel.core.template import template_files, template_hash

ROOT = Path(__file__).resolve().parents[1]
PROBLEMS = ROOT / "examples" / "problems"
GEMM = PROBLEMS / "gemm_bf16.py"
MATMUL_SMALL = ROOT / "tests" / "corpus" / "problems" / "matmul_small.py"
QUICK = GateOptions(seeds=1, heldout_seeds=1, recheck_seeds=1, timing={"max_reps": 5, "min_reps": 3})

#: a valid value other than the default for every parameter of gemm_bf16.py
GEMM_OTHER = {"model": "qwen3-30b-a3b", "layer": "o", "m": [64], "epilogue": "bias+silu", "dtype": "float16"}
GEMM_ENV = {
    "EVOKERNEL_GEMM_MODEL": "qwen3-30b-a3b",
    "EVOKERNEL_GEMM_LAYER": "o",
    "EVOKERNEL_GEMM_M": "16,32",
    "EVOKERNEL_GEMM_EPILOGUE": "bias+silu",
    "EVOKERNEL_GEMM_DTYPE": "float16",
}


@pytest.fixture
def clean_env(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    for var in [*GEMM_ENV, "EVOKERNEL_MATMUL_DTYPE", "EVOKERNEL_MOE_TRACE", "EVOKERNEL_FP8_SCALES"]:
        monkeypatch.delenv(var, raising=False)
    return monkeypatch


# -- problem parameters --------------------------------------------------------------------
def test_every_problem_parameter_changes_the_fingerprint(clean_env):
    base = Problem.load(GEMM, params={})
    fields = [f.name for f in msgspec.structs.fields(base.module.Params)]
    assert sorted(fields) == sorted(GEMM_OTHER), "a new parameter needs a value here"
    seen = {fingerprint_hash(base.fingerprint())}
    for name in fields:
        other = Problem.load(GEMM, params={name: GEMM_OTHER[name]})
        assert other.params[name] == GEMM_OTHER[name]
        assert other.fingerprint()["params"] != base.fingerprint()["params"], name
        seen.add(fingerprint_hash(other.fingerprint()))
    assert len(seen) == len(fields) + 1
    # the case: the same file and shapes, a fused epilogue: not the same problem
    plain, fused = Problem.load(GEMM), Problem.load(GEMM, params={"epilogue": "bias+silu"})
    assert plain.shapes == fused.shapes and plain.fingerprint()["source"] == fused.fingerprint()["source"]
    assert plain.fingerprint() != fused.fingerprint()


def test_every_problem_module_declares_typed_parameters(clean_env):
    for path in [*sorted(PROBLEMS.glob("*.py")), ROOT / "benchmarks" / "problems" / "matmul_bf16_m2048.py"]:
        p = Problem.load(path)
        assert p.params is not None and "params" in p.fingerprint(), path.name
        assert "os.environ" not in path.read_text(), path.name  # parameters come through problem_params
    # a problem without parameters keeps the fingerprint it had
    assert Problem.load(MATMUL_SMALL).params is None and "params" not in Problem.load(MATMUL_SMALL).fingerprint()


def test_environment_text_and_explicit_parameters_agree(clean_env):
    explicit = {"model": "qwen3-30b-a3b", "layer": "o", "m": [16, 32], "epilogue": "bias+silu", "dtype": "float16"}
    text = {"model": "qwen3-30b-a3b", "layer": "o", "m": "16,32", "epilogue": "bias+silu", "dtype": "float16"}
    by_params = Problem.load(GEMM, params=explicit)
    by_text = Problem.load(GEMM, param_text=text)
    for var, value in GEMM_ENV.items():
        clean_env.setenv(var, value)
    by_env = Problem.load(GEMM)
    assert by_env.params == by_params.params == by_text.params == explicit
    assert by_env.fingerprint() == by_params.fingerprint() == by_text.fingerprint()
    assert by_env.shapes == [{"M": 16, "N": 2048, "K": 4096}, {"M": 32, "N": 2048, "K": 4096}]
    # explicit parameters do not read the environment: the rest take their defaults
    assert Problem.load(GEMM, params={}).params["epilogue"] == "none"
    # text overrides the environment, field by field
    assert Problem.load(GEMM, param_text={"epilogue": "none"}).params == {**explicit, "epilogue": "none"}


def test_two_loads_with_different_parameters_are_independent(clean_env):
    a = Problem.load(GEMM, params={"model": "tiny", "dtype": "float32", "m": [8]})
    b = Problem.load(GEMM, params={"model": "tiny", "dtype": "float16", "m": [8], "epilogue": "bias"})
    assert a.module is not b.module and a.module.__name__ != b.module.__name__
    assert sys.modules[a.module.__name__] is a.module and sys.modules[b.module.__name__] is b.module
    x = a.make_inputs(a.shapes[0], 0, "cpu")
    y = b.make_inputs(b.shapes[0], 0, "cpu")
    assert len(x) == 2 and x[0].dtype.is_floating_point and str(x[0].dtype) == "torch.float32"
    assert len(y) == 3 and str(y[0].dtype) == "torch.float16"  # A, B and the bias
    assert a.reference(*x).dtype == x[0].dtype


def test_bad_parameters_are_one_line_problem_errors(clean_env):
    cases = [
        (
            {"params": {"mm": 64}},
            (
                r"gemm_bf16.py: unknown parameter 'mm' \(parameters: model: str = 'llama3-8b', "
                r"layer: str = 'qkv', m: tuple\[int, \.\.\.\] = \(2048,\)"
            ),
        ),
        ({"params": {"m": 64}}, r"parameter m: Expected `array`, got `int` \(expected tuple\[int, \.\.\.\]\)"),
        ({"params": {"dtype": "int8"}}, r"parameter dtype: Invalid enum value 'int8'"),
        ({"param_text": {"m": "64,x"}}, r"--param m='64,x': expected tuple\[int, \.\.\.\] \(comma-separated\)"),
        ({"param_text": {"nope": "1"}}, r"unknown parameter 'nope' \(parameters: model"),
    ]
    for kwargs, message in cases:
        with pytest.raises(ProblemError, match=message) as err:
            Problem.load(GEMM, **kwargs)
        assert "\n" not in str(err.value)
    clean_env.setenv("EVOKERNEL_GEMM_M", "sixty-four")
    with pytest.raises(ProblemError, match=r"EVOKERNEL_GEMM_M='sixty-four': expected tuple\[int, \.\.\.\]"):
        Problem.load(GEMM)
    clean_env.setenv("EVOKERNEL_MATMUL_DTYPE", "int8")
    with pytest.raises(ProblemError, match=r"EVOKERNEL_MATMUL_DTYPE='int8': expected 'bfloat16' \| 'float16'"):
        Problem.load(PROBLEMS / "matmul_bf16.py")
    with pytest.raises(ProblemError, match="takes no parameters"):
        Problem.load(MATMUL_SMALL, params={"m": 1})


def test_text_converts_by_the_parameter_type(tmp_path: Path, clean_env):
    path = tmp_path / "typed.py"
    path.write_text(
        "from typing import Literal\n"
        "import msgspec, torch\n"
        "from evokernel.judge.problem import problem_params\n"
        "class Params(msgspec.Struct, frozen=True, kw_only=True):\n"
        "    n: int = 4\n"
        "    scale: float = 1.0\n"
        "    flag: bool = False\n"
        "    names: tuple[str, ...] = ('a',)\n"
        "    size: int | None = None\n"
        "    mode: Literal['x', 'y'] = 'x'\n"
        "P = problem_params(Params, env='EVOKERNEL_TYPED_')\n"
        "SHAPES = [{'n': P.n}]\n"
        "def make_inputs(shape, seed, device):\n"
        "    return (torch.ones(shape['n']),)\n"
        "def reference(x):\n"
        "    return x * P.scale\n"
    )
    text = {"n": "7", "scale": "2.5", "flag": "true", "names": "a, b", "size": "", "mode": "y"}
    p = Problem.load(path, param_text=text)
    assert p.params == {"n": 7, "scale": 2.5, "flag": True, "names": ["a", "b"], "size": None, "mode": "y"}
    clean_env.setenv("EVOKERNEL_TYPED_FLAG", "0")
    clean_env.setenv("EVOKERNEL_TYPED_SIZE", "12")
    assert Problem.load(path).params == {"n": 4, "scale": 1.0, "flag": False, "names": ["a"], "size": 12, "mode": "x"}
    clean_env.setenv("EVOKERNEL_TYPED_FLAG", "yes")
    with pytest.raises(ProblemError, match=r"EVOKERNEL_TYPED_FLAG='yes': expected bool \(1, 0, true or false\)"):
        Problem.load(path)


def test_a_trace_parameter_is_an_absolute_path(tmp_path: Path, clean_env, monkeypatch: pytest.MonkeyPatch):
    trace = ROOT / "tests" / "recorded" / "traces" / "chat_small.jsonl"
    monkeypatch.chdir(trace.parent)
    p = Problem.load(PROBLEMS / "moe_bf16.py", params={"model": "tiny", "trace": trace.name, "dtype": "float32"})
    assert p.params["trace"] == str(trace) and p.weights is not None


def test_the_health_check_judges_the_same_problem(clean_env):
    """The judge re-imports the problem in a sandbox after a fault: with its parameters (a
    candidate's environment holds no EVOKERNEL_* variable: loaded without them, the reference
    would be the default problem's, a GEMM without the bias)."""
    problem = Problem.load(GEMM, params={"model": "tiny", "dtype": "float32", "m": [8], "epilogue": "bias"})
    judge = Judge(problem, "cpu", QUICK)
    try:
        verdict = judge.check(reference_source(problem.path, problem.params), label="health check")
        assert verdict.accepted, verdict.reason
        # as KernelEvaluator's health check runs it: checked, not timed (a reference may read
        # lengths back to the host, which the timing refuses)
        checked = judge.check(reference_source(problem.path, problem.params), label="health check", timed=False)
        assert checked.accepted and checked.timings == [] and checked.latency_ms is None, checked
        assert not judge.check(reference_source(problem.path), label="from the environment").accepted
    finally:
        judge.close()


# -- the template --------------------------------------------------------------------------
def test_the_template_hash_covers_the_modules_render_uses():
    from evokernel.search_spaces.gemm.template import candidate_source

    names = [Path(f).name for f in template_files(lambda g: candidate_source(g.params))]
    # gemm/template.py imports gemm/template_gluon.py inside a function; this test file defines the render
    assert {"template.py", "template_gluon.py", "candidate.py", "test_identity.py"} <= set(names)
    files = {
        Path(f).relative_to(ROOT).as_posix()
        for f in template_files(lambda g: candidate_source(g.params))
        if Path(f).is_relative_to(ROOT)
    }
    assert {"search_spaces/gemm/template.py", "search_spaces/matmul/template.py"} <= files
    assert "kernel.py" not in names and "search.py" not in names  # the machinery is not the template


def _template_copy(folder: Path, edit: bool = False):
    folder.mkdir()
    source = (ROOT / "search_spaces" / "matmul" / "template.py").read_bytes()
    if edit:  # one byte of the docstring
        assert source.startswith(b'"""')
        source = source[:3] + source[3:4].swapcase() + source[4:]
    path = folder / "my_template.py"
    path.write_bytes(source)
    return load_module(path, prefix="_identity_template")


def _render_of(module):
    return lambda g: module.candidate_source(g.params)


def test_one_byte_of_a_template_changes_the_template_hash_and_the_fingerprint(tmp_path: Path):
    a = _template_copy(tmp_path / "a")
    same = _template_copy(tmp_path / "same")  # the same bytes elsewhere
    edited = _template_copy(tmp_path / "edited", edit=True)
    assert template_hash(_render_of(a)) == template_hash(_render_of(same))
    assert template_hash(_render_of(a)) != template_hash(_render_of(edited))
    assert str(tmp_path / "a" / "my_template.py") in template_files(_render_of(a))
    fa = KernelEvaluator(MATMUL_SMALL, _render_of(a), device="cpu").fingerprint()
    fb = KernelEvaluator(MATMUL_SMALL, _render_of(edited), device="cpu").fingerprint()
    assert fa != fb and {k for k in fa if fa[k] != fb[k]} == {"template"}
    named = KernelEvaluator(MATMUL_SMALL, _render_of(a), device="cpu", template="matmul-v2")
    assert named.fingerprint()["template"] == "matmul-v2"


# -- end to end: no stored result crosses a fingerprint -------------------------------------
SCALED = """
import math
import msgspec, torch
from evokernel.judge.problem import problem_params

class Params(msgspec.Struct, frozen=True, kw_only=True):
    scale: float = 1.0

P = problem_params(Params, env="EVOKERNEL_IDENTITY_")
SHAPES = [{"M": 24, "N": 40, "K": 32}]
TOLERANCE = {"float32": {"rtol": 1e-4, "atol": 1e-4}}

def make_inputs(shape, seed, device="cpu"):
    g = torch.Generator(device=device).manual_seed(seed)
    a = torch.randn(shape["M"], shape["K"], generator=g, device=device) * P.scale / math.sqrt(shape["K"])
    return a, torch.randn(shape["K"], shape["N"], generator=g, device=device)

def reference(a, b):
    return (a.double() @ b.double()).to(a.dtype)
"""


def test_no_stored_result_crosses_a_problem_parameter(tmp_path: Path):
    from evokernel.search_spaces.matmul.template import candidate_source

    problem = tmp_path / "scaled.py"
    problem.write_text(SCALED)
    space = matmul_space()
    genomes = [space.genome(BM=16, BN=32, BK=32, GROUP_M=1, num_warps=4, num_stages=s) for s in (2, 3)]
    options = SearchOptions(population=2, remeasure=0, report_elites=1, transfer=0)
    store = SQLiteStore(tmp_path / "e.db")

    def run(params: dict, seed: int):
        ev = KernelEvaluator(
            Problem.load(problem, params=params),
            lambda g: candidate_source(g.params),
            device="cpu",
            options=QUICK,
            workers=1,
        )
        try:
            return Search(space, ev, store=store, seeds=genomes, options=options).run(Budget(evaluations=2), seed=seed)
        finally:
            ev.close()

    first = run({"scale": 1.0}, seed=0)
    assert first.measured == 2 and first.reused == 0
    assert first.statuses == {"ok": 2}
    other = run({"scale": 2.0}, seed=0)  # another problem: measured again, nothing reused
    assert other.measured == 2 and other.reused == 0 and not other.resumed
    again = run({"scale": 1.0}, seed=1)  # the first problem again, a new run: reused
    assert again.measured == 0 and again.reused == 2
    store.close()
    db = sqlite3.connect(tmp_path / "e.db")
    rows = db.execute("SELECT fingerprint, COUNT(*) FROM results GROUP BY fingerprint").fetchall()
    db.close()
    assert sorted(n for _, n in rows) == [2, 2]  # two results under each fingerprint, none shared
