"""Gluon kernels compiled for sm_90 on the CPU (Triton's NVIDIA backend builds without a GPU),
as a launch passes them: the tests of the warp-specialised GEMM and attention read the
TTGIR and PTX of these builds."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import pytest


def require_gluon_sm90() -> None:
    """Skip the test where this Triton has no Gluon ahead-of-time compiler or no NVIDIA backend."""
    pytest.importorskip("triton")
    try:
        from triton.backends.compiler import GPUTarget  # noqa: F401
        from triton.experimental.gluon import language  # noqa: F401
        from triton.experimental.gluon._runtime import GluonASTSource  # noqa: F401
    except ImportError as exc:
        pytest.skip(f"no Gluon ahead-of-time compiler here: {exc}")
    try:
        import triton.backends.nvidia  # noqa: F401
    except ImportError:
        pytest.skip("this Triton has no NVIDIA backend")


def bf16_desc(shape: list[int]) -> str:
    """The signature type of a host tensor descriptor over bf16 with `shape` blocks and its
    default shared-memory layout (call after `require_gluon_sm90`)."""
    from triton.experimental.gluon import language as gl

    layout = gl.NVMMASharedLayout.get_default_for(shape, gl.bfloat16)
    return f"tensordesc<bf16[{shape[0]}, {shape[1]}],{layout!r}>"


def compile_sm90(
    kernel: Any,
    types: Mapping[str, str],
    consts: Mapping[str, Any],
    divisible: Iterable[str],
    *,
    num_warps: int,
    maxnreg: int | None,
) -> Any:
    """`kernel` built for sm_90: arguments typed by `types` (others i32), `consts` as
    constexprs, `divisible` marked 16-divisible, launched with `num_warps` and `maxnreg`."""
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.experimental.gluon._runtime import GluonASTSource

    names = list(kernel.arg_names)
    signature = {n: "constexpr" if n in consts else types.get(n, "i32") for n in names}
    constants = {(names.index(n),): v for n, v in consts.items()}
    attrs = {(names.index(n),): [["tt.divisibility", 16]] for n in divisible}
    return triton.compile(
        GluonASTSource(kernel, signature, constants, attrs),
        target=GPUTarget("cuda", 90, 32),
        options={"num_warps": num_warps, "num_stages": 1, "maxnreg": maxnreg},
    )
