# problem: matmul_small
# expect: rejected
# reason: wrong result
# device: cpu
# class: monkey-patches what the harness does not watch (Tensor.__eq__/__ne__, torch.isclose, torch.testing.assert_close) and returns wrong values
import torch
import torch.testing

torch.Tensor.__eq__ = lambda self, other: torch.ones(self.shape, dtype=torch.bool)
torch.Tensor.__ne__ = lambda self, other: torch.zeros(self.shape, dtype=torch.bool)
torch.isclose = lambda a, b, *args, **kwargs: torch.ones(a.shape, dtype=torch.bool)
torch.testing.assert_close = lambda *args, **kwargs: None


def kernel(a, b):
    return torch.zeros(a.shape[0], b.shape[1], dtype=a.dtype, device=a.device)
