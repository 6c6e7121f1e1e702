"""Which device a judge, an evaluator or a command runs on: "cpu", "cuda" or "cuda:N".

"cuda" is the current CUDA device (index 0 unless the process chose another with
`torch.cuda.set_device`); "cuda:N" is torch's N-th visible GPU (CUDA_VISIBLE_DEVICES
applies). Reading a device string needs no torch (`parse_device`, `is_cuda`,
`device_kind`); checking it against the GPUs there are (`check_device`) and naming its
index or GPU (`cuda_index`, `gpu_name`) ask torch.

>>> parse_device("cuda:1")
('cuda', 1)
>>> is_cuda("cuda:1"), is_cuda("cuda"), is_cuda("cpu")
(True, True, False)
>>> device_kind("cuda:3")
'cuda'
"""

from __future__ import annotations

import contextlib
import os
import re
from collections.abc import Iterator
from typing import Any

from evokernel.core.errors import ConfigError

__all__ = [
    "check_device",
    "cuda_index",
    "default_device",
    "device_kind",
    "gpu_name",
    "is_cuda",
    "on_device",
    "parse_device",
    "use_device",
]

_DEVICE = re.compile(r"(cpu|cuda)(?::(\d+))?")


def parse_device(device: str) -> tuple[str, int | None]:
    """(kind, index) of a device string: ("cpu", None), ("cuda", None) for the current CUDA
    device, ("cuda", N) for "cuda:N". ConfigError for anything else ("cpu:0" included: the
    CPU is one device here).

    >>> parse_device("cuda")
    ('cuda', None)
    >>> parse_device("gpu")
    Traceback (most recent call last):
    ...
    evokernel.core.errors.ConfigError: device 'gpu': expected cpu, cuda or cuda:N (N = 0, 1, ...)
    """
    m = _DEVICE.fullmatch(device) if isinstance(device, str) else None
    if m is None or (m.group(1) == "cpu" and m.group(2) is not None):
        raise ConfigError(f"device {device!r}: expected cpu, cuda or cuda:N (N = 0, 1, ...)")
    return m.group(1), (int(m.group(2)) if m.group(2) is not None else None)


def is_cuda(device: str | None) -> bool:
    """Whether `device` names a CUDA GPU ("cuda" or "cuda:N"); no torch, no validation."""
    return isinstance(device, str) and (device == "cuda" or device.startswith("cuda:"))


def device_kind(device: str) -> str:
    """The kind of device: "cuda" for any CUDA device, else "cpu". A fingerprint records it
    (results on two GPUs of one model are shareable: the GPU is named, not its index)."""
    return "cuda" if is_cuda(device) else "cpu"


def default_device() -> str:
    """The default device: "cuda" where torch sees a GPU, else "cpu"."""
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


def check_device(device: str, who: str | None = None) -> str:
    """`device`, checked against the GPUs torch sees here; ConfigError (naming `who`, the
    thing that was asked for it) if it is malformed, if it is CUDA and torch sees no GPU, or if
    N in "cuda:N" is not one of them (the message says how many torch sees).

    >>> check_device("cpu")
    'cpu'
    """
    kind, index = parse_device(device)
    if kind == "cpu":
        return device
    import torch

    who = who or f"device={device!r}"
    if not torch.cuda.is_available():
        raise ConfigError(f"needs a CUDA GPU ({who}) and torch sees none here")
    if index is not None:
        count = torch.cuda.device_count()
        if index >= count:
            visible = os.environ.get("CUDA_VISIBLE_DEVICES")
            seen = f"torch sees {count} CUDA GPU{'s' if count != 1 else ''}"
            if count:
                seen += f" (cuda:0{f' to cuda:{count - 1}' if count > 1 else ''})"
            if visible is not None:
                seen += f"; CUDA_VISIBLE_DEVICES={visible!r}"
            raise ConfigError(f"{who}: no such GPU: {seen}")
    return device


def cuda_index(device: str) -> int:
    """The torch index of a CUDA device: N for "cuda:N", the current device for "cuda"."""
    kind, index = parse_device(device)
    if kind != "cuda":
        raise ValueError(f"{device!r} is not a CUDA device")
    if index is not None:
        return index
    import torch

    return int(torch.cuda.current_device())


def gpu_name(device: str) -> str | None:
    """The name of the GPU `device` is (torch's, which follows CUDA_VISIBLE_DEVICES, e.g.
    "NVIDIA H200"), None for the CPU or where torch cannot say."""
    if not is_cuda(device):
        return None
    try:
        import torch

        return str(torch.cuda.get_device_name(cuda_index(device)))
    except Exception:  # no CUDA here, or a driver that cannot answer: the caller falls back
        return None


@contextlib.contextmanager
def on_device(device: str) -> Iterator[Any]:
    """Make `device` the current CUDA device for the block (where torch makes streams, events
    and graphs, and where "cuda" tensors land); nothing for the CPU."""
    if not is_cuda(device):
        yield None
        return
    import torch

    with torch.cuda.device(cuda_index(device)):
        yield None


def use_device(device: str, who: str | None = None) -> str:
    """For a script that works on one device: `device`, checked (`check_device`), and on CUDA
    made the process's current device, so its plain "cuda" tensors, streams, events and graphs
    (and torch.cuda.get_device_name()) are that GPU's."""
    check_device(device, who)
    if is_cuda(device):
        import torch

        torch.cuda.set_device(cuda_index(device))
    return device
