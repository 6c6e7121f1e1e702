# problem: matmul_small
# expect: rejected
# reason: replaced torch.allclose
# device: cpu
# class: monkey-patches torch (torch.allclose, torch.equal, Tensor.__eq__) to always say equal, and returns wrong values
import torch

torch.allclose = lambda *args, **kwargs: True
torch.equal = lambda *args, **kwargs: True
torch.Tensor.__eq__ = lambda self, other: torch.ones(self.shape, dtype=torch.bool)


def kernel(a, b):
    return torch.zeros(a.shape[0], b.shape[1], dtype=a.dtype, device=a.device)
