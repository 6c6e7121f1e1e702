"""Peak rates of the GPUs evokernel knows, for roofline figures and the impossibility floor.

Two sets per GPU: `measured` ceilings (what a large cuBLAS matmul and a device copy
reach; used for "% of roofline") and datasheet `limit`s (what no kernel can beat; a time
below the floor they give is rejected as impossible).

>>> h200 = PEAKS["NVIDIA H200"]
>>> h200.flops("bfloat16") < h200.limit_flops("bfloat16")
True
"""

from __future__ import annotations

import msgspec

__all__ = ["Peaks", "PEAKS", "peaks_for"]


class Peaks(msgspec.Struct, frozen=True, kw_only=True):
    name: str
    matmul: dict[str, float]  # measured FLOP/s per input dtype
    limit_matmul: dict[str, float]  # datasheet dense FLOP/s per input dtype
    bytes: float  # measured device copy, bytes read + written per second
    limit_bytes: float  # datasheet memory bandwidth

    def flops(self, dtype: str) -> float:
        return self.matmul.get(dtype, max(self.matmul.values()))

    def limit_flops(self, dtype: str) -> float:
        return self.limit_matmul.get(dtype, max(self.limit_matmul.values()))


_HOPPER_LIMITS = {
    "float8_e4m3fn": 1979e12,
    "float8_e5m2": 1979e12,
    "bfloat16": 989e12,
    "float16": 989e12,
    "float32": 494e12,  # tf32 tensor cores: what a Triton fp32 dot uses by default
    "float64": 67e12,
}

PEAKS: dict[str, Peaks] = {
    # measured on this workplace's H200 (2026-10-28/11-04): 8192^3 bf16 matmul 769-798 TFLOP/s,
    # device-to-device copy 4.3 TB/s; other dtypes scaled from bf16 by the datasheet ratios
    "NVIDIA H200": Peaks(
        name="NVIDIA H200",
        matmul={k: v * 790 / 989 for k, v in _HOPPER_LIMITS.items()},
        limit_matmul=_HOPPER_LIMITS,
        bytes=4.3e12,
        limit_bytes=4.8e12,
    ),
    "NVIDIA H100 80GB HBM3": Peaks(
        name="NVIDIA H100 80GB HBM3",
        matmul={k: v * 790 / 989 for k, v in _HOPPER_LIMITS.items()},
        limit_matmul=_HOPPER_LIMITS,
        bytes=3.0e12,
        limit_bytes=3.35e12,
    ),
}


def peaks_for(device: str) -> Peaks | None:
    """The peaks of `device`'s GPU ("cuda": the current one; "cuda:N"), or None on the CPU or
    an unknown GPU."""
    from evokernel.judge.device import gpu_name

    name = gpu_name(device)
    return PEAKS.get(name) if name else None
