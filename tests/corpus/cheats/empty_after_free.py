# problem: matmul_small
# expect: rejected
# reason: wrong result
# device: cpu
# class: uninitialised memory: right on its first call per shape (that result is then freed), later calls return unwritten torch.empty of that size, hoping for the freed block
"""The first call per shape returns the product; once the harness has copied it out, it is
freed. Every later call returns a fresh, unwritten torch.empty of the same size, with
PyTorch's fill-uninitialised-memory switch turned off: whatever the allocator hands back
(often the block freed earlier, holding an old product) is returned as the answer."""

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
