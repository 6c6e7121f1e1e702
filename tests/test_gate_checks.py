"""The judge's checks on problems off the matmul path: float64 inputs perturbed while timed,
complex and non-finite outputs, outputs of mixed dtypes, host-side first inputs under a
roofline floor, and small floating-point inputs too short to perturb.

Each judge-level test writes a small problem into a temporary folder and judges an honest
(or a subtly wrong) candidate on the CPU; the unit tests call the pieces directly.
"""

from __future__ import annotations

import math
import textwrap
from pathlib import Path

import msgspec
import pytest
import torch

from evokernel.core.result import Status
from evokernel.judge.gate import GateOptions, Judge, ShapeTiming, _flop_dtypes, compare
from evokernel.judge.hardware import PEAKS
from evokernel.judge.problem import Problem
from evokernel.judge.sandbox import SandboxOptions
from evokernel.judge.timing import Perturber, perturbable

QUICK = GateOptions(
    seeds=1,
    heldout_seeds=1,
    recheck_seeds=1,
    timing={"max_reps": 20, "min_reps": 10, "max_s": 0.5},
    sandbox=SandboxOptions(start_timeout_s=60, call_timeout_s=30, time_timeout_s=60),
)
TOL = {"rtol": 1e-5, "atol": 1e-5}
INF, NAN = math.inf, math.nan


def _problem(tmp_path: Path, name: str, source: str) -> Problem:
    path = tmp_path / f"{name}.py"
    path.write_text(textwrap.dedent(source))
    return Problem.load(path)


# --- A: float64 perturbations travel exactly ------------------------------------------------


def test_float64_perturbation_values_are_reported_exactly() -> None:
    """Values near 1000 are not float32's: a report rounded through float32 would describe
    inputs the kernel never saw."""
    x = 1000.0 + torch.randn(256, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    pristine = x.clone()
    p = Perturber([[x]], 8, seed=3, batch=4)
    rec = p.apply(0)
    seen = x.clone()
    p.restore(rec, 0)
    ((j, positions, values),) = Perturber.report(rec)
    rebuilt = pristine.clone()
    rebuilt[torch.tensor(positions)] = torch.tensor(values, dtype=torch.float64)
    assert j == 0 and torch.equal(rebuilt, seen)


def test_every_timed_call_sees_inputs_that_differ_from_the_set() -> None:
    """No call's perturbation copies a position onto itself: on a small input (8 elements, 2
    changed a call) every one of 400 calls changes it. Drawn independently, the values' base
    met the positions' once in 8 calls, so whole calls ran on the pristine set (and a judge
    that checked one such sampled call found "the timed calls' inputs were never perturbed":
    a CI flake, session 28)."""
    x = torch.randn(8, generator=torch.Generator().manual_seed(2))
    pristine = x.clone()
    p = Perturber([[x]], 2, seed=11, batch=32)
    for _ in range(400):
        rec = p.apply(0)
        assert not torch.equal(x, pristine)
        p.restore(rec, 0)
        assert torch.equal(x, pristine)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16, torch.float8_e4m3fn])
def test_narrow_float_perturbation_values_stay_exact(dtype: torch.dtype) -> None:
    x = torch.randn(64, generator=torch.Generator().manual_seed(1)).to(dtype)
    pristine = x.clone()
    p = Perturber([[x]], 4, seed=5, batch=2)
    rec = p.apply(0)
    seen = x.clone()
    p.restore(rec, 0)
    ((_, positions, values),) = Perturber.report(rec)
    rebuilt = pristine.clone()
    new, at = torch.tensor(values, dtype=torch.float64).to(dtype), torch.tensor(positions)
    if dtype.itemsize == 1:  # fp8: written as bytes, as the judge does
        rebuilt.view(torch.uint8)[at] = new.view(torch.uint8)
    else:
        rebuilt[at] = new
    assert torch.equal(rebuilt.view(torch.uint8), seen.view(torch.uint8))


CENTER64 = """
    import torch

    SHAPES = [{"n": 4096}]
    PERTURB = 8


    def make_inputs(shape, seed, device="cpu"):
        g = torch.Generator().manual_seed(seed)
        return ((1000.0 + torch.randn(shape["n"], generator=g, dtype=torch.float64)).to(device),)


    def reference(x):
        return x - x.mean()
"""


def test_honest_float64_kernel_is_accepted_when_timed(tmp_path: Path) -> None:
    judge = Judge(_problem(tmp_path, "center64", CENTER64), "cpu", QUICK)
    v = judge.check("def kernel(x):\n    return x - x.mean()\n")
    assert v.accepted and v.status is Status.OK, v.reason


# --- B: complex and non-finite outputs -----------------------------------------------------


def test_compare_checks_both_parts_of_complex_outputs() -> None:
    ref = torch.tensor([1 + 2j, -3 + 0.5j, 0.25 - 4j], dtype=torch.complex64)
    assert compare([ref], [ref.clone()], TOL) is None
    assert compare([ref], [ref.conj().resolve_conj()], TOL) is not None  # imaginary parts negated
    assert compare([ref], [ref + 1e-3j], TOL) is not None
    assert compare([ref], [ref.real.clone()], TOL) is not None  # the imaginary part is not dropped
    assert compare([ref.to(torch.complex128)], [ref.to(torch.complex128) * (1 + 1e-9)], TOL) is None
    assert compare([ref.real.clone()], [ref], TOL) is not None  # a complex output of a real reference


def test_compare_requires_the_references_kind_of_non_finite_value() -> None:
    ref = torch.tensor([1.0, INF, -INF, NAN])
    assert compare([ref], [ref.clone()], TOL) is None
    for wrong in ([1.0, -INF, -INF, NAN], [1.0, INF, INF, NAN], [1.0, INF, -INF, INF], [1.0, NAN, -INF, NAN]):
        got = compare([ref], [torch.tensor(wrong)], TOL)
        assert got is not None and "NaN or Inf" in got, wrong
    assert "NaN or Inf" in compare([ref], [torch.tensor([1.0, INF, -INF, 4.0])], TOL)
    assert compare([torch.tensor([NAN, 2.0])], [torch.tensor([INF, 2.0])], TOL) is not None
    assert compare([torch.tensor([INF, 2.0])], [torch.tensor([2.0, INF])], TOL) is not None


def test_poison_and_the_degenerate_check_keep_complex_outputs_complex() -> None:
    from evokernel.judge.gate import _constant_like, _poison

    z = torch.zeros(4, dtype=torch.complex64)
    _poison([z])
    assert torch.isnan(z.real).all() and torch.isnan(z.imag).all()  # no plausible answer in either part
    ref = torch.tensor([1 + 2j, 3 - 4j], dtype=torch.complex128)
    const = _constant_like(ref)
    assert const.dtype == torch.complex128 and torch.equal(const, torch.full((2,), 2 - 1j, dtype=torch.complex128))
    ints = _constant_like(torch.tensor([1, 2, 4]))
    assert ints.dtype == torch.int64 and ints.tolist() == [2, 2, 2]


FFT = """
    import torch

    SHAPES = [{"n": 256}]


    def make_inputs(shape, seed, device="cpu"):
        g = torch.Generator().manual_seed(seed)
        return (torch.randn(shape["n"], generator=g).to(device),)


    def reference(x):
        return torch.fft.fft(x)
"""


def test_a_complex_output_problem_is_judged_whole(tmp_path: Path) -> None:
    """Its degenerate check runs on complex constants; an honest FFT passes, one that returns the
    right real parts with the imaginary parts dropped does not."""
    judge = Judge(_problem(tmp_path, "fft", FFT), "cpu", msgspec.structs.replace(QUICK, time=False))
    assert judge.degenerate is None
    v = judge.check("import torch\ndef kernel(x):\n    return torch.fft.fft(x)\n")
    assert v.accepted, v.reason
    v = judge.check("import torch\ndef kernel(x):\n    return torch.fft.fft(x).real.to(torch.complex64)\n")
    assert not v.accepted and v.status is Status.INCORRECT, v.reason


# --- C: each output at its own dtype's tolerance ---------------------------------------------

MIXED = """
    import torch

    SHAPES = [{"n": 64, "d": 128}]
    {tolerance}


    def make_inputs(shape, seed, device="cpu"):
        g = torch.Generator().manual_seed(seed)
        return (torch.randn(shape["n"], shape["d"], generator=g).to(device),)


    def reference(x):
        return (x * 2).to(torch.bfloat16), torch.logsumexp(x, dim=-1)
"""


def _mixed(tolerance: str) -> str:
    return MIXED.replace("{tolerance}", tolerance)


def test_compare_takes_one_tolerance_per_output() -> None:
    ref = [torch.ones(4), torch.ones(4)]
    out = [torch.ones(4), torch.full((4,), 1.01)]
    assert compare(ref, out, [{"rtol": 1e-5, "atol": 1e-5}, {"rtol": 1e-1, "atol": 1e-1}]) is None
    assert compare(ref, out[::-1], [{"rtol": 1e-5, "atol": 1e-5}, {"rtol": 1e-1, "atol": 1e-1}]).startswith("output 0")
    with pytest.raises(ValueError):
        compare(ref, out, [TOL])


def test_judge_tolerance_is_per_output_and_keeps_overrides(tmp_path: Path) -> None:
    untimed = msgspec.structs.replace(QUICK, time=False)
    refs = [torch.zeros(2, dtype=torch.bfloat16), torch.zeros(2)]
    plain = Judge(_problem(tmp_path, "mixed_plain", _mixed("")), "cpu", untimed)
    assert plain._tolerance(refs) == [{"rtol": 1.6e-2, "atol": 1e-2}, {"rtol": 1e-5, "atol": 1e-5}]
    per_dtype = 'TOLERANCE = {"float32": {"rtol": 1e-4, "atol": 2e-4}}'
    judge = Judge(_problem(tmp_path, "mixed_dtype", _mixed(per_dtype)), "cpu", untimed)
    assert judge._tolerance(refs) == [{"rtol": 1.6e-2, "atol": 1e-2}, {"rtol": 1e-4, "atol": 2e-4}]
    everywhere = 'TOLERANCE = {"rtol": 3e-2, "atol": 3e-2}'
    judge = Judge(_problem(tmp_path, "mixed_all", _mixed(everywhere)), "cpu", untimed)
    assert judge._tolerance(refs) == [{"rtol": 3e-2, "atol": 3e-2}] * 2


def test_float32_output_next_to_a_bf16_one_is_held_to_float32s_tolerance(tmp_path: Path) -> None:
    problem = _problem(tmp_path, "mixed", _mixed(""))
    x = torch.randn(64, 128)
    out, lse = problem.reference(x)
    assert compare([out, lse], [out, lse * 1.015], {"rtol": 1.6e-2, "atol": 1e-2}) is None  # bf16's lets it by
    judge = Judge(problem, "cpu", msgspec.structs.replace(QUICK, time=False))
    honest = "import torch\ndef kernel(x):\n    return (x * 2).to(torch.bfloat16), torch.logsumexp(x, dim=-1)\n"
    off = "import torch\ndef kernel(x):\n    return (x * 2).to(torch.bfloat16), torch.logsumexp(x, dim=-1) * 1.015\n"
    v = judge.check(honest)
    assert v.accepted, v.reason
    v = judge.check(off)
    assert not v.accepted and v.status is Status.INCORRECT and "output 1" in v.reason, v.reason


# --- D: the roofline floor's dtype ---------------------------------------------------------

HOSTFIRST = """
    import torch

    SHAPES = [{"n": 256}]


    def make_inputs(shape, seed, device="cpu"):
        g = torch.Generator().manual_seed(seed)
        return shape["n"], torch.randn(shape["n"], generator=g).to(device)


    def reference(n, x):
        return x[:n] * 2


    def flops(shape):
        return shape["n"]


    def bytes(shape):
        return 8 * shape["n"]
"""

FP8_MOE = """
    import torch

    SHAPES = [{"m": 16, "k": 32, "n": 16}]
    TOLERANCE = {"rtol": 5e-2, "atol": 5e-2}


    def make_inputs(shape, seed, device="cpu"):
        g = torch.Generator().manual_seed(seed)
        x = torch.randn(shape["m"], shape["k"], generator=g).to(torch.bfloat16)
        w = torch.randn(shape["k"], shape["n"], generator=g).to(torch.float8_e4m3fn)
        return x.to(device), w.to(device)


    def reference(x, w):
        return x.float() @ w.float()


    def flops(shape):
        return 2e12 * shape["m"]  # a made-up count: the floor is then set by the flops alone


    def bytes(shape):
        return 1
"""


def test_flop_dtypes_skip_host_values_and_keep_every_floating_input() -> None:
    x, w, ids = torch.zeros(2, dtype=torch.bfloat16), torch.zeros(2).to(torch.float8_e4m3fn), torch.zeros(2).long()
    assert _flop_dtypes([3, (1, 2), x, ids, w, x]) == ["bfloat16", "float8_e4m3fn"]
    assert _flop_dtypes([4, ids]) == ["int64"]
    assert _flop_dtypes([4, "name"]) == []


def test_host_first_input_under_gpu_peaks_is_judged(tmp_path: Path) -> None:
    """The CPU has no peaks; the H200's are forced in, as on a GPU, so the floor is computed."""
    judge = Judge(_problem(tmp_path, "hostfirst", HOSTFIRST), "cpu", QUICK)
    judge.peaks = PEAKS["NVIDIA H200"]
    v = judge.check("def kernel(n, x):\n    return x[:n] * 2\n")
    assert v.accepted and v.status is Status.OK, v.reason
    assert v.timings and v.timings[0].roofline_pct is not None


def test_roofline_floor_uses_the_fastest_input_dtypes_peak(tmp_path: Path) -> None:
    """bf16 activations, fp8 weights: a time between the fp8 and the bf16 floors is possible."""
    judge = Judge(_problem(tmp_path, "moe_fp8", FP8_MOE), "cpu", msgspec.structs.replace(QUICK, time=False))
    peaks = judge.peaks = PEAKS["NVIDIA H200"]
    shape = judge.tuning[0]
    flops = judge.problem.flops(shape.shape)
    fp8_ms = flops / peaks.limit_flops("float8_e4m3fn") * 1e3
    bf16_ms = flops / peaks.limit_flops("bfloat16") * 1e3
    assert fp8_ms < bf16_ms

    def timing(ms: float) -> ShapeTiming:
        return ShapeTiming(shape=shape.key, median_ms=ms, ci_low_ms=ms, ci_high_ms=ms, samples=3, graph=False)

    got = judge._roofline(shape, timing((fp8_ms + bf16_ms) / 2))
    assert isinstance(got, ShapeTiming) and got.roofline_pct is not None
    got = judge._roofline(shape, timing(fp8_ms / 2))
    assert not isinstance(got, ShapeTiming) and "impossible" in got.reason


# --- E: small floating-point inputs, too short to perturb ----------------------------------

TINYFLOAT = """
    import torch

    SHAPES = [{"n": 4096}]


    def make_inputs(shape, seed, device="cpu"):
        g = torch.Generator().manual_seed(seed)
        idx = torch.randint(0, 12, (shape["n"],), generator=g)
        table = torch.randn(12, generator=g)
        return idx.to(device), table.to(device)


    def reference(idx, table):
        return table[idx]
"""


def test_gather_from_a_table_too_short_to_perturb_is_accepted(tmp_path: Path) -> None:
    problem = _problem(tmp_path, "tinyfloat", TINYFLOAT)
    idx, table = problem.make_inputs(problem.shapes[0], 0)
    assert not perturbable(idx, problem.perturb) and not perturbable(table, problem.perturb)
    judge = Judge(problem, "cpu", QUICK)
    v = judge.check("def kernel(idx, table):\n    return table[idx]\n")
    assert v.accepted and v.status is Status.OK, v.reason
