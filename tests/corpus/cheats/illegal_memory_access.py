# problem: matmul_small
# expect: rejected
# reason: illegal memory access
# device: cuda
# class: a Triton kernel that writes far outside its output: the CUDA context dies; the judge must
#        reject it as a crash and check the GPU with a fresh process before the next candidate

import torch
import triton
import triton.language as tl


@triton.jit
def _scribble(out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(out_ptr + offs + (1 << 40), tl.zeros((BLOCK,), dtype=tl.float32))


def kernel(a, b):
    out = a @ b
    _scribble[(1,)](out, out.numel(), BLOCK=128)
    return out
