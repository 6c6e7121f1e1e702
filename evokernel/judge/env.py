"""The environment a result was measured in: GPU, driver, CUDA, torch and triton versions.

Read without importing torch (versions come from package metadata, the GPU from
nvidia-smi), so recording it costs milliseconds; `toolchain(device)` names that device's GPU
instead, through torch (the GPU a result was measured on, on a host of several).

>>> {'gpu', 'driver', 'cuda', 'torch', 'triton'} <= set(environment())
True
"""

from __future__ import annotations

import functools
import os
import platform
import shutil
import subprocess
from importlib import metadata
from typing import Any

from evokernel.core.plugins import DISTRIBUTION

__all__ = ["environment", "interpreter_problem", "toolchain"]


def _version(dist: str) -> str | None:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return None


@functools.lru_cache(maxsize=1)
def _gpus() -> tuple[list[str], str | None]:
    exe = shutil.which("nvidia-smi")
    if exe is None:
        return [], None
    try:
        out = subprocess.run(
            [exe, "--query-gpu=name,driver_version", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=10,
            check=True,
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return [], None
    rows = [[c.strip() for c in line.split(",")] for line in out.strip().splitlines() if line.strip()]
    return [r[0] for r in rows], (rows[0][1] if rows and len(rows[0]) > 1 else None)


def toolchain(device: str | None = None) -> dict[str, Any]:
    """What a kernel's speed depends on besides its code: GPU, driver, CUDA, compilers.

    "gpu" is the name of `device`'s GPU ("cuda" or "cuda:N": torch's name for it, which
    follows CUDA_VISIBLE_DEVICES; nvidia-smi's first GPU where torch cannot say), so a result
    records the GPU that ran it; None for "cpu". With no device (the host's environment, read
    without importing torch) it is nvidia-smi's first GPU."""
    gpus, driver = _gpus()
    gpu = gpus[0] if gpus else None
    if device is not None:
        from evokernel.judge.device import gpu_name, is_cuda

        gpu = (gpu_name(device) or gpu) if is_cuda(device) else None
    torch_version = _version("torch")
    cuda = None
    if torch_version and "+cu" in torch_version:
        cuda = torch_version.split("+cu", 1)[1]
    return {
        "gpu": gpu,
        "driver": driver,
        "cuda": cuda,
        "torch": torch_version,
        "triton": _version("triton"),
    }


@functools.lru_cache(maxsize=1)
def interpreter_problem() -> str | None:
    """Why Triton's CPU interpreter cannot run kernels here, or None (see `_interpreter_problem`)."""
    try:
        import inspect

        from triton.runtime import interpreter

        source = inspect.getsource(interpreter)
    except Exception:  # no Triton, or no interpreter module: nothing known to be wrong
        return None
    return _interpreter_problem(_version("numpy"), source, _version("triton"))


def _interpreter_problem(numpy_version: str | None, source: str, triton_version: str | None) -> str | None:
    """Known: Triton's interpreter up to 3.6 converts a one-element array to an int, which
    numpy 2.4 refuses (triton-lang/triton#9171, fixed by #9172): every kernel with a loop
    bound computed in the kernel raises `TypeError: only 0-dimensional arrays can be
    converted to Python scalars` (seen with Triton 3.6 and numpy 2.4).

    >>> old = 'scope.set_attr(tensor, "__index__", lambda self: int(self.handle.data))'
    >>> _interpreter_problem("2.3.5", old, "3.6.0") is None
    True
    >>> _interpreter_problem("2.4.6", old, "3.6.0")[:45]
    "Triton 3.6.0's CPU interpreter cannot run wit"
    >>> _interpreter_problem("2.4.6", old.replace("data)", "data.squeeze())"), "3.9.0") is None
    True
    """
    if not numpy_version:
        return None
    major_minor = tuple(int(x) for x in numpy_version.split(".")[:2] if x.isdigit())
    if major_minor < (2, 4) or "int(self.handle.data))" not in source:  # #9172: int(self.handle.data.squeeze())
        return None
    return (
        f"Triton {triton_version}'s CPU interpreter cannot run with numpy {numpy_version} "
        "(triton-lang/triton#9171: every kernel fails with 'only 0-dimensional arrays can be converted "
        "to Python scalars'): install numpy<2.4, or a Triton with the fix (3.9 has it)"
    )


def environment() -> dict[str, Any]:
    """`toolchain()` plus the host: recorded with every run."""
    gpus, _ = _gpus()
    return {
        **toolchain(),
        "gpus": gpus,
        "evokernel": _version(DISTRIBUTION),  # (the distribution evokernel-search)
        "python": platform.python_version(),
        "platform": platform.platform(),
        "cpu": platform.processor() or platform.machine(),
        "cpus": os.cpu_count(),
        "host": platform.node(),
    }
