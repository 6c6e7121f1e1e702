"""The environment a result was measured in: GPU, driver, CUDA, torch and triton versions.

Read without importing torch (versions come from package metadata, the GPU from
nvidia-smi), so recording it costs milliseconds.

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

__all__ = ["environment", "toolchain"]


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
            capture_output=True, text=True, timeout=10, check=True,
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return [], None
    rows = [[c.strip() for c in line.split(",")] for line in out.strip().splitlines() if line.strip()]
    return [r[0] for r in rows], (rows[0][1] if rows and len(rows[0]) > 1 else None)


def toolchain() -> dict[str, Any]:
    """What a kernel's speed depends on besides its code: GPU, driver, CUDA, compilers."""
    gpus, driver = _gpus()
    torch_version = _version("torch")
    cuda = None
    if torch_version and "+cu" in torch_version:
        cuda = torch_version.split("+cu", 1)[1]
    return {
        "gpu": gpus[0] if gpus else None,
        "driver": driver,
        "cuda": cuda,
        "torch": torch_version,
        "triton": _version("triton"),
    }


def environment() -> dict[str, Any]:
    """`toolchain()` plus the host: recorded with every run."""
    gpus, _ = _gpus()
    return {
        **toolchain(),
        "gpus": gpus,
        "evokernel": _version("evokernel"),
        "python": platform.python_version(),
        "platform": platform.platform(),
        "cpu": platform.processor() or platform.machine(),
        "cpus": os.cpu_count(),
        "host": platform.node(),
    }
