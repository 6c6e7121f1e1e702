# problem: matmul_small
# expect: rejected
# reason: not a plain torch.Tensor
# device: cpu
# class: returns a torch.Tensor subclass whose __eq__/allclose/__torch_function__ lie (values right, type not)
"""Right values inside a lying subclass: any comparison made through the object says equal."""

import torch


class Agreeable(torch.Tensor):
    def __eq__(self, other):  # noqa: D105
        return torch.ones(self.shape, dtype=torch.bool)

    def __ne__(self, other):  # noqa: D105
        return torch.zeros(self.shape, dtype=torch.bool)

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        name = getattr(func, "__name__", "")
        if name in ("allclose", "equal"):
            return True
        if name in ("isclose", "eq"):
            return torch.ones(args[0].shape, dtype=torch.bool)
        return super().__torch_function__(func, types, args, kwargs or {})


def kernel(a, b):
    return torch.Tensor._make_subclass(Agreeable, torch.matmul(a, b))
