"""The compiled-handle launch path (evokernel/runtime/launch.py) and the GEMM template's
`GemmLauncher`, on the CPU.

Without a GPU no kernel is compiled, so the first half stands Triton's own argument binder
in for its JIT (`RecordingJit`: it binds each call as `JITFunction.run` does and returns a
`CompiledKernel` whose launcher records what it is given): every direct launch must pass
exactly the arguments Triton's JIT would pass for the same call, and every call that reuses
a plan must have the specialisation the plan was compiled for (the plan's key covers it).
The second half runs the kernels in Triton's interpreter (where every launch goes through
the JIT): `GemmLauncher`'s results are bitwise `gemm`'s. The GPU half is
tests/test_launch_gpu.py; the last test here checks that it collects.
"""

from __future__ import annotations

import gc
import json
import os
import subprocess
import sys
import weakref
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import torch
from triton.backends.compiler import BaseBackend
from triton.compiler import CompiledKernel
from triton.runtime.jit import create_function_from_signature

from evokernel.runtime import launch as launch_mod
from evokernel.judge.candidate import bind_config
from evokernel.runtime.launch import KernelLaunch, quick_descriptor
from evokernel.search_spaces.gemm import template as triton_gemm
from evokernel.search_spaces.gemm.template import DEFAULTS, GemmLauncher, _signature, candidate_source

from ._interpreter import run_interpreted

ROOT = Path(__file__).resolve().parents[1]
STREAM = 4242


def _compiled(record: list | None, metadata: Any = None) -> CompiledKernel:
    """A CompiledKernel with no binary: its launcher appends its arguments to `record`."""
    ck = object.__new__(CompiledKernel)
    ck.module = None  # (nothing to unload)
    ck._run = (lambda *args: record.append(args)) if record is not None else (lambda *args: None)
    ck.function = 77
    ck.packed_metadata = (4, 1, 0)
    ck.launch_metadata = lambda grid, stream, *args: metadata
    return ck


class RecordingJit:
    """A JIT kernel's stand-in: `fn[grid](**kwargs)` binds with Triton's own binder, records
    (grid, bound arguments, specialisation, options) and returns one CompiledKernel."""

    def __init__(self, real: Any, *, keep: bool = True) -> None:
        self.real = real
        self.arg_names = real.arg_names
        self.signature = real.signature
        self.pre_run_hooks: list = []
        self.used_global_vals: dict = {}
        self.binder = create_function_from_signature(real.signature, real.params, BaseBackend)
        self.jit_calls: list[tuple[Any, list, Any, dict]] = []
        self.launches: list[tuple] = []
        self.compiled = _compiled(self.launches if keep else None, metadata={"name": "fake"})
        self.keep = keep

    def __getitem__(self, grid: Any) -> Any:
        def call(**kwargs: Any) -> CompiledKernel:
            bound, spec, options = self.binder(**kwargs)
            if self.keep:
                self.jit_calls.append((grid, list(bound.values()), spec, options))
            else:
                self.jit_calls.append((grid, None, spec, options))
            return self.compiled

        return call

    def bind(self, args: tuple, options: dict) -> tuple[list, Any]:
        """What the JIT binds for a launch with these arguments (in arg_names order)."""
        bound, spec, _ = self.binder(**dict(zip(self.arg_names, args)), **options)
        return list(bound.values()), spec


@pytest.fixture
def device(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Triton's driver, faked: the current device is `device[0]`, its stream STREAM + device."""
    current = [0]
    fake = SimpleNamespace(get_current_device=lambda: current[0], get_current_stream=lambda d: STREAM + d)
    monkeypatch.setattr(launch_mod, "_driver", lambda: fake)
    monkeypatch.delenv("EVOKERNEL_FAST_LAUNCH", raising=False)
    return current


@pytest.fixture
def jits(monkeypatch: pytest.MonkeyPatch, device: list[int]) -> tuple[RecordingJit, RecordingJit]:
    """The template's two kernels replaced by recording stand-ins (main, split-K reduction)."""
    main = RecordingJit(triton_gemm._gemm_kernel)
    reduce = RecordingJit(triton_gemm._splitk_reduce_kernel)
    monkeypatch.setattr(triton_gemm, "_gemm_kernel", main)
    monkeypatch.setattr(triton_gemm, "_splitk_reduce_kernel", reduce)
    return main, reduce


def _inputs(
    m: int, n: int, k: int, seed: int, *, bias: bool = False, residual: bool = False, dtype: torch.dtype = torch.float16
) -> tuple:
    g = torch.Generator().manual_seed(seed)
    a = torch.randn(m, k, generator=g).to(dtype)
    b = torch.randn(k, n, generator=g).to(dtype)
    return (
        a,
        b,
        torch.randn(n, generator=g).to(dtype) if bias else None,
        torch.randn(m, n, generator=g).to(dtype) if residual else None,
    )


#: (genes over DEFAULTS at a 16x32x32 tile, epilogue): every path of the plan
CONFIGS = [
    ({}, (False, "none", False)),
    ({"SPLIT_K": 2}, (True, "silu", True)),  # two kernels: the reduction's launch too
    ({"SPLIT_K": 3, "SPLITK_FIXUP": 1, "PERSISTENT": 1}, (True, "relu", False)),
    ({"TMA": 1, "TMA_STORE": 2, "PERSISTENT": 1}, (False, "gelu_tanh", True)),
    ({"TMA": 1, "TMA_STORE": 1, "BN_TAIL": 16}, (True, "none", True)),
    ({"TMA": 1, "A_REG": 1, "BN": 128, "TMA_STORE": 1}, (False, "silu", False)),
    ({"SWAP_AB": 1, "SPLIT_K": 2, "SPLITK_FIXUP": 1, "TMA": 1}, (False, "none", False)),
    ({"PERSISTENT": 1, "STREAM_K": 1}, (True, "silu", True)),
    ({"maxnreg": 128, "num_ctas": 2}, (False, "none", False)),
]


def _equivalent(x: Any, y: Any) -> bool:
    """The same argument for a launch: equal values of one type; tensors alike in all a launch
    reads of them but the memory (shape, strides, dtype, 16-byte alignment); descriptors alike
    over alike tensors."""
    if isinstance(x, torch.Tensor) or isinstance(y, torch.Tensor):
        return (
            isinstance(x, torch.Tensor)
            and isinstance(y, torch.Tensor)
            and x.shape == y.shape
            and x.stride() == y.stride()
            and x.dtype == y.dtype
            and x.data_ptr() % 16 == y.data_ptr() % 16
        )
    if hasattr(x, "block_shape"):
        return (
            type(x) is type(y)
            and _equivalent(x.base, y.base)
            and list(x.shape) == list(y.shape)
            and tuple(x.strides) == tuple(y.strides)
            and list(x.block_shape) == list(y.block_shape)
            and x.padding == y.padding
            and getattr(x, "layout", None) == getattr(y, "layout", None)
        )
    return type(x) is type(y) and x == y


@pytest.mark.parametrize("over, epi", CONFIGS)
def test_every_direct_launch_passes_what_gemm_passes_through_the_jit(
    jits: tuple[RecordingJit, RecordingJit], over: dict, epi: tuple
) -> None:
    has_bias, act, has_res = epi
    params = {**DEFAULTS, "BM": 16, "BN": 32, "BK": 32, **over}
    run = GemmLauncher(params, activation=act)
    sets = [_inputs(33, 72, 80, seed, bias=has_bias, residual=has_res) for seed in range(3)]
    for a, b, bias, res in sets * 2:  # three input sets (other pointers), twice
        run(a, b, bias, res)
    for a, b, bias, res in sets:  # the reference: gemm, through the JIT
        triton_gemm.gemm(a, b, bias=bias, residual=res, activation=act, **params)
    kernels = [j for j in jits if j.jit_calls]
    assert len(kernels) == (2 if over.get("SPLIT_K", 1) > 1 and not over.get("SPLITK_FIXUP") else 1)
    for jit in kernels:
        assert len(jit.jit_calls) == 1 + 3, "one JIT call for the launcher's plan (then gemm's three)"
        assert len(jit.launches) == 5
        names = jit.arg_names
        for i, (g0, g1, g2, stream, function, packed, metadata, enter, leave, *args) in enumerate(jit.launches):
            grid, want, want_spec, options = jit.jit_calls[1 + (i + 1) % 3]  # gemm's call on the same inputs
            assert (g0, g1, g2) == (tuple(grid) + (1, 1))[:3] and stream == STREAM and function == 77
            assert packed == (4, 1, 0) and metadata is None and enter is None and leave is None
            assert len(args) == len(want)
            for name, x, y in zip(names, args, want):
                assert _equivalent(x, y), f"{name}: {x!r} launched, gemm passes {y!r}"
            assert jit.bind(tuple(args), options)[1] == want_spec, "launched another specialisation than gemm's"
            a, b, bias, res = sets[(i + 1) % 3]
            if "a_ptr" in names:  # the call's own tensors
                assert args[names.index("a_ptr")] is a and args[names.index("b_ptr")] is b
                assert args[names.index("bias_ptr")] is bias or bias is None
                assert args[names.index("res_ptr")] is res or res is None
                for name, src in (("a_desc", a), ("b_desc", b), ("b2_desc", b)):
                    d = args[names.index(name)]
                    assert d is None or d.base is src
    assert run.stats() == {"plans": 1, "jit_launches": len(kernels), "fast_launches": 5 * len(kernels)}


@pytest.mark.parametrize("over, epi", CONFIGS)
def test_the_direct_path_launches_what_the_handle_path_launches(
    jits: tuple[RecordingJit, RecordingJit], over: dict, epi: tuple
) -> None:
    """Where the raw launch is there (Triton 3.6 on a GPU), GemmLauncher hands it each
    descriptor's tensor in its place (`bases`): the tensors the handle path's descriptors are
    over, the call's own tensors, the split-K workspace kept (alike to a fresh one)."""
    has_bias, act, has_res = epi
    run = GemmLauncher({**DEFAULTS, "BM": 16, "BN": 32, "BK": 32, **over}, activation=act)
    sets = [_inputs(33, 72, 80, seed, bias=has_bias, residual=has_res) for seed in range(2)]
    run(*sets[0])  # through the JIT
    for x in sets:
        run(*x)  # through the handle (its launches recorded by the stand-in)
    (launches,) = run._plans.values()
    kernels = [
        (launch, jit) for launch, jit in ((launches.main, jits[0]), (launches.reduce, jits[1])) if launch is not None
    ]
    direct: dict[int, list] = {id(launch): [] for launch, _ in kernels}
    for launch, _ in kernels:  # the raw launches, recorded
        launch._handle.raw = (lambda rec: lambda stream, values, bases=False: rec.append((stream, values, bases)))(
            direct[id(launch)]
        )
    for x in sets * 2:
        run(*x)
    for launch, jit in kernels:
        got = direct[id(launch)]
        assert len(got) == 4 and all(
            stream == STREAM and bases == (launch is launches.main) for stream, _, bases in got
        )
        workspaces = set()
        for i, (_, values, _) in enumerate(got):
            handle_args = jit.launches[i % 2][9:]  # the handle path's launch on the same inputs
            own = [t for t in sets[i % 2] if t is not None]
            for name, v in zip(launch.dynamic, values):
                want = handle_args[jit.arg_names.index(name)]
                if hasattr(want, "block_shape"):
                    assert v is want.base or _equivalent(v, want.base) and not any(want.base is t for t in own), name
                elif any(want is t for t in own):
                    assert v is want, f"{name}: the call's own tensor"
                else:  # C (fresh each call), the workspace (kept), the counters
                    assert _equivalent(v, want), name
                if name == "ws_ptr" and launches.plan.ws is not None:
                    workspaces.add(v.data_ptr())
        assert len(workspaces) <= 1, "one workspace kept for the stream"
    assert run.stats()["fast_launches"] == 6 * len(kernels)


def test_a_plans_launches_go_direct_together_or_not_at_all(jits: tuple[RecordingJit, RecordingJit]) -> None:
    """`KernelLaunch.direct(*also)` checks a plan's launches in one go: where one of them
    cannot go through its raw launch, it returns None and counts nothing, and the plan
    launches each kernel its own way (`KernelLaunch.__call__`: the main kernel's raw launch
    with its descriptors, the reduction through its handle)."""
    run = GemmLauncher({**DEFAULTS, "BM": 16, "BN": 32, "BK": 32, "SPLIT_K": 2})
    a, b, _, _ = _inputs(33, 72, 80, 0)
    run(a, b)
    (launches,) = run._plans.values()
    main, reduce = launches.main, launches.reduce
    seen: list[tuple[str, bool]] = []
    main._handle.raw = lambda stream, values, bases=False: seen.append(("main", bases))
    reduce._handle.raw = lambda stream, values, bases=False: seen.append(("reduce", bases))
    both = main.direct(reduce)
    assert both is not None and both[0] == STREAM and len(both) == 3
    assert (main.fast_calls, reduce.fast_calls) == (1, 1)
    run(a, b)
    assert seen == [("main", True), ("reduce", False)] and (main.fast_calls, reduce.fast_calls) == (2, 2)
    reduce._handle.raw = None  # the reduction cannot go direct
    assert main.direct(reduce) is None and (main.fast_calls, reduce.fast_calls) == (2, 2)
    assert main.direct() is not None and main.fast_calls == 3  # (alone, the main kernel could)
    handled = len(jits[1].launches)
    run(a, b)
    assert seen[2:] == [("main", False)], "the main kernel through __call__'s raw launch, with its descriptors"
    assert len(jits[1].launches) == handled + 1, "the reduction through its handle"
    assert (main.fast_calls, reduce.fast_calls) == (4, 3)


def _variants(m: int, n: int, k: int) -> dict[str, tuple]:
    """Inputs of one shape and of others: contiguous; a view at another aligned address (the
    same key); views whose pointers or row strides are not 16-byte aligned; no bias."""
    a, b, bias, res = _inputs(m, n, k, 0, bias=True, residual=True)
    tall_a = torch.randn(m + 1, k).half()
    wide_a = torch.randn(m + 1, k + 8).half()
    wide_b = torch.randn(k, n + 1).half()
    long_bias = torch.randn(n + 1).half()
    wide_res = torch.randn(m, n + 3).half()
    return {
        "plain": (a, b, bias, res),
        "aligned view": (tall_a[1:], b.clone(), bias.clone(), res.clone()),  # k * 2 = 160 bytes on
        "a unaligned": (wide_a[1:, 1 : k + 1], b, bias, res),  # 2 bytes past an aligned address
        "a rows unaligned": (wide_a[:m, 8:], b, bias, res),  # rows of k + 8 = 88 elements
        "b unaligned": (a, wide_b[:, 1:], bias, res),
        "bias unaligned": (a, b, long_bias[1:], res),
        "residual strided": (a, b, bias, wide_res[:, :n]),
        "no bias": (a, b, None, res),
        "other shape": _inputs(m + 16, n, k, 1, bias=True, residual=True),
    }


def test_plans_are_keyed_by_all_that_triton_specialises(jits: tuple[RecordingJit, RecordingJit]) -> None:
    main, _ = jits
    run = GemmLauncher({**DEFAULTS, "BM": 16, "BN": 32, "BK": 32}, activation="silu")
    variants = _variants(33, 72, 80)
    calls = [v for _ in range(2) for v in variants.values()]
    for a, b, bias, res in calls:
        run(a, b, bias, res)
    keys = [_signature(*v) for v in calls]
    assert keys[0] == keys[1] and len(set(keys)) == len(variants) - 1  # (the aligned view reuses the plan)
    assert run.stats()["plans"] == len(set(keys)) and len(main.jit_calls) == len(set(keys))
    assert len({str(spec) for _, _, spec, _ in main.jit_calls}) >= 5, "the variants need several specialisations"
    # in call order, each key's first call went through the JIT, the others launched directly:
    # each direct launch has, as the JIT would bind it, its plan's specialisation
    jit_calls, launches, plans = iter(main.jit_calls), iter(main.launches), {}
    for key in keys:
        if key not in plans:
            plans[key] = next(jit_calls)
            continue
        _, _, spec, options = plans[key]
        args = next(launches)[9:]
        assert main.bind(tuple(args), options)[1] == spec, key
    assert next(launches, None) is None


def test_a_tma_plan_refuses_unaligned_inputs_as_gemm_does(jits: tuple[RecordingJit, RecordingJit]) -> None:
    params = {**DEFAULTS, "BM": 16, "BN": 32, "BK": 32, "TMA": 1}
    run = GemmLauncher(params)
    a, b, _, _ = _inputs(33, 72, 80, 0)
    run(a, b)
    wide = torch.randn(33, 81).half()
    for args in ((wide[:, 1:], b), (a, torch.randn(80, 73).half()[:, 1:])):
        with pytest.raises(ValueError, match="TMA needs"):
            triton_gemm.gemm(*args, **params)
        with pytest.raises(ValueError, match="TMA needs"):
            run(*args)
    assert run.stats()["plans"] == 1


def test_hooks_and_launch_metadata_are_passed_only_when_a_hook_is_set(jits: tuple[RecordingJit, RecordingJit]) -> None:
    from triton import knobs

    main, _ = jits
    run = GemmLauncher({**DEFAULTS, "BM": 16, "BN": 32, "BK": 32})
    a, b, _, _ = _inputs(33, 72, 80, 0)
    run(a, b)
    run(a, b)
    seen = []

    def hook(metadata: Any) -> None:
        seen.append(metadata)

    chain = knobs.runtime.launch_enter_hook
    if hasattr(chain, "add"):
        chain.add(hook)
    else:  # (a Triton whose hooks are plain callables)
        knobs.runtime.launch_enter_hook = hook
    try:
        run(a, b)
    finally:
        if hasattr(chain, "remove"):
            chain.remove(hook)
        else:
            knobs.runtime.launch_enter_hook = chain
    run(a, b)
    plain, hooked, after = main.launches
    assert plain[6:9] == (None, None, None) and after[6:9] == (None, None, None)
    assert hooked[6] == {"name": "fake"} and hooked[7] is knobs.runtime.launch_enter_hook
    assert hooked[8] is knobs.runtime.launch_exit_hook


def test_what_the_handle_cannot_vouch_for_goes_through_the_jit(
    jits: tuple[RecordingJit, RecordingJit], device: list[int]
) -> None:
    main, _ = jits
    run = GemmLauncher({**DEFAULTS, "BM": 16, "BN": 32, "BK": 32})
    a, b, _, _ = _inputs(33, 72, 80, 0)
    run(a, b)
    run(a, b)
    assert (len(main.jit_calls), len(main.launches)) == (1, 1)
    main.pre_run_hooks.append(lambda *args, **kwargs: None)  # a pre-run hook: the JIT runs it
    run(a, b)
    main.pre_run_hooks.clear()
    scope = {"X": 2}
    main.used_global_vals = {("X", id(scope)): (1, scope)}  # a global changed: the JIT raises on it
    run(a, b)
    main.used_global_vals = {("X", id(scope)): (2, scope)}  # unchanged
    run(a, b)
    main.used_global_vals = {}
    device[0] = 1  # another current device than the first call's
    run(a, b)
    device[0] = 0
    run(a, b)
    assert (len(main.jit_calls), len(main.launches)) == (4, 3)


def test_fast_launches_can_be_switched_off(
    jits: tuple[RecordingJit, RecordingJit], monkeypatch: pytest.MonkeyPatch
) -> None:
    main, _ = jits
    monkeypatch.setenv("EVOKERNEL_FAST_LAUNCH", "0")
    run = GemmLauncher({**DEFAULTS, "BM": 16, "BN": 32, "BK": 32})
    a, b, _, _ = _inputs(33, 72, 80, 0)
    for _ in range(3):
        run(a, b)
    assert (len(main.jit_calls), len(main.launches)) == (3, 0)


def test_direct_launches_need_a_triton_whose_launch_protocol_was_read(monkeypatch: pytest.MonkeyPatch) -> None:
    import triton

    from evokernel.runtime.launch import fast_launch_enabled

    monkeypatch.delenv("EVOKERNEL_FAST_LAUNCH", raising=False)
    for version, allowed in (
        ("3.6.0", True),
        ("3.9.0", True),
        ("3.5.1", False),
        ("3.10.0", False),
        ("4.0.0+git", False),
        ("nightly", False),
    ):
        monkeypatch.setattr(triton, "__version__", version)
        assert fast_launch_enabled() is allowed, version


def test_no_compiled_kernel_or_a_broken_one_keeps_the_jit_path(device: list[int]) -> None:
    class Jit:
        def __init__(self, result: Any) -> None:
            self.result, self.calls = result, 0
            self.arg_names, self.signature = ["x", "n"], triton_gemm._splitk_reduce_kernel.signature
            self.pre_run_hooks, self.used_global_vals = [], {}

        def __getitem__(self, grid: Any) -> Any:
            def call(**kwargs: Any) -> Any:
                self.calls += 1
                return self.result

            return call

    broken = object.__new__(CompiledKernel)
    broken.module = None
    broken._run = None  # its `run` would load a binary: there is none, it raises
    for result in (None, broken):  # the interpreter returns None
        jit = Jit(result)
        launch = KernelLaunch(jit, (1,), {"n": 3}, ("x",))
        for _ in range(3):
            launch(torch.zeros(4))
        assert jit.calls == 3 and launch.jit_calls == 3 and launch.fast_calls == 0 and not launch.compiled


def test_plans_hold_none_of_the_callers_tensors(monkeypatch: pytest.MonkeyPatch, device: list[int]) -> None:
    monkeypatch.setattr(triton_gemm, "_gemm_kernel", RecordingJit(triton_gemm._gemm_kernel, keep=False))
    run = GemmLauncher({**DEFAULTS, "BM": 16, "BN": 32, "BK": 32, "TMA": 1, "TMA_STORE": 1})
    a, b, _, _ = _inputs(33, 72, 80, 0)
    refs = [weakref.ref(a), weakref.ref(b)]
    c = run(a, b)
    run(a, b)
    del a, b
    triton_gemm._LAST["kernel"] = None
    gc.collect()
    assert [r() for r in refs] == [None, None], "a plan keeps a caller's tensor alive"
    assert c.shape == (33, 72)


def test_a_quick_gluon_descriptor_specialises_as_the_checked_one() -> None:
    from triton.experimental.gluon import language as gl
    from triton.experimental.gluon.nvidia.hopper import TensorDescriptor

    from evokernel.search_spaces.gemm.template_gluon import _gluon_gemm_kernel

    binder = create_function_from_signature(_gluon_gemm_kernel.signature, _gluon_gemm_kernel.params, BaseBackend)
    layout = gl.NVMMASharedLayout.get_default_for([64, 64], gl.float16)
    x, y = torch.zeros(128, 256, dtype=torch.float16), torch.ones(128, 256, dtype=torch.float16)
    checked = TensorDescriptor.from_tensor(x, [64, 64], layout)
    quick = quick_descriptor(quick_descriptor(checked, None), y)
    assert type(quick) is TensorDescriptor and quick.base is y and quick.layout == layout

    def spec(d: Any) -> Any:
        return binder(
            d,
            d,
            d,
            d,
            d,
            x,
            x,
            128,
            256,
            256,
            256,
            1,
            GROUP_M=8,
            STAGES=3,
            EPI_SPLIT=1,
            BNT=0,
            HAS_BIAS=False,
            ACT=0,
            HAS_RES=False,
            num_warps=4,
        )[1]

    assert spec(quick) == spec(checked)


def test_the_gluon_launcher_refuses_cpu_tensors_as_gemm_does() -> None:
    point = dict(DEFAULTS, BM=128, BN=256, BK=64, num_warps=8, num_stages=4, TMA=1, PERSISTENT=1, TMA_STORE=2, GLUON=1)
    a, b, _, _ = _inputs(64, 64, 64, 0)
    with pytest.raises(ValueError, match="Hopper GPU only"):
        GemmLauncher(point)(a, b)
    with pytest.raises(ValueError, match="without split-K"):
        GemmLauncher(dict(point, TMA_STORE=0))(a, b)
    with pytest.raises(TypeError, match="unknown"):
        GemmLauncher(dict(point, TILE=3))


def _raw(vector: list, tensors: tuple, descs: tuple, calls: list, fills: list, encodes: list) -> Any:
    """A `_RawLaunch` as `of` builds one on Triton 3.6 (read there from the compiled kernel's
    launcher), with the C launch, the driver's encoder and Triton's encoding recorded."""
    raw = object.__new__(launch_mod._RawLaunch)
    raw._args, raw._tensors, raw._descs, raw._cache = vector, tensors, descs, {}
    raw._call = lambda *args: calls.append(args)
    raw._fill = lambda ptr, *constants: fills.append((ptr, constants)) or f"map@{ptr}"
    raw._encode = lambda d, meta: encodes.append(d) or [f"enc@{d.base.data_ptr()}", *d.shape, *d.strides]
    return raw


def test_the_raw_launch_fills_pointers_and_keeps_one_encoding_per_pointer() -> None:
    from triton.tools.tensor_descriptor import TensorDescriptor

    a, b = torch.zeros(64, 32, dtype=torch.float16), torch.zeros(64, 32, dtype=torch.float16)
    first = TensorDescriptor.from_tensor(a, [16, 32])
    template = quick_descriptor(first, None)
    head = [2, 1, 1, None, 77, 0, 0, None, None, (4, 1, 0), None, None, None]
    # arguments: x (a tensor, slot 0), 5 (static), d (a descriptor, slot 1: map, 2 dims, 2 strides)
    vector = [*head, None, 5, "map@first", 64, 32, 32, 1]
    constants = (128, 2, 6, [16, 32], first.shape, first.strides, 0)
    calls, fills, encodes = [], [], []
    raw = _raw(vector, ((0, 13),), ((1, 15, 5, {}, 2, template, constants),), calls, fills, encodes)

    raw(STREAM, (a, quick_descriptor(template, a)))
    raw(STREAM, (a, quick_descriptor(template, a)))
    raw(STREAM, (b, quick_descriptor(template, b)))
    assert [c[3] for c in calls] == [STREAM] * 3 and all(
        c[:3] == (2, 1, 1) and c[4:13] == tuple(head[4:]) for c in calls
    )
    assert calls[0][13] is a and calls[2][13] is b  # host tensors go in as given (Triton's own check refuses them)
    assert [c[14] for c in calls] == [5, 5, 5] and all(c[16:] == (64, 32, 32, 1) for c in calls)
    assert [c[15] for c in calls] == [f"map@{a.data_ptr()}"] * 2 + [f"map@{b.data_ptr()}"]
    assert fills == [(a.data_ptr(), constants), (b.data_ptr(), constants)] and not encodes  # one encoding a pointer
    assert vector == [*head, None, 5, "map@first", 64, 32, 32, 1]  # the first call's vector is never changed

    other = TensorDescriptor.from_tensor(a[:32], [16, 32])  # another shape: encoded as Triton does, kept apart
    raw(STREAM, (a, other))
    raw(STREAM, (a, other))
    assert len(encodes) == 1 and calls[-1][15:] == (f"enc@{a.data_ptr()}", 32, 32, 32, 1)
    raw(STREAM, (a, quick_descriptor(template, a)))
    assert calls[-1][15:] == (f"map@{a.data_ptr()}", 64, 32, 32, 1) and len(fills) == 2
    c = torch.zeros(64, 32, dtype=torch.float16)
    raw(STREAM, (a, c), True)  # the descriptor's tensor in its place: the first call's descriptor over it
    assert calls[-1][15:] == (f"map@{c.data_ptr()}", 64, 32, 32, 1) and fills[-1] == (c.data_ptr(), constants)


def test_kernel_launch_checks_its_arguments() -> None:
    fn = triton_gemm._splitk_reduce_kernel
    with pytest.raises(ValueError, match="grid"):
        KernelLaunch(fn, (), {}, ())
    with pytest.raises(ValueError, match="both static and dynamic"):
        KernelLaunch(fn, (1,), {"M": 1}, ("M",))
    with pytest.raises(TypeError, match="dynamic arguments"):
        KernelLaunch(fn, (1,), {}, ("ws_ptr", "c_ptr"))(1)


def test_a_launch_cache_keys_its_launches_by_all_that_triton_specialises(device: list[int]) -> None:
    """The decode template's split kernel through a `LaunchCache`: calls alike but for what
    Triton specialises on (alignment, dtype, an int equal to 1 or divisible by 16, True
    against 1, 0.0 against -0.0) get launches of their own; each direct launch passes what
    the JIT would bind for the same call, with its first call's specialisation."""
    from evokernel.runtime.launch import LaunchCache
    from evokernel.search_spaces.attention.template_decode import _split_kernel

    jit = RecordingJit(_split_kernel)
    cache = LaunchCache()
    q = torch.zeros(2, 8, 64, dtype=torch.float16)
    kv = torch.zeros(10, 16, 2, 64, dtype=torch.float16)
    table = torch.zeros(2, 4, dtype=torch.int32)
    lens = torch.ones(2, dtype=torch.int32)
    wide = torch.zeros(2 * 8 * 64 + 1, dtype=torch.float16)

    def call(q: torch.Tensor, o: torch.Tensor, scale: Any = 0.125, h: int = 8, reduce: Any = 0) -> tuple:
        args = (
            q,
            kv,
            kv,
            table,
            lens,
            o,
            o,
            o,
            o,
            o,
            scale,
            h,
            2,
            *q.stride()[:2],
            *kv.stride()[:3],
            *kv.stride()[:3],
            table.stride(0),
            *o.stride()[:2],
        )
        kwargs = {
            "PAGE": 16,
            "BLOCK_N": 16,
            "REDUCE": reduce,
            "INPUT_PRECISION": "tf32",
            "SLOTS": False,
            "CHUNK": 8,
            "PREFETCH": 0,
            "GROUP_HEADS": 0,
            "SPLITS_P2": 1,
            "PDL": 0,
            "WAIT": 0,
            "EARLY": 0,
            "L2_HINTS": 0,
            "L2_LINES": 1,
            "L2_LINE": 64,
            "TIMELINE": 0,
            "GROUP": 4,
            "HEAD_DIM": 64,
            "BLOCK_H": 16,
            "SPLITS": 1,
            "num_warps": 4,
            "num_stages": 2,
        }
        cache(jit, (1, 2, 2), *args, **kwargs)
        return args, kwargs

    variants = [
        lambda: call(q.clone(), torch.empty_like(q)),
        lambda: call(wide[1:].view(2, 8, 64), torch.empty_like(q)),  # q 2 bytes past alignment
        lambda: call(q.float(), torch.empty_like(q)),  # another dtype
        lambda: call(q.clone(), torch.empty_like(q), h=16),  # an int divisible by 16
        lambda: call(q.clone(), torch.empty_like(q), h=1),  # an int equal to 1
        lambda: call(q.clone(), torch.empty_like(q), reduce=False),  # False, not 0
        lambda: call(q.clone(), torch.empty_like(q), scale=-0.0),
        lambda: call(q.clone(), torch.empty_like(q), scale=0.0),
    ]
    calls = [v() for _ in range(3) for v in variants]
    assert len(cache) == len(variants) and len(jit.jit_calls) == len(variants)
    assert cache.stats() == {"launches": len(variants), "jit_calls": len(variants), "fast_calls": 2 * len(variants)}
    for i, (args, kwargs) in enumerate(calls[len(variants) :]):
        launched = jit.launches[i][9:]
        want, want_spec = jit.bind(
            tuple(args) + tuple(kwargs[n] for n in jit.arg_names[len(args) :]), {"num_warps": 4, "num_stages": 2}
        )
        for name, x, y in zip(jit.arg_names, launched, want):
            assert x is y or (type(x) is type(y) and x == y and str(x) == str(y)), name
        assert want_spec == jit.jit_calls[i % len(variants)][2]
    small = LaunchCache(size=2)
    for h in (3, 5, 7):
        small(jit, (1,), *calls[0][0][:10], h, *calls[0][0][11:], **calls[0][1])
    assert len(small) == 2


def test_a_launch_cache_sends_unhashable_arguments_through_the_jit() -> None:
    from evokernel.runtime.launch import LaunchCache

    class Jit:
        arg_names = ("x", "n")

        def __init__(self) -> None:
            self.calls: list = []

        def __getitem__(self, grid: Any) -> Any:
            return lambda *args, **kwargs: self.calls.append((args, kwargs))

    jit, cache = Jit(), LaunchCache()
    cache(jit, (1,), torch.zeros(2), [1, 2])
    cache(jit, (1,), torch.zeros(2), n=[1, 2])
    assert len(jit.calls) == 2 and len(cache) == 0


# --- in Triton's interpreter: the results, bitwise ------------------------------------------

_SCRIPT = r"""
import json, sys, torch
from evokernel.judge.candidate import bind_config
from evokernel.search_spaces.gemm import template as triton_gemm
from evokernel.search_spaces.gemm.template import DEFAULTS, GemmLauncher, candidate_source, gemm


def inputs(m, n, k, dtype, seed, has_bias, has_res):
    dt = getattr(torch, dtype)
    g = torch.Generator().manual_seed(seed)
    a = (torch.randn(m, k, generator=g) / k ** 0.5).to(dt)
    b = torch.randn(k, n, generator=g).to(dt)
    bias = torch.randn(n, generator=g).to(dt) if has_bias else None
    res = torch.randn(m, n, generator=g).to(dt) if has_res else None
    return a, b, bias, res


out = []
for over, (m, n, k), dtype, (has_bias, act, has_res), unaligned in json.loads(sys.argv[1]):
    params = {**DEFAULTS, "BM": 16, "BN": 32, "BK": 32, **over}
    run = GemmLauncher(params, activation=act)
    sets = [inputs(m, n, k, dtype, seed, has_bias, has_res) for seed in range(3)]
    if unaligned:  # A through a view 2 bytes past an aligned address, rows of k + 1
        wide = torch.randn(m, k + 1).to(getattr(torch, dtype))
        sets.append((wide[:, 1:], *sets[0][1:]))
    same, calls = True, 0
    for a, b, bias, res in sets * 2:
        want = gemm(a, b, bias=bias, residual=res, activation=act, **params)
        got = run(a, b, bias, res)
        same &= bool(torch.equal(got, want)) and got.dtype == want.dtype and got.shape == want.shape
        calls += 1
    out.append({"same": same, "calls": calls, "stats": run.stats(),
                "counters_left": sum(int(t.abs().sum()) for t in triton_gemm._COUNTERS.values())})

# a generated candidate: CONFIG bound to a genome's values, then imported and run
src = bind_config(candidate_source(dict(DEFAULTS, BM=32, BN=32, BK=32), bias=True, activation="silu"),
                  {"BM": 16, "SPLIT_K": 2, "SPLITK_FIXUP": 1})
module = {}
exec(compile(src, "candidate", "exec"), module)
a, b, bias, _ = inputs(40, 72, 96, "float16", 5, True, False)
params = dict(DEFAULTS, BM=16, BN=32, BK=32, SPLIT_K=2, SPLITK_FIXUP=1)
want = gemm(a, b, bias=bias, activation="silu", **params)
got = [module["kernel"](a, b, bias) for _ in range(2)]
out.append({"candidate": all(bool(torch.equal(g, want)) for g in got), "config": module["CONFIG"],
            "stats": module["_gemm"].stats()})
print(json.dumps(out))
"""

#: (genes over DEFAULTS at 16x32x32, (M, N, K), dtype, epilogue, and an unaligned A too)
INTERPRETED = [
    ({}, (33, 72, 80), "float16", (False, "none", False), True),
    ({"SPLIT_K": 2}, (33, 72, 80), "float32", (True, "silu", True), True),
    ({"SPLIT_K": 4, "SPLITK_FIXUP": 1, "PERSISTENT": 1}, (40, 72, 72), "float16", (True, "relu", False), True),
    ({"PERSISTENT": 1, "TMA": 1, "TMA_STORE": 2}, (33, 72, 80), "float16", (False, "gelu_tanh", True), False),
    ({"TMA": 1, "TMA_STORE": 1, "BN_TAIL": 16}, (33, 72, 80), "float32", (True, "none", True), False),
    ({"PERSISTENT": 1, "STREAM_K": 1}, (40, 72, 80), "float16", (True, "silu", True), True),
    ({"SWAP_AB": 1, "TMA": 1}, (40, 72, 80), "float16", (True, "gelu_tanh", False), False),
]


@pytest.fixture(scope="module")
def interpreted() -> list[dict]:
    return run_interpreted(_SCRIPT, json.dumps(INTERPRETED))


@pytest.mark.slow
@pytest.mark.parametrize("i", range(len(INTERPRETED)))
def test_the_launcher_gives_gemms_results_bitwise_in_the_interpreter(interpreted: list[dict], i: int) -> None:
    over, _, _, _, unaligned = INTERPRETED[i]
    got = interpreted[i]
    assert got["same"], (over, got)
    kernels = 2 if over.get("SPLIT_K", 1) > 1 and not over.get("SPLITK_FIXUP") else 1
    # (the interpreter returns no compiled kernel: every launch goes through the JIT)
    assert got["stats"] == {"plans": 1 + unaligned, "jit_launches": kernels * got["calls"], "fast_launches": 0}
    assert got["counters_left"] == 0


def test_a_candidate_binds_its_config_and_runs_the_launcher(interpreted: list[dict]) -> None:
    got = interpreted[-1]
    assert got["candidate"] and got["config"]["BM"] == 16 and got["config"]["SPLIT_K"] == 2
    assert got["stats"]["plans"] == 1


def test_the_candidate_keeps_a_literal_config_and_builds_the_launcher_once() -> None:
    src = candidate_source(dict(DEFAULTS, TMA=1), bias=True, residual=True, activation="gelu_tanh")
    assert 'CONFIG = {"BK": 64, "BM": 128' in src
    assert "_gemm = GemmLauncher(CONFIG, activation='gelu_tanh')" in src
    assert "def kernel(a, b, bias, residual):\n    return _gemm(a, b, bias=bias, residual=residual)" in src
    bound = bind_config(src, {"BM": 64})
    assert '"BM": 64' in bound and bound.count("GemmLauncher(CONFIG") == 1
    assert "GemmLauncher(CONFIG)\n" in candidate_source(DEFAULTS)


@pytest.mark.slow
def test_the_gpu_tests_collect_on_the_cpu() -> None:
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "--collect-only",
            "-q",
            "-p",
            "no:cacheprovider",
            str(ROOT / "tests" / "test_launch_gpu.py"),
        ],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=ROOT,
        env={**os.environ, "TRITON_INTERPRET": "0"},
        check=False,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    collected = [line for line in proc.stdout.splitlines() if "::" in line]
    assert len(collected) >= 20, proc.stdout[-2000:]
