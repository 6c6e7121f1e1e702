# problem: matmul_small
# expect: rejected
# reason: host-synchronising
# device: cuda
# class: reads shapes back from a device tensor (.tolist(), as the old SDPA baseline read sequence lengths): a host sync inside the call
import torch


def kernel(a, b):
    m, n = torch.tensor([a.shape[0], b.shape[1]], device=a.device).tolist()
    return torch.matmul(a, b)[:m, :n]
