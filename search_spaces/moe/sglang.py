"""The fused-MoE configs SGLang would run, as baselines for a search.

Two baselines, for a model's E experts, expert intermediate size N and batch size M:

- `default_config`: what SGLang uses when it has no tuned file for the shape (its
  `get_default_config` for bf16/fp16, written here from its behaviour in SGLang 0.5.17):
  16x32x64 tiles, GROUP_SIZE_M 1 when M <= E, else 64x64x32 tiles with GROUP_SIZE_M 8; it sets
  neither num_warps nor num_stages, so Triton's defaults apply (4 warps, 3 stages).
- `shipped_config`: the config SGLang 0.5.17 ships for this GPU, E and N, at the batch size
  nearest M (its lookup rule), from the newest Triton version folder that has the file
  (its fallback rule). The files are data copied from the sglang 0.5.17 wheel (Apache-2.0)
  into `sglang_configs/`: the H200 bf16 files for Qwen3-30B-A3B (E=128, N=768) and
  Mixtral-8x7B (E=8, N=14336).

Both return one config in the template's keys, used for the up and the down GEMM (SGLang
ships no down-projection file for these shapes and reuses the up config). Their fp8 w8a8
forms, `default_fp8_config` and `shipped_fp8_config`, do the same for fp8 experts, per
tensor or with 128x128 block scales.

>>> default_config(M=64, E=128)
{'BLOCK_SIZE_M': 16, 'BLOCK_SIZE_N': 32, 'BLOCK_SIZE_K': 64, 'GROUP_SIZE_M': 1, 'num_warps': 4, 'num_stages': 3}
>>> shipped_config(E=128, N=768, M=60, device_name="NVIDIA H200")["BLOCK_SIZE_N"]
256
>>> shipped_config(E=32, N=2048, M=64, device_name="NVIDIA H200") is None
True
"""

from __future__ import annotations

import json
from functools import lru_cache
from pathlib import Path

__all__ = [
    "default_config",
    "shipped_config",
    "shipped_elsewhere",
    "shipped_file",
    "default_fp8_config",
    "shipped_fp8_config",
    "CONFIG_DIR",
]

CONFIG_DIR = Path(__file__).resolve().parent / "sglang_configs"
_KEYS = ("BLOCK_SIZE_M", "BLOCK_SIZE_N", "BLOCK_SIZE_K", "GROUP_SIZE_M", "num_warps", "num_stages")
_TRITON_DEFAULTS = {"num_warps": 4, "num_stages": 3}


def default_config(M: int, E: int) -> dict[str, int]:
    """SGLang's fallback config for a bf16/fp16 fused MoE without a tuned file."""
    if M <= E:
        cfg = {"BLOCK_SIZE_M": 16, "BLOCK_SIZE_N": 32, "BLOCK_SIZE_K": 64, "GROUP_SIZE_M": 1}
    else:
        cfg = {"BLOCK_SIZE_M": 64, "BLOCK_SIZE_N": 64, "BLOCK_SIZE_K": 32, "GROUP_SIZE_M": 8}
    return {k: cfg.get(k, _TRITON_DEFAULTS.get(k)) for k in _KEYS}  # type: ignore[misc]


def _file_name(E: int | str, N: int | str, device_name: str) -> str:
    """SGLang's name for a bf16 config file (E and N may be glob patterns)."""
    return f"E={E},N={N},device_name={device_name.replace(' ', '_')}.json"


def shipped_file(E: int, N: int, device_name: str) -> Path | None:
    """The shipped file SGLang's loader would read for this shape and GPU (bf16), newest
    Triton version folder first, or None."""
    return _newest(_file_name(E, N, device_name))


def _newest(name: str) -> Path | None:
    """The file of this name in the newest Triton version folder that has it (SGLang's
    loader's fallback rule), or None."""
    folders = sorted(
        (p for p in CONFIG_DIR.glob("triton_*") if p.is_dir()),
        key=lambda p: tuple(int(x) for x in p.name.removeprefix("triton_").split("_")),
        reverse=True,
    )
    for folder in folders:
        if (folder / name).is_file():
            return folder / name
    return None


@lru_cache(maxsize=None)
def _table(path: str) -> dict[int, dict[str, int]]:
    data = json.loads(Path(path).read_text())
    return {int(m): {k: int(v[k]) if k in v else _TRITON_DEFAULTS[k] for k in _KEYS} for m, v in data.items()}


def shipped_elsewhere(E: int, N: int, M: int, device_name: str) -> list[dict[str, int]]:
    """The configs SGLang ships for this GPU for *other* (E, N) shapes, each at the batch size
    nearest M: starting points for a shape it ships nothing for (the DeepSeek-V3-like E=32,
    N=2048: its searches at budget 8 from SGLang's default alone kept the default's 64x64x32
    tiles at M >= 256, where the shipped files hold 64-128 x 128-256 tiles).

    >>> [(c["BLOCK_SIZE_M"], c["BLOCK_SIZE_N"]) for c in shipped_elsewhere(32, 2048, 256, "NVIDIA H200")]
    [(32, 256), (128, 256)]
    """
    out: list[dict[str, int]] = []
    for path in sorted({p.name for p in CONFIG_DIR.glob(f"triton_*/{_file_name('*', '*', device_name)}")}):
        e, n = (int(part.split("=")[1]) for part in path.split(",")[:2])
        if (e, n) != (E, N):
            cfg = shipped_config(e, n, M, device_name)
            if cfg is not None and cfg not in out:
                out.append(cfg)
    return out


def shipped_config(E: int, N: int, M: int, device_name: str) -> dict[str, int] | None:
    """SGLang's shipped config at the batch size nearest M, or None where it ships none."""
    path = shipped_file(E, N, device_name)
    if path is None:
        return None
    table = _table(str(path))
    return dict(table[min(table, key=lambda m: abs(m - M))])


def default_fp8_config(M: int, E: int, block: bool) -> dict[str, int]:
    """SGLang 0.5.17's fallback config for an fp8 w8a8 fused MoE without a tuned file (its
    `get_default_config` for `fp8_w8a8`), on a GPU with >= 128 KiB of shared memory per block
    (the H200): with 128x128 block scales (`block`) 64x128x128 tiles (BLOCK_SIZE_N and
    BLOCK_SIZE_K the block), GROUP_SIZE_M 32, 4 warps, 3 stages; per tensor 128x256x128 g32
    w8 s4, or 64x128x128 g1 w4 s4 when M <= E.

    >>> default_fp8_config(M=16, E=32, block=False)
    {'BLOCK_SIZE_M': 64, 'BLOCK_SIZE_N': 128, 'BLOCK_SIZE_K': 128, 'GROUP_SIZE_M': 1, 'num_warps': 4, 'num_stages': 4}
    """
    if block:
        cfg = (64, 128, 128, 32, 4, 3)
    elif M <= E:
        cfg = (64, 128, 128, 1, 4, 4)
    else:
        cfg = (128, 256, 128, 32, 8, 4)
    return dict(zip(_KEYS, cfg))


def shipped_fp8_config(E: int, N: int, M: int, device_name: str, block: bool) -> dict[str, int] | None:
    """The vendored SGLang fp8 w8a8 config for this GPU, E and N (`...,dtype=fp8_w8a8[,
    block_shape=[128, 128]].json`) at the batch size nearest M, newest Triton folder first
    (as SGLang's loader), or None where no such file is vendored (the vendored files in
    `sglang_configs/` are bf16 only: None for every shape today).

    >>> shipped_fp8_config(E=128, N=768, M=64, device_name="NVIDIA H200", block=True) is None
    True
    """
    name = (
        f"E={E},N={N},device_name={device_name.replace(' ', '_')},dtype=fp8_w8a8"
        + (",block_shape=[128, 128]" if block else "")
        + ".json"
    )
    path = _newest(name)
    if path is None:
        return None
    table = {int(m): v for m, v in json.loads(path.read_text()).items()}
    got = table[min(table, key=lambda m: abs(m - M))]
    return {k: int(got.get(k, _TRITON_DEFAULTS.get(k, 0))) for k in _KEYS}
