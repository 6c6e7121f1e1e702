"""The fused RMSNorm template: y = x / rms(x) * w, optionally after h = x + residual.

x[M, N] (rows of hidden size N), w[N], optional residual[M, N], all in one dtype; the sum
of squares and the scaling in fp32, outputs rounded once to x's dtype. With a residual the
kernel also writes h = x + residual (what the next layer adds to), so it returns (y, h), as
the fused add-RMSNorm of serving engines does (here out of place: inputs are never written).

Each program normalises ROWS rows. Where BLOCK_N >= N one block holds a whole row: it is
read once and stays in registers. Otherwise the program loops over the row in BLOCK_N
chunks twice: once for the sum of squares (writing h on the way), once to scale (reading h
back, or x where there is no residual); `num_stages` pipelines those loops.

`rmsnorm(x, w, residual, **params)` runs it for one point of `rmsnorm_space()`;
`candidate_source` writes the candidate module a search evaluates for that point::

    import torch
    from evokernel.search_spaces.rmsnorm.template import rmsnorm
    x = torch.randn(16, 4096, device="cuda", dtype=torch.bfloat16)
    w = torch.ones(4096, device="cuda", dtype=torch.bfloat16)
    y = rmsnorm(x, w, BLOCK_N=4096, ROWS=1, num_warps=8, num_stages=1)

>>> src = candidate_source({"BLOCK_N": 1024, "ROWS": 2, "num_warps": 4, "num_stages": 1})
>>> print(src.split("\\n\\n\\n")[1])
CONFIG = {"BLOCK_N": 1024, "ROWS": 2, "num_stages": 1, "num_warps": 4}
"""

from __future__ import annotations

from collections.abc import Mapping

import torch
import triton
import triton.language as tl

from evokernel.judge.candidate import check_params

__all__ = ["PARAMS", "EPS", "rmsnorm", "candidate_source"]

#: The meta-parameters of the template (the parameters of `rmsnorm_space()`).
PARAMS: tuple[str, ...] = ("BLOCK_N", "ROWS", "num_warps", "num_stages")

#: The epsilon under the root (Llama's, Qwen's): rms(x) = sqrt(mean(x^2) + EPS).
EPS = 1e-6


@triton.jit
def _rmsnorm_kernel(
    x_ptr,
    r_ptr,
    w_ptr,
    y_ptr,
    h_ptr,
    M,
    N,
    stride_x,
    stride_r,
    stride_y,
    stride_h,
    eps,
    BLOCK_N: tl.constexpr,
    ROWS: tl.constexpr,
    HAS_RESIDUAL: tl.constexpr,
    ONE_PASS: tl.constexpr,
):
    rows = tl.program_id(0) * ROWS + tl.arange(0, ROWS)
    row_mask = rows[:, None] < M
    rows = rows.to(tl.int64)  # M * N may pass 2**31
    cols = tl.arange(0, BLOCK_N)
    x_rows = x_ptr + rows[:, None] * stride_x
    r_rows = r_ptr + rows[:, None] * stride_r
    y_rows = y_ptr + rows[:, None] * stride_y
    h_rows = h_ptr + rows[:, None] * stride_h
    if ONE_PASS:
        mask = row_mask & (cols[None, :] < N)
        x = tl.load(x_rows + cols[None, :], mask=mask, other=0.0).to(tl.float32)
        if HAS_RESIDUAL:
            x += tl.load(r_rows + cols[None, :], mask=mask, other=0.0).to(tl.float32)
            tl.store(h_rows + cols[None, :], x.to(h_ptr.dtype.element_ty), mask=mask)
        rstd = 1.0 / tl.sqrt(tl.sum(x * x, axis=1) / N + eps)
        w = tl.load(w_ptr + cols, mask=cols < N, other=0.0).to(tl.float32)
        y = x * rstd[:, None] * w[None, :]
        tl.store(y_rows + cols[None, :], y.to(y_ptr.dtype.element_ty), mask=mask)
    else:
        acc = tl.zeros((ROWS, BLOCK_N), dtype=tl.float32)
        for start in range(0, N, BLOCK_N):
            c = start + cols
            mask = row_mask & (c[None, :] < N)
            x = tl.load(x_rows + c[None, :], mask=mask, other=0.0).to(tl.float32)
            if HAS_RESIDUAL:
                x += tl.load(r_rows + c[None, :], mask=mask, other=0.0).to(tl.float32)
                tl.store(h_rows + c[None, :], x.to(h_ptr.dtype.element_ty), mask=mask)
            acc += x * x
        rstd = 1.0 / tl.sqrt(tl.sum(acc, axis=1) / N + eps)
        for start in range(0, N, BLOCK_N):
            c = start + cols
            mask = row_mask & (c[None, :] < N)
            # h was written by this same program, at the same offsets, in the loop above
            if HAS_RESIDUAL:
                x = tl.load(h_rows + c[None, :], mask=mask, other=0.0).to(tl.float32)
            else:
                x = tl.load(x_rows + c[None, :], mask=mask, other=0.0).to(tl.float32)
            w = tl.load(w_ptr + c, mask=c < N, other=0.0).to(tl.float32)
            y = x * rstd[:, None] * w[None, :]
            tl.store(y_rows + c[None, :], y.to(y_ptr.dtype.element_ty), mask=mask)


def _rows(t: torch.Tensor) -> torch.Tensor:
    """t with unit stride along the row (any stride between rows is kept)."""
    return t if t.stride(-1) == 1 else t.contiguous()


def rmsnorm(
    x: torch.Tensor,
    w: torch.Tensor,
    residual: torch.Tensor | None = None,
    *,
    BLOCK_N: int,
    ROWS: int,
    num_warps: int,
    num_stages: int,
    eps: float = EPS,
) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
    """y = x / rms(x) * w in x's dtype with one configuration of the template; with a
    residual, (y, h) where h = x + residual and y is h's norm."""
    assert x.ndim == 2 and w.shape == (x.shape[1],), (
        f"x [M, N] and w [N] expected, got {tuple(x.shape)}, {tuple(w.shape)}"
    )
    assert residual is None or residual.shape == x.shape, f"residual {tuple(residual.shape)} is not x's shape"
    M, N = x.shape
    x, w = _rows(x), _rows(w)
    y = torch.empty((M, N), device=x.device, dtype=x.dtype)
    h = torch.empty((M, N), device=x.device, dtype=x.dtype) if residual is not None else y
    if M > 0 and N > 0:
        r = _rows(residual) if residual is not None else x
        _rmsnorm_kernel[(triton.cdiv(M, ROWS),)](
            x,
            r,
            w,
            y,
            h,
            M,
            N,
            x.stride(0),
            r.stride(0),
            y.stride(0),
            h.stride(0),
            eps,
            BLOCK_N=BLOCK_N,
            ROWS=ROWS,
            HAS_RESIDUAL=residual is not None,
            ONE_PASS=BLOCK_N >= N,
            num_warps=num_warps,
            num_stages=num_stages,
        )
    return (y, h) if residual is not None else y


_CANDIDATE = '''"""Candidate: the fused RMSNorm template at one configuration (generated)."""

from evokernel.search_spaces.rmsnorm.template import rmsnorm


CONFIG = {config}


def kernel(x, w, residual=None):
    return rmsnorm(x, w, residual, **CONFIG)
'''


def candidate_source(params: Mapping[str, int]) -> str:
    """The text of a candidate module running `rmsnorm` at `params` (same params, same text)."""
    check_params(params, PARAMS)
    config = ", ".join(f'"{k}": {int(params[k])}' for k in sorted(params))
    return _CANDIDATE.format(config="{" + config + "}")
