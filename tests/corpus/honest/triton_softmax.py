# problem: softmax_small
# expect: accepted
# reason: accepted
# device: cpu
# class: honest: a Triton row softmax, one program per row
"""Honest candidate: a Triton row softmax, one program per row, the whole row in one block."""

import torch
import triton
import triton.language as tl


@triton.jit
def _softmax_kernel(x_ptr, y_ptr, n_cols, stride_x, stride_y, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    offs = tl.arange(0, BLOCK)
    mask = offs < n_cols
    x = tl.load(x_ptr + row * stride_x + offs, mask=mask, other=-float("inf")).to(tl.float32)
    e = tl.exp(x - tl.max(x, axis=0))
    y = e / tl.sum(e, axis=0)
    tl.store(y_ptr + row * stride_y + offs, y.to(y_ptr.dtype.element_ty), mask=mask)


def kernel(x):
    assert x.ndim == 2
    if x.stride(1) != 1:
        x = x.contiguous()
    rows, cols = x.shape
    y = torch.empty_like(x)
    if rows and cols:
        _softmax_kernel[(rows,)](x, y, cols, x.stride(0), y.stride(0), BLOCK=triton.next_power_of_2(cols))
    return y
