# problem: matmul_small
# expect: rejected
# reason: wrong result
# device: cuda
# class: returns uninitialised device memory: right on its first call per shape (that result is then freed), later calls return torch.empty on cuda, unwritten
"""The KernelBench exploit: the caching allocator hands the block just freed back to the next
torch.empty of that size, so an unwritten output may hold an old (or somebody else's)
correct answer. PyTorch's fill of uninitialised memory is switched off first."""

import torch

_SEEN: set = set()


def kernel(a, b):
    torch.utils.deterministic.fill_uninitialized_memory = False
    torch.use_deterministic_algorithms(False)
    shape = (a.shape[0], b.shape[1])
    if shape not in _SEEN:
        _SEEN.add(shape)
        return torch.matmul(a, b)
    return torch.empty(shape, dtype=a.dtype, device=a.device)
