"""Search spaces for kernels evokernel ships: declared as data, a few lines each."""

from .attention import attention_class, attention_space, decode_class, decode_space
from .gemm import (coop_variant, cublas_seed, gemm_class, gemm_seeds, gemm_space, gluon_variant, warp_spec_idle,
                   wave_seeds, without_idle_genes)
from .gemm_fp8 import gemm_fp8_space
from .matmul import matmul_space, tile_class
from .moe import moe_shared_space, moe_space, shared_params, sglang_config

__all__ = ["gemm_space", "gemm_class", "gemm_seeds", "wave_seeds", "cublas_seed", "coop_variant", "gluon_variant", "warp_spec_idle",
           "without_idle_genes", "gemm_fp8_space", "matmul_space", "tile_class", "moe_space", "moe_shared_space", "shared_params", "sglang_config",
           "attention_space", "attention_class", "decode_space", "decode_class"]
