"""Search spaces for kernels evokernel ships: declared as data, a few lines each.

One folder per kernel family, each with its space (`space.py`: the parameters and the
validity rules), its template(s) (`template*.py`: the kernel and the candidate source a
search evaluates), where it has them its seed heuristics (`seeds.py`), and its problems
(`problems/*.py`, loaded by path):

- `matmul/`: a plain Triton matmul (the shipped H200 landscapes);
- `gemm/`: the Hopper GEMM with a fusable epilogue, its Gluon kernel and its fp8 form;
- `moe/`: the fused MoE, with SGLang's own configs as baselines;
- `attention/`: prefill (a Triton template and a warp-specialised Gluon kernel) and paged decode;
- `rmsnorm/`: a fused RMSNorm (docs/kernel-families.md's guide to adding a family);
- `fused/`: small fused kernels model-level rewrites use (no space of their own).

>>> from evokernel.search_spaces.gemm import gemm_space
>>> gemm_space().name
'gemm_hopper'
"""

from evokernel.search_spaces.attention import (
    attention_class,
    attention_space,
    decode_class,
    decode_space,
    prefill_gluon_class,
    prefill_gluon_space,
)
from evokernel.search_spaces.gemm import (
    coop_variant,
    cublas_seed,
    gemm_class,
    gemm_fp8_space,
    gemm_seeds,
    gemm_space,
    gluon_variant,
    warp_spec_idle,
    wave_seeds,
    without_idle_genes,
)
from evokernel.search_spaces.matmul import matmul_space, tile_class
from evokernel.search_spaces.moe import moe_shared_space, moe_space, shared_params, sglang_config

__all__ = [
    "gemm_space",
    "gemm_class",
    "gemm_seeds",
    "wave_seeds",
    "cublas_seed",
    "coop_variant",
    "gluon_variant",
    "warp_spec_idle",
    "without_idle_genes",
    "gemm_fp8_space",
    "matmul_space",
    "tile_class",
    "moe_space",
    "moe_shared_space",
    "shared_params",
    "sglang_config",
    "attention_space",
    "attention_class",
    "prefill_gluon_space",
    "prefill_gluon_class",
    "decode_space",
    "decode_class",
]
