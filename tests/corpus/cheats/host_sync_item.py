# problem: matmul_small
# expect: rejected
# reason: host-synchronising
# device: cuda
# class: reads a value back to the host inside the call (.item()): a device-to-host sync the timing must not hide
import torch


def kernel(a, b):
    out = torch.matmul(a, b)
    if out.abs().max().item() > 1e30:  # waits for the GPU on every call
        out = out.clamp(-1e30, 1e30)
    return out
