# problem: matmul_small
# expect: rejected
# reason: raised: RuntimeError
# device: cpu
# class: allocates an impossible amount of memory (2**62 floats = 16 EiB: refused at once, nothing touched)
import torch


def kernel(a, b):
    scratch = torch.empty(2**62, dtype=torch.float32, device=a.device)
    return (a @ b) + scratch[0]
